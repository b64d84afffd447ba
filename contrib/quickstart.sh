#!/usr/bin/env bash
# Whale's main job on a fresh Debian 12 machine as root: install, build, start
# a 4-node local Slurm cluster (namespace nodes) and run a Whale step on it.
# The cluster stays up afterwards so you can keep using it; stop it with
#   contrib/minicluster/whale-minicluster down
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT"
NODES=${WHALE_QS_NODES:-4}

echo "== installing packages"
bash contrib/install-deps.sh
echo "== building"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "== starting a $NODES-node Slurm cluster"
eval "$(contrib/minicluster/whale-minicluster -b "$ROOT/build" up "$NODES")"
echo "   export SLURM_CONF=$SLURM_CONF   # to use it from your shell"
sinfo
echo "== a Whale step across the nodes"
timeout 120 srun -N "$NODES" --whale sh -c 'echo "$(hostname): task $WHALE_TASK_ID"' | sort
echo "== training a small GPT, data-parallel over the $NODES nodes (ZeRO 1)"
# Corpus: the Python standard library's sources as raw bytes (every Debian
# machine has them); this project's own sources when they are absent.
CORPUS=$(mktemp --suffix=.txt)
trap 'rm -f "$CORPUS"' EXIT
cat /usr/lib/python3*/*.py > "$CORPUS" 2>/dev/null || cat runtime/src/*/*.c > "$CORPUS"
timeout 1200 srun -N "$NODES" --whale-dp="$NODES" build/runtime/tools/train/whale-train \
  --model gpt-small --data "$CORPUS" --steps "${WHALE_QS_STEPS:-150}" --batch 16 --lr 1e-3 \
  --zero 1 --log-every 10 --metrics whale-train-metrics.jsonl
