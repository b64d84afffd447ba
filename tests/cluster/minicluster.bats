#!/usr/bin/env bats
# The minicluster command itself: usage errors, idempotence, clean teardown.
# Uses its own instance (8) so it never disturbs the cluster the other tests use.

MC="$WHALE_SRC_DIR/contrib/minicluster/whale-minicluster"

teardown() { "$MC" -i 8 down >/dev/null 2>&1 || true; }

@test "unknown sub-command: usage, exit 2" {
  run "$MC" frobnicate
  [ "$status" -eq 2 ]
  [[ "$output" == *"unknown command 'frobnicate'"* ]]
}

@test "bad node count: usage, exit 2" {
  run "$MC" -i 8 up 0
  [ "$status" -eq 2 ]
  run "$MC" -i 8 up abc
  [ "$status" -eq 2 ]
  [[ "$output" == *"1..16"* ]]
}

@test "up twice and down twice are harmless; down leaves nothing behind" {
  run "$MC" -i 8 -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  run "$MC" -i 8 -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  [[ "$output" == *"already up"* ]]
  run "$MC" -i 8 status
  [ "$status" -eq 0 ]
  pids=$(cat /tmp/whale-minicluster-8/run/*.pid)
  run "$MC" -i 8 down
  [ "$status" -eq 0 ]
  run "$MC" -i 8 down
  [ "$status" -eq 0 ]
  for p in $pids; do [ ! -d "/proc/$p" ]; done
  [ -z "$(ip netns list | grep '^wmc8-')" ]
  ! ip link show wmc8br >/dev/null 2>&1
  [ -z "$(ip -o link show | grep 'wmc8v')" ]
}

@test "a node that does not come up: named, log tail shown, nothing left running" {
  WHALE_MC_FAIL_NODE=2 run timeout 90 "$MC" -i 8 -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -ne 0 ]
  [[ "$output" == *"slurmd for node2 did not start"* ]]
  [[ "$output" == *"not-in-config"* ]]   # the tail of its log
  [ -z "$(ip netns list | grep '^wmc8-')" ]
  ! ip link show wmc8br >/dev/null 2>&1
  ! pgrep -f "whale-minicluster-8/slurm.conf" >/dev/null
  run "$MC" -i 8 status
  [ "$status" -ne 0 ]
}

@test "down after a crash cleans up what is left" {
  run "$MC" -i 8 -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  kill -9 "$(cat /tmp/whale-minicluster-8/run/slurmctld.pid)"
  kill -9 "$(cat /tmp/whale-minicluster-8/run/slurmd-node1.pid)"
  run "$MC" -i 8 down
  [ "$status" -eq 0 ]
  [ -z "$(ip netns list | grep '^wmc8-')" ]
  ! pgrep -f "whale-minicluster-8/slurm.conf" >/dev/null
}
