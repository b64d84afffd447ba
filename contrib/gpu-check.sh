#!/usr/bin/env bash
# GPU check for a maintainer with a GPU machine: builds Whale with the CUDA
# backend for the GPUs present, runs the GPU tests (every cuda kernel
# against the cpu backend, CUDA-vs-CPU training steps, NCCL against the host
# collectives; multi-GPU layouts when there are >= 2 GPUs) and a throughput
# run (GPT-2 124M and a 1.3B shape, bf16, one GPU), in under 8 minutes, and
# writes a summary file. The engine itself runs on the GPU through
# whale-train --device cuda: equivalence with --device cpu (gpu_engine_device)
# and bf16 whale-train throughput runs (GPT-2 124M, gpt-1.2b, llama-110m)
# with tokens/s and MFU against the GPU's dense 16-bit peak.
#
#   bash contrib/gpu-check.sh [SUMMARY_FILE]     (default: gpu-check-summary.txt)
#   bash contrib/gpu-check.sh --selftest [SUMMARY_FILE]
#       no GPU needed: checks that every test, program and whale-train option
#       the script uses exists in the build WHALE_GPU_BUILD (default build),
#       running the whale-train command lines on the cpu for one tiny step,
#       and runs tests/gpu/engine_device.sh with its "cuda" side on the cpu
#       (every command line and comparison of the engine equivalence test,
#       GPT and Llama, must then agree exactly).
#
# Environment: WHALE_GPU_BUILD (build directory, default build-gpu),
# WHALE_GPU_BENCH_STEPS (timed steps per model, default 20),
# WHALE_PEAK_TFLOPS (dense 16-bit peak for MFU when the GPU is not known).
# Exit status: 0 all passed, 1 a build/test/bench failure, 77 no GPU here.
set -uo pipefail

SELFTEST=0
if [ "${1:-}" = "--selftest" ]; then SELFTEST=1; shift; fi
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT"
SUMMARY=$(readlink -f "${1:-gpu-check-summary.txt}")
BUILD=${WHALE_GPU_BUILD:-build-gpu}
[ "$SELFTEST" = 1 ] && BUILD=${WHALE_GPU_BUILD:-build}
STEPS=${WHALE_GPU_BENCH_STEPS:-20}
T0=$(date +%s)
status=0

say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

: > "$SUMMARY"
say "# Whale GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# The whale-train throughput runs: model, batch, steps (gpt-1.2b: the ~1.3B shape).
TRAIN_RUNS=("gpt2-124m 8" "gpt-1.2b 4" "llama-110m 8")
TRAIN_OPTS=(--precision bf16 --format bytes --seq 1024 --no-progress)

if [ "$SELFTEST" = 1 ]; then
  say "## selftest (no GPU needed): build $BUILD"
  bad=0
  for p in meson ninja timeout awk git; do
    command -v "$p" >/dev/null || { say "    missing program: $p"; bad=1; }
  done
  for f in "$BUILD/tests/gpu/gpu_bench" "$BUILD/runtime/tools/train/whale-train"; do
    [ -x "$f" ] || { say "    missing: $f"; bad=1; }
  done
  listed=$(meson test -C "$BUILD" --list 2>/dev/null)
  for t in backend backend_llama backend_device backend_minigpt gpu_kernels gpu_llama gpu_model \
           gpu_engine_device gpu_nccl_n2 nccl_check_n2 gpu_nccl_tp2_n4; do
    grep -q "\b$t\$" <<<"$listed" || { say "    meson test not defined: $t"; bad=1; }
  done
  "$BUILD/tests/gpu/gpu_bench" --help 2>&1 | grep -q -- '--peak-tflops' \
    || { say "    gpu_bench has no --peak-tflops"; bad=1; }
  d=$(mktemp -d)
  head -c 200000 /dev/urandom > "$d/data.bin.raw"
  for r in "${TRAIN_RUNS[@]}"; do
    set -- $r
    # the same options as the GPU run, on the cpu, tiny: gpt-tiny stands in for the big
    # GPT shapes (their weights do not fit a test machine), llama-tiny for llama-110m
    m=gpt-tiny; case $1 in llama*) m=llama-tiny;; esac
    if WHALE_MODEL_PATH="$ROOT/config/models" "$BUILD/runtime/tools/train/whale-train" \
         --device cpu --model "$m" --data "$d/data.bin.raw" "${TRAIN_OPTS[@]/1024/64}" \
         --batch 1 --steps 1 --peak-gflops 1000 --metrics "$d/m.jsonl" >"$d/log" 2>&1 \
       && grep -q '"mfu"' "$d/m.jsonl"; then
      say "    whale-train command line of $1: ok (ran $m on the cpu)"
    else
      say "    whale-train command line of $1 FAILED:"; tail -n 3 "$d/log" | tee -a "$SUMMARY"; bad=1
    fi
  done
  rm -rf "$d"
  # the engine equivalence script (gpu_engine_device) with --device cpu on both sides
  if WHALE_ENGINE_DEVICE_SELFTEST=1 WHALE_MODEL_PATH="$ROOT/config/models" \
       timeout 600 bash "$ROOT/tests/gpu/engine_device.sh" \
       "$BUILD/runtime/tools/train/whale-train" "$BUILD/runtime/tools/run/whale-run" \
       >"$BUILD/selftest-engine.log" 2>&1; then
    say "    tests/gpu/engine_device.sh command lines: ok ($(grep -c '^ok ' "$BUILD/selftest-engine.log") step comparisons, cpu on both sides)"
  else
    say "    tests/gpu/engine_device.sh FAILED on the cpu (details: $BUILD/selftest-engine.log):"
    grep -E '^FAIL|^SKIP' "$BUILD/selftest-engine.log" | head -5 | tee -a "$SUMMARY"; bad=1
  fi
  say "## selftest: $([ $bad -eq 0 ] && echo PASS || echo FAIL)"
  exit $bad
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU visible (nvidia-smi finds none): nothing was tested"
  exit 77
