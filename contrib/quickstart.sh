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
