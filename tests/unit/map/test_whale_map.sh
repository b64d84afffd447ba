#!/usr/bin/env bash
# whale-map command line: exit codes, table, groups, rank map, task env, SVG.
# Usage: test_whale_map.sh WHALE_MAP CONFIG_DIR
set -u
MAP=$1
CFG=$2/topologies
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() { # rc cmd...
  local want=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$TMP/out" "$TMP/err" >&2; fail "'$*' exited $rc, want $want"; }
}

expect_rc 0 "$MAP" --help
grep -q "Usage: whale-map" "$TMP/out" || fail "--help text"
expect_rc 0 "$MAP" --version
grep -q "^whale-map [0-9]" "$TMP/out" || fail "--version"
expect_rc 2 "$MAP" --tp 2
expect_rc 2 "$MAP" -w 'n[1-4]' -t 2 --tp abc
expect_rc 2 "$MAP" -w 'n[1-4]' -t 2 --tp 2 --map diagonal
expect_rc 2 "$MAP" -w 'n[1-' -t 2 --tp 2
expect_rc 2 "$MAP" -w 'n[1-4]' -t 2 --tp 2 stray
# impossible layouts: exit 1 with the reason
expect_rc 1 "$MAP" -w 'n[1-4]' -t 2 --tp 4
grep -q "TP=4 is larger than any NVLink domain" "$TMP/err" || fail "TP reason"
expect_rc 1 "$MAP" -w 'n[1-4]' -t 2 --tp 2 --dp 3
grep -q "TP\*PP\*DP = 2\*1\*3 = 6" "$TMP/err" || fail "degree reason"
expect_rc 1 "$MAP" -c /nonexistent/whale.conf -w 'n[1-4]' -t 2 --tp 2

# a fragmented fat tree: table, groups, rank map, env, comparison, SVG
NODES='gpu[01-03,05-07,09-10,13,17,21-22,25,26,29,30]'
expect_rc 0 "$MAP" -c "$CFG/fattree.whale.conf" -w "$NODES" -t 8 --tp 8 --pp 2 --spares 0 \
  --groups --compare --rankmap --env 9 --svg "$TMP/l.svg"
grep -q "layout: TP=8 PP=2 DP=8, 128 working rank(s)" "$TMP/out" || fail "header"
[ "$(grep -c '^  gpu' "$TMP/out")" -eq 16 ] || fail "one line per node"
grep -q "^TP groups (16 of 8 ranks)" "$TMP/out" || fail "TP groups"
grep -q "^DP groups (16 of 8 ranks)" "$TMP/out" || fail "DP groups"
grep -q "^WHALE_RANKMAP=[0-9]" "$TMP/out" || fail "rankmap"
grep -q "^WHALE_TASK_ID=9$" "$TMP/out" || fail "env task id"
grep -q "^CUDA_VISIBLE_DEVICES=1$" "$TMP/out" || fail "env gpu"
grep -q "^NCCL_IB_HCA==mlx5_1:1$" "$TMP/out" || fail "env nccl"
ratio=$(sed -n 's/.*topo [0-9.e+]* s (\([0-9.]*\)x).*/\1/p' "$TMP/out")
python3 -c "import sys; sys.exit(0 if float('$ratio') > 1.2 else 1)" || fail "topo not better than block ($ratio)"
python3 -c "
import sys, xml.etree.ElementTree as ET
root = ET.parse('$TMP/l.svg').getroot()
rects = [e for e in root.iter() if e.tag.endswith('rect')]
assert len(rects) > 128, len(rects)
" || fail "SVG not well-formed"
expect_rc 0 "$MAP" -c "$CFG/nvl72.whale.conf" -w 'gb[001-010,019-026]' -t 4 --tp 8 --pp 2 --spares 2 \
  --summary --svg "$TMP/n.svg"
