#!/bin/bash
# Checkpoint benchmark. Figures, with the competitor
# measured in the same run, rounds interleaved, load average beside each:
#   - training stall per checkpoint: async (snapshot copy, deferred snapshot)
#     vs a synchronous save of the same tensors      target: stall <= 5 % of sync
#   - persist bandwidth of the background save (hash, stage, write, fsync,
#     commit) vs `dd oflag=direct conv=fdatasync` of the same size into the
#     same directory                                   target: >= 80 % of dd
#     (dd through the page cache is printed too, for reference)
#   - whale-train (gpt-small, a checkpoint every step): the stall the run
#     reports (save + the optimizer's wait for a deferred snapshot) with
#     WHALE_CKPT_ASYNC=0, WHALE_CKPT_SNAPSHOT=copy and =deferred (the default)
#                                                      target: deferred <= 5 % of sync
#   - bytes written by an incremental save with half the layers frozen
#   - size and restore error per compression mode
# A target is judged only when the 1-minute load average stayed at or below
# the core count during its rounds; otherwise the summary says "not judged
# (load)". Median and best of the rounds are printed.
# usage: contrib/bench/ckpt-bench.sh [-b BUILD_DIR] [-d SCRATCH_DIR] [-m MB] [-r RUNS]
#            [-c COMPUTE_MS] [-s TRAIN_STEPS (0: skip whale-train)]
set -euo pipefail
build=build dir=${TMPDIR:-/tmp} mb=512 runs=5 compute_ms=400 tsteps=6
while getopts "b:d:m:r:c:s:h" o; do
    case $o in
    b) build=$OPTARG ;; d) dir=$OPTARG ;; m) mb=$OPTARG ;; r) runs=$OPTARG ;;
    c) compute_ms=$OPTARG ;; s) tsteps=$OPTARG ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
    esac
done
tool=$build/runtime/tools/ckpt/whale-ckpt
[ -x "$tool" ] || { echo "ckpt-bench: $tool not built (ninja -C $build)" >&2; exit 1; }
scratch=$(mktemp -d "$dir/whale-ckpt-bench-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cores=$(nproc)

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
best_max() { sort -g | tail -1; }
best_min() { sort -g | head -1; }
get() { sed -n "s/.*\b$1=\([0-9.e+-]*\).*/\1/p" | head -1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
rate() { echo "$1 $2 $3" | awk '{printf "%.1f", $1 * 8.388608 / ($3 - $2)}'; }

echo "# whale-ckpt benchmark: $mb MiB model, $runs interleaved rounds, scratch $scratch"
echo "# $cores cores, $(df -h --output=source,fstype "$scratch" | tail -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
dd_mbps=() ddd_mbps=() ours=() sync_s=() astall=() dstall=() loads_p=() loads_s=()
bytes=$("$tool" bench --dir "$scratch" --mb "$mb" --part none 2>/dev/null | get bytes)
count=$(( (bytes + 8388607) / 8388608 ))
# persist bandwidth vs dd: the same bytes, alternating, each after the same
# pause with dirty pages flushed (the disk and its host cache are shared)
for i in $(seq "$runs"); do
    l0=$(load1)
    sync; sleep 2
    # the raw device rate: O_DIRECT, no page cache
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" oflag=direct conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f "$scratch/dd.bin"
    ddd_mbps+=("$(rate "$count" "$t0" "$t1")")
    sync; sleep 2
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --part persist)
    ours+=("$(echo "$out" | get persist_MBps)")
    sync; sleep 2
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f "$scratch/dd.bin"
    dd_mbps+=("$(rate "$count" "$t0" "$t1")")
    l1=$(load1)
    loads_p+=("$l0" "$l1")
    echo "persist round $i: whale-ckpt ${ours[-1]} MB/s, dd oflag=direct ${ddd_mbps[-1]} MB/s, dd (page cache) ${dd_mbps[-1]} MB/s  [load $l0 -> $l1]"
done
# stall per checkpoint: sync save vs async (copy) vs async (deferred copy)
for i in $(seq "$runs"); do
    l0=$(load1)
    sync; sleep 1
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --compute-ms "$compute_ms" --part stall)
    sync_s+=("$(echo "$out" | get sync_s)")
    astall+=("$(echo "$out" | get async_stall_s)")
    dstall+=("$(echo "$out" | get deferred_stall_s)")
    l1=$(load1)
    loads_s+=("$l0" "$l1")
    echo "stall round $i: sync save ${sync_s[-1]} s, async stall ${astall[-1]} s, deferred stall ${dstall[-1]} s  [load $l0 -> $l1]"
