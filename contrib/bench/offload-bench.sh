#!/bin/bash
# Host offload benchmark (issue 12). Figures, each beside its competitor
# measured in the same run:
#   - host AdamW vs torch.optim.AdamW (single-tensor, foreach, fused where the
#     CPU torch has it) on gpt2-124m's tensors          target: >= 1.5x
#   - step-time overhead of offload optimizer / params vs none, and the
#     fraction of transfers hidden (whale-train, gpt2-124m shape)
#                                                      target: optimizer <= 15 %
#   - bandwidth of each offload path beside plain memcpy: the local RMA
#     handle, another task on this node (whale-run -n 2, shared memory) and,
#     when a cluster is reachable (SLURM_CONF, e.g. whale-minicluster env),
#     another node over tcp (srun -N2, UCX_TLS=tcp,self)
# usage: contrib/bench/offload-bench.sh [-b BUILD_DIR] [-m MODEL] [-t THREADS]
#                                       [-s STEPS] [-r REPS] [-e MAX_BYTES] [-n]
#                                       [-M ZERO:MODE,...]
#   -n  skip the whale-train runs (AdamW and bandwidth only)
#   -M  whale-train runs (default 0:none,0:optimizer,3:none,3:optimizer,3:params)
set -euo pipefail
build=build model=gpt2-124m threads=2 steps=4 reps=5 max=64M skip= modes=0:none,0:optimizer,3:none,3:optimizer,3:params
while getopts "b:m:t:s:r:e:M:nh" o; do
    case $o in
    M) modes=$OPTARG ;;
    b) build=$OPTARG ;; m) model=$OPTARG ;; t) threads=$OPTARG ;; s) steps=$OPTARG ;;
    r) reps=$OPTARG ;; e) max=$OPTARG ;; n) skip=--skip-train ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/runtime/tools/bench/whale-bench
run=$build/runtime/tools/run/whale-run
[ -x "$bench" ] || { echo "offload-bench: $bench not built (ninja -C $build)" >&2; exit 1; }

python3 "$here/offload-bench.py" --build "$build" --model "$model" --threads "$threads" \
    --steps "$steps" --reps "$reps" --modes "$modes" $skip

echo
echo "# bandwidth of the offload paths (GB/s, best of $reps)"
echo "## one task: memcpy and the local handle"
"$bench" offload bw -e "$max" -r "$reps"
echo "## two tasks on this node (whale-run, UCX shared memory)"
"$run" -n 2 --no-label "$bench" offload bw -e "$max" -r "$reps" | grep -v '^$'
if [ -n "${SLURM_CONF:-}" ] && command -v srun > /dev/null; then
    echo "## two nodes (srun -N2, UCX_TLS=tcp,self)"
    UCX_TLS=tcp,self timeout 600 srun -N2 -n2 --whale-dp=2 "$(readlink -f "$bench")" offload bw \
        -e "$max" -r "$reps" | grep -v '^$' || echo "(srun failed)"
fi
