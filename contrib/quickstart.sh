#!/usr/bin/env bash
# Whale's main job on a fresh Debian 12 machine as root: install, build,
# start a 4-node local Slurm cluster (namespace nodes), and train a GPT with
# tensor x pipeline x data parallelism (TP=2 PP=2 DP=2) across its nodes on
# real text (the Python standard library's sources), loss falling as it goes.
# The cluster stays up afterwards so you can keep using it; stop it with
#   contrib/minicluster/whale-minicluster down
#
# Environment: WHALE_QS_STEPS (default 150), WHALE_QS_MODEL (gpt-small).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT"
STEPS=${WHALE_QS_STEPS:-150}
MODEL=${WHALE_QS_MODEL:-gpt-small}
WORK=${WHALE_QS_DIR:-/tmp/whale-quickstart}

echo "== installing packages"
bash contrib/install-deps.sh
echo "== building"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "== starting a 4-node Slurm cluster"
eval "$(contrib/minicluster/whale-minicluster -b "$ROOT/build" up 4)"
echo "   (in your shell: export SLURM_CONF=$SLURM_CONF)"
sinfo -N

mkdir -p "$WORK"
CORPUS=$WORK/corpus.txt
if [ ! -s "$CORPUS" ]; then
  # ~10 MB of real text that every Debian machine with python3 has
  cat /usr/lib/python3*/*.py > "$CORPUS"
fi
echo "== corpus: $CORPUS ($(du -h "$CORPUS" | cut -f1))"

echo "== the layout the plugin chooses for TP=2 PP=2 DP=2 on 4 nodes"
timeout 120 srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-verbose true

echo "== training $MODEL for $STEPS steps: srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 whale-train ..."
timeout 3600 srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 \
  "$ROOT/build/runtime/tools/train/whale-train" --model "$MODEL" --data "$CORPUS" \
  --batch 16 --grad-accum 4 --steps "$STEPS" --lr 3e-3 --threads 1 --log-every 10 \
  --metrics "$WORK/metrics.jsonl"
echo "== metrics (JSON lines) in $WORK/metrics.jsonl"
