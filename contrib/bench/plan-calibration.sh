#!/bin/sh
# Planner vs whale-train on this machine: measure whale-train step times for
# a few small configurations, calibrate the planner on ONE of them
# (whale-plan --fit-step, on top of the measured sgemm peak whale-train
# reports), and compare its predictions for the others with the
# measurements of the same run. Medians over the steps after warm-up.
# The planner models CPU ranks sharing a node's cores (the profile's peak
# was measured with Threads=1 on a node of CoresPerNode cores; each case
# passes its ranks and threads) and takes the links whale-bench calib
# measured under whale-run -n 2 in the same run (Link lines).
#
#   contrib/bench/plan-calibration.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
STEPS=${STEPS:-8}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PLAN="$BUILD/runtime/tools/plan/whale-plan"
TRAIN="$BUILD/runtime/tools/train/whale-train"
RUN="$BUILD/runtime/tools/run/whale-run"
BENCH="$BUILD/runtime/tools/bench/whale-bench"
for t in "$PLAN" "$TRAIN" "$RUN" "$BENCH"; do
    [ -x "$t" ] || { echo "plan-calibration: $t not built" >&2; exit 1; }
done
export WHALE_MODEL_PATH="$SRC/config/models" OMP_WAIT_POLICY=passive
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$SRC"/runtime/src/*/*.c > "$TMP/corpus.txt"

CORES=$(nproc)
# measure NAME RANKS MODEL BATCH THREADS: median step_s of whale-train (steps 3..)
measure() {
    name=$1 ranks=$2 model=$3 batch=$4 threads=$5
    args="--model $model --data $TMP/corpus.txt --format bytes --steps $STEPS --batch $batch
          --no-progress --threads $threads --metrics $TMP/$name.jsonl"
    if [ "$ranks" = 1 ]; then
        "$TRAIN" $args > /dev/null 2>&1
    else
        "$RUN" -n "$ranks" --timeout 300 "$TRAIN" $args > /dev/null 2>&1 || echo "plan-calibration: $name failed or timed out" >&2
    fi
    f=$TMP/$name.jsonl
    [ -f "$f" ] || f=$(ls "$TMP/$name".jsonl* 2>/dev/null | head -1)
    grep '"step":' "$f" | awk -v s=3 -F'"step":' '{split($2, a, ","); if (a[1] + 0 >= s) print}' \
        | sed 's/.*"step_s":\([0-9.eE+-]*\).*/\1/' | sort -g \
        | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
    grep '"summary"' "$f" | sed 's/.*"peak_gflops":\([0-9.eE+-]*\).*/\1/' > "$TMP/peak" || true
}

# the links between ranks of this node, measured the way training uses them
"$RUN" -n 2 --timeout 300 "$BENCH" calib -o "$TMP/bench.cal" > /dev/null 2>&1 ||
    echo "plan-calibration: whale-bench calib failed; the planner keeps its default links" >&2

# name ranks model batch threads (the rounds of all cases interleave)
cat > "$TMP/cases" <<EOC
fit 1 gpt-small 8 1
b16 1 gpt-small 16 1
tiny32 1 gpt-tiny 32 1
t2 1 gpt-small 16 $CORES
dp2 2 gpt-small 16 1
dp2t2 2 gpt-small 16 $CORES
EOC
while read -r name ranks model batch threads; do
    measure "$name" "$ranks" "$model" "$batch" "$threads" > "$TMP/$name.t"
    [ "$name" = fit ] && cp "$TMP/peak" "$TMP/fit.peak"
done < "$TMP/cases"

peak=$(cat "$TMP/fit.peak")
# OpenBLAS sgemm runs at the same rate from 64 to 1024 here (flat: GemmHalfDim=0)
{
    printf 'Calibration=1 Source=plan-calibration.sh\n'
    printf 'Device=cpu PeakTFLOPS=%s GemmHalfDim=0 Threads=1 CoresPerNode=%s\n' \
        "$(echo "$peak / 1000" | bc -l)" "$CORES"
    grep '^Link=' "$TMP/bench.cal" 2>/dev/null || true
} > "$TMP/peak.cal"
"$PLAN" -m gpt-small -b 8 -N 1 -g 1 -G cpu --calib "$TMP/peak.cal" --microbatch 8 --zero 0 \
    --recompute none --threads 1 --fit-step "$(cat "$TMP/fit.t")" --calib-out "$TMP/fit.cal"
echo "sgemm peak measured by whale-train: $peak GFLOP/s per rank; profile:"
grep -v '^#' "$TMP/fit.cal"
printf '\n%-8s %-10s %5s %6s %7s %12s %12s %7s\n' case model ranks batch threads "measured s" \
    "predicted s" ratio
while read -r name ranks model batch threads; do
    mb=$((batch / ranks))
    pred=$("$PLAN" -m "$model" -b "$batch" -N 1 -g "$ranks" -G cpu --calib "$TMP/fit.cal" \
           --cores-per-node "$CORES" --threads "$threads" \
           --microbatch "$mb" --zero 0 --recompute none -q | sed 's/.*step \([0-9.eE+-]*\) s.*/\1/')
    meas=$(cat "$TMP/$name.t")
    printf '%-8s %-10s %5s %6s %7s %12.4g %12.4g %7.2f%s\n' "$name" "$model" "$ranks" "$batch" \
        "$threads" "$meas" "$pred" "$(echo "$pred / $meas" | bc -l)" \
        "$([ "$name" = fit ] && echo '  (fitted)')"
done < "$TMP/cases"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (2 cores; other jobs distort the figures)"
