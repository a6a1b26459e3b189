#!/usr/bin/env bash
# The worker path on a GPU (part of `make test-gpu`): holmes-node worker in rank-table mode, the
# trainer driving the CUDA engine through the engine seam.
#   1. one rank, CUDA fp32 = the CPU engine within tolerance (losses of 20 steps);
#   2. two ranks on one GPU as a 2-stage pipeline (activations over TCP) = the same; and with
#      TeraPipe token slices (5, 17, 42 of 64 tokens, rank table "token_slices", as
#      tests/integration/terapipe.sh) = the unsliced 2-stage run within 1e-4;
#   3. two ranks on one GPU as a tensor group of 2 (Megatron-LM; the group's sums over TCP, as
#      the rank table plans no NCCL network) = the CPU engine's tensor group of 2;
#   3b. training.eval: the held-out loss through the CUDA engine = the CPU engine's;
#   3c. training.maxNonFiniteSteps: a diverging 2-stage run (lr and weight decay at their largest)
#       skips its non-finite steps on both ranks and then fails both, naming the field;
#   4. bf16: the loss curve of 200 steps within 1 % of fp32's (mean over the last 50 steps);
#   5. data-parallel 2 on one GPU (two ranks over TCP: NCCL refuses two ranks of one
#      communicator on one device) = one rank with twice the micro-batches, within 1e-4;
#   6. resume: 10 steps with a checkpoint, then on to 20 = 20 steps straight, bit for bit (the
#      final checkpoints' bytes), with the state on the device throughout; 6b. holmes-node eval
#      of that set through the CUDA engines = the CPU engine's: the held-out loss, and the
#      losses of multiple-choice completions (token slices of one sequence);
#   7. the device-resident step: after the first step, the bytes crossing PCIe per step are the
#      tokens, the targets, the loss and the norm (nothing of the parameters or gradients), and
#      the host waits per step are the same for 2 and 8 micro-batches;
#   8. compute-sanitizer memcheck over 3 steps of the bf16 worker (when the tool is there);
#   9. the GPU memory a worker reports to the coordinator = nvidia-smi's total, within 1 %.
# Usage: worker_gpu.sh NODE_BIN [GPU_ENGINE_FP32 GPU_ENGINE_BF16]; the engines default to
# cuda-fp32 and cuda-bf16 (`cpu cpu` runs the script's own logic on a machine without a GPU).
set -u
node=${1:?usage: worker_gpu.sh NODE_BIN [FP32_ENGINE BF16_ENGINE]}
e32=${2:-cuda-fp32}
e16=${3:-cuda-bf16}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/holmes-gpu-worker.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
source "$repo/tests/gpu/carried_libs.bash"
carried_libs "$node" || exit 1
if ldd "$node" 2>/dev/null | grep 'not found' | grep -v 'libcuda\.so'; then
    echo "FAIL gpu.worker: $node has unresolved libraries (make gpu-carry on a build machine, carry build/gpu-carry)"
    exit 1
fi
fail=0
pass() { echo "PASS $1"; }
failed() { echo "FAIL $1: $2"; fail=1; }
data=$repo/examples/data/corpus.txt
model=(--layers 4 --channels 128 --heads 4 --vocab 256 --max-seq 64 --batch 8 --seq 64 --micro-batches 2 --lr 1e-3)
base=$((20000 + RANDOM % 20000))

table() { # name stages [tensor [slices [data]]] -> $tmp/rt.name.json, a rank table on 127.0.0.1
    local name=$1 p=$2 t=${3:-1} sl=${4:-} d=${5:-1} w="" i
    for ((i = 0; i < p * t * d; i++)); do
        w="$w${w:+, }{\"host\": \"127.0.0.1\", \"port\": $((base + i))}"
    done
    printf '{"parallelism": {"tensor": %d, "pipeline": %d, "data": %d}, %s "workers": [%s]}' "$t" "$p" \
        "$d" "${sl:+\"token_slices\": $sl,}" "$w" >"$tmp/rt.$name.json"
    base=$((base + p * t * d))
}

