#!/usr/bin/env python3
"""Blocked (flash-style) vs plain causal attention on the CPU: time of one
forward and one backward, and the activation bytes each keeps for backward,
at sequence lengths 128..2048 (one head count and size; both kernels in the
same run, alternating, best of --reps).

    python3 contrib/bench/attention-cpu.py [--build build] [--batch 1]
        [--heads 8] [--head-size 64] [--seqs 128,256,512,1024,2048]
        [--reps 3] [--threads N] [--json out.json]

Kept for backward beyond q|k|v and the output (which both keep): plain the
probabilities (B,H,T,T) in fp32; blocked the per-row log-sum-exp (B,H,T).
The benchmark program is build/tests/unit/engine/attn_bench."""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--seqs", default="128,256,512,1024,2048")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tests", "unit", "engine", "attn_bench")
    if not os.access(exe, os.X_OK):
        sys.exit("attention-cpu: %s not found: build first (meson setup %s && ninja -C %s)"
                 % (exe, a.build, a.build))
    rows = []
    print("causal attention, B=%d heads=%d head size=%d, %d thread(s), best of %d"
          % (a.batch, a.heads, a.head_size, a.threads, a.reps))
    print("%6s | %12s %12s | %12s %12s | %7s | %12s %12s %8s"
          % ("T", "plain fwd", "plain bwd", "blocked fwd", "blocked bwd", "speedup",
             "plain kept", "blocked kept", "ratio"))
    for t in [int(x) for x in a.seqs.split(",")]:
        out = subprocess.run([exe, str(a.batch), str(a.heads), str(a.head_size), str(t),
                              str(a.reps), str(a.threads)], capture_output=True, text=True)
        if out.returncode:
            sys.exit("attention-cpu: attn_bench failed at T=%d: %s" % (t, out.stderr.strip()))
        r = json.loads(out.stdout)
        rows.append(r)
        plain = r["plain_fwd_ms"] + r["plain_bwd_ms"]
        blk = r["blocked_fwd_ms"] + r["blocked_bwd_ms"]
        print("%6d | %9.2f ms %9.2f ms | %9.2f ms %9.2f ms | %6.2fx | %9.2f MiB %9.3f MiB %7.0fx"
              % (t, r["plain_fwd_ms"], r["plain_bwd_ms"], r["blocked_fwd_ms"],
                 r["blocked_bwd_ms"], plain / blk, r["plain_kept_bytes"] / 2**20,
                 r["blocked_kept_bytes"] / 2**20,
                 r["plain_kept_bytes"] / r["blocked_kept_bytes"]))
        if r["max_out_diff"] > 1e-4:
            sys.exit("attention-cpu: outputs differ by %g at T=%d" % (r["max_out_diff"], t))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
