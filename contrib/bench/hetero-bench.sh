#!/usr/bin/env bash
# DP shares on nodes of different speeds: a 4-node minicluster whose nodes
# run under CPU quotas of speeds 1, 1, 0.5, 0.5 (whale-minicluster --speeds),
# gpt-small, DP 4 under srun, one rank per node.
#
#  1. the even split (B/4 micro-batches each) against the balanced one
#     (--dp-shares in proportion to the speeds): step time ratio, target
#     >= 1.35x (ideal 1.5x = sum of speeds / (4 x slowest));
#  2. each against the planner's prediction, target within 10 %: whale-plan
#     takes the links whale-bench calib measured on the four nodes and its
#     compute fitted (--fit-step) on the even DP 4 step measured with every
#     node at speed 1 (the speeds set back after it), then predicts the even
#     and balanced DP 4 plans on speed-1 ranks; a replica
#     at speed s computes (forward, backward, optimizer) 1/s as fast, the
#     exposed DP communication is unchanged; the step is its slowest replica;
#  3. --dp-shares=auto, and node2 throttled to half speed at step 50
#     (whale-minicluster speed node2 0.5, a real quota change): steps until
#     the run is back at >= 90 % of the rate balanced for the new speeds
#     (measured over the last steps), target <= 20.
# Prints the figures, the rebalances and the load average; asserts nothing.
#
#   contrib/bench/hetero-bench.sh [-i INSTANCE] [-b BUILD_DIR] [-u CORES] [-B BATCH] [-s STEPS]
#
# -u: cores that speed 1 stands for (default 0.2: the four quotas add up
#     to 0.6 of this machine's 2 cores, so that they bind when other work
#     loads it; at 0.4 a load average of 16 compressed the ratio to 1.15x)
# -B: global batch in micro-batches of 1 sample (default 24; a multiple of 12)
# -s: steps of the throttled run (default 90; the throttle is at step 50)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${WHALE_BUILD_DIR:-$src/build}
inst=${WHALE_MC_INSTANCE:-7}
unit=0.2
batch=24
steps=90
while getopts "i:b:u:B:s:h" o; do
  case $o in
    i) inst=$OPTARG ;;
    b) build=$OPTARG ;;
    u) unit=$OPTARG ;;
    B) batch=$OPTARG ;;
    s) steps=$OPTARG ;;
    h) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