# name stages steps engine [tensor [slices [data]]] -> $tmp/name.loss (one loss per step, from
# the last rank's log); slices: the rank table's token_slices (boundaries, JSON). Options after
# the model's in $extra (e.g. --micro-batches, --checkpoint-dir); $wrap runs before the node;
# $expect: the steps the run prints when not all of them (a resumed run).
extra=()
wrap=()
run() {
    local name=$1 p=$2 steps=$3 engine=$4 t=${5:-1} sl=${6:-} d=${7:-1} r pids=()
    local n=$((p * t * d))
    table "$name" "$p" "$t" "$sl" "$d"
    for ((r = 0; r < n; r++)); do
        timeout 600 "${wrap[@]}" "$node" worker --rank-table "$tmp/rt.$name.json" --rank $r --data "$data" --steps "$steps" \
            --engine "$engine" --device 0 --all-ranks "${model[@]}" "${extra[@]}" >"$tmp/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    sed -nE 's/^step [0-9]+ loss ([0-9.]+).*/\1/p' "$tmp/$name.$((n - 1)).log" >"$tmp/$name.loss"
    [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/$name.loss")" -eq "${expect:-$steps}" ] || {
        echo "  $name: exit $rc, $(wc -l <"$tmp/$name.loss") steps; $(tail -2 "$tmp/$name.$((n - 1)).log")"; return 1; }
}

maxrel() { # a b -> the largest |a-b|/|b| over the steps
    paste "$1" "$2" | awk '{d = $1 - $2; d = d < 0 ? -d : d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r} END {printf "%.2e", m}'
}

run cpu 1 20 cpu || failed gpu.worker.cpu "the CPU reference did not run"
if run g1 1 20 "$e32"; then
    m=$(maxrel "$tmp/g1.loss" "$tmp/cpu.loss")
    awk -v m="$m" 'BEGIN {exit !(m < 1e-3)}' && pass "gpu.worker.one_rank: $e32 = CPU engine over 20 steps (largest loss difference $m)" \
        || failed gpu.worker.one_rank "largest relative loss difference $m (bound 1e-3)"
else failed gpu.worker.one_rank "did not train"; fi
if run g2 2 20 "$e32"; then
    m=$(maxrel "$tmp/g2.loss" "$tmp/cpu.loss")
    awk -v m="$m" 'BEGIN {exit !(m < 1e-3)}' && pass "gpu.worker.two_stages_one_gpu: 2-stage pipeline on one GPU = CPU engine ($m)" \
        || failed gpu.worker.two_stages_one_gpu "largest relative loss difference $m (bound 1e-3)"
else failed gpu.worker.two_stages_one_gpu "did not train"; fi
if [ -s "$tmp/g2.loss" ] && run g2_sl 2 20 "$e32" 1 '[0, 5, 22, 64]'; then
    m=$(maxrel "$tmp/g2_sl.loss" "$tmp/g2.loss")
    grep -q 'TeraPipe: 3 token slices' "$tmp/g2_sl.1.log" \
        && awk -v m="$m" 'BEGIN {exit !(m < 1e-4)}' && pass "gpu.worker.token_slices: 2-stage pipeline with token slices (5, 17, 42 of 64) = unsliced ($m)" \
        || failed gpu.worker.token_slices "largest relative loss difference $m (bound 1e-4), or the log names no slices: $(grep -m1 TeraPipe "$tmp/g2_sl.1.log")"
