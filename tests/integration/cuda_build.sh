# The CUDA engine builds (compile and link only; CI has no GPU): `make cuda` for sm_80 + sm_90 in
# fp32 and bf16, the binaries need none of the libraries GPU machines lack, the GPU build's CPU
# reference (OpenBLAS/zlib stand-ins) passes the CPU engine's tests, and without a GPU test_gpu
# stops with a clear message; flash attention's mma.sync kernels, LayerNorm's kernels, the
# optimizer's, the classifier's and the token embedding's backward emulated on the host (g++ only).
# The planner's memory model is held against the engine's count (memory_model.py).
# Skips the nvcc parts when nvcc is missing; runs in one pass (once_per_run).
source "$(dirname "$0")/lib.bash"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
once_per_run cuda_build # it builds into the repository: never beside comm_nccl.sh's build
cd "$REPO" || exit 1
unset MAKEFLAGS MFLAGS MAKELEVEL # a fresh make, whatever -j the caller ran with
log=$(mktemp /tmp/holmes-cuda.XXXXXX)
trap 'rm -f "$log" "$log.fatbin"' EXIT
GB=build/cuda

# Kernels emulated on the host (needs only g++): `make TARGET` must print no FAIL line.
emulated() { # check-name make-target kernels-file
    if make --no-print-directory "$2" >"$log" 2>&1 && ! grep -q '^FAIL' "$log"; then
        pass "$1 ($(grep -c '^PASS' "$log") checks of $3 on the host)"
    else
        fail "$1" "$(grep '^FAIL' "$log" | head -5 | tr '\n' ' ') $(tail -3 "$log" | tr '\n' ' ')"
    fi
}
# the emulator itself: a thread's registers and stack across its switches, barriers, shuffles,
# a deadlock and a read past a buffer reported
emulated cuda.kernel_emu_self emu-self-check kernel_emu.h
# flash attention's mma.sync kernels: against a plain attention, whole sequences and slices,
# every head size
emulated cuda.flash_mma_emulated flash-emu-check flash_mma_kernels.cuh
# LayerNorm's kernels and the column sums: against LayerNorm in double, the finish held to its
# fixed order bit for bit
emulated cuda.layernorm_emulated layernorm-emu-check layernorm_kernels.cuh
# the token embedding's backward: against sums in double, in its documented order bit for bit, a
# frequent token's positions split among the warps
emulated cuda.encoder_emulated encoder-emu-check encoder_kernels.cuh
# the optimizer's: AdamW over spans bit for bit against its formula, the sums of squares in their
# documented order, spans and ranges cut into launches as adamw.cu cuts them
emulated cuda.adamw_emulated adamw-emu-check adamw_kernels.cuh
# the classifier's fused cross-entropy: the loss and the gradient left in place of the logits
# against double, at GPT-2's vocabulary (the row held in registers), padding zero
emulated cuda.classifier_emulated classifier-emu-check classifier_kernels.cuh
if [ ! -x "$NVCC" ]; then
    NVCC=$(command -v nvcc) || { echo "# cuda build: no nvcc, the rest skipped"; exit 0; }
fi

if make --no-print-directory -j2 NVCC="$NVCC" cuda >"$log" 2>&1; then
    pass "cuda.build"
else
    fail "cuda.build" "$(tail -20 "$log")"
fi
if grep -v '^make' "$log" | grep -qi "warning"; then
    fail "cuda.no_warnings" "$(grep -i warning "$log" | head -5)"
else
    pass "cuda.no_warnings"
fi

