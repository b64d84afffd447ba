#!/bin/sh
# Planner vs whale-train on this machine: measure whale-train step times for
# a few small configurations, calibrate the planner on five of them (the
# "fit" rows), and compare its predictions for the others with the
# measurements of the same run. What is calibrated, on top of the sgemm
# peak whale-train measures at one thread:
#   - GemmEfficiency and MemBandwidthGBs from gpt-small and gpt-tiny at one
#     thread (two equations: the time model is linear in 1 / GEMM rate and
#     1 / memory rate; the two models weigh them differently);
#   - SpillFactor, how much slower a layer runs once its activations outgrow
#     a core's L2 (CacheBytes, from getconf), from gpt-tiny at batch 64 (at
#     batch 8 most of its activations stay in L2; gpt-small's never do);
#   - ParallelFraction p and ThreadSyncUs from gpt-small and gpt-tiny at
#     all cores: a rank of n threads on its own cores runs its kernels
#     S(n) = 1 / ((1 - p) + p / n) times faster (Amdahl) and pays
#     ThreadSyncUs x log2(n) per layer pass for waking and joining its
#     threads; ranks beyond the cores time-share them.
# It takes the links whale-bench calib measured under whale-run -n 2 in the
# same run (Link lines). Rounds interleave the cases (ROUNDS, default 5); a
# run's figure is its fastest step (steps 3.. of STEPS: other tenants of the
# machine only ever add time to a step, and on a quiet machine the fastest
# and the median step agree within a few %; the tiny models, whose steps take
# milliseconds, run 5 x STEPS). The table fits and
# compares twice: on each case's median over rounds, and on its best (the
# machine's noise only ever adds time).
#
#   contrib/bench/plan-calibration.sh [BUILD_DIR]     (default: build)
#
# KEEP=1 keeps the measurements (the folder is named on stderr); REFIT=DIR
# fits and compares again on the measurements kept in DIR, measuring nothing
# (after a change to the planner).
set -eu
BUILD=${1:-build}
STEPS=${STEPS:-8}
ROUNDS=${ROUNDS:-5}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PLAN="$BUILD/runtime/tools/plan/whale-plan"
TRAIN="$BUILD/runtime/tools/train/whale-train"
RUN="$BUILD/runtime/tools/run/whale-run"
BENCH="$BUILD/runtime/tools/bench/whale-bench"
for t in "$PLAN" "$TRAIN" "$RUN" "$BENCH"; do
    [ -x "$t" ] || { echo "plan-calibration: $t not built" >&2; exit 1; }
done
export WHALE_MODEL_PATH="$SRC/config/models" OMP_WAIT_POLICY=passive
if [ -n "${REFIT:-}" ]; then
    TMP=$REFIT
    [ -f "$TMP/cases" ] && [ -f "$TMP/fit.runs" ] ||
        { echo "plan-calibration: $TMP holds no kept measurements (KEEP=1)" >&2; exit 1; }
    CORES=$(cat "$TMP/cores")
