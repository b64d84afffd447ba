# Shared setup of the spank-*.bats files: the cluster's site config is
# rewritten for the file (AllowUserConfig=yes so tests may pass their own
# whale.conf with --whale-conf) and restored afterwards.

spank_setup_file() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  : "${WHALE_BUILD_DIR:?WHALE_BUILD_DIR must point at the build dir}"
  STATE=${WHALE_MC_DIR:-$(dirname "$SLURM_CONF")}
  SITE_CONF=$(sed -n 's/.*spank_whale\.so.* conf=\([^ ]*\).*/\1/p' "$STATE/plugstack.conf" | head -1)
  [ -n "$SITE_CONF" ] || SITE_CONF=$STATE/whale.conf
  export STATE SITE_CONF
  cp "$SITE_CONF" "$BATS_FILE_TMPDIR/site.conf.orig"
  printf 'AllowUserConfig=yes\n' >> "$SITE_CONF"
}

spank_teardown_file() {
  [ -n "${SITE_CONF:-}" ] && [ -f "$BATS_FILE_TMPDIR/site.conf.orig" ] && cp "$BATS_FILE_TMPDIR/site.conf.orig" "$SITE_CONF"
  true
}

# A whale.conf readable by every node (same machine: any path works).
user_conf() {
  local f=$BATS_TEST_TMPDIR/whale.conf
  printf '%s\n' "$@" > "$f"
  chmod 644 "$f"
  echo "$f"
}

# Print "TASK_ID RANK TP_RANK DP_RANK PP_RANK SPARE NODE RANKMAP" per task, sorted by task id.
whale_env_cmd='echo "$WHALE_TASK_ID $WHALE_RANK $WHALE_TP_RANK $WHALE_DP_RANK $WHALE_PP_RANK $WHALE_SPARE $(hostname) $WHALE_RANKMAP $WHALE_TP $WHALE_PP $WHALE_DP $WHALE_WORLD"'

# No job in the queue and every node idle. A case that names nodes (TP
# group 0 on node1 and node2, a task on node2) must not start while the
# previous case's job is still completing: Slurm would allocate around the
# busy node and the names would not match.
cluster_idle() {
  [ -z "$(squeue -h -o %i 2>/dev/null)" ] && [ -z "$(sinfo -h -N -o %t | grep -v '^idle$')" ]
}
wait_cluster_idle() {  # bounded (60 s) against a node that never comes back
  for _ in $(seq 300); do cluster_idle && return 0; sleep 0.2; done
  echo "the cluster is not idle: jobs $(squeue -h -o '%i:%T:%N' | tr '\n' ' ')," \
       "nodes $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')"
  return 1
}
