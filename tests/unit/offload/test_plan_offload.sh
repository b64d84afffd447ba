#!/bin/sh
# whale-plan and offload: it picks offload when nothing fits
# without it, says so with the reason, and how much larger a model of the
# same width fits with offload than without (any layout, the search itself);
# a model that fits without offload gets a plan without it and no such
# lines; --offload none on a model that needs offload is refused.
#   test_plan_offload.sh /path/to/whale-plan
set -u
P=$1
fails=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $1"; cat "$TMP/out" "$TMP/err"; fails=$((fails + 1)); }

# gpt-18.4b on 8 x A100-40GB: 38.1 GiB per device at best without offload
"$P" -m gpt-18.4b -b 64 -N 1 -g 8 -G A100-40GB > "$TMP/out" 2> "$TMP/err" || fail "18.4b: exit $?"
grep -Eq '^best .* (optim|param) ' "$TMP/out" || fail "18.4b: the best plan offloads"
grep -q '^offload: nothing fits without offload (.*GiB.*); offload=\(optimizer\|params\) makes this model fit' \
    "$TMP/out" || fail "18.4b: says nothing fits without offload, with the reason"
line=$(grep '^offload: the largest model of this width that fits:' "$TMP/out")
[ -n "$line" ] || fail "18.4b: the largest-model line"
ratio=$(echo "$line" | sed -n 's/.*with it (\([0-9.]*\)x)$/\1/p')
l0=$(echo "$line" | sed -n 's/.*(\([0-9]*\) layers) without.*/\1/p')
l1=$(echo "$line" | sed -n 's/.*(\([0-9]*\) layers) with it.*/\1/p')
echo "18.4b: $line"
# the model has 40 layers: fewer fit without offload, more with it
[ -n "$l0" ] && [ -n "$l1" ] && [ "$l0" -lt 40 ] && [ "$l1" -ge 40 ] || fail "18.4b: layers $l0 / $l1 around 40"
awk -v r="$ratio" 'BEGIN { exit !(r > 1.5) }' || fail "18.4b: ratio $ratio > 1.5"

# a model that fits without offload: no offload, no offload lines
"$P" -m gpt-7.5b -b 64 -N 1 -g 8 -G A100-40GB > "$TMP/out" 2> "$TMP/err" || fail "7.5b: exit $?"
grep -Eq '^best .* none ' "$TMP/out" || fail "7.5b: the best plan does not offload"
grep -q '^offload:' "$TMP/out" && fail "7.5b: no offload lines"

# offload forbidden where nothing fits without it: refused, naming the memory
"$P" -m gpt-39.1b -b 64 -N 1 -g 8 -G A100-40GB --offload none > "$TMP/out" 2> "$TMP/err"
rc=$?
[ "$rc" -ne 0 ] || fail "39.1b --offload none: refused"
grep -q 'nothing fits: .*GiB per device' "$TMP/err" "$TMP/out" || fail "39.1b: the reason"

[ "$fails" -eq 0 ] && echo "ok - whale-plan offload report"
exit "$fails"
