#!/bin/sh
# Output names the tools promise are the names they use: WHALE_TRACE=FILE
# (--help, whale-train(1)) and scale.py -o DIR read back by
# whale-report --scaling DIR.
# usage: output_names.sh SOURCE_ROOT WHALE_TRAIN WHALE_RUN WHALE_REPORT
set -u
ROOT=$1 TRAIN=$2 RUN=$3 REPORT=$4
fails=0
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ok() { echo "ok - $1"; }
bad() { echo "FAILED - $1"; fails=1; }

# WHALE_TRACE=trace.json on two ranks: trace-rank0.json and trace-rank1.json,
# and --help and the man page give exactly that example
cat "$ROOT"/runtime/src/*/*.c > "$T/corpus.txt"
help=$("$TRAIN" --help 2>&1)
if echo "$help" | grep -q "trace.json -> trace-rank0.json"; then ok "--help names trace-rank0.json"
else bad "whale-train --help does not say what WHALE_TRACE=trace.json writes"; fi
if grep -q "trace-rank0.json" "$ROOT/man/whale-train.1"; then ok "whale-train(1) names trace-rank0.json"
else bad "whale-train(1) does not say what WHALE_TRACE=trace.json writes"; fi
(cd "$T" && WHALE_TRACE=trace.json timeout 280 "$RUN" -n 2 --timeout 250 "$TRAIN" --model gpt-tiny \
  --data corpus.txt --steps 1 --batch 8 --threads 1 --no-progress > run.log 2>&1) ||
  { bad "the traced run failed"; tail -5 "$T/run.log"; }
if [ -s "$T/trace-rank0.json" ] && [ -s "$T/trace-rank1.json" ] && [ ! -e "$T/trace.json" ]; then
  ok "WHALE_TRACE=trace.json on 2 ranks wrote trace-rank0.json and trace-rank1.json"
else bad "WHALE_TRACE=trace.json on 2 ranks wrote: $(cd "$T" && ls *.json* 2>/dev/null | tr '\n' ' ')"; fi

# scale.py -o DIR writes DIR/scale.jsonl; whale-report --scaling DIR reads it
mkdir "$T/scale-out"
printf '%s\n' '{"mode":"strong","ranks":1,"layout":"DP 1","step_s":0.2,"pred_step_s":0.21}' \
  '{"mode":"strong","ranks":2,"layout":"DP 2","step_s":0.12,"pred_step_s":0.11}' > "$T/scale-out/scale.jsonl"
if out=$(python3 "$REPORT" --scaling "$T/scale-out" -o "$T/dir.html" 2>&1) && [ -s "$T/dir.html" ]; then
  ok "whale-report --scaling DIR reads DIR/scale.jsonl"
else bad "whale-report --scaling DIR: $out"; fi
if python3 "$REPORT" --scaling "$T/scale-out/scale.jsonl" -o "$T/file.html" > /dev/null 2>&1 &&
   cmp -s "$T/dir.html" "$T/file.html"; then ok "the directory and its scale.jsonl give the same page"
else bad "whale-report --scaling DIR and DIR/scale.jsonl differ"; fi
mkdir "$T/empty"
out=$(python3 "$REPORT" --scaling "$T/empty" -o "$T/e.html" 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "without scale.jsonl"; then ok "a directory without scale.jsonl is named"
else bad "whale-report --scaling on an empty directory (rc $rc): $out"; fi
grep -q "scale.jsonl" "$ROOT/contrib/bench/scale.py" || bad "scale.py no longer writes scale.jsonl"
exit $fails
