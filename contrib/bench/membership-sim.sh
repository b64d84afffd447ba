#!/usr/bin/env bash
# Cost and speed of the scalable membership protocol (member/mp.h), from the
# deterministic simulator (tests/sim/el_sim) at 1k, 4k and 16k ranks, 8 per
# node, with a fixed one-way latency of 10 us and no jitter:
#   heartbeat messages and bytes per rank per second (a quiet period),
#   time to detect and to agree after a task crash and after a node loss
#   (agreement also in one-way network hops: O(log N) tree levels),
#   membership state per node agent and per rank,
# next to the all-to-all detector the runtime had before (every task
# heartbeats every other one each 0.5 s, 40-byte headers), and the wall
# time of the simulator's seed runs (the test command's budget).
#
# usage: contrib/bench/membership-sim.sh [BUILD_DIR] [SEEDS]   (default build, 100)
set -u
BUILD=${1:-build}
SEEDS=${2:-100}
SIM=$BUILD/tests/sim/el_sim
[ -x "$SIM" ] || { echo "membership-sim: build first ($SIM)" >&2; exit 2; }
echo "load: $(uptime | sed 's/.*load average: //')"
for n in 1024 4096 16384; do
  "$SIM" --bench --ranks "$n" --per-node 8 || exit 1
  awk -v n="$n" 'BEGIN { m = (n - 1) / 0.5; printf "    all-to-all before: %.0f msg/rank/s %.0f B/rank/s\n", m, m * 40 }'
done
for n in 1024 16384; do
  "$SIM" --ranks "$n" --per-node 8 --seeds "$SEEDS" --quiet || exit 1
done
