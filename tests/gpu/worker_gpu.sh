#!/usr/bin/env bash
# The worker path on a GPU (part of `make test-gpu`): holmes-node worker in rank-table mode, the
# trainer driving the CUDA engine through the engine seam.
#   1. one rank, CUDA fp32 = the CPU engine within tolerance (losses of 20 steps);
#   2. two ranks on one GPU as a 2-stage pipeline (activations over TCP) = the same; and with
#      TeraPipe token slices (5, 17, 42 of 64 tokens, rank table "token_slices", as
#      tests/integration/terapipe.sh) = the unsliced 2-stage run within 1e-4;
#   3. two ranks on one GPU as a tensor group of 2 (Megatron-LM; the group's sums over TCP, as
#      the rank table plans no NCCL network) = the CPU engine's tensor group of 2;
#   4. bf16: the loss curve of 200 steps within 1 % of fp32's (mean over the last 50 steps).
# Usage: worker_gpu.sh NODE_BIN [GPU_ENGINE_FP32 GPU_ENGINE_BF16]; the engines default to
# cuda-fp32 and cuda-bf16 (`cpu cpu` runs the script's own logic on a machine without a GPU).
set -u
node=${1:?usage: worker_gpu.sh NODE_BIN [FP32_ENGINE BF16_ENGINE]}
e32=${2:-cuda-fp32}
e16=${3:-cuda-bf16}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/holmes-gpu-worker.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
# Carried from a build machine (make gpu-carry): the Debian libraries it needs, unpacked here.
dir=$(cd "$(dirname "$node")" && pwd)
if ldd "$node" 2>/dev/null | grep -q 'not found' && [ -d "$dir/debs" ]; then
    [ -d "$dir/root" ] || for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$dir/root" || exit 1; done
    export LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu:$dir/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
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

table() { # name stages [tensor [slices]] -> $tmp/rt.name.json, a rank table on 127.0.0.1
    local name=$1 p=$2 t=${3:-1} sl=${4:-} w="" i
    for ((i = 0; i < p * t; i++)); do
        w="$w${w:+, }{\"host\": \"127.0.0.1\", \"port\": $((base + i))}"
    done
    printf '{"parallelism": {"tensor": %d, "pipeline": %d, "data": 1}, %s "workers": [%s]}' "$t" "$p" \
        "${sl:+\"token_slices\": $sl,}" "$w" >"$tmp/rt.$name.json"
    base=$((base + p * t))
}

# name stages steps engine [tensor [slices]] -> $tmp/name.loss (one loss per step, from the last
# rank's log); slices: the rank table's token_slices (boundaries, JSON)
run() {
    local name=$1 p=$2 steps=$3 engine=$4 t=${5:-1} sl=${6:-} r pids=()
    local n=$((p * t))
    table "$name" "$p" "$t" "$sl"
    for ((r = 0; r < n; r++)); do
        timeout 600 "$node" worker --rank-table "$tmp/rt.$name.json" --rank $r --data "$data" --steps "$steps" \
            --engine "$engine" --device 0 --all-ranks "${model[@]}" >"$tmp/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    sed -nE 's/^step [0-9]+ loss ([0-9.]+).*/\1/p' "$tmp/$name.$((n - 1)).log" >"$tmp/$name.loss"
    [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/$name.loss")" -eq "$steps" ] || {
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
exit $fail
