#!/bin/bash
# A real full disk: a 1.6 MiB tmpfs in a private mount namespace holds one
# synthetic checkpoint but not two. The second save must fail with "No space
# left on device", remove its partial directory, and leave the first
# checkpoint, and `latest`, intact and verifiable.
# usage: disk_full_on_small_tmpfs.sh CKPT_SYNTH WHALE_CKPT   (skips unless root)
set -u
synth=$1 tool=$2
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
    echo "SKIP: needs root and unshare (mounts a private tmpfs)"; exit 77
fi
exec unshare -m bash -s "$synth" "$tool" <<'INNER'
set -u
synth=$1 tool=$2
mnt=$(mktemp -d /tmp/whale-ckpt-full-XXXXXX)
trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt"' EXIT
mount -t tmpfs -o size=1600k whale-ckpt-full "$mnt" || { echo "SKIP: cannot mount tmpfs"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
"$synth" save "$mnt/ck" 1 1 2 0 1 || fail "first save should fit"
[ "$(readlink "$mnt/ck/latest")" = step-00000001 ] || fail "latest after the first save"
out=$("$synth" save "$mnt/ck" 1 1 2 0 2 2>&1) && fail "second save should not fit: $out"
echo "$out" | grep -q "No space left on device" || fail "no ENOSPC message: $out"
echo "$out" | grep -q "earlier checkpoints are intact" || fail "no removal message: $out"
ls -a "$mnt/ck" | grep -q '^\.tmp-' && fail "partial directory left: $(ls -a "$mnt/ck")"
[ -e "$mnt/ck/step-00000002" ] && fail "step 2 exists"
[ "$(readlink "$mnt/ck/latest")" = step-00000001 ] || fail "latest moved"
"$tool" verify "$mnt/ck" || fail "step 1 no longer verifies"
echo "ok: disk full on a $(df -h --output=size "$mnt" | tail -1 | tr -d ' ') tmpfs: partial save removed, step 1 intact"
INNER
