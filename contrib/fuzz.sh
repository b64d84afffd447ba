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
# `contrib/fuzz.sh 3600 manifest`.
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
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0
export WHALE_FUZZ_DATA=$ROOT/tests/fuzz/data

failed=0
total=0
for h in "${HARNESSES[@]}"; do
  bin=$BUILD/tests/fuzz/fuzz_$h
  [ -x "$bin" ] || { echo "fuzz $h: no such harness (known: ${ALL[*]})"; failed=$((failed + 1)); continue; }
  work=$BUILD/fuzz-corpus/$h
  mkdir -p "$work"
  log=$BUILD/fuzz-$h.log
  # -rss_limit_mb: a parser that allocates without bound is a finding too
  "$bin" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$BUILD/fuzz-artifacts/$h-" \
    "$work" "$ROOT/tests/fuzz/corpus/$h" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1)
  total=$((total + ${execs:-0}))
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    echo "fuzz $h: FAILED after ${execs:-?} executions (exit $rc); log $log"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -n 8
  else
    echo "fuzz $h: ${execs:-0} executions in ${SECS} s, ${cov:-cov: ?}, 0 crashes"
  fi
done
echo "fuzz: ${#HARNESSES[@]} harnesses, $total executions, $failed failed"
[ "$failed" -eq 0 ]