# every object of the engine that holds device code carries both architectures
for p in fp32 bf16; do
    missing=""; n=0
    for o in $GB/$p/cu/*.o; do
        objcopy -O binary --only-section=.nv_fatbin "$o" "$log.fatbin" 2>/dev/null && [ -s "$log.fatbin" ] || continue
        n=$((n + 1))
        strings -a "$log.fatbin" | grep -q sm_80 && strings -a "$log.fatbin" | grep -q sm_90 || missing="$missing $o"
    done
    if [ "$n" -gt 0 ] && [ -z "$missing" ]; then
        pass "cuda.archs.$p (sm_80 + sm_90 in $n objects)"
    else
        fail "cuda.archs.$p" "no sm_80 and sm_90 code in${missing:- any object of $GB/$p/cu}"
    fi
done

for b in $GB/fp32/test_gpu $GB/bf16/test_gpu $GB/bf16/bench_gpu; do
    libs=$(ldd "$b" 2>/dev/null | awk '{print $1}')
    bad=$(grep -E 'openblas|libz\.|curl|cjson|websockets|ibverbs|yaml' <<<"$libs")
    if [ -x "$b" ] && [ -z "$bad" ] && grep -q cublasLt <<<"$libs"; then
        pass "cuda.self_contained.$(basename "$(dirname "$b")")/$(basename "$b")"
    else
        fail "cuda.self_contained.$b" "links: $(tr '\n' ' ' <<<"$libs")"
    fi
done

# The planner's memory model against the engine's own count of what a stage allocates
# (stage_bytes: gpu_stage_device_bytes, no GPU needed): every stage of seven plans (flash and
# materialised attention, fp32 and bf16, 1F1B with and without a deeper warm-up, GPipe, tensor 2)
if [ -x "$HOLMES_BIN_DIR/holmes-operator" ] && [ -x $GB/fp32/stage_bytes ] && [ -x $GB/bf16/stage_bytes ]; then
    mm=$(mktemp -d /tmp/holmes-memmodel.XXXXXX)
    /usr/bin/python3 "$REPO/tests/integration/memory_model.py" "$HOLMES_BIN_DIR/holmes-operator" \
        $GB/fp32/stage_bytes $GB/bf16/stage_bytes "$mm"
    rm -rf "$mm"
else
    fail "cuda.memory_model" "holmes-operator or stage_bytes not built"
fi
# a micro-batch of more rows than an int counts (65,536 x 65,536): refused, not a size computed
# from an overflowed count
if out=$($GB/bf16/stage_bytes 2 64 4 1000 65536 65536 0 2 1 1 2>&1); then
    fail "cuda.stage_rows_refused" "stage_bytes gave $out"
elif grep -q "refused" <<<"$out"; then
    pass "cuda.stage_rows_refused"
else
    fail "cuda.stage_rows_refused" "$out"
fi
# ... and in its lines mode (what memory_model.py uses): each line answered in order, a malformed
# line an error naming it
out=$(printf '4 256 4 1000 128 4 0 2 1 1\n2 64 4 1000 65536 65536 0 2 1 1\n' | $GB/bf16/stage_bytes - 2>&1); rc=$?
bad=$(printf '4 256 4 1000 128 4 0 2 1 1\n4 256 x\n' | $GB/bf16/stage_bytes - 2>&1); brc=$?
if [ $rc -eq 0 ] && [[ $out =~ ^[0-9]+$'\n'refused$ ]] && [ $brc -eq 2 ] && grep -q "line 2: want 10 numbers" <<<"$bad"; then
    pass "cuda.stage_bytes_lines"
else
    fail "cuda.stage_bytes_lines" "rc $rc: $out | rc $brc: $bad"
fi

if make --no-print-directory -j2 gpu-host-check >"$log" 2>&1 && ! grep -q '^FAIL' "$log"; then
    pass "cuda.cpu_reference ($(grep -c '^PASS' "$log") checks of test_gpt and test_checkpoint on the stand-ins)"
else
    fail "cuda.cpu_reference" "$(grep '^FAIL' "$log" | head -5 | tr '\n' ' ')"
fi

# Without a usable GPU the test binary must say so, not crash.
if ! nvidia-smi -L >/dev/null 2>&1; then
    out=$($GB/bf16/test_gpu 2>&1); rc=$?
    if [ $rc -eq 1 ] && grep -q "gpu.device: CUDA:" <<<"$out"; then
        pass "cuda.no_gpu_clear_error"
    else
        fail "cuda.no_gpu_clear_error" "rc $rc: $(head -c 300 <<<"$out")"
    fi
fi

# make gpu-check's phase selection (GPU_CHECK_PHASES, for a second device call): without a GPU
# the one phase chosen runs and fails, every other is listed as skipped, the exit status is 1.
if ! nvidia-smi -L >/dev/null 2>&1; then
    out=$(GPU_CHECK_PHASES='^test_gpu bf16$' GPU_CHECK_BUDGET=60 tests/gpu/gpu_check.sh 2>&1); rc=$?
    nskip=$(grep -c '| skipped (GPU_CHECK_PHASES) |' <<<"$out")
    nrows=$(grep -c '^| [a-z]' <<<"$out")
    [ $rc -eq 1 ] && grep -q '^| test_gpu bf16 | FAILED (exit 1) | 0 / 1 |' <<<"$out" \
        && [ "$nrows" -ge 10 ] && [ "$nskip" = $((nrows - 2)) ] && grep -q 'gpu.device: CUDA:' <<<"$out" \
        && pass "cuda.gpu_check_phases: GPU_CHECK_PHASES ran test_gpu bf16 alone ($nskip phases skipped)" \
        || fail "cuda.gpu_check_phases" "rc $rc, $nskip of $nrows rows skipped: $(tail -15 <<<"$out" | tr '\n' ' ')"
fi

# The CUDA holmes-node (engine seam + comm seam): both CUDA engines and NCCL linked in.
node=$GB/bin/holmes-node
libs=$(ldd "$node" 2>/dev/null | awk '{print $1}')
if [ "$("$node" engines 2>&1 | tr '\n' ' ')" = "cpu cuda-fp32 cuda-bf16 " ] \
   && grep -q libnccl <<<"$libs" && grep -q libcudart <<<"$libs" && grep -q cublasLt <<<"$libs"; then
    pass "cuda.node: build/cuda/bin/holmes-node has the cpu, cuda-fp32 and cuda-bf16 engines and NCCL"
else
    fail "cuda.node: engines and NCCL" "$("$node" engines 2>&1 | tr '\n' ' ') links: $(tr '\n' ' ' <<<"$libs")"
fi
# Its CPU engine trains exactly as the plain binary's (the seam changes nothing on CPUs).
tmpd=$(mktemp -d /tmp/holmes-cuda-node.XXXXXX)
port=$(free_ports 1)
printf '{"parallelism": {"pipeline": 1, "data": 1}, "workers": [{"host": "127.0.0.1", "port": %s}]}' "$port" >"$tmpd/rt.json"
run_rt() { "$1" worker --rank 0 --rank-table "$tmpd/rt.json" --data "$REPO/examples/data/corpus.txt" --steps 3 \
    --layers 4 --channels 64 --heads 4 --seq 32 --batch 4 --micro-batches 2 "${@:2}" 2>&1; }
# (against the release build's binary where there is one: another variant's may round otherwise)
plain=$REPO/bin/holmes-node; [ -x "$plain" ] || plain=$NODE
a=$(run_rt "$node" | grep -o 'step 3 loss [0-9.]*'); b=$(run_rt "$plain" | grep -o 'step 3 loss [0-9.]*')
[ -n "$a" ] && [ "$a" = "$b" ] && pass "cuda.node: its CPU engine trains as bin/holmes-node's ($a)" \
    || fail "cuda.node: its CPU engine trains as bin/holmes-node's" "cuda node '$a', plain '$b'"
# With --engine cuda-*, the trainer reaches the CUDA engine: on a machine without a GPU it
# stops with a clear error instead of training on the CPU.
if ! nvidia-smi -L >/dev/null 2>&1; then
    for p in fp32 bf16; do
        out=$(run_rt "$node" --engine cuda-$p); rc=$?
        [ $rc -eq 1 ] && grep -q "stage 0 (layers 0..4): CUDA: no usable GPU" <<<"$out" && ! grep -q "^step 1" <<<"$out" \
            && pass "cuda.node.no_gpu.$p: --engine cuda-$p without a GPU fails clearly, trains nothing" \
            || fail "cuda.node.no_gpu.$p" "rc $rc: $(tail -3 <<<"$out")"
    done
    # The GPU compute probe runs in a child process: without a GPU the child answers why, the
    # parent goes on (the CPU rate printed once: nothing buffered written twice by the fork)
    out=$("$node" engines --probe 2>&1); rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c '^cpu ' <<<"$out")" = 1 ] && grep -Eq '^cpu [0-9.e+-]+ TFLOPS' <<<"$out" \
        && grep -q '^cuda-bf16 (no rate: compute probe: no CUDA device' <<<"$out" \
        && pass "cuda.node.no_gpu.compute_probe: engines --probe: the probing child says 'no CUDA device', the parent goes on" \
        || fail "cuda.node.no_gpu.compute_probe" "rc $rc: $(tr '\n' ' ' <<<"$out")"
fi
rm -rf "$tmpd"
