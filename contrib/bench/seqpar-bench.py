#!/usr/bin/env python3
"""Sequence parallelism: activation memory and step time with and without
--seqpar at TP=2 and TP=4 (whale-train under whale-run, real processes over
PMIx + UCX), next to the planner's predicted activation memory for the same
configuration (whale-plan --evaluate).

Per configuration it reports the engine's own activation peak (act_peak_mb of
the metrics, rank 0 and the worst rank), the peak RSS, the median step time
and the losses (which must be the same with and without SP: the script checks
that to 1e-5 relative and fails otherwise). Rounds are interleaved (TP2 no,
TP2 yes, TP4 no, TP4 yes, then again) so a change of machine load hits both
sides; the summary gives the median and best step time of each, the ratios,
and the load average before and after every run.

    python3 contrib/bench/seqpar-bench.py [--build build] [--model llama-small]
        [--seq 512] [--micro 2] [--steps 4] [--rounds 3] [--tp 2,4]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def load():
    return os.getloadavg()[0]


def model_file(tmp, model, seq):
    """The preset with Seq = seq (the planner reads the sequence from the model)."""
    here = os.path.dirname(os.path.abspath(__file__))
    src = model if os.path.exists(model) else os.path.join(here, "..", "..", "config", "models",
                                                           model + ".conf")
    text = re.sub(r"\bSeq=\d+", "Seq=%d" % seq, open(src).read())
    path = os.path.join(tmp, "model-seq%d.conf" % seq)
    with open(path, "w") as f:
        f.write(text)
    return path


def planner_act(build, model, micro, tp, sp):
    cmd = [os.path.join(build, "runtime/tools/plan/whale-plan"), "-m", model, "-b", str(micro),
           "-N", "1", "-g", str(tp), "-G", "cpu", "--tp", str(tp), "--pp", "1",
           "--dp", "1", "--microbatch", str(micro), "--interleave", "1", "--zero", "0",
           "--recompute", "none", "--offload", "none", "--seqpar", "yes" if sp else "no",
           "-e", "-j", "-"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    if "{" not in out:
        return float("nan")
    j = json.loads(out[out.index("{"):])
    return j["prediction"]["memory_bytes"]["activations"] / 2**20


def train(build, tmp, a, tp, sp, rnd):
    metrics = os.path.join(tmp, "m-tp%d-sp%d-r%d.jsonl" % (tp, sp, rnd))
    cmd = [os.path.join(build, "runtime/tools/run/whale-run"), "-n", str(tp), "--tp", str(tp),
           "--timeout", "1800", os.path.join(build, "runtime/tools/train/whale-train"),
           "--model", a.model_file, "--data", os.path.join(tmp, "corpus.txt"), "--steps",
           str(a.steps), "--batch", str(a.micro), "--micro-batch",
           str(a.micro), "--threads", "1", "--warmup", "1", "--no-progress", "--metrics",
           metrics, "--rank-metrics", "--seqpar=" + ("yes" if sp else "no")]
    l0 = load()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    l1 = load()
    if p.returncode:
        sys.exit("seqpar-bench: TP=%d seqpar=%s failed (exit %d):\n%s"
                 % (tp, sp, p.returncode, p.stdout[-3000:]))
    rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')]
    act = [max(r["act_peak_mb"] for r in rows)]
    rss = [max(r["peak_rss_mb"] for r in rows)]
    for rk in range(1, tp):
        f = metrics[:-len(".jsonl")] + "-rank%d.jsonl" % rk
        if os.path.exists(f):
            rr = [json.loads(l) for l in open(f) if l.startswith('{"step"')]
            act += [max(r.get("act_peak_mb", 0) for r in rr)] if rr else []
            rss += [max(r.get("peak_rss_mb", 0) for r in rr)] if rr else []
    # the first step pays for allocation and warm-up: time the others
    steps = sorted(r["step_s"] for r in rows[1:]) or [rows[0]["step_s"]]
    return {"act0": act[0], "act_max": max(act), "rss_max": max(rss),
            "step": statistics.median(steps), "loss": [r["loss"] for r in rows],
            "load": (l0, l1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="llama-small")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tp", default="2,4")
    a = ap.parse_args()
    tps = [int(t) for t in a.tp.split(",")]
    res = {(tp, sp): [] for tp in tps for sp in (0, 1)}
    print("seqpar-bench: model %s, seq %d, micro-batch %d, %d steps, %d rounds, %d CPUs, "
          "load %.1f" % (a.model, a.seq, a.micro, a.steps, a.rounds, os.cpu_count(), load()))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime")
        with open(os.path.join(tmp, "corpus.txt"), "w") as out:
            for d, _, files in sorted(os.walk(src)):
                for fn in sorted(files):
                    if fn.endswith((".c", ".h")):
                        out.write(open(os.path.join(d, fn), errors="replace").read())
        a.model_file = model_file(tmp, a.model, a.seq)
        for rnd in range(a.rounds):
            for tp in tps:
                for sp in (0, 1):
                    r = train(a.build, tmp, a, tp, sp, rnd)
                    res[(tp, sp)].append(r)
                    print("  round %d TP=%d SP=%-3s act %.2f MiB (rank 0) %.2f (worst rank), "
                          "RSS %.0f MiB, step %.3f s, load %.1f -> %.1f"
                          % (rnd, tp, "yes" if sp else "no", r["act0"], r["act_max"],
                             r["rss_max"], r["step"], r["load"][0], r["load"][1]), flush=True)
        planner = {k: planner_act(a.build, a.model_file, a.micro, k[0], k[1]) for k in res}
    bad = []
    print("\nsummary (step time: median and best over rounds; activation peak of the engine)")
    print("| TP | SP | act peak MiB | planner act MiB | peak RSS MiB | step s median | best |")
    print("|---|---|---|---|---|---|---|")
    for tp in tps:
        for sp in (0, 1):
            rs = res[(tp, sp)]
            st = [r["step"] for r in rs]
            print("| %d | %s | %.2f | %.2f | %.0f | %.3f | %.3f |"
                  % (tp, "yes" if sp else "no", max(r["act_max"] for r in rs),
                     planner[(tp, sp)],
                     max(r["rss_max"] for r in rs), statistics.median(st), min(st)))
        no, yes = res[(tp, 0)], res[(tp, 1)]
        for r0, r1 in zip(no, yes):
            for x, y in zip(r0["loss"], r1["loss"]):
                if abs(x - y) > 1e-5 * max(1.0, abs(x)):
                    bad.append("TP=%d: loss %.7f without SP, %.7f with" % (tp, x, y))
        am = max(r["act_max"] for r in no) / max(max(r["act_max"] for r in yes), 1e-9)
        tm = statistics.median(r["step"] for r in yes) / statistics.median(r["step"] for r in no)
        print("TP=%d: activation peak without/with SP %.2fx; step time with/without SP %.2fx "
              "(median)" % (tp, am, tm))
    loads = [l for rs in res.values() for r in rs for l in r["load"]]
    print("load average during the runs: %.1f .. %.1f on %d CPUs%s"
          % (min(loads), max(loads), os.cpu_count(),
             " (busy: step times say little)" if max(loads) > os.cpu_count() else ""))
    if bad:
        print("FAIL: losses differ with SP:\n  " + "\n  ".join(bad[:10]))
        sys.exit(1)
    print("losses equal with and without SP (1e-5 relative) in every round")


if __name__ == "__main__":
    main()
