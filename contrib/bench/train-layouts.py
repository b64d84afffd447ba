#!/usr/bin/env python3
"""Tokens/s of whale-train for several TP x PP x DP layouts of one model on
the same ranks, each beside the planner's predicted step time for that
layout (whale-plan --evaluate on a cluster of the same shape) and beside the
pure data-parallel layout measured in the same run.

With SLURM_CONF set (e.g. the minicluster: eval "$(whale-minicluster env)")
every layout runs under `srun -N NODES -n RANKS --whale-tp/-pp/-dp`; without
it, under whale-run on this machine.

    python3 contrib/bench/train-layouts.py [--build build] [--model gpt-small]
        [--nodes 4] [--ranks 8] [--batch 16] [--steps 6]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LAYOUTS = [(1, 1, 8), (2, 1, 4), (1, 2, 4), (2, 2, 2), (1, 4, 2), (2, 4, 1)]


def predicted(build, model, batch, nodes, gpn, tp, pp, dp, micro):
    cmd = [os.path.join(build, "runtime/tools/plan/whale-plan"), "-m", model, "-b", str(batch),
           "-N", str(nodes), "-g", str(gpn), "-G", "cpu", "--tp", str(tp), "--pp", str(pp),
           "--dp", str(dp), "--microbatch", str(micro), "--interleave", "1", "--zero", "0",
           "--recompute", "none", "--offload", "none", "--seqpar", "no", "-e", "-j", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    if "{" not in out:
        return float("nan"), float("nan")
    pr = json.loads(out[out.index("{"):])["prediction"]
    return pr["step_seconds"], pr["time_seconds"].get("bubble", 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt-small")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    slurm = bool(os.environ.get("SLURM_CONF"))
    train = os.path.join(args.build, "runtime/tools/train/whale-train")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime", "src")
        with open(corpus, "w") as out:
            for d, _, files in os.walk(src):
                for fn in sorted(files):
                    if fn.endswith(".c"):
                        out.write(open(os.path.join(d, fn)).read())
        print("model %s, global batch %d x %d tokens, micro-batch %d, %d ranks%s, 1 thread per "
              "rank; median of %d steps" % (args.model, args.batch, args.seq, args.micro,
                                            args.ranks, " on %d nodes (srun)" % args.nodes
                                            if slurm else " (whale-run)", args.steps - 1))
        print("%-16s %4s %9s %9s %10s %9s %12s" % ("layout", "m", "step s", "tok/s", "vs DP",
                                                   "plan s", "meas/plan"))
        base = None
        for tp, pp, dp in LAYOUTS:
            if tp * pp * dp != args.ranks:
                continue
            m = args.batch // (dp * args.micro)
            metrics = os.path.join(tmp, "l%d%d%d.jsonl" % (tp, pp, dp))
            targs = [train, "--model", args.model, "--data", corpus, "--steps", str(args.steps),
                     "--batch", str(args.batch), "--grad-accum", str(m), "--seq", str(args.seq),
                     "--threads", "1", "--no-progress", "--metrics", metrics]
            if slurm:
                cmd = ["timeout", "900", "srun", "-N", str(args.nodes), "-n", str(args.ranks),
                       "--whale-tp=%d" % tp, "--whale-pp=%d" % pp, "--whale-dp=%d" % dp] + targs
            else:
                cmd = [os.path.join(args.build, "runtime/tools/run/whale-run"), "-n",
                       str(args.ranks), "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
                       "--timeout", "900"] + targs
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            name = "tp%d pp%d dp%d" % (tp, pp, dp)
            if r.returncode:
                print("%-16s failed: %s" % (name, r.stderr.strip().splitlines()[-1:]))
                continue
            rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
            step = statistics.median(x["step_s"] for x in rows)
            tps = args.batch * args.seq / step
            base = base or tps
            pred, _ = predicted(args.build, args.model, args.batch, args.nodes,
                                args.ranks // args.nodes, tp, pp, dp, args.micro)
            print("%-16s %4d %9.3f %9.0f %9.2fx %9.4f %11.1fx" % (name, m, step, tps, tps / base,
                                                                 pred, step / pred))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
