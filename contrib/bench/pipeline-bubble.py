#!/usr/bin/env python3
"""Pipeline bubble, measured against (p-1)/m (1F1B) and (p-1)/(v m) (interleaved).

Part 1 (executor: idle within 1.2 x the theoretical bubble): pp_sleep runs the pipeline
executor over real processes (whale-run, UCX send/recv) with passes that
sleep F / B ms, so CPU contention does not blur the figure, for p = 2, 4,
m = 4, 8, 16, 1F1B and interleaved (v = 2), rounds interleaved. Per case:

  idle    = step / (this rank's passes as they ran) - 1   the bubble proper:
            time pipeline rank 0 spent not computing, against its own passes
            (a sleep that overshoots on a busy machine is not the pipeline's)
  nominal = step / (v m (F + B)) - 1                       against the nominal
            pass times (includes the overshoot)
  theory  = (p-1)/(v m)
  target  : idle <= 1.2 x theory (median of the rounds), judged only when the
            1-minute load average stayed at or below the core count.

Passes sleep, then spin their last 0.3 ms, so they last what they should
(--pass-mode loose: a plain nanosleep, which overshoots by the wake-up; on
the peer that overshoot lands on rank 0's critical path and was counted as
bubble; spin: busy passes).

Also printed: blocking waits (voluntary context switches of the stepping
thread), preemptions, "prog ms": the progress thread's CPU per step
(whale_progress_stats' thread_cpu_s, the same figure whale-train reports),
"other ms": the CPU of the process's remaining threads (UCX async, PMIx),
and the progress thread's kernel sleeps per step.

Part 2 (training): for each schedule and micro-batch count m, trains the same model and global
batch (a) on one rank and (b) on a PP=p pipeline (whale-run, one compute
thread per rank, so p ranks use p cores) and reports, from the median step
time of the steps after the first:

  bubble (step)  = T_pipe / (T_one / p) - 1   what the pipeline costs over a
                                              perfect split of the work
  bubble (wait)  = wait / (step - wait) on pipeline rank 0, time blocked on
                                              receives (bubble + transfers)
  theory         = (p-1)/m (1F1B, GPipe) or (p-1)/(v m) (interleaved)

    python3 contrib/bench/pipeline-bubble.py [--build build] [--rounds 3]
        [--part executor|training|both] [--pp 2] [--steps 8] [--sleep-modes 0,32]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = "Name=bubble Layers=8 Hidden=128 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n"


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_pp_sleep(build, p, m, sched, v, steps, extra, sleep_mode=None):
    """One pp_sleep run under whale-run; its RESULT line as a dict."""
    env = dict(os.environ)
    if sleep_mode is not None:
        env["WHALE_PROGRESS_SLEEP"] = str(sleep_mode)
    cmd = [os.path.join(build, "runtime/tools/run/whale-run"), "-n", str(p), "--pp", str(p),
           "--no-label", "--timeout", "300", os.path.join(build, "tests/unit/parallel/pp_sleep"),
           "--schedule", sched, "--interleave", str(v), "-m", str(m), "--steps", str(steps)]
    out = subprocess.run(cmd + extra, check=True, capture_output=True, text=True, env=env).stdout
    res = [l for l in out.splitlines() if l.startswith("RESULT ")]
    line = [l for l in out.splitlines() if l.startswith("pp_sleep: ")]
    kv = dict(x.split("=", 1) for x in res[-1].split()[1:])
    return kv, line[-1][len("pp_sleep: "):] if line else ""


def executor_part(args):
    cores = os.cpu_count() or 1
    cases = []
    modes = [None] if not args.sleep_modes else [int(x) for x in args.sleep_modes.split(",")]
    for p in (2, 4):
        for m in (4, 8, 16):
            for sched, v in (("1f1b", 1), ("interleaved", 2)):
                for mode in modes:
                    cases.append((p, m, sched, v, mode))
    print("== executor: passes sleep F=%g ms / B=%g ms per stage (split over v chunks), "
          "%d steps per run, %d interleaved rounds; load %.1f on %d cores" % (
              args.fwd_ms, args.bwd_ms, args.exec_steps, args.rounds, load1(), cores))
    got = {c: [] for c in cases}
    loads = {c: [] for c in cases}
    extra = ["--fwd-ms", str(args.fwd_ms), "--bwd-ms", str(args.bwd_ms)]
    if args.pass_mode != "exact":
        extra.append("--" + args.pass_mode)
    for r in range(args.rounds):
        for c in cases:
            p, m, sched, v, mode = c
            l0 = load1()
            kv, line = run_pp_sleep(args.build, p, m, sched, v, args.exec_steps, extra, mode)
            loads[c] += [l0, load1()]
            got[c].append(kv)
            if args.verbose:
                print("  round %d: %s" % (r + 1, line))
            sys.stdout.flush()
    print("%-12s %5s %2s %2s %3s %8s %8s %8s %8s %7s %6s %6s %7s %7s %6s  %s" % (
        "schedule", "sleep", "p", "v", "m", "theory", "idle", "best", "nominal", "ratio", "waits",
        "preempt", "prog ms", "oth ms", "sleeps", "target idle <= 1.2 x theory"))
    met = {}
    judged = {}
    for c in cases:
        p, m, sched, v, mode = c
        rows = got[c]
        th = float(rows[0]["theory"])
        idle = statistics.median(float(k["idle"]) for k in rows)
        best = min(float(k["idle_best"]) for k in rows)
        nom = statistics.median(float(k["bubble"]) for k in rows)
        waits = statistics.median(float(k.get("vcsw", "nan")) for k in rows)
        pre = statistics.median(float(k.get("ivcsw", "nan")) for k in rows)
        # the progress thread's CPU (whale_progress_stats), and the rest of
        # the process's other threads (before, the column was the sum)
        prog = statistics.median(float(k.get("prog_cpu_ms", "nan")) for k in rows)
        oth = statistics.median(float(k.get("other_cpu_ms", "nan")) -
                                float(k.get("prog_cpu_ms", "nan")) for k in rows)
        slp = statistics.median(float(k.get("sleeps", "nan")) for k in rows)
        lmax = max(loads[c])
        ok = idle <= 1.2 * th
        if lmax > cores:
            verdict = "not judged (load up to %.1f)" % lmax
        else:
            judged[mode] = judged.get(mode, 0) + 1
            met[mode] = met.get(mode, 0) + ok
            verdict = "met" if ok else "NOT MET"
        print("%-12s %5s %2d %2d %3d %8.3f %8.3f %8.3f %8.3f %6.2fx %6.1f %6.1f %7.1f %7.1f %6.1f"
              "  %s" % (sched, "dflt" if mode is None else mode, p, v, m, th, idle, best, nom,
                        idle / th, waits, pre, prog, oth, slp, verdict))
    for mode in modes:
        n = len(cases) // len(modes)
        print("summary (WHALE_PROGRESS_SLEEP=%s): %d of %d cases judged, %d met; %d not judged "
              "(load)" % ("default" if mode is None else mode, judged.get(mode, 0), n,
                          met.get(mode, 0), n - judged.get(mode, 0)))


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
    ap.add_argument("--part", default="executor", choices=("executor", "training", "both"))
    ap.add_argument("--rounds", type=int, default=3, help="executor rounds (interleaved)")
    ap.add_argument("--exec-steps", type=int, default=4, help="pp_sleep steps per run")
    ap.add_argument("--fwd-ms", type=float, default=10)
    ap.add_argument("--bwd-ms", type=float, default=20)
    ap.add_argument("--pass-mode", default="exact", choices=("exact", "loose", "spin"),
                    help="passes sleep then spin the last 0.3 ms (exact, default), only sleep "
                         "(loose: overshoots by the wake-up) or spin")
    ap.add_argument("-v", "--verbose", action="store_true", help="every pp_sleep line")
    ap.add_argument("--sleep-modes", default="",
                    help="comma list of WHALE_PROGRESS_SLEEP values to compare, rounds "
                         "interleaved (0: the old yield loop; default 32: sleep on the UCX "
                         "event fd); 'prog ms' is the progress thread's CPU per step "
                         "(whale_progress_stats), 'oth ms' the other helper threads'")
    args = ap.parse_args()
    p = args.pp
    if args.part in ("executor", "both"):
        executor_part(args)
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
