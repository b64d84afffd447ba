#!/bin/sh
# Shared-memory segment names another user cannot take first. The names
# used to be /whale-coll-<pid>-<start>-g<G>-s<S> of group rank 0, all of it
# readable in /proc: whoever created them first (here: directories, which
# the creator can neither open nor remove) turned the step's shared memory
# off, and only a debug line said so. Rank 0 plants every such name for its
# own pid and start time (unchanged by exec) before comm_check starts: the
# group must still run on shared memory. A fallback, if it ever happens, is
# a warning.
# usage: shm_names_test.sh WHALE_RUN COMM_CHECK
set -u
run=$1 prog=$2
T=$(mktemp -d /tmp/whale-shm-names-XXXXXX)
trap 'for d in $(cat "$T/planted" 2>/dev/null); do rmdir "$d" 2>/dev/null; done; rm -rf "$T"' EXIT
out=$(WHALE_LOG=debug PLANTED="$T/planted" "$run" -n 2 --timeout 280 sh -c '
  if [ "$WHALE_RANK" = 0 ]; then
    start=$(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20)
    for g in $(seq 0 63); do for s in $(seq 0 7); do
      d=/dev/shm/whale-coll-$$-$start-g$g-s$s
      mkdir "$d" && echo "$d" >> "$PLANTED"
    done; done
  fi
  exec "$0" --algos shm --colls allreduce,reduce_scatter,allgather --sizes 1,1001,65537' "$prog" 2>&1)
rc=$?
fails=0
n=$(wc -l < "$T/planted" 2>/dev/null || echo 0)
if [ "$n" -lt 512 ]; then
  echo "FAILED - only $n of the 512 old names could be planted"; fails=1
fi
if [ $rc != 0 ] || ! echo "$out" | grep -q "comm_check: OK"; then
  echo "FAILED - comm_check exit $rc"; fails=1
fi
if echo "$out" | grep -q "shared-memory collectives on for a group of 2"; then
  echo "ok - the group runs on shared memory although the old names were taken"
else
  echo "FAILED - the group does not run on shared memory"; fails=1
fi
if echo "$out" | grep -q "shared-memory collectives off"; then
  echo "FAILED - fallback to the network transport"; fails=1
fi
[ $fails = 0 ] || echo "$out" | tail -30
exit $fails
