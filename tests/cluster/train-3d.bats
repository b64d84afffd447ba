#!/usr/bin/env bats
# Tensor x pipeline x data parallelism across namespace nodes (the README's
# main command): srun --whale-tp/--whale-pp/--whale-dp with ZeRO, schedules
# and recompute policies gives the single-rank loss at every step of a
# 20-step run within 1e-5 relative; WHALE_TRACE writes a trace per rank.

load train_helpers
load train_layouts

setup_file() {
  layouts_setup_file
  # 4 blocks: PP=2 x interleave 2 and PP=4 both get a block per stage
  printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$TMPD/t4.conf"
  "$TRAIN" $(train_args) --metrics "$TMPD/ref.jsonl" > /dev/null 2>&1
  # a MoE model: 4 experts top-2 with capacity dropping and a shared expert;
  # routing and its losses are per micro-batch, so its reference runs the
  # layouts' micro-batches of one sequence
  printf 'Name=m4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\nExperts=4 TopK=2 ExpertFFN=64 SharedExperts=1 CapacityFactor=1.0\n' > "$TMPD/m4.conf"
  "$TRAIN" $(train_args) --model "$TMPD/m4.conf" --micro-batch 1 --grad-accum 8 \
      --metrics "$TMPD/ref_moe.jsonl" > /dev/null 2>&1
}

train_args() {
  echo --model "$TMPD/t4.conf" --data "$TMPD/corpus.txt" --steps 20 --batch 8 --seq 32 \
       --grad-accum 4 --threads 1 --no-progress
}

@test "reference run trains (loss falls)" {
  reference_learns
}

@test "srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 (1F1B): same loss as one rank" {
  srun_train tp2pp2dp2 -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --
}

@test "TP=2 PP=2 DP=2 with ZeRO 3 and full recomputation from the plugin: same loss" {
  srun_train z3full -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=3 --whale-recompute=full --
}

@test "TP=2 PP=2 DP=2 interleaved (2 chunks per rank): same loss" {
  srun_train interleaved -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 -- --schedule interleaved --interleave 2
}

@test "PP=4 DP=2 ZeRO 2 recompute auto: same loss" {
  srun_train pp4auto -N4 -n8 --whale-pp=4 --whale-dp=2 --whale-zero=2 --whale-recompute=auto --
}

@test "MoE blocks: srun -N4 -n8 TP=2 PP=2 DP=2 ZeRO 1: same loss as one rank" {
  run timeout 300 srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=1 "$TRAIN" \
      $(train_args) --model "$TMPD/m4.conf" --micro-batch 1 --metrics "$TMPD/moe.jsonl"
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref_moe.jsonl" "$TMPD/moe.jsonl"
  echo "moe: $output"
  [ "$status" -eq 0 ]
  grep -q '"moe":{' "$TMPD/moe.jsonl"
}

@test "WHALE_TRACE under srun: one Chrome trace per rank with the 1F1B order" {
  WHALE_TRACE="$TMPD/tr.json" run timeout 300 srun -N2 -n2 --whale-pp=2 "$TRAIN" $(train_args) --steps 3 --metrics "$TMPD/tr.jsonl"
  [ "$status" -eq 0 ]
  run python3 - "$TMPD" <<'PY'
import json, sys
want = {0: "F0 F1 B0 F2 B1 F3 B2 B3", 1: "F0 B0 F1 B1 F2 B2 F3 B3"}
for r in (0, 1):
    ev = json.load(open("%s/tr-rank%d.json" % (sys.argv[1], r)))["traceEvents"]
    fb = sorted((e["ts"], e["cat"][0].upper(), e["args"]["mb"]) for e in ev
                if e.get("cat") in ("forward", "backward"))
    assert len(fb) == 24, len(fb)
    for s in range(3):
        got = " ".join("%s%d" % (k, mb) for _, k, mb in fb[8 * s:8 * s + 8])
        assert got == want[r], (r, got)
print("ok")
PY
  echo "$output"
  [ "$status" -eq 0 ]
}
