#!/usr/bin/env python3
"""Pipeline bubble, measured against (p-1)/m and (p-1)/(v m).

Part 1 (executor): pp_sleep runs the pipeline executor over real processes
(whale-run, UCX send/recv) with passes that sleep F / B ms, so CPU contention
on a shared machine does not blur the figure; it prints the measured bubble,
theory, and the simulator's prediction with the measured transfer latency.

Part 2 (training): for each schedule and micro-batch count m, trains the same model and global
batch (a) on one rank and (b) on a PP=p pipeline (whale-run, one compute
thread per rank, so p ranks use p cores) and reports, from the median step
time of the steps after the first:

  bubble (step)  = T_pipe / (T_one / p) - 1   what the pipeline costs over a
                                              perfect split of the work
  bubble (wait)  = wait / (step - wait) on pipeline rank 0, time blocked on
                                              receives (bubble + transfers)
  theory         = (p-1)/m (1F1B, GPipe) or (p-1)/(v m) (interleaved)

    python3 contrib/bench/pipeline-bubble.py [--build build] [--pp 2] [--steps 8]
        [--part executor|training|both]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = "Name=bubble Layers=8 Hidden=128 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n"


def run_train(build, tmp, name, ntasks, pp, extra, steps, micro, m):
    metrics = os.path.join(tmp, name + ".jsonl")
    cmd = [os.path.join(build, "runtime/tools/run/whale-run"), "-n", str(ntasks), "--pp", str(pp),
           "--timeout", "900", os.path.join(build, "runtime/tools/train/whale-train"),
           "--model", os.path.join(tmp, "m.conf"), "--data", os.path.join(tmp, "corpus.txt"),
           "--steps", str(steps), "--batch", str(micro * m), "--grad-accum", str(m),
           "--seq", "64", "--threads", "1", "--no-progress", "--metrics", metrics] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
    step = statistics.median(r["step_s"] for r in rows)
    wait = statistics.median(r.get("pipe_wait_s", 0.0) for r in rows)
    return step, wait


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--micro", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--ms", default="2,4,8,16", help="micro-batch counts")
    ap.add_argument("--part", default="both", choices=("executor", "training", "both"))
    args = ap.parse_args()
    p = args.pp
    if args.part in ("executor", "both"):
        print("== executor: passes sleep F=10 ms / B=20 ms per stage, 64 KiB messages, "
              "mean of 4 steps")
        for pp in (2, 4):
            for m in (pp, 2 * pp, 4 * pp):
                for sched, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2)):
                    cmd = [os.path.join(args.build, "runtime/tools/run/whale-run"), "-n", str(pp),
                           "--pp", str(pp), "--no-label", "--timeout", "300",
                           os.path.join(args.build, "tests/unit/parallel/pp_sleep"),
                           "--schedule", sched, "--interleave", str(v), "-m", str(m),
                           "--steps", "4"]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                    print("  " + out.strip().replace("pp_sleep: ", ""))
                    sys.stdout.flush()
    if args.part == "executor":
        return 0
    print("== training")
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "m.conf"), "w") as f:
            f.write(MODEL)
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime", "src")
        with open(os.path.join(tmp, "corpus.txt"), "w") as out:
            for d, _, files in os.walk(src):
                for fn in sorted(files):
                    if fn.endswith(".c"):
                        out.write(open(os.path.join(d, fn)).read())
        print("model: 8 blocks, hidden 128, seq 64; %d sequences per micro-batch; PP=%d, "
              "1 thread per rank; medians of %d steps" % (args.micro, p, args.steps - 1))
        print("%-12s %3s %3s %10s %10s %10s %10s %10s" % ("schedule", "v", "m", "T_one s",
              "T_pipe s", "bubble", "wait/comp", "theory"))
        for m in [int(x) for x in args.ms.split(",")]:
            t1, _ = run_train(args.build, tmp, "one%d" % m, 1, 1, [], args.steps, args.micro, m)
            for sched, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2)):
                if sched == "interleaved" and m % p:
                    continue
                extra = ["--schedule", sched] + (["--interleave", str(v)] if v > 1 else [])
                tp_, w = run_train(args.build, tmp, "%s%d" % (sched, m), p, p, extra,
                                   args.steps, args.micro, m)
                bubble = tp_ / (t1 / p) - 1
                theory = (p - 1) / (v * m)
                print("%-12s %3d %3d %10.4f %10.4f %10.3f %10.3f %10.3f" % (
                    sched, v, m, t1, tp_, bubble, w / max(tp_ - w, 1e-9), theory))
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
