#!/usr/bin/env python3
"""Bytes a delta save would write under several encodings, measured on a
run's full checkpoints (WHALE_CKPT_DELTA=0, WHALE_CKPT_KEEP=0, a save every
N steps), per tensor kind, as % of the full saves' raw bytes. Every
encoding is exact (bit patterns); unless said otherwise byte-shuffled, zstd
level 1:
  base     zigzag(new - base) against the last full save (a full every K+1
           saves): what WHALE_CKPT_DELTA=K writes
  prev     zigzag(new - previous save)
  plain    no delta, shuffle + zstd only
  minpp    per tensor the smaller of prev and plain
  xorprev  new XOR previous save
  planes   new XOR previous save, each of the 4 byte planes its own zstd
           stream (level 3)
  z19      prev at zstd level 19
  ldm      prev at zstd level 19 with long-range matching (window 2^27)
  dict     the new save's shuffled bytes, zstd level 3 with the previous
           save's shuffled bytes as a raw-content dictionary (patch-from)
  scale    new - float32(c * previous) as bit patterns, c fitted per
           tensor (stored): for Adam's v (decays by beta2^N between saves)
           and m
  pred     weights predicted from the saved Adam state, w_prev - a * m/(sqrt(v)+1e-8)
           with m, v of the new save and a fitted per tensor (stored, so a
           restore computes the same float32 prediction), the residual's
           zigzag bit-pattern difference; moments as minpp
  best     per tensor the smallest of all the above but base
  h0       a bound for any coder of bytes one at a time: the order-0 entropy
           of each byte plane of new XOR previous (not an encoding)
Saves are read one at a time (two or three in memory), so a 124M-parameter
run's saves fit.
usage: ckpt-delta-study.py ROOT [K] [FIRST_STEP [LAST_STEP]]   (needs numpy and zstandard)
  FIRST_STEP, LAST_STEP: only the saves of these steps and those between
  (e.g. after warmup)
  DELTA_STUDY_QUICK=1: leave out z19, ldm and dict (zstd 19 takes minutes
  per save of a 124M model)
  DELTA_STUDY_SAMPLE=N: only the first N elements of each tensor (a
  124M-parameter model on a busy machine)"""
import json, os, sys

try:
    import numpy as np
    import zstandard as zs
except ImportError as e:
    sys.exit("ckpt-delta-study: %s (pip install numpy zstandard)" % e)

root = sys.argv[1]
K = int(sys.argv[2]) if len(sys.argv) > 2 else 4
first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
last = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 62
quick = os.environ.get("DELTA_STUDY_QUICK") == "1"
sample = int(os.environ.get("DELTA_STUDY_SAMPLE", "0"))
steps = sorted(d for d in os.listdir(root) if d.startswith("step-") and first <= int(d[5:]) <= last)


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
        a = np.concatenate(parts)
        out[name] = (t["kind"], a[:sample] if sample else a)
    return out


c1 = zs.ZstdCompressor(level=1)
c3 = zs.ZstdCompressor(level=3)
c19 = zs.ZstdCompressor(level=19)
cldm = zs.ZstdCompressor(compression_params=zs.ZstdCompressionParameters.from_level(
    19, enable_ldm=True, window_log=27))


def shuf(u32):
    return u32.astype(np.uint32).view(np.uint8).reshape(-1, 4).T.copy()  # byte planes


def z(u32, c=c1):
    return len(c.compress(shuf(u32).tobytes()))


def zig(a, b):
    d = (a.astype(np.uint32) - b.astype(np.uint32)).astype(np.uint32)
    return ((d << 1) ^ (0 - (d >> 31)).astype(np.uint32)).astype(np.uint32)


def planes(x):
    return sum(len(c3.compress(p.tobytes())) for p in shuf(x))


def dict_of(prev):
    return zs.ZstdCompressionDict(shuf(prev).tobytes(), dict_type=zs.DICT_TYPE_RAWCONTENT)


def dictz(a, prev):
    c = zs.ZstdCompressor(level=3, dict_data=dict_of(prev))
    return len(c.compress(shuf(a).tobytes()))


def h0(x):
    bits = 0.0
    for p in shuf(x):
        f = np.bincount(p, minlength=256).astype(np.float64) / p.size
        f = f[f > 0]
        bits += -(f * np.log2(f)).sum() * p.size
    return int(bits / 8)


def scaled(a, prev):
    x, y = prev.view(np.float32).astype(np.float64), a.view(np.float32).astype(np.float64)
    den = float(np.dot(x, x))
    c = np.float32(np.dot(x, y) / den) if den > 0 else np.float32(1)
    p = (prev.view(np.float32) * c).astype(np.float32)
    return z(zig(a, p.view(np.uint32))) + 4


names = ["full", "base", "prev", "plain", "minpp", "xorprev", "planes", "z19", "ldm", "dict",
         "scale", "pred", "best", "h0"]
kinds = ["param", "moment1", "moment2"]
tot = {k: {} for k in names}


def add(s, kind, v):
    tot[s][kind] = tot[s].get(kind, 0) + v


if len(steps) < 2:
    sys.exit("ckpt-delta-study: fewer than 2 saves under %s from step %d" % (root, first))
base = prev = load(steps[0])
for i in range(1, len(steps)):
    cur = load(steps[i])
    full_now = i % (K + 1) == 0
    for name, (kind, a) in cur.items():
        p = prev[name][1]
        add("full", kind, a.nbytes)
        add("base", kind, a.nbytes if full_now else z(zig(a, base[name][1])))
        r = {}
        r["prev"], r["plain"] = z(zig(a, p)), z(a)
        r["minpp"] = min(r["prev"], r["plain"])
        r["xorprev"] = z(a ^ p)
        r["planes"] = planes(a ^ p)
        if not quick:
            r["z19"] = z(zig(a, p), c19)
            r["ldm"] = z(zig(a, p), cldm)
            r["dict"] = dictz(a, p)
        r["scale"] = scaled(a, p)
        r["pred"] = r["minpp"]
        if kind == "param" and "opt.m." + name in cur:
            w0, w1 = p.view(np.float32), a.view(np.float32)
            m = cur["opt.m." + name][1].view(np.float32)
            v = cur["opt.v." + name][1].view(np.float32)
            u = (m / (np.sqrt(v) + np.float32(1e-8))).astype(np.float32)
            den = float(np.dot(u.astype(np.float64), u.astype(np.float64)))
            al = np.float32(-np.dot((w1 - w0).astype(np.float64), u) / den) if den > 0 else 0
            wp = (w0 - np.float32(al) * u).astype(np.float32)
            r["pred"] = min(r["pred"], z(zig(a, wp.view(np.uint32))) + 4)
        r["best"] = min(r.values())
        r["h0"] = h0(a ^ p)
        for k, v in r.items():
            add(k, kind, v)
    if full_now:
        base = cur
    prev = cur

print("%d saves of %s from step %s on, after the first; a full every %d under 'base'" %
      (len(steps) - 1, root, steps[0][5:], K + 1))
F = sum(tot["full"].values())
for s in names:
    d = tot[s]
    if not d:
        continue
    print("%-8s %6.1f %% of full   " % (s, 100 * sum(d.values()) / F) +
          "  ".join("%s %.1f %%" % (k, 100 * d.get(k, 0) / tot["full"].get(k, 1)) for k in kinds))
