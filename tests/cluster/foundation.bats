#!/usr/bin/env bats
# Foundation: the minicluster is a real multi-node Slurm cluster and the
# plugin is loaded by srun, sbatch and slurmstepd.

setup() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  TMP=$(mktemp -d)
}
teardown() { rm -rf "$TMP"; }

@test "srun -N3 --whale hostname runs on 3 distinct namespace nodes" {
  run timeout 300 srun -N3 --whale hostname
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "${lines[@]}" | sort -u | wc -l)" -eq 3 ]
  [[ "${lines[*]}" == *node1* ]]
}

@test "nodes have their own network address" {
  run timeout 300 srun -N3 --whale sh -c 'ip -4 -o addr show eth0 | awk "{print \$4}"'
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "${lines[@]}" | sort -u | wc -l)" -eq 3 ]
}

@test "srun --help lists --whale" {
  run timeout 300 srun --help
  [[ "$output" == *"--whale"* ]]
}

@test "the plugin reaches slurmstepd: tasks see WHALE_TASK_ID" {
  run timeout 300 srun -N2 -n4 --whale printenv WHALE_TASK_ID
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "${lines[@]}" | sort -n | tr '\n' ' ')" = "0 1 2 3 " ]
}

@test "without --whale the plugin does nothing" {
  run timeout 300 srun -N1 sh -c 'env | grep -cE "^WHALE_(TASK_ID|RANK|WORLD|TP|PP|DP|SPARE|RANKMAP|PLAN)=" || true'
  [ "$status" -eq 0 ]
  [ "${lines[-1]}" = "0" ]
}

@test "sbatch with #SBATCH --whale reaches the script's sruns" {
  cat > "$TMP/job.sh" <<'JOB'
#!/bin/bash
#SBATCH -N 2
#SBATCH --whale
srun printenv WHALE_TASK_ID
JOB
  jid=$(timeout 300 sbatch --parsable -o "$TMP/out" "$TMP/job.sh")
  for _ in $(seq 600); do # until the job left the queue (bound: a hang)
    squeue -h -j "$jid" 2>/dev/null | grep -q . || break
    sleep 0.5
  done
  run cat "$TMP/out"
  [ "$(printf '%s\n' "${lines[@]}" | sort -n | tr '\n' ' ')" = "0 1 " ]
}

@test "PMIx is the default MPI plugin across nodes" {
  run timeout 300 srun -N2 --whale printenv PMIX_RANK
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "${lines[@]}" | sort -n | tr '\n' ' ')" = "0 1 " ]
}
