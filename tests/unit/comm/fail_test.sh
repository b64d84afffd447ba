#!/bin/sh
# Kill one rank in the middle of a large allreduce; every survivor must report
# WHALE_EPEER instead of hanging (comm_fail prints "... OK"; no timing assert). whale-run, told to
# keep going, then exits with the victim's status (137 = SIGKILL).
# usage: fail_test.sh WHALE_RUN COMM_FAIL NTASKS MIB
set -u
run=$1 prog=$2 n=$3 mib=$4
out=$("$run" -n "$n" --keep-going --timeout 280 "$prog" "$mib" 2>&1)
rc=$?
echo "$out"
ok=$(printf '%s\n' "$out" | grep -c 'comm_fail: rank .* OK$')
if [ "$rc" -ne 137 ]; then echo "fail_test: whale-run exited $rc, want 137"; exit 1; fi
if [ "$ok" -ne $((n - 1)) ]; then echo "fail_test: $ok of $((n - 1)) survivors OK"; exit 1; fi
echo "fail_test: $ok survivors got WHALE_EPEER"
# Shared segments of the collectives (comm/transport/shm_seg.c) are unlinked once
# mapped: none may be left by this run's (now dead) tasks. A name carries its
# creator's pid; segments of live processes (other runs) are not ours.
for f in /dev/shm/whale-coll-*; do
  [ -e "$f" ] || continue
  pid=${f#/dev/shm/whale-coll-}; pid=${pid%%-*}
  if ! kill -0 "$pid" 2>/dev/null; then echo "fail_test: leaked segment $f"; exit 1; fi
done
