#!/bin/sh
# A /dev/shm too small for the default shared segment (1 MiB steps: 12 MiB
# for 2 ranks), as in a container with a small tmpfs: the creator takes the
# segment's pages at once (posix_fallocate, comm/transport/shm_seg.c), sees there is
# no room, and makes it again with 256 KiB steps (3 MiB). Before, the
# segment was only ftruncate'd and the first store into a page the tmpfs
# could not give was a SIGBUS. Checked in a mount namespace of its own with
# a 20 MiB tmpfs on /dev/shm (UCX's shared-memory transport takes ~4 MiB
# per rank there too): the results are exact (comm_check) and the debug log
# says both the retry and the smaller segment. Needs root (mount): skipped
# (77) otherwise.
# usage: shm_room_test.sh WHALE_RUN COMM_CHECK
set -u
run=$1 prog=$2
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "shm_room_test: needs root and unshare -m: skipped"; exit 77
fi
out=$(WHALE_LOG=debug unshare -m sh -c 'mount -t tmpfs -o size=20m tmpfs /dev/shm || exit 77
  exec "$0" -n 2 --timeout 280 "$1" --algos shm --colls allreduce,reduce_scatter,allgather \
    --sizes 1,1001,65537,300007' "$run" "$prog" 2>&1)
rc=$?
[ $rc = 77 ] && { echo "shm_room_test: cannot mount a tmpfs here: skipped"; exit 77; }
fails=0
if [ $rc != 0 ] || ! echo "$out" | grep -q "comm_check: OK"; then
  echo "FAILED - comm_check (exit $rc) with a 20 MiB /dev/shm"; fails=1
fi
if echo "$out" | grep -q "no room for it in /dev/shm.*trying 256 KiB steps"; then
  echo "ok - the 12 MiB default segment did not fit and was made again with 256 KiB steps"
else
  echo "FAILED - no retry with 256 KiB steps in the log"; fails=1
fi
if echo "$out" | grep -q "shared-memory collectives on for a group of 2 (256 KiB steps"; then
  echo "ok - the group runs on the 256 KiB segment"
else
  echo "FAILED - the group does not run on a 256 KiB segment"; fails=1
fi
[ $fails = 0 ] || echo "$out" | tail -30
exit $fails
