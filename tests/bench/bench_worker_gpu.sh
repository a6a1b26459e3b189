#!/usr/bin/env bash
# The product path on one GPU (part of `make bench-gpu`): `holmes-node worker` in rank-table mode,
# one rank, the trainer driving the CUDA engine with its state on the device, at GPT-2's shapes.
# Prints one line per run, "worker ...", in the form bench_gpu's "holmes ..." lines take, with the
# median step, tokens/s, the per-phase medians, and what crossed PCIe and how often the host
# waited for the GPU per step (the trainer's counters, steps after the first two); then the last
# step's GPU time by part (--profile-step: CUDA events; forward/backward, the bf16 copy, zeroing,
# the norm, AdamW, the masters' rounding, other, idle), to set beside bench_gpu's "one step by
# part".
# Usage: bench_worker_gpu.sh NODE L C NH V B T M STEPS [ENGINE]
set -u
node=${1:?usage: bench_worker_gpu.sh NODE L C NH V B T M STEPS [ENGINE]}
L=$2 C=$3 NH=$4 V=$5 B=$6 T=$7 M=$8 steps=$9 engine=${10:-cuda-bf16}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/holmes-bench-worker.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tests/gpu/carried_libs.bash"
carried_libs "$node" || exit 1
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '{"parallelism": {"tensor": 1, "pipeline": 1, "data": 1}, "workers": [{"host": "127.0.0.1", "port": %d}]}' \
    "$port" >"$tmp/rt.json"
if ! timeout 900 "$node" worker --rank-table "$tmp/rt.json" --rank 0 --data "$repo/examples/data/corpus.txt" \
    --engine "$engine" --device 0 --layers "$L" --channels "$C" --heads "$NH" --vocab "$V" --max-seq "$T" \
    --batch "$B" --seq "$T" --micro-batches "$M" --steps "$steps" --lr 1e-4 \
    --profile-step "$steps" >"$tmp/log" 2>&1; then
    echo "bench_worker_gpu: the worker failed: $(grep -iE 'error|fail' "$tmp/log" | head -3)" >&2
    tail -3 "$tmp/log" >&2
    exit 1
fi
# step N loss X lr .. norm .. TOK tok/s MS ms (pipeline P, grad sync G, optimizer O, param sync S)
#   dp link .. MB/s; device: W host waits, U bytes up, D down
sed -nE 's/^step ([0-9]+) .* ([0-9.]+) ms \(pipeline ([0-9.]+), grad sync ([0-9.]+), optimizer ([0-9.]+), param sync ([0-9.]+)\).*device: ([0-9]+) host waits, ([0-9]+) bytes up, ([0-9]+) down$/\1 \2 \3 \4 \5 \6 \7 \8 \9/p' \
    "$tmp/log" | awk '$1 > 2' >"$tmp/steps"
n=$(wc -l <"$tmp/steps")
[ "$n" -ge 1 ] || { echo "bench_worker_gpu: no step lines after the second" >&2; exit 1; }
med() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
col() { awk -v c="$1" '{print $c}' "$tmp/steps" | med; }
ms=$(col 2); pipe=$(col 3); sync=$(col 4); opt=$(col 5); psync=$(col 6)
waits=$(col 7); up=$(col 8); down=$(col 9)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
want=$((M * B * T * 4 * 2))
awk -v L="$L" -v C="$C" -v NH="$NH" -v V="$V" -v B="$B" -v T="$T" -v M="$M" -v ms="$ms" -v n="$n" \
    -v pipe="$pipe" -v sync="$sync" -v opt="$opt" -v psync="$psync" -v waits="$waits" -v up="$up" \
    -v down="$down" -v want="$want" -v gpu="${gpu:-the GPU}" -v eng="$engine" 'BEGIN {
    printf "worker %s L%d C%d NH%d V%d B%d T%d M%d on %s: median %.1f ms/step (%d steps), %.0f tokens/s; " \
           "pipeline %.1f, grad sync %.1f, optimizer %.1f, param sync %.1f ms; per step %d bytes up, %d down " \
           "(tokens + targets: %d), %d host waits\n", eng, L, C, NH, V, B, T, M, gpu, ms, n,
           M * B * T / (ms / 1e3), pipe, sync, opt, psync, up, down, want, waits }'
prof=$(sed -nE 's/^profile step ([0-9]+): (.*)$/step \1: \2/p' "$tmp/log" | tail -1)
echo "  worker by part on the GPU (CUDA events), ${prof:-no profile line}"
