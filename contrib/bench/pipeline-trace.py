#!/usr/bin/env python3
"""Where a pipeline's idle time goes, from WHALE_TRACE files of one run.

    WHALE_TRACE=/tmp/t.json whale-run -n 2 --pp 2 build/tests/unit/parallel/pp_sleep \\
        --schedule interleaved --interleave 2 -m 16
    python3 contrib/bench/pipeline-trace.py /tmp/t.json --pp 2 [--interleave 2]

Per step (the first, which wires up endpoints, is skipped) and for pipeline
rank 0:
  measured  rank 0's span / its own passes - 1 (first pass start to last end)
  replay    the same schedule replayed with the passes' measured durations,
            both ranks, and no transfer or executor time: what the order
            alone costs given how long each pass really took
  executor  measured - replay: what transfers, wake-ups and the executor
            between passes add (the part the executor can change)
  theory    (p-1)/(v m)
and per rank the median gap between two passes, split into receive wait
and the rest (posting, sends, reaping). Reads the files FILE-rank<R>.json.
"""
import argparse
import json
import os
import statistics
import sys


def load(prefix, r):
    base, ext = os.path.splitext(prefix)
    with open("%s-rank%d%s" % (base, r, ext or ".json")) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    passes = sorted((e for e in ev if e["cat"] in ("forward", "backward")), key=lambda e: e["ts"])
    recvs = sorted((e for e in ev if e["cat"] == "recv"), key=lambda e: e["ts"])
    return passes, recvs


def op(e):
    return (0 if e["cat"] == "forward" else 1, e["args"]["chunk"], e["args"]["mb"])


def replay(p, v, seq, dur):
    """Makespan of rank 0 with the given per-pass durations, no transfer time."""
    S, end, clock, nxt = p * v, {}, [0.0] * p, [0] * p
    n = len(seq[0])
    while any(nxt[r] < n for r in range(p)):
        moved = False
        for r in range(p):
            while nxt[r] < n:
                k, c, mb = seq[r][nxt[r]]
                vs = c * p + r
                key = (0, vs - 1, mb) if k == 0 and vs > 0 else \
                      (1, vs + 1, mb) if k == 1 and vs < S - 1 else None
                ready = 0.0
                if key:
                    if key not in end:
                        break
                    ready = end[key]
                t0 = max(clock[r], ready)
                end[(k, vs, mb)] = clock[r] = t0 + dur[(r, k, c, mb)]
                nxt[r] += 1
                moved = True
        if not moved:
            raise SystemExit("pipeline-trace: the traced order deadlocks in replay")
    return clock[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="the WHALE_TRACE path given to the run")
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--interleave", type=int, default=1)
    a = ap.parse_args()
    p, v = a.pp, a.interleave
    P, R = {}, {}
    for r in range(p):
        P[r], R[r] = load(a.trace, r)
    m = max(e["args"]["mb"] for e in P[0]) + 1
    per = 2 * v * m
    steps = len(P[0]) // per
    if steps < 2:
        sys.exit("pipeline-trace: need at least 2 steps in the trace")
    th = (p - 1) / (v * m)
    print("p=%d v=%d m=%d, %d steps; theory (p-1)/(vm) = %.4f" % (p, v, m, steps, th))
    print("%5s %10s %10s %10s %10s" % ("step", "measured", "replay", "executor", "ratio"))
    for s in range(1, steps):
        seq, dur = {}, {}
        for r in range(p):
            ops = P[r][s * per:(s + 1) * per]
            seq[r] = [op(e) for e in ops]
            for e in ops:
                dur[(r,) + op(e)] = e["dur"]
        busy = sum(dur[(0,) + o] for o in seq[0])
        last = P[0][(s + 1) * per - 1]
        meas = (last["ts"] + last["dur"] - P[0][s * per]["ts"]) / busy - 1
        rep = replay(p, v, seq, dur) / busy - 1
        print("%5d %10.4f %10.4f %10.4f %9.2fx" % (s, meas, rep, meas - rep, meas / th))
    for r in range(p):
        gaps, waits = [], []
        for x, y in zip(P[r][per:-1], P[r][per + 1:]):
            x1 = x["ts"] + x["dur"]
            w = sum(e["dur"] for e in R[r] if e["ts"] >= x1 - 1 and e["ts"] + e["dur"] <= y["ts"] + 1)
            gaps.append(y["ts"] - x1)
            waits.append(w)
        rest = [g - w for g, w in zip(gaps, waits)]
        print("rank %d: gap between passes median %.1f us (receive wait %.1f us, the rest %.1f us)"
              % (r, statistics.median(gaps), statistics.median(waits), statistics.median(rest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
