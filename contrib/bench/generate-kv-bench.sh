#!/usr/bin/env bash
# Generation speed with and without the KV cache: a small model trained for
# a few steps on byte-level text, then `whale-generate --bench`, which
# generates 128 new tokens (greedy) recomputing the window per token and
# again with the cache, in the same run, and prints both rates, their ratio
# and whether the tokens agree.
# Usage: contrib/bench/generate-kv-bench.sh [BUILD_DIR] [MODEL] [THREADS]
#   MODEL: a preset or .conf (default gpt-small); its window is set to 256
#   so that the prompt plus 128 new tokens fit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-$ROOT/build}
MODEL=${2:-gpt-small}
THREADS=${3:-2}
export WHALE_MODEL_PATH=${WHALE_MODEL_PATH:-$ROOT/config/models}
T=$(mktemp -d /tmp/whale-genkv-bench-XXXXXX)
trap 'rm -rf "$T"' EXIT
# the preset with a 256-token window, so that the prompt and 128 new tokens fit
f=$MODEL; [ -f "$f" ] || f=$WHALE_MODEL_PATH/$MODEL.conf
sed -E 's/(^| )Seq=[0-9]+/\1Seq=256/' "$f" > "$T/model.conf"
grep -q 'Seq=256' "$T/model.conf" || sed -i 's/$/ Seq=256/' "$T/model.conf"
for i in $(seq 2000); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
"$BUILD/runtime/tools/train/whale-train" --model "$T/model.conf" --vocab 256 --data "$T/data.txt" \
  --steps 2 --batch 1 --seq 256 --threads "$THREADS" --no-progress \
  --whale-ckpt-dir "$T/ck" --whale-ckpt-every 2 >"$T/train.log" 2>&1 || { cat "$T/train.log"; exit 1; }
echo "model $MODEL, window 256, threads $THREADS, $(uptime | sed 's/.*load/load/')"
"$BUILD/runtime/tools/data/whale-generate" --ckpt "$T/ck" \
  --prompt "the quick brown fox jumps over the lazy dog" --tokens 128 --greedy \
  --threads "$THREADS" --bench --print-ids 2>&1 >/dev/null | grep "bench:"
