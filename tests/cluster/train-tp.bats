#!/usr/bin/env bats
# Tensor parallelism (Megatron-style) composed with data parallelism and
# ZeRO: the loss of every step equals the single-rank run within 1e-5
# relative, under whale-run and under srun across namespace nodes.

load train_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"

setup_file() {
  export TMPD=$(mktemp -d)
  make_corpus "$TMPD"
  "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --steps 20 --batch 8 --threads 1 \
    --no-progress --metrics "$TMPD/ref.jsonl" > /dev/null 2>&1
}
teardown_file() { rm -rf "$TMPD"; }


train_args() {
  echo --model gpt-tiny --data "$TMPD/corpus.txt" --steps 20 --batch 8 --threads 1 --no-progress
}

@test "whale-run TP=2 and TP=4: same loss as one rank" {
  for tp in 2 4; do
    run timeout 300 "$RUN" -n $tp --tp $tp --timeout 280 "$TRAIN" $(train_args) --metrics "$TMPD/tp$tp.jsonl"
    [ "$status" -eq 0 ]
    run same_losses "$TMPD/ref.jsonl" "$TMPD/tp$tp.jsonl" --grad-norm
    echo "TP=$tp: $output"
    [ "$status" -eq 0 ]
  done
}

@test "whale-run TP=2 x DP=2, ZeRO 0..3: same loss as one rank" {
  for z in 0 1 2 3; do
    run timeout 300 "$RUN" -n 4 --tp 2 --dp 2 --timeout 280 "$TRAIN" $(train_args) --zero $z --metrics "$TMPD/tpdp$z.jsonl"
    [ "$status" -eq 0 ]
    run same_losses "$TMPD/ref.jsonl" "$TMPD/tpdp$z.jsonl" --grad-norm
    echo "ZeRO $z: $output"
    [ "$status" -eq 0 ]
  done
}

@test "srun --whale-tp=2 --whale-dp=2 on 2 nodes (TP inside a node), ZeRO 1 and 3: same loss as one rank" {
  for z in 1 3; do
    run timeout 300 srun -N2 -n4 --whale-tp=2 --whale-dp=2 "$TRAIN" $(train_args) --zero $z --metrics "$TMPD/s$z.jsonl"
    echo "$output" | tail -3
    [ "$status" -eq 0 ]
    run same_losses "$TMPD/ref.jsonl" "$TMPD/s$z.jsonl" --grad-norm
    echo "ZeRO $z: $output"
    [ "$status" -eq 0 ]
  done
}

@test "TP that does not divide the heads is refused with the reason" {
  run timeout 120 "$RUN" -n 3 --tp 3 --timeout 100 "$TRAIN" $(train_args) --metrics ""
  [ "$status" -ne 0 ]
  # the reason names the degree and the heads it does not divide
  [[ "$output" == *"TP=3"* ]]
  [[ "$output" == *"Heads=4"* || "$output" == *"heads (4)"* ]]
}

@test "recompute selective / full / per-layer under TP=2 x DP=2 (ZeRO 2): same loss as one rank" {
  for r in selective full; do
    run timeout 300 "$RUN" -n 4 --tp 2 --dp 2 --timeout 280 "$TRAIN" $(train_args) --zero 2 --recompute $r --metrics "$TMPD/rc$r.jsonl"
    [ "$status" -eq 0 ]
    run same_losses "$TMPD/ref.jsonl" "$TMPD/rc$r.jsonl" --grad-norm
    echo "recompute $r: $output"
    [ "$status" -eq 0 ]
  done
  run timeout 300 "$RUN" -n 2 --tp 2 --timeout 280 --plan '{"version":1,"tp":2,"recompute":"layers","recompute_layers":[1]}' \
      "$TRAIN" $(train_args) --metrics "$TMPD/rcl.jsonl"
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/rcl.jsonl" --grad-norm
  [ "$status" -eq 0 ]
}
