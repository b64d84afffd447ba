#!/bin/sh
# The exhaustive collectives sweep (too long for CI; run by hand and report):
# every collective x algorithm x dtype x reduction x sizes 0..16M elements
# (64 MiB of fp32) for groups of 1..8 ranks under whale-run, two-level
# layouts (--nodes 2 / 3), and, when a minicluster is up (SLURM_CONF set),
# srun across 3 namespace nodes over shared memory and over TCP.
#   usage: tests/unit/comm/sweep.sh [BUILD_DIR]
set -u
B=${1:-build}
RUN=$B/runtime/tools/run/whale-run
CHECK=$B/tests/unit/comm/comm_check
fails=0
one() {
  label=$1; shift
  start=$(date +%s)
  out=$("$@" 2>&1)
  rc=$?
  line=$(printf '%s\n' "$out" | grep 'comm_check:' | tail -1)
  printf '%-40s rc=%d %4ds  %s\n' "$label" "$rc" $(( $(date +%s) - start )) "$line"
  if [ "$rc" -ne 0 ]; then fails=$((fails + 1)); printf '%s\n' "$out" | grep -v '^\[' | head -20; fi
}
for n in 1 2 3 4 5 6 7 8; do
  one "whale-run -n $n" "$RUN" -n "$n" --timeout 3000 "$CHECK" --sizes full
done
for spec in "4 --nodes 2" "6 --nodes 2" "6 --nodes 3" "8 --nodes 2 --tp 2" "8 --nodes 4 --pp 2"; do
  # shellcheck disable=SC2086
  one "whale-run -n $spec" "$RUN" -n $spec --timeout 3000 "$CHECK" --sizes full
done
if [ -n "${SLURM_CONF:-}" ]; then
  one "srun -N3 -n6 --whale-tp=2 (shm)" timeout 3000 srun -N 3 -n 6 --whale-tp=2 "$CHECK" --sizes full
  one "srun -N3 -n5 (tcp)" env UCX_TLS=tcp,self timeout 3000 srun -N 3 -n 5 "$CHECK" --sizes full
  one "srun -N3 -n3 (tcp)" env UCX_TLS=tcp,self timeout 3000 srun -N 3 -n 3 "$CHECK" --sizes full
fi
echo "sweep: $fails failing configuration(s)"
[ "$fails" -eq 0 ]
