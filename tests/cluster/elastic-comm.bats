#!/usr/bin/env bats
# Elastic membership at the comm level under srun across namespace nodes
# (the training-level failure tests are in elastic-*.bats of the training
# half): a waiting spare costs no CPU and is released when the step ends; a
# killed rank is replaced by the spare; every task of one node killed at
# once (NODE); one node's link cut (LINK: the majority replaces it, the
# cut-off side stops with WHALE_EMINORITY). Detection and the decision are
# asserted; the phase times are printed, never asserted. WHALE_PEER_TIMEOUT
# is 8 s, not 2: with 2 s healthy tasks of a loaded machine missed
# heartbeats (the unit tests' el_idle saw every task 'unreachable').

CHECK="$WHALE_BUILD_DIR/tests/unit/comm/el_check"

# Network namespace of a minicluster node of this instance.
node_ns() { ip netns list | awk '{print $1}' | grep -- "-$1\$" | grep "^wmc${WHALE_MC_INSTANCE:-1}-" | head -1; }

# Wait until FILE(s) contain PATTERN (at most $3 seconds).
wait_for() {
  local i
  for i in $(seq $(($3 * 10))); do
    cat $1 2>/dev/null | grep -q -- "$2" && return 0
    sleep 0.1
  done
  return 1
}

@test "elastic: a spare waits without CPU under srun and is released at the end" {
  out=$(mktemp -d)
  run timeout 300 srun -N 3 -n 3 --whale-spares=1 -o "$out/task-%t" "$CHECK" idle
  cat "$out"/task-* | grep -v '^\['
  [ "$status" -eq 0 ]
  [ "$(cat "$out"/task-* | grep -c 'el_check: OK')" -eq 3 ]
  cat "$out"/task-* | grep -q 'el_check: spare task .* CPU: released'
  rm -rf "$out"
}

@test "elastic: a killed rank is replaced by the spare node over TCP" {
  out=$(mktemp -d)
  WHALE_PEER_TIMEOUT=8 UCX_TLS=tcp,self run timeout 300 srun -K0 -N 4 -n 4 --whale-spares=1 \
    -o "$out/task-%t" "$CHECK" kill --victims 1
  cat "$out"/task-* | grep -v '^\['
  [ "$(cat "$out"/task-* | grep -c 'el_check: OK')" -eq 3 ]
  cat "$out"/task-* | grep -q 'epoch 1 REPLACED: rank 1 (task [0-9]* on node[0-9]*) failed (CRASH) -> task'
  rm -rf "$out"
}

@test "elastic: every task of one node killed at once is a NODE failure; both ranks move to the spare node" {
  out=$(mktemp -d)
  WHALE_PEER_TIMEOUT=8 UCX_TLS=tcp,self timeout 300 srun -K0 -N 4 -n 8 --whale-spares=1 \
    -o "$out/task-%t" "$CHECK" external --steps 60 >"$out/srun" 2>&1 &
  srun_pid=$!
  wait_for "$out/task-*" "start task 7" 120
  wait_for "$out/task-*" " rank 1 node" 60
  # the node holding rank 1 (a working node)
  node=$(cat "$out"/task-* | sed -n 's/^el_check: start task [0-9]* rank 1 node \(.*\)$/\1/p')
  echo "killing the tasks of $node"
  ns=$(node_ns "$node")
  [ -n "$ns" ]
  sleep 1
  # every task of the step in that namespace at once (not slurmd nor the
  # step daemon: the node stays usable for later tests, and slurmstepd
  # reports the tasks' end at once - killed with them, srun waited 100 s for
  # it; Slurm's side of node death is tested in elastic-slurm.bats)
  for p in $(ip netns pids "$ns"); do
    case $(cat /proc/"$p"/comm 2>/dev/null) in el_check) kill -9 "$p" 2>/dev/null || true ;; esac
  done
  wait "$srun_pid" || true
  cat "$out"/task-* | grep -v '^\['
  [ "$(cat "$out"/task-* | grep -c 'el_check: OK')" -eq 6 ]
  cat "$out"/task-* | grep -q "failed (NODE) -> task"
  cat "$out"/task-* | grep 'elastic: epoch 1 REPLACED' | head -1
  rm -rf "$out"
}

@test "elastic: one node's link cut: the majority replaces it (LINK), the cut-off tasks stop (minority)" {
  out=$(mktemp -d)
  WHALE_PEER_TIMEOUT=8 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 timeout 300 srun -K0 -N 4 -n 4 \
    --whale-spares=1 -o "$out/task-%t" "$CHECK" external --steps 60 >"$out/srun" 2>&1 &
  srun_pid=$!
  wait_for "$out/task-*" "start task 3" 120
  wait_for "$out/task-*" " rank 1 node" 60
  node=$(cat "$out"/task-* | sed -n 's/^el_check: start task [0-9]* rank 1 node \(.*\)$/\1/p')
  ns=$(node_ns "$node")
  [ -n "$ns" ]
  sleep 1
  echo "cutting the link of $node"
  ip -n "$ns" link set eth0 down
  wait_for "$out/task-*" "elastic: epoch 1" 120 || true
  wait_for "$out/task-*" "stops as a minority" 60 || true
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route replace default via "$(ip -n "$ns" -4 addr show eth0 | awk '/inet /{split($2,a,"/"); split(a[1],b,"."); print b[1]"."b[2]"."b[3]".1"}')" 2>/dev/null || true
  wait "$srun_pid" || true
  cat "$out"/task-* | grep -v '^\['
  cat "$out"/task-* | grep -q "failed (LINK) -> task"
  [ "$(cat "$out"/task-* | grep -c 'el_check: OK task')" -eq 3 ]
  cat "$out"/task-* | grep -q 'stops as a minority: OK'
  rm -rf "$out"
}
