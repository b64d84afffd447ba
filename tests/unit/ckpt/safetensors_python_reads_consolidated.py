#!/usr/bin/env python3
"""The real `safetensors` package reads Whale checkpoints.

1. ckpt_synth saves a synthetic GPT as TP=2 PP=2 DP=2 with ZeRO-3 flat ranges;
   `whale-ckpt verify` passes; `whale-ckpt convert` consolidates it; safetensors
   loads the result and every tensor equals the values recomputed here.
2. Every shard bundle of the step directory opens with safetensors too, and its
   __metadata__ (global shape, offsets, flat range) is enough to reassemble the
   global tensors.
3. A compressed checkpoint (bf16 weights, int8 moments, zstd) consolidates
   within the documented error.
4. A plain safetensors model written here imports with
   `whale-ckpt convert --from-safetensors` and comes back unchanged.
5. A corrupted shard: `whale-ckpt verify` exits 1 naming file and tensor.

usage: safetensors_python_reads_consolidated.py CKPT_SYNTH WHALE_CKPT
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:  # installed by contrib/install-deps.sh (PIP_PACKAGES)
    sys.exit(f"FAIL: {e}: run contrib/install-deps.sh (it pip-installs numpy and safetensors)")

SYNTH, TOOL = sys.argv[1], sys.argv[2]
STEP = 5
U = np.uint64


def mix(x):
    x = x + U(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U(30))) * U(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U(27))) * U(0x94D049BB133111EB)
    return x ^ (x >> U(31))


def name_hash(s):
    h = 1469598103934665603
    for c in s.encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def expected(name, shape, step):
    """synth_value (runtime/tools/ckpt/synth.c) for every element, in numpy."""
    n = int(np.prod(shape, dtype=np.int64))
    idx = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        r = mix(U(name_hash(name)) ^ mix(idx * U(2654435761) ^ (U(step) << U(40))))
    f = np.float32
    g = (((r & U(0xFFFF)).astype(f) + ((r >> U(16)) & U(0xFFFF)).astype(f))
         + ((r >> U(32)) & U(0xFFFF)).astype(f)) + (r >> U(48)).astype(f)
    g = g / f(65536.0) - f(2.0)
    g = g * f(1.7320508)
    if name.startswith("opt.m."):
        v = g * f(1e-3)
    elif name.startswith("opt.v."):
        v = g * g * f(1e-6) + f(1e-12)
    else:
        v = g * f(0.02)
    return v.reshape(shape)


def run(*args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} -> {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def check_consolidated(path, rtol_w, rtol_m, label):
    t = load_file(path)
    names = sorted(t)
    n_params = sum(1 for k in names if not k.startswith("opt."))
    assert n_params == 4 * 12 + 4, (label, n_params)
    assert len(names) == 3 * n_params, (label, len(names))
    for k in names:
        a = t[k]
        assert a.dtype == np.float32, (k, a.dtype)
        e = expected(k, a.shape, STEP)
        if k.startswith("opt.v."):
            # int8 of sqrt(v): error relative to the block's largest sqrt(v)
            err = np.abs(np.sqrt(a) - np.sqrt(e)).max() / np.sqrt(e).max()
            tol = rtol_m
        elif k.startswith("opt.m."):
            err = np.abs(a - e).max() / np.abs(e).max()
            tol = rtol_m
        else:
            err = (np.abs(a - e) / np.maximum(np.abs(e), 1e-30)).max()
            tol = rtol_w
        if not err <= tol:
            sys.exit(f"FAIL [{label}]: {k}: error {err:g} > {tol:g}")
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    assert meta["format"] == "whale-ckpt-consolidated" and meta["step"] == str(STEP), meta
    print(f"ok [{label}]: {len(names)} tensors from {path} match (tol {rtol_w:g}/{rtol_m:g})")


def reassemble_from_shards(stepdir):
    glob_t = {}
    nfiles = 0
    for path in sorted(glob.glob(os.path.join(stepdir, "rank-*", "*.safetensors"))):
        nfiles += 1
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata()
            assert meta["format"] == "whale-ckpt-1"
            for key in f.keys():
                info = json.loads(meta[key])
                assert info["enc"] == "raw" and info["zstd"] == 0, info
                shape = info["shape"]
                g = glob_t.setdefault(key, np.full(shape, np.nan, dtype=np.float32))
                reg = info["region"]
                box = np.ravel_multi_index(
                    np.meshgrid(*[np.arange(o, o + c) for o, c in zip(reg["offsets"], reg["count"])],
                                indexing="ij"), shape).ravel() if shape else np.zeros(1, dtype=np.int64)
                if "flat" in reg:
                    box = box[reg["flat"][0]:reg["flat"][1]]
                data = f.get_tensor(key)
                assert data.size == box.size, (key, data.size, box.size)
                g.reshape(-1)[box] = data.reshape(-1)
    for k, g in glob_t.items():
        if np.isnan(g).any():
            sys.exit(f"FAIL: {k}: shards leave {int(np.isnan(g).sum())} elements uncovered")
        if not np.array_equal(g, expected(k, g.shape, STEP)):
            sys.exit(f"FAIL: {k}: reassembled from shards differs")
    print(f"ok: {nfiles} shard files of {stepdir} read by safetensors, {len(glob_t)} tensors reassembled")


def main():
    tmp = tempfile.mkdtemp(prefix="whale-ckpt-py-")
    try:
        root = os.path.join(tmp, "ckpt")
        run(SYNTH, "save", root, "2", "2", "2", "3", str(STEP))
        run(TOOL, "verify", root)
        out = run(TOOL, "inspect", root, "--tensors").stdout
        assert f"step        {STEP}" in out and "saved by    8 ranks" in out, out
        cons = os.path.join(tmp, "model.safetensors")
        run(TOOL, "convert", root, cons)
        check_consolidated(cons, 0.0, 0.0, "exact, TP2 PP2 DP2 ZeRO-3")
        reassemble_from_shards(os.path.join(root, f"step-{STEP:08d}"))

        root2 = os.path.join(tmp, "ckpt-compressed")
        run(SYNTH, "save", root2, "2", "1", "2", "1", str(STEP), "bf16", "int8", "zstd")
        run(TOOL, "verify", root2)
        cons2 = os.path.join(tmp, "model2.safetensors")
        run(TOOL, "convert", root2, cons2)
        check_consolidated(cons2, 2.0 ** -8, 1.0 / 254 + 1e-6, "bf16 + int8 + zstd")
        # shards of a compressed checkpoint are still safetensors (u8 blobs)
        for path in glob.glob(os.path.join(root2, "step-*", "rank-*", "*.safetensors")):
            with safe_open(path, framework="numpy") as f:
                for key in f.keys():
                    f.get_tensor(key)
        cons3 = os.path.join(tmp, "params-bf16.safetensors")
        run(TOOL, "convert", root, cons3, "--params-only", "--dtype", "bf16")
        with safe_open(cons3, framework="numpy") as f:
            keys = list(f.keys())
        assert keys and not any(k.startswith("opt.") for k in keys)

        # import a plain model, export it again
        plain = {"emb.weight": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
                 "h.0.bias": np.linspace(-1, 1, 5).astype(np.float16),
                 "ids": np.array([1, -2, 1 << 40], dtype=np.int64),
                 "scalar": np.array(2.5, dtype=np.float32),
                 # 2 MiB: a bundle written with O_DIRECT (header padded to 4096)
                 "big.weight": np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)}
        src = os.path.join(tmp, "plain.safetensors")
        save_file(plain, src)
        root3 = os.path.join(tmp, "imported")
        run(TOOL, "convert", "--from-safetensors", src, root3, "--step", "3", "--any-names")
        run(TOOL, "verify", root3)
        back = os.path.join(tmp, "back.safetensors")
        run(TOOL, "convert", root3, back)
        got = load_file(back)
        assert sorted(got) == sorted(plain), sorted(got)
        for k, v in plain.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
            assert np.array_equal(got[k], v), k
        for path in glob.glob(os.path.join(root3, "step-*", "rank-*", "*.safetensors")):
            with safe_open(path, framework="numpy") as f:
                for key in f.keys():
                    if key in plain:
                        assert np.array_equal(f.get_tensor(key), plain[key]), (path, key)
        print("ok: plain safetensors -> whale checkpoint -> safetensors round trip")

        # a corrupted shard is named by verify
        victim = sorted(glob.glob(os.path.join(root, "step-*", "rank-00003", "*.safetensors")))[0]
        with open(victim, "r+b") as f:
            f.seek(-5, os.SEEK_END)
            b = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([b[0] ^ 0xFF]))
        p = run(TOOL, "verify", root, ok=False)
        assert p.returncode == 1, p.returncode
        assert os.path.basename(victim) in p.stderr and "tensor " in p.stderr, p.stderr
        print("ok: corrupted shard named by whale-ckpt verify")
        p = run(TOOL, "bogus", ok=False)
        assert p.returncode == 2
    finally:
        shutil.rmtree(tmp)


main()