fi
say "## GPUs"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader \
  | sed 's/^/    /' | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L | wc -l)
# compile for the architectures present only (a quicker build)
ARCHS=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | tr -d '.' | sort -u | paste -sd, -)

say "## build (cuda enabled, gpu_arch=$ARCHS)"
# the logs live inside the build directory: "$BUILD.x.log" left files beside
# it, at the top of the source tree, where a "git add -A" picked them up
mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dcuda=enabled -Dgpu_arch="$ARCHS" >"$BUILD/gpu-check-setup.log" 2>&1 \
    || { say "meson setup failed (see $BUILD/gpu-check-setup.log)"; exit 1; }
else
  meson configure "$BUILD" -Dcuda=enabled -Dgpu_arch="$ARCHS" >/dev/null
fi
if ! timeout 300 ninja -C "$BUILD" >"$BUILD/gpu-check-ninja.log" 2>&1; then
  tail -n 30 "$BUILD/gpu-check-ninja.log"
  say "build FAILED (see $BUILD/gpu-check-ninja.log)"
  exit 1
fi
nwarn=$(grep -c "warning:" "$BUILD/gpu-check-ninja.log")
say "build ok in $(elapsed) s, $nwarn compiler warnings"
[ "$nwarn" -eq 0 ] || status=1

say "## tests"
# backend unit tests (cpu), then the GPU suite; NCCL needs one GPU per rank: the 2-rank tests
# from 2 GPUs on, the TP x DP layout (4 ranks) from 4
tests=(backend backend_llama backend_device backend_minigpt gpu_kernels gpu_llama gpu_model
       gpu_engine_device)
[ "$NGPU" -ge 2 ] && tests+=(gpu_nccl_n2 nccl_check_n2)
[ "$NGPU" -ge 4 ] && tests+=(gpu_nccl_tp2_n4)
[ "$NGPU" -lt 2 ] && say "    one GPU: the NCCL tests (2 and 4 ranks) are not run"
[ "$NGPU" -lt 4 ] && [ "$NGPU" -ge 2 ] && say "    fewer than 4 GPUs: the TP x DP NCCL test (4 ranks) is not run"
# what is left of the 8 minutes, less a minute for the throughput runs (at least 60 s)
tleft=$(( 420 - $(elapsed) )); [ "$tleft" -lt 60 ] && tleft=60
timeout "$tleft" meson test -C "$BUILD" --print-errorlogs "${tests[@]}" >"$BUILD/gpu-check-test.log" 2>&1
grep -E '^ *[0-9]+/[0-9]+ ' "$BUILD/gpu-check-test.log" | sed 's/^/    /' | tee -a "$SUMMARY"
if grep -qE '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR)' "$BUILD/gpu-check-test.log" \
   || ! grep -q '^Ok:' "$BUILD/gpu-check-test.log"; then
  status=1
  say "tests FAILED (details: $BUILD/gpu-check-test.log)"
