#!/usr/bin/env bash
# Uneven data parallelism: DP replicas with different shares of the global
# batch (--dp-shares, the plan's dp_batch) train with the losses of one rank
# (fp32: <= 1e-6 relative at every one of 20 steps; bf16: within what the
# even split itself differs from one rank by, the 16-bit rounding of the
# summed gradients), at ZeRO 0, 1 and 3, under whale-run; the even shares
# reproduce the run without shares exactly; bad shares are refused naming
# the option or plan field; an elastic shrink from DP 4 to 3 keeps the
# global batch with uneven shares (ZeRO 0, 1 and 3, state from memory; at
# ZeRO 1 and 3 a second failure, DP 3 -> 2, restores from memory too);
# --dp-shares=auto moves micro-batches away from a slowed replica (recorded
# in the metrics and whale-report's report) with the losses of one rank,
# also at ZeRO 2/3 (micro-batch sizes move) and with PP 2;
# uneven pipeline stages (--pp-layers, WHALE_PP_LAYERS) equal one rank and
# a checkpoint resumes with another split.
# usage: train_uneven.sh WHALE_RUN WHALE_TRAIN [WHALE_REPORT [PART]]
# PART: shares, elastic, pp or all (default); meson runs the three parts as
# three tests so they spread over the cores. Under the sanitizers
# (WHALE_TEST_SANITIZED=1) the precision matrix is fp32 only and the
# shares 3,1 only: the bf16 paths have their own sanitized tests, and the
# memory-relevant cases (shrinks, engine rebuilds, checkpoints) all run.
set -u
RUN=$1 TRAIN=$2 REPORT=${3:-} PART=${4:-all}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
if [ "${WHALE_TEST_SANITIZED:-0}" = 1 ]; then precs="fp32" shares="3,1"; else precs="fp32 bf16" shares="3,1 5,3"; fi
T=$(mktemp -d /tmp/whale-uneven-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi
}
# largest relative loss difference over 20 steps of two metrics files
reldiff() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def losses(f):
    # a step redone after a recovery is logged again: the last line of a step counts
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
within() { # value, tolerance
  python3 -c "import sys; v=sys.argv[1]; sys.exit(0 if not v.startswith('steps') and float(v) <= float(sys.argv[2]) else 1)" "$1" "$2"
}

for i in $(seq 400); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 8 --seq 16 --steps 20 --no-progress --threads 1)

if want shares; then
for prec in $precs; do
  tol=1e-6; [ $prec = bf16 ] && tol=1e-4
  for z in 0 1 3; do
    out=$("$TRAIN" "${common[@]}" --zero $z --precision $prec --metrics "$T/one.jsonl" 2>&1)
    for sh in $shares; do
      [ $prec = bf16 ] && [ $sh = 5,3 ] && [ $z != 1 ] && continue
      out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --zero $z --precision $prec --dp-shares $sh \
            --metrics "$T/u.jsonl" 2>&1); rc=$?
      d=$(reldiff "$T/one.jsonl" "$T/u.jsonl")
      check "$prec ZeRO $z --dp-shares $sh equals one rank over 20 steps (max rel diff $d <= $tol)" \
        '[ $rc -eq 0 ] && within "$d" $tol'
    done
  done
done

# the plan's dp_batch (samples per replica), refused by whale-train before
"$TRAIN" "${common[@]}" --metrics "$T/one.jsonl" >/dev/null 2>&1
printf '{"version":1,"dp":2,"micro_batch":2,"num_micro_batches":2,"dp_batch":[6,2],"global_batch":8}\n' > "$T/plan.json"
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --plan "$T/plan.json" --metrics "$T/u.jsonl" 2>&1); rc=$?
d=$(reldiff "$T/one.jsonl" "$T/u.jsonl")
check "a plan with dp_batch [6,2] runs as planned and equals one rank (max rel diff $d)" \
  '[ $rc -eq 0 ] && within "$d" 1e-6 && [[ "$out" == *"uneven shares"* ]]'

