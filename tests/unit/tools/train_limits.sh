#!/usr/bin/env bash
# whale-train under site limits (whale/sitelimits.h): a value beyond a limit
# is refused from every source - flag, WHALE_* variable, plan file, WHALE_PLAN
# - with the value, its source, the limit and the whale.conf line; values
# within the limits run; a plugin step (WHALE_CONF) without the record, or
# with a record the user could have written, is refused.
# A plan made for another model or batch is refused with both values.
# usage: train_limits.sh WHALE_TRAIN
set -u
TRAIN=$1
if [ "$(id -u)" != 0 ]; then echo "skip: the record must be root's (run as root)"; exit 77; fi
T=$(mktemp -d /tmp/whale-train-limits-XXXXXX)
trap 'rm -rf "$T"' EXIT
chmod 755 "$T"
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1 (rc $rc)"; echo "$out" | tail -n 5; fail=1; fi
}
for i in $(seq 400); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 2 --seq 16 --steps 1 --threads 1 --no-progress)
conf=$T/whale.conf
printf '# site limits\nTopologyFile=none\nMaxZero=1\nAllowedOffload=none\nMinCkptEvery=50\nMaxSpares=1\n' > "$conf"
# what slurmstepd writes for it
cat > "$T/limits" <<J
{"conf":"$conf","limits":{"AllowedOffload":{"line":4,"value":["none"]},"MaxZero":{"line":3,"value":1},"MinCkptEvery":{"line":5,"value":50},"MaxSpares":{"line":6,"value":1}},"version":1}
J
chmod 444 "$T/limits"
export WHALE_SITE_LIMITS=$T/limits WHALE_CONF=$conf

