#!/bin/sh
# A sender killed with large puts in flight: the target and the other live
# task must both go on (rma_sender_death prints "... OK" on each); whale-run
# exits 137 (the victim's SIGKILL). Repeated ROUNDS times, the victim dying
# 0, 3, 10, 30 ms after posting its puts (cycled): the death lands at a
# different point of the transfer each time.
# usage: rma_sender_death_test.sh WHALE_RUN PROG ROUNDS [PROG ARGS...]
set -u
run=$1 prog=$2 rounds=$3
shift 3
i=1
while [ "$i" -le "$rounds" ]; do
    case $((i % 4)) in 1) d=0 ;; 2) d=0.003 ;; 3) d=0.01 ;; *) d=0.03 ;; esac
    out=$("$run" -n 3 --nodes 3 --keep-going --timeout 150 "$prog" --delay "$d" "$@" 2>&1)
    rc=$?
    echo "$out"
    ok=$(printf '%s\n' "$out" | grep -c 'rma_sender_death: task .* OK$')
    if printf '%s\n' "$out" | grep -q 'unexpected error\|task [02] .*killed by signal\|^[02]: .*Caught signal'; then
        echo "rma_sender_death_test: round $i: UCX fatal error in a survivor"; exit 1
    fi
    if [ "$rc" -ne 137 ]; then echo "rma_sender_death_test: round $i: whale-run exited $rc, want 137"; exit 1; fi
    if [ "$ok" -ne 2 ]; then echo "rma_sender_death_test: round $i: $ok of 2 survivors OK"; exit 1; fi
    i=$((i + 1))
done
echo "rma_sender_death_test: $rounds rounds, target and live peer survived every time"
