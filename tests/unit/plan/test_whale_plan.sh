#!/bin/sh
# whale-plan command line: exit codes 0/1/2, messages, --json output in the
# WHALE_PLAN format, --evaluate of a published configuration.
#   test_whale_plan.sh /path/to/whale-plan SOURCE_ROOT
set -u
P=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=${2:-.}
fails=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

expect() { # expect RC DESCRIPTION -- command...
    want=$1; what=$2; shift 3
    "$@" > "$TMP/out" 2> "$TMP/err"
    got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: $what: exit $got, wanted $want"; cat "$TMP/out" "$TMP/err"; fails=$((fails + 1))
    fi
}
has() { # has FILE PATTERN DESCRIPTION
    grep -q -- "$2" "$1" || { echo "FAIL: $3: '$2' not in output"; cat "$1"; fails=$((fails + 1)); }
}

expect 0 help -- "$P" --help
has "$TMP/out" "usage: whale-plan" "help text"
expect 0 version -- "$P" --version
has "$TMP/out" "whale-plan " "version"
expect 0 list-gpus -- "$P" --list-gpus
has "$TMP/out" "H100-80GB" "gpu list"
expect 2 "missing nodes" -- "$P" -m gpt-1.7b -b 512
has "$TMP/err" "--nodes is required" "missing nodes message"
expect 2 "bad number" -- "$P" -m gpt-1.7b -b 512 -N x
has "$TMP/err" "expected an integer" "bad number message"
expect 2 "bad zero" -- "$P" -m gpt-1.7b -b 512 -N 4 --zero 4
expect 2 "unknown gpu" -- "$P" -m gpt-1.7b -b 512 -N 4 -G Z100
has "$TMP/err" "unknown GPU type 'Z100'" "unknown gpu message"
expect 2 "bad recompute" -- "$P" -m gpt-1.7b -b 512 -N 4 --recompute most
expect 1 "unknown model" -- "$P" -m no-such-model -b 512 -N 4
has "$TMP/err" "not found" "unknown model message"
expect 1 "does not fit" -- "$P" -m gpt-1t -b 64 -N 1
has "$TMP/err" "nothing fits" "infeasible reason"
has "$TMP/err" "GiB" "infeasible reason names memory"
expect 1 "tp beyond the domain" -- "$P" -m gpt-1.7b -b 512 -N 4 -g 4 --tp 8
expect 0 search -- "$P" -m gpt-1.7b -b 512 -N 4
has "$TMP/out" "^best" "table"
has "$TMP/out" "why this plan" "explanation"
# fp32 gradient reduction (Megatron-LM's bf16 default) costs more DP time than bf16
expect 0 "bf16 gradients" -- "$P" -m gpt-1.7b -b 512 -N 16 --tp 1 --pp 1 --zero 1 --microbatch 4
sed -n 's/.*DP\/ZeRO exposed \([0-9.e+-]*\).*/\1/p' "$TMP/out" > "$TMP/dp16"
expect 0 "fp32 gradients" -- "$P" -m gpt-1.7b -b 512 -N 16 --tp 1 --pp 1 --zero 1 --microbatch 4 --grad-reduce-fp32
sed -n 's/.*DP\/ZeRO exposed \([0-9.e+-]*\).*/\1/p' "$TMP/out" > "$TMP/dp32"
awk -v a="$(cat "$TMP/dp16")" -v b="$(cat "$TMP/dp32")" 'BEGIN { exit !(b > a && a > 0) }' ||
    { echo "FAIL: --grad-reduce-fp32: DP exposed $(cat "$TMP/dp32") s not above $(cat "$TMP/dp16") s"; fails=$((fails + 1)); }
