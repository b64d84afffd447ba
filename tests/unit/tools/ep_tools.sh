#!/usr/bin/env bash
# Expert parallelism through the tools: whale-run --ep exports WHALE_EP (the
# contract), an EP that does not divide DP is refused with the values it may
# take, and whale-train refuses EP > 1 for a model without MoE layers (from
# --ep, WHALE_EP or the plan) instead of training it dense.
# usage: ep_tools.sh WHALE_RUN WHALE_TRAIN
set -u
RUN=$1 TRAIN=$2
T=$(mktemp -d /tmp/whale-ep-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi
}

out=$("$RUN" -n 4 --no-label sh -c 'echo "$WHALE_EP $WHALE_DP"' 2>&1); rc=$?
check "whale-run without --ep: WHALE_EP=1 on every task" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | sort -u)" = "1 4" ]'
out=$("$RUN" -n 4 --ep 2 --no-label sh -c 'echo "$WHALE_EP $WHALE_DP"' 2>&1); rc=$?
check "whale-run --ep 2: WHALE_EP=2 on every task" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | sort -u)" = "2 4" ] && [ "$(echo "$out" | wc -l)" -eq 4 ]'
out=$("$RUN" -n 4 --ep 3 true 2>&1); rc=$?
check "whale-run --ep 3 over DP=4 refused with the allowed values" \
  '[ $rc -ne 0 ] && [[ "$out" == *"EP=3 does not divide DP=4"* ]] && [[ "$out" == *"allowed EP: 1, 2, 4"* ]]'
out=$("$RUN" -n 4 --ep 0 true 2>&1); rc=$?
check "whale-run --ep 0 is a usage error" '[ $rc -eq 2 ]'

for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 2 --seq 16 --steps 1 --no-progress)
out=$("$TRAIN" "${common[@]}" --ep 2 2>&1); rc=$?
check "whale-train --ep 2 with a dense model refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--ep 2 needs a model with MoE layers; gpt-tiny has none"* ]]'
out=$(WHALE_EP=2 "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "WHALE_EP=2 with a dense model refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"WHALE_EP=2 needs a model with MoE layers; gpt-tiny has none"* ]]'
printf '{"version":1,"dp":2,"ep":2}\n' > "$T/ep.json"
out=$("$TRAIN" "${common[@]}" --plan "$T/ep.json" 2>&1); rc=$?
check "a plan with ep 2 and a dense model refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"needs a model with MoE layers"* ]]'
out=$(WHALE_EP=2 "$TRAIN" "${common[@]}" --ep 1 2>&1); rc=$?
check "whale-train --ep 1 in a step with WHALE_EP=2 refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--ep 1 but this step runs WHALE_EP=2"* ]]'
out=$("$TRAIN" "${common[@]}" --ep 1 2>&1); rc=$?
check "whale-train --ep 1 trains" '[ $rc -eq 0 ]'
# a MoE model: EP must divide Experts, and its groups are the launcher's
# (engine_moe_ep trains it under whale-run)
out=$("$TRAIN" "${common[@]}" --model gpt-moe-tiny --ep 3 2>&1); rc=$?
check "whale-train --ep 3 with 4 experts refused naming both" \
  '[ $rc -eq 2 ] && [[ "$out" == *"gpt-moe-tiny has Experts=4, not divisible by EP=3"* ]]'
out=$("$TRAIN" "${common[@]}" --model gpt-moe-tiny --ep 2 2>&1); rc=$?
check "whale-train --ep 2 without a launcher refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"expert parallelism needs the launcher'"'"'s layout"* ]]'
# uneven DP shares would pair different micro-batches in the expert group's
# all-to-alls (a hang): refused on every rank
out=$(timeout 120 "$RUN" -n 2 --dp 2 --ep 2 --timeout 100 "$TRAIN" "${common[@]}" \
  --model gpt-moe-tiny --batch 6 --micro-batch 2 --dp-shares 2,1 2>&1); rc=$?
check "EP 2 with uneven --dp-shares refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--dp-shares with expert parallelism EP=2"* ]]'
# a model that does not fit the memory budget, with the EP groups built: the
# engine gives the caller's groups back before it destroys itself (it freed
# the EP group, which the caller freed again: SIGSEGV)
out=$(timeout 120 "$RUN" -n 2 --ep 2 --timeout 100 "$TRAIN" "${common[@]}" \
  --model gpt-moe-tiny --device-mem 64K 2>&1); rc=$?
check "EP 2 past the memory budget: a clear refusal, no crash" \
  '[ $rc -ne 0 ] && [[ "$out" != *"signal"* ]] && [[ "$out" == *"does not fit"* ]]'
exit $fail
