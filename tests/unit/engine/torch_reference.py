#!/usr/bin/env python3
"""Independent reference for the engine's blocks: PyTorch (float64)
recomputes one forward and backward of a small GPT-2 model and of a small
Llama-style model (RMSNorm, SwiGLU, rotary, grouped-query attention, no
biases, untied head) on the weights and tokens ref_dump used, and compares
the loss and every parameter gradient: relative error (norm-wise per tensor)
below 1e-5.

  torch_reference.py REF_DUMP

Exits 77 (skipped) when PyTorch is not installed (contrib/install-deps.sh
installs Debian's python3-torch)."""
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    # Debian's python3-torch is the system interpreter's; a virtualenv or
    # pyenv python3 in PATH may not see it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("WHALE_TORCH_REEXEC"):
        os.environ["WHALE_TORCH_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIP: PyTorch is not installed (python3-torch); the reference check did not run")
    sys.exit(77)

TOL = 1e-5

GPT2 = "Name=ref-gpt2 Layers=2 Hidden=32 Heads=4 FFN=96 Seq=24 Vocab=64"
LLAMA = ("Name=ref-llama Layers=2 Hidden=32 Heads=4 KVHeads=2 FFN=80 Seq=24 Vocab=64 "
         "MLP=swiglu Norm=rmsnorm Position=rotary RopeTheta=10000 Bias=no TiedEmbeddings=no "
         "Attention=flash")
VARIANTS = [
    ("gpt2 block", GPT2),
    ("gpt2 block, blocked attention", GPT2 + " Attention=flash"),
    ("llama block", LLAMA),
    ("llama block, plain attention, MQA", LLAMA.replace("KVHeads=2", "KVHeads=1")
     .replace("Attention=flash", "Attention=plain")),
    ("geglu, layernorm, rotary, biases", GPT2 + " KVHeads=2 MLP=geglu Position=rotary"),
]


def load(path):
    w, g, ints, loss = {}, {}, {}, None
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "loss":
                loss = float(p[1])
                continue
            kind, name, nd = p[0], p[1], int(p[2])
            shape = [int(x) for x in p[3:3 + nd]]
            vals = p[3 + nd:]
            if kind in "ty":
                ints[kind] = torch.tensor([int(x) for x in vals], dtype=torch.long).reshape(shape)
            else:
                t = torch.tensor([float(x) for x in vals], dtype=torch.float64).reshape(shape)
                (w if kind == "w" else g)[name] = t
    return w, g, ints["t"], ints["y"], loss


def desc(text):
    d = dict(kv.split("=") for kv in text.split())
    h, nh = int(d["Hidden"]), int(d["Heads"])
    return {
        "L": int(d["Layers"]), "C": h, "NH": nh, "KV": int(d.get("KVHeads", nh)),
        "mlp": d.get("MLP", "gelu"), "norm": d.get("Norm", "layernorm"),
        "pos": d.get("Position", "learned"), "bias": d.get("Bias", "yes") == "yes",
        "tied": d.get("TiedEmbeddings", "yes") == "yes", "theta": float(d.get("RopeTheta", 10000)),
    }


def norm(x, P, pre, m):
    if m["norm"] == "rmsnorm":
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * P[pre + ".w"]
    return F.layer_norm(x, (x.shape[-1],), P[pre + ".w"], P[pre + ".b"], 1e-5)


def rope(x, theta):
    # x (B,T,H,hd): pairs (i, i + hd/2) turn by t * theta^(-2i/hd)
    T, hd = x.shape[1], x.shape[3]
    half = hd // 2
    f = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / hd)
    a = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    c, s = torch.cos(a)[None, :, None, :], torch.sin(a)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def lin(x, P, w, b, m):
    y = x @ P[w].T
    return y + P[b] if m["bias"] else y


def forward(P, tok, tgt, m):
    B, T = tok.shape
    C, NH, KV = m["C"], m["NH"], m["KV"]
    hd = C // NH
    x = P["wte"][tok]
    if m["pos"] == "learned":
        x = x + P["wpe"][:T][None]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(m["L"]):
        pre = "h.%d." % i
        h = norm(x, P, pre + "ln1", m)
        if KV == NH:
            W = P[pre + "attn.qkv.w"].reshape(3 * C, C)
            qkv = h @ W.T + (P[pre + "attn.qkv.b"].reshape(3 * C) if m["bias"] else 0)
            q, k, v = qkv.split(C, dim=-1)
        else:
            q = lin(h, P, pre + "attn.q.w", pre + "attn.q.b", m)
            kvw = P[pre + "attn.kv.w"]
            k = h @ kvw[0].T + (P[pre + "attn.kv.b"][0] if m["bias"] else 0)
            v = h @ kvw[1].T + (P[pre + "attn.kv.b"][1] if m["bias"] else 0)
        q = q.reshape(B, T, NH, hd)
        k = k.reshape(B, T, KV, hd)
        v = v.reshape(B, T, KV, hd)
        if m["pos"] == "rotary":
            q, k = rope(q, m["theta"]), rope(k, m["theta"])
        g = NH // KV  # query head j reads key/value head j // g
        k = k.repeat_interleave(g, dim=2)
        v = v.repeat_interleave(g, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, P, pre + "attn.proj.w", pre + "attn.proj.b", m)
        h = norm(x, P, pre + "ln2", m)
        if m["mlp"] == "gelu":
            f = F.gelu(lin(h, P, pre + "mlp.fc.w", pre + "mlp.fc.b", m), approximate="tanh")
        else:
            gate = lin(h, P, pre + "mlp.gate.w", pre + "mlp.gate.b", m)
            up = lin(h, P, pre + "mlp.up.w", pre + "mlp.up.b", m)
            act = F.silu(gate) if m["mlp"] == "swiglu" else F.gelu(gate, approximate="tanh")
            f = act * up
        x = x + lin(f, P, pre + "mlp.proj.w", pre + "mlp.proj.b", m)
    x = norm(x, P, "lnf", m)
    logits = x @ (P["wte"] if m["tied"] else P["lm_head.w"]).T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T))


def check(name, text, ref_dump, tmp):
    out = os.path.join(tmp, "dump.txt")
    subprocess.run([ref_dump, text, out], check=True)
    W, G, tok, tgt, loss = load(out)
    m = desc(text)
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    ref = forward(P, tok, tgt, m)
    ref.backward()
    worst, bad = abs(loss - ref.item()) / abs(ref.item()), []
    if worst > TOL:
        bad.append("loss %.9g vs torch %.9g" % (loss, ref.item()))
    for k, gw in G.items():
        gt = P[k].grad
        if gt is None:
            bad.append("%s: torch has no gradient (parameter unused)" % k)
            continue
        rel = ((gw - gt).norm() / max(gt.norm().item(), 1e-30)).item()
        worst = max(worst, rel)
        if rel > TOL:
            bad.append("%s: gradient rel err %.2e" % (k, rel))
    print("  %-36s loss %.6f (torch %.6f), %d gradients, worst rel err %.1e%s"
          % (name, loss, ref.item(), len(G), worst, "" if not bad else "  FAIL"))
    for b in bad:
        print("    " + b)
    return not bad


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in VARIANTS:
            ok &= check(name, text, sys.argv[1], tmp)
    print("all blocks match PyTorch" if ok else "MISMATCH against PyTorch")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