else failed gpu.worker.token_slices "did not train (or the unsliced 2-stage run did not)"; fi
# training.eval through the CUDA engine (written 2026-11-28 without a GPU): the held-out loss of
# a 2-stage pipeline after steps 10 and 20 = the CPU engine's
extra=(--eval-data "$data" --eval-every 10 --eval-batches 2)
if run cpu_ev 2 20 cpu && run g_ev 2 20 "$e32"; then
    sed -nE 's/^eval after step [0-9]+: loss ([0-9.]+).*/\1/p' "$tmp/cpu_ev.1.log" >"$tmp/cpu_ev.eval"
    sed -nE 's/^eval after step [0-9]+: loss ([0-9.]+).*/\1/p' "$tmp/g_ev.1.log" >"$tmp/g_ev.eval"
    m=$(maxrel "$tmp/g_ev.eval" "$tmp/cpu_ev.eval")
    [ "$(wc -l <"$tmp/g_ev.eval")" = 2 ] && [ "$(wc -l <"$tmp/cpu_ev.eval")" = 2 ] &&
        awk -v m="$m" 'BEGIN {exit !(m < 1e-3)}' && pass "gpu.worker.eval: $e32's held-out loss after steps 10 and 20 = the CPU engine's ($m)" \
        || failed gpu.worker.eval "held-out losses $(tr '\n' ' ' <"$tmp/g_ev.eval") against $(tr '\n' ' ' <"$tmp/cpu_ev.eval") ($m, bound 1e-3)"
else failed gpu.worker.eval "did not train"; fi
# a diverging run through the CUDA engine (written 2026-11-28 without a GPU): the NaN of a
# gradient norm summed on the device reaches both ranks through the norm's all-reduce; both skip
# the same steps (on the CPU: step 4 alone, training goes on, then 9-11), and the fourth in a row
# fails both naming the field
table div 2
for r in 0 1; do
    timeout 300 "$node" worker --rank-table "$tmp/rt.div.json" --rank $r --data "$data" --steps 200 \
        --engine "$e16" --device 0 --all-ranks "${model[@]}" --lr 10 --weight-decay 10 \
        --lr-schedule constant >"$tmp/div.$r.log" 2>&1 &
done
rcs=""
for p in $(jobs -p); do wait "$p"; rcs="$rcs$?"; done
sk0=$(grep -c "skipped (not finite)" "$tmp/div.0.log"); sk1=$(grep -c "skipped (not finite)" "$tmp/div.1.log")
if [ "$rcs" = 11 ] && [ "$sk0" -ge 3 ] && [ "$sk1" = "$sk0" ] &&
   grep -q "training diverged: step [0-9]*: .*spec.training.maxNonFiniteSteps skips at most 3" "$tmp/div.0.log" &&
   grep -q "training diverged: step [0-9]*: .*spec.training.maxNonFiniteSteps skips at most 3" "$tmp/div.1.log"; then
    pass "gpu.worker.nonfinite: $e16 diverging: $sk0 steps skipped on both ranks, then both fail naming spec.training.maxNonFiniteSteps"
else failed gpu.worker.nonfinite "exits '$rcs', skipped $sk0 and $sk1: $(tail -n 2 "$tmp/div.1.log")"; fi
extra=()
if run cpu_t2 1 20 cpu 2 && run g_t2 1 20 "$e32" 2; then
    m=$(maxrel "$tmp/g_t2.loss" "$tmp/cpu_t2.loss")
    awk -v m="$m" 'BEGIN {exit !(m < 1e-3)}' && pass "gpu.worker.tensor2_one_gpu: tensor 2 on one GPU = the CPU engine's tensor 2 ($m)" \
        || failed gpu.worker.tensor2_one_gpu "largest relative loss difference $m (bound 1e-3)"
else failed gpu.worker.tensor2_one_gpu "did not train"; fi
if run f32 1 200 "$e32" && run b16 1 200 "$e16"; then
    m=$(paste "$tmp/b16.loss" "$tmp/f32.loss" | tail -n 50 | awk '{a += $1; b += $2} END {d = (a - b) / b; printf "%.4f", d < 0 ? -d : d}')
    awk -v m="$m" 'BEGIN {exit !(m < 0.01)}' && pass "gpu.worker.bf16: $e16's loss over the last 50 of 200 steps within 1 % of $e32's (${m})" \
        || failed gpu.worker.bf16 "relative difference $m of the mean loss, last 50 steps (bound 0.01)"
