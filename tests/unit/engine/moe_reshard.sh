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
. "$(dirname "$0")/../../lib/layouts.sh"
layout_corpus "$T/corpus.txt"
printf 'Name=m4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\nExperts=4 TopK=2 ExpertFFN=64 SharedExperts=1 CapacityFactor=1.0 AuxLoss=0.02 ZLoss=0.002\n' >"$T/m4.conf"
C="--model $T/m4.conf --data $T/corpus.txt --steps 20 --batch 8 --seq 32 --micro-batch 2 --threads 1 --no-progress"

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
