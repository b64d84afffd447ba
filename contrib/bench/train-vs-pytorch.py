#!/usr/bin/env python3
"""whale-train vs PyTorch: training tokens/s on the same GPT configuration,
same thread count, measured alternately in the same run.

PyTorch runs at its best CPU settings: OMP_WAIT_POLICY=passive (set before
torch loads libgomp) and torch.set_num_threads(threads); fp32, AdamW, the
same GPT-2 architecture (pre-LN, GELU-tanh MLP, causal attention, tied
output embedding), in each configuration the installed torch has:
  eager     attention written out, AdamW's default path (all torch versions)
  sdpa      scaled_dot_product_attention(is_causal=True), AdamW(fused=True)
            (foreach where fused is missing): torch >= 2.0
  compiled  torch.compile of the sdpa model (its first 3 steps not counted:
            compilation)
--precision bf16 runs whale-train --precision bf16 against each of these
configurations with its forward under torch.autocast("cpu",
dtype=torch.bfloat16) (the AdamW master weights stay fp32 on both sides).
The comparison names the best configuration (by median tokens/s) and uses
it for the ratio; every side's peak RSS is printed beside its speed.
whale-train's tokens/s excludes its first (warm-up) step, and so does
PyTorch's.

  contrib/bench/train-vs-pytorch.py --build build [--shapes small,124m]
      [--reps 3] [--steps 6] [--threads 2] [--torch-python VENV/bin/python]
      [--torch-configs eager,sdpa,compiled] [--precision fp32,bf16]

Debian's python3-torch is 1.13 (eager only); a torch 2 venv for the peer at
its best: python3 -m venv T && T/bin/pip install torch numpy (PyPI's torch
brings its CUDA libraries: several GB, unused here).

Prints per-run figures, then over all steps of all runs the median and the
best step (the machine may be shared: the best step approximates an idle
machine, the median a busy one), tokens per CPU-second (work efficiency, not
throughput: it ignores how well each side keeps all its threads busy), the
whale/PyTorch ratios, and
whale's MFU against the best OpenBLAS sgemm rate whale-train measured in the
same run, and whale's achieved GFLOP/s against OpenBLAS sgemm on the shape's
own GEMMs (every forward and backward product of one step: the rate a
perfect GEMM-bound step would reach; target >= 75 %), measured in a child
process with the same threads and kernels (best of 5 per shape, measured before and
after each whale run, the faster of the two kept).

Both sides use the same OpenBLAS kernels: whale-train and whale-bench switch
OpenBLAS off its generic fallback on CPU models it does not know
(WHALE_BLAS_CORE); PyTorch, on the same libopenblas, gets the family
`whale-bench blas` prints through OPENBLAS_CORETYPE.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = {
    # name: (preset, layers, hidden, heads, vocab, seq, batch)
    "small": ("gpt-small", 4, 256, 4, 256, 128, 8),
    "124m": ("gpt2-124m", 12, 768, 12, 50257, 256, 4),
}

TORCH_CHILD = r'''
import os, sys, time, json, resource
import torch
L, C, H, V, T, B, steps, threads = map(int, sys.argv[1:9])
sys.path.insert(0, sys.argv[9])            # contrib/bench: the shared model
cfg = sys.argv[10]
amp = len(sys.argv) > 11 and sys.argv[11] == "bf16"
from torch_gpt import make_gpt, has_sdpa
torch.set_num_threads(threads)
# whale-train flushes subnormals to zero by default (WHALE_FLUSH_DENORMALS);
# without it torch's 124M steps slow down as AdamW makes subnormal weights
torch.set_flush_denormal(True)
torch.manual_seed(0)
def unavailable(why):
    print(json.dumps({"unavailable": why})); sys.exit(0)
kw = dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
if cfg == "eager":                 # attention written out, AdamW's default (foreach) path
    m, _ = make_gpt(L, C, H, V, T, attn="manual")
    opt = torch.optim.AdamW(m.parameters(), **kw)
    desc = "manual attention, AdamW (default)"
else:                              # sdpa / compiled: what a careful torch 2 user runs
    if not has_sdpa():
        unavailable("torch %s has no scaled_dot_product_attention" % torch.__version__)
    m, _ = make_gpt(L, C, H, V, T, attn="sdpa")
    try:
        opt = torch.optim.AdamW(m.parameters(), fused=True, **kw)
        desc = "SDPA, AdamW(fused=True)"
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(m.parameters(), foreach=True, **kw)
        desc = "SDPA, AdamW(foreach=True)"
    if cfg == "compiled":
        if not hasattr(torch, "compile"):
            unavailable("torch %s has no torch.compile" % torch.__version__)
        m = torch.compile(m)
        desc = "torch.compile, " + desc
    elif cfg != "sdpa":
        unavailable("unknown configuration " + cfg)
if amp:                            # bf16: the forward under CPU autocast, as torch documents it
    class Autocast(torch.nn.Module):
        def __init__(s, inner):
            super().__init__()
            s.inner = inner
        def forward(s, idx, tgt):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return s.inner(idx, tgt)
    m = Autocast(m)
    desc = "autocast(cpu, bfloat16), " + desc
times, cpus = [], []
warm = 3 if cfg == "compiled" else 1   # compilation happens in the first steps
for i in range(steps + warm - 1):
    idx = torch.randint(0, V, (B, T)); tgt = torch.randint(0, V, (B, T))
    c0 = time.process_time()
    t0 = time.perf_counter()
    loss = m(idx, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
run = times[warm:] if len(times) > warm else times
crun = cpus[warm:] if len(cpus) > warm else cpus
print(json.dumps({"step_tokens_per_s": [B * T / t for t in run],
                  "step_tokens_per_cpu_s": [B * T / c for c in crun],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                  "torch": torch.__version__, "desc": desc}))
'''


SGEMM_CHILD = r'''
import ctypes, ctypes.util, json, sys, time
L, C, V, T, B, threads = map(int, sys.argv[1:7])
import glob
cands = glob.glob("/usr/lib/*/openblas-pthread/libopenblas.so.0") + [ctypes.util.find_library("openblas") or "libopenblas.so.0"]
ob = ctypes.CDLL(cands[0])
ob.openblas_set_num_threads(threads)
ob.openblas_get_corename.restype = ctypes.c_char_p
N = B * T
# (M, N, K, transA, transB, count per step): the linear layers' forward
# (x W^T), backward data (dy W) and weight gradient (dy^T x), and the head
lin = [(N, 3 * C, C), (N, C, C), (N, 4 * C, C), (N, C, 4 * C)]
shapes = []
for (m, o, i) in lin:
    shapes += [(m, o, i, 0, 1, L), (m, i, o, 0, 0, L), (o, i, m, 1, 0, L)]
shapes += [(N, V, C, 0, 1, 1), (N, C, V, 0, 0, 1), (V, C, N, 1, 0, 1)]
def buf(n):
    b = (ctypes.c_float * n)()
    for k in range(0, n, 97):
        b[k] = 0.01 * (k % 13)
    return b
tot_f = tot_t = 0.0
for (M, Nn, K, ta, tb, cnt) in shapes:
    a, b, c = buf(M * K), buf(K * Nn), buf(M * Nn)
    lda = M if ta else K
    ldb = K if tb else Nn
    best = 1e9
    for r in range(5):
        t0 = time.perf_counter()
        ob.cblas_sgemm(101, 112 if ta else 111, 112 if tb else 111, M, Nn, K, ctypes.c_float(1.0), a, lda,
                       b, ldb, ctypes.c_float(0.0), c, Nn)
        best = min(best, time.perf_counter() - t0)
    tot_f += 2.0 * M * Nn * K * cnt
    tot_t += best * cnt
print(json.dumps({"gflops": tot_f / tot_t / 1e9, "core": ob.openblas_get_corename().decode()}))
'''


PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def blas_core(build):
    """The OpenBLAS family whale's tools run with (see the module doc)."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    r = subprocess.run([os.path.join(build, "runtime", "tools", "bench", "whale-bench"), "blas"],
                       capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("core ") and line.split()[1:]:
            return line.split()[1]
    return None


