#!/usr/bin/env bats
# Collectives under srun across namespace nodes: the correctness matrix
# (comm_check) over shared memory and over TCP, TP/DP sub-groups running
# concurrently, whale-bench comm's output, and failure detection.

CHECK="$WHALE_BUILD_DIR/tests/unit/comm/comm_check"
FAIL="$WHALE_BUILD_DIR/tests/unit/comm/comm_fail"
BENCH="$WHALE_BUILD_DIR/runtime/tools/bench/whale-bench"
A2A="$WHALE_BUILD_DIR/tests/unit/comm/a2a_check"
SIZES="0,1,7,1001,65537"

@test "comm_check: 6 ranks on 3 nodes, TP=2 (hierarchical + TP/DP groups)" {
  run timeout 600 srun -N 3 -n 6 --whale-tp=2 "$CHECK" --sizes "$SIZES"
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
  [[ "$output" == *"comm_check: OK: 6 ranks"* ]]
}

@test "comm_check: 5 ranks on 3 nodes over TCP (odd group, uneven nodes)" {
  UCX_TLS=tcp,self run timeout 600 srun -N 3 -n 5 "$CHECK" --sizes "$SIZES"
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
  [[ "$output" == *"comm_check: OK: 5 ranks"* ]]
}

@test "comm_check: 8 ranks on 4 nodes over TCP, TP=2 PP=2" {
  UCX_TLS=tcp,self run timeout 600 srun -N 4 -n 8 --whale-tp=2 --whale-pp=2 "$CHECK" --sizes 1,1001
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
  [[ "$output" == *"comm_check: OK: 8 ranks"* ]]
}

# 16 MiB + 3 elements (was 64 MiB: 155 s at load 33 against a 280 s limit):
# still 8+ pipelining chunks per algorithm, an odd count, the TCP
# rendezvous path; every op of fp32 (comm_check's rule for large sizes)
@test "comm_check: 16 MiB allreduce over TCP on 3 nodes, every algorithm" {
  UCX_TLS=tcp,self run timeout 600 srun -N 3 -n 3 "$CHECK" --sizes 4194307 --colls allreduce
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
}

@test "whale-bench comm under srun: nccl-tests columns, no wrong results" {
  run timeout 120 srun -N 2 -n 4 "$BENCH" comm -b 8 -e 1M -f 8 -n 5 -w 2
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"algbw"*"busbw"*"#wrong"*"algo"* ]]
  # every data line: 0 wrong
  [ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/ && $9 != 0' | wc -l)" -eq 0 ]
  [ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/' | wc -l)" -eq 6 ]
}

# All-to-all across 2 nodes: the pairwise exchange over UCX (TCP), with
# the correctness check on (every element against its source, destination
# and index), equal and uneven (some empty) blocks.
@test "whale-bench comm alltoall/alltoallv under srun on 2 nodes over UCX: no wrong results" {
  for coll in alltoall alltoallv; do
    UCX_TLS=tcp,self run timeout 300 srun -N 2 -n 4 "$BENCH" comm "$coll" -b 64 -e 4M -f 8 -n 3 -w 1 -c 1 -d bfloat16
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"whale-bench comm $coll: 4 ranks, 2 node(s)"* ]]
    [ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/ && ($9 != 0 || $10 != "pairwise")' | wc -l)" -eq 0 ]
    [ "$(echo "$output" | awk '$1 ~ /^[0-9]+$/' | wc -l)" -eq 6 ]
  done
}

@test "a2a_check: 5 ranks on 3 nodes over TCP, and 4 ranks on 2 nodes over shared memory" {
  UCX_TLS=tcp,self run timeout 600 srun -N 3 -n 5 "$A2A" --sizes 0,1,7,1001,65537 --expect ring
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
  [[ "$output" == *"a2a_check: OK"*"on 5 ranks"* ]]
  run timeout 600 srun -N 2 -n 4 "$A2A" --sizes 0,1,7,1001,65537 --expect ring
  echo "$output" | tail -20
  [ "$status" -eq 0 ]
  [[ "$output" == *"a2a_check: OK"*"on 4 ranks"* ]]
}

@test "a rank killed during a 16 MiB allreduce: survivors on other nodes get WHALE_EPEER in time" {
  # Each task's stdout goes to its own file, written by its slurmstepd:
  # srun's forwarding can drop the survivors' last lines when it
  # force-terminates the step after the victim's death (-W).
  out=$(mktemp -d)
  WHALE_PEER_TIMEOUT=3 UCX_TLS=tcp,self run timeout 300 srun -K0 -W 120 -N 3 -n 3 -o "$out/task-%t" "$FAIL" 16
  echo "$output" | grep -v '^\[' | tail -20
  cat "$out"/task-* | grep -v '^\['
  [ "$status" -eq 137 ]
  [ "$(cat "$out"/task-* | grep -c 'comm_fail: rank .* OK$')" -eq 2 ]
  rm -rf "$out"
}

@test "a rank killed, shared memory between namespace nodes: survivors get WHALE_EPEER" {
  out=$(mktemp -d)
  WHALE_PEER_TIMEOUT=3 run timeout 300 srun -K0 -W 120 -N 2 -n 4 -o "$out/task-%t" "$FAIL" 16
  echo "$output" | grep -v '^\[' | tail -20
  cat "$out"/task-* | grep -v '^\['
  [ "$status" -eq 137 ]
  [ "$(cat "$out"/task-* | grep -c 'comm_fail: rank .* OK$')" -eq 3 ]
  rm -rf "$out"
}