# the even split is the special case: exactly today's samples and losses
"$RUN" -n 2 "$TRAIN" "${common[@]}" --metrics "$T/even.jsonl" >/dev/null 2>&1
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --dp-shares 1,1 --metrics "$T/u.jsonl" 2>&1); rc=$?
d=$(reldiff "$T/even.jsonl" "$T/u.jsonl")
check "--dp-shares 1,1 (micro-batch 4) reproduces the even split exactly" '[ $rc -eq 0 ] && [ "$d" = 0 ]'
fi

if want elastic; then
"$TRAIN" "${common[@]}" --metrics "$T/one.jsonl" >/dev/null 2>&1
# elastic shrink DP 4 -> 3 under whale-run: 8 micro-batches (grad-accum 2 x
# DP 4) do not split over 3 replicas; the survivors run shares 3,3,2 and
# the losses stay those of the uninterrupted run (whale-run's own exit
# status after a killed task is not what this checks)
el=(--model gpt-tiny --data "$T/data.txt" --batch 8 --grad-accum 2 --seq 16 --steps 20
    --no-progress --threads 1 --log-every 1)
"$RUN" -n 4 "$TRAIN" "${el[@]}" --metrics "$T/ref4.jsonl" >/dev/null 2>&1
out=$(WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=3:step=12 timeout 300 "$RUN" -n 4 --keep-going \
      "$TRAIN" "${el[@]}" --metrics "$T/k4.jsonl" 2>&1)
d=$(reldiff "$T/ref4.jsonl" "$T/k4.jsonl")
check "elastic shrink DP 4 -> 3 with 8 micro-batches: shares 3,3,2, same losses (max rel diff $d)" \
  'within "$d" 1e-5 && [[ "$out" == *"elastic: DP 4 -> 3, this replica 3 micro-batches of 1 (global batch 8 kept, uneven shares)"* ]]'

# --dp-shares=auto: the calibration over the first steps moves micro-batches
# away from a replica made 3 times slower (WHALE_SLOWDOWN: it sleeps the
# difference, so the load of the machine cannot hide it); the losses stay
# those of one rank
out=$(WHALE_SLOWDOWN=rank=1:factor=3 "$RUN" -n 2 "$TRAIN" "${common[@]}" --micro-batch 1 --grad-accum 4 \
      --dp-shares=auto --metrics "$T/auto.jsonl" 2>&1); rc=$?
d=$(reldiff "$T/one.jsonl" "$T/auto.jsonl")
ev='"rebalance":{"step":3,"reason":"calibration","from":\[4,4\],"to":\[[5-7],[1-3]\]'
check "--dp-shares=auto: the calibration moves micro-batches to the fast replica, same losses (max rel diff $d)" \
  '[ $rc -eq 0 ] && within "$d" 1e-5 && [[ "$out" == *"rebalance after step 3 (calibration): micro-batches per DP replica 4,4 -> "* ]] &&
   grep -q "$ev" "$T/auto.jsonl"'
if [ -n "$REPORT" ]; then
  out=$("$REPORT" "$T/auto.jsonl" -o "$T/report.html" 2>&1); rc=$?
  check "whale-report lists the rebalance" \
    '[ $rc -eq 0 ] && grep -qE "DP rebalances</td><td>[0-9]+; step 3 \(calibration\): 4,4 → " "$T/report.html"'
fi
# ZeRO 3 reduces at every micro-batch: the calibration moves samples per
# micro-batch (the count stays equal), every rank builds its engine again at
# the step boundary with the same state; the losses stay those of one rank
out=$(WHALE_SLOWDOWN=rank=1:factor=3 "$RUN" -n 2 "$TRAIN" "${common[@]}" --zero 3 --micro-batch 4 \
      --grad-accum 1 --dp-shares=auto --metrics "$T/auto.jsonl" 2>&1); rc=$?
d=$(reldiff "$T/one.jsonl" "$T/auto.jsonl")
check "ZeRO 3 --dp-shares=auto: micro-batch sizes move to the fast replica after step 3, same losses (max rel diff $d <= 1e-6)" \
  '[ $rc -eq 0 ] && within "$d" 1e-6 &&
   [[ "$out" == *"rebalance after step 3 (calibration): samples per micro-batch per DP replica 4,4 -> "* ]]'
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --rebalance=2x 2>&1); rc=$?
check "--rebalance with a bad threshold refused, naming the option and the range" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--rebalance=2x: expected THRESHOLD[:STEPS]"* ]]'

