#!/usr/bin/env bats
# Elastic training end to end: whale-train under srun
# with a hot-spare node (TP=2 x PP=2 x DP=2 + 1 spare node = -N5 -n10), a
# fault injected with WHALE_FAULT or with the minicluster's kill-node /
# link-down, and every case checks that
#   - all requested steps complete and srun exits 0 (the replaced task does
#     not count, see spank_whale(8)),
#   - every step's loss equals the uninterrupted run's (same layout: 1e-6
#     relative; a shrunk DP reduces in another order: 1e-5),
#   - the event is in the log ("elastic:" line) and in the metrics
#     ({"event":"recovery"}),
#   - the failed node was drained by the report, and nothing is left running.

load train_helpers
load elastic_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
STEPS=30
# Faults from outside the processes (a node killed, a link cut) are applied
# once 8 steps are done: the run must still be going then. 30 steps of this
# model take ~1.3 s on a quiet machine, less than the fault takes to apply,
# so those cases train longer (their own reference, "3d-long").
LONG_STEPS=100

setup_file() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  export TMPD=$(mktemp -d)
  chmod 755 "$TMPD"
  make_corpus "$TMPD"
  printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$TMPD/t4.conf"
  printf 'Name=m4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\nExperts=4 TopK=2 ExpertFFN=64 CapacityFactor=1.0\n' > "$TMPD/m4.conf"
}
teardown_file() { rm -rf "$TMPD"; }

setup() {
  [ "$(sinfo -h -N -o %N | sort -u | wc -l)" -ge 5 ] || skip "needs 5 nodes (WHALE_TEST_NODES=5)"
}

teardown() {
  [ -n "${SRUN_PID:-}" ] && { kill "$SRUN_PID" 2>/dev/null; wait "$SRUN_PID" 2>/dev/null || true; }
  for n in ${FAILED_NODES:-}; do restore_node "$n"; done
  true
}

train_args() {
  echo --model "$TMPD/${MODEL:-t4}.conf" --data "$TMPD/corpus.txt" --steps $STEPS --batch 8 --seq 32 \
       --grad-accum "${ACCUM:-4}" --threads 1 --no-progress --log-every 1 ${ZERO:+--zero $ZERO}
}

# ref NAME SRUN-OPTIONS... : the uninterrupted run of a layout, once per file
ref() {
  local name=$1; shift
  [ -s "$TMPD/ref-$name.jsonl" ] && return 0
  timeout 600 srun "$@" "$TRAIN" $(train_args) --metrics "$TMPD/ref-$name.jsonl" \
    > "$TMPD/ref-$name.out" 2>&1 || { tail -5 "$TMPD/ref-$name.out"; return 1; }
}

# same_curve REF RUN TOL: every step 1..STEPS present (the last line of a
# step counts: redone steps are written again) and within TOL relative
same_curve() {
  python3 - "$1" "$2" "$3" "$STEPS" <<'PY'
import json, sys
def load(p):
    d = {}
    for l in open(p):
        if l.startswith('{"step"'):
            j = json.loads(l)
            d[j["step"]] = j["loss"]
    return d
a, b, tol, n = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
missing = [s for s in range(1, n + 1) if s not in b]
assert not missing, "steps missing after recovery: %s" % missing
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(1, n + 1))
print("worst relative loss difference %.2e (tolerance %.0e)" % (worst, tol))
sys.exit(0 if worst <= tol else 1)
PY
}

# recovery_event RUN KIND HOW: the metrics hold a recovery event of that kind
recovery_event() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"event":"recovery"')]
assert ev, "no recovery event in the metrics"
e = ev[0]
print(json.dumps(e))
assert e["kind"] == sys.argv[2], e["kind"]
assert sys.argv[3] == "any" or e["how"] == sys.argv[3], e["how"]
for k in ("detect_s", "agree_s", "rebuild_s"):
    assert k in e, k
PY
}

