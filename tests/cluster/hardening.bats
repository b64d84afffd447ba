#!/usr/bin/env bats
# The trust model on a real slurmstepd: what a hostile user controls (srun's
# environment, srun's own process, files under /tmp, the plan) cannot
# block a node, bypass the site limits or redirect the plugin's writes,
# and Whale steps work with --export=NONE.

load spank_helpers

setup_file() {
  spank_setup_file
  # the shim that replaces the plan srun exports (a user owning srun's
  # process can always do this)
  cc -shared -fPIC -o "$BATS_FILE_TMPDIR/forge.so" "$BATS_TEST_DIRNAME/forge_setenv.c" -ldl
  export FORGE_SO=$BATS_FILE_TMPDIR/forge.so
}
teardown_file() { spank_teardown_file; }

setup() {
  cp "$SITE_CONF" "$BATS_TEST_TMPDIR/site.conf.before"
}
teardown() {
  cp "$BATS_TEST_TMPDIR/site.conf.before" "$SITE_CONF"
}

nodes_not_completing() {
  # every node back to idle (not "completing") after the step; stuck would
  # be forever, the 60 s bound only allows for a loaded machine
  local s
  for _ in $(seq 300); do
    s=$(sinfo -h -o '%T' | sort -u | tr '\n' ' ')
    [[ "$s" != *complet* ]] && return 0
    sleep 0.2
  done
  echo "nodes: $s"
  return 1
}

@test "case 6: --export=NONE, SLURM_EXPORT_ENV=NONE and --export=PATH run Whale steps" {
  run timeout 60 srun -N2 --whale-dp=2 --export=NONE /bin/sh -c 'echo "$WHALE_RANK $WHALE_DP ${SLURM_WHALE_PLAN:-noplanvar} $WHALE_PLAN"'
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$(sort <<< "$output" | cut -d' ' -f1-3 | tr '\n' ' ')" = "0 2 noplanvar 1 2 noplanvar " ]
  [[ "$output" == *'"dp":2'* ]]
  SLURM_EXPORT_ENV=NONE run timeout 60 srun -N2 --whale-dp=2 /usr/bin/printenv WHALE_DP
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$output" = "$(printf '2\n2')" ]
  run timeout 60 srun -N2 --whale-dp=2 --export=PATH printenv WHALE_WORLD
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$output" = "$(printf '2\n2')" ]
}

@test "case 2: a FIFO named as the plan never blocks slurmstepd" {
  mkfifo "$BATS_TEST_TMPDIR/f"
  # the old vector: WHALE_PLAN in the step environment is ignored
  run timeout 60 srun -N1 --whale --export="WHALE_PLAN=$BATS_TEST_TMPDIR/f,PATH" printenv WHALE_PLAN
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == '{"version":1'* ]]
  # a forged transport variable holding the path: refused at once
  FORGE_PLAN="$BATS_TEST_TMPDIR/f" LD_PRELOAD=$FORGE_SO run timeout 60 srun -N1 --whale true
  [ "$status" -ne 0 ]
  [ "$status" -ne 124 ] || { echo "srun timed out: slurmstepd blocked"; false; }
  [[ "$output" == *"SLURM_WHALE_PLAN must hold the plan as inline JSON"* ]] || { echo "$output"; false; }
  nodes_not_completing
}

@test "case 3: slurmstepd enforces the site limits on a plan srun did not produce" {
  printf 'MaxZero=1\nAllowedOffload=none\nMinCkptEvery=100\n' >> "$SITE_CONF"
  local evil='{"version":1,"zero":3,"offload":"optimizer","ckpt_every":1,"ckpt_dir":"/tmp"}'
  printf '%s\n' "$evil" > "$BATS_TEST_TMPDIR/evil.json"
  # srun refuses the file ...
  run timeout 60 srun -N1 --whale-plan="$BATS_TEST_TMPDIR/evil.json" true
  [ "$status" -ne 0 ]
  [[ "$output" == *"asks for more than this site allows"* ]] || { echo "$output"; false; }
  # ... and slurmstepd refuses the same plan smuggled past srun
  FORGE_PLAN=$evil LD_PRELOAD=$FORGE_SO run timeout 60 srun -N1 --whale touch "$BATS_TEST_TMPDIR/ran"
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"zero=3 exceeds the site limit MaxZero=1"* ]] || { echo "$output"; false; }
  [ ! -e "$BATS_TEST_TMPDIR/ran" ]
  FORGE_PLAN='{"version":1,"ckpt_every":1,"ckpt_dir":"/tmp"}' LD_PRELOAD=$FORGE_SO \
    run timeout 60 srun -N1 --whale true
  [ "$status" -ne 0 ]
  [[ "$output" == *"MinCkptEvery=100"* ]] || { echo "$output"; false; }
  # within the limits but not what the options asked for: refused too
  FORGE_PLAN='{"version":1,"zero":1}' LD_PRELOAD=$FORGE_SO run timeout 60 srun -N1 --whale true
  [ "$status" -ne 0 ]
  [[ "$output" == *"that no --whale-* option asked for"* ]] || { echo "$output"; false; }
  # the honest path still works
  run timeout 60 srun -N1 --whale --whale-zero=1 printenv WHALE_PLAN
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [[ "$output" == *'"zero":1'* ]]
}