# ZeRO 1 and 3: the dropped replica's shards come from its holder's
# in-memory copy and every survivor's shards are re-cut for DP 3 (no
# checkpoint directory: nothing on disk to fall back to); the survivors set
# up new holders, so a second failure (DP 3 -> 2) restores from memory too;
# whale-run needs no --keep-going for an elastic step. K is 1 up to step 4
# and 16 from there (auto:16, as a loaded machine may make it): the first
# shrink restores step 4, which is no multiple of the K now, and the new
# holders must get that step at once for the second shrink to find it
for z in 1 3; do
  "$RUN" -n 4 "$TRAIN" "${el[@]}" --zero $z --metrics "$T/ref4z.jsonl" >/dev/null 2>&1
  out=$(WHALE_ELASTIC=1 WHALE_REDUNDANCY_EVERY=auto:16 \
        WHALE_FAULT="kill:rank=3:step=8;kill:rank=2:step=14" timeout 300 "$RUN" -n 4 "$TRAIN" "${el[@]}" --zero $z --metrics "$T/k4z.jsonl" 2>&1)
  d=$(reldiff "$T/ref4z.jsonl" "$T/k4z.jsonl")
  check "elastic shrinks DP 4 -> 3 -> 2 at ZeRO $z: shards re-cut from memory both times, same losses (max rel diff $d)" \
    'within "$d" 1e-5 && [[ "$out" == *"re-cut for DP 3 from memory"* ]] &&
     [[ "$out" == *"re-cut for DP 2 from memory"* ]] && [[ "$out" != *"from disk"* ]]'
done
fi

if want pp; then
# uneven pipeline stages: --pp-layers 3,1 (PP 2) equals one rank, fp32 and
# bf16, ZeRO 0, 1 and 3; WHALE_PP_LAYERS is the same knob
printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$T/t4.conf"
pp=(--model "$T/t4.conf" --data "$T/data.txt" --batch 8 --grad-accum 4 --seq 16 --steps 20
    --no-progress --threads 1)
for prec in $precs; do
  tol=1e-6; [ $prec = bf16 ] && tol=1e-4
  "$TRAIN" "${pp[@]}" --precision $prec --metrics "$T/one.jsonl" >/dev/null 2>&1
  for z in 0 1 3; do
    out=$("$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" --precision $prec --zero $z --pp-layers 3,1 \
          --metrics "$T/u.jsonl" 2>&1); rc=$?
    d=$(reldiff "$T/one.jsonl" "$T/u.jsonl")
    check "$prec ZeRO $z --pp-layers 3,1 (PP 2) equals one rank over 20 steps (max rel diff $d <= $tol)" \
      '[ $rc -eq 0 ] && within "$d" $tol'
  done
done
"$TRAIN" "${pp[@]}" --metrics "$T/one.jsonl" >/dev/null 2>&1
out=$(WHALE_PP_LAYERS=1,3 "$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" --metrics "$T/u.jsonl" 2>&1); rc=$?
d=$(reldiff "$T/one.jsonl" "$T/u.jsonl")
check "WHALE_PP_LAYERS=1,3 equals one rank (max rel diff $d)" '[ $rc -eq 0 ] && within "$d" 1e-6'
# a rebalance mid-run with PP 2 x DP 2: a replica is both its stages (its
# time the slower one's); ZeRO 0 moves micro-batches (the pipeline's
# schedule changes), ZeRO 2 the micro-batch sizes; the losses stay one rank's
for z in 0 2; do
  ga=4; [ $z = 2 ] && ga=2
  out=$(WHALE_SLOWDOWN=rank=1:factor=3 "$RUN" -n 4 --pp 2 "$TRAIN" "${pp[@]}" --grad-accum $ga \
        --zero $z --dp-shares=auto --metrics "$T/u.jsonl" 2>&1); rc=$?
  d=$(reldiff "$T/one.jsonl" "$T/u.jsonl")
  # the move away from the slowed replica (rank 1 is in replica 1): usually
  # the calibration after step 3; on a loaded machine the first steps' ms-scale
  # times can hide the gap and the drift detector moves a few steps later
  check "PP 2 x DP 2 ZeRO $z --dp-shares=auto: shares move away from the slowed replica, same losses as one rank (max rel diff $d <= 1e-6)" \
    '[ $rc -eq 0 ] && within "$d" 1e-6 && [[ "$out" == *"rebalance after step "*" (calibration): "* || "$out" == *"rebalance after step "*" (drift): "* ]] && [[ "$out" =~ \"dp_shares_final\":\[([0-9]+),([0-9]+)\] ]] && (( BASH_REMATCH[1] > BASH_REMATCH[2] ))'