grep -q "2 spare node(s)" "$TMP/out" || fail "nvl spares"
grep -q "NVLink domain rack0" "$TMP/n.svg" || fail "domain box"
# cyclic task ids and block order refused when it splits a TP group
expect_rc 1 "$MAP" -w 'n[1-4]' -t 2 --tp 2 --distribution cyclic --map block
grep -q "across nodes" "$TMP/err" || fail "block refusal"
expect_rc 0 "$MAP" -w 'n[1-4]' -t 2 --tp 2 --distribution cyclic --rankmap
grep -q "^WHALE_RANKMAP=0,4,1,5,2,6,3,7$" "$TMP/out" || fail "cyclic rankmap $(grep RANKMAP "$TMP/out")"

# site limits: what the plugin would refuse is not drawn either
printf 'MaxTP=2\nMaxSpares=0\n' > "$TMP/lim.conf"
expect_rc 1 "$MAP" -c "$TMP/lim.conf" -w 'n[1-4]' -t 4 --tp 4
grep -q "tp=4 exceeds the site limit MaxTP=2" "$TMP/err" || fail "MaxTP not applied: $(cat "$TMP/err")"
expect_rc 1 "$MAP" -c "$TMP/lim.conf" -w 'n[1-4]' -t 2 --tp 2 --spares 1
grep -q "spares=1 exceeds the site limit MaxSpares=0" "$TMP/err" || fail "MaxSpares not applied"
expect_rc 0 "$MAP" -c "$TMP/lim.conf" -w 'n[1-4]' -t 2 --tp 2
printf 'MaxDP=2\n' > "$TMP/limdp.conf"
expect_rc 1 "$MAP" -c "$TMP/limdp.conf" -w 'n[1-4]' -t 2 --tp 2
grep -q "dp=4 exceeds the site limit MaxDP=2" "$TMP/err" || fail "MaxDP (derived dp) not applied"

# readable SVGs: 4 nodes leave room for the title and legend; 128
# nodes of 8 tasks wrap into rows instead of one 25,000 px line
svg_check() { # file max_width
  python3 - "$1" "$2" <<'PY2'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
w, h = int(root.get("width")), int(root.get("height"))
assert root.get("viewBox") == "0 0 %d %d" % (w, h), root.get("viewBox")
texts = [e for e in root.iter() if e.tag.endswith("text")]
title = texts[0].text
# 14 px bold sans: about 8.5 px per character, from x=20
assert w >= 20 + 8.5 * len(title), ("title clipped", w, len(title))
assert w <= int(sys.argv[2]), ("too wide", w)
# every drawn element inside the picture
for e in root.iter():
    for k in ("x", "x1", "x2"):
        if e.get(k) is not None:
            assert 0 <= float(e.get(k)) <= w, (e.tag, k, e.get(k), w)
    for k in ("y", "y1", "y2"):
        if e.get(k) is not None:
            assert 0 <= float(e.get(k)) <= h, (e.tag, k, e.get(k), h)
print(w, h, len(texts))
PY2
}
expect_rc 0 "$MAP" -w 'n[1-4]' -t 2 --tp 2 --svg "$TMP/s4.svg"
svg_check "$TMP/s4.svg" 2000 >/dev/null || fail "4-node SVG"
{
  for l in 0 1 2 3 4 5 6 7; do
    echo "SwitchName=leaf$l Nodes=g[$(printf '%03d' $((l * 16 + 1)))-$(printf '%03d' $((l * 16 + 16)))]"
  done
  echo "SwitchName=spine0 Switches=leaf[0-3]"
  echo "SwitchName=spine1 Switches=leaf[4-7]"
  echo "SwitchName=core Switches=spine[0-1]"
} > "$TMP/big.topology.conf"
printf 'TopologyFile=%s\n' "$TMP/big.topology.conf" > "$TMP/big.conf"
expect_rc 0 "$MAP" -c "$TMP/big.conf" -w 'g[001-128]' -t 8 --tp 8 --pp 4 --svg "$TMP/s128.svg"
svg_check "$TMP/s128.svg" 2000 >/dev/null || fail "128-node SVG"
[ "$(grep -c '<title>task' "$TMP/s128.svg")" -eq 1024 ] || fail "128-node SVG: not every task drawn"
grep -q '>leaf7 (under spine1)<' "$TMP/s128.svg" || fail "128-node SVG: leaf switch band"
echo "whale-map CLI: ok"
