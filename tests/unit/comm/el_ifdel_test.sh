#!/bin/sh
# An interface of the host deleted mid-run (another minicluster's bridge
# going down) must not cut the tasks of a single-machine step off from
# each other: run the el_kill_long shape in a private network namespace
# with an extra interface and delete it after the recovery. Without
# UCX_NET_DEVICES=lo every task fails all its heartbeat senders at once.
# Needs root (unshare, ip); 77 (skipped) otherwise.
# usage: el_ifdel_test.sh WHALE_RUN EL_CHECK
set -u
run=$1 prog=$2
if [ "${EL_IFDEL_INNER:-}" != 1 ]; then
  [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null || exit 77
  EL_IFDEL_INNER=1 exec unshare -n -m "$0" "$@"
fi
# sysfs of this namespace: UCX lists interfaces from /sys/class/net
mount -t sysfs sysfs /sys || exit 77
ip link set lo up
ip link add wifdela type veth peer name wifdelb || exit 77
ip addr add 10.254.254.1/24 dev wifdela
ip link set wifdela up
ip link set wifdelb up
out=$(mktemp)
"$run" -n 6 --nodes 6 --spares 1 --keep-going --timeout 280 "$prog" kill --victims 1 --steps 110 \
  --pause 100 >"$out" 2>&1 &
pid=$!
i=0
until grep -q REPLACED "$out" || [ $i -ge 1200 ]; do sleep 0.1; i=$((i + 1)); done
sleep 3
ip link del wifdela
wait $pid
rc=$?
grep -v ': trace:' "$out"
ok=$(grep -c "$(basename "$prog"): .*OK" "$out")
rm -f "$out"
if [ "$rc" -ne 137 ] || [ "$ok" -ne 5 ]; then
  echo "el_ifdel: whale-run exited $rc (want 137), $ok task(s) OK (want 5)"
  exit 1
fi
echo "el_ifdel: passed"
