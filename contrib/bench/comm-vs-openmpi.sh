#!/usr/bin/env bash
# Whale allreduce (whale-bench comm under whale-run) beside Debian's Open MPI
# MPI_Allreduce (mpirun, shared memory) over the same sizes and ranks, in the
# same session, alternating R rounds; and beside the copy bound: a ring of
# processes copying through shared memory (shm_copy_ring.c), measured in the
# same rounds. Prints median and best of each side, the ratios, both sides'
# peak RSS per rank (MiB, largest rank; Open MPI's is its peak up to that
# size, its sizes run in one process), the load average, and one summary
# line per target:
#   64 MiB: busbw >= 3x Open MPI and >= 50 % of the copy ring; 2 MiB: >= 1x;
#   8 B: time <= 2x Open MPI's; -m srun (TCP across nodes): >= 1.2x.
# A target is "not judged" when the 1-minute load average went above -L
# during the run (default: 2 x cores): the figures are printed anyway.
#
#   contrib/bench/comm-vs-openmpi.sh [-b BUILD_DIR] [-B BASE_BUILD] [-E "VAR=VAL ..."] [-r ROUNDS]
#                                    [-n "2 4"] [-s "8 2097152 67108864"] [-i ITERS] [-L LOAD]
#                                    [-m local|srun] [-P]
#
# -B: also time another build (e.g. main's) in the same rounds ("base" columns).
# -E: the base side runs with these variables (without -B: this build again),
#     e.g. -E WHALE_SHM_CMA=0 times the slot path beside the single-copy one.
# -P: run everything in a session of its own whose autogroup has nice -20
#     (root only). On a machine shared with other sessions the kernel splits
#     the CPU per session first, so a busy neighbour starves both sides
#     alike; -P gives the whole measurement (both sides, the copy ring) the
#     cores, close to a quiet machine. The load average is still recorded.
# -m srun: one rank per node of the local cluster (SLURM_CONF set), both
# sides over TCP (UCX_TLS=tcp,self; Open MPI btl tcp on eth0), launched by srun.
#
# Needs openmpi-bin + libopenmpi-dev (contrib/install-deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${WHALE_BUILD_DIR:-$here/../../build}
base=""
rounds=5
ranks="2 4"
sizes="8 2097152 67108864"
iters=20
mode=local
maxload=$(( 2 * $(nproc) ))
prio=0
base_env=""
while getopts "b:B:E:r:n:s:i:m:L:Ph" o; do
  case $o in
    b) build=$OPTARG ;;
    B) base=$OPTARG ;;
    E) base_env=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) sizes=$OPTARG ;;
    i) iters=$OPTARG ;;
    m) mode=$OPTARG ;;
    L) maxload=$OPTARG ;;
    P) prio=1 ;;
    h) sed -n '2,30p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
case $mode in local|srun) ;; *) echo "-m $mode: local or srun" >&2; exit 2 ;; esac
if [ "$prio" = 1 ] && [ -z "${WHALE_BENCH_PRIO:-}" ]; then
  # a new session (own autogroup), raised, then this script again inside it
  export WHALE_BENCH_PRIO=1
  exec setsid -w bash -c 'echo -20 > /proc/self/autogroup || { echo "-P: cannot raise the session (root?)" >&2; exit 1; }; exec "$@"' \
    bash "$0" "$@"
fi
prio_note=""
[ -n "$base_env" ] && [ -z "$base" ] && base=$build
[ -n "${WHALE_BENCH_PRIO:-}" ] && prio_note=", -P: own session at nice -20"
run=$build/runtime/tools/run/whale-run
bench=$build/runtime/tools/bench/whale-bench
for t in "$run" "$bench"; do [ -x "$t" ] || { echo "missing $t (build first, or -b BUILD_DIR)" >&2; exit 1; }; done
if [ -n "$base" ]; then
  [ -x "$base/runtime/tools/bench/whale-bench" ] || { echo "-B $base: no whale-bench there" >&2; exit 1; }
