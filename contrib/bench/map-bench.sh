#!/usr/bin/env bash
# Mapping benchmark (issue: SPANK plugin). Prints:
#  1. time to map 100,000 ranks (12,500 nodes x 8 GPUs, 3-level fat tree,
#     node names shuffled across leaves) with the topology-aware mapper and
#     with plain block order, median of several runs (target < 50 ms);
#  2. the mapping cost (bytes per step per link class and link time) of the
#     topology-aware map vs block order on fragmented allocations of a fat
#     tree and of NVL72-style racks, median ratio over random allocations.
# Usage: contrib/bench/map-bench.sh [BUILD_DIR]   (default: ./build)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-$ROOT/build}
MAP=$BUILD/runtime/tools/map/whale-map
[ -x "$MAP" ] || { echo "map-bench: $MAP not built (ninja -C $BUILD)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

python3 - "$TMP" <<'PY'
import random, sys
d = sys.argv[1]
rnd = random.Random(42)

def fat_tree(path, spines, leaves_per_spine, nodes_per_leaf, prefix, shuffle):
    n = spines * leaves_per_spine * nodes_per_leaf
    ids = list(range(n))
    if shuffle:
        rnd.shuffle(ids)
    with open(path, "w") as f:
        k = 0
        for s in range(spines):
            for l in range(leaves_per_spine):
                names = ",".join("%s%05d" % (prefix, ids[k + i]) for i in range(nodes_per_leaf))
                k += nodes_per_leaf
                f.write("SwitchName=leaf%d Nodes=%s\n" % (s * leaves_per_spine + l, names))
            f.write("SwitchName=spine%d Switches=leaf[%d-%d]\n" % (s, s * leaves_per_spine, (s + 1) * leaves_per_spine - 1))
        f.write("SwitchName=core Switches=spine[0-%d]\n" % (spines - 1))
    return n

# 1. 12,500 nodes: 10 spines x 25 leaves x 50 nodes
fat_tree(d + "/big.topology.conf", 10, 25, 50, "n", True)
open(d + "/big.whale.conf", "w").write(
    "TopologyFile=%s/big.topology.conf\nNodeName=DEFAULT GPUs=8\n" % d)

# 2a. fragmented fat tree: 4 spines x 4 leaves x 32 nodes (512 nodes); jobs get
# 64 nodes spread unevenly (the rest is busy)
fat_tree(d + "/ft.topology.conf", 4, 4, 32, "g", True)
open(d + "/ft.whale.conf", "w").write(
    "TopologyFile=%s/ft.topology.conf\nGPUType=H100 PeakTFLOPS=989 Memory=80G NVLinkBandwidth=450GB\n"
    "NodeName=DEFAULT GPUs=8 GPUType=H100 NICs=mlx5_[0-7]:1 NICBandwidth=400Gb\n" % d)
allnodes = ["g%05d" % i for i in range(512)]
with open(d + "/ft.allocs", "w") as f:
    for _ in range(15):
        f.write(",".join(sorted(rnd.sample(allnodes, 64))) + "\n")

# 2b. NVL72-style: 16 racks of 18 trays (4 GPUs each, one NVLink domain per
# rack); racks hang off 4 leaves in no particular name order (rack r on leaf
# perm[r]). A job gets 8 racks, each only partly (6..18 trays, even, the
# rest busy or down), total trays a multiple of 8.
perm = [r % 4 for r in range(16)]
rnd.shuffle(perm)
with open(d + "/nvl.topology.conf", "w") as f:
    for leaf in range(4):
        trays = ",".join("t%04d" % (r * 18 + i) for r in range(16) if perm[r] == leaf for i in range(18))
        f.write("SwitchName=leaf%d Nodes=%s\n" % (leaf, trays))
    f.write("SwitchName=spine0 Switches=leaf[0-1]\nSwitchName=spine1 Switches=leaf[2-3]\n")
    f.write("SwitchName=core Switches=spine[0-1]\n")
    for r in range(16):
        f.write("BlockName=rack%d Nodes=t[%04d-%04d]\n" % (r, r * 18, r * 18 + 17))
open(d + "/nvl.whale.conf", "w").write(
    "TopologyFile=%s/nvl.topology.conf\nGPUType=B200 PeakTFLOPS=2250 Memory=186G NVLinkBandwidth=900GB\n"
    "NodeName=DEFAULT GPUs=4 GPUType=B200 NICs=mlx5_[0-3]:1 NICBandwidth=400Gb\n" % d)
with open(d + "/nvl.allocs", "w") as f:
    for _ in range(15):
        racks = sorted(rnd.sample(range(16), 8))
        counts = [rnd.choice(range(6, 19, 2)) for _ in racks]
        while sum(counts) % 8:
            i = max(range(len(counts)), key=lambda k: counts[k])
            counts[i] -= 2
        nodes = []
        for r, c in zip(racks, counts):
            nodes += ["t%04d" % (r * 18 + i) for i in sorted(rnd.sample(range(18), c))]
        f.write(",".join(nodes) + "\n")
PY

echo "== 1. mapping time, 100,000 ranks (12,500 nodes x 8 GPUs, TP=8 PP=25 DP=500)"
NODES="n[00000-12499]"
"$MAP" -c "$TMP/big.whale.conf" -w "$NODES" -t 8 --tp 8 --pp 25 --summary --bench 21 | grep -E "bench|layout"
"$MAP" -c "$TMP/big.whale.conf" -w "$NODES" -t 8 --tp 8 --pp 25 --map block --summary --bench 21 | grep bench
echo "   (whole whale-map run incl. parsing 12,500-node topology.conf:)"
/usr/bin/time -f "   whale-map wall %e s, max RSS %M KB" "$MAP" -c "$TMP/big.whale.conf" -w "$NODES" -t 8 --tp 8 --pp 25 --summary >/dev/null

report() { # name conf allocs tp pp spares
  local name=$1 conf=$2 allocs=$3 tp=$4 pp=$5 spares=$6
  echo "== 2. $name: TP=$tp PP=$pp spares=$spares, $(wc -l < "$allocs") random fragmented allocations"
  local out=$TMP/$name.out
  : > "$out"
  while read -r nl; do
    "$MAP" -c "$conf" -w "$nl" -t "$7" --tp "$tp" --pp "$pp" --spares "$spares" --summary --compare \
      | grep -E "^cost|^compare" >> "$out" || { echo "   mapping failed" >&2; return 1; }
    "$MAP" -c "$conf" -w "$nl" -t "$7" --tp "$tp" --pp "$pp" --spares "$spares" --summary --map block \
      | grep -E "^cost" | sed 's/^cost/blockcost/' >> "$out"
  done < "$allocs"
  python3 - "$out" <<'PY'
import re, statistics, sys
rat, topo, blk = [], [], []
def parse(line):
    v = {}
    for cls, num, unit in re.findall(r"(node|nvl|leaf|spine|core) ([0-9.e+]+) (B|KB|MB|GB|TB|PB)", line):
        v[cls] = float(num) * {"B":1,"KB":1e3,"MB":1e6,"GB":1e9,"TB":1e12,"PB":1e15}[unit]
    return v
for line in open(sys.argv[1]):
    if line.startswith("compare:"):
        m = re.search(r"block order link time ([0-9.e+]+) s, topo ([0-9.e+]+) s", line)
        rat.append(float(m.group(1)) / float(m.group(2)))
    elif line.startswith("cost"):
        topo.append(parse(line))
    elif line.startswith("blockcost"):
        blk.append(parse(line))
def med(vs, k):
    return statistics.median(v.get(k, 0) for v in vs) / 1e9
print("   median GB per step by link class     node    nvl    leaf   spine    core")
print("   topo                            %8.1f %6.1f %7.1f %7.1f %7.1f" % tuple(med(topo, k) for k in ("node","nvl","leaf","spine","core")))
print("   block                           %8.1f %6.1f %7.1f %7.1f %7.1f" % tuple(med(blk, k) for k in ("node","nvl","leaf","spine","core")))
print("   link time block/topo: median %.2fx, min %.2fx, max %.2fx" % (statistics.median(rat), min(rat), max(rat)))
PY
}
report fat-tree "$TMP/ft.whale.conf" "$TMP/ft.allocs" 8 4 0 8
report fat-tree-spares "$TMP/ft.whale.conf" "$TMP/ft.allocs" 8 3 4 8
report nvl72 "$TMP/nvl.whale.conf" "$TMP/nvl.allocs" 8 4 0 4
report nvl72-tp4 "$TMP/nvl.whale.conf" "$TMP/nvl.allocs" 4 4 0 4
report nvl72-spares "$TMP/nvl.whale.conf" "$TMP/nvl.allocs" 8 1 2 4