@test "case 4: TopologyFile=/dev/zero is refused with its name, without reading it" {
  printf 'TopologyFile=/dev/zero\n' >> "$SITE_CONF"
  run timeout 60 srun -N1 --whale true
  [ "$status" -ne 0 ]
  [ "$status" -ne 124 ]
  [[ "$output" == *"/dev/zero: is a character device; expected a regular file"* ]] || { echo "$output"; false; }
}

@test "case 7: an oversized plan is refused at srun with the reason" {
  python3 -c 'import json; print(json.dumps({"version":1,"prediction":{"note":"x"*200000}}))' > "$BATS_TEST_TMPDIR/p1.json"
  run timeout 60 srun -N1 --whale-plan="$BATS_TEST_TMPDIR/p1.json" true
  [ "$status" -ne 0 ]
  [[ "$output" == *'plan key "prediction" is 200011 bytes (at most 16384)'* ]] || { echo "$output"; false; }
  python3 -c 'import json; print(json.dumps({"version":1,"recompute":"layers","recompute_layers":list(range(60000))}))' > "$BATS_TEST_TMPDIR/p2.json"
  run timeout 60 srun -N1 --whale-plan="$BATS_TEST_TMPDIR/p2.json" true
  [ "$status" -ne 0 ]
  [[ "$output" == *"bytes of JSON, more than the 100000 a step can carry"* ]] || { echo "$output"; false; }
  [[ "$output" != *"Argument list too long"* ]]
}

@test "case 5: the rank-map file is private, exclusive and removed; a planted symlink is not followed" {
  cp "$STATE/plugstack.conf" "$BATS_TEST_TMPDIR/plugstack.orig"
  sed -i 's|\(spank_whale\.so.*\)$|\1 rankmap_inline_max=0|' "$STATE/plugstack.conf"
  mkdir -p "$BATS_TEST_TMPDIR/tmp"
  echo victim > "$BATS_TEST_TMPDIR/victim"
  # the old predictable names (whale-rankmap.JOB.STEP.NODE) for the next
  # job ids, planted as links to a victim file
  local last
  last=$(timeout 60 srun -N1 /bin/sh -c 'echo $SLURM_JOB_ID')
  for j in $(seq $((last + 1)) $((last + 5))); do
    for n in node1 node2; do
      ln -s "$BATS_TEST_TMPDIR/victim" "$BATS_TEST_TMPDIR/tmp/whale-rankmap.$j.0.$n"
    done
  done
  run env TMPDIR="$BATS_TEST_TMPDIR/tmp" timeout 60 srun -N2 -n4 --whale \
      /bin/sh -c 'f=${WHALE_RANKMAP#@}; echo "$f $(stat -c %a "$f") $(stat -c %a "$(dirname "$f")") $(cat "$f")"'
  cp "$BATS_TEST_TMPDIR/plugstack.orig" "$STATE/plugstack.conf"
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$(cat "$BATS_TEST_TMPDIR/victim")" = victim ]
  while read -r f mode dmode map; do
    [[ "$f" == "$BATS_TEST_TMPDIR/tmp/whale."??????"/rankmap" ]] || { echo "$f"; false; }
    [ "$mode" = 600 ] && [ "$dmode" = 700 ] || { echo "$f $mode $dmode"; false; }
    [ "$map" = "0-3" ]
  done <<< "$output"
  # bound against a hang only: slurmstepd may end well after srun on a loaded machine
  for _ in $(seq 600); do [ -z "$(ls -d "$BATS_TEST_TMPDIR"/tmp/whale.* 2>/dev/null)" ] && break; sleep 0.1; done
  [ -z "$(ls -d "$BATS_TEST_TMPDIR"/tmp/whale.* 2>/dev/null)" ]
  [ "$(cat "$BATS_TEST_TMPDIR/victim")" = victim ]
}

