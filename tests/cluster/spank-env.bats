#!/usr/bin/env bats
# The contract environment of Whale steps on the real minicluster
# (>= 4 namespace nodes, two leaf switches under one spine).

load spank_helpers

setup_file() { spank_setup_file; }
setup() { wait_cluster_idle; }
teardown_file() { spank_teardown_file; }

# Check one step's table (from whale_env_cmd): every working rank exactly
# once, coordinates follow rank = ((pp*DP)+dp)*TP + tp, RANKMAP agrees,
# TP groups on one node.
CHECK_PY=$(cat <<'PY'
import sys
rows = [l.split() for l in sys.stdin.read().strip().splitlines()]
tp, pp, dp = map(int, sys.argv[1:4])
spares_expected = int(sys.argv[4])
ranks = {}
nodes = {}
rankmap = None
for task, rank, t, d, p, spare, node, rm, TP, PP, DP, W in rows:
    task, rank, t, d, p, spare = map(int, (task, rank, t, d, p, spare))
    assert (int(TP), int(PP), int(DP), int(W)) == (tp, pp, dp, tp * pp * dp), rows
    rankmap = rankmap or rm
    assert rm == rankmap, "RANKMAP differs between tasks"
    if spare:
        assert rank == -1 and t == -1
        continue
    assert rank == (p * dp + d) * tp + t, (rank, t, d, p)
    assert rank not in ranks
    ranks[rank] = task
    nodes[rank] = node
assert sorted(ranks) == list(range(tp * pp * dp)), sorted(ranks)
# decode RANKMAP: logical rank -> task id
dec = []
for item in rankmap.split(","):
    a, _, b = item.partition("-")
    a = int(a); b = int(b) if b else a
    step = 1 if b >= a else -1
    dec += list(range(a, b + step, step))
assert dec == [ranks[r] for r in range(len(dec))], (dec, ranks)
for g in range(0, tp * pp * dp, tp):
    assert len({nodes[r] for r in range(g, g + tp)}) == 1, "TP group across nodes"
nspare = sum(1 for r in rows if r[5] == "1")
assert nspare == spares_expected, nspare
print("ok")
PY
)
check_table() { python3 -c "$CHECK_PY" "$@"; }

