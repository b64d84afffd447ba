#!/usr/bin/env bats
# Whale steps with hot spares in Slurm's eyes (spank/ELASTIC.md): the plugin
# arranges --no-kill, --kill-on-bad-exit=0 and --wait=0 (or refuses with the
# option to change), so when a task is killed, a whole node dies or a node's
# link goes down, the job is not cancelled and the surviving tasks run to
# their end; a failure report (WHALE_REPORT, what whale-train's survivors
# write after agreeing) drains the failed node with a reason at once and
# kills a replaced task that is still there (SIGSTOP). The tasks here are
# small scripts standing in for the training, so these cases run whatever
# state the runtime is in (elastic-train.bats runs whale-train itself).
# After each case nothing but slurmd is left on any node.

load spank_helpers
load elastic_helpers

setup_file() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  [ "$(sinfo -h -N -o %N | sort -u | wc -l)" -ge 4 ] || skip "needs 4 nodes"
}

setup() {
  wait_cluster_idle
  D=$BATS_TEST_TMPDIR
  chmod 755 "$D"
  cat > "$D/task.sh" <<'EOF'
#!/bin/bash
# One task of a step: note the pid, then wait for the test's "go". A file
# report.<task id> is handed to this node's slurmstepd as a failure report;
# a file stop.<task id> makes the task stop itself (a hung rank).
D=$(dirname "$0")
echo $$ > "$D/pid.$SLURM_PROCID"
echo "start $SLURM_PROCID $(hostname) spare=$WHALE_SPARE rank=$WHALE_RANK"
while [ ! -e "$D/go" ]; do
  if [ -e "$D/report.$SLURM_PROCID" ]; then
    cat "$D/report.$SLURM_PROCID" > "$WHALE_REPORT" && rm -f "$D/report.$SLURM_PROCID"
  fi
  [ -e "$D/stop.$SLURM_PROCID" ] && { rm -f "$D/stop.$SLURM_PROCID"; kill -STOP $$; }
  sleep 0.2
done
echo "done $SLURM_PROCID"
[ -e "$D/exit.$SLURM_PROCID" ] && . "$D/exit.$SLURM_PROCID"
exit 0
EOF
  chmod 755 "$D/task.sh"
}

teardown() {
  touch "$BATS_TEST_TMPDIR/go"
  [ -n "${SRUN_PID:-}" ] && { wait "$SRUN_PID" 2>/dev/null || true; }
  [ -n "${FAILED_NODE:-}" ] && restore_node "$FAILED_NODE"
  true
}

# every task wrote its pid and its "start" line reached srun's output (the
# tests read the task -> node map from those lines; srun forwards them later
# than the pid files appear)
all_started() {
  [ "$(ls "$D"/pid.* 2>/dev/null | wc -l)" -eq "$1" ] && [ "$(grep -c '^start ' "$D/out")" -eq "$1" ]
}
srun_done() { ! kill -0 "$SRUN_PID" 2>/dev/null; }

# start_step: srun -N4 -n8 TP=2 DP=3 plus a spare node in the background
# (SHAPE: other -N/-n/TP options, NT: their task count).
start_step() {
  timeout 600 srun ${SHAPE:--N4 -n8 --whale-tp=2} --whale-spares=1 "$@" "$D/task.sh" \
    > "$D/out" 2>&1 3>&- &
  SRUN_PID=$!
  wait_for all_started ${NT:-8}
  JOB=$(squeue -h -o '%i %j' | awk '$2 == "task.sh" {print $1}' | head -1)
  [ -n "$JOB" ]
}

finish_step() {  # expected srun exit status
  touch "$D/go"
  local rc=0
  wait "$SRUN_PID" || rc=$?
  SRUN_PID=
  cat "$D/out"
  echo "srun exit status $rc"
  [ "$rc" -eq "$1" ]
}

survivors_done() {  # task ids that must have finished normally
  for t in "$@"; do grep -q "^done $t\$" "$D/out" || { echo "task $t did not finish"; return 1; }; done
  ! grep -q 'CANCELLED' "$D/out"
}

task_of() { sed -n "s/^start \([0-9]*\) $1 .*/\1/p" "$D/out" | sort -n | tr '\n' ' '; }

