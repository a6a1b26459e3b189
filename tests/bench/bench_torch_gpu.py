#!/usr/bin/env python3
"""PyTorch on the GPU beside `make bench-gpu`: the same GPT-2 and step as bench_gpu (forward +
backward + global-norm clipping + AdamW, B sequences of T tokens, vocab padded to 128), at
PyTorch's best: bf16 autocast, torch.compile, fused scaled-dot-product (flash) attention, fused
AdamW, TF32 allowed. MFU uses bench_gpu's FLOP count (gpt_stage_flops).
Usage: python3 tests/bench/bench_torch_gpu.py L C NH V B T steps [peak_tflops]
       [--micro-batches M[,M2...]]
(M micro-batches of B sequences a step, gradients accumulated, as bench_gpu's; several M: one
run each after one compilation). Its "pytorch ... L.. C.. NH.. V.. B.. T.. M.. on ..." lines are
what make bench-gpu's summary (tests/bench/gpu_summary.py) reads."""
import math
import sys
import time

import torch
import torch.nn.functional as F

ARGS, MS = [], [1]
_it = iter(sys.argv[1:])
for _a in _it:
    if _a == "--micro-batches":
        MS = [int(x) for x in next(_it).split(",")]
    else:
        ARGS.append(_a)
L, C, NH, V, B, T, STEPS = (int(x) for x in ARGS[0:7])
PEAK = float(ARGS[7]) if len(ARGS) > 7 else 989.0
VP = (V + 127) // 128 * 128
torch.manual_seed(1)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.fc_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(VP, C), torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList(Block() for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :V].float().reshape(-1, V), targets.reshape(-1))


model = GPT().to(dev)
nparams = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                        weight_decay=0.1, fused=True)
cmodel = torch.compile(model)
MMAX = max(MS)
idx = torch.randint(0, V, (MMAX, B, T), device=dev)
tgt = torch.randint(0, V, (MMAX, B, T), device=dev)


def step(M):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for k in range(M):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = cmodel(idx[k], tgt[k]) / M
        loss.backward()
        total = total + loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return total


t0 = time.perf_counter()
for _ in range(3):  # compilation and warm-up, not counted
    step(1)
torch.cuda.synchronize()
compile_s = time.perf_counter() - t0
for M in MS:
    for _ in range(2):
        step(M)
    times = []
    for _ in range(STEPS):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        loss = step(M)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    med = times[len(times) // 2]
    BT = B * T
    flops = M * 3 * (L * (2 * BT * 12 * C * C + 4 * B * (T * (T + 1) / 2) * C) + 2 * BT * C * VP)
    tflops = flops / (med / 1e3) / 1e12
    print(f"pytorch {torch.__version__} bf16-autocast+compile L{L} C{C} NH{NH} V{V} B{B} T{T} M{M} "
          f"on {torch.cuda.get_device_name()}: params {nparams / 1e6:.1f}M, median "
          f"{med:.1f} ms/step (min {times[0]:.1f}, max {times[-1]:.1f}, {STEPS} steps), "
          f"{M * BT / (med / 1e3):.0f} tokens/s, {tflops:.0f} TFLOP/s, MFU {100 * tflops / PEAK:.1f}% "
          f"of {PEAK:.0f}, compile+warm-up {compile_s:.0f} s, peak memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB, loss {loss.item():.4f}", flush=True)