else failed gpu.worker.bf16 "did not train"; fi

# 5. data-parallel 2 (2 micro-batches each) = one rank with 4: the same global batch
extra=(--micro-batches 4)
run dp1 1 20 "$e32" || true
extra=(--micro-batches 2)
if [ -s "$tmp/dp1.loss" ] && run dp2 1 20 "$e32" 1 "" 2; then
    m=$(maxrel "$tmp/dp2.loss" "$tmp/dp1.loss")
    awk -v m="$m" 'BEGIN {exit !(m < 1e-4)}' && pass "gpu.worker.data2_one_gpu: data-parallel 2 on one GPU = one rank with twice the micro-batches ($m)" \
        || failed gpu.worker.data2_one_gpu "largest relative loss difference $m (bound 1e-4)"
else failed gpu.worker.data2_one_gpu "did not train"; fi

# 6. resume, bit for bit: the final checkpoint of 10 + 10 steps = that of 20 straight (a
#    constant learning rate: a run of 10 steps is then the first half of one of 20)
ck() { ls "$1"/*20* 2>/dev/null | head -1; }
extra=(--checkpoint-dir "$tmp/ck-straight" --checkpoint-every 5 --lr-schedule constant)
run straight 1 20 "$e16" || true
extra=(--checkpoint-dir "$tmp/ck-resumed" --checkpoint-every 5 --lr-schedule constant)
if [ -s "$tmp/straight.loss" ] && run first10 1 10 "$e16" && expect=10 run resumed 1 20 "$e16"; then
    a=$(ck "$tmp/ck-straight"); b=$(ck "$tmp/ck-resumed")
    if [ -n "$a" ] && [ -n "$b" ] && cmp -s "$a" "$b" && grep -q 'resumed from the checkpoint of step 10' "$tmp/resumed.0.log"; then
        pass "gpu.worker.resume_exact: 10 steps, checkpoint, 10 more = 20 straight, bit for bit ($e16)"
    else
        failed gpu.worker.resume_exact "final checkpoints differ or the run did not resume at step 10: '$a' '$b'; $(grep -m1 -i resum "$tmp/resumed.0.log")"
    fi
else failed gpu.worker.resume_exact "did not train"; fi
extra=()

# 6b. holmes-node eval through the CUDA engines (written 2026-11-28 without a GPU): the held-out
#     loss of the 20-step set above, 4 batches of 8 x 64, = the CPU engine's (fp32 within 1e-4,
#     bf16 within 2e-2: the bf16 engine's matrix products)
evl() { "$node" eval --checkpoint-dir "$tmp/ck-straight" --data "$data" --batch 8 --batches 4 \
            --engine "$1" --device 0 --json 2>"$tmp/eval.$1.err" | jq -r .data.loss; }
ec=$(evl cpu); e1=$(evl "$e32"); e2=$(evl "$e16")
if [ -n "$ec" ] && [ -n "$e1" ] && [ -n "$e2" ] && [ "$ec" != null ] &&
   awk -v c="$ec" -v a="$e1" -v b="$e2" 'function r(x) { x = (x - c) / c; return x < 0 ? -x : x }
        BEGIN { exit !(r(a) < 1e-4 && r(b) < 2e-2) }'; then
    pass "gpu.worker.eval_command: holmes-node eval --engine $e32 / $e16 = cpu ($e1, $e2, $ec)"
else failed gpu.worker.eval_command "losses cpu '$ec', $e32 '$e1', $e16 '$e2': $(cat "$tmp"/eval.*.err | head -3)"; fi
# and multiple choice through the engines (two token slices a completion): 30 examples of the
# corpus (the real next words among three of its words shuffled), each completion's summed loss
# = the CPU engine's (fp32 within 1e-4, bf16 within 2e-2 of the largest)
python3 - "$data" >"$tmp/mc.jsonl" <<'PY'
import json, random, sys
w = open(sys.argv[1]).read().split()
rng = random.Random(3)
for i in range(30):
    k = rng.randrange(len(w) - 20)
    right = " ".join(w[k + 6:k + 10])
    ends = []
    for _ in range(3):
        x = w[k + 6:k + 10]
        rng.shuffle(x)
        ends.append(" ".join(x))
    ends.insert(i % 4, right)
    print(json.dumps({"ctx": " ".join(w[k:k + 6]), "endings": ends, "label": i % 4}))
PY
for en in cpu "$e32" "$e16"; do
    "$node" eval --checkpoint-dir "$tmp/ck-straight" --choices "$tmp/mc.jsonl" --engine "$en" --device 0 \
        --scores-out "$tmp/mc.$en.jsonl" >/dev/null 2>"$tmp/mc.$en.err"
done
if python3 - "$tmp/mc.cpu.jsonl" "$tmp/mc.$e32.jsonl" "$tmp/mc.$e16.jsonl" <<'PY'
import json, sys
rows = [[json.loads(l) for l in open(f)] for f in sys.argv[1:4]]
assert all(len(r) == 30 for r in rows), [len(r) for r in rows]
def worst(a, b):
    return max(abs(x - y) / abs(y) for ra, rb in zip(a, b) for x, y in zip(ra["sum"], rb["sum"]))
w32, w16 = worst(rows[1], rows[0]), worst(rows[2], rows[0])
print("  multiple choice: %.2e (fp32), %.2e (bf16)" % (w32, w16))
assert w32 < 1e-4 and w16 < 2e-2
PY
then pass "gpu.worker.eval_choices: holmes-node eval --choices through $e32 / $e16 = cpu"
else failed gpu.worker.eval_choices "$(cat "$tmp"/mc.*.err | head -3)"; fi

# 7. the device-resident step: PCIe bytes per step (steps 2..) = tokens + targets + loss + norm;
#    host waits per step independent of the micro-batches
B=8; T=64
per_step() { # log -> "max up bytes, max down bytes, max host waits" over steps 2..
    sed -nE 's/^step ([0-9]+) .*device: ([0-9]+) host waits, ([0-9]+) bytes up, ([0-9]+) down$/\1 \3 \4 \2/p' "$1" |
        awk '$1 > 1 {if ($2 > u) u = $2; if ($3 > d) d = $3; if ($4 > w) w = $4} END {print u + 0, d + 0, w + 0}'
}
extra=(--micro-batches 2)
run m2 1 5 "$e16" || true
extra=(--micro-batches 8)
if [ -s "$tmp/m2.loss" ] && run m8 1 5 "$e16"; then
    read -r u2 d2 w2 < <(per_step "$tmp/m2.0.log")
    read -r u8 d8 w8 < <(per_step "$tmp/m8.0.log")
    want_u=$((8 * B * T * 4 * 2)) # 8 micro-batches of tokens and targets (int32)
    if [ "$e16" = cpu ]; then
        [ "$u8" -eq 0 ] && [ "$d8" -eq 0 ] && pass "gpu.worker.device_resident: (CPU engine: nothing crosses)" \
            || failed gpu.worker.device_resident "the CPU engine moved $u8 / $d8 bytes"
    elif [ "$u8" -eq "$want_u" ] && [ "$d8" -le 64 ] && [ "$w8" -eq "$w2" ] && [ "$w8" -le 4 ]; then
        pass "gpu.worker.device_resident: per step $u8 bytes up (tokens + targets of 8 micro-batches), $d8 down (loss, norm), $w8 host waits (2 micro-batches: $w2)"
    else
        failed gpu.worker.device_resident "per step: $u8 bytes up (want $want_u), $d8 down (want <= 64), host waits $w8 with 8 micro-batches, $w2 with 2 (want equal, <= 4)"
    fi
else failed gpu.worker.device_resident "did not train"; fi
extra=()

# 8. compute-sanitizer over the device-resident worker (bf16, 3 steps)
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ "$e16" = cpu ]; then
    echo "# gpu.worker.memcheck: CPU mode, no sanitizer"
elif [ -n "$san" ]; then
    wrap=("$san" --tool memcheck --leak-check full --error-exitcode 3)
    if run memcheck 1 3 "$e16"; then pass "gpu.worker.memcheck: compute-sanitizer memcheck clean over 3 steps of $e16"
    else failed gpu.worker.memcheck "$(grep -m3 -E 'ERROR SUMMARY|Invalid|leak' "$tmp/memcheck.0.log")"; fi
    wrap=()
else failed gpu.worker.memcheck "compute-sanitizer not found"; fi

# 9. the GPU memory the worker says in hello (coordinator mode; the planner checks plans and
# sizes the 1F1B warm-up by it): read from the GPUs' properties, against nvidia-smi's total; and
# its compute rate
if [ "$e16" = cpu ]; then
    echo "# gpu.worker.gpu_memory: CPU mode, no GPU to read"
else
    HOLMES_SUPERVISED=1 timeout 30 "$node" worker --coordinator ws://127.0.0.1:9 --job j --pod p --worker 0 \
        --connect-timeout 1 >"$tmp/mem.log" 2>&1
    got=$(sed -nE 's/.*GPU memory: ([0-9.]+) GB a GPU \(the smallest of [0-9]+\).*/\1/p' "$tmp/mem.log" | head -1)
    smi=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | head -1)
    if [ -z "$got" ]; then failed gpu.worker.gpu_memory "no GPU memory logged: $(head -c 600 "$tmp/mem.log")"
    elif [ -z "$smi" ]; then pass "gpu.worker.gpu_memory: $got GB a GPU read (nvidia-smi not there to compare)"
    elif awk -v g="$got" -v m="$smi" 'BEGIN {r = g * 1e9 / (m * 1048576); exit !(r > 0.99 && r < 1.01)}'; then
        pass "gpu.worker.gpu_memory: $got GB a GPU read, nvidia-smi says $smi MiB"
    else failed gpu.worker.gpu_memory "read $got GB, nvidia-smi says $smi MiB"; fi
    # and the compute rate it says (the planner's layer split): the engine's bf16 product on each
    # GPU, measured in a child process; any data-centre GPU makes well over 50 TFLOPS of it
    tf=$(sed -nE 's/.*compute: ([0-9.e+]+) TFLOPS bf16 a GPU \(measured.*/\1/p' "$tmp/mem.log" | head -1)
    if [ -n "$tf" ] && awk -v t="$tf" 'BEGIN {exit !(t > 50 && t < 5000)}'; then
        pass "gpu.worker.compute_probe: $tf TFLOPS bf16 a GPU measured for the planner"
    else failed gpu.worker.compute_probe "rate '$tf': $(grep -m2 -i 'compute' "$tmp/mem.log")"; fi
    # and its memory bandwidth (the price of each stage's optimizer step): the engine's own norm
    # and AdamW timed in the probe's child, at the CPU probe's 32 bytes a parameter (written
    # 2026-11-27 without a GPU; the peak read from the device was 3,352 GB/s on an H100, and the
    # 1.5B step's norm and AdamW ran at 2,570 counted so); HBM2e-HBM3e cards: 1,000-8,000 GB/s
    bw=$(sed -nE "s/.*memory: ([0-9.e+]+) GB\/s a GPU \(measured: the engine's norm and AdamW.*/\1/p" "$tmp/mem.log" | head -1)
    if [ -n "$bw" ] && awk -v b="$bw" 'BEGIN {exit !(b > 1000 && b < 10000)}'; then
        pass "gpu.worker.memory_bandwidth: $bw GB/s a GPU measured for the planner"
    else failed gpu.worker.memory_bandwidth "bandwidth '$bw': $(grep -m2 'memory:' "$tmp/mem.log")"; fi
fi
exit $fail
