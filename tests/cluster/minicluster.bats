#!/usr/bin/env bats
# The minicluster command itself: usage errors, idempotence, clean teardown.
# Uses its own instance (8, or WHALE_MC_TEST_INSTANCE) so it never disturbs
# the cluster the other tests use.

MC="$WHALE_SRC_DIR/contrib/minicluster/whale-minicluster"
I=${WHALE_MC_TEST_INSTANCE:-8}

teardown() { "$MC" -i $I down >/dev/null 2>&1 || true; }

@test "unknown sub-command: usage, exit 2" {
  run "$MC" frobnicate
  [ "$status" -eq 2 ]
  [[ "$output" == *"unknown command 'frobnicate'"* ]]
}

@test "--help and --version work like -h and -V; another long option is named" {
  run "$MC" --help
  [ "$status" -eq 0 ]
  [[ "$output" == Usage:* ]]
  [[ "$output" != *"unknown option"* ]]
  run "$MC" --version
  [ "$status" -eq 0 ]
  [[ "$output" == "whale-minicluster "[0-9]* ]]
  run "$MC" --frobnicate
  [ "$status" -eq 2 ]
  [[ "$output" == *"unknown option --frobnicate"* ]]
}

@test "env puts the build's tools on PATH: a bare srun ... whale-train runs (the quick start)" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  # a PATH without the build tree, as a new user's shell has; env without
  # -b: the build 'up' used
  PATH=/usr/local/bin:/usr/bin:/bin
  eval "$("$MC" -i $I env)"
  [ "$(command -v whale-train)" = "$WHALE_BUILD_DIR/runtime/tools/train/whale-train" ]
  [ "$(command -v whale-run)" = "$WHALE_BUILD_DIR/runtime/tools/run/whale-run" ]
  run timeout 120 srun -N1 -n1 whale-train --version
  echo "$output"
  [ "$status" -eq 0 ]
  # evaluating it again does not add the folders twice
  eval "$("$MC" -i $I env)"
  [ "$(tr ':' '\n' <<< "$PATH" | grep -c "/runtime/tools/train\$")" -eq 1 ]
}

@test "bad node count: usage, exit 2" {
  run "$MC" -i $I up 0
  [ "$status" -eq 2 ]
  run "$MC" -i $I up abc
  [ "$status" -eq 2 ]
  [[ "$output" == *"1..16"* ]]
}

