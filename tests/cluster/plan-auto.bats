#!/usr/bin/env bats
# The planner at launch: --whale-plan=auto searches a plan on the step's
# own nodes inside srun; --whale-model checks explicit degrees against
# device memory. Both refuse with the reason before any task starts.

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"

setup() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  TMP=$(mktemp -d)
}
teardown() {
  rm -rf "$TMP"
  # a failed features case must not leave typed nodes to the next cases
  scontrol update NodeName='node[1-4]' AvailableFeatures= ActiveFeatures= >/dev/null 2>&1 || true
}

plan_of_rank0() {  # srun args... -> WHALE_PLAN of task 0 on stdout
  timeout 90 srun "$@" sh -c '[ "$SLURM_PROCID" = 0 ] && printf "%s\n" "$WHALE_PLAN" || true'
}

@test "auto: every task gets a searched plan that uses all 8 ranks" {
  run plan_of_rank0 -N4 -n8 --whale-plan=auto --whale-model=gpt-small --whale-batch=16
  [ "$status" -eq 0 ]
  run python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert p["tp"] * p["pp"] * p["dp"] == 8, p
assert p["model"] == "gpt-small", p
assert p["micro_batch"] * p["num_micro_batches"] * p["dp"] == 16, p
assert "prediction" in p, p
' "$output"
  [ "$status" -eq 0 ]
}

@test "auto: fixed options stay fixed (--whale-tp=2)" {
  run plan_of_rank0 -N4 -n8 --whale-plan=auto --whale-model=gpt-small --whale-batch=16 --whale-tp=2
  [ "$status" -eq 0 ]
  [[ "$output" == *'"tp":2'* ]]
}

@test "auto: --whale-verbose prints the plan and why" {
  run timeout 90 srun -N4 -n8 --whale-plan=auto --whale-model=gpt-small --whale-batch=16 --whale-verbose true
  [ "$status" -eq 0 ]
  [[ "$output" == *"auto plan on 4 x 2 cpu"* ]]
  [[ "$output" == *"predicted"* ]]
}

@test "auto on nodes typed by their Slurm features: two node groups, more samples on the faster" {
  # the minicluster's whale.conf maps features a100 and h100 to device types
  # (DeviceTypeFromFeature=); no NodeName line types its nodes
  scontrol update NodeName=node[1-2] AvailableFeatures=a100 ActiveFeatures=a100
  scontrol update NodeName=node[3-4] AvailableFeatures=h100 ActiveFeatures=h100
  run plan_of_rank0 -N4 -n8 -w 'node[1-4]' --whale-plan=auto --whale-model=gpt-small \
    --whale-batch=64 --whale-microbatch=2 --whale-tp=2
  scontrol update NodeName='node[1-4]' AvailableFeatures= ActiveFeatures=
  [ "$status" -eq 0 ]
  run python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert p["prediction"]["cluster"].startswith("2 x 2 A100-80GB + 2 x 2 H100-80GB"), p["prediction"]
b = p["dp_batch"]
assert len(b) == 4 and sum(b) == 64 and b[0] == b[1] < b[2] == b[3], b
' "$output"
  [ "$status" -eq 0 ]
}

@test "a feature mapped to a GPU type nobody knows: refused naming whale.conf's line, no task runs" {
  scontrol update NodeName=node1 AvailableFeatures=bogus ActiveFeatures=bogus
  run timeout 90 srun -N1 -n2 -w node1 --whale-plan=auto --whale-model=gpt-small --whale-batch=8 \
    sh -c 'echo RAN'
  scontrol update NodeName=node1 AvailableFeatures= ActiveFeatures=
  [ "$status" -ne 0 ]
  [[ "$output" =~ whale\.conf:[0-9]+:\ node\ node1\ maps\ to\ GPU\ type\ NoSuchGPU ]]
  [[ "$output" != *RAN* ]]
}

@test "auto without --whale-model or --whale-batch: the missing option is named, no task runs" {
  run timeout 90 srun -N2 -n2 --whale-plan=auto --whale-batch=8 sh -c 'echo RAN'
  [ "$status" -ne 0 ]
  [[ "$output" == *"needs --whale-model"* ]]
  [[ "$output" != *RAN* ]]
  run timeout 90 srun -N2 -n2 --whale-plan=auto --whale-model=gpt-small sh -c 'echo RAN'
  [ "$status" -ne 0 ]
  [[ "$output" == *"needs --whale-batch"* ]]
  [[ "$output" != *RAN* ]]
}

@test "unknown model preset: named, non-zero exit" {
  run timeout 90 srun -N1 -n2 --whale-plan=auto --whale-model=gpt-nonesuch --whale-batch=8 true
  [ "$status" -ne 0 ]
  [[ "$output" == *"gpt-nonesuch"* ]]
}

@test "explicit degrees that cannot fit the model are refused with the memory breakdown" {
  run timeout 90 srun -N4 -n8 --whale-tp=2 --whale-model=gpt-1t --whale-batch=64 sh -c 'echo RAN'
  [ "$status" -ne 0 ]
  [[ "$output" == *"does not fit gpt-1t"* ]]
  [[ "$output" == *"GiB usable"* ]]
  [[ "$output" != *RAN* ]]
}

@test "explicit degrees that fit pass the check and run" {
  run timeout 90 srun -N4 -n8 --whale-tp=2 --whale-model=gpt-small --whale-batch=16 printenv WHALE_TP
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 8 ]
}

@test "whale-train runs the auto plan across the nodes (model from the plan)" {
  cat "$WHALE_SRC_DIR"/runtime/src/*/*.c > "$TMP/corpus.txt"
  run timeout 300 srun -N4 -n8 --whale-plan=auto --whale-model=gpt-tiny --whale-batch=8 \
      "$TRAIN" --data "$TMP/corpus.txt" --steps 3 --threads 1 --no-progress --metrics "$TMP/m.jsonl"
  [ "$status" -eq 0 ]
  run python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert sum(1 for r in rows if "step" in r) == 3, rows
s = [r["summary"] for r in rows if "summary" in r][0]
assert s["tp"] * s["pp"] * s["dp"] == 8, s
' "$TMP/m.jsonl"
  [ "$status" -eq 0 ]
}

@test "whale-train refuses an auto plan made for another model or batch, naming both" {
  cat "$WHALE_SRC_DIR"/runtime/src/*/*.c > "$TMP/corpus.txt"
  run timeout 300 srun -N4 -n8 --whale-plan=auto --whale-model=gpt-tiny --whale-batch=8 \
      "$TRAIN" --model gpt-small --data "$TMP/corpus.txt" --steps 1 --threads 1 --no-progress
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"was made for model gpt-tiny but --model gives gpt-small"* ]] || { echo "$output"; false; }
  run timeout 300 srun -N4 -n8 --whale-plan=auto --whale-model=gpt-tiny --whale-batch=8 \
      "$TRAIN" --batch 16 --data "$TMP/corpus.txt" --steps 1 --threads 1 --no-progress
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"was made for global batch 8 but --batch gives 16"* ]] || { echo "$output"; false; }
}
