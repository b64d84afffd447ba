#!/usr/bin/env python3
"""Activation recomputation: peak RSS per rank for none / selective / full /
auto, next to the planner's predicted activation memory (whale-plan
--evaluate, same configuration) and the engine's own count (act_peak_mb).

Runs whale-train for a few steps per policy, on one rank and on a PP=2
pipeline (1F1B keeps up to p micro-batches in flight on the first stage).
The loss must not change with the policy; the script checks that too.

    python3 contrib/bench/recompute-memory.py [--build build] [--model gpt-small]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def planner_act(build, model, batch, micro, pp, policy):
    cmd = [os.path.join(build, "runtime/tools/plan/whale-plan"), "-m", model, "-b", str(batch),
           "-N", "1", "-g", str(pp), "-G", "cpu", "--tp", "1", "--pp", str(pp), "--dp", "1",
           "--microbatch", str(micro), "--interleave", "1", "--zero", "0", "--recompute", policy,
           "--offload", "none", "--seqpar", "no", "-e", "-j", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    if "{" not in out:
        return float("nan")
    j = json.loads(out[out.index("{"):])
    return j["prediction"]["memory_bytes"]["activations"] / 2**20


def train(build, tmp, model, pp, policy, batch, micro, steps, budget):
    metrics = os.path.join(tmp, "m-%d-%s.jsonl" % (pp, policy))
    cmd = [os.path.join(build, "runtime/tools/run/whale-run"), "-n", str(pp), "--pp", str(pp),
           "--timeout", "900", os.path.join(build, "runtime/tools/train/whale-train"),
           "--model", model, "--data", os.path.join(tmp, "corpus.txt"), "--steps", str(steps),
           "--batch", str(batch), "--grad-accum", str(batch // micro), "--threads", "1",
           "--no-progress", "--metrics", metrics, "--recompute", policy]
    if budget:
        cmd += ["--act-budget-mb", str(budget)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')]
    return (max(r["peak_rss_mb"] for r in rows), max(r["act_peak_mb"] for r in rows),
            [r["loss"] for r in rows], sorted(r["step_s"] for r in rows)[len(rows) // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt-small")
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime", "src")
        with open(os.path.join(tmp, "corpus.txt"), "w") as out:
            for d, _, files in os.walk(src):
                for fn in sorted(files):
                    if fn.endswith(".c"):
                        out.write(open(os.path.join(d, fn)).read())
        print("model %s, micro-batch %d, %d micro-batches per step, 1 thread per rank"
              % (args.model, args.micro, args.batch // args.micro))
        print("%-4s %-10s %11s %12s %13s %14s %10s %8s" % ("PP", "recompute", "RSS MiB",
              "RSS-none", "engine act", "planner act", "step s", "loss ok"))
        for pp in (1, 2):
            base = None
            ref = None
            for policy in ("none", "selective", "full", "auto"):
                rss, act, losses, step = train(args.build, tmp, args.model, pp, policy,
                                               args.batch, args.micro, args.steps, 0)
                pred = planner_act(args.build, args.model, args.batch, args.micro, pp, policy)
                if base is None:
                    base, ref = rss, losses
                ok = all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(ref, losses))
                print("%-4d %-10s %11.1f %12.1f %10.1f MiB %10.1f MiB %10.3f %8s" % (
                    pp, policy, rss, rss - base, act, pred, step, "yes" if ok else "NO"))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
