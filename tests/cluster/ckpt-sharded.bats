#!/usr/bin/env bats
# Checkpoints on the minicluster: 8 ranks on 4 namespace nodes write their
# shards in parallel, another layout reads them back (resharding), and a
# rank killed with SIGKILL in the middle of a save leaves the previous
# checkpoint and `latest` intact.

setup() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  SYNTH="$WHALE_BUILD_DIR/tests/unit/ckpt/ckpt_synth"
  TOOL="$WHALE_BUILD_DIR/runtime/tools/ckpt/whale-ckpt"
  D=$(mktemp -d /tmp/whale-ckpt-cluster-XXXXXX)
}
teardown() { rm -rf "$D"; }

@test "TP=2 PP=2 DP=2 ZeRO-3 saved by 8 ranks on 4 nodes loads as TP=4 PP=1 DP=2, TP=1 DP=2, 1 rank" {
  run timeout 120 srun -N4 -n8 "$SYNTH" save "$D" 2 2 2 3 10 env
  [ "$status" -eq 0 ]
  [ "$(readlink "$D/latest")" = step-00000010 ]
  [ "$(ls -d "$D"/step-00000010/rank-0000? | wc -l)" -eq 8 ]
  run "$TOOL" verify "$D"
  [ "$status" -eq 0 ]
  run timeout 120 srun -N4 -n8 "$SYNTH" load "$D" 4 1 2 0 10 env
  [ "$status" -eq 0 ]
  run timeout 120 srun -N2 -n2 "$SYNTH" load "$D" 1 1 2 3 10 env
  [ "$status" -eq 0 ]
  run timeout 120 srun -N1 -n1 "$SYNTH" load "$D" 1 1 1 0 10 env
  [ "$status" -eq 0 ]
}

@test "compressed (bf16 weights, int8 moments, zstd) across nodes reloads in another layout" {
  run timeout 120 srun -N4 -n4 "$SYNTH" save "$D" 2 2 1 0 7 bf16 int8 zstd env
  [ "$status" -eq 0 ]
  run timeout 120 srun -N2 -n2 "$SYNTH" load "$D" 1 1 2 1 7 bf16 int8 env
  [ "$status" -eq 0 ]
}

@test "kill -9 of a rank mid-save (srun -K): latest still points to the previous checkpoint" {
  run timeout 120 srun -N4 -n8 "$SYNTH" save "$D" 2 2 2 3 10 env
  [ "$status" -eq 0 ]
  WHALE_CKPT_FAULT=kill_rank=3 run timeout 120 srun -K -N4 -n8 "$SYNTH" save "$D" 2 2 2 3 20 env
  [ "$status" -ne 0 ]
  [[ "$output" == *"task 3: Killed"* ]]
  [ "$(readlink "$D/latest")" = step-00000010 ]
  [ ! -e "$D/step-00000020" ]
  run "$TOOL" verify "$D"
  [ "$status" -eq 0 ]
  run timeout 120 srun -N4 -n8 "$SYNTH" load "$D" 4 1 2 0 10 env
  [ "$status" -eq 0 ]
  # the next save commits and removes the dead attempt's directory
  run timeout 120 srun -N4 -n8 "$SYNTH" save "$D" 2 2 2 3 30 env
  [ "$status" -eq 0 ]
  [ "$(readlink "$D/latest")" = step-00000030 ]
  [ -z "$(ls -A "$D" | grep '^\.tmp-')" ]
}

@test "a dead rank without -K: rank 0 gives up after the commit timeout, names it, removes the partial save" {
  run timeout 120 srun -N2 -n2 "$SYNTH" save "$D" 1 1 2 0 10 env
  [ "$status" -eq 0 ]
  WHALE_CKPT_COMMIT_TIMEOUT=3 WHALE_CKPT_FAULT=kill_rank=1 run timeout 120 srun -N2 -n2 "$SYNTH" save "$D" 1 1 2 0 20 env
  [ "$status" -ne 0 ]
  [[ "$output" == *"rank 1 did not finish its shards within 3 s"* ]]
  [[ "$output" == *"earlier checkpoints are intact"* ]]
  [ -z "$(ls -A "$D" | grep '^\.tmp-')" ]
  [ "$(readlink "$D/latest")" = step-00000010 ]
}