expect 0 json -- "$P" -m gpt-7.5b -b 512 -N 16 -q --json "$TMP/plan.json"
has "$TMP/plan.json" '"prediction"' "json prediction"
has "$TMP/plan.json" '"tp"' "json tp"
has "$TMP/plan.json" '"step_seconds"' "json step time"
has "$TMP/plan.json" '"range"' "json prediction range"
has "$TMP/plan.json" '"kind": "ampere/' "json range kind"
has "$TMP/plan.json" '"low": -0' "json range low end"
expect 0 "json on stdout" -- "$P" -m gpt-7.5b -b 512 -N 16 -e -j -
[ "$(head -c 1 "$TMP/out")" = "{" ] || { echo "FAIL: --json - stdout is not only the plan"; fails=$((fails + 1)); }
has "$TMP/err" "^best" "report on stderr with --json -"
expect 0 "predict a plan file" -- "$P" -m gpt-7.5b -N 16 --plan "$TMP/plan.json"
has "$TMP/out" "time per step" "plan file prediction"
sed 's/"tp": [0-9]*/"tp": 3/' "$TMP/plan.json" > "$TMP/bad.json"
expect 1 "inconsistent plan file" -- "$P" -m gpt-7.5b -N 16 --plan "$TMP/bad.json"
expect 1 "plan file on too few GPUs" -- "$P" -m gpt-7.5b -N 2 --plan "$TMP/plan.json"
expect 0 evaluate -- "$P" -m gpt-39.1b -b 1536 -N 64 --tp 8 --pp 2 --zero 0 --recompute full --seqpar no --evaluate
has "$TMP/out" "^evaluated: tp=8 pp=2 dp=32" "evaluated line"
has "$TMP/out" "as fast" "comparison with the planner"
expect 0 mixed -- "$P" -m gpt-3.6b -b 512 -N 2 -G H100-80GB --group 2:8:A100-80GB
has "$TMP/out" "mixed cluster" "mixed gain line"
expect 2 "bad group" -- "$P" -m gpt-3.6b -b 512 -N 2 --group 2:8
printf 'Calibration=1 Source=test\nDevice=cpu PeakTFLOPS=0.15 GemmEfficiency=0.6\nLink=leaf AlphaUs=40 BandwidthGBs=1.5\n' > "$TMP/c.cal"
expect 0 calib -- "$P" -m gpt-tiny -b 16 -N 4 -g 2 -G cpu --calib "$TMP/c.cal" --explain-model
has "$TMP/out" "peak 0.15 TFLOP/s" "calibrated peak applied"
printf 'Device=cpu Peak=1\n' > "$TMP/bad.cal"
expect 1 "bad calib" -- "$P" -m gpt-tiny -b 16 -N 4 -g 2 -G cpu --calib "$TMP/bad.cal"
has "$TMP/err" "bad.cal:1: unknown key 'Peak'" "calib error names file:line"
# the cluster as the plugin sees it (whale.conf + topology.conf), when built with the conf module
T="$SRC/config/topologies"
if [ -f "$T/fattree.whale.conf" ] && ! "$P" -m gpt-tiny -b 8 --conf /nonexistent --nodelist n1 2>&1 | grep -q "no site-config support"; then
    (cd "$T" && "$P" -m gpt-1.7b -b 512 --conf fattree.whale.conf --nodelist 'gpu[01-04]' -q) > "$TMP/out" 2> "$TMP/err"
    [ $? -eq 0 ] || { echo "FAIL: --conf fattree"; cat "$TMP/err"; fails=$((fails + 1)); }
    has "$TMP/out" "tp=" "plan from whale.conf"
    if [ -f "$T/nvl72.whale.conf" ]; then
        (cd "$T" && "$P" -m gpt-39.1b -b 1536 --conf nvl72.whale.conf --nodelist 'gb[001-036]') > "$TMP/out" 2>&1
        has "$TMP/out" "NVLink domain 72" "NVL72 domain from topology.conf"
    fi
    expect 2 "conf without nodelist" -- "$P" -m gpt-tiny -b 8 --conf "$T/fattree.whale.conf"
else
    echo "skipping --conf checks (no conf module in this build)"
fi
[ $fails -eq 0 ] && echo "all whale-plan checks passed"
exit $fails
