#!/bin/sh
# Run one el_check scenario under whale-run and check the outcome: whale-run's
# exit status (137 when a victim was SIGKILLed, 0 when nobody failed), the
# number of tasks that printed an OK line, and optionally a pattern the
# output must contain (how the failure was detected, the decision).
# usage: el_test.sh WHALE_RUN EL_CHECK WANT_RC WANT_OK PATTERN RUN_ARGS... -- CHECK_ARGS...
set -u
run=$1 prog=$2 want_rc=$3 want_ok=$4 pattern=$5
shift 5
runargs=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do runargs="$runargs $1"; shift; done
[ $# -gt 0 ] && shift
# shellcheck disable=SC2086
out=$("$run" $runargs --keep-going --timeout 280 "$prog" "$@" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v ': trace:'
ok=$(printf '%s\n' "$out" | grep -c "$(basename "$prog"): .*OK")
fail=0
if [ "$rc" -ne "$want_rc" ]; then echo "el_test: whale-run exited $rc, want $want_rc"; fail=1; fi
if [ "$ok" -ne "$want_ok" ]; then echo "el_test: $ok task(s) OK, want $want_ok"; fail=1; fi
if [ -n "$pattern" ] && ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
  echo "el_test: the output lacks '$pattern'"; fail=1
fi
[ $fail -eq 0 ] && echo "el_test: passed ($ok tasks OK, exit $rc)"
exit $fail
