#!/usr/bin/env bash
# whale-train against bad input and a hostile environment: no step to run,
# a strict environment, file modes, a data file truncated while training.
# Each check prints what it saw on failure.
# usage: train_hostile.sh WHALE_TRAIN
set -u
TRAIN=$1
T=$(mktemp -d /tmp/whale-train-hostile-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi
}
for i in $(seq 400); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 2 --seq 16 --no-progress)

# --steps 0 used to print a NULL string (NaN loss made json_pack fail)
out=$("$TRAIN" "${common[@]}" --steps 0 2>&1); rc=$?
check "--steps 0 exits 0 with null losses" '[ $rc -eq 0 ] && [[ "$out" == *"\"first_loss\":null"* ]]'

# a finished run restarted with --resume latest: nothing left to do
out=$("$TRAIN" "${common[@]}" --steps 2 --whale-ckpt-dir "$T/ck" --whale-ckpt-every 1 2>&1); rc=$?
check "2 steps with checkpoints" '[ $rc -eq 0 ]'
out=$("$TRAIN" "${common[@]}" --steps 2 --whale-ckpt-dir "$T/ck" --resume latest 2>&1); rc=$?
check "--resume latest at --steps exits 0" '[ $rc -eq 0 ] && [[ "$out" == *"\"steps\":0"* ]]'

# strict environment numbers
out=$(WHALE_ZERO=abc "$TRAIN" "${common[@]}" --steps 1 2>&1); rc=$?
check "WHALE_ZERO=abc refused" '[ $rc -eq 2 ] && [[ "$out" == *"WHALE_ZERO=abc: expected an integer in 0..3"* ]]'
out=$(WHALE_MICRO_BATCH=99999999999 "$TRAIN" "${common[@]}" --steps 1 2>&1); rc=$?
check "WHALE_MICRO_BATCH=99999999999 refused with the range" \
  '[ $rc -eq 2 ] && [[ "$out" == *"WHALE_MICRO_BATCH=99999999999: expected an integer in 1..1048576"* ]]'

# modes: never world-writable under umask 000; owner-only when private
out=$( (umask 000; WHALE_TRACE="$T/trace.json" "$TRAIN" "${common[@]}" --steps 1 --metrics "$T/m.jsonl") 2>&1); rc=$?
check "umask 000: metrics 644" '[ $rc -eq 0 ] && [ "$(stat -c %a "$T/m.jsonl")" = 644 ]'
check "umask 000: trace 644" '[ "$(stat -c %a "$(ls "$T"/trace*.json | head -1)")" = 644 ]'
rm -f "$T"/trace*.json "$T/m.jsonl"
out=$(WHALE_CKPT_PRIVATE=1 WHALE_TRACE="$T/trace.json" "$TRAIN" "${common[@]}" --steps 1 --metrics "$T/m.jsonl" 2>&1); rc=$?
check "WHALE_CKPT_PRIVATE=1: metrics 600" '[ $rc -eq 0 ] && [ "$(stat -c %a "$T/m.jsonl")" = 600 ]'
check "WHALE_CKPT_PRIVATE=1: trace 600" '[ "$(stat -c %a "$(ls "$T"/trace*.json | head -1)")" = 600 ]'

# the data file truncated while training: a message naming it, no SIGBUS
cp "$T/data.txt" "$T/big.txt"
for i in $(seq 200); do cat "$T/data.txt"; done >> "$T/big.txt"
"$TRAIN" --model gpt-tiny --data "$T/big.txt" --batch 2 --seq 16 --no-progress --steps 1000000 \
  --metrics "$T/run.jsonl" >"$T/run.out" 2>&1 &
pid=$!
for _ in $(seq 2400); do [ -s "$T/run.jsonl" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
truncate -s 100 "$T/big.txt"
wait $pid; rc=$?
pid=
out=$(cat "$T/run.out")
check "truncated data: exit 1 (not SIGBUS 135), file named" \
  '[ $rc -eq 1 ] && [[ "$out" == *"data file $T/big.txt"* ]]'
exit $fail
