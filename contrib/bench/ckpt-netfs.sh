#!/bin/bash
# ckpt-bench.sh on a network file system made here: an sshd in a network
# namespace of its own (a veth pair, 10.66.K.0/24) exporting a scratch
# directory, mounted with sshfs (FUSE over SFTP) in the host namespace, so
# every checkpoint byte crosses a network stack. NFS itself cannot run on
# these machines: the kernel has neither the nfs nor the nfsd file system
# (/proc/filesystems) and no loadable modules, so neither nfs-kernel-server
# nor an NFS mount works (a user-space server such as nfs-ganesha would
# still need the kernel's NFS client to be mounted).
# Needs root, iproute2, openssh-server and sshfs (apt-get install sshfs
# openssh-server). Everything it makes is removed on exit.
# usage: contrib/bench/ckpt-netfs.sh [-k K (0..255, default 6)] [ckpt-bench.sh options]
set -euo pipefail
k=6
if [ "${1:-}" = -k ]; then k=$2; shift 2; fi
for t in ip sshfs /usr/sbin/sshd fusermount; do
    command -v "$t" >/dev/null || { echo "ckpt-netfs: $t missing (apt-get install sshfs openssh-server)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "ckpt-netfs: needs root (network namespace, FUSE mount)" >&2; exit 1; }
ns=whale-ckpt-nfs$k h=wcn${k}h n=wcn${k}n
work=$(mktemp -d "${TMPDIR:-/tmp}/whale-ckpt-netfs-XXXXXX")
cleanup() {
    mountpoint -q "$work/mnt" && fusermount -u "$work/mnt"
    [ -f "$work/sshd.pid" ] && kill "$(cat "$work/sshd.pid")" 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    ip link del "$h" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/export" "$work/mnt" /run/sshd
ssh-keygen -q -t ed25519 -N "" -f "$work/key"
ssh-keygen -q -t ed25519 -N "" -f "$work/hostkey"
cp "$work/key.pub" "$work/authorized_keys"
ip netns add "$ns"
ip link add "$h" type veth peer name "$n"
ip link set "$n" netns "$ns"
ip addr add "10.66.$k.1/24" dev "$h"
ip link set "$h" up
ip netns exec "$ns" ip addr add "10.66.$k.2/24" dev "$n"
ip netns exec "$ns" ip link set "$n" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" /usr/sbin/sshd -o ListenAddress="10.66.$k.2" -o PidFile="$work/sshd.pid" \
    -o HostKey="$work/hostkey" -o AuthorizedKeysFile="$work/authorized_keys" \
    -o PermitRootLogin=prohibit-password -o PasswordAuthentication=no -o StrictModes=no
for _ in $(seq 50); do [ -s "$work/sshd.pid" ] && break; sleep 0.1; done
sshfs -o IdentityFile="$work/key",StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null \
    -o BatchMode=yes "root@10.66.$k.2:$work/export" "$work/mnt"
echo "# network file system: sshfs over a veth pair to an sshd in network namespace $ns"
"$(dirname "$0")/ckpt-bench.sh" -d "$work/mnt" "$@"