run() { out=$("$TRAIN" "${common[@]}" "$@" 2>&1); rc=$?; }
run --zero 3
check "--zero 3 refused" '[ $rc -eq 1 ] && [[ "$out" == *"zero=3 (from --zero) exceeds the site limit MaxZero=1 ($conf:3)"* ]]'
out=$(WHALE_ZERO=3 "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "WHALE_ZERO=3 refused" '[ $rc -eq 1 ] && [[ "$out" == *"zero=3 (from WHALE_ZERO) exceeds the site limit MaxZero=1 ($conf:3)"* ]]'
echo '{"version":1,"zero":3}' > "$T/plan.json"
run --plan "$T/plan.json"
check "plan zero=3 refused" '[ $rc -eq 1 ] && [[ "$out" == *"zero=3 (from --plan $T/plan.json) exceeds the site limit MaxZero=1"* ]]'
out=$(WHALE_PLAN='{"version":1,"zero":2}' "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "WHALE_PLAN zero=2 refused" '[ $rc -eq 1 ] && [[ "$out" == *"zero=2 (from WHALE_PLAN) exceeds the site limit MaxZero=1"* ]]'

run --offload optimizer
check "--offload optimizer refused" '[ $rc -eq 1 ] && [[ "$out" == *"offload=optimizer (from --offload) is not allowed on this site: AllowedOffload=none ($conf:4)"* ]]'
out=$(WHALE_OFFLOAD=optimizer "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "WHALE_OFFLOAD=optimizer refused" '[ $rc -eq 1 ] && [[ "$out" == *"offload=optimizer (from WHALE_OFFLOAD)"* ]]'
echo '{"version":1,"offload":"optimizer"}' > "$T/plan.json"
run --plan "$T/plan.json"
check "plan offload=optimizer refused" '[ $rc -eq 1 ] && [[ "$out" == *"offload=optimizer (from --plan $T/plan.json)"* ]]'

run --whale-ckpt-dir "$T/ck" --whale-ckpt-every 1
check "--whale-ckpt-every 1 refused" '[ $rc -eq 1 ] && [[ "$out" == *"ckpt_every=1 (from --whale-ckpt-every) checkpoints more often than this site allows: MinCkptEvery=50 ($conf:5)"* ]]'
out=$(WHALE_CKPT_EVERY=1 "$TRAIN" "${common[@]}" --whale-ckpt-dir "$T/ck" 2>&1); rc=$?
check "WHALE_CKPT_EVERY=1 refused" '[ $rc -eq 1 ] && [[ "$out" == *"ckpt_every=1 (from WHALE_CKPT_EVERY)"* ]]'
out=$(WHALE_CKPT_EVERY=1s "$TRAIN" "${common[@]}" --whale-ckpt-dir "$T/ck" 2>&1); rc=$?
check "WHALE_CKPT_EVERY=1s refused" '[ $rc -eq 1 ] && [[ "$out" == *"MinCkptEvery=50"* ]]'
echo "{\"version\":1,\"ckpt_every\":1,\"ckpt_dir\":\"$T/ck\"}" > "$T/plan.json"
run --plan "$T/plan.json"
check "plan ckpt_every=1 refused" '[ $rc -eq 1 ] && [[ "$out" == *"ckpt_every=1 (from --plan $T/plan.json)"* ]]'
check "nothing saved" '[ ! -e "$T/ck" ] || [ -z "$(ls -A "$T/ck")" ]'

# MaxSpares counts spare nodes: the plan's, not the tasks
echo '{"version":1,"spares":2}' > "$T/plan.json"
run --plan "$T/plan.json"
check "plan spares=2 refused" '[ $rc -eq 1 ] && [[ "$out" == *"spares=2 (from --plan $T/plan.json) exceeds the site limit MaxSpares=1 ($conf:6)"* ]]'
echo '{"version":1,"spares":1}' > "$T/plan.json"
run --plan "$T/plan.json"
check "plan spares=1 runs" '[ $rc -eq 0 ]'

run --zero 1 --whale-ckpt-dir "$T/ck" --whale-ckpt-every 50
check "values within the limits run" '[ $rc -eq 0 ]'

# the record is the site's word only as root's, unwritable file
cp "$T/limits" "$T/mine"; chmod 644 "$T/mine"; chown 65534 "$T/mine"
out=$(WHALE_SITE_LIMITS=$T/mine "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "a record owned by a user refused" '[ $rc -eq 1 ] && [[ "$out" == *"must be owned by root"* ]]'
out=$(env -u WHALE_SITE_LIMITS "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "a plugin step without the record refused" '[ $rc -eq 1 ] && [[ "$out" == *"WHALE_SITE_LIMITS is missing"* ]]'
out=$(env -u WHALE_SITE_LIMITS -u WHALE_CONF "$TRAIN" "${common[@]}" --zero 3 2>&1); rc=$?
check "no record outside a plugin step: no site limits" '[ $rc -eq 0 ]'

# a plan made for another job (what --whale-plan=auto hands the tasks)
unset WHALE_SITE_LIMITS WHALE_CONF
tiny='{"version":1,"tp":1,"pp":1,"dp":1,"micro_batch":2,"num_micro_batches":1,"global_batch":2,"model":"gpt-tiny"}'
out=$(WHALE_PLAN=$tiny "$TRAIN" "${common[@]/gpt-tiny/gpt-small}" 2>&1); rc=$?
check "plan for gpt-tiny refused for --model gpt-small" '[ $rc -eq 2 ] && [[ "$out" == *"made for model gpt-tiny but --model gives gpt-small"* ]]'
out=$(WHALE_PLAN=$tiny "$TRAIN" "${common[@]}" --batch 4 2>&1); rc=$?
check "plan for batch 2 refused for --batch 4" '[ $rc -eq 2 ] && [[ "$out" == *"made for global batch 2 but --batch gives 4"* ]]'
out=$(WHALE_PLAN=$tiny "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "the plan's own model and batch run" '[ $rc -eq 0 ]'

# --batch with --micro-batch: the global batch is --batch (grad-accum follows
# from it when not given; it used to stay 1 and train a batch of 2 here)
out=$("$TRAIN" "${common[@]}" --batch 4 --micro-batch 2 --metrics "$T/mb.jsonl" 2>&1); rc=$?
check "--batch 4 --micro-batch 2 trains a global batch of 4 (2 micro-batches)" \
  '[ $rc -eq 0 ] && [[ "$out" == *"global batch 4 (2 x 2 micro x DP 1)"* ]] && grep -q "\"global_batch\":4" "$T/mb.jsonl"'
out=$("$TRAIN" "${common[@]}" --batch 5 --micro-batch 2 2>&1); rc=$?
check "--batch 5 --micro-batch 2 refused, naming both" \
  '[ $rc -eq 1 ] && [[ "$out" == *"--batch=5 does not equal DP (1) x --micro-batch (2)"* ]]'
out=$("$TRAIN" "${common[@]}" --batch 4 --micro-batch 2 --grad-accum 1 2>&1); rc=$?
check "--batch 4 --micro-batch 2 --grad-accum 1 refused (they disagree)" \
  '[ $rc -eq 1 ] && [[ "$out" == *"x grad-accum (1)"* ]]'
exit $fail
