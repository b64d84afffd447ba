#!/usr/bin/env bats
# whale-train's command line: help, version, exit codes, messages that name
# the bad option or file, and a plan it cannot run refused before any step.

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"

setup() {
  TMP=$(mktemp -d)
  for i in $(seq 1500); do echo "def f$i(x): return x * $((i % 17)) + $((i % 5))"; done > "$TMP/corpus.txt"
}
teardown() { rm -rf "$TMP"; }

@test "--help and --version exit 0" {
  run "$TRAIN" --help
  [ "$status" -eq 0 ]
  [[ "$output" == *"--model NAME|FILE"* ]]
  [[ "$output" == *"--zero 0..3"* ]]
  run "$TRAIN" --version
  [ "$status" -eq 0 ]
  [[ "$output" == "whale-train "* ]]
}

@test "usage errors exit 2 and name the option and range" {
  run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --zero 7
  [ "$status" -eq 2 ]
  [[ "$output" == *"--zero=7: expected an integer in 0..3"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps abc
  [ "$status" -eq 2 ]
  run "$TRAIN" --data "$TMP/corpus.txt"
  [ "$status" -eq 2 ]
  [[ "$output" == *"--model and --data are required"* ]]
  run "$TRAIN" --bogus
  [ "$status" -eq 2 ]
}

@test "unknown model preset and sequence too long: exit 1 with the reason" {
  run "$TRAIN" --model no-such-model --data "$TMP/corpus.txt"
  [ "$status" -eq 1 ]
  [[ "$output" == *"model preset 'no-such-model' not found"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --seq 4096
  [ "$status" -eq 1 ]
  [[ "$output" == *"exceeds the model's Seq=64"* ]]
}

@test "bad data files are named" {
  printf 'xxxx' > "$TMP/bad.bin"
  run "$TRAIN" --model gpt-tiny --data "$TMP/bad.bin" --steps 1
  [ "$status" -eq 1 ]
  [[ "$output" == *"$TMP/bad.bin: truncated llm.c shard"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMP/none.txt" --steps 1
  [ "$status" -eq 1 ]
  [[ "$output" == *"$TMP/none.txt: No such file or directory"* ]]
}

@test "a short run writes metrics and a summary; the loss falls" {
  run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps 30 --batch 8 --lr 3e-3 \
      --threads 1 --no-progress --metrics "$TMP/m.jsonl"
  [ "$status" -eq 0 ]
  [[ "${lines[-1]}" == '{"summary":'* ]]
  [ "$(grep -c '"step"' "$TMP/m.jsonl")" -eq 30 ]
  run python3 -c "import json;l=[json.loads(x) for x in open('$TMP/m.jsonl') if x.startswith('{\"step\"')];assert l[-1]['loss']<l[0]['loss']-1"
  [ "$status" -eq 0 ]
}

@test "WHALE_PLAN sets ZeRO and micro-batching; flags override; unsupported plans refused" {
  WHALE_PLAN='{"version":1,"zero":3,"micro_batch":2,"num_micro_batches":2}' \
    run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps 2 --threads 1 --no-progress --metrics ""
  [ "$status" -eq 0 ]
  [[ "${lines[-1]}" == *'"zero":3'* ]]
  [[ "${lines[-1]}" == *'"global_batch":4'* ]]
  WHALE_PLAN='{"version":1,"zero":3}' \
    run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps 2 --threads 1 --zero 1 --no-progress --metrics ""
  [ "$status" -eq 0 ]
  [[ "${lines[-1]}" == *'"zero":1'* ]]
  WHALE_PLAN='{"version":1,"offload":"optimizer"}' \
    run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps 2 --threads 1 --no-progress --metrics ""
  [ "$status" -eq 0 ]
  [[ "${lines[-1]}" == *'"offload":"optimizer"'* ]]
  WHALE_PLAN='{"version":1,"offload":"params","zero":1}' \
    run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt" --steps 2
  [ "$status" -ne 0 ]
  [[ "$output" == *"needs --zero 3"* ]]
  WHALE_PLAN='{"version":1,"zero":9}' run "$TRAIN" --model gpt-tiny --data "$TMP/corpus.txt"
  [ "$status" -eq 1 ]
}
