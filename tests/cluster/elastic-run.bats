#!/usr/bin/env bats
# Elastic training under whale-run: WHALE_FAULT
# injection, in-memory copies that never change a loss, the clear stop when
# nothing can take a failed rank's place, and recovery on a hot spare:
# every requested step completes, every step's loss equals the
# uninterrupted run's (same seed, 1e-6 relative), nothing is left running
# and the event is in the log and the metrics.

load train_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"
STEPS=12

setup_file() {
  export TMPD=$(mktemp -d)
  make_corpus "$TMPD"
  printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$TMPD/t4.conf"
  # uninterrupted references (DP = 2 on one rank each: the same global batch)
  for z in 0 1 3; do
    timeout 300 "$RUN" -n 2 --timeout 280 "$TRAIN" $(targs) --zero $z \
      --metrics "$TMPD/ref-z$z.jsonl" > "$TMPD/ref-z$z.log" 2>&1
  done
}
teardown_file() {
  pkill -KILL -f "$TMPD/corpus" 2> /dev/null || true
  rm -rf "$TMPD"
}

targs() {
  echo --model gpt-tiny --data "$TMPD/corpus.txt" --steps $STEPS --batch 8 --threads 1 --no-progress \
    ${TARGS_EXTRA:-}
}

# same_curve REF OTHER [TOL]: every step 1..STEPS present in OTHER (a redone
# step: its last line counts) with a loss within TOL (1e-6) relative of REF's
same_curve() {
  python3 - "$1" "$2" "$STEPS" "${3:-1e-6}" <<'PY'
import json, sys
def load(p):
    d = {}
    for l in open(p):
        if l.startswith('{"step"'):
            j = json.loads(l)
            d[j["step"]] = j["loss"]
    return d
a, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
missing = [s for s in range(1, n + 1) if s not in b]
assert not missing, "steps missing after recovery: %s" % missing
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(1, n + 1))
print("worst relative loss difference %.2e" % worst)
sys.exit(0 if worst <= float(sys.argv[4]) else 1)
PY
}

nothing_left() {
  sleep 1
  ! pgrep -f "$TMPD/corpus" > /dev/null
}

@test "WHALE_FAULT: a bad spec is refused before any step, naming the item" {
  run env WHALE_FAULT="kill:rank=1:step=3;explode:rank=0:step=1" "$RUN" -n 1 "$TRAIN" $(targs)
  [ "$status" -ne 0 ]
  echo "$output" | grep -q "WHALE_FAULT item 'explode:rank=0:step=1': unknown action 'explode'"
  ! echo "$output" | grep -q '^0: step 1/' || false
  run env WHALE_FAULT="kill:rank=1:step=3:phase=lunch" "$RUN" -n 1 "$TRAIN" $(targs)
  [ "$status" -ne 0 ]
  echo "$output" | grep -q "phase=lunch: expected start, forward, backward, collective, optimizer or ckpt"
  run env WHALE_REDUNDANCY_EVERY=soon "$RUN" -n 1 "$TRAIN" $(targs)
  [ "$status" -ne 0 ]
  echo "$output" | grep -q "WHALE_REDUNDANCY_EVERY=soon: expected an integer in 0..1000000"
}

@test "in-memory copies (on a spare, on a buddy) leave every loss unchanged" {
  # a spare node holds the copies of 2 ranks at ZeRO 1
  run timeout 300 "$RUN" -n 3 --nodes 3 --spares 1 --timeout 280 "$TRAIN" $(targs) --zero 1 \
    --metrics "$TMPD/sp.jsonl"
  [ "$status" -eq 0 ]
  echo "$output" | grep -q "in-memory copies on the spare tasks"
  run same_curve "$TMPD/ref-z1.jsonl" "$TMPD/sp.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q '"redundancy_bytes"' "$TMPD/sp.jsonl"
  # no spare: the other DP replica holds the ZeRO-3 shard
  run timeout 300 env WHALE_REDUNDANCY_EVERY=1 "$RUN" -n 2 --timeout 280 "$TRAIN" $(targs) \
    --zero 3 --metrics "$TMPD/bd.jsonl"
  [ "$status" -eq 0 ]
  echo "$output" | grep -q "in-memory copies on buddy ranks"
  run same_curve "$TMPD/ref-z3.jsonl" "$TMPD/bd.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  nothing_left
}