@test "srun -N4 -n8 --whale-tp=2: correct WHALE_* for every task" {
  run bash -c "timeout 300 srun -N4 -n8 --whale-tp=2 --whale-dp=4 bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 8 ]
  run check_table 2 1 4 0 <<< "$output"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "TP=2 PP=2: DP groups under one leaf switch, PP across the spine" {
  # two nodes under each leaf: with 5 nodes leaf1 holds node[1-3], leaf2 node[4-5]
  run bash -c "timeout 300 srun -N4 -n8 -w node[2-5] --whale-tp=2 --whale-pp=2 bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  table=$output
  run check_table 2 2 2 0 <<< "$table"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  # leaf of each node from the cluster's topology.conf
  leaf_of() { python3 -c "
import re,sys
for l in open('$STATE/topology.conf'):
    m = re.match(r'SwitchName=(\S+) Nodes=(\S+)', l)
    if m and '$1' in [re.sub(r'\[.*','',m.group(2)) + str(i) for a,b in re.findall(r'(\d+)-(\d+)', m.group(2)) for i in range(int(a), int(b)+1)]:
        print(m.group(1))"; }
  # ranks 0 and 2 (dp 0 and 1 of stage 0) share a leaf
  n0=$(awk '$2==0 {print $7}' <<< "$table"); n2=$(awk '$2==2 {print $7}' <<< "$table")
  [ -n "$(leaf_of "$n0")" ]
  [ "$(leaf_of "$n0")" = "$(leaf_of "$n2")" ]
  # and stage 1 sits under the other leaf
  n4=$(awk '$2==4 {print $7}' <<< "$table")
  [ "$(leaf_of "$n0")" != "$(leaf_of "$n4")" ]
}

@test "cyclic distribution: TP groups still pair the tasks of one node" {
  run bash -c "timeout 300 srun -N4 -n8 -m cyclic --whale-tp=2 bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  run check_table 2 1 4 0 <<< "$output"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "a spare node gets WHALE_SPARE=1 on all its tasks, the rest form TP*PP*DP" {
  run bash -c "timeout 300 srun -N4 -n8 --whale-tp=2 --whale-spares=1 bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  run check_table 2 1 3 2 <<< "$output"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "whale steps get PMIx without --mpi=pmix even where MpiDefault is not pmix" {
  sed 's/^MpiDefault=.*/MpiDefault=none/' "$SLURM_CONF" > "$BATS_TEST_TMPDIR/slurm.conf"
  run env SLURM_CONF="$BATS_TEST_TMPDIR/slurm.conf" timeout 300 srun -N2 -n2 sh -c 'echo ${PMIX_RANK:-none}'
  [ "$status" -eq 0 ]
  [[ "$output" == *none* ]]           # a plain step on that site has no PMIx
  run env SLURM_CONF="$BATS_TEST_TMPDIR/slurm.conf" timeout 300 srun -N2 -n2 --whale-tp=1 sh -c 'echo ${PMIX_RANK:-none}'
  [ "$status" -eq 0 ]
  [ "$(sort <<< "$output" | tr '\n' ' ')" = "0 1 " ]
}

@test "WHALE_PLAN carries the runtime knobs as inline JSON, WHALE_CONF names the config" {
  run timeout 300 srun -N2 -n4 --whale-tp=2 --whale-zero=2 --whale-microbatch=3 \
      --whale-recompute=selective --whale-offload=optimizer --whale-ckpt-dir=/tmp/ck/%u/%j \
      --whale-ckpt-every=7 bash -c 'echo "$WHALE_PLAN"; echo "CONF=$WHALE_CONF"'
  [ "$status" -eq 0 ]
  plan=$(grep '^{' <<< "$output" | head -1)
  python3 - "$plan" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
assert (p["tp"], p["pp"], p["dp"], p["zero"], p["micro_batch"]) == (2, 1, 2, 2, 3), p
assert p["recompute"] == "selective" and p["offload"] == "optimizer", p
assert p["ckpt_every"] == 7 and p["ckpt_dir"].startswith("/tmp/ck/") and "%" not in p["ckpt_dir"], p
PY
  [[ "$output" == *"CONF=$SITE_CONF"* ]]
}

@test "--whale-plan=FILE: the plan's degrees and knobs reach the tasks" {
  printf '{"version":1,"tp":2,"pp":2,"dp":2,"zero":1,"micro_batch":2,"num_micro_batches":4}\n' > "$BATS_TEST_TMPDIR/plan.json"
  run bash -c "timeout 300 srun -N4 -n8 --whale-plan=$BATS_TEST_TMPDIR/plan.json bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  run check_table 2 2 2 0 <<< "$output"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "sbatch --whale-* options reach the script's sruns; an srun option overrides" {
  cat > "$BATS_TEST_TMPDIR/job.sh" <<'EOS'
#!/bin/bash
#SBATCH -N4 -n8
#SBATCH --whale-tp=2
srun printenv WHALE_TP | sort -u | sed 's/^/inherited=/'
srun --whale-tp=1 printenv WHALE_TP | sort -u | sed 's/^/override=/'
srun printenv WHALE_DP | sort -u | sed 's/^/dp=/'
EOS
  run timeout 90 sbatch --wait -o "$BATS_TEST_TMPDIR/out" "$BATS_TEST_TMPDIR/job.sh"
  [ "$status" -eq 0 ] || { cat "$BATS_TEST_TMPDIR/out"; false; }
  run cat "$BATS_TEST_TMPDIR/out"
  [[ "$output" == *"inherited=2"* ]]
  [[ "$output" == *"override=1"* ]]
  [[ "$output" == *"dp=4"* ]]
}

@test "site config with GPUs and NICs: CUDA_VISIBLE_DEVICES and rail-matched UCX/NCCL devices" {
  conf=$(user_conf "NodeName=DEFAULT GPUs=2 NICs=eth0,eth1 NICBandwidth=100Gb")
  run bash -c "timeout 300 srun -N2 -n4 --whale-conf=$conf --whale-tp=2 bash -c 'echo \$WHALE_LOCAL_RANK \$CUDA_VISIBLE_DEVICES \$UCX_NET_DEVICES \$NCCL_SOCKET_IFNAME' | sort -u"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = "0 0 eth0 =eth0" ]
  [ "${lines[1]}" = "1 1 eth1 =eth1" ]
  # a user's (or Slurm's gres) device choice is kept; stale WHALE_* are replaced
  run bash -c "NCCL_SOCKET_IFNAME=lo WHALE_RANK=99 timeout 300 srun -N1 -n2 --whale-conf=$conf --whale-tp=2 bash -c 'echo \$WHALE_RANK \$NCCL_SOCKET_IFNAME' | sort"
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = "0 lo" ]
  [ "${lines[1]}" = "1 lo" ]
}

@test "NVLink domain spanning two nodes (NVL72-style) lets TP cross those nodes only" {
  conf=$(user_conf "NVLinkDomain=rackA Nodes=node[1-2]" "NVLinkDomain=rackB Nodes=node[3-4]")
  run bash -c "timeout 300 srun -N4 -n8 --whale-conf=$conf --whale-tp=4 bash -c '$whale_env_cmd' | sort -n"
  [ "$status" -eq 0 ]
  python3 -c '
import sys
rows = [l.split() for l in sys.stdin.read().strip().splitlines()]
node = {int(r[1]): r[6] for r in rows}
for g in (0, 4):
    ns = {node[r] for r in range(g, g + 4)}
    assert ns in ({"node1", "node2"}, {"node3", "node4"}), ns
' <<< "$output"
}

