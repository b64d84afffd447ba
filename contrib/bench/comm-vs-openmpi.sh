#!/usr/bin/env bash
# Whale allreduce (whale-bench comm under whale-run) beside Debian's Open MPI
# MPI_Allreduce (mpirun, shared memory) over the same sizes and ranks, in the
# same session, alternating R rounds; prints the median of each side and the
# ratio. Also a memcpy reference (the copy bound the collectives chase).
#
#   contrib/bench/comm-vs-openmpi.sh [-b BUILD_DIR] [-r ROUNDS] [-n "2 4"] [-s "8 2097152 67108864"] [-m local|srun]
#
# -m srun: one rank per node of the local cluster (SLURM_CONF set), both
# sides over TCP (UCX_TLS=tcp,self; Open MPI btl tcp on eth0), launched by srun.
#
# Needs openmpi-bin + libopenmpi-dev (contrib/install-deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${WHALE_BUILD_DIR:-$here/../../build}
rounds=5
ranks="2 4"
sizes="8 2097152 67108864"
iters=20
mode=local
while getopts "b:r:n:s:i:m:h" o; do
  case $o in
    b) build=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    i) iters=$OPTARG ;;
    m) mode=$OPTARG ;;
    h) sed -n '2,12p' "$0"; exit 0 ;;
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

if [ "$mode" = srun ] && [ -z "${SLURM_CONF:-}" ]; then
  echo "-m srun needs a cluster (eval \"\$(contrib/minicluster/whale-minicluster env)\")" >&2; exit 1
fi
whale_side() { # ranks size
  if [ "$mode" = srun ]; then
    UCX_TLS=tcp,self timeout 600 srun -N "$1" -n "$1" "$bench" comm -b "$2" -e "$2" -n "$iters" -w 5 -c 0
  else
    "$run" -n "$1" "$bench" comm -b "$2" -e "$2" -n "$iters" -w 5 -c 0
  fi | sed 's/^0: //' | awk '$1 ~ /^[0-9]+$/ {print $1, $6, $8, $NF}'
}
mpi_side() { # ranks
  if [ "$mode" = srun ]; then
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 \
      timeout 600 srun --mpi=pmix -N "$1" -n "$1" "$tmp/mpi_allreduce" "$iters" 5 $sizes
  else
    over=""; [ "$1" -gt "$(nproc)" ] && over=--oversubscribe
    mpirun -np "$1" $over "$tmp/mpi_allreduce" "$iters" 5 $sizes
  fi
}
for n in $ranks; do
  : > "$tmp/w$n"; : > "$tmp/m$n"
  for ((r = 0; r < rounds; r++)); do
    # one size per whale-bench run, Open MPI right after: same conditions
    for s in $sizes; do whale_side "$n" "$s" >> "$tmp/w$n"; done
    mpi_side "$n" >> "$tmp/m$n"
  done
done

printf '# allreduce float32 sum, %s, median of %d rounds, %d iterations each (host %s, %s cores)\n' \
  "$([ "$mode" = srun ] && echo "srun, one rank per node, TCP" || echo "one node, shared memory")" \
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
