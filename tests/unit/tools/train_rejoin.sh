#!/usr/bin/env bash
# A restarted task rejoins a running elastic step and DP grows back: a DP 2
# run without spares (WHALE_ELASTIC=1) loses rank 1 at step 6 and shrinks
# to DP 1; the same slot started again (task 1's contract environment,
# WHALE_JOIN=1, the step's join directory) joins as a spare (JOINED) and
# the step grows back to DP 2 at a step boundary (GROWN); the survivor's
# losses equal the uninterrupted DP 2 run's at every one of 20 steps
# (within the shrink tests' 1e-5). Rank 0 pauses 3 s after the shrink
# (WHALE_FAULT pause) so that the short run is still going when the
# restarted task asks. Also: a join request with a wrong secret is
# refused and changes nothing.
# usage: train_rejoin.sh WHALE_RUN WHALE_TRAIN
set -u
RUN=$1 TRAIN=$2
T=$(mktemp -d /tmp/whale-rejoin-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | grep -v ': trace:' | tail -n 25; fail=1; fi
}
reldiff() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def losses(f):
    by_step = {}
    for l in open(f):
        r = json.loads(l)
        if "loss" in r and "step" in r and "summary" not in r:
            by_step[r["step"]] = r["loss"]
    return [by_step[k] for k in sorted(by_step)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != 20 or len(b) != 20:
    print("steps %d %d" % (len(a), len(b))); sys.exit(0)
print("%.3g" % max(abs(x - y) / abs(x) for x, y in zip(a, b)))
PY
}
within() {
  python3 -c "import sys; v=sys.argv[1]; sys.exit(0 if not v.startswith('steps') and float(v) <= float(sys.argv[2]) else 1)" "$1" "$2"
}
for i in $(seq 400); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
el=(--model gpt-tiny --data "$T/data.txt" --batch 8 --seq 16 --steps 20 --no-progress --threads 1
    --log-every 1 --device cpu)
# TCP over loopback, one simulated node per task: no shared-memory segment
# between the restarted process and the others
export WHALE_UCX_PEER_MODE=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo WHALE_PEER_TIMEOUT=8
"$RUN" -n 2 --nodes 2 "$TRAIN" "${el[@]}" --metrics "$T/ref.jsonl" >/dev/null 2>&1
# task 1's contract, as whale-run gives it (the documented way to restart a slot)
"$RUN" -n 2 --nodes 2 env 2>/dev/null | sed -n 's/^1: //p' | grep -E '^WHALE_' > "$T/env1"
J="$T/join"
(WHALE_JOIN_DIR=$J WHALE_ELASTIC=1 WHALE_FAULT="kill:rank=1:step=6;pause:rank=0:step=9" \
   timeout 250 "$RUN" -n 2 --nodes 2 "$TRAIN" "${el[@]}" --metrics "$T/k.jsonl" > "$T/k.out" 2>&1) &
for _ in $(seq 1200); do ls "$J"/join-*.json >/dev/null 2>&1 && break; sleep 0.1; done
# a stray process with the wrong secret (a copy of the join file it could
# not have read) is refused
bad=$(ls "$J"/join-*.json 2>/dev/null | head -n 1)
if [ -n "$bad" ]; then
  mkdir -p "$T/stray" && chmod 700 "$T/stray"
  sed 's/"secret":"[0-9a-f]*"/"secret":"'"$(printf '0%.0s' $(seq 64))"'"/' "$bad" > "$T/stray/$(basename "$bad")"
  chmod 600 "$T/stray/$(basename "$bad")"
fi
# shellcheck disable=SC2046
(env $(cat "$T/env1") WHALE_JOIN=1 WHALE_JOIN_DIR="$T/stray" WHALE_ELASTIC=1 \
   timeout 5 "$TRAIN" "${el[@]}" > "$T/stray.out" 2>&1) &
# shellcheck disable=SC2046
env $(cat "$T/env1") WHALE_JOIN=1 WHALE_JOIN_DIR="$J" WHALE_ELASTIC=1 \
  timeout 200 "$TRAIN" "${el[@]}" > "$T/j.out" 2>&1
jrc=$?
wait
out=$(cat "$T/k.out" "$T/j.out")
d=$(reldiff "$T/ref.jsonl" "$T/k.jsonl")
check "DP 2 -> 1 -> 2: killed rank 1's slot restarted, joined as a spare, DP grown back, same losses as the uninterrupted DP 2 run (max rel diff $d <= 1e-5)" \
  '[ $jrc -eq 0 ] && within "$d" 1e-5 && grep -q "epoch 1 SHRUNK" "$T/k.out" &&
   grep -q "JOINED: task 1 on node1 joined as a spare" "$T/k.out" &&
   grep -q "GROWN: rank 1 -> task 1" "$T/k.out" && grep -q "joined step .* as a spare" "$T/j.out" &&
   grep -q "took rank 1.s place" "$T/j.out"'
out=$(cat "$T/k.out")
check "a join request with a wrong secret is refused and changes nothing" \
  'grep -q "refused a join request for task 1 with a wrong secret" "$T/k.out" &&
   ! grep -q "epoch 4" "$T/k.out"'
check "the join file is private while the step runs and gone after it" \
  '[ -n "$bad" ] && ! ls "$J"/join-*.json >/dev/null 2>&1'
exit $fail
