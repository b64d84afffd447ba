#!/usr/bin/env bats
# Text to tokens to a model and back: whale-data makes a
# tokenizer and shards from this project's sources, whale-train trains with
# --val-data under several layouts (whale-run TP x PP, DP with ZeRO 3, srun
# DP across nodes), the validation loss of every evaluation equals the
# single-rank run within 1e-5, and whale-generate continues a prompt from
# each layout's checkpoint on one rank; greedy text equals the single-rank
# model's.

DATA="$WHALE_BUILD_DIR/runtime/tools/data/whale-data"
TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
GEN="$WHALE_BUILD_DIR/runtime/tools/data/whale-generate"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"

setup_file() {
  [ -x "$DATA" ] || skip "whale-data not built (libsentencepiece-dev missing: contrib/install-deps.sh)"
  export TMPD=$(mktemp -d)
  "$DATA" -o "$TMPD/tok" --vocab-size 512 --val-docs 4 --threads 2 --no-progress \
    "$WHALE_SRC_DIR/runtime/src" > "$TMPD/data.log" 2>&1
  "$TRAIN" $(train_args) --metrics "$TMPD/ref.jsonl" --whale-ckpt-dir "$TMPD/ck-ref" \
    > "$TMPD/ref.log" 2>&1
}
teardown_file() { [ -n "${TMPD:-}" ] && rm -rf "$TMPD"; true; }

train_args() {
  echo --model gpt-tiny --vocab 512 --data "$TMPD/tok/train_000000.bin" \
    --val-data "$TMPD/tok/val_000000.bin" --eval-every 5 --eval-batches 2 --steps 20 \
    --batch 8 --seq 32 --lr 3e-3 --threads 1 --no-progress --whale-ckpt-every 20
}

# same_val REF OTHER: the same evaluations (steps 5..20), each within 1e-5
same_val() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def load(p):
    return [(r["step"], r["val_loss"]) for r in map(json.loads, open(p))
            if "step" in r and "val_loss" in r]
a, b = load(sys.argv[1]), load(sys.argv[2])
assert [s for s, _ in a] == [5, 10, 15, 20] and [s for s, _ in b] == [5, 10, 15, 20], (a, b)
worst = max(abs(x[1] - y[1]) / x[1] for x, y in zip(a, b))
assert a[-1][1] < a[0][1], a
print("val losses %s; worst relative difference %.2e" % ([round(v, 4) for _, v in a], worst))
sys.exit(0 if worst < 1e-5 else 1)
PY
}

greedy() { # CKPT: 24 greedy tokens after a fixed prompt
  "$GEN" --ckpt "$1" --prompt "static int" --tokens 24 --greedy --threads 1
}

@test "whale-data made the tokenizer and shards; the single-rank reference ran" {
  cat "$TMPD/data.log"
  [ -s "$TMPD/tok/train_000000.bin" ] && [ -s "$TMPD/tok/val_000000.bin" ]
  tail -n 2 "$TMPD/ref.log"
  grep -q '"best_val_loss"' "$TMPD/ref.jsonl"
  run greedy "$TMPD/ck-ref"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "static int"* ]]
}

@test "whale-run TP=2 x PP=2: same validation losses; generation from its checkpoint" {
  run timeout 400 "$RUN" -n 4 --tp 2 --pp 2 --timeout 380 "$TRAIN" $(train_args) \
      --metrics "$TMPD/tp2pp2.jsonl" --whale-ckpt-dir "$TMPD/ck-tp2pp2"
  echo "$output" | tail -n 3
  [ "$status" -eq 0 ]
  run same_val "$TMPD/ref.jsonl" "$TMPD/tp2pp2.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  ref=$(greedy "$TMPD/ck-ref" 2>/dev/null)
  run greedy "$TMPD/ck-tp2pp2"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" == "$(echo "$ref" | head -n 1)" ]
}

@test "whale-run DP=2 with ZeRO 3: same validation losses; generation from its checkpoint" {
  run timeout 400 "$RUN" -n 2 --dp 2 --timeout 380 "$TRAIN" $(train_args) --zero 3 \
      --metrics "$TMPD/dp2z3.jsonl" --whale-ckpt-dir "$TMPD/ck-dp2z3"
  echo "$output" | tail -n 3
  [ "$status" -eq 0 ]
  run same_val "$TMPD/ref.jsonl" "$TMPD/dp2z3.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  run greedy "$TMPD/ck-dp2z3"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "static int"* ]]
}

@test "srun --whale-dp=2 --whale-tp=2 on 2 nodes: same validation losses; generation" {
  run timeout 400 srun -N2 -n4 --whale-tp=2 --whale-dp=2 "$TRAIN" $(train_args) \
      --metrics "$TMPD/srun.jsonl" --whale-ckpt-dir "$TMPD/ck-srun"
  echo "$output" | tail -n 3
  [ "$status" -eq 0 ]
  run same_val "$TMPD/ref.jsonl" "$TMPD/srun.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  run greedy "$TMPD/ck-srun"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == "static int"* ]]
}
