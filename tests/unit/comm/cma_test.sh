#!/bin/sh
# The single-copy path of the shared-memory collectives (comm/transport/shm_cma.c) and
# its fallback: members agree at setup whether every one of them can read
# the others' memory (process_vm_readv), and all take the slot path when one
# cannot. Checked on 3 ranks, every dtype and reduction (comm_check, exact
# results), with a 1-byte threshold and 4 KiB steps so that small vectors
# cross many steps:
#   0. a segment left by a dead creator is removed by the next one;
#   1. all may read: the debug log says the single-copy path is on;
#   2. task 1 refuses (WHALE_SHM_CMA=0 for it alone, as a member whose
#      reads the kernel refuses would): it is off on every member and the
#      results are still exact.
# usage: cma_test.sh WHALE_RUN COMM_CHECK
set -u
run=$1 prog=$2
args="--algos shm --colls allreduce,reduce_scatter,allgather --sizes 1,7,1001,65537"
export WHALE_LOG=debug WHALE_SHM_CMA=1 WHALE_SHM_CMA_MIN=1 WHALE_SHM_CMA_STEP=4096

# 0. segments left by creators killed before unlinking them (comm/transport/shm_seg.c):
# the next creator removes those whose creator is gone and that are a
# minute old; a fresh one (maybe another pid namespace's) stays
sh -c 'exit 0' & dead=$!; wait $dead
old=/dev/shm/whale-coll-$dead-1-g0-s999 new=/dev/shm/whale-coll-$dead-2-g0-s999
: > "$old"; : > "$new"; touch -d '-2 minutes' "$old"
trap 'rm -f "$old" "$new"' EXIT

out=$("$run" -n 3 --timeout 280 "$prog" $args 2>&1)
rc=$?
if [ -e "$old" ] || [ ! -e "$new" ]; then
  echo "cma_test: stale segment $( [ -e "$old" ] && echo kept || echo removed), fresh one $( [ -e "$new" ] && echo kept || echo removed) (want removed, kept)"; exit 1
fi
if [ "$rc" -ne 0 ]; then printf '%s\n' "$out" | tail -40; echo "cma_test: comm_check failed on the single-copy path (rc $rc)"; exit 1; fi
on=$(printf '%s\n' "$out" | grep -c 'single copy from [0-9]* KiB: on')
off=$(printf '%s\n' "$out" | grep -c 'single copy from [0-9]* KiB: off')
printf '%s\n' "$out" | grep 'comm_check: OK'
if [ "$on" -lt 1 ] || [ "$off" -ne 0 ]; then
  printf '%s\n' "$out" | grep 'shared-memory collectives'
  echo "cma_test: single-copy path on in $on groups, off in $off (want on everywhere)"; exit 1
fi

out=$("$run" -n 3 --timeout 280 sh -c '[ "$WHALE_TASK_ID" = 1 ] && export WHALE_SHM_CMA=0; exec "$0" "$@"' \
  "$prog" $args 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then printf '%s\n' "$out" | tail -40; echo "cma_test: comm_check failed after the fallback (rc $rc)"; exit 1; fi
# groups with task 1 in them (every group of 3, and task 1's own lines) go
# without; sub-groups of tasks 0 and 2 alone may keep it
on=$(printf '%s\n' "$out" | grep -c -e '^1: .*single copy from [0-9]* KiB: on' -e 'group of 3 .*single copy from [0-9]* KiB: on')
off=$(printf '%s\n' "$out" | grep -c 'group of 3 .*single copy from [0-9]* KiB: off')
printf '%s\n' "$out" | grep 'comm_check: OK'
if [ "$on" -ne 0 ] || [ "$off" -lt 3 ]; then
  printf '%s\n' "$out" | grep 'shared-memory collectives'
  echo "cma_test: with task 1 refusing, single-copy on in $on of its groups, off in $off groups of 3 (want off in all)"; exit 1
fi
echo "cma_test: on when every member can read the others, slot path on every member of a group where one cannot"
