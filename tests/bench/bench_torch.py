#!/usr/bin/python3
"""PyTorch (CPU, fp32) GPT-2 training step for `make bench-cpu`, the same model and step as
bench_gpt: forward + backward + AdamW, B sequences of T tokens, vocab padded to 128.
Usage: /usr/bin/python3 tests/bench/bench_torch.py L C NH V B T steps threads"""
import math
import resource
import sys
import time

import torch
import torch.nn.functional as F

L, C, NH, V, B, T, STEPS, THREADS = (int(x) for x in sys.argv[1:9])
VP = (V + 127) // 128 * 128
torch.set_num_threads(THREADS)
torch.manual_seed(1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.fc_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(VP, C), torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList(Block() for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        for p in self.parameters():  # GPT-2 initialisation, as bench_gpt
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                        weight_decay=0.1)
idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
times = []
for step in range(STEPS + 1):  # step 0 warms up and is not counted
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(idx, tgt)
    loss.backward()
    opt.step()
    if step > 0:
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
med = times[len(times) // 2]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"pytorch {torch.__version__} L{L} C{C} NH{NH} V{V} B{B} T{T} threads {THREADS}: "
      f"median {med:.1f} ms/step (min {times[0]:.1f}, max {times[-1]:.1f}, {STEPS} steps), "
      f"{B * T / (med / 1e3):.0f} tokens/s, peak RSS {rss:.0f} MiB, loss {loss.item():.4f}")
