#!/bin/bash
# Redundancy overhead per step: the in-memory copy of every
# rank's unique state, refreshed every K steps by puts that overlap the next
# step, against the same run without copies. Runs under whale-run (one task
# per emulated node, so copies cross "nodes" over UCX), rounds interleaved
# (no-copy, copy, no-copy, copy, ...) so that the load of this shared
# machine hits both alike; the load average is printed with every round.
#
# Per run: the median and the best of the per-iteration time over the steps
# after the first: step_s for the run without copies, step_s + redundancy_s
# (serialising the local image + waiting for the previous refresh) for the
# run with them. Overhead = with / without - 1, from the medians and from
# the bests.                                       target: <= 5 % of step time
#
# usage: contrib/bench/elastic-overhead.sh [-b BUILD] [-s STEPS] [-r ROUNDS]
#            [-m "MODELS"] [-l "LAYOUTS"] [-k K]
#   LAYOUTS: dp2z1 (DP 2, ZeRO 1: the copy is each rank's optimizer shard),
#            tp2 (TP 2, DP 1: the copy is the whole TP slice), pp2 (PP 2)
#   K: WHALE_REDUNDANCY_EVERY for the runs with copies (default 1; "auto":
#      the adaptive default)
set -euo pipefail
build=build steps=6 rounds=3 models="gpt-small gpt2-124m" layouts="dp2z1 tp2" every=1
while getopts "b:s:r:m:l:k:h" o; do
    case $o in
    b) build=$OPTARG ;; s) steps=$OPTARG ;; r) rounds=$OPTARG ;; m) models=$OPTARG ;;
    l) layouts=$OPTARG ;; k) every=$OPTARG ;;
    *) sed -n '2,21p' "$0"; exit 2 ;;
    esac
done
train=$build/runtime/tools/train/whale-train
wrun=$build/runtime/tools/run/whale-run
[ -x "$train" ] && [ -x "$wrun" ] || { echo "elastic-overhead: build first (ninja -C $build)" >&2; exit 1; }
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/whale-overhead-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat "$src"/runtime/src/*/*.c > "$tmp/corpus.txt"

shape() {
    case $1 in
    gpt-small) echo --model gpt-small --seq 128 --batch 8 ;;
    gpt2-124m) echo --model gpt2-124m --seq 64 --batch 2 ;;
    *) echo --model "$1" --seq 64 --batch 2 ;;
    esac
}
# layout L: whale-run's layout options | whale-train's
layout_run() {
    case $1 in
    dp2z1) echo "" ;;
    tp2) echo --tp 2 ;;
    pp2) echo --pp 2 ;;
    *) echo "elastic-overhead: unknown layout $1 (dp2z1, tp2, pp2)" >&2; exit 2 ;;
    esac
}
layout_train() { [ "$1" = dp2z1 ] && echo --zero 1 || true; }
# iters FILE WITH: "median best bytes copy_median" of the per-step time
iters() {
    python3 - "$1" "$2" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')][1:]
if not rows:
    print("nan nan 0 0"); sys.exit()
withc = sys.argv[2] == "1"
it = [r["step_s"] + (r.get("redundancy_s", 0.0) if withc else 0.0) for r in rows]
cp = [r.get("redundancy_s", 0.0) for r in rows]
by = max(r.get("redundancy_bytes", 0.0) for r in rows)
print("%.6f %.6f %.0f %.6f" % (st.median(it), min(it), by, st.median(cp)))
PY
}
run1() { # run1 MODEL LAYOUT WITH OUT
    local envs=()
    [ "$3" = 1 ] && envs=(WHALE_REDUNDANCY_EVERY="$every")
    env "${envs[@]}" "$wrun" -n 2 --nodes 2 $(layout_run "$2") --timeout 3000 "$train" \
        $(shape "$1") $(layout_train "$2") \
        --steps "$steps" --threads 1 --no-progress --data "$tmp/corpus.txt" \
        --metrics "$4.jsonl" > "$4.log" 2>&1 || { echo "elastic-overhead: run failed, see below" >&2; tail -5 "$4.log" >&2; exit 1; }
}

echo "# whale redundancy overhead: $steps steps per run, $rounds interleaved rounds, K=$every, $(nproc) cores"
echo "# $(date -u +%FT%TZ) $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
for m in $models; do
    for l in $layouts; do
        b_med=() b_best=() w_med=() w_best=() c_med=() bytes=0
        for i in $(seq "$rounds"); do
            read -r l1 _ < /proc/loadavg
            run1 "$m" "$l" 0 "$tmp/base"
            read -r med best _ _ < <(iters "$tmp/base.jsonl" 0)
            b_med+=("$med"); b_best+=("$best")
            run1 "$m" "$l" 1 "$tmp/with"
            read -r med best by cm < <(iters "$tmp/with.jsonl" 1)
            w_med+=("$med"); w_best+=("$best"); c_med+=("$cm"); bytes=$by
            read -r l2 _ < /proc/loadavg
            grep -h "redundancy: every" "$tmp/with.log" | head -2 | sed 's/^/#   /' || true
            printf "#   round %d: load %s -> %s; no copy %.3f s (best %.3f), copy %.3f s (best %.3f), copy part %.4f s\n" \
                "$i" "$l1" "$l2" "${b_med[-1]}" "${b_best[-1]}" "${w_med[-1]}" "${w_best[-1]}" "${c_med[-1]}"
        done
        python3 - "$m" "$l" "$bytes" "${b_med[*]}" "${b_best[*]}" "${w_med[*]}" "${w_best[*]}" "${c_med[*]}" <<'PY'
import sys, statistics as st
m, l, by = sys.argv[1], sys.argv[2], float(sys.argv[3])
bm, bb, wm, wb, cm = ([float(x) for x in a.split()] for a in sys.argv[4:9])
B, W, C = st.median(bm), st.median(wm), st.median(cm)
Bb, Wb = min(bb), min(wb)
print("%-10s %-6s no-copy %.3f s (best %.3f)  copy %.3f s (best %.3f)  copy part %.4f s  "
      "%.1f MB/refresh  overhead %+.1f %% median, %+.1f %% best  [target <= 5 %%]"
      % (m, l, B, Bb, W, Wb, C, by / 1e6, 100 * (W / B - 1), 100 * (Wb / Bb - 1)))
PY
    done
done
