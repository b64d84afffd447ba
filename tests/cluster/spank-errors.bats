#!/usr/bin/env bats
# Bad input: each case gives a clear "whale:" message, a non-zero exit, and
# no task starts (tasks would create a marker file).

load spank_helpers

setup_file() { spank_setup_file; }
teardown_file() { spank_teardown_file; }

setup() {
  MARK=$BATS_TEST_TMPDIR/started
  rm -f "$MARK"
}

# run srun with the given args on 4 nodes x 2 tasks; the task touches MARK
bad_srun() {
  run timeout 300 srun -N4 -n8 "$@" touch "$MARK"
}

expect_refused() { # message
  [ "$status" -ne 0 ] || { echo "exit 0: $output"; false; }
  [[ "$output" == *"whale: "* ]] || { echo "$output"; false; }
  [[ "$output" == *"$1"* ]] || { echo "expected: $1"; echo "got: $output"; false; }
  [ ! -e "$MARK" ] || { echo "a task started"; false; }
}

@test "non-numeric value" {
  bad_srun --whale-tp=abc
  expect_refused "--whale-tp=abc: not an integer (allowed 1..65536)"
}

@test "out-of-range values" {
  bad_srun --whale-zero=4
  expect_refused "--whale-zero=4: out of range (allowed 0..3)"
  bad_srun --whale-map=round
  expect_refused "--whale-map=round: must be one of topo, block"
  bad_srun --whale-recompute=most
  expect_refused "must be one of none, selective, full, auto"
}

@test "TP*PP*DP not matching the working task count says the numbers" {
  bad_srun --whale-tp=2 --whale-dp=3
  expect_refused "TP*PP*DP = 2*1*3 = 6 working ranks, but the step has 8 working tasks"
  bad_srun --whale-tp=1 --whale-pp=3
  expect_refused "8 working tasks (8 tasks - 0 on 0 spare node(s)) are not a multiple of TP*PP = 1*3 = 3"
}

@test "TP larger than an NVLink domain" {
  bad_srun --whale-tp=4
  expect_refused "TP=4 is larger than any NVLink domain of this step: the largest, node node1, holds 2 task(s)"
}

@test "more spares than the nodes allow, or than the site allows" {
  bad_srun --whale-spares=4
  expect_refused "4 spare node(s) leave no working node: the step has 4 node(s)"
  conf=$(user_conf "MaxSpares=1")
  bad_srun --whale-conf="$conf" --whale-spares=2
  expect_refused "--whale-spares=2 exceeds the site limit MaxSpares=1"
}

@test "site limits: MaxTP, AllowedOffload" {
  conf=$(user_conf "MaxTP=1 AllowedOffload=none")
  bad_srun --whale-conf="$conf" --whale-tp=2
  expect_refused "--whale-tp=2 exceeds the site limit MaxTP=1"
  bad_srun --whale-conf="$conf" --whale-offload=params
  expect_refused "--whale-offload=params is not allowed on this site"
}

@test "missing site config" {
  mv "$SITE_CONF" "$SITE_CONF.away"
  bad_srun --whale-tp=2
  mv "$SITE_CONF.away" "$SITE_CONF"
  expect_refused "cannot read the site config $SITE_CONF: No such file or directory"
  bad_srun --whale-conf=/nonexistent/whale.conf --whale-tp=2
  expect_refused "--whale-conf=/nonexistent/whale.conf: No such file or directory"
}

@test "unknown config key names file:line; the step does not start" {
  printf '# site\nMaxTP=8\nGPUsPerNod=8\n' >> "$SITE_CONF"
  bad_srun --whale-tp=2
  cp "$BATS_FILE_TMPDIR/site.conf.orig" "$SITE_CONF"; printf 'AllowUserConfig=yes\n' >> "$SITE_CONF"
  expect_refused "$SITE_CONF:"
  [[ "$output" == *": unknown key 'GPUsPerNod'"* ]]
  conf=$(user_conf "NodeName=node[1-4] GPUz=2")
  bad_srun --whale-conf="$conf" --whale-tp=2
  expect_refused "$conf:1: unknown key 'GPUz' in a NodeName line (did you mean 'GPUs'?)"
}

@test "a broken whale.conf does not affect steps without --whale" {
  printf 'GPUsPerNod=8\n' >> "$SITE_CONF"
  run timeout 300 srun -N2 touch "$MARK"
  cp "$BATS_FILE_TMPDIR/site.conf.orig" "$SITE_CONF"; printf 'AllowUserConfig=yes\n' >> "$SITE_CONF"
  [ "$status" -eq 0 ]
  [ -e "$MARK" ]
}

@test "--whale-conf is refused unless the site allows it" {
  cp "$BATS_FILE_TMPDIR/site.conf.orig" "$SITE_CONF"
  conf=$(user_conf "MaxTP=8")
  bad_srun --whale-conf="$conf" --whale-tp=2
  printf 'AllowUserConfig=yes\n' >> "$SITE_CONF"
  expect_refused "--whale-conf is not allowed on this site"
}

