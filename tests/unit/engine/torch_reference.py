#!/usr/bin/env python3
"""Independent reference for the engine's blocks: PyTorch (float64)
recomputes one forward and backward of a small GPT-2 model and of a small
Llama-style model (RMSNorm, SwiGLU, rotary, grouped-query attention, no
biases, untied head) and of small mixture-of-experts models (written here
from the definitions: top-k routing, capacity dropping in token order,
dropless, softmax and sigmoid gates, renormalisation, shared experts, the
load-balancing and z losses) on the weights and tokens ref_dump used, and
compares the loss, every parameter gradient (relative error, norm-wise per
tensor, below 1e-5) and, for MoE, the aux and z values and the dropped count.

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
    # mixture of experts: dropless and capacity modes, softmax and sigmoid
    # gates, renormalised gates, shared experts, a dense first block
    ("moe gpt, top-2, dropless", GPT2 + " Experts=4 TopK=2 ExpertFFN=40 AuxLoss=0.05 ZLoss=0.01"),
    ("moe gpt, top-2, capacity 1.0", GPT2 + " Experts=4 TopK=2 ExpertFFN=40 CapacityFactor=1.0"),
    ("moe gpt, top-1, capacity 0.5, renorm", GPT2 + " Experts=3 TopK=1 ExpertFFN=24 "
     "CapacityFactor=0.5 GateRenorm=yes AuxLoss=0.1 ZLoss=0"),
    ("moe llama, sigmoid, shared, dense first", LLAMA + " Experts=6 TopK=3 ExpertFFN=16 "
     "SharedExperts=2 MoEFirst=1 Gate=sigmoid GateRenorm=yes CapacityFactor=1.25 AuxLoss=0.02"),
    ("moe llama, softmax top-2, every block", LLAMA + " Experts=4 TopK=2 ExpertFFN=24 "
     "ZLoss=0.005"),
    # routers of zeros: every logit ties, so every token picks experts 0 and 1
    # (lower index first) and capacity keeps the first tokens in token order
    ("moe gpt, tied logits, capacity 1.0 *", GPT2 + " Experts=4 TopK=2 ExpertFFN=40 CapacityFactor=1.0"),
]


def load(path):
    w, g, ints, loss = {}, {}, {}, None
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "loss":
                loss = float(p[1])
                continue
            if p[0] == "moe":
                ints["moe"] = (float(p[1]), float(p[2]), int(p[3]))
                continue
            kind, name, nd = p[0], p[1], int(p[2])
            shape = [int(x) for x in p[3:3 + nd]]
            vals = p[3 + nd:]
            if kind in "ty":
                ints[kind] = torch.tensor([int(x) for x in vals], dtype=torch.long).reshape(shape)
            else:
                t = torch.tensor([float(x) for x in vals], dtype=torch.float64).reshape(shape)
                (w if kind == "w" else g)[name] = t
    return w, g, ints["t"], ints["y"], loss, ints.get("moe")


def desc(text):
    d = dict(kv.split("=") for kv in text.split())
    h, nh = int(d["Hidden"]), int(d["Heads"])
    return {
        "L": int(d["Layers"]), "C": h, "NH": nh, "KV": int(d.get("KVHeads", nh)),
        "mlp": d.get("MLP", "gelu"), "norm": d.get("Norm", "layernorm"),
        "pos": d.get("Position", "learned"), "bias": d.get("Bias", "yes") == "yes",
        "tied": d.get("TiedEmbeddings", "yes") == "yes", "theta": float(d.get("RopeTheta", 10000)),
        "E": int(d.get("Experts", 0)), "K": int(d.get("TopK", 1)),
        "shared": int(d.get("SharedExperts", 0)), "every": int(d.get("MoEEvery", 1)),
        "first": int(d.get("MoEFirst", 0)), "gate": d.get("Gate", "softmax"),
        "renorm": d.get("GateRenorm", "no") == "yes",
        "cf": 0.0 if d.get("CapacityFactor", "dropless") == "dropless" else float(d["CapacityFactor"]),
        "aux": float(d.get("AuxLoss", 0.01)), "z": float(d.get("ZLoss", 0.001)),
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


def ffn(h, P, pre, m):
    if m["mlp"] == "gelu":
        f = F.gelu(lin(h, P, pre + "fc.w", pre + "fc.b", m), approximate="tanh")
    else:
        gate = lin(h, P, pre + "gate.w", pre + "gate.b", m)
        up = lin(h, P, pre + "up.w", pre + "up.b", m)
        act = F.silu(gate) if m["mlp"] == "swiglu" else F.gelu(gate, approximate="tanh")
        f = act * up
    return lin(f, P, pre + "proj.w", pre + "proj.b", m)


def moe(h, P, pre, m, st):
    """Mixture of experts written from the definitions: top-k by logit (ties:
    lower expert index), gates, capacity in token order, experts one token
    group at a time, shared experts; adds the auxiliary losses to st."""
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    N, E, K = B * T, m["E"], m["K"]
    logits = x @ P[pre + "moe.router.w"].T
    p = logits.softmax(-1) if m["gate"] == "softmax" else torch.sigmoid(logits)
    order = torch.sort(-logits.detach(), dim=-1, stable=True).indices[:, :K]
    g = p.gather(1, order)
    if m["renorm"]:
        g = g / g.sum(-1, keepdim=True)
    cap = math.ceil(m["cf"] * N * K / E) if m["cf"] > 0 else N * K
    used, routed, dropped = [0] * E, [0] * E, 0
    rows = [[] for _ in range(E)]  # (token, choice) kept per expert, token order
    for n in range(N):
        for j in range(K):
            e = int(order[n, j])
            routed[e] += 1
            if used[e] < cap:
                used[e] += 1
                rows[e].append((n, j))
            else:
                dropped += 1
    out = torch.zeros_like(x)
    for e in range(E):
        if not rows[e]:
            continue
        tn = torch.tensor([r[0] for r in rows[e]])
        tj = torch.tensor([r[1] for r in rows[e]])
        y = ffn(x[tn], P, pre + "moe.expert.%d." % e, m)
        out = out.index_add(0, tn, g[tn, tj][:, None] * y)
    if m["shared"]:
        out = out + ffn(x, P, pre + "moe.shared.", m)
    q = p if m["gate"] == "softmax" else p / p.sum(-1, keepdim=True)
    f = torch.tensor(routed, dtype=torch.float64) / (N * K)
    aux = E * (f * q.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    st["aux"] += aux.item()
    st["z"] += z.item()
    st["dropped"] += dropped
    st["loss"] = st["loss"] + m["aux"] * aux + m["z"] * z
    return out.reshape(B, T, C)


def forward(P, tok, tgt, m, st=None):
    st = st if st is not None else {"aux": 0.0, "z": 0.0, "dropped": 0, "loss": 0.0}
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
        if m["E"] and i >= m["first"] and (i - m["first"]) % m["every"] == 0:
            x = x + moe(h, P, pre, m, st)
            continue
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
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T)) + st["loss"]


def check(name, text, ref_dump, tmp):
    out = os.path.join(tmp, "dump.txt")
    subprocess.run([ref_dump, text, out] + (["zero-router"] if name.endswith("*") else []), check=True)
    W, G, tok, tgt, loss, mst = load(out)
    m = desc(text)
    P = {k: v.clone().requires_grad_(True) for k, v in W.items()}
    st = {"aux": 0.0, "z": 0.0, "dropped": 0, "loss": 0.0}
    ref = forward(P, tok, tgt, m, st)
    ref.backward()
    worst, bad = abs(loss - ref.item()) / abs(ref.item()), []
    if worst > TOL:
        bad.append("loss %.9g vs torch %.9g" % (loss, ref.item()))
    if m["E"]:
        # the engine's aux and z are means per MoE block forward
        nmoe = sum(1 for i in range(m["L"]) if i >= m["first"] and (i - m["first"]) % m["every"] == 0)
        for key, val in (("aux", mst[0]), ("z", mst[1])):
            want = st[key] / nmoe
            if abs(val - want) > TOL * max(abs(want), 1e-3):
                bad.append("%s %.9g vs torch %.9g" % (key, val, want))
        if mst[2] != st["dropped"]:
            bad.append("dropped %d vs torch %d" % (mst[2], st["dropped"]))
        name += " (dropped %d)" % st["dropped"]
    for k, gw in G.items():
        gt = P[k].grad
        if gt is None:
            if m["E"] and ".moe.expert." in k and gw.abs().max().item() == 0:
                continue  # an expert no token reached: zero gradient on both sides
            bad.append("%s: torch has no gradient (parameter unused)" % k)
            continue
        rel = ((gw - gt).norm() / max(gt.norm().item(), 1e-30)).item()
        worst = max(worst, rel)
        if rel > TOL:
            bad.append("%s: gradient rel err %.2e" % (k, rel))
    print("  %-56s loss %.6f (torch %.6f), %d gradients, worst rel err %.1e%s"
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
