#!/usr/bin/env bash
# Whale's whole test run, for a fresh Debian 12 machine as root:
#   installs packages, builds (plain and ASan+UBSan), runs the unit and
#   integration suites of both builds, starts its own minicluster, runs the
#   cluster tests (real slurmctld/slurmd, srun, sbatch) and stops it again.
# Ends with one line "N passed, M failed"; exit status 1 on any failure.
#
# Environment:
#   WHALE_TEST_INSTANCE  minicluster instance (default 9), WHALE_TEST_NODES (5: the
#                        elastic tests hold a spare node beside 4 working ones)
#   WHALE_TEST_SKIP_ASAN=1  skip the sanitizer build (quicker local runs)
#   WHALE_TEST_FILTER    only cluster test files matching this glob part
#   WHALE_TEST_SKIP_FUZZ=1  skip the fuzzers; WHALE_TEST_FUZZ_SECONDS per harness (15)
#   WHALE_TEST_SOAK=1    also run the cluster soak cases (tests/cluster/*-soak.bats: long,
#                        they load the machine; skipped otherwise)
set -uo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT"
INSTANCE=${WHALE_TEST_INSTANCE:-9}
NODES=${WHALE_TEST_NODES:-5}
BUILD=$ROOT/build
ASAN_BUILD=$ROOT/build-asan
MC=$ROOT/contrib/minicluster/whale-minicluster
LOGDIR=$ROOT/build/test-logs

passed=0
failed=0
failures=()
FAIL_DETAILS=$(mktemp)

stamp() { date +%s; }
T0=$(stamp)
section() { echo; echo "=== $* ($(( $(stamp) - T0 )) s)"; }

count_meson() {  # build dir, label, meson test args...
  local dir=$1 label=$2; shift 2
  local out rc ok fail
  out=$(meson test -C "$dir" --print-errorlogs "$@" 2>&1); rc=$?
  echo "$out" | grep -E '^ *[0-9]+/[0-9]+ ' || true
  ok=$(echo "$out" | awk '/^Ok:/ {print $2}')
  fail=$(echo "$out" | awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}')
  ok=${ok:-0}
  if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    # meson itself failed (e.g. no such suite is fine: rc 0 then)
    echo "$out" | tail -n 30
    fail=1
  fi
  if [ "$fail" -gt 0 ]; then
    echo "$out" | sed -n '/^Summary of Failures:/,$p' | head -n 40
    # Name the failed tests on the summary line too: CI shows only the tail.
    local names
    names=$(echo "$out" | sed -n '/^Summary of Failures:/,$p' |
      awk '/ (FAIL|TIMEOUT|UNEXPECTEDPASS|ERROR) / {for (i = 1; i <= NF; i++) if ($i == "/") {print $(i + 1); break}}' |
      sort -u | tr '\n' ' ')
    failures+=("$label: $fail ${names:+(${names% })}")
    { echo "--- $label: failed tests"; echo "$out" | sed -n '/^Summary of Failures:/,$p' | head -n 20
      echo "$out" | grep -B2 -A25 -E '^(=+ [0-9]+/[0-9]+ =+|-+ 8< -+)' | tail -n 60; } >>"$FAIL_DETAILS"
  fi
  passed=$((passed + ok)); failed=$((failed + fail))
}

section "dependencies"
if ! bash contrib/install-deps.sh; then
  echo "install-deps failed"; echo "0 passed, 1 failed"; exit 1
fi

section "build"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" >/dev/null || { echo "meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi
if ! ninja -C "$BUILD" >"$ROOT/build/ninja.log" 2>&1; then
  tail -n 40 "$ROOT/build/ninja.log"; echo "0 passed, 1 failed"; exit 1
fi
if grep -q "warning:" "$ROOT/build/ninja.log"; then
  echo "compiler warnings:"; grep "warning:" "$ROOT/build/ninja.log" | sort -u | head -20
  failures+=("build: compiler warnings"); failed=$((failed + 1))
fi
mkdir -p "$LOGDIR"

section "unit and integration tests"
# suite soak: long or not yet reliable cases, run by hand (meson test --suite soak)
count_meson "$BUILD" "meson test" --no-suite soak

if [ "${WHALE_TEST_SKIP_ASAN:-0}" != 1 ]; then
  section "ASan + UBSan build and tests"
  # without the CUDA backend: nvcc's code is not instrumented and no GPU
  # runs here (the plain build above compiles and links it); its kernels
  # were half of this build's CPU time
  if [ ! -f "$ASAN_BUILD/build.ninja" ]; then
    meson setup "$ASAN_BUILD" -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
      -Dcuda=disabled >/dev/null || { failures+=("asan: setup"); failed=$((failed + 1)); }
  fi
  if ninja -C "$ASAN_BUILD" >"$LOGDIR/ninja-asan.log" 2>&1; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0 \
      count_meson "$ASAN_BUILD" "asan meson test" --no-suite slow --no-suite soak
  else
    tail -n 30 "$LOGDIR/ninja-asan.log"
    failures+=("asan: build"); failed=$((failed + 1))
  fi
fi

