#!/usr/bin/env bats
# Soak cases of the elastic layer: long, and they load the whole machine,
# so the test command skips them (WHALE_TEST_SOAK=1 runs them; a bats
# filter alone, e.g. `bats tests/cluster/elastic-soak.bats`, needs it too).
#
# No false failure under load: a step with a hot spare (heartbeats and
# failure detection armed) and the default timeouts (WHALE_HEARTBEAT,
# WHALE_PEER_TIMEOUT, WHALE_HANG_TIMEOUT unset) trains 200 steps of a tiny
# model while busy loops keep about 25 runnable processes on the machine:
# no task may be declared failed, no recovery may happen. The load average
# seen is printed, never asserted (it is what the case measured under).

load train_helpers
load elastic_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
LOAD=${WHALE_SOAK_LOAD:-25}

setup_file() {
  [ "${WHALE_TEST_SOAK:-0}" = 1 ] || return 0
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  export TMPD=$(mktemp -d)
  chmod 755 "$TMPD"
  make_corpus "$TMPD"
  printf 'Name=t4 Layers=4 Hidden=128 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$TMPD/t4.conf"
}
teardown_file() { if [ -n "${TMPD:-}" ]; then rm -rf "$TMPD"; fi; }

setup() {
  [ "${WHALE_TEST_SOAK:-0}" = 1 ] || skip "soak case: WHALE_TEST_SOAK=1 runs it"
  [ "$(sinfo -h -N -o %N | sort -u | wc -l)" -ge 3 ] || skip "needs 3 nodes"
  BURNERS=()
}

teardown() {
  for p in "${BURNERS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${BURNERS[@]}"; do wait "$p" 2>/dev/null || true; done
  true
}

# runnable processes on the machine now (procs_running of /proc/stat)
running() { awk '/^procs_running/ {print $2}' /proc/stat; }
# the 1-minute load average, rounded
load1() { awk '{ printf "%d\n", $1 + 0.5 }' /proc/loadavg; }

@test "load $LOAD, default timeouts: 200 steps with a spare and no false failure" {
  # what already runs counts towards the load: top it up to LOAD
  local have add
  have=$(load1)
  add=$((LOAD - have))
  [ "$add" -lt 0 ] && add=0
  for _ in $(seq "$add"); do
    bash -c 'while :; do :; done' &
    BURNERS+=($!)
  done
  # the load average follows within a minute or two (bounded wait)
  for _ in $(seq 120); do
    awk -v l="$LOAD" '{ exit !($1 >= 0.9 * l) }' /proc/loadavg && break
    sleep 1
  done
  echo "load before the run: $have, busy loops added: $add, runnable now: $(running);" \
       "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
  env -u WHALE_HEARTBEAT -u WHALE_PEER_TIMEOUT -u WHALE_HANG_TIMEOUT \
    timeout 1200 srun -N3 -n3 --whale-dp=2 --whale-spares=1 "$TRAIN" --model "$TMPD/t4.conf" \
    --data "$TMPD/corpus.txt" --steps 200 --batch 16 --seq 64 --threads 1 --no-progress \
    --log-every 20 --metrics "$TMPD/soak.jsonl" > "$TMPD/soak.out" 2>&1 || RC=$?
  echo "srun exit status ${RC:-0}; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -E "wall time|failures recovered" "$TMPD/soak.out" || tail -n 5 "$TMPD/soak.out"
  [ "${RC:-0}" -eq 0 ]
  [ "$(grep -c '^{"step"' "$TMPD/soak.jsonl")" -eq 200 ]
  ! grep -q '"event":"recovery"' "$TMPD/soak.jsonl" || false
  ! grep -E "failed or is unreachable|elastic: epoch|elastic: .*waiting up to" "$TMPD/soak.out" || false
  nothing_left
}