def child_env(threads, core):
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(threads))
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return env


def run_sgemm(shape, threads, core):
    _, L, C, H, V, T, B = SHAPES[shape]
    out = subprocess.run([PY, "-c", SGEMM_CHILD] + [str(v) for v in (L, C, V, T, B, threads)],
                         env=child_env(threads, core), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def make_data(path, vocab, n):
    import random
    rnd = random.Random(1)
    if vocab <= 256:
        with open(path, "wb") as f:
            f.write(bytes(rnd.randrange(vocab) for _ in range(n)))
    else:
        with open(path, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack("<%dH" % n, *(rnd.randrange(vocab) for _ in range(n))))


def run_torch(py, cfg, shape, steps, threads, core=None, precision="fp32"):
    """One torch run in configuration cfg (under autocast bf16 for precision
    bf16); None where the torch lacks it."""
    _, L, C, H, V, T, B = SHAPES[shape]
    env = child_env(threads, core)
    out = subprocess.run([py, "-c", TORCH_CHILD] + [str(v) for v in (L, C, H, V, T, B, steps, threads)]
                         + [HERE, cfg, precision], env=env, check=True, capture_output=True, text=True).stdout
    d = json.loads(out.strip().splitlines()[-1])
    if "unavailable" in d:
        print(f"torch configuration {cfg}: not run ({d['unavailable']})", flush=True)
        return None
    return d


def run_whale(build, shape, steps, threads, data, tmp, precision="fp32"):
    preset, _, _, _, _, T, B = SHAPES[shape]
    exe = os.path.join(build, "runtime", "tools", "train", "whale-train")
    metrics = os.path.join(tmp, "m.jsonl")
    out = subprocess.run([exe, "--model", preset, "--data", data, "--steps", str(steps),
                          "--precision", precision,
                          "--batch", str(B), "--seq", str(T), "--threads", str(threads),
                          "--no-progress", "--log-every", "1000000", "--metrics", metrics],
                         check=True, capture_output=True, text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])["summary"]
    steps = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
    return ([x["tokens_per_s"] for x in steps], [x["mfu"] for x in steps], s["peak_gflops"],
            [B * T / x["cpu_s"] for x in steps if x.get("cpu_s")], s.get("blas_core", "?"),
            s.get("peak_rss_mb", float("nan")))