@test "--whale-verbose prints the layout with switches" {
  run timeout 300 srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-verbose true
  [ "$status" -eq 0 ]
  [[ "$output" == *"layout: TP=2 PP=2 DP=2"* ]]
  [[ "$output" == *"switch leaf"* ]]
  [[ "$output" == *"cost per step:"* ]]
}

@test "a step on a subset of its job's nodes is laid out on the step's nodes" {
  job=$(timeout 300 salloc -N4 -n8 --no-shell 2>&1 | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')
  [ -n "$job" ]
  run bash -c "timeout 300 srun --jobid=$job -N2 -n4 -w node3,node4 --whale-tp=2 bash -c '$whale_env_cmd' | sort -n"
  scancel "$job"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" != *node1* && "$output" != *node2* ]]
  run check_table 2 1 2 0 <<< "$output"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "a rank map longer than rankmap_inline_max travels as WHALE_RANKMAP=@file, removed after the step" {
  cp "$STATE/plugstack.conf" "$BATS_TEST_TMPDIR/plugstack.orig"
  sed -i 's|\(spank_whale\.so.*\)$|\1 rankmap_inline_max=4|' "$STATE/plugstack.conf"
  mkdir -p "$BATS_TEST_TMPDIR/tmp"
  run env TMPDIR="$BATS_TEST_TMPDIR/tmp" timeout 300 srun -N4 -n8 -m cyclic --whale-tp=2 \
      bash -c 'echo "$WHALE_RANKMAP $(cat ${WHALE_RANKMAP#@})"'
  cp "$BATS_TEST_TMPDIR/plugstack.orig" "$STATE/plugstack.conf"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  # every task reads the same map, each node from its own file
  [ "$(cut -d' ' -f2- <<< "$output" | sort -u | wc -l)" -eq 1 ]
  [[ "${lines[0]}" == "@$BATS_TEST_TMPDIR/tmp/whale."??????"/rankmap 0,4,1,5,2,6,3,7" ]]
  [ "$(cut -d' ' -f1 <<< "$output" | sort -u | wc -l)" -eq 4 ]
  # every node removes its copy when its slurmstepd ends (which may be just after srun)
  # (bound against a hang only: 60 s, a loaded machine)
  for _ in $(seq 600); do [ -z "$(ls "$BATS_TEST_TMPDIR/tmp")" ] && break; sleep 0.1; done
  [ -z "$(ls "$BATS_TEST_TMPDIR/tmp")" ]
}

@test "--whale-map=block keeps Slurm's task order; topo is the default" {
  run timeout 300 srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-map=block printenv WHALE_RANKMAP
  [ "$status" -eq 0 ]
  [ "$(sort -u <<< "$output")" = "0-7" ]
  run timeout 300 srun -N4 -n8 -m cyclic --whale-tp=2 --whale-map=block true
  [ "$status" -ne 0 ]
  [[ "$output" == *"block order puts TP group 0 (tasks 0-1) across nodes node1 and node2"* ]]
}

@test "--whale-ep=2 --whale-dp=2: every task gets WHALE_EP=2; an EP that does not divide DP is refused at submission" {
  run bash -c "timeout 300 srun -N2 -n2 --whale-ep=2 --whale-dp=2 bash -c 'echo \$WHALE_EP \$WHALE_DP \$WHALE_WORLD' | sort -u"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$output" = "2 2 2" ] || { echo "$output"; false; }
  # a dense step exports the default
  run bash -c "timeout 300 srun -N2 -n2 --whale-dp=2 printenv WHALE_EP | sort -u"
  [ "$output" = "1" ] || { echo "$output"; false; }
  mark="$BATS_TEST_TMPDIR/ran"
  run timeout 300 srun -N2 -n3 --whale-ep=2 --whale-dp=3 touch "$mark"
  [ "$status" -ne 0 ]
  [[ "$output" == *"--whale-ep=2 must divide the data-parallel degree --whale-dp=3"* ]] || { echo "$output"; false; }
  [[ "$output" == *"allowed --whale-ep: 1, 3"* ]] || { echo "$output"; false; }
  [ ! -e "$mark" ]
  # DP derived from the task count
  run timeout 300 srun -N2 -n6 --whale-tp=2 --whale-ep=2 touch "$mark"
  [ "$status" -ne 0 ]
  [[ "$output" == *"--whale-ep=2 must divide the data-parallel degree DP = 3"* ]] || { echo "$output"; false; }
  [ ! -e "$mark" ]
}

@test "--whale-ep with --whale-verbose says whether each expert group stays in an NVLink domain" {
  run timeout 300 srun -N4 -n8 --whale-ep=2 --whale-verbose true
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"EP=2: each of the 4 expert group(s) inside one NVLink domain"* ]] || { echo "$output"; false; }
  run timeout 300 srun -N4 -n8 --whale-ep=4 --whale-verbose true
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *"EP=4: 2 of 2 expert group(s) span more than one NVLink domain"* ]] || { echo "$output"; false; }
}