@test "srun with spares: the plugin sets no-kill, kill-on-bad-exit=0, wait=0; contradicting options are refused by name" {
  run timeout 60 srun -N4 -n8 --whale-tp=2 --whale-spares=1 bash -c 'echo "$SLURM_NO_KILL $SLURM_KILL_BAD_EXIT $SLURM_WAIT"'
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | sort -u)" = "set 0 0" ]
  run timeout 60 srun -K1 -N4 -n8 --whale-tp=2 --whale-spares=1 true
  [ "$status" -ne 0 ]
  [[ "$output" == *"--whale-spares=1 conflicts with -K1"*"--no-kill --kill-on-bad-exit=0 --wait=0"* ]]
  run timeout 60 srun --wait=30 -N4 -n8 --whale-tp=2 --whale-spares=1 true
  [ "$status" -ne 0 ]
  [[ "$output" == *"conflicts with --wait=30"* ]]
  SLURM_KILL_BAD_EXIT=1 run timeout 60 srun -N4 -n8 --whale-tp=2 --whale-spares=1 true
  [ "$status" -ne 0 ]
  [[ "$output" == *"conflicts with SLURM_KILL_BAD_EXIT=1 in the environment"* ]]
  # without spares nothing changes
  run timeout 60 srun -N2 -n4 --whale-tp=2 bash -c 'echo "${SLURM_NO_KILL:-unset}"'
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | sort -u)" = unset ]
}

@test "an allocation without --no-kill is refused for a step with spares; sbatch/salloc --whale-spares set --no-kill" {
  run timeout 60 salloc -N4 -n8 bash -c 'srun --whale-tp=2 --whale-spares=1 true'
  [ "$status" -ne 0 ]
  [[ "$output" == *"allocated without --no-kill"*"sbatch --no-kill"* ]]
  run timeout 60 salloc -N4 -n8 --no-kill bash -c 'srun --whale-tp=2 --whale-spares=1 true && echo inner-ok'
  [ "$status" -eq 0 ]
  [[ "$output" == *inner-ok* ]]
  run timeout 60 salloc -N4 -n8 --whale-spares=1 --whale-tp=2 bash -c 'echo "job=$WHALE_JOB_NO_KILL"; srun true && echo inner-ok'
  [ "$status" -eq 0 ]
  [[ "$output" == *"job=1"* && "$output" == *inner-ok* ]]
  # sbatch: --whale-spares in an #SBATCH line (not on the command line)
  printf '#!/bin/bash\n#SBATCH -N4 -n8\n#SBATCH --whale-tp=2 --whale-spares=1\necho "job=$WHALE_JOB_NO_KILL"\nsrun true && echo inner-ok\n' > "$D/job.sh"
  job=$(sbatch --parsable -o "$D/job.out" "$D/job.sh")
  wait_for bash -c "! squeue -h -j $job 2>/dev/null | grep -q ."
  cat "$D/job.out"
  grep -q 'job=1' "$D/job.out"
  grep -q inner-ok "$D/job.out"
}

@test "kill -9 one task: the other tasks run to their end; its node is drained with the reason; nothing left" {
  start_step
  FAILED_NODE=node2
  victim=$(task_of node2 | awk '{print $2}')
  sibling=$(task_of node2 | awk '{print $1}')
  kill -9 "$(cat "$D/pid.$victim")"
  # the survivors' report, through a task of the same node
  echo "node2 crash $victim $victim" > "$D/report.$sibling"
  wait_for drained node2
  sinfo -h -n node2 -o %E | grep -q "whale: job $JOB step 0: rank $victim (task $victim) failed (crash)"
  # the step still runs with everyone else
  squeue -h -j "$JOB" | grep -q .
  # srun's status is the training's: the replaced task does not count
  # (Slurm's own rule would give the killed task's 128 + 9)
  finish_step 0
  survivors_done $(seq 0 7 | grep -vx "$victim")
  grep -q "task $victim: Killed" "$D/out"
  grep -q "1 replaced task(s) do not count: exit status 0" "$D/out"
  nothing_left
}

