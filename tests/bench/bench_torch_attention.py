#!/usr/bin/env python3
"""PyTorch's scaled-dot-product attention on the GPU, backend by backend, at the engine's shapes:
one layer's causal attention (bf16, q k v of B x NH x T x HS), forward alone and forward +
backward, median of ITERS timed with CUDA events; and whether the backend's backward is
deterministic (two backward passes on the same inputs bit for bit equal), with and without
torch.use_deterministic_algorithms. The anchor for bench_gpu's attention table (divide its
per-kernel totals by the layers), and the question a cuDNN path in the engine has to answer
first: how fast is cuDNN's fused attention when its backward must be deterministic (the engine's
is, so that resume stays bit-exact)?
Usage: python3 tests/bench/bench_torch_attention.py B NH T HS [B NH T HS ...] [--iters N]
Prints one line per backend, mode and shape ("torch-attention ..."); a backend this PyTorch or
GPU lacks is said so, not an error."""
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, if used

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print(f"torch-attention: no PyTorch for {sys.executable}: skipped")
    sys.exit(0)
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print(f"torch-attention: PyTorch {torch.__version__} has no torch.nn.attention: skipped")
    sys.exit(0)


def parse(argv):
    iters, nums = 20, []
    it = iter(argv)
    for a in it:
        if a == "--iters":
            iters = int(next(it))
        else:
            nums.append(int(a))
    if not nums or len(nums) % 4:
        sys.exit(__doc__)
    return [tuple(nums[i:i + 4]) for i in range(0, len(nums), 4)], iters


def median_ms(fn, iters):
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def measure(backend, shape, iters, deterministic):
    B, NH, T, HS = shape
    torch.use_deterministic_algorithms(deterministic)
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dy = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(True)

    def forward():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step():
        q.grad = k.grad = v.grad = None
        forward().backward(dy)

    try:
        with torch.no_grad():
            forward()
        step()
        first = [x.grad.clone() for x in (q, k, v)]
        step()
        same = all(torch.equal(a, x.grad) for a, x in zip(first, (q, k, v)))
        with torch.no_grad():
            fwd = median_ms(forward, iters)
        both = median_ms(step, iters)
    except RuntimeError as err:
        return None, str(err).strip().splitlines()[0][:160]
    finally:
        torch.use_deterministic_algorithms(False)
    pairs = T * (T + 1) / 2  # the causal pairs: q k^T and p v over them
    tflops = 4.0 * B * NH * pairs * HS / (fwd / 1e3) / 1e12
    return (fwd, both, tflops, same), None


def main():
    shapes, iters = parse(sys.argv[1:])
    if not torch.cuda.is_available():
        print("torch-attention: no CUDA device: skipped")
        return
    backends = [(n, getattr(SDPBackend, n)) for n in
                ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION") if hasattr(SDPBackend, n)]
    dev = torch.cuda.get_device_name()
    for shape in shapes:
        B, NH, T, HS = shape
        for name, backend in backends:
            for deterministic in (False, True):
                r, why = measure(backend, shape, iters, deterministic)
                head = (f"torch-attention {torch.__version__} {name.lower()} "
                        f"{'deterministic' if deterministic else 'default'} B{B} NH{NH} T{T} HS{HS} "
                        f"on {dev}:")
                if r is None:
                    print(f"{head} unavailable: {why}", flush=True)
                    continue
                fwd, both, tflops, same = r
                print(f"{head} forward {fwd:.3f} ms ({tflops:.0f} TFLOP/s on the causal pairs), "
                      f"forward + backward {both:.3f} ms a layer, backward bit-exact on a second "
                      f"run: {'yes' if same else 'no'}", flush=True)


if __name__ == "__main__":
    main()
