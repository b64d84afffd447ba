#!/usr/bin/env python3
"""Layouts of one model under whale-run: tokens/s, the pipeline bubble
measured from the per-rank traces against the (p-1)/m of 1F1B, and the
planner's predicted step time beside the measured one.

  contrib/bench/train-layouts.py --build build [--model gpt-small] [--ranks 4]
      [--batch 16] [--micro 2] [--steps 6] [--calib FILE]

Every layout trains the same model on the same global batch (micro-batches of
--micro) with one thread per rank. The bubble of a stage is the part of the
step (median over steps after the first) in which it ran no forward/backward:
(step - compute) / compute, the quantity (p-1)/m predicts for 1F1B. The
prediction comes from `whale-plan -G cpu` with the layout fixed (pass a
whale-bench calibration with --calib for absolute times). The ranks share this
machine's cores, so absolute figures are those of an oversubscribed host;
compare the layouts with each other.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

LAYOUTS = [  # (tp, pp, dp)
    (1, 1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 1), (1, 4, 1),
]


def tool(build, name):
    return os.path.join(build, "runtime", "tools", name, "whale-" + name)


def predict(a, tp, pp, dp):
    cmd = [tool(a.build, "plan"), "--model", a.model, "--batch", str(a.batch), "-N", "1",
           "-g", str(a.ranks), "-G", "cpu", "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
           "--microbatch", str(a.micro), "--interleave", "1", "--zero", "1",
           "--recompute", "none", "--seqpar", "no", "-e"]
    if a.calib:
        cmd += ["--calib", a.calib]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    m = re.search(r"time per step: ([0-9.e+-]+) s", out)
    return float(m.group(1)) if m else float("nan")


def bubble(trace_glob, pp):
    """Median over steps of (step - compute) / compute, averaged over stages."""
    per_stage = []
    for f in sorted(glob.glob(trace_glob)):
        ev = json.load(open(f))
        opt = sorted(e["ts"] + e["dur"] for e in ev if e.get("name") == "optimizer")
        comp = [e for e in ev if e.get("cat") == "compute" and e["name"] in ("forward", "backward")]
        vals = []
        for s in range(1, len(opt)):  # step s lies between two optimizer ends
            lo, hi = opt[s - 1], opt[s]
            c = sum(e["dur"] for e in comp if lo <= e["ts"] < hi)
            if c > 0:
                vals.append((hi - lo - c) / c)
        if vals:
            per_stage.append(statistics.median(vals))
    return statistics.mean(per_stage) if per_stage else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt-small")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--calib", default="")
    a = ap.parse_args()
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, WHALE_MODEL_PATH=os.path.join(src, "config", "models"))
    print(f"{a.model}, global batch {a.batch}, micro-batch {a.micro}, {a.ranks} ranks x 1 thread")
    print(f"{'layout':>14} {'tok/s':>8} {'step s':>8} {'pred s':>8} {'bubble':>7} {'(p-1)/m':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as f:
            for p in sorted(glob.glob(os.path.join(src, "runtime", "src", "*", "*.c"))):
                f.write(open(p, "rb").read())
        for tp, pp, dp in LAYOUTS:
            if tp * pp * dp != a.ranks:
                continue
            m = a.batch // (a.micro * dp)
            metrics = os.path.join(tmp, f"m{tp}{pp}{dp}.jsonl")
            env["WHALE_TRACE"] = os.path.join(tmp, f"t{tp}{pp}{dp}.json")
            r = subprocess.run([tool(a.build, "run"), "-n", str(a.ranks), "--tp", str(tp), "--pp", str(pp),
                                "--dp", str(dp), "--timeout", "600", tool(a.build, "train"),
                                "--model", a.model, "--data", corpus, "--steps", str(a.steps),
                                "--batch", str(a.batch), "--grad-accum", str(m), "--threads", "1",
                                "--zero", "1", "--no-progress", "--metrics", metrics],
                               env=env, capture_output=True, text=True)
            if r.returncode:
                print(f"tp{tp} pp{pp} dp{dp}: failed\n{r.stdout[-2000:]}{r.stderr[-2000:]}", file=sys.stderr)
                continue
            steps = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
            st = statistics.median(s["step_s"] for s in steps)
            tps = statistics.median(s["tokens_per_s"] for s in steps)
            b = bubble(os.path.join(tmp, f"t{tp}{pp}{dp}.*.json"), pp) if pp > 1 else 0.0
            pred = predict(a, tp, pp, dp)
            print(f"{'tp%d pp%d dp%d' % (tp, pp, dp):>14} {tps:8.0f} {st:8.3f} {pred:8.3f} "
                  f"{100 * b:6.1f}% {100 * (pp - 1) / m:7.1f}%", flush=True)


if __name__ == "__main__":
    main()
