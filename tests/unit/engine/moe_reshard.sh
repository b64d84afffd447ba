#!/bin/sh
# A MoE model (GPT blocks, 4 experts top-2, capacity factor 1.0, a shared
# expert) as separate processes through whale-run: DP 2 with ZeRO 3 and TP 2
# x PP 2 equal one rank over 20 steps (1e-5 relative), and a checkpoint
# saved as TP 2 x PP 2 resumes on one rank and as DP 2 ZeRO 1 with the same
# losses. Every layout runs micro-batches of 2 sequences: routing capacity and
# the auxiliary losses are per micro-batch.
# usage: moe_reshard.sh WHALE_RUN WHALE_TRAIN
set -eu
RUN=$1 TRAIN=$2
T=$(mktemp -d /tmp/whale-moe-3d.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 - "$T/corpus.txt" <<'PY'
import sys, random
r = random.Random(7)
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os", "\n",
         "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PY
printf 'Name=m4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\nExperts=4 TopK=2 ExpertFFN=64 SharedExperts=1 CapacityFactor=1.0 AuxLoss=0.02 ZLoss=0.002\n' >"$T/m4.conf"
C="--model $T/m4.conf --data $T/corpus.txt --steps 20 --batch 8 --seq 32 --micro-batch 2 --threads 1 --no-progress"

run() { # name ntasks whale-run-args -- whale-train-args
    name=$1 n=$2; shift 2
    rargs=""
    while [ "$1" != "--" ]; do rargs="$rargs $1"; shift; done
    shift
    # shellcheck disable=SC2086
    timeout 300 "$RUN" -n "$n" --timeout 280 $rargs "$TRAIN" $C --metrics "$T/$name.jsonl" "$@" \
        >"$T/$name.out" 2>&1 || { tail -20 "$T/$name.out" >&2; fail "$name"; }
}
compare() { # name first-step
    python3 - "$T/ref.jsonl" "$T/$1.jsonl" "$2" "$1" <<'PY' || fail "$1: losses differ"
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b, first = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print("  %-36s steps %d..20, worst rel loss diff %.1e" % (sys.argv[4], first, worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

run ref 1 -- --grad-accum 4
run dp2_z3 2 --dp 2 -- --zero 3 --grad-accum 2
compare dp2_z3 1
run save_tp2_pp2 4 --tp 2 --pp 2 -- --grad-accum 4 --whale-ckpt-dir "$T/ck" --whale-ckpt-every 10
compare save_tp2_pp2 1
run resume_one_rank 1 -- --grad-accum 4 --resume "$T/ck/step-00000010"
compare resume_one_rank 11
run resume_dp2_z1 2 --dp 2 -- --zero 1 --grad-accum 2 --resume "$T/ck/step-00000010"
compare resume_dp2_z1 11
echo "ok: MoE DP2 ZeRO-3 and TP2xPP2 equal one rank; saved as TP2xPP2, resumed on 1 rank and DP2 ZeRO-1"
