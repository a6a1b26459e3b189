#!/usr/bin/env bash
# make gpu-check: on a GPU machine, in one command, the build, every GPU test (the engine's first,
# then compute-sanitizer's memcheck and racecheck, the comm layer's, the worker's) and the benchmarks,
# within a time budget (GPU_CHECK_BUDGET seconds, default 480: a device-tool command gets 600).
# Every phase runs even when an earlier one failed (a first run should tell at once what works),
# each under `timeout` for what is left of the budget, and the last lines are one table: each
# phase's result, its checks passed / failed (the PASS / FAIL lines it printed) and its seconds,
# then the benchmarks' summary (tests/bench/gpu_summary.py). The whole log: build/cuda/gpu-check.log.
# GPU_CHECK_PHASES (an extended regular expression): only the phases whose names match run, the
# others are listed as skipped (a second device call, e.g. GPU_CHECK_PHASES='^bench_gpu ' for the
# A/B phases alone on the binaries the first built).
# Usage: tests/gpu/gpu_check.sh [MAKE]   (make's variables come through the environment)
set -u
make_cmd=${1:-make}
cd "$(dirname "$0")/../.." || exit 1
GB=build/cuda
mkdir -p "$GB"
log=$GB/gpu-check.log
budget=${GPU_CHECK_BUDGET:-480}
# bench-gpu's worker runs: the 124M one alone unless GPU_WORKER_RUNS says (the worker matched the
# engine at every shape, 2026-11-27; the four runs took about four minutes of the budget)
export GPU_WORKER_RUNS=${GPU_WORKER_RUNS:-'"12 768 12 50257 16 1024 1 12"'}
node=${HOLMES_GPU_NODE:-$GB/bin/holmes-node}
sanitizer=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/compute-sanitizer 2>/dev/null)
start=$(date +%s)
: >"$log"
rm -f "$GB/bench-gpu.log"
rows=()
fail=0

# phase NAME CAP COMMAND...: runs it for at most CAP seconds and what is left of the budget, its
# output into the log and the terminal (the caps keep a phase that hangs from starving the rest)
phase() {
    local name=$1 cap=$2 t0 t1 rc left out
    shift 2
    if [ -n "${GPU_CHECK_PHASES:-}" ] && ! [[ $name =~ $GPU_CHECK_PHASES ]]; then
        rows+=("| $name | skipped (GPU_CHECK_PHASES) | - | 0 |")
        return
    fi
    t0=$(date +%s)
    left=$((budget - (t0 - start)))
    [ "$left" -gt "$cap" ] && left=$cap
    out=$(mktemp /tmp/holmes-gpu-check.XXXXXX)
    if [ "$left" -le 5 ] && [ "$cap" -gt 5 ]; then
        rows+=("| $name | not run (budget spent) | - | 0 |")
        fail=1
        rm -f "$out"
        return
    fi
    echo "== $name ($(date -u '+%H:%M:%S UTC'), ${left} s of the budget left)" | tee -a "$log"
    timeout --kill-after=10 "$left" "$@" 2>&1 | tee "$out" | tee -a "$log"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s)
    local p f res
    p=$(grep -c '^PASS' "$out")
    f=$(grep -c '^FAIL' "$out")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        res="timed out"
    elif [ "$rc" -eq 0 ] && [ "$f" -eq 0 ]; then
        res="ok"
    else
        res="FAILED (exit $rc)"
    fi
    [ "$res" = ok ] || fail=1
    rows+=("| $name | $res | $p / $f | $((t1 - t0)) |")
    rm -f "$out"
}

# compute-sanitizer's memcheck on the first group of test_gpu (--quick: flash attention at head
# sizes 16 and 64 among it), and its racecheck (shared memory) on a smaller run of the same
# (--race: racecheck slows every kernel many times; --quick took over 90 s under it on an H100)
sanitize='tool=$1; shift
if [ -z "$1" ]; then echo "FAIL gpu.compute_sanitizer.$tool: compute-sanitizer not found"; exit 1; fi
extra=; [ "$tool" = memcheck ] && extra="--leak-check full"
mode=--quick; [ "$tool" = racecheck ] && mode=--race
"$1" --tool "$tool" $extra --error-exitcode 1 "$2" $mode &&
    echo "PASS gpu.compute_sanitizer.$tool" || { echo "FAIL gpu.compute_sanitizer.$tool"; exit 1; }'

{
    echo "== gpu-check: $(date -u '+%F %H:%M UTC'), budget $budget s"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
} 2>&1 | tee -a "$log"
phase "build (make cuda)" 200 "$make_cmd" --no-print-directory -j"$(nproc)" cuda
phase "test_gpu fp32" 90 "$GB/fp32/test_gpu"
phase "test_gpu bf16" 90 "$GB/bf16/test_gpu"
phase "compute-sanitizer memcheck" 120 bash -c "$sanitize" _ memcheck "$sanitizer" "$GB/bf16/test_gpu"
phase "compute-sanitizer racecheck" 120 bash -c "$sanitize" _ racecheck "$sanitizer" "$GB/bf16/test_gpu"
phase "test_comm_dev" 60 build/comm-nccl/test_comm_dev
phase "worker_gpu.sh" 150 tests/gpu/worker_gpu.sh "$node"
phase "bench-gpu" 600 "$make_cmd" --no-print-directory bench-gpu
# flash attention's other dQ kernel (GPU_FLASH_RECOMPUTE_DQ) at 124M: its step and attention table
# beside bench-gpu's, which read the stored dS (the log has both; which one stays the default)
phase "bench_gpu 124M recompute-dq" 60 "$GB/bf16/bench_gpu" 12 768 12 50257 16 1024 20 "${GPU_PEAK:-989}" 8
# the weight gradients' products on a second stream (GPU_OVERLAP_WEIGHT_GRADS) at 1.5B, whose
# C = 1,600-wide products fill their last wave worst: the step beside bench-gpu's
phase "bench_gpu 1.5B overlap-dw" 90 "$GB/bf16/bench_gpu" 48 1600 25 50257 "${GPU_B_1558M:-4}" 1024 10 "${GPU_PEAK:-989}" 16
# LayerNorm's backward holding 1.5B's 1,600-column rows in registers (HOLMES_GPU_LN_BWD_MAX_IT=8,
# one block an SM) instead of re-reading them: the step and the memory-bound table's "ln bwd" row
# beside bench-gpu's
phase "bench_gpu 1.5B ln-bwd-8" 90 env HOLMES_GPU_LN_BWD_MAX_IT=8 "$GB/bf16/bench_gpu" 48 1600 25 50257 "${GPU_B_1558M:-4}" 1024 10 "${GPU_PEAK:-989}" 0

{
    echo
    echo "== gpu-check summary: $(( $(date +%s) - start )) s of a $budget s budget"
    echo "| phase | result | checks passed / failed | seconds |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    [ -s "$GB/bench-gpu.log" ] && python3 tests/bench/gpu_summary.py "$GB/bench-gpu.log"
} 2>&1 | tee -a "$log"
exit $fail
