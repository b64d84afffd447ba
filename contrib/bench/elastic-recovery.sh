#!/bin/bash
# Elastic training benchmark. Figures, each from runs made here:
#   - redundancy overhead per step: the per-step snapshot + refresh of the
#     in-memory copy (redundancy_s in the metrics) against the step time,
#     and the step time of the same run without copies (interleaved runs),
#     with the bytes per refresh; for the gpt-small and gpt2-124m shapes,
#     DP = 2 with ZeRO 1 (copies on the other replica) and with a spare node
#     holding them                                   target: <= 5 % of step time
#   - recovery: a rank killed (WHALE_FAULT) in a run with a spare: detect,
#     agree, transfer, rebuild, redo seconds and steps lost, from the
#     recovery record                                target: <= 10 s, <= 1 step
# usage: contrib/bench/elastic-recovery.sh [-b BUILD_DIR] [-s STEPS] [-r RUNS] [-m MODELS] [-R]
#   -R: the recovery measurement only
set -euo pipefail
build=build steps=8 runs=2 models="gpt-small gpt2-124m" only_recovery=0
while getopts "b:s:r:m:Rh" o; do
    case $o in
    b) build=$OPTARG ;; s) steps=$OPTARG ;; r) runs=$OPTARG ;; m) models=$OPTARG ;;
    R) only_recovery=1 ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
    esac
done
train=$build/runtime/tools/train/whale-train
wrun=$build/runtime/tools/run/whale-run
[ -x "$train" ] && [ -x "$wrun" ] || { echo "elastic-recovery: build first (ninja -C $build)" >&2; exit 1; }
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/whale-elastic-bench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat "$src"/runtime/src/*/*.c > "$tmp/corpus.txt"

# shape arguments: small enough for a 2-core machine, the model's real widths
shape() {
    case $1 in
    gpt-small) echo --model gpt-small --seq 128 --batch 8 ;;
    gpt2-124m) echo --model gpt2-124m --seq 64 --batch 2 ;;
    *) echo --model "$1" --seq 64 --batch 2 ;;
    esac
}
# stats FILE: median step_s (steps after the first), median redundancy_s, bytes
stats() {
    python3 - "$1" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')][1:]
step = st.median(r["step_s"] for r in rows)
red = st.median(r.get("redundancy_s", 0.0) for r in rows)
by = max(r.get("redundancy_bytes", 0.0) for r in rows)
print("%.6f %.6f %.0f" % (step, red, by))
PY
}

echo "# whale elastic benchmark: $steps steps per run, $runs interleaved runs, $(nproc) cores"
[ $only_recovery = 1 ] && models=""
printf "%-10s %-14s %10s %10s %12s %9s %12s\n" model copies step_s copy_s bytes/refresh copy/step "vs no-copy"
for m in $models; do
    for mode in buddy spare; do
        base=() with=() red=() bytes=0
        for i in $(seq "$runs"); do
            # no copies (the same layout) and with copies, interleaved
            "$wrun" -n 2 --nodes 2 --timeout 3000 "$train" $(shape "$m") --steps "$steps" \
                --threads 1 --zero 1 --no-progress --data "$tmp/corpus.txt" \
                --metrics "$tmp/base.jsonl" > "$tmp/base.log" 2>&1
            read -r s _ _ < <(stats "$tmp/base.jsonl")
            base+=("$s")
            if [ $mode = buddy ]; then
                WHALE_REDUNDANCY_EVERY=1 "$wrun" -n 2 --nodes 2 --timeout 3000 "$train" \
                    $(shape "$m") --steps "$steps" --threads 1 --zero 1 --no-progress \
                    --data "$tmp/corpus.txt" --metrics "$tmp/red.jsonl" > "$tmp/red.log" 2>&1
            else
                "$wrun" -n 3 --nodes 3 --spares 1 --timeout 3000 "$train" $(shape "$m") \
                    --steps "$steps" --threads 1 --zero 1 --no-progress \
                    --data "$tmp/corpus.txt" --metrics "$tmp/red.jsonl" > "$tmp/red.log" 2>&1
            fi
            read -r s r b < <(stats "$tmp/red.jsonl")
            with+=("$s"); red+=("$r"); bytes=$b
        done
        python3 - "$m" "$mode" "$bytes" "${base[*]}" "${with[*]}" "${red[*]}" <<'PY'
import sys, statistics as st
m, mode, by = sys.argv[1], sys.argv[2], float(sys.argv[3])
base, withc, red = ([float(x) for x in a.split()] for a in sys.argv[4:7])
b, w, r = st.median(base), st.median(withc), st.median(red)
print("%-10s %-14s %10.4f %10.4f %12.0f %8.1f%% %+11.1f%%" % (m, mode, w, r, by, 100 * r / w, 100 * (w - b) / b))
PY
    done
done
echo "# copy/step: snapshot + refresh seconds per step over the step time of the same run;"
echo "# vs no-copy: step time against the same layout without copies (noisy on a shared machine)"

# ---- recovery split ------------------------------------------------------------
echo
echo "# recovery: kill -9 of rank 1 in step 5 (phase collective), DP = 2 ZeRO 1 + 1 spare, gpt-small"
set +e
WHALE_FAULT=kill:rank=1:step=5:phase=collective "$wrun" -n 3 --nodes 3 --spares 1 --keep-going \
    --timeout 600 \
    "$train" $(shape gpt-small) --steps "$steps" --threads 1 --zero 1 --no-progress \
    --data "$tmp/corpus.txt" --metrics "$tmp/rec.jsonl" > "$tmp/rec.log" 2>&1
rc=$?
set -e
if ! grep -q '"event":"recovery"' "$tmp/rec.jsonl" 2>/dev/null; then
    echo "recovery: FAILED (whale-run exit $rc); last lines:"; tail -5 "$tmp/rec.log"
else
    python3 - "$tmp/rec.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if '"event":"recovery"' in l:
        e = json.loads(l)
        print("kind %s how %s source %s: detect %.2f s agree %.2f s transfer %.2f s rebuild %.2f s "
              "redo %.2f s = %.2f s; steps lost %d" % (e["kind"], e["how"], e["source"], e["detect_s"],
              e["agree_s"], e["transfer_s"], e["rebuild_s"], e["redo_s"], e["total_s"], e["steps_lost"]))
PY
fi
