#!/usr/bin/env bats
# whale-train checkpoints on the cluster: saved with one layout, resumed with
# another (DP and ZeRO stage change), under whale-run and under
# srun --whale-dp --whale-ckpt-dir --whale-ckpt-every; the resumed steps have
# the loss of the uninterrupted single-rank run (1e-5 relative).

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"
TOOL="$WHALE_BUILD_DIR/runtime/tools/ckpt/whale-ckpt"

setup_file() {
  export TMPD=$(mktemp -d /tmp/whale-ckpt-train-XXXXXX)
  cat "$WHALE_SRC_DIR"/runtime/src/*/*.c > "$TMPD/corpus.txt"
  "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --steps 20 --batch 8 --threads 1 \
    --no-progress --metrics "$TMPD/ref.jsonl" > /dev/null 2>&1
}
teardown_file() { rm -rf "$TMPD"; }

train_args() {
  echo --model gpt-tiny --data "$TMPD/corpus.txt" --steps 20 --batch 8 --threads 1 --no-progress
}

# same_losses REF OTHER FIRST: steps FIRST..20 present, within 1e-5 relative
same_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b, first = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print("worst relative loss difference %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PY
}

@test "whale-run: saved at DP=2 ZeRO-3, resumed at DP=4 ZeRO-1 and at one rank" {
  run timeout 300 "$RUN" -n 2 --timeout 280 "$TRAIN" $(train_args) --zero 3 --metrics "" \
    --whale-ckpt-dir "$TMPD/wr" --whale-ckpt-every 10
  [ "$status" -eq 0 ]
  [ "$(readlink "$TMPD/wr/latest")" = step-00000020 ]
  run "$TOOL" verify "$TMPD/wr" --which 10
  [ "$status" -eq 0 ]
  run timeout 300 "$RUN" -n 4 --timeout 280 "$TRAIN" $(train_args) --zero 1 \
    --metrics "$TMPD/wr4.jsonl" --resume "$TMPD/wr/step-00000010"
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/wr4.jsonl" 11
  echo "$output"
  [ "$status" -eq 0 ]
  run timeout 300 "$TRAIN" $(train_args) --metrics "$TMPD/wr1.jsonl" --resume "$TMPD/wr/step-00000010"
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/wr1.jsonl" 11
  [ "$status" -eq 0 ]
}

@test "srun --whale-ckpt-dir/--whale-ckpt-every on 2 nodes, resumed with --whale-dp=4 on 4 nodes" {
  run timeout 300 srun -N2 -n2 --whale-dp=2 --whale-ckpt-dir="$TMPD/s" --whale-ckpt-every=10 \
    "$TRAIN" $(train_args) --zero 2 --metrics ""
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  [ -e "$TMPD/s/step-00000010/manifest.json" ]
  run "$TOOL" inspect "$TMPD/s" --which 10
  [[ "$output" == *"saved by    2 ranks"* ]]
  run timeout 300 srun -N4 -n4 --whale-dp=4 "$TRAIN" $(train_args) --zero 3 \
    --metrics "$TMPD/s4.jsonl" --resume "$TMPD/s/step-00000010"
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/s4.jsonl" 11
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "--resume latest under srun continues from the newest checkpoint" {
  run timeout 300 srun -N2 -n2 --whale-dp=2 "$TRAIN" $(train_args) --steps 20 --metrics "" \
    --whale-ckpt-dir "$TMPD/l" --whale-ckpt-every 5 --ckpt-keep 2
  [ "$status" -eq 0 ]
  [ "$(ls -d "$TMPD"/l/step-* | wc -l)" -eq 2 ]
  # pretend the run died after step 15: latest -> step 15
  ln -sfn step-00000015 "$TMPD/l/latest"
  run timeout 300 srun -N2 -n2 --whale-dp=2 "$TRAIN" $(train_args) --metrics "$TMPD/l.jsonl" \
    --whale-ckpt-dir "$TMPD/l" --resume latest
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/l.jsonl" 16
  echo "$output"
  [ "$status" -eq 0 ]
}
