#!/usr/bin/env python3
"""The progress engine's wait: sleeping on the UCX event fd vs the old yield loop.

Runs whale-train data-parallel under whale-run (default: DP2 gpt-small,
batch 16, one compute thread per rank) with WHALE_PROGRESS_SLEEP=0 (spin,
then sched_yield and 20 us naps while operations are posted: the old
behaviour) and with the default (spin, 32 yields, then sleep in poll() on
the worker's event fd), rounds interleaved, and reports per mode:

  tokens/s      median over the steps after the first two (and the best step)
  progress CPU  CPU seconds the progress threads ("whale-progress", read in
                /proc while the run lasts) burnt per step, summed over ranks

with the 1-minute load average beside each round. Then the same for the
pipeline executor is contrib/bench/pipeline-bubble.py --sleep-modes 0,32.

    /usr/bin/python3 contrib/bench/progress-sleep.py [--build build] [--rounds 3]
        [--ranks 2] [--model gpt-small] [--batch 16] [--steps 8] [--threads 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def progress_cpu(tag, seen):
    """CPU ticks of every whale-progress thread of the processes whose command
    line holds tag; seen keeps the last value per thread (they exit)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if tag.encode() not in f.read():
                    continue
            for tid in os.listdir("/proc/%s/task" % pid):
                with open("/proc/%s/task/%s/comm" % (pid, tid)) as f:
                    if f.read().strip() != "whale-progress":
                        continue
                with open("/proc/%s/task/%s/stat" % (pid, tid)) as f:
                    st = f.read().rsplit(")", 1)[1].split()
                seen[(pid, tid)] = int(st[11]) + int(st[12])  # utime + stime
        except OSError:
            continue


def run(args, tmp, name, mode):
    metrics = os.path.join(tmp, name + ".jsonl")
    env = dict(os.environ, WHALE_MODEL_PATH=os.path.join(SRC, "config", "models"),
               OMP_WAIT_POLICY="passive", WHALE_PROGRESS_SLEEP=str(mode))
    cmd = [os.path.join(args.build, "runtime/tools/run/whale-run"), "-n", str(args.ranks),
           "--timeout", "600", os.path.join(args.build, "runtime/tools/train/whale-train"),
           "--model", args.model, "--data", os.path.join(tmp, "corpus.txt"), "--format", "bytes",
           "--steps", str(args.steps), "--batch", str(args.batch), "--threads", str(args.threads),
           "--no-progress", "--metrics", metrics]
    l0 = load1()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = {}
    while p.poll() is None:
        progress_cpu(metrics, seen)
        time.sleep(0.2)
    err = p.stderr.read()
    if p.returncode:
        raise SystemExit("progress-sleep: %s failed (%d):\n%s" % (name, p.returncode, err[-2000:]))
    f = metrics if os.path.exists(metrics) else metrics + ".rank0"
    cand = [x for x in os.listdir(tmp) if x.startswith(name + ".jsonl")]
    if not os.path.exists(f):
        f = os.path.join(tmp, sorted(cand)[0])
    rows = [json.loads(l) for l in open(f) if l.startswith('{"step"')]
    rows = [r for r in rows if r["step"] >= 3] or rows
    hz = os.sysconf("SC_CLK_TCK")
    return {"tps": statistics.median(r["tokens_per_s"] for r in rows),
            "best": max(r["tokens_per_s"] for r in rows),
            "step": statistics.median(r["step_s"] for r in rows),
            "prog": sum(seen.values()) / hz / args.steps,
            "load": max(l0, load1())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="gpt-small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="0,32", help="WHALE_PROGRESS_SLEEP values, interleaved")
    args = ap.parse_args()
    modes = [int(x) for x in args.modes.split(",")]
    res = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "corpus.txt"), "wb") as out:
            for d in ("runtime/src/comm", "runtime/src/member", "runtime/src/engine", "runtime/src/plan"):
                for sub, _, names in sorted(os.walk(os.path.join(SRC, d))):
                    for fn in sorted(names):
                        if fn.endswith(".c"):
                            out.write(open(os.path.join(sub, fn), "rb").read())
        print("== whale-train DP%d %s batch %d, %d thread(s)/rank, %d steps; %d cores" % (
            args.ranks, args.model, args.batch, args.threads, args.steps, os.cpu_count()))
        for r in range(args.rounds):
            for m in modes:
                x = run(args, tmp, "r%d_m%d" % (r, m), m)
                res[m].append(x)
                print("round %d WHALE_PROGRESS_SLEEP=%-3d %8.0f tokens/s (best step %8.0f)  "
                      "step %.3f s  progress CPU %.3f s/step  load %.1f" % (
                          r + 1, m, x["tps"], x["best"], x["step"], x["prog"], x["load"]), flush=True)
    print("\nsummary (medians over rounds; best in brackets)")
    base = statistics.median(x["tps"] for x in res[modes[0]])
    for m in modes:
        t = statistics.median(x["tps"] for x in res[m])
        print("  WHALE_PROGRESS_SLEEP=%-3d %8.0f tokens/s (%8.0f)  %.2fx of =%d   progress CPU "
              "%.3f s/step (%.3f)  load %.1f-%.1f" % (
                  m, t, max(x["tps"] for x in res[m]), t / base, modes[0],
                  statistics.median(x["prog"] for x in res[m]), min(x["prog"] for x in res[m]),
                  min(x["load"] for x in res[m]), max(x["load"] for x in res[m])))


if __name__ == "__main__":
    main()
