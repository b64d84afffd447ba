#!/bin/sh
# The issue's resharding case with the real engine under whale-run (real
# processes, PMIx + UCX): whale-train saves at step 10 as TP=2 PP=2 DP=2 with
# ZeRO-3, and resumes from it as TP=4 PP=1 DP=2 ZeRO-0, as PP=4, and as one
# rank; steps 11..20 equal the uninterrupted single-rank run (1e-5 relative).
# Usage: train_reshard_3d.sh WHALE_RUN WHALE_TRAIN WHALE_CKPT
set -eu
RUN=$1 TRAIN=$2 TOOL=$3
T=$(mktemp -d /tmp/whale-ckpt-3d.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 - "$T/corpus.txt" <<'PY'
import sys, random
r = random.Random(7)
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os", "\n",
         "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PY
printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' >"$T/t4.conf"
C="--model $T/t4.conf --data $T/corpus.txt --steps 20 --batch 8 --seq 32 --grad-accum 4 --threads 1 --no-progress"

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

run ref 1 --
run save_tp2_pp2_dp2_z3 8 --tp 2 --pp 2 --dp 2 -- --zero 3 --whale-ckpt-dir "$T/ck" --whale-ckpt-every 10
compare save_tp2_pp2_dp2_z3 1
"$TOOL" verify "$T/ck" --which 10 >/dev/null || fail "step 10 does not verify"
# the plan line is JSON; its key order is not part of the contract
"$TOOL" inspect "$T/ck" --which 10 | python3 -c '
import json, sys
plan = json.loads(next(l for l in sys.stdin if l.startswith("plan ")).split(None, 1)[1])
sys.exit(0 if [plan.get(k) for k in ("tp", "pp", "dp", "zero")] == [2, 2, 2, 3] else 1)' ||
    fail "plan not recorded"
run resume_tp4_dp2_z0 8 --tp 4 --dp 2 -- --zero 0 --resume "$T/ck/step-00000010"
compare resume_tp4_dp2_z0 11
run resume_pp4_z1 4 --pp 4 -- --zero 1 --resume "$T/ck/step-00000010"
compare resume_pp4_z1 11
run resume_one_rank 1 -- --resume "$T/ck/step-00000010"
compare resume_one_rank 11
echo "ok: saved as TP2xPP2xDP2 ZeRO-3, resumed as TP4xDP2 ZeRO-0, PP4 ZeRO-1 and 1 rank"
