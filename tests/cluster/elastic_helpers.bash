# Shared by the elastic-*.bats files: the cluster's fault tools, waiting for
# events (bounded, never a timing check) and "nothing left running".

MC="$WHALE_SRC_DIR/contrib/minicluster/whale-minicluster"
STATE=${WHALE_MC_DIR:-$(dirname "${SLURM_CONF:-/nonexistent/x}")}
I=${WHALE_MC_INSTANCE:-9}

# Bring a node back for the next case: link up, slurmd running (a restart
# re-registers at once), resumed, idle.
restore_node() {
  local n=$1
  "$MC" -i "$I" link-up "$n" >/dev/null 2>&1 || true
  if [ -n "$(node_procs "$n" | grep -v '^slurmd$')" ] || \
     ! node_procs "$n" | grep -q '^slurmd$'; then
    "$MC" -i "$I" kill-node "$n" >/dev/null 2>&1 || true
  fi
  "$MC" -i "$I" start-node "$n" >/dev/null 2>&1 || true
  for _ in $(seq 300); do
    scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
    [ "$(sinfo -h -n "$n" -o %t)" = idle ] && return 0
    sleep 0.2
  done
  echo "node $n did not come back: $(sinfo -h -n "$n" -o '%t %E')"
  return 1
}


# Command names of the processes in node N's namespace.
node_procs() { ip netns pids "wmc$I-$1" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null; }

# Every node holds only its slurmd (the step's stepds and tasks are gone).
nothing_left() {
  local n left
  for _ in $(seq 300); do
    left=
    for n in $(sinfo -h -N -o %N | sort -u); do
      left+=$(node_procs "$n" | grep -v '^slurmd$' | sed "s/^/$n:/" | tr '\n' ' ')
    done
    [ -z "$left" ] && return 0
    sleep 0.2
  done
  echo "left running: $left"
  return 1
}

# wait_for CMD...: until it succeeds (a bound against a hang, not a timing check)
wait_for() {
  for _ in $(seq 600); do "$@" && return 0; sleep 0.2; done
  echo "never true: $*"
  return 1
}

drained() { sinfo -h -n "$1" -o %t | grep -q '^dr'; }
job_nodes() { squeue -h -j "$1" -o %N; }
# node_left_job JOB NODE: slurmctld took NODE out of the (still running) job
node_left_job() {
  local nl
  nl=$(job_nodes "$1")
  [ -n "$nl" ] && ! scontrol show hostnames "$nl" | grep -qx "$2"
}

# node_of_rank R: the node whose namespace runs the whale-train process
# started as logical rank R ("" while none does)
node_of_rank() {
  local n p
  for n in $(sinfo -h -N -o %N | sort -u); do
    for p in $(ip netns pids "wmc$I-$n" 2>/dev/null); do
      # (comm can read "exe": match the command line)
      tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q 'whale-train' || continue
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "WHALE_RANK=$1" && { echo "$n"; return 0; }
    done
  done
}