@test "up twice and down twice are harmless; down leaves nothing behind" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  [[ "$output" == *"already up"* ]]
  run "$MC" -i $I status
  [ "$status" -eq 0 ]
  pids=$(cat /tmp/whale-minicluster-$I/run/*.pid)
  run "$MC" -i $I down
  [ "$status" -eq 0 ]
  run "$MC" -i $I down
  [ "$status" -eq 0 ]
  for p in $pids; do [ ! -d "/proc/$p" ]; done
  [ -z "$(ip netns list | grep "^wmc$I-")" ]
  ! ip link show wmc${I}br >/dev/null 2>&1 || false
  [ -z "$(ip -o link show | grep "wmc${I}v")" ]
}

@test "a node that does not come up: named, log tail shown, nothing left running" {
  WHALE_MC_FAIL_NODE=2 run timeout 90 "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -ne 0 ]
  [[ "$output" == *"slurmd for node2 did not start"* ]]
  [[ "$output" == *"not-in-config"* ]]   # the tail of its log
  [ -z "$(ip netns list | grep "^wmc$I-")" ]
  ! ip link show wmc${I}br >/dev/null 2>&1 || false
  ! pgrep -f "whale-minicluster-$I/slurm.conf" >/dev/null || false
  run "$MC" -i $I status
  [ "$status" -ne 0 ]
}

@test "down after a crash cleans up what is left" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  kill -9 "$(cat /tmp/whale-minicluster-$I/run/slurmctld.pid)"
  kill -9 "$(cat /tmp/whale-minicluster-$I/run/slurmd-node1.pid)"
  run "$MC" -i $I down
  [ "$status" -eq 0 ]
  [ -z "$(ip netns list | grep "^wmc$I-")" ]
  ! pgrep -f "whale-minicluster-$I/slurm.conf" >/dev/null
}

# ---- fault injection -------------------------------------------------------

mc_env() { eval "$("$MC" -i $I env)"; }
# alive PID: running (a zombie whose parent has not reaped it yet is dead)
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:.*Z' "/proc/$1/status"; }

@test "kill-node / link-down: usage errors name the problem" {
  run "$MC" -i $I kill-node
  [ "$status" -eq 2 ]
  [[ "$output" == *"kill-node takes one node"* ]]
  run "$MC" -i $I link-down nodeX
  [ "$status" -eq 2 ]
  [[ "$output" == *"must be nodeI or I"* ]]
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  run "$MC" -i $I kill-node node3
  [ "$status" -eq 1 ]
  [[ "$output" == *"no node3 in instance $I (it has node1..node2)"* ]]
}

@test "kill-node: every process of the node dies (slurmd, stepd, tasks), idempotent; start-node brings it back" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  mc_env
  timeout 120 srun -N2 -n2 -k sleep 300 >/dev/null 2>&1 3>&- &
  srun_pid=$!
  for _ in $(seq 300); do
    [ "$(ip netns pids wmc$I-node2 | xargs -r ps -o comm= -p | grep -c '^sleep')" -ge 1 ] && break
    sleep 0.2
  done
  [ -n "$(ip netns pids wmc$I-node2)" ]
  slurmd2=$(cat /tmp/whale-minicluster-$I/run/slurmd-node2.pid)
  run "$MC" -i $I kill-node node2
  [ "$status" -eq 0 ]
  [ -z "$(ip netns pids wmc$I-node2)" ]
  ! alive "$slurmd2" || false
  # node1 is untouched: its slurmd and its task still run
  [ -n "$(ip netns pids wmc$I-node1 | xargs -r ps -o comm= -p | grep '^sleep')" ]
  run "$MC" -i $I kill-node 2
  [ "$status" -eq 0 ]
  run "$MC" -i $I start-node node2
  [ "$status" -eq 0 ]
  [ -n "$(ip netns pids wmc$I-node2 | xargs -r ps -o comm= -p | grep '^slurmd')" ]
  run "$MC" -i $I start-node node2
  [ "$status" -eq 0 ]
  [[ "$output" == *"already runs"* ]]
  scancel "$(squeue -h -o %i | head -1)" 2>/dev/null || true
  wait "$srun_pid" || true
}

@test "link-down cuts a node off while its processes keep running; link-up reconnects it" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2
  [ "$status" -eq 0 ]
  addr=10.213.$I.12
  port=$(sed -n 's/^SlurmdPort=//p' /tmp/whale-minicluster-$I/slurm.conf)
  timeout 5 bash -c "echo > /dev/tcp/$addr/$port"
  run "$MC" -i $I link-down node2
  [ "$status" -eq 0 ]
  ! timeout 3 bash -c "echo > /dev/tcp/$addr/$port" 2>/dev/null || false
  [ -n "$(ip netns pids wmc$I-node2 | xargs -r ps -o comm= -p | grep '^slurmd')" ]
  run "$MC" -i $I link-down node2
  [ "$status" -eq 0 ]
  run "$MC" -i $I link-up node2
  [ "$status" -eq 0 ]
  timeout 60 bash -c "until echo > /dev/tcp/$addr/$port; do sleep 0.2; done" 2>/dev/null
}

# the quota of node I in the cluster's cgroup (v2 cpu.max's first field or v1's CFS quota)
quota() {
  local d
  for d in /sys/fs/cgroup/whale-mc-$I/node$1 /sys/fs/cgroup/cpu/whale-mc-$I/node$1; do
    [ -f "$d/cpu.max" ] && { cut -d' ' -f1 "$d/cpu.max"; return; }
    [ -f "$d/cpu.cfs_quota_us" ] && { cat "$d/cpu.cfs_quota_us"; return; }
  done
  echo none
}

@test "--speeds: every node's tasks run under its CPU quota; speed changes it while it runs; down removes it" {
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2 --speeds 1,x
  [ "$status" -eq 2 ]
  [[ "$output" == *"node2's speed 'x'"* ]]
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" up 2 --speeds 1
  [ "$status" -eq 2 ]
  [[ "$output" == *"1 entries for 2 nodes"* ]]
  run "$MC" -i $I -b "$WHALE_BUILD_DIR" --speed-unit 0.5 up 2 --speeds 1,0.5
  [ "$status" -eq 0 ]
  [ "$(quota 1)" = 50000 ] && [ "$(quota 2)" = 25000 ]
  mc_env
  # the tasks slurmd starts are in their node's cgroup (Slurm moves none)
  run timeout 60 srun -N2 -n2 -l sh -c 'grep -E "^0::|:cpu[,:]" /proc/self/cgroup'
  [ "$status" -eq 0 ]
  [[ "$output" == *"whale-mc-$I/node1"* ]] && [[ "$output" == *"whale-mc-$I/node2"* ]]
  run "$MC" -i $I speed node2 0.25
  [ "$status" -eq 0 ]
  [ "$(quota 2)" = 12500 ]
  run "$MC" -i $I speed 2
  [ "$output" = "node2 0.25" ]
  run "$MC" -i $I status
  [[ "$output" == *"speed 0.25"* ]]
  run "$MC" -i $I speed node2 max
  [ "$status" -eq 0 ]
  [[ "$(quota 2)" == max || "$(quota 2)" == -1 ]]
  run "$MC" -i $I speed node2 0
  [ "$status" -eq 2 ]
  run "$MC" -i $I down
  [ "$status" -eq 0 ]
  [ ! -e /sys/fs/cgroup/whale-mc-$I ] && [ ! -e /sys/fs/cgroup/cpu/whale-mc-$I ]
}
