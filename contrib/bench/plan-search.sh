#!/bin/sh
# Planner search cost: wall time of the search and peak memory of whale-plan
# for the Megatron 1T row (3,072 A100-80GB) and a 100,000-GPU cluster,
# against the same search with pruning switched off (--exhaustive), measured
# in the same run. Medians of RUNS runs.
#
#   contrib/bench/plan-search.sh [BUILD_DIR]     (default: build)
set -eu
BUILD=${1:-build}
RUNS=${RUNS:-5}
PLAN="$BUILD/runtime/tools/plan/whale-plan"
[ -x "$PLAN" ] || { echo "plan-search: $PLAN not built (ninja -C $BUILD)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "plan-search: needs GNU time (/usr/bin/time)" >&2; exit 1; }
export WHALE_MODEL_PATH="$(dirname "$0")/../../config/models"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# one case: label, then whale-plan arguments
run_case() {
    label=$1; shift
    for mode in pruned exhaustive; do
        extra=""; [ $mode = exhaustive ] && extra=--exhaustive
        : > "$TMP/t"; : > "$TMP/m"
        i=0
        while [ $i -lt "$RUNS" ]; do
            /usr/bin/time -f "%M" -o "$TMP/rss" "$PLAN" "$@" $extra --top 4 > "$TMP/out"
            sed -n 's/^searched \([0-9]*\) configurations (\([0-9]*\) branches pruned) in \([0-9.]*\) s$/\3 \1 \2/p' \
                "$TMP/out" > "$TMP/line"
            cut -d' ' -f1 "$TMP/line" >> "$TMP/t"
            cat "$TMP/rss" >> "$TMP/m"
            i=$((i + 1))
        done
        t=$(median < "$TMP/t"); m=$(median < "$TMP/m")
        n=$(cut -d' ' -f2 "$TMP/line"); p=$(cut -d' ' -f3 "$TMP/line")
        best=$(sed -n 's/^best *//p' "$TMP/out" | awk '{print "tp="$1" pp="$2" dp="$3" mb="$4" zero="$8" rc="$9" "$12"s"}')
        printf '%-34s %-10s %9s %12s %9.1f %7s  %s\n' "$label" $mode "$t" "$n" "$(echo "$m / 1024" | bc -l)" "$p" "$best"
        eval "T_$mode=$t"
    done
    printf '%-34s pruned search is %.1fx faster than exhaustive\n' "" "$(echo "$T_exhaustive / $T_pruned" | bc -l)"
}

printf '%-34s %-10s %9s %12s %9s %7s  %s\n' case mode "search s" evaluated "peak MiB" pruned "best plan (step time)"
run_case "gpt-1t, 3,072 x A100-80GB"      -m gpt-1t -b 3072  -N 384   -G A100-80GB
run_case "gpt-1t, 100,000 x H100-80GB"    -m gpt-1t -b 16000 -N 12500 -G H100-80GB
run_case "gpt-1t, 100,000 x H100, idle<=5%" -m gpt-1t -b 16000 -N 12500 -G H100-80GB --max-idle 0.05
run_case "gpt-1t, 100,000 x GB200 NVL72"  -m gpt-1t -b 16000 -N 25000 -g 4 -G GB200 --nvlink-domain 72 --max-idle 0.05
echo "targets (issue): < 1 s and < 100 MB for the 1T row on 3,072 GPUs"