done
# whale-train: the stall it reports over a run with a save every step
tr_sync=() tr_copy=() tr_def=() loads_t=()
train=$build/runtime/tools/train/whale-train
if [ "$tsteps" -gt 0 ]; then
    head -c 3000000 /dev/urandom | base64 > "$scratch/corpus.txt"
    train_stall() { # MODE -> seconds of checkpoint stall in the summary
        local env=(WHALE_CKPT_SNAPSHOT="$1")
        [ "$1" = sync ] && env=(WHALE_CKPT_ASYNC=0)
        rm -rf "$scratch/ck"
        env "${env[@]}" "$train" --model gpt-small --data "$scratch/corpus.txt" --steps "$tsteps" \
            --batch 4 --seq 64 --threads "$cores" --no-progress --whale-ckpt-dir "$scratch/ck" \
            --whale-ckpt-every 1 --metrics "$scratch/m.jsonl" 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{\"summary\""): print("%.4f" % json.loads(l)["summary"]["checkpoints"]["stall_s"])'
    }
    for i in $(seq "$runs"); do
        l0=$(load1)
        tr_sync+=("$(train_stall sync)")
        tr_copy+=("$(train_stall copy)")
        tr_def+=("$(train_stall deferred)")
        l1=$(load1)
        loads_t+=("$l0" "$l1")
        echo "whale-train round $i ($tsteps saves of gpt-small): stall sync ${tr_sync[-1]} s, copy ${tr_copy[-1]} s, deferred ${tr_def[-1]} s  [load $l0 -> $l1]"
    done
    rm -rf "$scratch/ck"
fi
m_sync=$(printf '%s\n' "${sync_s[@]}" | median)
m_as=$(printf '%s\n' "${astall[@]}" | median); b_as=$(printf '%s\n' "${astall[@]}" | best_min)
m_ds=$(printf '%s\n' "${dstall[@]}" | median); b_ds=$(printf '%s\n' "${dstall[@]}" | best_min)
m_ours=$(printf '%s\n' "${ours[@]}" | median); b_ours=$(printf '%s\n' "${ours[@]}" | best_max)
m_dd=$(printf '%s\n' "${dd_mbps[@]}" | median)
m_ddd=$(printf '%s\n' "${ddd_mbps[@]}" | median); b_ddd=$(printf '%s\n' "${ddd_mbps[@]}" | best_max)
maxload_p=$(printf '%s\n' "${loads_p[@]}" | best_max)
maxload_s=$(printf '%s\n' "${loads_s[@]}" | best_max)
echo
echo "== medians (best) of $runs rounds"
awk -v s="$m_sync" -v a="$m_as" -v ba="$b_as" -v d="$m_ds" -v bd="$b_ds" -v o="$m_ours" \
    -v bo="$b_ours" -v dd="$m_dd" -v ddd="$m_ddd" -v bddd="$b_ddd" -v lp="$maxload_p" \
    -v ls="$maxload_s" -v cores="$cores" '
function verdict(ok, load) {
  if (load > cores) return sprintf("NOT JUDGED (load up to %.1f on %d cores)", load, cores)
  return ok ? "MET" : "NOT MET"
}
BEGIN {
  printf "synchronous save              %8.3f s\n", s
  printf "async stall, snapshot copy    %8.4f s  = %5.1f %% of sync (best %.1f %%)\n", a, 100*a/s, 100*ba/s
  printf "async stall, deferred copy    %8.4f s  = %5.1f %% of sync (best %.1f %%)  target <= 5 %%: %s\n", d, 100*d/s, 100*bd/s, verdict(100*d/s <= 5, ls)
  printf "persist bandwidth             %8.1f MB/s = %5.1f %% of dd oflag=direct %.1f MB/s (best %.1f of %.1f)  target >= 80 %%: %s\n", o, 100*o/ddd, ddd, bo, bddd, verdict(o >= 0.8*ddd, lp)
  printf "                                          (dd through the page cache: %.1f MB/s)\n", dd
}'
if [ "$tsteps" -gt 0 ]; then
    awk -v s="$(printf '%s\n' "${tr_sync[@]}" | median)" -v c="$(printf '%s\n' "${tr_copy[@]}" | median)" \
        -v d="$(printf '%s\n' "${tr_def[@]}" | median)" -v bd="$(printf '%s\n' "${tr_def[@]}" | best_min)" \
        -v lt="$(printf '%s\n' "${loads_t[@]}" | best_max)" -v cores="$cores" -v n="$tsteps" 'BEGIN {
  v = lt > cores ? sprintf("NOT JUDGED (load up to %.1f on %d cores)", lt, cores) : (d <= 0.05 * s ? "MET" : "NOT MET")
  printf "whale-train, %d saves: stall sync %.3f s, copy %.3f s (%.1f %%), deferred %.4f s = %.1f %% of sync (best %.1f %%)  target <= 5 %%: %s\n", n, s, c, 100*c/s, d, 100*d/s, 100*bd/s, v
}'
fi
echo
echo "== incremental and compression (one run each)"
"$tool" bench --dir "$scratch" --mb "$mb" --part incremental | grep -v RESULT
"$tool" bench --dir "$scratch" --mb "$mb" --part compression | grep -v RESULT
