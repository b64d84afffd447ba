#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of outside input (tests/fuzz):
# whale.conf, topology.conf, plan JSON, model files, calibration profiles,
# rank maps, checkpoint manifests, safetensors headers, data shards.
#
#   contrib/fuzz.sh [SECONDS] [HARNESS...]
#
# Builds the harnesses with clang + libFuzzer + ASan + UBSan in build-fuzz
# (once), then runs each for SECONDS (default 15) from its seed corpus
# (tests/fuzz/corpus/NAME; new inputs go to build-fuzz/fuzz-corpus/NAME).
# Prints the executions per harness; a crash, leak, UB report or timeout
# leaves its input in build-fuzz/fuzz-artifacts and makes the exit status 1
# (turn it into a regression test: add the input to the seed corpus and
# fix the parser). The test command (contrib/test.sh) runs 15 s each; a
# longer run is e.g. `contrib/fuzz.sh 600` (10 minutes per harness) or
# `contrib/fuzz.sh 3600 manifest`. WHALE_FUZZ_JOBS harnesses run at once
# (default: one per core).
# An input that runs longer than WHALE_FUZZ_TIMEOUT seconds (30) fails the
# run as a hang. That is wall time, and the test command runs the fuzzers
# beside the cluster tests at nice 5 on a busy machine, so it is a bound
# for endless loops, not a speed test: inputs over WHALE_FUZZ_SLOW seconds
# (1) are kept as build-fuzz/fuzz-artifacts/NAME-slow-unit-* and listed,
# to be looked at (a parser that is slow on a short input is a finding).
set -uo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT"
SECS=${1:-15}
shift || true
BUILD=$ROOT/build-fuzz
ALL=(whale_conf topology plan model calib rankmap safetensors manifest data)
HARNESSES=("$@")
[ ${#HARNESSES[@]} -eq 0 ] && HARNESSES=("${ALL[@]}")

if ! command -v clang >/dev/null; then
  echo "fuzz: clang is missing (contrib/install-deps.sh installs it)"; exit 1
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang meson setup "$BUILD" -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dtests=false -Dplugin=disabled -Dcuda=disabled \
    -Dopenmp=disabled >"$ROOT/build-fuzz.setup.log" 2>&1 ||
    { tail -n 20 "$ROOT/build-fuzz.setup.log"; echo "fuzz: meson setup failed"; exit 1; }
  mv "$ROOT/build-fuzz.setup.log" "$BUILD/setup.log"
fi
if ! ninja -C "$BUILD" fuzzers >"$BUILD/ninja-fuzz.log" 2>&1; then
  tail -n 30 "$BUILD/ninja-fuzz.log"; echo "fuzz: build failed"; exit 1
fi

mkdir -p "$BUILD/fuzz-artifacts"
touch "$BUILD/.fuzz-start" # slow inputs of this run are newer
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0
export WHALE_FUZZ_DATA=$ROOT/tests/fuzz/data

# One harness: its report line(s) into $BUILD/fuzz-$h.result.
fuzz_one() {
  local h=$1 bin=$BUILD/tests/fuzz/fuzz_$1 out=$BUILD/fuzz-$1.result
  [ -x "$bin" ] || { echo "fuzz $h: no such harness (known: ${ALL[*]})" >"$out"; return; }
  local work=$BUILD/fuzz-corpus/$h log=$BUILD/fuzz-$h.log
  mkdir -p "$work"
  # -rss_limit_mb: a parser that allocates without bound is a finding too
  "$bin" -max_total_time="$SECS" -print_final_stats=1 -timeout="${WHALE_FUZZ_TIMEOUT:-30}" \
    -report_slow_units="${WHALE_FUZZ_SLOW:-1}" -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$BUILD/fuzz-artifacts/$h-" \
    "$work" "$ROOT/tests/fuzz/corpus/$h" >"$log" 2>&1 &
  local pid=$!
  wait "$pid"
  local rc=$? execs cov left
  # the harness's scratch directory (tests/fuzz/fuzz_common.h): removed by
  # the harness at exit; one left after a clean run is a finding, one left
  # by a crash is removed here
  left=$(ls -d /dev/shm/whale-fuzz-"$pid"-* /tmp/whale-fuzz-"$pid"-* 2>/dev/null)
  if [ -n "$left" ]; then
    rm -rf $left
    [ "$rc" -eq 0 ] && { echo "fuzz $h: FAILED: the harness left $left behind" >"$out"; echo "execs 0" >>"$out"; return; }
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    { echo "fuzz $h: FAILED after ${execs:-?} executions (exit $rc); log $log"
      grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -n 8; } >"$out"
  else
    echo "fuzz $h: ${execs:-0} executions in ${SECS} s, ${cov:-cov: ?}, 0 crashes" >"$out"
  fi
  echo "execs ${execs:-0}" >>"$out"
}

# A libFuzzer run is one single-threaded process bounded by wall time:
# WHALE_FUZZ_JOBS of them at once (default: the number of cores) give each
# harness the same core time and the whole pass a fraction of the wall time.
jobs=${WHALE_FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
running=0
for h in "${HARNESSES[@]}"; do
  rm -f "$BUILD/fuzz-$h.result"
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
  fuzz_one "$h" &
  running=$((running + 1))
done
wait
failed=0
total=0
for h in "${HARNESSES[@]}"; do
  out=$BUILD/fuzz-$h.result
  [ -f "$out" ] || { echo "fuzz $h: no result"; failed=$((failed + 1)); continue; }
  grep -v '^execs ' "$out"
  total=$((total + $(sed -n 's/^execs //p' "$out")))
  grep -qE '^fuzz [a-z_]+: (FAILED|no such)' "$out" && failed=$((failed + 1))
done
find "$BUILD/fuzz-artifacts" -name '*-slow-unit-*' -newer "$BUILD/.fuzz-start" | sort |
  while read -r f; do echo "fuzz: slow input (over ${WHALE_FUZZ_SLOW:-1} s here, not a failure): $f"; done
echo "fuzz: ${#HARNESSES[@]} harnesses, $total executions, $failed failed"
[ "$failed" -eq 0 ]