def med(x):
    return statistics.median(x) if x else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default 20 small, 5 124m)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-python", default=PY,
                    help="interpreter whose torch is the peer (a torch >= 2 venv runs SDPA, fused AdamW "
                         "and torch.compile; Debian's 1.13 only the eager configuration)")
    ap.add_argument("--torch-configs", default="eager,sdpa,compiled",
                    help="torch configurations: eager (attention written out), sdpa (SDPA + fused AdamW), "
                         "compiled (torch.compile of the sdpa model); those the torch lacks are skipped")
    ap.add_argument("--precision", default="fp32",
                    help="fp32, bf16 or both (fp32,bf16): bf16 runs whale-train --precision bf16 against "
                         "every torch configuration under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--no-torch", action="store_true",
                    help="skip PyTorch (whale against the sgemm rate only: ~4 min less per 124m rep)")
    a = ap.parse_args()
    core = blas_core(a.build)
    cfgs = [] if a.no_torch else [c for c in a.torch_configs.split(",") if c]
    print("OpenBLAS kernels for PyTorch and the sgemm reference: %s" % (core or "OpenBLAS's own choice"))
    with tempfile.TemporaryDirectory() as tmp:
        for shape, prec in [(s, p) for s in a.shapes.split(",") for p in a.precision.split(",")]:
            preset, L, C, H, V, T, B = SHAPES[shape]
            steps = a.steps or (20 if shape == "small" else 5)
            data = os.path.join(tmp, shape + (".bin" if V > 256 else ".txt"))
            make_data(data, V, max(200000, 4 * B * (T + 1) * steps))
            wt, mfu, peak, wc, sg, wg, wrss = [], [], [], [], [], [], []
            tor = {c: {"t": [], "c": [], "rss": [], "desc": None} for c in cfgs}
            for r in range(a.reps):
                # rounds alternate: every torch configuration, then whale, so all
                # see the same machine load
                for c in cfgs:
                    if tor[c]["desc"] == "-":
                        continue
                    d = run_torch(a.torch_python, c, shape, steps, a.threads, core, prec)
                    if d is None:
                        tor[c]["desc"] = "-"
                        continue
                    tor[c]["desc"] = "torch %s: %s" % (d["torch"], d["desc"])
                    tor[c]["t"] += d["step_tokens_per_s"]
                    tor[c]["c"] += d["step_tokens_per_cpu_s"]
                    tor[c]["rss"].append(d["peak_rss_mb"])
                # the sgemm reference right before and right after whale's run, the
                # faster one kept: a load spike during one measurement must not
                # lower the bar whale is held to
                g0 = run_sgemm(shape, a.threads, core)
                w, m, p, w_cpu, wcore, rss = run_whale(a.build, shape, steps, a.threads, data, tmp, prec)
                g = max(g0, run_sgemm(shape, a.threads, core), key=lambda x: x["gflops"])
                wt += w; mfu += m; peak.append(p); wc += w_cpu; sg.append(g["gflops"]); wrss.append(rss)
                wg += [x * p for x in m]   # achieved GFLOP/s of each step (MFU x peak)
                tline = ", ".join("%s %.0f" % (c, med(tor[c]["t"][-steps:])) for c in cfgs if tor[c]["t"])
                print(f"{shape} {prec} rep {r + 1}: step tokens/s median whale {med(w):.0f}"
                      f"{'; torch ' + tline if tline else ''}; sgemm peak {p:.0f} GFLOP/s; "
                      f"whale {med(m) * p:.1f} GFLOP/s vs sgemm on the step's shapes {g['gflops']:.1f} "
                      f"({g['core']} / whale {wcore}); load {load()}", flush=True)
            mw, bw = med(wt), max(wt)
            pk = max(peak)
            print(f"{shape} {prec} ({preset}: L={L} d={C} T={T} B={B}, {a.threads} threads, "
                  f"{len(wt)} steps each):")
            print(f"  {'side':<56} {'median tok/s':>12} {'best tok/s':>10} {'tok/CPU-s':>9} {'peak RSS MiB':>12}")
            print(f"  {'whale-train --precision ' + prec:<56} {mw:>12.0f} {bw:>10.0f} {med(wc):>9.0f} {max(wrss):>12.0f}")
            ran = [c for c in cfgs if tor[c]["t"]]
            for c in ran:
                x = tor[c]
                print(f"  {x['desc'][:56]:<56} {med(x['t']):>12.0f} {max(x['t']):>10.0f} {med(x['c']):>9.0f} "
                      f"{max(x['rss']):>12.0f}")
            if ran:
                best = max(ran, key=lambda c: med(tor[c]["t"]))
                x = tor[best]
                print(f"  best torch configuration (by median): {best} ({x['desc']})\n"
                      f"  whale / best torch: median {mw / med(x['t']):.2f}, best step {bw / max(x['t']):.2f}, "
                      f"per CPU-second {med(wc) / med(x['c']):.2f}, peak RSS {max(wrss) / max(x['rss']):.2f}")
            print(f"  whale MFU (best step) {100 * max(mfu) * med(peak) / pk:.0f} % "
                  f"of the best sgemm peak measured, {pk:.0f} GFLOP/s\n"
                  f"  whale GFLOP/s vs OpenBLAS sgemm on this shape's GEMMs: median "
                  f"{med(wg):.1f} / {med(sg):.1f} = {100 * med(wg) / med(sg):.0f} %, best "
                  f"{max(wg):.1f} / {max(sg):.1f} = {100 * max(wg) / max(sg):.0f} % (target >= 75 %)\n"
                  f"  load average now {load()}")


if __name__ == "__main__":
    main()
