#!/bin/sh
# The issue's resharding case with the real engine under whale-run (real
# processes, PMIx + UCX): whale-train saves at step 10 as TP=2 PP=2 DP=2 with
# ZeRO-3, and resumes from it as TP=4 PP=1 DP=2 ZeRO-0, as PP=4, and as one
# rank; steps 11..20 equal the uninterrupted single-rank run (1e-5 relative).
# Usage: train_reshard_3d.sh WHALE_RUN WHALE_TRAIN WHALE_CKPT
set -eu
RUN=$1 TRAIN=$2 TOOL=$3
. "$(dirname "$0")/../../lib/layouts.sh"
layout_corpus "$T/corpus.txt"
printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' >"$T/t4.conf"
C="--model $T/t4.conf --data $T/corpus.txt --steps 20 --batch 8 --seq 32 --grad-accum 4 --threads 1 --no-progress"

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
