#!/usr/bin/env python3
"""Mixed precision tracks fp32: whale-train on the README's corpus (the Python
standard library's sources, as contrib/quickstart.sh builds it) in fp32, bf16
and fp16 from the same seed and data, loss every 25 steps side by side, and
the final loss (mean of the last 25 steps) of each 16-bit run against fp32.

  contrib/bench/precision-curves.py --build build [--steps 300] [--model gpt-small]
      [--batch 16] [--seq 128] [--threads 2] [--tolerance 0.02] [--parallel]

Exits 1 when a 16-bit run's final loss is further than --tolerance
(relative) from fp32's, or a run skipped more than a few steps.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def start(build, prec, a, corpus, tmp):
    exe = os.path.join(build, "runtime", "tools", "train", "whale-train")
    metrics = os.path.join(tmp, f"m-{prec}.jsonl")
    return subprocess.Popen([exe, "--model", a.model, "--data", corpus, "--steps", str(a.steps),
                             "--batch", str(a.batch), "--seq", str(a.seq), "--lr", str(a.lr),
                             "--threads", str(a.threads), "--precision", prec, "--no-progress",
                             "--log-every", "1000000", "--metrics", metrics],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def result(prec, tmp):
    metrics = os.path.join(tmp, f"m-{prec}.jsonl")
    rows = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')]
    summ = [json.loads(l) for l in open(metrics) if l.startswith('{"summary"')][0]["summary"]
    return rows, summ


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--model", default="gpt-small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--corpus", default="")
    ap.add_argument("--parallel", action="store_true",
                    help="run the three precisions at the same time (tokens/s then means little)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = a.corpus
        if not corpus:
            corpus = os.path.join(tmp, "corpus.txt")
            with open(corpus, "wb") as out:
                for p in sorted(glob.glob("/usr/lib/python3*/*.py")):
                    out.write(open(p, "rb").read())
        precs = ("fp32", "bf16", "fp16")
        if a.parallel:  # the curves do not depend on timing: run the three at once
            procs = {p: start(a.build, p, a, corpus, tmp) for p in precs}
        else:
            procs = {}
            for p in precs:
                procs[p] = start(a.build, p, a, corpus, tmp)
                procs[p].wait()
        for p, pr in procs.items():
            if pr.wait():
                sys.exit(f"whale-train --precision {p} failed ({pr.returncode})")
        res = {p: result(p, tmp) for p in precs}
    print(f"{a.model}, batch {a.batch} x seq {a.seq}, lr {a.lr}, {a.steps} steps, corpus "
          f"{os.path.basename(corpus)} (Python stdlib sources)")
    print(f"{'step':>5} {'fp32':>8} {'bf16':>8} {'fp16':>8}   (loss; fp16 loss scale)")
    for s in range(a.every, a.steps + 1, a.every):
        r = {p: res[p][0][s - 1] for p in res}
        print(f"{s:5d} {r['fp32']['loss']:8.4f} {r['bf16']['loss']:8.4f} {r['fp16']['loss']:8.4f}"
              f"   {r['fp16']['loss_scale']:.0f}")
    bad = False
    k = min(a.every, a.steps)
    final = {p: sum(x["loss"] for x in res[p][0][-k:]) / k for p in res}
    for p in ("bf16", "fp16"):
        rel = (final[p] - final["fp32"]) / final["fp32"]
        sk = res[p][1]["skipped_steps"]
        ok = abs(rel) <= a.tolerance and sk <= 3
        bad |= not ok
        print(f"final loss (mean of the last {k} steps): {p} {final[p]:.4f} vs fp32 "
              f"{final['fp32']:.4f}: {100 * rel:+.2f} % (tolerance {100 * a.tolerance:.0f} %), "
              f"{sk} skipped steps, tokens/s {res[p][1]['tokens_per_s']:.0f} vs "
              f"{res['fp32'][1]['tokens_per_s']:.0f} -> {'ok' if ok else 'FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