fi
command -v mpicc >/dev/null || { echo "mpicc missing: run contrib/install-deps.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c"
cc -O2 -o "$tmp/shm_copy_ring" "$here/shm_copy_ring.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
best_max() { sort -g | tail -1; }
best_min() { sort -g | head -1; }
load1() { cut -d' ' -f1 /proc/loadavg; }

if [ "$mode" = srun ] && [ -z "${SLURM_CONF:-}" ]; then
  echo "-m srun needs a cluster (eval \"\$(contrib/minicluster/whale-minicluster env)\")" >&2; exit 1
fi
whale_side() { # bench ranks size
  if [ "$mode" = srun ]; then
    UCX_TLS=tcp,self timeout 600 srun -N "$2" -n "$2" "$1" comm -b "$3" -e "$3" -n "$iters" -w 5 -c 0
  else
    timeout 600 "$run" -n "$2" "$1" comm -b "$3" -e "$3" -n "$iters" -w 5 -c 0
  fi | sed 's/^0: //' | awk '$1 ~ /^[0-9]+$/ {row = $1 " " $6 " " $8 " " $NF}
                             /Peak RSS per rank/ {rss = $7}
                             END {if (row != "") print row, (rss == "" ? "nan" : rss)}'
}
mpi_side() { # ranks
  if [ "$mode" = srun ]; then
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=eth0 \
      timeout 600 srun --mpi=pmix -N "$1" -n "$1" "$tmp/mpi_allreduce" "$iters" 5 $sizes
  else
    over=""; [ "$1" -gt "$(nproc)" ] && over=--oversubscribe
    timeout 600 mpirun -np "$1" $over "$tmp/mpi_allreduce" "$iters" 5 $sizes
  fi
}
big=$(for s in $sizes; do echo "$s"; done | sort -n | tail -1)
: > "$tmp/load"
for n in $ranks; do : > "$tmp/w$n"; : > "$tmp/b$n"; : > "$tmp/m$n"; : > "$tmp/c$n"; done
for ((r = 0; r < rounds; r++)); do
  for n in $ranks; do
    load1 >> "$tmp/load"
    # one size per whale-bench run, Open MPI and the copy ring right after:
    # same conditions, rounds interleaved
    for s in $sizes; do
      whale_side "$bench" "$n" "$s" >> "$tmp/w$n" || echo "whale-bench failed: $n ranks, $s bytes" >&2
      [ -z "$base" ] || ( for v in $base_env; do export "${v?}"; done
                          whale_side "$base/runtime/tools/bench/whale-bench" "$n" "$s" ) >> "$tmp/b$n" || true
    done
    mpi_side "$n" >> "$tmp/m$n" || echo "Open MPI failed for $n ranks (see above)" >&2
    if [ "$mode" = local ] && [ "$big" -ge 1048576 ]; then
      "$tmp/shm_copy_ring" "$n" "$big" 3 | awk '{print $3, $4}' >> "$tmp/c$n" || true
    fi
    load1 >> "$tmp/load"
  done
done
lmin=$(best_min < "$tmp/load"); lmax=$(best_max < "$tmp/load")

col() { awk -v s="$1" -v c="$2" '$1 == s {print $c}' "$3" 2>/dev/null; }
printf '# allreduce float32 sum, %s, %d rounds of %d iterations (host %s, %s cores, load %s-%s%s)\n' \
  "$([ "$mode" = srun ] && echo "srun, one rank per node, TCP" || echo "one node, shared memory")" \
  "$rounds" "$iters" "$(hostname)" "$(nproc)" "$lmin" "$lmax" "$prio_note"
[ -z "$base" ] || echo "# base columns: $base${base_env:+ with $base_env}"
printf '# %5s %11s | %9s %9s %8s %6s | %9s %9s %8s | %8s %8s %8s | %8s | %9s %9s' ranks bytes \
  whale_us best_us busbw algo ompi_us best_us busbw bw_ratio best lat_ratio copyring whale_MiB ompi_MiB
[ -z "$base" ] || printf ' | %8s %7s' base_bw vs_base
printf '\n'
: > "$tmp/summary"
for n in $ranks; do
  cr=$(awk -v s="$big" '$1 == s {print $2}' "$tmp/c$n" 2>/dev/null | median)
  for s in $sizes; do
    wt=$(col "$s" 2 "$tmp/w$n" | median); wtb=$(col "$s" 2 "$tmp/w$n" | best_min)
    wb=$(col "$s" 3 "$tmp/w$n" | median); wbb=$(col "$s" 3 "$tmp/w$n" | best_max)
    wa=$(col "$s" 4 "$tmp/w$n" | sort | uniq -c | sort -rn | awk 'NR==1{print $2}')
    mt=$(col "$s" 2 "$tmp/m$n" | median); mtb=$(col "$s" 2 "$tmp/m$n" | best_min)
    mb=$(col "$s" 3 "$tmp/m$n" | median); mbb=$(col "$s" 3 "$tmp/m$n" | best_max)
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print (b > 0 && a == a ? a / b : 0)}'; }
    # bandwidth ratios from the times (same bytes on both sides): the busbw
    # columns are rounded to 0.01 GB/s, which reads 0.00 at the small sizes
    bwr=$(ratio "$mt" "$wt"); bwrb=$(ratio "$mtb" "$wtb"); latr=$(ratio "$wt" "$mt")
    # peak RSS per rank, the largest over the rounds (MiB)
    wr=$(col "$s" 5 "$tmp/w$n" | grep -v nan | best_max); mr=$(col "$s" 4 "$tmp/m$n" | best_max)
    printf '  %5d %11d | %9.2f %9.2f %8.2f %6s | %9.2f %9.2f %8.2f | %8.2f %8.2f %8.2f | %8s | %9s %9s' \
      "$n" "$s" "$wt" "$wtb" "$wb" "${wa:-?}" "$mt" "$mtb" "$mb" "$bwr" "$bwrb" "$latr" \
      "$([ "$s" = "$big" ] && [ -n "$cr" ] && [ "$cr" != nan ] && printf '%.2f' "$cr" || echo -)" \
      "${wr:--}" "${mr:--}"
    if [ -n "$base" ]; then
      bb=$(col "$s" 3 "$tmp/b$n" | median)
      printf ' | %8.2f %7.2f' "$bb" "$(ratio "$wb" "$bb")"
    fi
    printf '\n'
    # the targets listed at the top
    if [ "$mode" = srun ]; then
      [ "$s" = "$big" ] && echo "tcp $n $s bw>=1.2x_ompi $bwr 1.2 ge" >> "$tmp/summary"
    elif [ "$s" -ge 67108864 ]; then
      echo "shm $n $s bw>=3x_ompi $bwr 3 ge" >> "$tmp/summary"
      [ -n "$cr" ] && [ "$cr" != nan ] &&
        echo "shm $n $s bw>=50%_copyring $(ratio "$wb" "$cr") 0.5 ge" >> "$tmp/summary"
    elif [ "$s" -ge 1048576 ]; then
      echo "shm $n $s bw>=1x_ompi $bwr 1 ge" >> "$tmp/summary"
    elif [ "$s" -le 64 ]; then
      echo "shm $n $s time<=2x_ompi $latr 2 le" >> "$tmp/summary"
    fi
  done
done
echo "# summary (medians; load average ${lmin}-${lmax}, judged up to $maxload)"
while read -r kind n s what got want cmp; do
  verdict=$(awk -v g="$got" -v w="$want" -v c="$cmp" 'BEGIN {ok = c == "ge" ? g >= w : (g > 0 && g <= w); print ok ? "met" : "not met"}')
  if awk -v l="$lmax" -v m="$maxload" 'BEGIN {exit !(l > m)}'; then
    verdict="not judged: load $lmax ($verdict at this load)"
  fi
  printf 'target %-4s %d ranks %9d B  %-18s ratio %6.2f (want %s %s): %s\n' "$kind" "$n" "$s" "$what" "$got" \
    "$([ "$cmp" = ge ] && echo '>=' || echo '<=')" "$want" "$verdict"
done < "$tmp/summary"
