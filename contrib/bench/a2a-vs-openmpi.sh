#!/usr/bin/env bash
# Whale all-to-all (whale-bench comm alltoall under whale-run) beside
# Debian's Open MPI MPI_Alltoall (mpirun, shared memory: btl vader) over the
# same sizes and ranks, in the same session, rounds alternated (each round:
# every size on Whale, then every size on Open MPI). Sizes are one rank's
# send buffer (size/p to each peer), uint8 elements so that every size
# divides; busbw = algbw x (p-1)/p as nccl-tests counts it. Prints median
# and best of each side, the ratios, the load average, and the targets:
# >= 1x Open MPI at every size, >= 2x at 64 MiB. A target is "not judged"
# when the 1-minute load average went above -L during the run (default:
# 2 x cores); the figures are printed anyway.
#
#   contrib/bench/a2a-vs-openmpi.sh [-b BUILD_DIR] [-r ROUNDS] [-n "2 4"]
#                                   [-s "65536 ... 67108864"] [-i ITERS] [-L LOAD] [-E "VAR=VAL ..."] [-W]
#
# -E: run the Whale side with these variables (e.g. WHALE_COLL_ALGO=alltoall=ring
#     times the pairwise exchange over UCX instead of the shared segment).
# -W: the Whale side allocates its buffers with whale_shm_alloc (whale-bench -W):
#     the senders write into the receivers' buffers with one ordinary copy
#     instead of the receivers reading with process_vm_readv; the Open MPI
#     side keeps malloc'ed buffers (its shared-memory transport reads them
#     with the same system call either way).
# Needs openmpi-bin + libopenmpi-dev (contrib/install-deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${WHALE_BUILD_DIR:-$here/../../build}
rounds=3
ranks="2 4"
sizes="65536 262144 1048576 4194304 16777216 67108864"
iters=10
maxload=$(( 2 * $(nproc) ))
wenv=""
wflag=""
while getopts "b:r:n:s:i:L:E:Wh" o; do
  case $o in
    b) build=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    i) iters=$OPTARG ;;
    L) maxload=$OPTARG ;;
    E) wenv=$OPTARG ;;
    W) wflag=-W ;;
    h) sed -n '2,24p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
run=$build/runtime/tools/run/whale-run
bench=$build/runtime/tools/bench/whale-bench
for t in "$run" "$bench"; do [ -x "$t" ] || { echo "missing $t (build first, or -b BUILD_DIR)" >&2; exit 1; }; done
command -v mpicc >/dev/null || { echo "mpicc missing: run contrib/install-deps.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_alltoall" "$here/mpi_alltoall.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
best_max() { sort -g | tail -1; }
best_min() { sort -g | head -1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print (b > 0 && a == a ? a / b : 0)}'; }

whale_side() { # ranks size
  ( for v in $wenv; do export "${v?}"; done
    timeout 600 "$run" -n "$1" "$bench" comm alltoall $wflag -d uint8 -b "$2" -e "$2" -n "$iters" -w 3 -c 0 ) |
    sed 's/^0: //' | awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8, $NF}'
}
mpi_side() { # ranks
  over=""; [ "$1" -gt "$(nproc)" ] && over=--oversubscribe
  timeout 600 mpirun -np "$1" $over "$tmp/mpi_alltoall" "$iters" 3 $sizes
}
: > "$tmp/load"
for n in $ranks; do : > "$tmp/w$n"; : > "$tmp/m$n"; done
for ((r = 0; r < rounds; r++)); do
  for n in $ranks; do
    load1 >> "$tmp/load"
    for s in $sizes; do
      whale_side "$n" "$s" >> "$tmp/w$n" || echo "whale-bench failed: $n ranks, $s bytes" >&2
    done
    mpi_side "$n" >> "$tmp/m$n" || echo "Open MPI failed for $n ranks (see above)" >&2
    load1 >> "$tmp/load"
  done
done
lmin=$(best_min < "$tmp/load"); lmax=$(best_max < "$tmp/load")
col() { awk -v s="$1" -v c="$2" '$1 == s {print $c}' "$3" 2>/dev/null; }
printf '# alltoall uint8, one node, shared memory, %d rounds of %d iterations (host %s, %s cores, load %s-%s)%s\n' \
  "$rounds" "$iters" "$(hostname)" "$(nproc)" "$lmin" "$lmax" "${wenv:+, whale side with $wenv}${wflag:+, whale buffers from whale_shm_alloc}"
printf '# %5s %11s | %9s %8s %8s %8s | %9s %8s %8s | %8s %8s\n' ranks bytes \
  whale_us busbw best algo ompi_us busbw best bw_ratio best
big=$(for s in $sizes; do echo "$s"; done | sort -n | tail -1)
: > "$tmp/summary"
for n in $ranks; do
  for s in $sizes; do
    wt=$(col "$s" 2 "$tmp/w$n" | median)
    wb=$(col "$s" 3 "$tmp/w$n" | median); wbb=$(col "$s" 3 "$tmp/w$n" | best_max)
    wa=$(col "$s" 4 "$tmp/w$n" | sort | uniq -c | sort -rn | awk 'NR==1{print $2}')
    mt=$(col "$s" 2 "$tmp/m$n" | median)
    mb=$(col "$s" 3 "$tmp/m$n" | median); mbb=$(col "$s" 3 "$tmp/m$n" | best_max)
    bwr=$(ratio "$wb" "$mb"); bwrb=$(ratio "$wbb" "$mbb")
    printf '  %5d %11d | %9.2f %8.2f %8.2f %8s | %9.2f %8.2f %8.2f | %8.2f %8.2f\n' \
      "$n" "$s" "$wt" "$wb" "$wbb" "${wa:-?}" "$mt" "$mb" "$mbb" "$bwr" "$bwrb"
    echo "$n $s bw>=1x_ompi $bwr 1" >> "$tmp/summary"
    [ "$s" = "$big" ] && [ "$s" -ge 67108864 ] && echo "$n $s bw>=2x_ompi $bwr 2" >> "$tmp/summary"
  done
done
echo "# summary (medians; load average ${lmin}-${lmax}, judged up to $maxload)"
while read -r n s what got want; do
  verdict=$(awk -v g="$got" -v w="$want" 'BEGIN {print (g >= w ? "met" : "not met")}')
  if awk -v l="$lmax" -v m="$maxload" 'BEGIN {exit !(l > m)}'; then
    verdict="not judged: load $lmax ($verdict at this load)"
  fi
  printf 'target %d ranks %9d B  %-12s ratio %6.2f (want >= %s): %s\n' "$n" "$s" "$what" "$got" "$want" "$verdict"
done < "$tmp/summary"