# fault_run NAME ENV... -- SRUN-OPTIONS...: the run with a fault, in the
# background (SRUN_PID); its output in $TMPD/NAME.out
fault_run() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -f "$TMPD/$name.jsonl"
  env "${envs[@]}" timeout 900 srun "$@" "$TRAIN" $(train_args) --metrics "$TMPD/$name.jsonl" \
    > "$TMPD/$name.out" 2>&1 3>&- &
  SRUN_PID=$!
}

# finish NAME: wait for srun
finish() {
  local rc=0
  wait "$SRUN_PID" || rc=$?
  SRUN_PID=
  RC=$rc
  tail -n 25 "$TMPD/$1.out"
  echo "srun exit status $rc"
}

steps_done() { [ -s "$TMPD/$1.jsonl" ] && [ "$(grep -c '^{"step"' "$TMPD/$1.jsonl")" -ge "$2" ]; }

# check NAME REF KIND HOW TOL [SRUN-STATUS]: the common assertions
check() {
  local name=$1 refn=$2 kind=$3 how=$4 tol=$5 want=${6:-0}
  [ "$RC" -eq "$want" ]
  run same_curve "$TMPD/ref-$refn.jsonl" "$TMPD/$name.jsonl" "$tol"
  echo "$output"
  [ "$status" -eq 0 ]
  run recovery_event "$TMPD/$name.jsonl" "$kind" "$how"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q -E "recovery: rank [0-9]+ on|elastic: epoch" "$TMPD/$name.out"
  nothing_left
}

L3D=(-N5 -n10 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-spares=1)

@test "kill -9 one rank during forward: the spare takes over, same losses" {
  ref 3d "${L3D[@]}"
  fault_run kfwd WHALE_FAULT=kill:rank=3:step=12:phase=forward -- "${L3D[@]}"
  finish kfwd
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kfwd 3d replaced crash 1e-6 0
  [ -n "$FAILED_NODES" ]
}

@test "kill -9 one rank during a backward collective: same losses" {
  ref 3d "${L3D[@]}"
  fault_run kcoll WHALE_FAULT=kill:rank=5:step=12:phase=collective -- "${L3D[@]}"
  finish kcoll
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kcoll 3d replaced crash 1e-6 0
}

@test "kill -9 one rank during a checkpoint save: same losses, the checkpoints stay loadable" {
  ref 3dck "${L3D[@]}" --whale-ckpt-dir="$TMPD/ckref" --whale-ckpt-every=5
  fault_run kckpt WHALE_FAULT=kill:rank=2:step=15:phase=ckpt -- "${L3D[@]}" \
    --whale-ckpt-dir="$TMPD/ck" --whale-ckpt-every=5
  finish kckpt
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kckpt 3dck replaced crash 1e-6 0
  run "$WHALE_BUILD_DIR/runtime/tools/ckpt/whale-ckpt" verify "$TMPD/ck"
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "kill a whole node (slurmd and every process): the spare node takes over, srun exits 0" {
  STEPS=$LONG_STEPS
  ref 3d-long "${L3D[@]}"
  fault_run knode -- "${L3D[@]}"
  wait_for steps_done knode 8
  node=$(node_of_rank 3)
  [ -n "$node" ]
  FAILED_NODES=$node
  "$MC" -i "$I" kill-node "$node"
  finish knode
  check knode 3d-long replaced node 1e-6 0
  grep -q "Node failure on $node" "$TMPD/knode.out" || true  # Slurm says so only after SlurmdTimeout
  sinfo -h -n "$node" -o %E | grep -q "failed (node)"
}

# spare_proc: "NODE PID" of a whale-train process started as a spare
spare_proc() {
  local n p
  for n in $(sinfo -h -N -o %N | sort -u); do
    for p in $(ip netns pids "wmc$I-$n" 2>/dev/null); do
      tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q 'whale-train' || continue
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx 'WHALE_SPARE=1' && { echo "$n $p"; return 0; }
    done
  done
}

@test "kill -9 an idle spare: the working ranks go on undisturbed, srun exits 0, its node is drained" {
  # An idle spare holds nothing of the training (ZeRO 0: no in-memory copy
  # on it, no offload): its death must abort no step and redo nothing, and
  # srun's status stays the training's (it was 137).
  STEPS=$LONG_STEPS
  ref 3d-long "${L3D[@]}"
  fault_run kspare -- "${L3D[@]}"
  wait_for steps_done kspare 8
  read -r node pid <<< "$(spare_proc)"
  [ -n "$pid" ]
  FAILED_NODES=$node
  kill -9 "$pid"
  finish kspare
  [ "$RC" -eq 0 ]
  # no recovery: no event, no redone step (each step written once)
  ! grep -q '"event":"recovery"' "$TMPD/kspare.jsonl" || false
  ! grep -q "recovery:" "$TMPD/kspare.out" || false
  # the end of the step is fenced over the live tasks: no barrier fails on
  # the dead spare, and no task sees a working rank vanish while it still
  # talks to it (the waiting spare would take that for 8 failures)
  [ "$(grep -cE "error: barrier on a group of|error: rank [0-9]+ \(task [0-9]+ on [^)]*\) failed" \
        "$TMPD/kspare.out")" -eq 0 ]
  [ "$(grep -c '^{"step"' "$TMPD/kspare.jsonl")" -eq "$STEPS" ]
  run same_curve "$TMPD/ref-3d-long.jsonl" "$TMPD/kspare.jsonl" 1e-6
  echo "$output"
  [ "$status" -eq 0 ]
  wait_for drained "$node"
  sinfo -h -n "$node" -o %E | grep -q "spare task [0-9]* failed (crash)"
  nothing_left
}