else
    TMP=$(mktemp -d)
    [ -n "${KEEP:-}" ] && echo "plan-calibration: keeping $TMP" >&2 || trap 'rm -rf "$TMP"' EXIT
    cat "$SRC"/runtime/src/*/*.c > "$TMP/corpus.txt"
    CORES=$(nproc)
    echo "$CORES" > "$TMP/cores"
    # the L2 one core works in (bytes; 0: unknown, no spill term)
    c=$(getconf LEVEL2_CACHE_SIZE 2>/dev/null || true)
    if [ -z "$c" ] || [ "$c" = 0 ] || [ "$c" = undefined ]; then
        c=$(sed -n 's/^\([0-9]*\)K$/\1/p' /sys/devices/system/cpu/cpu0/cache/index2/size 2>/dev/null)
        c=$(( ${c:-0} * 1024 ))
    fi
    echo "$c" > "$TMP/cache"
fi
CACHE=$(cat "$TMP/cache" 2>/dev/null || echo 0)
# measure NAME RANKS MODEL BATCH THREADS: fastest step_s of one whale-train run
# (steps 3..); the sgemm peak a one-rank run measured goes to $TMP/peak.tTHREADS
measure() {
    name=$1 ranks=$2 model=$3 batch=$4 threads=$5 steps=$STEPS
    case $model in *-tiny) steps=$((STEPS * 5)) ;; esac
    rm -f "$TMP/$name".jsonl*
    args="--model $model --data $TMP/corpus.txt --format bytes --steps $steps --batch $batch
          --no-progress --threads $threads --metrics $TMP/$name.jsonl"
    if [ "$ranks" = 1 ]; then
        "$TRAIN" $args > /dev/null 2>&1 || echo "plan-calibration: $name failed" >&2
    else
        "$RUN" -n "$ranks" --timeout 300 "$TRAIN" $args > /dev/null 2>&1 || echo "plan-calibration: $name failed or timed out" >&2
    fi
    f=$TMP/$name.jsonl
    [ -f "$f" ] || f=$(ls "$TMP/$name".jsonl* 2>/dev/null | head -1)
    grep '"step":' "$f" | awk -v s=3 -F'"step":' '{split($2, a, ","); if (a[1] + 0 >= s) print}' \
        | sed 's/.*"step_s":\([0-9.eE+-]*\).*/\1/' | best
    # every single-rank run measures the sgemm peak at its thread count
    if [ "$ranks" = 1 ]; then
        grep '"summary"' "$f" | sed 's/.*"peak_gflops":\([0-9.eE+-]*\).*/\1/' \
            >> "$TMP/peak.t$threads" || true
    fi
}
median() {
    sort -g | awk '{a[NR] = $1} END {if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
best() {
    sort -g | head -1
}
highest() {
    sort -g | tail -1
}
# The expression is assigned before it is printed: inside a print statement
# awk reads a bare ">" as output redirection, so "print $p > 1 ? 1 : $p"
# wrote $p into a file named "1" in the current directory.
calc() {
    awk "BEGIN { v = $1; print v }"
}

if [ -z "${REFIT:-}" ]; then
# the links between ranks of this node, measured the way training uses them
"$RUN" -n 2 --timeout 300 "$BENCH" calib -o "$TMP/bench.cal" > /dev/null 2>&1 ||
    echo "plan-calibration: whale-bench calib failed; the planner keeps its default links" >&2

# name ranks model batch threads; fit* rows are fitted, the rest predicted
cat > "$TMP/cases" <<EOC
fit 1 gpt-small 8 1
fittiny 1 gpt-tiny 8 1
fittinyL 1 gpt-tiny 64 1
fitN 1 gpt-small 8 $CORES
fittinyN 1 gpt-tiny 8 $CORES
b16 1 gpt-small 16 1
tiny32 1 gpt-tiny 32 1
llama32 1 llama-tiny 32 1
t2 1 gpt-small 16 $CORES
tiny32t2 1 gpt-tiny 32 $CORES
dp2 2 gpt-small 16 1
dp2t2 2 gpt-small 16 $CORES
EOC
r=1
while [ "$r" -le "$ROUNDS" ]; do
    while read -r name ranks model batch threads; do
        measure "$name" "$ranks" "$model" "$batch" "$threads" >> "$TMP/$name.runs"
    done < "$TMP/cases"
    r=$((r + 1))
done
cut -d' ' -f1-3 /proc/loadavg > "$TMP/load"
fi

# profile PEAK_GFLOPS P GEMM_EFF MEM_GBS SYNC_US SPILL > FILE
BW0=20
profile() {
    printf 'Calibration=1 Source=plan-calibration.sh\n'
    printf 'Device=cpu PeakTFLOPS=%s GemmHalfDim=0 Threads=1 CoresPerNode=%s ParallelFraction=%s' \
        "$(calc "$1 / 1000")" "$CORES" "$2"
    printf ' GemmEfficiency=%s MemBandwidthGBs=%s MemEfficiency=1 ThreadSyncUs=%s' "$3" "$4" "$5"
    [ "$CACHE" -gt 0 ] && printf ' CacheBytes=%s SpillFactor=%s' "$CACHE" "$6"
    printf '\n'
    grep '^Link=' "$TMP/bench.cal" 2>/dev/null || true
}
# predict PROFILE NAME: the planner's step time for case NAME
predict() {
    set -- "$1" $(grep "^$2 " "$TMP/cases")
    "$PLAN" -m "$4" -b "$5" -N 1 -g "$3" -G cpu --calib "$1" --cores-per-node "$CORES" \
        --threads "$6" --microbatch $(($5 / $3)) --zero 0 --recompute none -q |
        sed 's/.*step \([0-9.eE+-]*\) s.*/\1/'
}
# rates STAT SPILL: GEMM efficiency and memory rate at one thread for a
# given spill factor (sets peak, ge, bw). The step time is linear in
# x = 1 / E and y = BW0 / BW: t = a x + b y + c per fit case from three
# evaluations, then two equations (gpt-small and gpt-tiny weigh them
# differently).
rates() {
    peak=$peak0
    for c in fit fittiny; do
        profile "$peak" 1 1 "$BW0" 0 "$2" > "$TMP/e.cal"; t11=$(predict "$TMP/e.cal" $c)
        profile "$peak" 1 0.5 "$BW0" 0 "$2" > "$TMP/e.cal"; t21=$(predict "$TMP/e.cal" $c)
        profile "$peak" 1 1 "$(calc "$BW0 / 2")" 0 "$2" > "$TMP/e.cal"; t12=$(predict "$TMP/e.cal" $c)
        echo "$(calc "$t21 - $t11") $(calc "$t12 - $t11") $(calc "3 * $t11 - $t21 - $t12")" > "$TMP/$c.abc"
    done
    read -r a1 b1 c1 < "$TMP/fit.abc"
    read -r a2 b2 c2 < "$TMP/fittiny.abc"
    r1=$(calc "$(cat "$TMP/fit.$1") - $c1") r2=$(calc "$(cat "$TMP/fittiny.$1") - $c2")
    det=$(calc "$a1 * $b2 - $a2 * $b1")
    x=$(calc "($r1 * $b2 - $r2 * $b1) / $det") y=$(calc "($a1 * $r2 - $a2 * $r1) / $det")
    if [ "$(calc "($x > 0 && $y > 0) ? 1 : 0")" = 1 ]; then
        ge=$(calc "1 / $x") bw=$(calc "$BW0 / $y")
        # GEMMs ran faster than the sampled peak (a noisy sample): the rate
        # peak x E is what counts, so raise the peak and keep E = 1
        if [ "$(calc "($x < 1) ? 1 : 0")" = 1 ]; then
            peak=$(calc "$peak / $x") ge=1
        fi
    else
        # the two cases do not separate the rates (noise): one factor on
        # both, from gpt-small
        profile "$peak" 1 1 "$BW0" 0 "$2" > "$TMP/e.cal"
        rm -f "$TMP/f1.cal"
        if "$PLAN" -m gpt-small -b 8 -N 1 -g 1 -G cpu --calib "$TMP/e.cal" --microbatch 8 \
               --zero 0 --recompute none --threads 1 --fit-step "$(cat "$TMP/fit.$1")" \
               --calib-out "$TMP/f1.cal" > /dev/null 2>&1; then
            ge=$(sed -n 's/.*GemmEfficiency=\([0-9.eE+-]*\).*/\1/p' "$TMP/f1.cal")
            bw=$(calc "$BW0 * $(sed -n 's/.*MemEfficiency=\([0-9.eE+-]*\).*/\1/p' "$TMP/f1.cal")")
        else
            # no efficiency fits (a trial spill factor too large: the
            # memory part alone is slower than the step): full rates, so
            # the trial predicts too slow a step and the bisection lowers it
            ge=1 bw=$BW0
        fi
        echo "y" > "$TMP/inseparable.$1"
    fi
}
# fit STAT (median|best): write $TMP/STAT.cal from each case's STAT over rounds
fit() {
    st=$1
    rm -f "$TMP/inseparable.$st"
    for c in fit fittiny fittinyL fitN fittinyN; do $st < "$TMP/$c.runs" > "$TMP/$c.$st"; done
    # the sgemm peak over all one-rank runs at 1 thread: median, or the
    # highest for "best"
    pst=$st; [ "$st" = best ] && pst=highest
    peak0=$($pst < "$TMP/peak.t1") p=1 spill=0
    # the spill factor that makes gpt-tiny at batch 64 (its activations 8x
    # those of batch 8) come out right with the rates it implies, by
    # bisection in [0, 20] (the larger batch gains the more from it)
    if [ "$CACHE" -gt 0 ]; then
        tl=$(cat "$TMP/fittinyL.$st") lo=0 hi=20
        for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
            spill=$(calc "($lo + $hi) / 2")
            rates "$st" "$spill"
            profile "$peak" 1 "$ge" "$bw" 0 "$spill" > "$TMP/e.cal"
            if [ "$(calc "($(predict "$TMP/e.cal" fittinyL) > $tl) ? 1 : 0")" = 1 ]; then
                hi=$spill
            else
                lo=$spill
            fi
        done
        # at the bound: the data put (nearly) all element-wise cost on the
        # spilled bytes; MemBandwidthGBs then reads as the in-cache rate
        [ "$(calc "($spill > 19.9) ? 1 : 0")" = 1 ] && echo "plan-calibration: $st: SpillFactor" \
            "at its bound 20 (traffic within L2 next to free; spilled rate MemBandwidthGBs / 21)" >&2
    fi
    rates "$st" "$spill"
    [ -f "$TMP/inseparable.$st" ] && echo "plan-calibration: $st: GEMM and memory rates not" \
        "separable on some trials; both scaled from the fit case there" >&2
    # threads: a rank of n threads runs the step S(n) = 1 / ((1 - p) + p / n)
    # times faster (Amdahl) and pays ThreadSyncUs x log2(n) per layer pass
    # (waking and joining its threads around every kernel). Two unknowns,
    # two cases at all cores: gpt-small (long kernels: mostly p) and gpt-tiny
    # (kernels of microseconds: mostly the sync). For a trial p, the sync that
    # makes fitN come out right (the time is linear in it); the p whose sync
    # also fits fittinyN, by bisection (a larger p asks more sync of fitN,
    # which costs the tiny model more than its Amdahl part gains).
    tn=$(cat "$TMP/fitN.$st") tt=$(cat "$TMP/fittinyN.$st") lo=0 hi=1 sync=0
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        p=$(calc "($lo + $hi) / 2")
        profile "$peak" "$p" "$ge" "$bw" 0 "$spill" > "$TMP/e.cal"; s0=$(predict "$TMP/e.cal" fitN)
        profile "$peak" "$p" "$ge" "$bw" 1000 "$spill" > "$TMP/e.cal"; s1=$(predict "$TMP/e.cal" fitN)
        sync=$(calc "($s1 > $s0 && $tn > $s0) ? 1000 * ($tn - $s0) / ($s1 - $s0) : 0")
        profile "$peak" "$p" "$ge" "$bw" "$sync" "$spill" > "$TMP/e.cal"
        if [ "$(calc "($(predict "$TMP/e.cal" fittinyN) > $tt) ? 1 : 0")" = 1 ]; then
            hi=$p
        else
            lo=$p
        fi
    done
    profile "$peak" "$p" "$ge" "$bw" "$sync" "$spill" > "$TMP/$st.cal"
}
fit median
fit best
for st in median best; do
    echo "profile fitted on each case's $st over $ROUNDS rounds:"
    grep -v '^#' "$TMP/$st.cal" | sed 's/^/    /'
done
printf '\n%-9s %-10s %5s %5s %7s %23s %23s %s\n' "" "" "" "" "" "---- median of runs ----" \
    "----- best of runs -----" ""
printf '%-9s %-10s %5s %5s %7s %8s %8s %5s %8s %8s %5s  %s\n' case model ranks batch threads \
    "meas s" "pred s" ratio "meas s" "pred s" ratio "runs (s)"
while read -r name ranks model batch threads; do
    line=$(printf '%-9s %-10s %5s %5s %7s' "$name" "$model" "$ranks" "$batch" "$threads")
    for st in median best; do
        m=$($st < "$TMP/$name.runs") p=$(predict "$TMP/$st.cal" "$name")
        line="$line $(printf '%8.4g %8.4g %5.2f' "$m" "$p" "$(calc "$p / $m")")"
    done
    case $name in fit*) tag='  (fitted)' ;; *) tag='' ;; esac
    echo "$line  $(awk '{printf "%s%.4g", (NR > 1 ? " " : ""), $1}' "$TMP/$name.runs")$tag"
done < "$TMP/cases"
echo "load average at the end of the measurements: $(cat "$TMP/load" 2>/dev/null)" \
     "($CORES cores; other jobs distort the figures)"