@test "site limits bind whale-train's own flags, WHALE_* variables and plan files" {
  printf 'MaxZero=1\nAllowedOffload=none\nMinCkptEvery=50\n' >> "$SITE_CONF"
  local zl ol cl
  zl=$(grep -n '^MaxZero=1$' "$SITE_CONF" | tail -1 | cut -d: -f1)
  ol=$(grep -n '^AllowedOffload=none$' "$SITE_CONF" | tail -1 | cut -d: -f1)
  cl=$(grep -n '^MinCkptEvery=50$' "$SITE_CONF" | tail -1 | cut -d: -f1)
  local train="$WHALE_BUILD_DIR/runtime/tools/train/whale-train" d=$BATS_TEST_TMPDIR
  for i in $(seq 400); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$d/data.txt"
  local common=(--model gpt-tiny --data "$d/data.txt" --steps 2 --batch 4 --seq 16 --threads 1
                --no-progress --whale-ckpt-dir "$d/ck")
  # the reproducer: only --whale-* options are given to the plugin
  run timeout 300 srun -N2 --whale-dp=2 "$train" "${common[@]}" --zero 3 --offload optimizer \
      --whale-ckpt-every 1
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"zero=3 (from --zero) exceeds the site limit MaxZero=1 ($SITE_CONF:$zl)"* ]] || { echo "$output"; false; }
  [[ "$output" == *"offload=optimizer (from --offload) is not allowed on this site: AllowedOffload=none ($SITE_CONF:$ol)"* ]] || { echo "$output"; false; }
  [[ "$output" == *"ckpt_every=1 (from --whale-ckpt-every) checkpoints more often than this site allows: MinCkptEvery=50 ($SITE_CONF:$cl)"* ]] || { echo "$output"; false; }
  [ -z "$(ls -A "$d/ck" 2>/dev/null)" ] # nothing saved
  # a WHALE_* variable and a plan file are bound the same way
  WHALE_ZERO=2 run timeout 300 srun -N2 --whale-dp=2 "$train" "${common[@]}"
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"zero=2 (from WHALE_ZERO) exceeds the site limit MaxZero=1"* ]] || { echo "$output"; false; }
  echo '{"version":1,"dp":2,"offload":"optimizer"}' > "$d/plan.json"
  run timeout 300 srun -N2 --whale-dp=2 "$train" "${common[@]}" --plan "$d/plan.json"
  [ "$status" -ne 0 ] || { echo "$output"; false; }
  [[ "$output" == *"offload=optimizer (from --plan $d/plan.json) is not allowed"* ]] || { echo "$output"; false; }
  # the record: root's, read-only, in a private directory
  run timeout 60 srun -N1 --whale /bin/sh -c \
      'echo "$(stat -c "%u %a" "$WHALE_SITE_LIMITS") $(stat -c "%u %a" "$(dirname "$WHALE_SITE_LIMITS")")"'
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  [ "$output" = "0 444 0 711" ] || { echo "$output"; false; }
  # values within the limits run
  run timeout 300 srun -N2 --whale-dp=2 "$train" "${common[@]}" --zero 1 --whale-ckpt-every 50
  [ "$status" -eq 0 ] || { echo "$output"; false; }
}

@test "case 8: another user's FIFOs at the old report names do not turn the drain channel off" {
  mkdir -p "$BATS_TEST_TMPDIR/tmp"
  chmod 1777 "$BATS_TEST_TMPDIR/tmp"
  # the old predictable names (whale-report.JOB.STEP.NODE) for the next job
  # ids, created first by another user (nobody): slurmstepd used to give up
  # ("cannot create the failure report FIFO ... File exists") and the step
  # ran without WHALE_REPORT, so its failed nodes were never drained
  local last
  last=$(timeout 60 srun -N1 /bin/sh -c 'echo $SLURM_JOB_ID')
  for j in $(seq $((last + 1)) $((last + 5))); do
    for n in $(sinfo -h -N -o %N | sort -u); do
      mkfifo "$BATS_TEST_TMPDIR/tmp/whale-report.$j.0.$n"
      chown nobody "$BATS_TEST_TMPDIR/tmp/whale-report.$j.0.$n"
    done
  done
  run env TMPDIR="$BATS_TEST_TMPDIR/tmp" timeout 60 srun -N2 -n2 --whale \
      /bin/sh -c 'f=$WHALE_REPORT; echo "${f:-none} $(stat -c "%F %a %U" "$f") $(stat -c "%a %U" "$(dirname "$f")")"'
  [ "$status" -eq 0 ] || { echo "$output"; false; }
  echo "$output"
  while read -r f ftype mode owner dmode downer; do
    [[ "$f" == "$BATS_TEST_TMPDIR/tmp/whale."??????"/report" ]] || { echo "$f"; false; }
    [ "$ftype" = fifo ] || { echo "$f: $ftype"; false; }
    [ "$mode" = 600 ] && [ "$owner" = "$(id -un)" ] || { echo "$f $mode $owner"; false; }
    # slurmstepd's own directory: the tasks can reach the FIFO, nobody can list or swap it
    [ "$dmode" = 711 ] && [ "$downer" = root ] || { echo "$f $dmode $downer"; false; }
  done <<< "$output"
  # removed at the end of the step (bound against a hang only)
  for _ in $(seq 600); do [ -z "$(ls -d "$BATS_TEST_TMPDIR"/tmp/whale.* 2>/dev/null)" ] && break; sleep 0.1; done
  [ -z "$(ls -d "$BATS_TEST_TMPDIR"/tmp/whale.* 2>/dev/null)" ]
}