@test "take one node's link down: the step goes on without it; the cut-off ranks stop by themselves" {
  STEPS=$LONG_STEPS
  ref 3d-long "${L3D[@]}"
  fault_run klink UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 -- "${L3D[@]}"
  wait_for steps_done klink 8
  node=$(node_of_rank 5)
  [ -n "$node" ]
  FAILED_NODES=$node
  "$MC" -i "$I" link-down "$node"
  finish klink
  # the cut-off minority stopped on its own: nothing of the step on it
  wait_for bash -c "! ip netns pids wmc$I-$node | xargs -r ps -o args= -p | grep -q whale-train"
  "$MC" -i "$I" link-up "$node"
  check klink 3d-long replaced link 1e-6 0
}

@test "a node's link down for less than --whale-node-grace: it comes back, no replacement, same losses" {
  # DP=2 without spares: dropping the cut-off replica is what the survivors
  # would do at once; with the grace they wait, the node is heard again
  # after link-up, keeps its rank (RESUMED), and the steps since the agreed
  # one are redone from each rank's own copy. Nothing is drained.
  # 400 steps: two ranks of this model take ~10 ms a step on a quiet
  # machine, and the link must go down while the run is still going (once
  # it is down no step completes, so the wait below has no race)
  STEPS=400
  ref dp2-400 -N2 -n2 --whale-dp=2
  fault_run kgrace WHALE_ELASTIC=1 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 -- -N2 -n2 --whale-dp=2 \
    --whale-node-grace=120 --no-kill --kill-on-bad-exit=0 --wait=0
  wait_for steps_done kgrace 8
  node=$(node_of_rank 1)
  [ -n "$node" ]
  FAILED_NODES=$node
  "$MC" -i "$I" link-down "$node"
  # both sides declare the other silent (the cut-off one waits too: no majority)
  wait_for grep -q "waiting up to .* (WHALE_NODE_GRACE)" "$TMPD/kgrace.out"
  "$MC" -i "$I" link-up "$node"
  finish kgrace
  check kgrace dp2-400 resumed link 1e-6 0
  grep -q "keeps its place" "$TMPD/kgrace.out"
  grep -q "elastic: epoch 1 RESUMED" "$TMPD/kgrace.out"
  ! drained "$node" || false
  grep -E "failed or is unreachable|waiting up to|keeps its place|RESUMED" "$TMPD/kgrace.out" | head -8
}

@test "SIGSTOP one rank: detected as hung, replaced, and killed by its node's slurmstepd" {
  ref 3d "${L3D[@]}"
  fault_run khang WHALE_FAULT=hang:rank=3:step=12 -- "${L3D[@]}"
  finish khang
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check khang 3d replaced hang 1e-6 0
}

