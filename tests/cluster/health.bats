#!/usr/bin/env bats
# Rough edges a new user hit, each reproduced on the real
# minicluster: the same command trains the same global batch under srun and
# whale-run; a node that computes another layout than srun fails its tasks.

load spank_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"

setup_file() {
  spank_setup_file
  # plays srun having computed another layout than the nodes (as with
  # another whale.conf or topology.conf on the submit host)
  cc -shared -fPIC -o "$BATS_FILE_TMPDIR/forge.so" "$BATS_TEST_DIRNAME/forge_setenv.c" -ldl
  export FORGE_SO=$BATS_FILE_TMPDIR/forge.so
  export TMPD=$(mktemp -d)
  for i in $(seq 1500); do echo "def f$i(x): return x * $((i % 17)) + $((i % 5))"; done \
    > "$TMPD/corpus.txt"
}
teardown_file() { rm -rf "$TMPD"; spank_teardown_file; }

# global_batch of the summary line of $output
summary_gb() {
  echo "$output" | python3 -c '
import json, sys
for l in sys.stdin:
    l = l[l.find("{"):] if "{\"summary\"" in l else ""
    if l:
        print(json.loads(l)["summary"]["global_batch"])'
}

@test "no --batch: the documented default (8) under whale-run and under srun" {
  run timeout 300 "$RUN" -n 2 "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --steps 1 \
    --seq 32 --threads 1 --no-progress --metrics ""
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  [ "$(summary_gb)" = 8 ]
  run timeout 300 srun -N2 -n2 --whale-dp=2 "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" \
    --steps 1 --seq 32 --threads 1 --no-progress --metrics ""
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  [ "$(summary_gb)" = 8 ]
}

@test "what the user did set still counts: --whale-microbatch=3 on DP 2 is global batch 6" {
  run timeout 300 srun -N2 -n2 --whale-dp=2 --whale-microbatch=3 "$TRAIN" --model gpt-tiny \
    --data "$TMPD/corpus.txt" --steps 1 --seq 32 --threads 1 --no-progress --metrics ""
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  [ "$(summary_gb)" = 6 ]
}

@test "srun's layout is checked on every node: agreeing steps run, the digest stays out of the task" {
  run timeout 60 srun -N2 -n4 --whale-tp=2 --whale-verbose sh -c \
    'echo "task $SLURM_PROCID rank $WHALE_RANK digest ${SLURM_WHALE_LAYOUT:-none}"'
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | grep -c '^task .* digest none$')" -eq 4 ]
}

@test "a node that computes another layout than srun fails its tasks with the reason" {
  FORGE_LAYOUT=0123456789abcdef LD_PRELOAD=$FORGE_SO run timeout 60 srun -N2 -n2 --whale-dp=2 \
    sh -c 'echo ran-as-rank-$WHALE_RANK'
  echo "$output"
  [ "$status" -ne 0 ]
  [ "$status" -ne 124 ]
  [[ "$output" == *"computes another rank layout than srun did"* ]]
  [[ "$output" == *"0123456789abcdef from srun"* ]]
  [[ "$output" != *ran-as-rank* ]]
}

@test "sbatch refuses degrees that cannot fit the job's tasks, at submission" {
  run timeout 60 sbatch -N4 -n8 --whale-tp=2 --whale-dp=3 --wrap true
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"TP*PP*DP = 2*1*3 = 6 working ranks, but the job's sruns have 8 working tasks"* ]]
  # the same in #SBATCH lines of the script
  printf '#!/bin/sh\n#SBATCH -N4\n#SBATCH --ntasks=8\nsrun true\n' > "$TMPD/job.sh"
  run timeout 60 sbatch --whale-tp=3 "$TMPD/job.sh"
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"8 working tasks (8 tasks - 0 on 0 spare node(s)) are not a multiple of TP*PP = 3*1 = 3"* ]]
  # what fits is accepted (and cancelled again)
  run timeout 60 sbatch --parsable -N4 -n8 --whale-tp=2 --wrap true
  echo "$output"
  [ "$status" -eq 0 ]
  scancel "${lines[-1]%%;*}" || true
}

@test "refusals before any allocation are one line: no generic Slurm lines after ours" {
  run timeout 60 srun -N1 --whale-tp=abc true
  echo "$output"
  [ "$status" -ne 0 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "${lines[0]}" == *"whale: --whale-tp=abc: not an integer (allowed 1..65536)"* ]]
  run timeout 60 sbatch --whale-zero=9 --wrap true
  echo "$output"
  [ "$status" -ne 0 ]
  [ "${#lines[@]}" -eq 1 ]
  # srun's own -n/-N against the degrees: before the allocation is requested
  run timeout 60 srun -N4 -n8 --whale-tp=2 --whale-dp=3 true
  echo "$output"
  [ "$status" -ne 0 ]
  [ "${#lines[@]}" -eq 1 ]
  [[ "$output" == *"6 working ranks, but the step has 8 working tasks (8 tasks - 0 on 0 spare node(s)); give -n6"* ]]
}
