#!/bin/sh
# Expert parallelism as separate processes through whale-run: every layout
# equals one rank over 20 steps (1e-5 relative loss):
#   GPT blocks, 4 experts top-2, capacity factor 1.0 (tokens dropped), a
#   shared expert, biases:  EP2 on DP4 with ZeRO 1, EP2 on DP4 with ZeRO 3
#   and the parameters offloaded (expert-data-parallel groups of 2),
#   EP2 x DP2 x TP2 with ZeRO 3, EP2 x DP2 x PP2
#   Llama blocks, 8 experts top-2 (4 per EP rank), sigmoid gates, dropless,
#   no biases:              EP2 x DP2 in fp32 and in bf16 (against one bf16
#                           rank, within the bf16 layouts' 1e-3)
# and a checkpoint saved with EP 2 resumes with EP 4 (steps 11..20 equal).
# Each rank allocates only its experts: the EP 2 x DP 2 run's parameter
# memory per rank is one rank's less half the experts'.
# The EP2 x DP2 x TP2 run's routing statistics (its EP group is the whole
# batch) equal one rank's: routed and dropped assignments, aux and z loss.
# Every layout runs micro-batches of 2 sequences (routing capacity and the
# auxiliary losses are per micro-batch of a rank, EP or not). An EP run's
# summary says "ep":2, so a run that silently fell back to EP 1 fails.
# usage: moe_ep.sh WHALE_RUN WHALE_TRAIN
set -eu
RUN=$1 TRAIN=$2
T=$(mktemp -d /tmp/whale-moe-ep.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 - "$T/corpus.txt" <<'PY'
import sys, random
r = random.Random(7)
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os", "\n",
         "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PY
printf 'Name=g4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\nExperts=4 TopK=2 ExpertFFN=64 SharedExperts=1 CapacityFactor=1.0 AuxLoss=0.02 ZLoss=0.002\n' >"$T/g4.conf"
printf 'Name=l8 Layers=2 Hidden=64 Heads=4 KVHeads=2 FFN=128 Seq=64 Vocab=256 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no TiedEmbeddings=no\nExperts=8 TopK=2 ExpertFFN=32 Gate=sigmoid CapacityFactor=dropless AuxLoss=0.02 ZLoss=0.002\n' >"$T/l8.conf"
C="--data $T/corpus.txt --steps 20 --batch 8 --seq 32 --micro-batch 2 --threads 1 --no-progress"

run() { # name model ntasks whale-run-args -- whale-train-args
    name=$1 model=$2 n=$3; shift 3
    rargs=""
    while [ "$1" != "--" ]; do rargs="$rargs $1"; shift; done
    shift
    # shellcheck disable=SC2086
    timeout 300 "$RUN" -n "$n" --timeout 280 $rargs "$TRAIN" --model "$T/$model.conf" $C \
        --metrics "$T/$name.jsonl" "$@" >"$T/$name.out" 2>&1 || { tail -20 "$T/$name.out" >&2; fail "$name"; }
}
compare() { # name reference expected-ep [first-step [tolerance]]
    python3 - "$T/$2.jsonl" "$T/$1.jsonl" "$1" "$3" "${4:-1}" "${5:-1e-5}" <<'PY' || fail "$1: losses differ from $2"
import json, sys
def load(p):
    return [json.loads(l) for l in open(p)]
def losses(j):
    return {d["step"]: d["loss"] for d in j if "step" in d}
ref, run = load(sys.argv[1]), load(sys.argv[2])
a, b = losses(ref), losses(run)
ep = [d["summary"].get("ep") for d in run if "summary" in d]
assert ep == [int(sys.argv[4])], "summary ep %s" % ep
first, tol = int(sys.argv[5]), float(sys.argv[6])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print("  %-24s steps %d..20, worst rel loss diff %.1e (<= %g)" % (sys.argv[3], first, worst, tol))
sys.exit(0 if worst <= tol else 1)
PY
}

# the routing statistics of an EP run describe its EP group: where the
# group is the whole DP group (EP = DP), rank 0's per-step routed and
# dropped assignments equal one rank's over the whole batch, and its aux
# and z losses (means over block forwards) equal one rank's too
compare_moe() { # name reference
    python3 - "$T/$2.jsonl" "$T/$1.jsonl" "$1" <<'PY' || fail "$1: routing statistics differ from $2"
import json, sys
def moe(p):
    return {d["step"]: d["moe"] for d in map(json.loads, open(p)) if "step" in d}
a, b = moe(sys.argv[1]), moe(sys.argv[2])
assert sorted(a) == sorted(b) and a, (sorted(a), sorted(b))
worst = 0.0
for s in a:
    for k in ("routed", "dropped"):
        assert a[s][k] == b[s][k], "step %d %s: %d, one rank %d" % (s, k, b[s][k], a[s][k])
    for k in ("aux", "zloss"):
        worst = max(worst, abs(a[s][k] - b[s][k]) / abs(a[s][k]))
drops = sum(a[s]["dropped"] for s in a)
print("  %-24s routed/dropped per step equal (%d dropped in all), aux/zloss worst rel %.1e"
      % (sys.argv[3], drops, worst))
assert drops > 0, "no dropped assignment: the check is vacuous"
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

run ref g4 1 -- --grad-accum 4
run ep2_dp4_z1 g4 4 --dp 4 --ep 2 -- --grad-accum 1 --zero 1 \
    --whale-ckpt-dir "$T/ck" --whale-ckpt-every 10
compare ep2_dp4_z1 ref 2
# the experts are saved by global index: EP 2's checkpoint resumes as EP 4
run resume_ep4 g4 4 --dp 4 --ep 4 -- --grad-accum 1 --zero 1 --resume "$T/ck/step-00000010"
compare resume_ep4 ref 4 11
run ep2_tp2_z3 g4 4 --dp 2 --tp 2 --ep 2 -- --grad-accum 2 --zero 3
compare ep2_tp2_z3 ref 2
compare_moe ep2_tp2_z3 ref
# ZeRO 3 with an expert-data-parallel group of 2 (EP 2 on DP 4), the
# parameter shards and the optimizer in host memory
run ep2_dp4_z3_off g4 4 --dp 4 --ep 2 -- --grad-accum 1 --zero 3 --offload params
compare ep2_dp4_z3_off ref 2
run ep2_pp2 g4 4 --dp 2 --pp 2 --ep 2 -- --grad-accum 2
compare ep2_pp2 ref 2

run ref_l8 l8 1 -- --grad-accum 4
run ep2_dropless l8 2 --dp 2 --ep 2 -- --grad-accum 2
compare ep2_dropless ref_l8 2
# each rank holds only its experts: EP 2's parameter memory is one rank's
# less half the experts' (8 experts x 3 matrices 32x64 in 2 layers, fp32)
python3 - "$T/ref_l8.jsonl" "$T/ep2_dropless.jsonl" <<'PY' || fail "ep2_dropless: the experts are not sharded"
import json, sys
def param_mb(p):
    return [json.loads(l)["summary"]["param_mb"] for l in open(p) if '"summary"' in l][0]
one, ep2 = param_mb(sys.argv[1]), param_mb(sys.argv[2])
experts_mb = 2 * 8 * 3 * 32 * 64 * 4 / 1048576.0
saved = one - ep2
print("  param memory: one rank %.3f MiB, EP 2 %.3f MiB per rank (saved %.3f, experts' half %.3f)"
      % (one, ep2, saved, experts_mb / 2))
sys.exit(0 if abs(saved - experts_mb / 2) <= 0.05 * experts_mb else 1)
PY
# the exchanges receive into shared-memory windows that the peers write
# (the default on one node; the all-to-all forced onto the node's segment,
# whose single-copy path is the one that uses them) or, with
# WHALE_MOE_EP_WINDOW=0, read the peers' buffers: the same losses bit for bit
(export WHALE_COLL_ALGO=alltoall=shm WHALE_LOG=debug; run ep2_win l8 2 --dp 2 --ep 2 -- --grad-accum 2)
(export WHALE_COLL_ALGO=alltoall=shm WHALE_MOE_EP_WINDOW=0; run ep2_nowin l8 2 --dp 2 --ep 2 -- --grad-accum 2)
grep -q "MoE exchanges receive into a shared-memory window" "$T/ep2_win.out" ||
    fail "ep2_win: the exchanges took no receive window"
compare ep2_win ref_l8 2
python3 - "$T/ep2_win.jsonl" "$T/ep2_nowin.jsonl" <<'PY' || fail "ep2_win: the losses differ from the exchanges without windows"
import json, sys
def losses(p):
    return [(d["step"], d["loss"]) for d in map(json.loads, open(p)) if "step" in d]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("  %-24s %d steps, losses equal to the run without windows: %s" % ("ep2_win", len(a), a == b))
sys.exit(0 if a == b and len(a) == 20 else 1)
PY
run ref_l8_bf16 l8 1 -- --grad-accum 4 --precision bf16
run ep2_dropless_bf16 l8 2 --dp 2 --ep 2 -- --grad-accum 2 --precision bf16
# bf16: a sum reordered by any layout (DP 2 without EP as well) can move
# a 16-bit weight by one ulp (3.9e-3 relative); the bf16 layout tests
# (test_engine3d_moe_bf16.c) hold them to 1e-3 relative. Measured: DP 2
# without EP 2.4e-5, EP 2 x DP 2 2.7e-5.
compare ep2_dropless_bf16 ref_l8_bf16 2 1 1e-3
echo "ok: MoE EP2 on DP4 ZeRO-1, x TP2 ZeRO-3, x PP2, x DP2 dropless fp32 and bf16 equal one rank; EP2 -> EP4 resume"