done
# a checkpoint written with 3+1 layers per stage resumes with 1+3 (parameters
# are named by their global layer): the last 10 steps equal one rank's
"$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" --pp-layers 3,1 --whale-ckpt-dir "$T/ck" \
  --whale-ckpt-every 10 --metrics "$T/c1.jsonl" >/dev/null 2>&1
out=$("$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" --pp-layers 1,3 --whale-ckpt-dir "$T/ck" \
      --resume "$T/ck/step-00000010" --metrics "$T/c2.jsonl" 2>&1); rc=$?
d=$(python3 - "$T/one.jsonl" "$T/c2.jsonl" <<'PY'
import json, sys
def losses(f):
    rs = [json.loads(l) for l in open(f)]
    return {r["step"]: r["loss"] for r in rs if "loss" in r and "step" in r and "summary" not in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("%.3g" % max(abs(a[k] - b[k]) / abs(a[k]) for k in range(11, 21)) if len(b) == 10 else "steps %d" % len(b))
PY
)
check "a checkpoint of --pp-layers 3,1 resumes as 1,3 with one rank's losses (max rel diff $d)" \
  '[ $rc -eq 0 ] && within "$d" 1e-6'
out=$("$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" --pp-layers 3,2 2>&1); rc=$?
check "--pp-layers that do not add up to the model's layers refused, naming the option" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--pp-layers=3,2 adds up to 5 layers but model t4 has 4"* ]]'
out=$(WHALE_PP_LAYERS=4 "$RUN" -n 2 --pp 2 "$TRAIN" "${pp[@]}" 2>&1); rc=$?
check "WHALE_PP_LAYERS with one entry for PP 2 refused, naming the variable" \
  '[ $rc -ne 0 ] && [[ "$out" == *"WHALE_PP_LAYERS=4: 1 entries, expected one per pipeline stage"* ]]'
fi

if want shares; then
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --dp-shares 3 2>&1); rc=$?
check "--dp-shares with one entry for DP 2 refused, naming the option" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--dp-shares=3: 1 entries, expected one per DP replica (DP = 2)"* ]]'
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --dp-shares 3,0 2>&1); rc=$?
check "--dp-shares with a zero share refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--dp-shares=3,0: expected 2 positive integers"* ]]'
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --dp-shares 3,2 2>&1); rc=$?
check "--dp-shares that do not divide --batch refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--batch=8 does not split into the 5 micro-batches of --dp-shares=3,2"* ]]'
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --batch 4 --grad-accum 2 --zero 3 --dp-shares 3,1 2>&1); rc=$?
check "ZeRO 3 with a share that does not split into grad-accum micro-batches refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"replica 0'"'"'s share of 3 samples does not split into grad-accum = 2"* ]]'
printf '{"version":1,"dp":2,"micro_batch":2,"num_micro_batches":2,"dp_batch":[5,3],"global_batch":8}\n' > "$T/plan.json"
out=$("$RUN" -n 2 "$TRAIN" "${common[@]}" --plan "$T/plan.json" 2>&1); rc=$?
check "a plan whose dp_batch is not a multiple of its micro_batch refused, naming the field" \
  '[ $rc -ne 0 ] && [[ "$out" == *"dp_batch"* ]] && [[ "$out" == *"micro_batch"* ]]'
fi
exit $fail