@test "plan file that does not parse or contradicts flags" {
  printf '{"version":1,"tp":2,' > "$BATS_TEST_TMPDIR/bad.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/bad.json"
  expect_refused "cannot use this plan file"
  printf '{"version":1,"tp":2,"pp":1,"dp":4}\n' > "$BATS_TEST_TMPDIR/plan.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/plan.json" --whale-tp=4
  expect_refused "--whale-tp=4 contradicts the plan file $BATS_TEST_TMPDIR/plan.json (2)"
  printf '{"version":1,"tp":2,"pp":1,"dp":2}\n' > "$BATS_TEST_TMPDIR/plan.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/plan.json"
  expect_refused "TP*PP*DP = 2*1*2 = 4 working ranks, but the step has 8"
  bad_srun --whale-plan=/nonexistent.json
  expect_refused "/nonexistent.json"
}

@test "plan file whose per-replica shares or per-stage layers do not add up is refused, naming the field" {
  printf '{"version":1,"tp":1,"pp":1,"dp":8,"micro_batch":1,"num_micro_batches":2,"global_batch":16,"dp_batch":[3,3,3,1,1,1,1,1]}\n' \
    > "$BATS_TEST_TMPDIR/shares.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/shares.json"
  expect_refused "global_batch=16 but micro_batch*num_micro_batches*dp (or sum of dp_batch) = 14"
  printf '{"version":1,"tp":1,"pp":1,"dp":8,"micro_batch":2,"num_micro_batches":1,"dp_batch":[3,3,2,2,2,2,1,1]}\n' \
    > "$BATS_TEST_TMPDIR/shares.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/shares.json"
  expect_refused "dp_batch[0] = 3 is not a multiple of micro_batch = 2"
  printf '{"version":1,"tp":1,"pp":1,"dp":8,"micro_batch":1,"num_micro_batches":2,"dp_batch":[3,1]}\n' \
    > "$BATS_TEST_TMPDIR/shares.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/shares.json"
  expect_refused "dp_batch has 2 entries, expected dp = 8"
  # per-stage layers: checked against the model when --whale-model names it
  printf '{"version":1,"tp":1,"pp":2,"dp":4,"micro_batch":1,"num_micro_batches":2,"stage_layers":[2,1]}\n' \
    > "$BATS_TEST_TMPDIR/stages.json"
  bad_srun --whale-plan="$BATS_TEST_TMPDIR/stages.json" --whale-model=gpt-tiny
  expect_refused "$BATS_TEST_TMPDIR/stages.json: stage_layers sum to 3 but the model has 2 layers"
}

@test "--mpi=none on a whale step: refused with the fix" {
  bad_srun --mpi=none --whale-tp=2
  expect_refused "a Whale step needs PMIx but this step uses --mpi=none"
}

@test "sbatch refuses bad --whale options at submission" {
  printf '#!/bin/bash\ntouch %s\n' "$MARK" > "$BATS_TEST_TMPDIR/job.sh"
  run timeout 300 sbatch -N1 --whale-tp=zero "$BATS_TEST_TMPDIR/job.sh"
  expect_refused "--whale-tp=zero: not an integer"
  conf=$(user_conf "MaxPP=2")
  run timeout 300 sbatch -N1 --whale-conf="$conf" --whale-pp=4 "$BATS_TEST_TMPDIR/job.sh"
  expect_refused "--whale-pp=4 exceeds the site limit MaxPP=2"
}

@test "the plugin exports only slurm_spank_*/plugin_* and links no UCX, PMIx, CUDA or NCCL" {
  so=$WHALE_BUILD_DIR/spank/spank_whale.so
  run bash -c "nm -D --defined-only '$so' | awk '{print \$3}' | grep -vE '^(slurm_spank_|plugin_|spank_plugin_)'"
  [ -z "$output" ] || { echo "extra exports: $output"; false; }
  run bash -c "readelf -d '$so' | grep NEEDED"
  [[ "$output" != *ucx* && "$output" != *ucp* && "$output" != *pmix* && "$output" != *cuda* && "$output" != *nccl* && "$output" != *slurm* ]]
}

@test "a node whose whale.conf is broken (srun's is fine): no task runs and srun exits non-zero" {
  cp "$SITE_CONF" "$BATS_TEST_TMPDIR/good.conf"
  sed "s|conf=[^ ]*|conf=$BATS_TEST_TMPDIR/good.conf|" "$STATE/plugstack.conf" > "$BATS_TEST_TMPDIR/plugstack.conf"
  sed "s|^PlugStackConfig=.*|PlugStackConfig=$BATS_TEST_TMPDIR/plugstack.conf|" "$SLURM_CONF" > "$BATS_TEST_TMPDIR/slurm.conf"
  printf 'Bogus=1\n' >> "$SITE_CONF"
  run env SLURM_CONF="$BATS_TEST_TMPDIR/slurm.conf" timeout 300 srun -N2 -n4 --whale-tp=2 touch "$MARK"
  cp "$BATS_FILE_TMPDIR/site.conf.orig" "$SITE_CONF"; printf 'AllowUserConfig=yes\n' >> "$SITE_CONF"
  expect_refused "unknown key 'Bogus'"
  [[ "$output" == *"task not started"* ]]
}
