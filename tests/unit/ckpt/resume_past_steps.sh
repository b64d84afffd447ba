#!/bin/bash
# --resume of a checkpoint already at (or past) --steps: a clear note,
# exit 0, and of the summary only the JSON line (the lines for people
# said "loss first nan, final nan").
# Usage: resume_past_steps.sh WHALE_TRAIN SRC_DIR
set -u
train=$1 src=$2
d=$(mktemp -d /tmp/whale-past.XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat "$src"/runtime/src/ckpt/*.c >"$d/corpus.txt"
args=(--model gpt-tiny --data "$d/corpus.txt" --batch 4 --seq 32 --threads 1 --no-progress)
"$train" "${args[@]}" --steps 4 --metrics "" --whale-ckpt-dir "$d/ck" --whale-ckpt-every 4 \
    >"$d/save.out" 2>&1 || fail "save run: $(tail -3 "$d/save.out")"
for steps in 4 3; do
    out=$("$train" "${args[@]}" --steps $steps --metrics "$d/m.jsonl" --resume latest \
          --whale-ckpt-dir "$d/ck" 2>&1) || fail "--steps $steps: exit $?: $out"
    echo "$out" | grep -q "checkpoint is at step 4 >= --steps $steps: nothing to train" \
        || fail "--steps $steps: no note: $out"
    echo "$out" | grep -qi "nan" && fail "--steps $steps: a nan summary: $out"
    echo "$out" | grep -q "whale-train summary" && fail "--steps $steps: a summary: $out"
    echo "$out" | grep -q '"summary":{"steps":0,' || fail "--steps $steps: no JSON summary: $out"
    echo "ok: --steps $steps after a checkpoint at step 4"
done