@test "--export=NONE: a replaced task still does not count, srun exits 0" {
  # srun forwards only SLURM_* variables with --export=NONE: the result
  # channel must reach slurmstepd all the same (it made srun exit 137)
  start_step --export=NONE
  FAILED_NODE=node2
  victim=$(task_of node2 | awk '{print $2}')
  sibling=$(task_of node2 | awk '{print $1}')
  kill -9 "$(cat "$D/pid.$victim")"
  echo "node2 crash $victim $victim" > "$D/report.$sibling"
  wait_for drained node2
  finish_step 0
  survivors_done $(seq 0 7 | grep -vx "$victim")
  grep -q "1 replaced task(s) do not count: exit status 0" "$D/out"
  # the channel is slurmstepd's, not the task's
  ! grep -q SLURM_WHALE_RESULT "$D/out" || false
  nothing_left
}

@test "--export=NONE: the tasks still get --whale-offload-target" {
  run timeout 120 srun -N4 -n4 --whale-spares=1 --whale-offload-target=spares --export=NONE \
    /bin/sh -c 'echo "target=$WHALE_OFFLOAD_TARGET"'
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | grep -c '^target=spares$')" -eq 4 ]
}

@test "kill -9 a task alone on its node: a survivor on another node reports it, that node is drained" {
  # one task per node: nobody is left on the victim's node to report it to
  # its own slurmstepd (which left with its last task); the reporting
  # survivor's slurmstepd asks the victim's slurmd and drains it
  SHAPE="-N4 -n4" NT=4 start_step
  victim=$(grep '^start .* spare=0 ' "$D/out" | sed -n 's/^start \([0-9]*\) \(node[0-9]*\) .*rank=\([0-9]*\)$/\1 \2 \3/p' | sort -n | sed -n 2p)
  read -r vt vnode vrank <<< "$victim"
  reporter=$(grep '^start .* spare=0 ' "$D/out" | awk -v n="$vnode" '$3 != n {print $2}' | head -1)
  [ -n "$vt" ] && [ -n "$reporter" ]
  FAILED_NODE=$vnode
  kill -9 "$(cat "$D/pid.$vt")"
  echo "$vnode crash $vrank $vt" > "$D/report.$reporter"
  wait_for drained "$vnode"
  sinfo -h -n "$vnode" -o %E | grep -q "whale: job $JOB step 0: rank $vrank (task $vt) failed (crash)"
  finish_step 0
}

@test "a spare task's failure (RANK -1) is taken: its node drained with a spare reason, srun exits 0" {
  SHAPE="-N4 -n4" NT=4 start_step
  spare=$(sed -n 's/^start \([0-9]*\) \(node[0-9]*\) spare=1 .*/\1 \2/p' "$D/out" | head -1)
  read -r st snode <<< "$spare"
  reporter=$(grep '^start .* spare=0 ' "$D/out" | awk '{print $2}' | head -1)
  [ -n "$st" ] && [ -n "$reporter" ]
  FAILED_NODE=$snode
  kill -9 "$(cat "$D/pid.$st")"
  echo "$snode crash -1 $st" > "$D/report.$reporter"
  wait_for drained "$snode"
  sinfo -h -n "$snode" -o %E | grep -q "whale: job $JOB step 0: spare task $st failed (crash)"
  finish_step 0
  grep -q "1 replaced task(s) do not count: exit status 0" "$D/out"
  nothing_left
}

@test "kill a whole node (slurmd and every process): the job is not cancelled, survivors finish, srun exits 0, node drained" {
  start_step
  FAILED_NODE=node2
  lost=$(task_of node2)
  "$MC" -i "$I" kill-node node2
  reporter=$(task_of node1 | awk '{print $1}')
  echo "node2 node $(echo $lost | awk '{print $1}') $(echo $lost | awk '{print $1}')" > "$D/report.$reporter"
  wait_for drained node2
  # slurmctld notices the node (SlurmdTimeout) and takes it out of the job
  # without cancelling the job: the step goes on on the other nodes
  wait_for node_left_job "$JOB" node2
  squeue -h -j "$JOB" -o %T | grep -q RUNNING
  finish_step 0
  grep -q "Node failure on node2" "$D/out"
  survivors_done $(seq 0 7 | grep -vxF "$(echo $lost | tr ' ' '\n')")
  sinfo -h -n node2 -o %E | grep -q "failed (node)"
  nothing_left
}