@test "a second failure after the first recovery: the second spare task takes it" {
  ref 3d "${L3D[@]}"
  fault_run ktwice "WHALE_FAULT=kill:rank=3:step=8;kill:rank=6:step=20" -- "${L3D[@]}"
  finish ktwice
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check ktwice 3d replaced crash 1e-6 0
  [ "$(grep -c '^{"event":"recovery"' "$TMPD/ktwice.jsonl")" -eq 2 ]
}

@test "no spare left at DP=2: the run goes on at DP=1 with the same loss curve" {
  # ZeRO 0: each replica holds all state. (At ZeRO >= 1 the dropped
  # replica's shards come from its holder's copy: the next case; with the
  # holder lost too, from disk.)
  ref dp2 -N2 -n2 --whale-dp=2
  fault_run kshrink WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=1:step=12 -- -N2 -n2 --whale-dp=2 \
    --no-kill --kill-on-bad-exit=0 --wait=0
  finish kshrink
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kshrink dp2 shrunk crash 1e-5 0
}

@test "shrink DP 4 -> 3 with a global batch of 8 at ZeRO 0, 1 and 3, no checkpoint directory: uneven shares, same losses" {
  # 8 micro-batches do not split over 3 replicas: the survivors take
  # uneven shares of the same global batch. ZeRO 0: each holds all state;
  # ZeRO 1 and 3: the dropped replica's shards come from the in-memory copy
  # its holder keeps, and every survivor's shards are re-cut for DP 3.
  # (ZeRO 1 and 3 reduce in another order than the ZeRO 0 reference: 1e-5.)
  export ACCUM=2
  ref dp4a2 -N4 -n4 --whale-dp=4
  for z in 0 1 3; do
    export ZERO=$z
    fault_run kshrink3z$z WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=3:step=12 -- -N4 -n4 \
      --whale-dp=4 --no-kill --kill-on-bad-exit=0 --wait=0
    finish kshrink3z$z
    FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
    if [ $z = 0 ]; then
      grep -q "elastic: DP 4 -> 3, this replica 3 micro-batches of 1 (global batch 8 kept, uneven shares)" \
        "$TMPD/kshrink3z$z.out"
    else
      grep -q "re-cut for DP 3 from memory" "$TMPD/kshrink3z$z.out"
      run grep -c "restoring the last checkpoint" "$TMPD/kshrink3z$z.out"
      [ "$output" = 0 ]
    fi
    check kshrink3z$z dp4a2 shrunk crash 1e-5 0
    for n in $FAILED_NODES; do restore_node "$n"; done
    FAILED_NODES=
  done
}

@test "a rank and the holder of its copy killed together: restored from disk inside the step" {
  # DP=4 ZeRO 1 without spares: rank 1's copy is held by rank 2 (next DP
  # replica). Batch 8 = 1 x 2 micro x DP 4; after both die DP 2 runs 4.
  export ACCUM=2
  ref dp4 -N4 -n4 --whale-dp=4 --whale-zero=1
  fault_run kdisk WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=1,2:step=13 -- \
    -N4 -n4 --whale-dp=4 --whale-zero=1 --whale-ckpt-dir="$TMPD/ckd" --whale-ckpt-every=5 \
    --no-kill --kill-on-bad-exit=0 --wait=0
  finish kdisk
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kdisk dp4 restored crash 1e-5 0
  grep -q '"source":"disk"' "$TMPD/kdisk.jsonl"
}

@test "TP=2 x PP=2 x DP=2 + a spare node with ZeRO 1 and ZeRO 3: a killed rank is replaced, same losses" {
  for z in 1 3; do
    ref 3dz$z "${L3D[@]}" --whale-zero=$z
    fault_run kz$z WHALE_FAULT=kill:rank=6:step=10:phase=backward -- "${L3D[@]}" --whale-zero=$z
    finish kz$z
    FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
    check kz$z 3dz$z replaced crash 1e-6 0
    for n in $FAILED_NODES; do restore_node "$n"; done
    FAILED_NODES=
  done
}

