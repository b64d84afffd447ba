#!/usr/bin/env bash
# Whale allreduce (whale-bench comm under whale-run) beside Debian's Open MPI
# MPI_Allreduce (mpirun, shared memory) over the same sizes and ranks, in the
# same session, alternating R rounds; prints the median of each side and the
# ratio. Also a memcpy reference (the copy bound the collectives chase).
#
#   contrib/bench/comm-vs-openmpi.sh [-b BUILD_DIR] [-r ROUNDS] [-n "2 4"] [-s "8 2097152 67108864"]
#
# Needs openmpi-bin + libopenmpi-dev (contrib/install-deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${WHALE_BUILD_DIR:-$here/../../build}
rounds=5
ranks="2 4"
sizes="8 2097152 67108864"
iters=20
while getopts "b:r:n:s:i:h" o; do
  case $o in
    b) build=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    i) iters=$OPTARG ;;
    h) sed -n '2,9p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
run=$build/runtime/tools/run/whale-run
bench=$build/runtime/tools/bench/whale-bench
for t in "$run" "$bench"; do [ -x "$t" ] || { echo "missing $t (build first, or -b BUILD_DIR)" >&2; exit 1; }; done
command -v mpicc >/dev/null || { echo "mpicc missing: run contrib/install-deps.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

for n in $ranks; do
  : > "$tmp/w$n"; : > "$tmp/m$n"
  for ((r = 0; r < rounds; r++)); do
    for s in $sizes; do
      # whale-bench: one size per run so both sides see the same cache state
      "$run" -n "$n" "$bench" comm -b "$s" -e "$s" -n "$iters" -w 5 -c 0 \
        | awk '$1 == "0:" && $2 ~ /^[0-9]+$/ {print $2, $7, $9, $NF}' >> "$tmp/w$n"
    done
    over=""; [ "$n" -gt "$(nproc)" ] && over=--oversubscribe
    mpirun -np "$n" $over --bind-to none "$tmp/mpi_allreduce" "$iters" 5 $sizes >> "$tmp/m$n"
  done
done

printf '# allreduce float32 sum, median of %d rounds, %d iterations each (host %s, %s cores)\n' \
  "$rounds" "$iters" "$(hostname)" "$(nproc)"
printf '# %5s %11s | %10s %9s %6s | %10s %9s | %9s %9s\n' ranks bytes "whale_us" "busbw" algo "ompi_us" "busbw" "bw_ratio" "lat_ratio"
for n in $ranks; do
  for s in $sizes; do
    wt=$(awk -v s="$s" '$1 == s {print $2}' "$tmp/w$n" | median)
    wb=$(awk -v s="$s" '$1 == s {print $3}' "$tmp/w$n" | median)
    wa=$(awk -v s="$s" '$1 == s {print $4}' "$tmp/w$n" | sort | uniq -c | sort -rn | awk 'NR==1{print $2}')
    mt=$(awk -v s="$s" '$1 == s {print $2}' "$tmp/m$n" | median)
    mb=$(awk -v s="$s" '$1 == s {print $3}' "$tmp/m$n" | median)
    printf '  %5d %11d | %10.2f %9.2f %6s | %10.2f %9.2f | %9.2f %9.2f\n' "$n" "$s" "$wt" "$wb" "$wa" "$mt" "$mb" \
      "$(awk -v a="$wb" -v b="$mb" 'BEGIN {print (b > 0 ? a / b : 0)}')" \
      "$(awk -v a="$wt" -v b="$mt" 'BEGIN {print (b > 0 ? a / b : 0)}')"
  done
done
# copy bound reference: single-thread memcpy of 64 MiB
python3 - <<'PY'
import time
try:
    import numpy as np
    a = np.ones(16 << 20, dtype=np.float32); b = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
    print(f"# memcpy 64 MiB (1 thread): {a.nbytes / best / 1e9:.2f} GB/s")
except ImportError:
    pass
PY