@test "a node's link goes down: the job goes on without it; after link-up nothing of the step is left there" {
  start_step
  FAILED_NODE=node3
  lost=$(task_of node3)
  "$MC" -i "$I" link-down node3
  reporter=$(task_of node1 | awk '{print $1}')
  echo "node3 link $(echo $lost | awk '{print $1}') $(echo $lost | awk '{print $1}')" > "$D/report.$reporter"
  wait_for drained node3
  wait_for node_left_job "$JOB" node3
  squeue -h -j "$JOB" -o %T | grep -q RUNNING
  finish_step 0
  grep -q "Node failure on node3" "$D/out"
  survivors_done $(seq 0 7 | grep -vxF "$(echo $lost | tr ' ' '\n')")
  "$MC" -i "$I" link-up node3
  nothing_left
}

@test "SIGSTOP one task: after the report its node's slurmstepd kills it, srun does not wait forever, nothing left" {
  start_step
  FAILED_NODE=node2
  victim=$(task_of node2 | awk '{print $2}')
  sibling=$(task_of node2 | awk '{print $1}')
  touch "$D/stop.$victim"
  wait_for bash -c "grep -q '^State:.*T' /proc/$(cat "$D/pid.$victim")/status"
  echo "node2 hang $victim $victim" > "$D/report.$sibling"
  wait_for drained node2
  wait_for bash -c "! kill -0 $(cat "$D/pid.$victim") 2>/dev/null"
  finish_step 0
  survivors_done $(seq 0 7 | grep -vx "$victim")
  grep -q "killed task $victim" "$STATE/log/slurmd-node2.log"
  nothing_left
}

@test "srun's status after a replaced task is the other tasks': a survivor's failure still shows" {
  start_step
  FAILED_NODE=node2
  victim=$(task_of node2 | awk '{print $2}')
  sibling=$(task_of node2 | awk '{print $1}')
  kill -9 "$(cat "$D/pid.$victim")"
  echo "node2 crash $victim $victim" > "$D/report.$sibling"
  wait_for drained node2
  # a survivor that fails afterwards (task 0 exits 3 instead of 0)
  echo 'exit 3' > "$D/exit.0"
  finish_step 3
}

@test "a bad failure report is refused by name and drains nothing" {
  start_step
  echo "node1 node 3 3" > "$D/report.0"      # task 3 does not run on node1
  echo "node1 melt 0 0" > "$D/report.1"
  wait_for bash -c "[ ! -e '$D/report.0' ] && [ ! -e '$D/report.1' ]"
  finish_step 0
  grep -q "ignored failure report 'node1 node 3 3'.*task 3 does not run on 'node1'" "$D/out"
  grep -q "ignored failure report 'node1 melt 0 0'.*kind 'melt'" "$D/out"
  ! sinfo -h -N -o %t | grep -q '^dr' || false
  nothing_left
}

@test "a forged report (a healthy task, a live node) drains nothing and kills nothing" {
  start_step
  victim=$(task_of node2 | awk '{print $2}')
  sibling=$(task_of node2 | awk '{print $1}')
  other=$(task_of node3 | awk '{print $1}')
  reporter=$(task_of node1 | awk '{print $1}')
  # a running task of its own node "crashed"; a node whose slurmd answers "lost"
  echo "node2 crash $victim $victim" > "$D/report.$sibling"
  echo "node3 node $other $other" > "$D/report.$reporter"
  wait_for bash -c "[ ! -e '$D/report.$sibling' ] && [ ! -e '$D/report.$reporter' ]"
  wait_for grep -q "slurmd of node3 answers" "$D/out"
  wait_for grep -q "task $victim still runs here" "$D/out"
  ! sinfo -h -N -o %t | grep -q '^dr' || false
  kill -0 "$(cat "$D/pid.$victim")"
  finish_step 0
  grep -q "^done $victim\$" "$D/out"
  nothing_left
}
