#!/bin/bash
# Host offload benchmark: one command, a summary of the targets at
# the end. Figures, each beside its competitor measured in the same run:
#   - host AdamW vs torch.optim.AdamW (single-tensor, foreach, fused where the
#     CPU torch has it) on gpt2-124m's tensors          target: >= 1.5x
#     beside the roofline: a loop that moves AdamW's 28 B/param without its
#     arithmetic (both AdamWs as a fraction of it), and, labelled apart, the
#     step as training runs it (clip folded; mixed bf16 copy in the same pass)
#   - step-time overhead of offload optimizer / params vs none, the fraction
#     of transfers hidden and the arena peak drop against the formula
#     (whale-train, gpt2-124m width; -L fewer layers to fit the time), rounds
#     alternated                       targets: optimizer <= 15 %, drop within 5 %
#   - bandwidth of each offload path beside plain memcpy: the local tier
#     (RMA through its private UCX endpoint), another task on this node
#     (whale-run -n 2, shared memory) and, when a cluster is reachable
#     (SLURM_CONF, e.g. whale-minicluster env), another node over tcp
#     (srun -N2, UCX_TLS=tcp,self)
# Every figure carries the load average; a speed target missed at a load
# above 1.5x the cores is reported "not judged", not "not met".
# usage: contrib/bench/offload-bench.sh [-b BUILD_DIR] [-m MODEL] [-L LAYERS] [-t THREADS]
#                                       [-s STEPS] [-r REPS] [-R ROUNDS] [-e MAX_BYTES] [-n]
#                                       [-M ZERO:MODE,...] [-S SEQ] [-B BATCH] [-p PYTHON]
#                                       [-A] [-q]
#   -n  skip the whale-train runs (AdamW and bandwidth only)
#   -A  skip the AdamW comparison (whale-train runs and bandwidth only)
#   -p  the interpreter whose torch is the competitor (default /usr/bin/python3,
#       Debian's torch 1.13, which has no CPU fused AdamW; a venv with torch
#       >= 2.4 has it); the summary names the torch version compared against
#   -q  quiet: run inside a session of its own raised to nice -20 (needs root;
#       as comm-vs-openmpi.sh -P), holding $WHALE_BENCH_LOCK if set (flock)
#   -M  whale-train runs (default 0:none,0:optimizer,0:optimizer@memcpy,3:none,3:optimizer,
#       3:params; MODE@memcpy: the local tier moved with memcpy instead of UCX;
#       MODE@spare: the state in a spare task's memory, e.g. 3:params@spare)
set -euo pipefail
build=build model=gpt2-124m layers=0 threads=2 steps=4 reps=5 rounds=3 max=64M skip= seq=128 batch=4
py=/usr/bin/python3 skipa= quiet=
modes=0:none,0:optimizer,0:optimizer@memcpy,3:none,3:optimizer,3:params
while getopts "b:m:L:t:s:r:R:e:M:S:B:p:Aqnh" o; do
    case $o in
    p) py=$OPTARG ;; A) skipa=--skip-adamw ;; q) quiet=1 ;;
    S) seq=$OPTARG ;; B) batch=$OPTARG ;;
    M) modes=$OPTARG ;; L) layers=$OPTARG ;; R) rounds=$OPTARG ;;
    b) build=$OPTARG ;; m) model=$OPTARG ;; t) threads=$OPTARG ;; s) steps=$OPTARG ;;
    r) reps=$OPTARG ;; e) max=$OPTARG ;; n) skip=--skip-train ;;
    *) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$quiet" ] && [ -z "${WHALE_BENCH_RAISED:-}" ]; then
    # a session of its own (the kernel shares CPU per session first), raised
    raise='echo -20 > /proc/self/autogroup 2>/dev/null || echo "offload-bench: cannot raise (not root): not quiet" >&2; exec bash "$@"'
    lock=(); [ -n "${WHALE_BENCH_LOCK:-}" ] && lock=(flock "$WHALE_BENCH_LOCK")
    WHALE_BENCH_RAISED=1 exec "${lock[@]}" setsid -w bash -c "$raise" bash "$0" "$@"
fi
[ -x "$py" ] || { echo "offload-bench: -p $py: not an executable interpreter" >&2; exit 2; }
bench=$build/runtime/tools/bench/whale-bench
run=$build/runtime/tools/run/whale-run
[ -x "$bench" ] || { echo "offload-bench: $bench not built (ninja -C $build)" >&2; exit 1; }
summary=$(mktemp)
trap 'rm -f "$summary" "$summary.bw"' EXIT

python3 "$here/offload-bench.py" --build "$build" --model "$model" --layers "$layers" \
    --threads "$threads" --steps "$steps" --reps "$reps" --rounds "$rounds" --modes "$modes" \
    --seq "$seq" --batch "$batch" --summary "$summary" --torch-python "$py" $skip $skipa

echo
echo "# bandwidth of the offload paths (GB/s best/median of $reps; load $(cut -d' ' -f1 /proc/loadavg))"
echo "## one task: memcpy and the local tier through UCX"
"$bench" offload bw -e "$max" -r "$reps" | tee "$summary.bw"
# the largest size: UCX local tier against memcpy (medians)
awk -v load="$(cut -d' ' -f1 /proc/loadavg)" '
    /local tier through UCX/ { sub(/.*local tier through UCX /, ""); tl = $0 }
    $1 ~ /^[0-9]+$/ { n = $1; split($2, m, "/"); split($3, p, "/"); split($4, g, "/") }
    END { if (n) printf "local tier (UCX %s) at %d B: put %.2f, get %.2f GB/s vs memcpy %.2f " \
          "GB/s (medians; %.2fx / %.2fx; load %s) -- figure, no target\n", tl, n, p[2], g[2], \
          m[2], p[2] / m[2], g[2] / m[2], load }' "$summary.bw" >> "$summary"
echo "## two tasks on this node (whale-run, UCX shared memory)"
"$run" -n 2 --no-label "$bench" offload bw -e "$max" -r "$reps" | grep -v '^$'
if [ -n "${SLURM_CONF:-}" ] && command -v srun > /dev/null; then
    echo "## two nodes (srun -N2, UCX_TLS=tcp,self)"
    UCX_TLS=tcp,self timeout 600 srun -N2 -n2 --whale-dp=2 "$(readlink -f "$bench")" offload bw \
        -e "$max" -r "$reps" | grep -v '^$' || echo "(srun failed)"
fi

echo
echo "# summary (load average now $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
cat "$summary"
