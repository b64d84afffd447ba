#!/usr/bin/env python3
"""Mixed precision on this CPU: whale-train fp32 vs bf16 (tokens/s, activation
and weight bytes from the engine's buffers, peak RSS), beside PyTorch fp32
and PyTorch `torch.autocast("cpu", dtype=torch.bfloat16)` on the same GPT
shape, same thread count, measured alternately in the same run.

  contrib/bench/precision-vs-pytorch.py --build build [--shapes small,124m]
      [--reps 2] [--steps 0] [--threads 2] [--torch-python PY]
      [--torch-configs sdpa,compiled]

PyTorch runs through train-vs-pytorch.py's child at its best CPU settings
(OMP_WAIT_POLICY=passive, torch.set_num_threads, subnormals flushed as
whale-train does, the OpenBLAS family whale uses); the fastest of
--torch-configs is the one compared. Each side's tokens/s excludes its
first step (the first three for torch.compile). First prints the CPU features that
matter (AVX2, F16C, AVX-512, AVX512_BF16, AMX) and whether this OpenBLAS
exports cblas_sbgemm (a bf16 GEMM).
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "tvp", os.path.join(os.path.dirname(os.path.abspath(__file__)), "train-vs-pytorch.py"))
tvp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tvp)
SHAPES = tvp.SHAPES

def cpu_features():
    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    model = ""
    try:
        model = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    want = ["avx2", "f16c", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"]
    have = [f for f in want if f in flags]
    sb = False
    for name in ("openblas", "blas"):
        p = ctypes.util.find_library(name)
        if p:
            try:
                sb = sb or hasattr(ctypes.CDLL(p), "cblas_sbgemm")
            except OSError:
                pass
    return model, have, [f for f in want if f not in flags], sb


def run_torch(py, cfgs, shape, steps, threads, core, prec):
    """Median step tokens/s and peak RSS of the fastest torch configuration in
    cfgs (by median), its description; through train-vs-pytorch's child, which
    flushes subnormals like whale-train and runs the forward under
    torch.autocast("cpu", dtype=torch.bfloat16) for prec bf16."""
    best = None
    for c in cfgs:
        d = tvp.run_torch(py, c, shape, steps, threads, core, prec)
        if d is None:
            continue
        t = statistics.median(d["step_tokens_per_s"])
        if best is None or t > best[0]:
            best = (t, d["peak_rss_mb"], "%s (%s)" % (c, d["desc"]))
    if best is None:
        sys.exit("precision-vs-pytorch: no torch configuration of %s ran" % ",".join(cfgs))
    return best


def run_whale(build, shape, steps, threads, data, tmp, prec):
    preset, _, _, _, _, T, B = SHAPES[shape]
    exe = os.path.join(build, "runtime", "tools", "train", "whale-train")
    metrics = os.path.join(tmp, "m.jsonl")
    out = subprocess.run([exe, "--model", preset, "--data", data, "--steps", str(steps),
                          "--batch", str(B), "--seq", str(T), "--threads", str(threads),
                          "--precision", prec, "--no-progress", "--log-every", "1000000",
                          "--metrics", metrics], check=True, capture_output=True, text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])["summary"]
    rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
    return (statistics.median(x["tokens_per_s"] for x in rows), s["act_mb"], s["param_mb"],
            s["peak_rss_mb"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default 12 small, 4 124m)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-python", default=tvp.PY,
                    help="interpreter whose torch is the peer (as train-vs-pytorch.py)")
    ap.add_argument("--torch-configs", default="sdpa",
                    help="torch configurations of train-vs-pytorch.py (eager, sdpa, compiled); the "
                         "fastest by median is the one compared")
    a = ap.parse_args()
    core = tvp.blas_core(a.build)
    cfgs = [c for c in a.torch_configs.split(",") if c]
    model, have, lack, sb = cpu_features()
    print(f"CPU: {model}\n  has: {' '.join(have) or '-'}\n  lacks: {' '.join(lack) or '-'}\n"
          f"  OpenBLAS cblas_sbgemm: {'exported' if sb else 'not exported (whale computes in fp32 on 16-bit storage)'}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(","):
            preset, L, C, H, V, T, B = SHAPES[shape]
            steps = a.steps or (12 if shape == "small" else 4)
            data = os.path.join(tmp, shape + (".bin" if V > 256 else ".txt"))
            tvp.make_data(data, V, max(200000, 4 * B * (T + 1) * steps))
            r = {k: [] for k in ("t32", "t16", "w32", "w16")}
            mem = {}
            for rep in range(a.reps):
                t32, rss_t32, d32 = run_torch(a.torch_python, cfgs, shape, steps, a.threads, core, "fp32")
                w32, act32, par32, rss32 = run_whale(a.build, shape, steps, a.threads, data, tmp, "fp32")
                t16, rss_t16, d16 = run_torch(a.torch_python, cfgs, shape, steps, a.threads, core, "bf16")
                w16, act16, par16, rss16 = run_whale(a.build, shape, steps, a.threads, data, tmp, "bf16")
                r["t32"].append(t32); r["t16"].append(t16); r["w32"].append(w32); r["w16"].append(w16)
                mem = dict(act32=act32, act16=act16, par32=par32, par16=par16, rss32=rss32,
                           rss16=rss16, rss_t32=rss_t32, rss_t16=rss_t16)
                print(f"{shape} rep {rep + 1}: tokens/s pytorch fp32 {t32:.0f}, autocast bf16 {t16:.0f}; "
                      f"whale fp32 {w32:.0f}, bf16 {w16:.0f}; torch fp32 {d32}, bf16 {d16}; load {tvp.load()}",
                      flush=True)
            m = {k: statistics.median(v) for k, v in r.items()}
            print(f"{shape} ({preset}: L={L} d={C} T={T} B={B} V={V}, {a.threads} threads, median of {a.reps} runs):\n"
                  f"  tokens/s   pytorch fp32 {m['t32']:.0f}  autocast bf16 {m['t16']:.0f} "
                  f"(bf16/fp32 {m['t16'] / m['t32']:.2f})\n"
                  f"             whale   fp32 {m['w32']:.0f}  bf16          {m['w16']:.0f} "
                  f"(bf16/fp32 {m['w16'] / m['w32']:.2f})\n"
                  f"  whale/pytorch: fp32 {m['w32'] / m['t32']:.2f}, bf16 vs autocast {m['w16'] / m['t16']:.2f}\n"
                  f"  whale activations of one micro-batch (buffers): fp32 {mem['act32']:.1f} MiB, bf16 "
                  f"{mem['act16']:.1f} MiB ({100 * (1 - mem['act16'] / mem['act32']):.1f} % less)\n"
                  f"  whale weights used in compute: fp32 {mem['par32']:.1f} MiB, bf16 {mem['par16']:.1f} MiB\n"
                  f"  peak RSS: whale fp32 {mem['rss32']:.0f} MiB, bf16 {mem['rss16']:.0f} MiB; "
                  f"pytorch fp32 {mem['rss_t32']:.0f} MiB, autocast {mem['rss_t16']:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
