"""GPT-2 as transformers computes it (GELU tanh, LayerNorm eps 1e-5, causal attention, the head
tied to wte), in PyTorch, for the integration tests that check Holmes's numbers against an
independent implementation (export.sh, eval.sh). Needs Debian's python3-torch for /usr/bin/python3.

    sd, meta = load_safetensors(path)   # tensors by name (as holmes-node export writes them)
    logits(sd, n_head, tokens)          # [T, V] for a 1-D LongTensor of T tokens
"""
import json
import struct

import torch


def load_safetensors(path):
    """The F32 tensors of a safetensors file by name, and its __metadata__ (or {})."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        lo, hi = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.float32).reshape(t["shape"])
    return out, header.get("__metadata__", {})


def layers(sd):
    return 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))


def logits(sd, n_head, tokens):
    """The logits [T, V] of GPT-2 (weights sd, GPT-2's names, Conv1D weights [in, out])."""
    T = tokens.numel()
    C = sd["wte.weight"].shape[1]
    x = sd["wte.weight"][tokens] + sd["wpe.weight"][:T]
    ln = lambda h, p: torch.nn.functional.layer_norm(h, (C,), sd[p + ".weight"], sd[p + ".bias"], 1e-5)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(layers(sd)):
        p = f"h.{l}."
        h = ln(x, p + "ln_1")
        qkv = h @ sd[p + "attn.c_attn.weight"] + sd[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        heads = lambda t: t.reshape(T, n_head, C // n_head).transpose(0, 1)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-1, -2)) / (C // n_head) ** 0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ sd[p + "attn.c_proj.weight"] + sd[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2")
        h = torch.nn.functional.gelu(h @ sd[p + "mlp.c_fc.weight"] + sd[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ sd[p + "mlp.c_proj.weight"] + sd[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ sd["wte.weight"].t()
