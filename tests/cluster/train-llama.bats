#!/usr/bin/env bats
# Llama-style blocks (RMSNorm, SwiGLU, rotary, GQA, untied head, blocked
# attention) across namespace nodes: srun --whale-tp/--whale-pp/--whale-dp
# with and without sequence parallelism gives the single-rank loss at every
# step of a 20-step run within 1e-5 relative.

load train_helpers
load train_layouts

setup_file() {
  layouts_setup_file
  printf 'Name=l4 Layers=4 Hidden=64 Heads=4 KVHeads=2 FFN=176 Seq=64 Vocab=256 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no TiedEmbeddings=no Attention=flash\n' > "$TMPD/l4.conf"
  "$TRAIN" $(train_args) --metrics "$TMPD/ref.jsonl" > /dev/null 2>&1
}

train_args() {
  echo --model "$TMPD/l4.conf" --data "$TMPD/corpus.txt" --steps 20 --batch 8 --seq 32 \
       --grad-accum 4 --threads 1 --no-progress --lr 2e-3
}

@test "Llama reference run trains (loss falls)" {
  reference_learns
}

@test "Llama: srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=1: same loss as one rank" {
  srun_train tp2pp2dp2 -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=1 --
}

@test "Llama: TP=2 PP=2 DP=2 with sequence parallelism and ZeRO 3: same loss" {
  srun_train sp -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=3 -- --seqpar
  grep -q '"seqpar":true' "$TMPD/sp.jsonl"
}
