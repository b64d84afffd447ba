#!/usr/bin/env bash
# Files the tools write: a symbolic link planted under the name (another
# user's, in /tmp) is refused with a message and its target left untouched;
# a metrics file that cannot be written (full disk) is warned about, naming
# the file and the reason, and training goes on.
# usage: output_files.sh WHALE_TRAIN WHALE_RUN WHALE_REPORT WHALE_MAP WHALE_PLAN WHALE_BENCH WHALE_CKPT
set -u
TRAIN=$1 RUN=$2 REPORT=$3 MAP=$4 PLAN=$5 BENCH=$6 CKPT=$7
T=$(mktemp -d /tmp/whale-output-files-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi
}
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 2 --seq 16 --no-progress --steps 1)
canary() { printf 'canary\n' > "$T/canary"; rm -f "$1"; ln -s "$T/canary" "$1"; }
untouched() { [ "$(cat "$T/canary")" = canary ] && [ -L "$1" ]; }
LINKMSG="symbolic link"

canary "$T/m.jsonl"
out=$("$TRAIN" "${common[@]}" --metrics "$T/m.jsonl" 2>&1); rc=$?
check "whale-train --metrics: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--metrics: cannot write $T/m.jsonl"*"$LINKMSG"* ]] && untouched "$T/m.jsonl"'

rm -f "$T/m.jsonl"
canary "$T/m-rank1.jsonl"
# rank 1 stops at setup; rank 0 then waits for it until whale-run's --timeout
out=$("$RUN" -n 2 --timeout 30 "$TRAIN" "${common[@]}" --metrics "$T/m.jsonl" --rank-metrics 2>&1); rc=$?
check "whale-train --rank-metrics: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--rank-metrics: cannot write $T/m-rank1.jsonl"*"$LINKMSG"* ]] && untouched "$T/m-rank1.jsonl"'

canary "$T/trace.json" # one rank: the name as given
out=$(WHALE_TRACE="$T/trace.json" "$TRAIN" "${common[@]}" 2>&1); rc=$?
check "WHALE_TRACE: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"$LINKMSG"* ]] && untouched "$T/trace.json"'

# a metrics file to report on
"$TRAIN" "${common[@]}" --metrics "$T/ok.jsonl" > /dev/null 2>&1
canary "$T/r.html"
out=$(python3 "$REPORT" "$T/ok.jsonl" -o "$T/r.html" 2>&1); rc=$?
check "whale-report -o: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"cannot write $T/r.html"*"$LINKMSG"* ]] && untouched "$T/r.html"'
mkdir -p "$T/svgs"
canary "$T/svgs/loss.svg"
out=$(python3 "$REPORT" "$T/ok.jsonl" -o "$T/r2.html" --svg-dir "$T/svgs" 2>&1); rc=$?
check "whale-report --svg-dir: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"$LINKMSG"* ]] && untouched "$T/svgs/loss.svg"'

canary "$T/l.svg"
out=$("$MAP" -w 'n[1-2]' -t 2 --tp 2 --svg "$T/l.svg" 2>&1); rc=$?
check "whale-map --svg: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"--svg: cannot write $T/l.svg"*"$LINKMSG"* ]] && untouched "$T/l.svg"'

planargs=(--model gpt-tiny --batch 8 --nodes 1 --gpus-per-node 1 --gpu cpu --tp 1 --pp 1 --dp 1)
canary "$T/cal.txt"
out=$("$PLAN" "${planargs[@]}" --fit-step 0.5 --calib-out "$T/cal.txt" 2>&1); rc=$?
check "whale-plan --calib-out: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"$T/cal.txt"*"$LINKMSG"* ]] && untouched "$T/cal.txt"'
canary "$T/plan.json"
out=$("$PLAN" "${planargs[@]}" --json "$T/plan.json" 2>&1); rc=$?
check "whale-plan --json: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"cannot write $T/plan.json"*"$LINKMSG"* ]] && untouched "$T/plan.json"'
canary "$T/bcal.txt"
out=$("$BENCH" calib -o "$T/bcal.txt" -s 64K -n 1 2>&1); rc=$?
check "whale-bench calib -o: a link is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"$T/bcal.txt"*"$LINKMSG"* ]] && untouched "$T/bcal.txt"'

# whale-ckpt convert writes OUT.tmp, then renames it to OUT
"$TRAIN" "${common[@]}" --whale-ckpt-dir "$T/ck" --whale-ckpt-every 1 > /dev/null 2>&1
canary "$T/c.safetensors.tmp"
out=$("$CKPT" convert "$T/ck" "$T/c.safetensors" 2>&1); rc=$?
check "whale-ckpt convert: a link at OUT.tmp is refused" \
  '[ $rc -ne 0 ] && [[ "$out" == *"$T/c.safetensors.tmp"*"$LINKMSG"* ]] && untouched "$T/c.safetensors.tmp"'

# an ordinary file under a planted name's place still works (and is replaced)
rm -f "$T/m.jsonl"
out=$("$TRAIN" "${common[@]}" --metrics "$T/m.jsonl" 2>&1); rc=$?
check "whale-train --metrics: a plain file is written" '[ $rc -eq 0 ] && [ -s "$T/m.jsonl" ]'

# a full disk (/dev/full: every write fails with ENOSPC): one warning naming
# the file and the reason; the run goes on and ends as it would (exit 0,
# like --prom-file)
out=$("$TRAIN" "${common[@]}" --steps 3 --metrics /dev/full 2>&1); rc=$?
check "--metrics on a full disk: warned once with file and reason, run completes" \
  '[ $rc -eq 0 ] && [ "$(grep -c "cannot write /dev/full: No space left on device" <<< "$out")" -eq 1 ]'
exit $fail
