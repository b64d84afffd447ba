#!/bin/sh
# The last task (a spare, the target of everybody's puts) dies after the key
# exchange; every other task must get WHALE_EPEER/WHALE_ETIMEDOUT from its
# puts or flushes within the bound (rma_check prints "... OK").
# usage: rma_kill_test.sh WHALE_RUN RMA_CHECK NTASKS
set -u
run=$1 prog=$2 n=$3
out=$("$run" -n "$n" --nodes "$n" --spares 1 --keep-going --timeout 280 "$prog" --slot 65536 --kill 2>&1)
rc=$?
echo "$out"
ok=$(printf '%s\n' "$out" | grep -c 'rma_check: task .* OK$')
if [ "$rc" -ne 137 ]; then echo "rma_kill_test: whale-run exited $rc, want 137"; exit 1; fi
if [ "$ok" -ne $((n - 1)) ]; then echo "rma_kill_test: $ok of $((n - 1)) survivors OK"; exit 1; fi
echo "rma_kill_test: $ok survivors saw the dead target"