@test "kill -9 with nothing to take its place: stop, say how to resume, leave nothing running" {
  # synchronous saves: the case asserts that step 2's checkpoint is there.
  # An asynchronous one may still be writing when rank 1 dies at step 4 on
  # a loaded machine (a fresh-clone run saw that), and a checkpoint that
  # lacks the dead rank's part is rightly never committed.
  run timeout 200 env WHALE_CKPT_ASYNC=0 WHALE_FAULT=kill:rank=1:step=4:phase=collective \
    "$RUN" -n 2 --timeout 180 \
    "$TRAIN" $(targs) --zero 1 --metrics "$TMPD/stop.jsonl" \
    --whale-ckpt-dir "$TMPD/ck-stop" --whale-ckpt-every 2
  [ "$status" -ne 0 ]
  echo "$output" | grep -q "WHALE_FAULT: rank 1 kills itself at step 4, phase collective"
  echo "$output" | grep -q "stopping: step 4 could not be completed"
  echo "$output" | grep -q -- "--resume latest --whale-ckpt-dir $TMPD/ck-stop"
  grep -q '"event":"recovery","kind":"stopped"' "$TMPD/stop.jsonl"
  [ -d "$TMPD/ck-stop/step-00000002" ]
  nothing_left
  # and the advertised resume finishes the run with the uninterrupted losses
  run timeout 200 "$RUN" -n 2 --timeout 180 "$TRAIN" $(targs) --zero 1 \
    --metrics "$TMPD/resumed.jsonl" --whale-ckpt-dir "$TMPD/ck-stop" --resume latest
  [ "$status" -eq 0 ]
  python3 - "$TMPD/ref-z1.jsonl" "$TMPD/resumed.jsonl" <<'PY'
import json, sys
a = {j["step"]: j["loss"] for j in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith('{"step"')))}
b = {j["step"]: j["loss"] for j in map(json.loads, (l for l in open(sys.argv[2]) if l.startswith('{"step"')))}
assert b and all(abs(a[s] - b[s]) <= 1e-6 * abs(a[s]) for s in b), (a, b)
PY
}

# recover_case NAME ZERO FAULT [whale-run options...]: a run with a spare
# that survives FAULT with the reference's losses (REF, TOL: override)
recover_case() {
  local name=$1 z=$2 fault=$3
  local ref=${REF:-$TMPD/ref-z$z.jsonl}
  shift 3
  # No --keep-going: an elastic step (spares, or WHALE_ELASTIC=1) under
  # whale-run outlives a failed task as under srun, and the replaced task
  # does not count: whale-run exits 0 when the training completed. The
  # summary line is printed by rank 0 (perhaps a promoted spare, "sN:").
  run timeout 400 env WHALE_FAULT="$fault" "$RUN" "$@" --timeout 380 "$TRAIN" \
    $(targs) --zero $z --metrics "$TMPD/$name.jsonl" --whale-ckpt-dir "$TMPD/ck-$name" \
    --whale-ckpt-every 3
  echo "$output" > "$TMPD/$name.out"
  echo "$output" | tail -30
  echo "whale-run exit status $status"
  [ "$status" -eq 0 ]
  echo "$output" | grep -q "^[s0-9]*: {\"summary\":{\"steps\":"
  echo "$output" | grep -q "recovery: rank"
  grep -q '"event":"recovery"' "$TMPD/$name.jsonl"
  run same_curve "$ref" "$TMPD/$name.jsonl" "${TOL:-1e-6}"
  echo "$output"
  [ "$status" -eq 0 ]
  nothing_left
}

@test "kill -9 during forward: the spare takes over, same losses" {
  recover_case fwd 1 kill:rank=1:step=5:phase=forward -n 3 --nodes 3 --spares 1
  grep '"event":"recovery"' "$TMPD/fwd.jsonl" | grep -q '"kind":"replaced"'
  grep '"event":"recovery"' "$TMPD/fwd.jsonl" | grep -q '"failed_rank":1'
}

@test "kill -9 during a backward collective (ZeRO 3): the spare takes over, same losses" {
  recover_case coll 3 kill:rank=1:step=6:phase=collective -n 3 --nodes 3 --spares 1
}

@test "kill -9 during a checkpoint save: the spare takes over, same losses" {
  # rank 1: the save of step 6 is in flight on every rank and rank 0 (the
  # committer) waits for rank 1's part; the dropped save must not stall the
  # run. (Rank 0 dying there loses step 6's metrics line: see the report.)
  recover_case ckpt 1 kill:rank=1:step=6:phase=ckpt -n 3 --nodes 3 --spares 1
}

