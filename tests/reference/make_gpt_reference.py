#!/usr/bin/python3
"""Writes tests/reference/gpt_tiny.bin: a tiny GPT-2 computed by PyTorch in float64.

Run with Debian's interpreter (apt-get install python3-torch):
    /usr/bin/python3 tests/reference/make_gpt_reference.py tests/reference/gpt_tiny.bin
The C test (tests/unit/test_gpt_reference.c) loads the same initial weights and batch into a
single stage and compares: the loss, the logits, every parameter gradient, and the losses and
parameters over a few AdamW steps (weight decay on matrices only).

File layout, little-endian:
  int32[16]  magic 0x46455248 ("HREF"), version 1, L, C, NH, V, Vp, maxT, B, T, steps, nparams, 0...
  float32[8] lr, beta1, beta2, eps, weight_decay, 0, 0, 0
  int32[B*T] tokens, int32[B*T] targets
  float32[nparams] initial parameters (holmes flat layout, noderuntime/engine/gpt.h)
  float32[B*T*V]   logits of the initial model (the real vocabulary only)
  float32[nparams] gradients of the mean loss at the initial parameters
  float32[steps]   loss before each AdamW step
  float32[nparams] parameters after the steps
"""
import math
import struct
import sys

import torch

L, C, NH, V, VP, MAXT, B, T, STEPS = 2, 16, 2, 61, 128, 16, 2, 8, 3
LR, BETA1, BETA2, EPS, WD = 1e-2, 0.9, 0.95, 1e-8, 0.1

torch.manual_seed(1234)
dt = torch.float64


def rnd(*shape, std=0.02):
    return (torch.randn(*shape, dtype=dt) * std).requires_grad_()


def near_one(n):
    return (1.0 + 0.1 * torch.randn(n, dtype=dt)).requires_grad_()


# Parameters in the holmes layout order; LayerNorm and biases random too so every path is tested.
wte = torch.randn(VP, C, dtype=dt) * 0.1
wte[V:] = 0.0
wte.requires_grad_()
params = [("wte", wte), ("wpe", rnd(MAXT, C, std=0.1))]
for l in range(L):
    params += [
        (f"h{l}.ln_1.weight", near_one(C)), (f"h{l}.ln_1.bias", rnd(C)),
        (f"h{l}.attn.qkv.weight", rnd(3 * C, C, std=0.2)), (f"h{l}.attn.qkv.bias", rnd(3 * C)),
        (f"h{l}.attn.proj.weight", rnd(C, C, std=0.2)), (f"h{l}.attn.proj.bias", rnd(C)),
        (f"h{l}.ln_2.weight", near_one(C)), (f"h{l}.ln_2.bias", rnd(C)),
        (f"h{l}.mlp.fc.weight", rnd(4 * C, C, std=0.2)), (f"h{l}.mlp.fc.bias", rnd(4 * C)),
        (f"h{l}.mlp.proj.weight", rnd(C, 4 * C, std=0.1)), (f"h{l}.mlp.proj.bias", rnd(C)),
    ]
params += [("ln_f.weight", near_one(C)), ("ln_f.bias", rnd(C))]
P = dict(params)

tokens = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))


def ln(x, w, b):
    return torch.nn.functional.layer_norm(x, (C,), w, b, eps=1e-5)


def forward():
    x = P["wte"][tokens] + P["wpe"][:T]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda n: P[f"h{l}.{n}"]
        h = ln(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.qkv.weight").T + p("attn.qkv.bias")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = ln(x, p("ln_2.weight"), p("ln_2.bias"))
        h = torch.nn.functional.gelu(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.proj.weight").T + p("mlp.proj.bias")
    x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = (x @ P["wte"].T)[..., :V]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    return logits, loss


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors]).to(torch.float32)


def f32(t):
    t = t.detach().reshape(-1).to(torch.float32)
    return struct.pack(f"<{t.numel()}f", *t.tolist())


init = flat(P.values())
logits, loss = forward()
loss.backward()
grads = flat(p.grad for p in P.values())

decay = [p for _, p in params if p.dim() >= 2]
no_decay = [p for _, p in params if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                         {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=(BETA1, BETA2), eps=EPS)
losses = []
for _ in range(STEPS):
    opt.zero_grad()
    _, l_ = forward()
    l_.backward()
    opt.step()
    losses.append(l_.item())
final = flat(P.values())

nparams = init.numel()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<16i", 0x46455248, 1, L, C, NH, V, VP, MAXT, B, T, STEPS, nparams,
                        0, 0, 0, 0))
    f.write(struct.pack("<8f", LR, BETA1, BETA2, EPS, WD, 0, 0, 0))
    f.write(struct.pack(f"<{B * T}i", *tokens.reshape(-1).tolist()))
    f.write(struct.pack(f"<{B * T}i", *targets.reshape(-1).tolist()))
    f.write(f32(init))
    f.write(f32(logits))
    f.write(f32(grads))
    f.write(struct.pack(f"<{STEPS}f", *losses))
    f.write(f32(final))
print(f"wrote {sys.argv[1]}: {nparams} parameters, loss {loss.item():.6f}, "
      f"losses {', '.join(f'{x:.6f}' for x in losses)}")
