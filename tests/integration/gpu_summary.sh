# tests/bench/gpu_summary.py, the last lines of `make bench-gpu` and `make gpu-check`: from the
# lines the benchmarks print (bench_gpu's "holmes ...", bench_worker_gpu.sh's "worker ...",
# bench_torch_gpu.py's "pytorch ..."; these are the H100's of 2026-11-27, trimmed), one row per
# shape and micro-batch count with the ratios the issues set goals for: engine / PyTorch, the
# engine's MFU, worker / engine, the worker's PCIe bytes and host waits. Where the engine ran a
# shape twice, the faster counts. No GPU needed.
source "$(dirname "$0")/lib.bash"
once_per_run gpu_summary
tmp=$(mktemp -d /tmp/holmes-gpu-summary.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/log" <<'LOG'
gemm bf16 8192x8192x8192 on NVIDIA H100 80GB HBM3, 132 SMs, 79 GiB, compute capability 9.0: 780 TFLOP/s (median of the fastest algorithm)
holmes bf16 L12 C768 NH12 V50257 B16 T1024 M1 on NVIDIA H100 80GB HBM3: params 124.5M, attention flash, median 51.7 ms/step (min 51.6, max 52.2, 20 steps), 316759 tokens/s, 253 TFLOP/s, MFU 25.6% of 989, loss 7.8501
  one step by part (CUDA events, which add a little): 52.85 ms on the GPU, 85.34 ms wall
holmes bf16 L12 C768 NH12 V50257 B16 T1024 M1 on NVIDIA H100 80GB HBM3: params 124.5M, attention flash, median 37.3 ms/step (min 35.8, max 40.9, 20 steps), 439796 tokens/s, 351 TFLOP/s, MFU 35.5% of 989, loss 7.8507
holmes bf16 L48 C1600 NH25 V50257 B4 T1024 M1 on NVIDIA H100 80GB HBM3: params 1557.7M, attention flash, median 113.3 ms/step (min 112.2, max 114.4, 10 steps), 36161 tokens/s, 354 TFLOP/s, MFU 35.8% of 989, loss 9.1154
holmes bf16 L48 C1600 NH25 V50257 B4 T1024 M8 on NVIDIA H100 80GB HBM3: params 1557.7M, attention flash, median 792.2 ms/step (min 788.8, max 793.5, 10 steps), 41365 tokens/s, 405 TFLOP/s, MFU 41.0% of 989, loss 10.1551
worker cuda-bf16 L12 C768 NH12 V50257 B16 T1024 M1 on NVIDIA H100 80GB HBM3: median 37.2 ms/step (10 steps), 440430 tokens/s; pipeline 36.9, grad sync 0.0, optimizer 0.3, param sync 0.0 ms; per step 131072 bytes up, 12 down (tokens + targets: 131072), 2 host waits
worker cuda-bf16 L48 C1600 NH25 V50257 B4 T1024 M8 on NVIDIA H100 80GB HBM3: median 791.0 ms/step (2 steps), 41426 tokens/s; pipeline 788.0, grad sync 0.1, optimizer 2.9, param sync 0.0 ms; per step 262144 bytes up, 12 down (tokens + targets: 262144), 2 host waits
pytorch 2.11.0+cu130 bf16-autocast+compile L12 C768 NH12 V50257 B16 T1024 M1 on NVIDIA H100 80GB HBM3: params 124.5M, median 39.2 ms/step (min 37.5, max 41.1, 20 steps), 418326 tokens/s, 334 TFLOP/s, MFU 33.8% of 989, compile+warm-up 33 s, peak memory 8.4 GiB, loss 7.6491
pytorch 2.11.0+cu130 bf16-autocast+compile L48 C1600 NH25 V50257 B4 T1024 M1 on NVIDIA H100 80GB HBM3: params 1557.7M, median 125.6 ms/step (min 121.1, max 126.5, 10 steps), 32622 tokens/s, 320 TFLOP/s, MFU 32.3% of 989, compile+warm-up 89 s, peak memory 32.0 GiB, loss 6.1656
LOG
out=$(python3 "$REPO/tests/bench/gpu_summary.py" "$tmp/log")
row() { printf '%s\n' "$out" | grep -E "^\| $1 \| $2 \| $3 \|"; }
r124=$(row 124M 16 1) r15=$(row 1.5B 4 1) r158=$(row 1.5B 4 8)
# 124M: the faster engine run (37.3 ms: 439796 tokens/s), 439796 / 418326 = 1.05, 440430 / 439796 = 1.00
case "$r124" in
*"| 418326 | 439796 | flash | 1.05x | 35.5 % | 440430 | 1.00x | 131072 / 12 (131072) | 2 |") pass gpu_summary.faster_engine_run_and_ratios ;;
*) fail gpu_summary.faster_engine_run_and_ratios "124M row: ${r124:-none}" ;;
esac
# 1.5B x 1: engine and PyTorch, no worker run (-); x 8: no PyTorch run (-), worker / engine 1.00
case "$r15" in
*"| 32622 | 36161 | flash | 1.11x | 35.8 % | - |"*) pass gpu_summary.missing_worker_shown_as_dash ;;
*) fail gpu_summary.missing_worker_shown_as_dash "1.5B row: ${r15:-none}" ;;
esac
case "$r158" in
*"| - | 41365 | flash | - | 41.0 % | 41426 | 1.00x | 262144 / 12 (262144) | 2 |") pass gpu_summary.micro_batches_apart ;;
*) fail gpu_summary.micro_batches_apart "1.5B x 8 row: ${r158:-none}" ;;
esac
# no benchmark lines: says so and fails
if printf 'nothing here\n' | python3 "$REPO/tests/bench/gpu_summary.py" >"$tmp/none" 2>&1; then
    fail gpu_summary.empty "exit 0 on a log without benchmark lines"
else
    grep -q "no benchmark lines" "$tmp/none" && pass gpu_summary.empty || fail gpu_summary.empty "$(cat "$tmp/none")"
fi
