#!/usr/bin/env python3
"""Merge per-rank WHALE_TRACE files into one Chrome/Perfetto trace.

Each rank's file uses its rank as the process id and CLOCK_MONOTONIC
microseconds as timestamps: ranks of one machine (and the minicluster's
namespace nodes) line up exactly; ranks on different hosts are offset by the
difference of their boot times.

    python3 contrib/bench/trace-merge.py trace-rank*.json > all.json
"""
import json
import sys


def main(paths):
    if not paths:
        sys.stderr.write(__doc__)
        return 2
    events = []
    for p in paths:
        with open(p) as f:
            events.extend(json.load(f)["traceEvents"])
    json.dump({"displayTimeUnit": "ms", "traceEvents": events}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
