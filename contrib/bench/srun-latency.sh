#!/usr/bin/env bash
# Added srun latency of the Whale plugin per step, on a running cluster
# (the minicluster: eval "$(contrib/minicluster/whale-minicluster -i K env)").
# Steps run inside one allocation (salloc --no-shell), so job scheduling and
# node cleanup between jobs do not blur the figures. Interleaves three
# variants of the same `srun -N4 true` step and prints medians:
#   none     srun without the plugin (its slurm.conf copy loads an empty
#            plugstack; slurmstepd still has it but it stays idle)
#   idle     plugin loaded, no --whale option (what every other job pays)
#   whale    srun -N4 --whale-tp=1 --whale-pp=1 true: options, site config,
#            topology, mapping in srun and in every slurmstepd, task env
# Usage: contrib/bench/srun-latency.sh [RUNS] [NODES]   (default 15, 4)
set -euo pipefail
RUNS=${1:-15}
NODES=${2:-4}
: "${SLURM_CONF:?export SLURM_CONF (eval \"\$(contrib/minicluster/whale-minicluster -i K env)\")}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: > "$TMP/empty-plugstack.conf"
sed -e "s|^PlugStackConfig=.*|PlugStackConfig=$TMP/empty-plugstack.conf|" "$SLURM_CONF" > "$TMP/slurm.conf"
grep -q "^PlugStackConfig=$TMP" "$TMP/slurm.conf" || { echo "srun-latency: no PlugStackConfig in $SLURM_CONF" >&2; exit 1; }

ms() { # run a command, print its wall time in ms
  local a b
  a=$(date +%s%N)
  "$@" >/dev/null 2>"$TMP/err" || { echo "srun-latency: failed: $* ($(tail -1 "$TMP/err"))" >&2; exit 1; }
  b=$(date +%s%N)
  echo $(( (b - a) / 1000000 ))
}

JOB=$(timeout 60 salloc -N"$NODES" --no-shell 2>&1 | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')
[ -n "$JOB" ] || { echo "srun-latency: salloc -N$NODES failed" >&2; exit 1; }
trap 'scancel "$JOB" 2>/dev/null; rm -rf "$TMP"' EXIT
S="srun --jobid=$JOB -N$NODES"
timeout 60 $S true >/dev/null   # warm up
for i in $(seq "$RUNS"); do
  echo "none $(SLURM_CONF=$TMP/slurm.conf ms timeout 60 $S true)"
  echo "idle $(ms timeout 60 $S true)"
  echo "whale $(ms timeout 60 $S --whale-tp=1 --whale-pp=1 true)"
done > "$TMP/times"
# the plugin's own work inside srun (options, config, topology, slurmctld
# step-layout query, mapping, plan), as srun -v reports it
for i in $(seq "$RUNS"); do
  timeout 60 $S -v --whale-tp=1 --whale-pp=1 true 2>&1 | sed -n 's/.*plugin time in srun \([0-9.]*\) ms.*/srunwork \1/p'
done >> "$TMP/times"
python3 - "$TMP/times" "$RUNS" "$NODES" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    t.setdefault(k, []).append(float(v))
m = {k: statistics.median(v) for k, v in t.items()}
print("srun -N%s true, %s runs each (median ms): none %.0f, idle %.0f, whale %.0f"
      % (sys.argv[3], sys.argv[2], m["none"], m["idle"], m["whale"]))
print("added by the plugin: idle %+.0f ms, whale step %+.0f ms (target < 20 ms)"
      % (m["idle"] - m["none"], m["whale"] - m["none"]))
if "srunwork" in m:
    print("plugin work inside srun for a whale step (srun -v): median %.2f ms" % m["srunwork"])
PY