[ $((batch % 12)) -eq 0 ] || { echo "hetero-bench: -B $batch: a multiple of 12" >&2; exit 2; }
[ "$steps" -ge 70 ] || { echo "hetero-bench: -s $steps: at least 70" >&2; exit 2; }
MC=$src/contrib/minicluster/whale-minicluster
T=$(mktemp -d /tmp/hetero-bench-XXXXXX)
cleanup() { "$MC" -i "$inst" down >/dev/null 2>&1 || true; rm -rf "$T"; }
trap cleanup EXIT
export WHALE_MODEL_PATH=$src/config/models
"$MC" -i "$inst" -b "$build" --speed-unit "$unit" up 4 --speeds 1,1,0.5,0.5 >/dev/null
eval "$("$MC" -i "$inst" env)"
cat "$src"/runtime/src/*/*.c > "$T/corpus.txt"
q=$((batch / 4))          # even: micro-batches per replica
b1=$((batch / 3))         # balanced 2:2:1:1 -> batch/3, batch/3, batch/6, batch/6
b2=$((batch / 6))
common=(--model gpt-small --data "$T/corpus.txt" --micro-batch 1 --threads 1 --no-progress
        --log-every 1000)
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# median step_s over steps FROM..TO of a metrics file
med() {
  python3 - "$@" <<'PY'
import json, sys, statistics
f, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = {}
for l in open(f):
    if l.startswith('{"step"'):
        r = json.loads(l); d[r["step"]] = r["step_s"]
v = [d[k] for k in d if a <= k <= b]
print("%.4f" % statistics.median(v))
PY
}

echo "hetero-bench: minicluster $inst, speeds 1,1,0.5,0.5 (speed 1 = $unit cores), gpt-small, DP 4," \
     "global batch $batch (micro-batch 1); load average at start $load0"

# the planner's input: the same DP 4 step with every node at speed 1 (a
# uniform cluster: compute, the collectives and what the ranks' progress
# threads take from the quota), and the links measured there
for n in 3 4; do "$MC" -i "$inst" speed "node$n" 1 2>/dev/null; done
timeout 600 srun -N4 -n4 --whale-dp=4 whale-train "${common[@]}" --grad-accum "$q" --steps 10 \
  --metrics "$T/one.jsonl" >"$T/one.log" 2>&1 \
  || { echo "hetero-bench: the uniform run failed:"; tail -5 "$T/one.log"; exit 1; }
t_one=$(med "$T/one.jsonl" 3 10)
# (whale-bench calib's GEMM peak is left out: the fit sets the compute)
timeout 600 srun -N4 -n4 --whale-dp=4 whale-bench calib -o "$T/links.conf" -n 3 >"$T/calib.log" 2>&1 \
  || { echo "hetero-bench: whale-bench calib failed:"; tail -5 "$T/calib.log"; exit 1; }
for n in 3 4; do "$MC" -i "$inst" speed "node$n" 0.5 2>/dev/null; done

run_dp4() {  # metrics, steps, extra args...
  local m=$1 n=$2; shift 2
  timeout 900 srun -N4 -n4 --whale-dp=4 whale-train "${common[@]}" --steps "$n" --metrics "$m" "$@" \
    >"$m.log" 2>&1 || { echo "hetero-bench: whale-train failed ($m):"; tail -5 "$m.log"; exit 1; }
}
run_dp4 "$T/even.jsonl" 12 --grad-accum "$q"
t_even=$(med "$T/even.jsonl" 3 12)
run_dp4 "$T/bal.jsonl" 12 --grad-accum "$q" --dp-shares "$b1,$b1,$b2,$b2"
t_bal=$(med "$T/bal.jsonl" 3 12)

# the planner: its compute fitted on the uniform step, then the DP 4 plans
# at speed 1; a replica at speed s computes 1/s as fast
plan=(whale-plan -m gpt-small -b "$batch" -G cpu -g 1 --cores-per-node 1 --threads 1)
grep -v '^Device=' "$T/links.conf" > "$T/links-only.conf"
"${plan[@]}" -N 4 --dp 4 --tp 1 --pp 1 --microbatch 1 --zero 0 --recompute none \
  --calib "$T/links-only.conf" --fit-step "$t_one" --calib-out "$T/calib.conf" >"$T/fit.log" 2>&1 \
  || { echo "hetero-bench: whale-plan --fit-step failed:"; tail -5 "$T/fit.log"; exit 1; }
predict() {  # micro-batches per replica -> "compute+optimizer exposed_comm" at speed 1
  printf '{"version":1,"tp":1,"pp":1,"dp":4,"micro_batch":1,"num_micro_batches":%d,"zero":0,"recompute":"none"}\n' "$1" > "$T/p.json"
  "${plan[@]}" -N 4 --calib "$T/calib.conf" -p "$T/p.json" 2>/dev/null | python3 -c '
import re, sys
t = sys.stdin.read()
c = float(re.search(r"compute ([0-9.e+-]+)", t).group(1))
x = float(re.search(r"DP/ZeRO exposed ([0-9.e+-]+)", t).group(1))
o = float(re.search(r"optimizer ([0-9.e+-]+)", t).group(1))
print(c + o, x)'
}
read -r ce xe < <(predict "$q")
read -r c1 x1 < <(predict "$b1")
read -r c2 _ < <(predict "$b2")
p_even=$(python3 -c "print('%.4f' % ($ce / 0.5 + $xe))")
p_bal=$(python3 -c "print('%.4f' % (max($c1 / 1.0, $c2 / 0.5) + $x1))")

# --dp-shares=auto, node2 to half speed at step 50
run_dp4 "$T/auto.jsonl" "$steps" --grad-accum "$q" --dp-shares=auto &
pid=$!
until grep -q '^{"step":50,' "$T/auto.jsonl" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
"$MC" -i "$inst" speed node2 0.5 2>/dev/null
wait "$pid" || { echo "hetero-bench: the throttled run failed:"; tail -5 "$T/auto.jsonl.log"; exit 1; }
load1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$T" "$t_even" "$t_bal" "$p_even" "$p_bal" "$t_one" "$steps" "$load0" "$load1" <<'PY'
import json, statistics, sys
T, t_even, t_bal, p_even, p_bal, t_one = sys.argv[1], *map(float, sys.argv[2:7])
steps, load0, load1 = int(sys.argv[7]), sys.argv[8], sys.argv[9]
recs = [json.loads(l) for l in open(T + "/auto.jsonl") if l.startswith('{"step"')]
st = {r["step"]: r["step_s"] for r in recs}
ev = [r["rebalance"] for r in recs if "rebalance" in r]
before = statistics.median(st[k] for k in range(30, 51))
after = statistics.median(st[k] for k in range(steps - 14, steps + 1))  # balanced for the new speeds
back = None
for k in range(51, steps - 1):
    if statistics.median([st[k], st[k + 1], st[k + 2]]) <= after / 0.9:
        back = k - 50
        break
ok = lambda c: "ok" if c else "MISSED"
r = t_even / t_bal
print("uniform, all at speed 1, even split: %.4f s/step (whale-plan fitted on it)" % t_one)
print("even split      : %.4f s/step measured, %.4f predicted (%+.1f %%)" % (t_even, p_even, 100 * (p_even / t_even - 1)))
print("balanced split  : %.4f s/step measured, %.4f predicted (%+.1f %%)" % (t_bal, p_bal, 100 * (p_bal / t_bal - 1)))
print("balanced / even : %.2fx faster (target >= 1.35x, ideal 1.5x): %s" % (r, ok(r >= 1.35)))
print("prediction      : even %s, balanced %s (target within 10 %%)" % (
    ok(abs(p_even / t_even - 1) <= 0.10), ok(abs(p_bal / t_bal - 1) <= 0.10)))
print("auto run        : steps 30-50 %.4f s/step; node2 at half speed from step 50; last 15 steps %.4f s/step" % (before, after))
for e in ev:
    print("  rebalance after step %d (%s): %s -> %s, predicted %+.0f %%" % (e["step"], e["reason"], e["from"], e["to"], 100 * e["predicted_gain"]))
print("back to >= 90 %% of the balanced rate: %s (target <= 20 steps): %s" % (
    "%d steps after the throttle" % back if back is not None else "never", ok(back is not None and back <= 20)))
print("load average: %s at start, %s at end (%d cores)" % (load0, load1, __import__("os").cpu_count()))
PY
