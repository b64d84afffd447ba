#!/bin/bash
# whale-train's checkpoint policies: the stall of each save in the metrics
# and the summary; WHALE_CKPT_BUSY=defer postpones a save due while the
# previous one is still written (slowed by the fault hook) instead of
# waiting, and the last step is saved anyway; --ckpt-milestone-every and
# SIGUSR2 make milestones that --ckpt-keep never removes (the site's
# defaults through the plan); delta saves
# resume (a verify of the delta checks its base too).
# usage: train_ckpt_retain.sh WHALE_TRAIN WHALE_CKPT SOURCE_ROOT
set -u
train=$1 tool=$2 src=$3
d=$(mktemp -d /tmp/whale-train-retain-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat "$src"/runtime/src/ckpt/*.c > "$d/corpus.txt"
# --peak-gflops: no sgemm measurement at start (seconds on a loaded machine)
args=(--model gpt-tiny --data "$d/corpus.txt" --batch 4 --seq 32 --threads 1 --no-progress
      --peak-gflops 100)

# 1. defer: every step is due, each save's write sleeps 60 ms per file, a
#    step takes milliseconds: most saves are postponed, none waited for
WHALE_CKPT_BUSY=defer WHALE_CKPT_FAULT=slow_ms=60 "$train" "${args[@]}" --steps 8 \
    --whale-ckpt-dir "$d/ck1" --whale-ckpt-every 1 --metrics "$d/m1.jsonl" > "$d/out1" 2>&1 ||
    { cat "$d/out1"; fail "the defer run"; }
python3 - "$d/m1.jsonl" "$d/out1" <<'PY' || fail "defer: metrics or summary"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step" in l]
summ = [json.loads(l)["summary"] for l in open(sys.argv[2]) if l.startswith('{"summary"')]
assert summ, "no summary line"
c = summ[0]["checkpoints"]
for k in ("saves", "stall_s", "stall_per_save_s", "stall_max_s", "stall_pct_of_run"):
    assert k in c, k
# postponed, not waited for: fewer saves than due steps, the last one saved
assert 1 <= c["saves"] < 8, c
per = [l for l in steps if "ckpt_save_stall_s" in l]
assert per and all(l["ckpt_save_step"] < l["step"] for l in per), per
print("defer: %d saves of 8 due, stall per save %.4f s" % (c["saves"], c["stall_per_save_s"]))
PY
[ -e "$d/ck1/step-00000008/manifest.json" ] || fail "defer: the last step was not saved"

# 2. milestones every 4 steps (whale.conf's site default, carried by the
#    plan), and SIGUSR2 (the next save) with --ckpt-keep 1 (over the site's
#    5): the newest and the milestones stay, nothing else. The run is slowed
#    so the signal lands before its last save starts.
WHALE_PLAN='{"ckpt_keep": 5, "ckpt_milestone_every": 4}' WHALE_CKPT_FAULT=slow_ms=40 \
    "$train" "${args[@]}" --steps 8 --whale-ckpt-dir "$d/ck2" \
    --whale-ckpt-every 2 --ckpt-keep 1 --metrics "$d/m2.jsonl" > "$d/out2" 2>&1 &
pid=$!
for _ in $(seq 3000); do
    [ -s "$d/m2.jsonl" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
done
kill -USR2 "$pid" 2>/dev/null
wait "$pid" || { cat "$d/out2"; fail "the milestone run"; }
for s in 4 8; do
    [ -e "$d/ck2/step-0000000$s/milestone.json" ] || fail "step $s is no milestone: $(ls "$d/ck2")"
done
for s in "$d"/ck2/step-*; do
    [ -e "$s/milestone.json" ] || [ "${s##*/}" = step-00000008 ] ||
        fail "keep 1 left a non-milestone behind: ${s##*/}"
done
grep -l '"signal"' "$d"/ck2/step-*/milestone.json >/dev/null 2>&1 ||
    fail "SIGUSR2: no milestone marked by the signal: $(cat "$d"/ck2/step-*/milestone.json)"

# 4. delta saves: resume from a delta, verify covers its base
WHALE_CKPT_DELTA=3 "$train" "${args[@]}" --steps 6 --whale-ckpt-dir "$d/ck4" \
    --whale-ckpt-every 2 --ckpt-keep 1 --metrics "$d/m4.jsonl" > "$d/out4" 2>&1 ||
    { cat "$d/out4"; fail "the delta run"; }
grep -q '"delta_bases"' "$d/ck4/step-00000006/manifest.json" || fail "step 6 is not a delta"
[ -e "$d/ck4/step-00000002" ] || fail "the base of the kept delta was removed: $(ls "$d/ck4")"
"$tool" verify "$d/ck4" > "$d/v4" 2>&1 || { cat "$d/v4"; fail "verify of the delta"; }
WHALE_CKPT_DELTA=3 "$train" "${args[@]}" --steps 8 --whale-ckpt-dir "$d/ck4" --resume latest \
    --metrics "$d/m5.jsonl" > "$d/out5" 2>&1 || { cat "$d/out5"; fail "resume from a delta"; }
grep -q '"step":7' "$d/m5.jsonl" || fail "the resumed run did not start at step 7"
echo "ok: defer, milestones (every, SIGUSR2), delta resume"