@test "SIGSTOP: the hung rank is replaced, same losses" {
  # the stopped rank goes silent (HANG by silence, WHALE_PEER_TIMEOUT); the
  # no-progress bound is only a backstop: 3 s failed healthy ranks whose
  # compute between two calls took that long on a loaded machine
  WHALE_HANG_TIMEOUT=20 recover_case hang 1 hang:rank=1:step=5:phase=backward -n 3 --nodes 3 --spares 1
  grep '"event":"recovery"' "$TMPD/hang.jsonl" | grep -q '"how":"hang"'
}

@test "a second failure after the first recovery" {
  recover_case twice 1 "kill:rank=1:step=4;kill:rank=0:step=8:phase=backward" -n 4 --nodes 4 --spares 2
  [ "$(grep -c '"event":"recovery"' "$TMPD/twice.jsonl")" -ge 2 ]
}

@test "no spare left at DP = 2: goes on at DP = 1 with the same losses" {
  # DP = 1 sums the two halves of the batch in another order: the DP
  # equivalence tolerance of train-dp.bats
  TOL=1e-5 WHALE_ELASTIC=1 recover_case shrink 0 kill:rank=1:step=5 -n 2 --nodes 2
  grep '"event":"recovery"' "$TMPD/shrink.jsonl" | grep -q '"kind":"shrunk"'
  grep '"event":"recovery"' "$TMPD/shrink.jsonl" | grep -q '"dp":1'
}

@test "a rank and the holder of its copy killed together: restored from disk inside the step" {
  # kill:rank=1,2 = both die at the start of step 7 (whale-train meets all
  # ranks in a barrier first, so neither death is noticed before the other)
  # DP = 4, ZeRO 1, no spare: rank 1's moments are held by rank 2 (next DP
  # replica, another node). Both die in step 7: that state is gone from
  # memory; the two remaining replicas load the step-6 checkpoint
  # (resharded to DP = 2) inside the running step and go on.
  timeout 300 "$RUN" -n 4 --nodes 4 --timeout 280 "$TRAIN" $(targs) --zero 1 \
    --metrics "$TMPD/ref-dp4.jsonl" > /dev/null 2>&1
  REF="$TMPD/ref-dp4.jsonl" TOL=1e-5 WHALE_ELASTIC=1 recover_case disk 1 \
    "kill:rank=1,2:step=7" -n 4 --nodes 4
  grep '"event":"recovery"' "$TMPD/disk.jsonl" | grep -q '"source":"disk"'
  grep '"event":"recovery"' "$TMPD/disk.jsonl" | grep -q '"kind":"restored"'
}

# The numbers a run reports are the whole run's and measured ones (see
# run_numbers in train_helpers.bash): gpt-tiny, batch 8 x seq 64 tokens a step.
TOK=512

@test "rank 0 killed: the promoted spare's summary is the whole run's (steps, first loss, checkpoints, MFU <= 1)" {
  # the save of step 3 may be in flight when rank 0 dies (then it is lost):
  # the summary counts the checkpoints committed (--ckpt-keep 0: all kept)
  TARGS_EXTRA="--ckpt-keep 0" recover_case r0 1 kill:rank=0:step=5 -n 3 --nodes 3 --spares 1
  grep -q "hot spare: promoted to rank 0" "$TMPD/r0.out"
  run run_numbers "$TMPD/r0.jsonl" $STEPS $TOK "$(committed "$TMPD/ck-r0")"
  echo "$output"
  [ "$status" -eq 0 ]
  # the people's summary says the same
  grep -q "steps  *$STEPS on 2 ranks" "$TMPD/r0.out"
}

@test "redone steps: counted once in the summary, their time and work both in its rates" {
  # copies every 4 steps: the failure at step 7 rolls back to step 4 and
  # steps 5 and 6 are computed again
  WHALE_REDUNDANCY_EVERY=4 TARGS_EXTRA="--ckpt-keep 0" recover_case redo 1 kill:rank=1:step=7 \
    -n 3 --nodes 3 --spares 1
  grep '"event":"recovery"' "$TMPD/redo.jsonl" | grep -q '"steps_lost":[1-9]'
  run run_numbers "$TMPD/redo.jsonl" $STEPS $TOK "$(committed "$TMPD/ck-redo")"
  echo "$output"
  [ "$status" -eq 0 ]
  echo "$output" | grep -q "redone [1-9]"
  # and whale-report's summary says so
  python3 "$WHALE_BUILD_DIR/runtime/tools/report/whale-report" "$TMPD/redo.jsonl" \
    -o "$TMPD/redo.html"
  grep -q "$STEPS ([1-9] redone after a recovery)" "$TMPD/redo.html"
}