fi
# the checks inside the GPU tests, and the CUDA-vs-CPU loss per step
LOG=$BUILD/meson-logs/testlog.txt
say "    checks inside the tests: $(grep -c '^ok ' "$LOG") ok, $(grep -c '^FAIL' "$LOG") failed"
grep -E '^(ok|FAIL) +(float32|bfloat16) (step|gradients)' "$LOG" | sed 's/^/    /' | tee -a "$SUMMARY"
# GPT (fp32, bf16, untied, tp2) and the Llama block (llama ...) cases of engine_device.sh
grep -E '^(ok|FAIL) .* step [0-9]+ cpu ' "$LOG" | sed 's/^/    whale-train --device cpu vs cuda: /' | tee -a "$SUMMARY"
grep -E '^FAIL ' "$LOG" | head -20 | sed 's/^/    /' | tee -a "$SUMMARY"

say "## throughput (one GPU, bf16, forward + backward + AdamW per step, minigpt on the cuda backend)"
bench() {  # model batch
  local left=$(( 470 - $(elapsed) ))
  if [ "$left" -lt 30 ]; then say "    $1: skipped, the 8-minute budget is spent"; return; fi
  local out
  out=$(timeout "$left" "$BUILD/tests/gpu/gpu_bench" --model "$1" --batch "$2" --seq 1024 \
          --steps "$STEPS" --dtype bf16 ${WHALE_PEAK_TFLOPS:+--peak-tflops "$WHALE_PEAK_TFLOPS"} 2>&1)
  local rc=$?
  echo "$out" | head -n 1 | sed 's/^/    /' | tee -a "$SUMMARY"
  echo "$out" | grep '^{' | sed 's/^/    /' >> "$SUMMARY"
  if [ "$rc" -ne 0 ]; then status=1; say "    $1: gpu_bench exit $rc"; fi
}
bench gpt2-124m 16
bench gpt-1.3b 4

say "## whale-train --device cuda (the engine on the GPU, host-coherent backend, bf16)"
# MFU against the dense 16-bit peak of the GPU (gpu_bench's table), or WHALE_PEAK_TFLOPS
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
PEAK=${WHALE_PEAK_TFLOPS:-}
if [ -z "$PEAK" ]; then
  case $GPU_NAME in
    *H100*|*H200*|*GH200*) PEAK=989.4;; *B200*) PEAK=2250;; *A100*) PEAK=312;; *) PEAK=;;
  esac
fi
[ -z "$PEAK" ] && say "    $GPU_NAME: peak unknown (set WHALE_PEAK_TFLOPS): MFU not computed"
train_bench() {  # model batch
  local left=$(( 475 - $(elapsed) ))
  if [ "$left" -lt 30 ]; then say "    $1: skipped, the 8-minute budget is spent"; return; fi
  local d; d=$(mktemp -d)
  head -c 20000000 /dev/urandom > "$d/data.bin.raw"
  if timeout "$left" env WHALE_MODEL_PATH="$ROOT/config/models" \
       "$BUILD/runtime/tools/train/whale-train" --device cuda --model "$1" "${TRAIN_OPTS[@]}" \
       --data "$d/data.bin.raw" --batch "$2" --steps 10 ${PEAK:+--peak-gflops "${PEAK}e3"} \
       --metrics "$d/m.jsonl" >"$d/log" 2>&1; then
    # the mean over steps 3..10 (the first ones pay for cuBLASLt heuristics and page migration)
    awk -v m="$1" -v b="$2" -v peak="$PEAK" '
      /"tokens_per_s":/ { n0++; if (n0 <= 2) next
        split($0, a, "\"tokens_per_s\":"); split(a[2], x, ","); s += x[1]
        split($0, c, "\"mfu\":"); split(c[2], y, /[,}]/); f += y[1]; n++ }
      END { if (!n) { print "    " m ": no step metrics"; exit }
            printf "    %s bf16 B%d T1024: %.0f tokens/s, MFU %s (mean of %d steps)\n", m, b, s / n,
                   peak != "" ? sprintf("%.1f %%", 100 * f / n) : "n/a", n }' \
      "$d/m.jsonl" | tee -a "$SUMMARY"
    grep -m1 'computing on' "$d/log" | sed 's/^/    /' | tee -a "$SUMMARY"
  elif grep -q -- '--device cuda: model .* needs' "$d/log"; then
    # a refusal by name (engine/device.c): not measured, said plainly
    say "    $1: NOT MEASURED, the cuda backend refuses it: $(grep -m1 -o 'needs .*' "$d/log")"
  else
    status=1; say "    whale-train --device cuda --model $1 FAILED:"; tail -n 5 "$d/log" | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
  rm -rf "$d"
}
for r in "${TRAIN_RUNS[@]}"; do train_bench $r; done

say "## done in $(elapsed) s: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
say "summary: $SUMMARY"
exit $status