@test "MoE, EP=2 x DP=2 + a spare: kill -9 a rank holding experts 2 and 3, same losses" {
  # rank 1 computes experts 2..3 of every MoE block for both ranks of its
  # EP group; its replacement rebuilds the EP group and takes them over
  export MODEL=m4
  ref ep2 -N3 -n3 --whale-dp=2 --whale-ep=2 --whale-spares=1
  grep -q '"ep":2' "$TMPD/ref-ep2.jsonl"
  fault_run kep WHALE_FAULT=kill:rank=1:step=12:phase=backward -- \
    -N3 -n3 --whale-dp=2 --whale-ep=2 --whale-spares=1
  finish kep
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  check kep ep2 replaced crash 1e-6 0
}

# all_steps RUN: every step 1..STEPS has a line in RUN's metrics
all_steps() {
  python3 - "$TMPD/$1.jsonl" $STEPS <<'PY'
import json, sys
st = {json.loads(l)["step"] for l in open(sys.argv[1]) if l.startswith('{"step"')}
missing = [s for s in range(1, int(sys.argv[2]) + 1) if s not in st]
assert not missing, "steps missing from the metrics: %s" % missing
PY
}

@test "shrink with PP=2: the new rank 0 keeps writing the metrics, recovery record included, MFU <= 100 %" {
  # ranks 4 and 5 (stage 1 of DP replica 0) die without a spare: replica 0
  # is dropped, replica 1 is renumbered 0..3 and the task that was rank 0
  # leaves; whoever is rank 0 now appends to the metrics
  fault_run kpp WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=4,5:step=15 -- -N4 -n8 --whale-tp=2 \
    --whale-pp=2 --whale-dp=2 --no-kill --kill-on-bad-exit=0 --wait=0
  finish kpp
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  run recovery_event "$TMPD/kpp.jsonl" shrunk any
  echo "$output"
  [ "$status" -eq 0 ]
  run all_steps kpp
  echo "$output"
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/kpp.jsonl" $STEPS 256 # batch 8 x seq 32
  echo "$output"
  [ "$status" -eq 0 ]
  ! grep -E "MFU ([1-9][0-9]{2,}|[2-9][0-9]{2})%" "$TMPD/kpp.out" || false
  nothing_left
}

@test "replace, then shrink with PP=2: the metrics go on to the end" {
  # the spare node's two tasks take ranks 0 and 1 (one TP group, rank 0's
  # metrics file with it); then ranks 6 and 7 die with no spare left
  fault_run krs "WHALE_ELASTIC=1" "WHALE_FAULT=kill:rank=0,1:step=8;kill:rank=6,7:step=18" -- \
    "${L3D[@]}" --no-kill --kill-on-bad-exit=0 --wait=0
  finish krs
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  [ "$(grep -c '^{"event":"recovery"' "$TMPD/krs.jsonl")" -ge 2 ]
  grep '^{"event":"recovery"' "$TMPD/krs.jsonl" | grep -q '"kind":"shrunk"'
  run all_steps krs
  echo "$output"
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/krs.jsonl" $STEPS 256
  echo "$output"
  [ "$status" -eq 0 ]
  nothing_left
}

@test "rank 0 killed: the promoted spare's summary is the whole run's (steps, first loss, checkpoints)" {
  # the save of step 10 may be in flight when rank 0 (its committer) dies:
  # the summary counts what was committed (WHALE_CKPT_KEEP=0 keeps them all)
  fault_run kr0 WHALE_FAULT=kill:rank=0:step=12 WHALE_CKPT_KEEP=0 -- "${L3D[@]}" \
    --whale-ckpt-dir="$TMPD/ckr0" \
    --whale-ckpt-every=5
  finish kr0
  FAILED_NODES=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /^dr/ {print $1}')
  run recovery_event "$TMPD/kr0.jsonl" replaced any
  echo "$output"
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/kr0.jsonl" $STEPS 256 "$(committed "$TMPD/ckr0")"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q "steps  *$STEPS on 8 ranks" "$TMPD/kr0.out"
  nothing_left
}
