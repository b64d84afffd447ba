#!/usr/bin/env bash
# whale-run and the descriptor limit: too many tasks
# for the limit fail before any task starts, with the numbers and the fix;
# a soft limit below the hard one is raised instead of failing.
# usage: run_limits.sh WHALE_RUN
set -u
RUN=$1
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi; }

out=$(bash -c "ulimit -n 1024; '$RUN' -n 1000 true" 2>&1); rc=$?
check "-n 1000 under 1024 files: refused with the reason" \
  '[ $rc -eq 1 ] && [[ "$out" == *"-n 1000 needs about 3064 open files"* && "$out" == *"the limit is 1024 (hard limit 1024)"* ]]'
check "no task was prepared" '[[ "$out" != *"cannot prepare task"* ]]'
out=$(bash -c "ulimit -n 1024; '$RUN' -n 10000 true" 2>&1); rc=$?
check "-n 10000: refused at once" '[ $rc -eq 1 ] && [[ "$out" == *"-n 10000 needs about 30064 open files"* ]]'
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 400 ]; then
  out=$(bash -c "ulimit -Sn 128; '$RUN' -n 60 --no-label sh -c 'ulimit -Sn'" 2>&1); rc=$?
  check "soft limit 128 raised for -n 60" '[ $rc -eq 0 ] && [ "$(sort -u <<< "$out")" != 128 ]'
fi
exit $fail
