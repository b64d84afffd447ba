#!/usr/bin/env python3
"""Strong and weak scaling of whale-train, measured beside whale-plan's
prediction, drawn by whale-report --scaling.

For each rank count N (data parallelism, DP = N): strong scaling keeps the
global batch, weak scaling grows it with N. Each case runs whale-train
under srun (--launcher srun: one rank per node while nodes last, the
minicluster or a real allocation) or whale-run (one machine), and records
the median step time after warm-up. The planner is calibrated on the
1-rank strong case (whale-plan --fit-step, on the sgemm peak whale-train
measured; as contrib/bench/plan-calibration.sh does) and then predicts
every other case with the same layout.

  contrib/bench/scale.py [--build build] [--ranks 1,2,4] [--launcher srun|whale-run]
                         [--model gpt-tiny] [--batch 8] [--seq 64] [--steps 8] [-o DIR]

Writes DIR/scale.jsonl (one row per case) and DIR/scale.html with the
efficiency curves (SVG in DIR/svg); `whale-report --scaling DIR` redraws them.
Timings on a shared 2-core machine are
noisy: the figures say what this machine did, not what a cluster would.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit("scale: %s failed (%d):\n%s" % (" ".join(cmd[:6]), r.returncode, (r.stderr or r.stdout)[-3000:]))
    return r


def measure(a, tools, tmp, mode, n, batch, corpus):
    metrics = os.path.join(tmp, "%s-%d.jsonl" % (mode, n))
    train = [tools["train"], "--model", a.model, "--data", corpus, "--steps", str(a.steps),
             "--batch", str(batch), "--seq", str(a.seq), "--threads", "1", "--no-progress",
             "--metrics", metrics]
    nodes = 1
    if a.launcher == "srun":
        nodes = min(n, a.max_nodes)
        cmd = ["srun", "-N", str(nodes), "-n", str(n), "--whale-dp=%d" % n] + train
    elif n == 1:
        cmd = train
    else:
        cmd = [tools["run"], "-n", str(n), "--timeout", "600"] + train
    run(cmd, timeout=900)
    recs = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')]
    summ = [json.loads(l)["summary"] for l in open(metrics) if l.startswith('{"summary"')][-1]
    times = [r["step_s"] for r in recs if r["step"] > 2] or [r["step_s"] for r in recs]
    return statistics.median(times), summ, nodes


def predict(a, tools, cal, n, batch, nodes):
    mb = batch // n
    cmd = [tools["plan"], "-m", a.model, "-b", str(batch), "-N", str(nodes), "-g", str(n // nodes),
           "-G", "cpu", "--calib", cal, "--dp", str(n), "--tp", "1", "--pp", "1",
           "--microbatch", str(mb), "--zero", "0", "--recompute", "none", "--precision", "fp32", "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    for tok in (r.stdout + r.stderr).split("  "):
        if tok.startswith("step ") and tok.endswith(" s"):
            return float(tok.split()[1])
    print("scale: whale-plan gave no prediction for %d ranks: %s" % (n, (r.stdout + r.stderr).strip()[-300:]), file=sys.stderr)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--launcher", choices=["srun", "whale-run"], default="whale-run")
    ap.add_argument("--max-nodes", type=int, default=int(os.environ.get("SLURM_JOB_NUM_NODES", "4") or 4),
                    help="srun: most nodes to spread ranks over (default: the allocation's or 4)")
    ap.add_argument("--model", default="gpt-tiny")
    ap.add_argument("--batch", type=int, default=8, help="global batch of the 1-rank case")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--mode", choices=["strong", "weak", "both"], default="both")
    ap.add_argument("-o", "--out", default="scale-out")
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    tools = {"train": b + "/runtime/tools/train/whale-train", "run": b + "/runtime/tools/run/whale-run",
             "plan": b + "/runtime/tools/plan/whale-plan", "report": b + "/runtime/tools/report/whale-report"}
    os.environ.setdefault("WHALE_MODEL_PATH", os.path.join(SRC, "config", "models"))
    ranks = [int(x) for x in a.ranks.split(",")]
    if ranks[0] != 1:
        sys.exit("scale: --ranks must start at 1 (the baseline and the planner's calibration)")
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="whale-scale-", dir=os.path.abspath(a.out))
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        for d in sorted(os.listdir(os.path.join(SRC, "runtime", "src"))):
            p = os.path.join(SRC, "runtime", "src", d)
            for fn in sorted(os.listdir(p)) if os.path.isdir(p) else []:
                if fn.endswith(".c"):
                    f.write(open(os.path.join(p, fn), errors="replace").read())
    modes = ["strong", "weak"] if a.mode == "both" else [a.mode]
    rows = []
    cal = os.path.join(tmp, "fit.cal")
    for mode in modes:
        for n in ranks:
            batch = a.batch if mode == "strong" else a.batch * n
            if batch % n:
                print("scale: batch %d is not divisible by %d ranks; skipped" % (batch, n), file=sys.stderr)
                continue
            if mode == "weak" and n == 1 and rows and rows[0]["ranks"] == 1:
                r0 = dict(rows[0], mode="weak")  # the same run as strong's baseline
                rows.append(r0)
                continue
            t, summ, nodes = measure(a, tools, tmp, mode, n, batch, corpus)
            if n == 1 and not os.path.exists(cal):
                peak = summ["peak_gflops"]
                with open(os.path.join(tmp, "peak.cal"), "w") as f:
                    f.write("Calibration=1 Source=scale.py\nDevice=cpu PeakTFLOPS=%.6g GemmHalfDim=0\n" % (peak / 1000))
                r = subprocess.run([tools["plan"], "-m", a.model, "-b", str(batch), "-N", "1", "-g", "1", "-G", "cpu",
                                    "--calib", os.path.join(tmp, "peak.cal"), "--microbatch", str(batch), "--zero", "0",
                                    "--recompute", "none", "--precision", "fp32", "--fit-step", "%.6g" % t,
                                    "--calib-out", cal], capture_output=True, text=True)
                if r.returncode:  # e.g. the model's bandwidth terms alone exceed the measurement
                    print("scale: the planner could not be fitted to the 1-rank step (%s); predictions use "
                          "the measured sgemm peak only" % r.stderr.strip().splitlines()[-1], file=sys.stderr)
                    os.replace(os.path.join(tmp, "peak.cal"), cal)
            pred = predict(a, tools, cal, n, batch, nodes)
            row = {"mode": mode, "ranks": n, "nodes": nodes, "layout": "DP %d" % n, "batch": batch,
                   "step_s": t, "pred_step_s": pred, "tokens_per_s": batch * a.seq / t,
                   "launcher": a.launcher, "model": a.model}
            rows.append(row)
            print("%-6s %3d ranks on %d node%s  batch %4d  measured %.4f s  predicted %s  %.0f tokens/s"
                  % (mode, n, nodes, "" if nodes == 1 else "s", batch, t,
                     "%.4f s" % pred if pred else "-", row["tokens_per_s"]), flush=True)
    out = os.path.join(a.out, "scale.jsonl")
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    run([sys.executable, tools["report"], "--scaling", out, "-o", os.path.join(a.out, "scale.html"),
         "--svg-dir", os.path.join(a.out, "svg"), "--title", "whale-train scaling (%s, %s)" % (a.model, a.launcher)])
    for mode in modes:
        rs = [r for r in rows if r["mode"] == mode]
        if len(rs) > 1:
            b0 = rs[0]
            eff = ["%d: %.2f" % (r["ranks"], (b0["step_s"] * b0["ranks"] / (r["ranks"] * r["step_s"])) if mode == "strong"
                                 else b0["step_s"] / r["step_s"]) for r in rs]
            print("%s scaling efficiency (measured): %s" % (mode, ", ".join(eff)))
    print("load average: %s (other jobs on this machine distort the figures)" % open("/proc/loadavg").read().split()[:3])
    print("wrote %s, %s" % (out, os.path.join(a.out, "scale.html")))


if __name__ == "__main__":
    main()
