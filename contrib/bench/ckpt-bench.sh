#!/bin/bash
# Checkpoint benchmark (issue: checkpoints). Figures, with the competitor
# measured in the same run:
#   - training stall per checkpoint: async (snapshot copy / deferred snapshot)
#     vs a synchronous save of the same tensors      target: async <= 5 % of sync
#   - persist bandwidth vs `dd ... conv=fdatasync` of the same size into the
#     same directory, interleaved run by run           target: >= 80 % of dd
#   - bytes written by an incremental save with half the layers frozen
#   - size and restore error per compression mode
# usage: contrib/bench/ckpt-bench.sh [-b BUILD_DIR] [-d SCRATCH_DIR] [-m MB] [-r RUNS]
set -euo pipefail
build=build dir=${TMPDIR:-/tmp} mb=512 runs=5 compute_ms=400
while getopts "b:d:m:r:c:h" o; do
    case $o in
    b) build=$OPTARG ;; d) dir=$OPTARG ;; m) mb=$OPTARG ;; r) runs=$OPTARG ;;
    c) compute_ms=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
tool=$build/runtime/tools/ckpt/whale-ckpt
[ -x "$tool" ] || { echo "ckpt-bench: $tool not built (ninja -C $build)" >&2; exit 1; }
scratch=$(mktemp -d "$dir/whale-ckpt-bench-XXXXXX")
trap 'rm -rf "$scratch"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
get() { sed -n "s/.*\b$1=\([0-9.e+-]*\).*/\1/p" | head -1; }

echo "# whale-ckpt benchmark: $mb MiB model, $runs interleaved runs, scratch $scratch"
echo "# $(nproc) cores, $(df -h --output=source,fstype "$scratch" | tail -1)"
dd_mbps=() ddd_mbps=() ours=() sync_s=() astall=() dstall=()
bytes=$("$tool" bench --dir "$scratch" --mb "$mb" --part none 2>/dev/null | get bytes)
count=$(( (bytes + 8388607) / 8388608 ))
# persist bandwidth vs dd: the same bytes, alternating, each after the same
# pause with the page cache flushed (the disk and its host cache are shared)
for i in $(seq "$runs"); do
    sync; sleep 3
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f "$scratch/dd.bin"
    dd_mbps+=("$(echo "$count $t0 $t1" | awk '{printf "%.1f", $1 * 8.388608 / ($3 - $2)}')")
    sync; sleep 3
    # the raw device rate: O_DIRECT, no page cache
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" oflag=direct conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f "$scratch/dd.bin"
    ddd_mbps+=("$(echo "$count $t0 $t1" | awk '{printf "%.1f", $1 * 8.388608 / ($3 - $2)}')")
    sync; sleep 3
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --part persist)
    ours+=("$(echo "$out" | get persist_MBps)")
    echo "persist run $i: whale-ckpt ${ours[-1]} MB/s, dd conv=fdatasync ${dd_mbps[-1]} MB/s, dd oflag=direct ${ddd_mbps[-1]} MB/s"
done
# stall per checkpoint: sync save vs async (copy) vs async (deferred copy)
for i in $(seq "$runs"); do
    sync; sleep 1
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --compute-ms "$compute_ms" --part stall)
    sync_s+=("$(echo "$out" | get sync_s)")
    astall+=("$(echo "$out" | get async_stall_s)")
    dstall+=("$(echo "$out" | get deferred_stall_s)")
    echo "stall run $i: sync save ${sync_s[-1]} s, async stall ${astall[-1]} s, deferred stall ${dstall[-1]} s"
done
m_sync=$(printf '%s\n' "${sync_s[@]}" | median)
m_as=$(printf '%s\n' "${astall[@]}" | median)
m_ds=$(printf '%s\n' "${dstall[@]}" | median)
m_ours=$(printf '%s\n' "${ours[@]}" | median)
m_dd=$(printf '%s\n' "${dd_mbps[@]}" | median)
m_ddd=$(printf '%s\n' "${ddd_mbps[@]}" | median)
echo
echo "== medians of $runs runs"
awk -v s="$m_sync" -v a="$m_as" -v d="$m_ds" -v o="$m_ours" -v dd="$m_dd" -v ddd="$m_ddd" 'BEGIN {
  printf "synchronous save              %8.3f s\n", s
  printf "async stall, snapshot copy    %8.4f s  = %5.1f %% of sync   (target <= 5 %%)\n", a, 100*a/s
  printf "async stall, deferred copy    %8.4f s  = %5.1f %% of sync   (target <= 5 %%)\n", d, 100*d/s
  printf "persist bandwidth             %8.1f MB/s = %5.1f %% of dd conv=fdatasync %.1f MB/s (target >= 80 %%)\n", o, 100*o/dd, dd
  printf "                                              = %5.1f %% of dd oflag=direct  %.1f MB/s\n", 100*o/ddd, ddd
}'
echo
echo "== incremental and compression (one run each)"
"$tool" bench --dir "$scratch" --mb "$mb" --part incremental | grep -v RESULT
"$tool" bench --dir "$scratch" --mb "$mb" --part compression | grep -v RESULT