@test "resume: the summary counts from the resumed step, MFU <= 1" {
  run timeout 300 "$RUN" -n 2 --timeout 280 "$TRAIN" $(targs) --steps 6 --zero 1 \
    --metrics "$TMPD/half.jsonl" --whale-ckpt-dir "$TMPD/ck-half" --whale-ckpt-every 3
  [ "$status" -eq 0 ]
  run timeout 300 "$RUN" -n 2 --timeout 280 "$TRAIN" $(targs) --zero 1 \
    --metrics "$TMPD/resume.jsonl" --whale-ckpt-dir "$TMPD/ck-half" --resume latest
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/resume.jsonl" $((STEPS - 6)) $TOK
  echo "$output"
  [ "$status" -eq 0 ]
  head -1 "$TMPD/resume.jsonl" | grep -q '^{"step":7,'
}

# t4 at TP 2 x PP 2 x DP 2: batch 8 x seq 32 tokens a step
t4args() {
  echo --model "$TMPD/t4.conf" --data "$TMPD/corpus.txt" --steps $STEPS --batch 8 --seq 32 \
    --grad-accum 2 --threads 1 --no-progress
}

# all_steps METRICS: every step 1..STEPS has a line
all_steps() {
  python3 - "$1" $STEPS <<'PY'
import json, sys
st = {json.loads(l)["step"] for l in open(sys.argv[1]) if l.startswith('{"step"')}
missing = [s for s in range(1, int(sys.argv[2]) + 1) if s not in st]
assert not missing, "steps missing from the metrics: %s" % missing
PY
}

@test "shrink with PP = 2: the new rank 0 appends the metrics, with the recovery record" {
  # ranks 4 and 5 (PP stage 1 of DP replica 0) die: replica 0 is dropped,
  # replica 1's ranks are renumbered 0..3 and old rank 0 leaves; the
  # metrics must go on, written by the new rank 0
  run timeout 400 env WHALE_ELASTIC=1 WHALE_FAULT=kill:rank=4,5:step=6 "$RUN" -n 8 --nodes 4 \
    --tp 2 --pp 2 --dp 2 --keep-going --timeout 380 "$TRAIN" $(t4args) --metrics "$TMPD/pp.jsonl" \
    --price-per-node-hour 2
  echo "$output" > "$TMPD/pp.out"
  echo "$output" | tail -20
  grep '"event":"recovery"' "$TMPD/pp.jsonl" | grep -q '"kind":"shrunk"'
  run all_steps "$TMPD/pp.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/pp.jsonl" $STEPS 256
  echo "$output"
  [ "$status" -eq 0 ]
  # the price was given to every rank: the new rank 0 prices the run too
  tail -1 "$TMPD/pp.jsonl" | grep -q '"cost":{"usd":'
  nothing_left
}

@test "replace then shrink with PP = 2: the metrics go on to the end" {
  # the spare node's two tasks take ranks 0 and 1 (one TP group); then
  # ranks 6 and 7 die with no spare left: DP 2 -> 1
  run timeout 500 env WHALE_ELASTIC=1 WHALE_FAULT="kill:rank=0,1:step=4;kill:rank=6,7:step=8" \
    "$RUN" -n 10 --nodes 5 --spares 1 --tp 2 --pp 2 --dp 2 --keep-going --timeout 480 \
    "$TRAIN" $(t4args) --metrics "$TMPD/rs.jsonl"
  echo "$output" > "$TMPD/rs.out"
  echo "$output" | tail -20
  [ "$(grep -c '"event":"recovery"' "$TMPD/rs.jsonl")" -ge 2 ]
  grep '"event":"recovery"' "$TMPD/rs.jsonl" | grep -q '"kind":"shrunk"'
  run all_steps "$TMPD/rs.jsonl"
  echo "$output"
  [ "$status" -eq 0 ]
  run run_numbers "$TMPD/rs.jsonl" $STEPS 256
  echo "$output"
  [ "$status" -eq 0 ]
  nothing_left
}
