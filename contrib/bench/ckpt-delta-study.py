#!/usr/bin/env python3
"""Bytes a delta save would write under several encodings, measured on a
run's full checkpoints (WHALE_CKPT_DELTA=0, WHALE_CKPT_KEEP=0, a save every
N steps), per tensor kind, as % of the full saves' raw bytes. Every
encoding is exact (bit patterns), byte-shuffled, zstd level 1:
  base     zigzag(new - base) against the last full save (a full every K+1
           saves): what WHALE_CKPT_DELTA=K writes
  prev     zigzag(new - previous save)
  plain    no delta, shuffle + zstd only
  minpp    per tensor the smaller of prev and plain
  xorprev  new XOR previous save
  pred     weights predicted from the saved Adam state, w_prev - a * m/(sqrt(v)+1e-8)
           with m, v of the new save and a fitted per tensor (stored, so a
           restore computes the same float32 prediction), the residual's
           zigzag bit-pattern difference; moments as minpp
usage: ckpt-delta-study.py ROOT [K]   (needs numpy and zstandard)"""
import json, os, sys

try:
    import numpy as np
    import zstandard as zs
except ImportError as e:
    sys.exit("ckpt-delta-study: %s (pip install numpy zstandard)" % e)

root = sys.argv[1]
K = int(sys.argv[2]) if len(sys.argv) > 2 else 4
steps = sorted(d for d in os.listdir(root) if d.startswith("step-"))


def load(d):
    m = json.load(open(os.path.join(root, d, "manifest.json")))
    out = {}
    for name, t in m["tensors"].items():
        parts = []
        for c in t["chunks"]:
            if c.get("enc", "raw") != "raw" or c.get("zstd", 0) or "delta_base" in c:
                sys.exit("ckpt-delta-study: %s/%s is not a full exact save" % (d, name))
            with open(os.path.join(root, d, c["file"]), "rb") as f:
                f.seek(c["begin"])
                parts.append(np.frombuffer(f.read(c["nbytes"]), dtype=np.uint32))
        out[name] = (t["kind"], np.concatenate(parts))
    return out


cctx = zs.ZstdCompressor(level=1)


def z(u32):
    b = u32.astype(np.uint32).view(np.uint8).reshape(-1, 4).T.copy()  # byte shuffle
    return len(cctx.compress(b.tobytes()))


def zig(a, b):
    d = (a.astype(np.uint32) - b.astype(np.uint32)).astype(np.uint32)
    return ((d << 1) ^ (0 - (d >> 31)).astype(np.uint32)).astype(np.uint32)


S = [load(d) for d in steps]
kinds = ["param", "moment1", "moment2"]
names = ["full", "base", "prev", "plain", "minpp", "xorprev", "pred"]
tot = {k: {} for k in names}


def add(s, kind, v):
    tot[s][kind] = tot[s].get(kind, 0) + v


for i in range(1, len(S)):
    cur, prev = S[i], S[i - 1]
    base = S[(i // (K + 1)) * (K + 1)]
    full_now = i % (K + 1) == 0
    for name, (kind, a) in cur.items():
        add("full", kind, a.nbytes)
        add("base", kind, a.nbytes if full_now else z(zig(a, base[name][1])))
        sp, pl = z(zig(a, prev[name][1])), z(a)
        add("prev", kind, sp)
        add("plain", kind, pl)
        add("minpp", kind, min(sp, pl))
        add("xorprev", kind, z(a ^ prev[name][1]))
        best = min(sp, pl)
        if kind == "param" and "opt.m." + name in cur:
            w0, w1 = prev[name][1].view(np.float32), a.view(np.float32)
            m = cur["opt.m." + name][1].view(np.float32)
            v = cur["opt.v." + name][1].view(np.float32)
            u = (m / (np.sqrt(v) + np.float32(1e-8))).astype(np.float32)
            den = float(np.dot(u.astype(np.float64), u.astype(np.float64)))
            al = np.float32(-np.dot((w1 - w0).astype(np.float64), u) / den) if den > 0 else 0
            wp = (w0 - np.float32(al) * u).astype(np.float32)
            best = min(best, z(zig(a, wp.view(np.uint32))) + 4)
        add("pred", kind, best)

print("%d saves of %s after the first, a full every %d under 'base'" % (len(S) - 1, root, K + 1))
F = sum(tot["full"].values())
for s in names:
    d = tot[s]
    print("%-8s %6.1f %% of full   " % (s, 100 * sum(d.values()) / F) +
          "  ".join("%s %.1f %%" % (k, 100 * d.get(k, 0) / tot["full"].get(k, 1)) for k in kinds))