# The fuzzers run beside the cluster tests: a libFuzzer run is bounded by
# wall time, not work, and the cluster cases mostly wait (slurmctld, srun,
# PMIx wire-up, peer timeouts), so the two overlap instead of adding up
# (the fuzz section took 170 s of a 31-minute fresh-clone run on its own).
# One harness at a time leaves the other core to the cluster, and the
# fuzzers' session (its own autogroup) is lowered to nice 5, so the cluster
# cases' heartbeats and timeouts win the CPU over the fuzz build and runs
# (not lower: libFuzzer's -timeout is wall time, and a starved harness would
# report a slow input that is not slow). The results are counted after the
# cluster tests.
FUZZ_PID=
if [ "${WHALE_TEST_SKIP_FUZZ:-0}" != 1 ]; then
  section "fuzzing (libFuzzer + ASan + UBSan, ${WHALE_TEST_FUZZ_SECONDS:-15} s per parser): started beside the cluster tests"
  WHALE_FUZZ_JOBS=${WHALE_FUZZ_JOBS:-1} setsid bash -c 'echo 5 >/proc/self/autogroup 2>/dev/null; exec bash contrib/fuzz.sh "$1"' fuzz "${WHALE_TEST_FUZZ_SECONDS:-15}" \
    >"$LOGDIR/fuzz.log" 2>&1 </dev/null &
  FUZZ_PID=$!
fi
fuzz_results() {
  [ -n "$FUZZ_PID" ] || return 0
  wait "$FUZZ_PID"
  FUZZ_PID=
  section "fuzzing results"
  fuzz_out=$(cat "$LOGDIR/fuzz.log")
  echo "$fuzz_out" | grep -E '^fuzz|ERROR|SUMMARY' | head -n 40
  fz_ok=$(echo "$fuzz_out" | grep -cE '^fuzz [a-z_]+: [0-9]+ executions' || true)
  fz_bad=$(echo "$fuzz_out" | grep -cE '^fuzz [a-z_]+: (FAILED|no such)' || true)
  if [ "$fz_ok" -eq 0 ] && [ "$fz_bad" -eq 0 ]; then # build or setup failed
    fz_bad=1; echo "$fuzz_out" | tail -n 30
  fi
  passed=$((passed + fz_ok)); failed=$((failed + fz_bad))
  [ "$fz_bad" -gt 0 ] && failures+=("fuzz: $fz_bad")
}

section "cluster tests (minicluster instance $INSTANCE, $NODES nodes)"
cleanup() { "$MC" -i "$INSTANCE" down >/dev/null 2>&1 || true; }
# on an interrupt also the fuzzers' session (setsid above)
stop_all() { cleanup; [ -n "$FUZZ_PID" ] && kill -- -"$FUZZ_PID" 2>/dev/null; return 0; }
trap stop_all EXIT
trap 'stop_all; exit 130' INT TERM
if mc_out=$("$MC" -i "$INSTANCE" -b "$BUILD" up "$NODES" 2>&1); then
  echo "$mc_out" | grep -v '^export' || true
  eval "$(echo "$mc_out" | grep '^export')"
  export WHALE_BUILD_DIR=$BUILD WHALE_SRC_DIR=$ROOT
  files=$(ls tests/cluster/*.bats 2>/dev/null | grep -- "${WHALE_TEST_FILTER:-}" || true)
  if [ -n "$files" ]; then
    # --timing: each case's time on its line ("ok 3 ... in 4210ms")
    tap=$(bats --tap --timing $files 2>&1); true
    echo "$tap" | grep -E '^(ok|not ok)|^#' | head -n 400
    echo "slowest cluster cases:"
    echo "$tap" | sed -n 's/^\(ok\|not ok\) [0-9]* \(.*\) in \([0-9]*\)ms$/\3 \2/p' | sort -rn | head -n 8 |
      awk '{ printf "  %6.1f s  ", $1 / 1000; $1 = ""; print substr($0, 2) }'
    ok=$(echo "$tap" | grep -c '^ok ' || true)
    nok=$(echo "$tap" | grep -c '^not ok ' || true)
    plan=$(echo "$tap" | sed -n 's/^1\.\.\([0-9]*\)$/\1/p' | head -1)
    # tests that never reported (bats crashed) count as failed
    if [ -n "$plan" ] && [ $((ok + nok)) -lt "$plan" ]; then nok=$((plan - ok)); fi
    [ -z "$plan" ] && [ $((ok + nok)) -eq 0 ] && nok=1
    passed=$((passed + ok)); failed=$((failed + nok))
    if [ "$nok" -gt 0 ]; then
      failures+=("cluster: $nok")
      { echo "--- cluster: failed cases"; echo "$tap" | awk '/^not ok/ {p = 1} /^ok / {p = 0} p' | head -n 60; } >>"$FAIL_DETAILS"
    fi
  fi
else
  echo "$mc_out"
  failures+=("minicluster up"); failed=$((failed + 1))
fi
cleanup
trap - EXIT
fuzz_results

section "done"
# CI shows only the end of this output: repeat what failed, with its log.
[ -s "$FAIL_DETAILS" ] && tail -n 80 "$FAIL_DETAILS"
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
