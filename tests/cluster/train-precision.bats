#!/usr/bin/env bats
# Mixed precision across namespace nodes: --whale-precision reaches every
# task through the plan; TP x PP x DP x ZeRO in bf16 gives the single-rank
# bf16 loss at every step of a 20-step run (3e-4 relative: fp32 partial sums
# in another order can round a value the other way, see
# tests/unit/engine/test_engine3d_bf16.c); an fp16 overflow injected at
# step 5 is skipped on every rank and the loss scale backs off; gradients
# reduced in bf16 stay within the same bound; bad values
# are refused before any task starts.

load train_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"

setup_file() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  export TMPD=$(mktemp -d)
  make_corpus "$TMPD"
  printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' > "$TMPD/t4.conf"
  "$TRAIN" $(train_args) --precision bf16 --metrics "$TMPD/ref-bf16.jsonl" > /dev/null 2>&1
  "$TRAIN" $(train_args) --precision fp32 --metrics "$TMPD/ref-fp32.jsonl" > /dev/null 2>&1
  "$TRAIN" $(train_args) --precision fp16 --inject-overflow 5 --metrics "$TMPD/ref-fp16.jsonl" > /dev/null 2>&1
}
teardown_file() { rm -rf "$TMPD"; }

train_args() {
  echo --model "$TMPD/t4.conf" --data "$TMPD/corpus.txt" --steps 20 --batch 8 --seq 32 \
       --grad-accum 4 --threads 1 --no-progress
}

# close_losses REF OTHER TOL PRECISION: 20 steps each, every loss within TOL
# relative, every step ran in PRECISION, same skipped steps and loss scale
close_losses() {
  python3 - "$@" <<'PY'
import json, sys
def load(p):
    return [json.loads(l) for l in open(p) if l.startswith('{"step"')]
a, b = load(sys.argv[1]), load(sys.argv[2])
tol, prec = float(sys.argv[3]), sys.argv[4]
assert len(a) == 20 and len(b) == 20, (len(a), len(b))
assert all(x["precision"] == prec for x in b), {x["precision"] for x in b}
for x, y in zip(a, b):
    assert x["skipped"] == y["skipped"] and x["loss_scale"] == y["loss_scale"], (x["step"], x, y)
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
print("%s: worst relative loss difference %.2e (tolerance %g)" % (prec, worst, tol))
sys.exit(0 if worst <= tol else 1)
PY
}

# srun_prec NAME REF PRECISION SRUN-OPTIONS... -- TRAIN-OPTIONS...
srun_prec() {
  local name=$1 ref=$2 prec=$3; shift 3
  local sopts=()
  while [ "$1" != "--" ]; do sopts+=("$1"); shift; done
  shift
  run timeout 300 srun "${sopts[@]}" "$TRAIN" $(train_args) --metrics "$TMPD/$name.jsonl" "$@"
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  run close_losses "$TMPD/$ref" "$TMPD/$name.jsonl" 3e-4 "$prec"
  echo "$name: $output"
  [ "$status" -eq 0 ]
}

@test "bf16 single rank tracks fp32 (final loss within 1 %)" {
  run python3 - "$TMPD/ref-fp32.jsonl" "$TMPD/ref-bf16.jsonl" <<'PY'
import json, sys
f = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
b = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"')]
assert f[-1]["loss"] < f[0]["loss"] - 0.3, "fp32 reference does not learn"
rel = abs(b[-1]["loss"] - f[-1]["loss"]) / f[-1]["loss"]
print("final loss fp32 %.4f bf16 %.4f (%.2f %%)" % (f[-1]["loss"], b[-1]["loss"], 100 * rel))
sys.exit(0 if rel < 0.01 else 1)
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "srun -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=1 --whale-precision=bf16: single-rank bf16 loss" {
  srun_prec bf16-z1 ref-bf16.jsonl bf16 -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=1 --whale-precision=bf16 --
}

@test "TP=2 PP=2 DP=2 ZeRO 3 interleaved, bf16 from the plugin: single-rank bf16 loss" {
  srun_prec bf16-z3 ref-bf16.jsonl bf16 -N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2 --whale-zero=3 --whale-precision=bf16 -- --schedule interleaved --interleave 2
}

@test "bf16 DP=2 ZeRO 2 reducing gradients in bf16 (--grad-reduce 16): single-rank bf16 loss" {
  srun_prec bf16-gr16 ref-bf16.jsonl bf16 -N2 -n2 --whale-dp=2 --whale-zero=2 --whale-precision=bf16 -- --grad-reduce 16
}

@test "fp16 DP=2 ZeRO 2 with an overflow at step 5: skipped on every rank, scale backs off" {
  srun_prec fp16-dp2 ref-fp16.jsonl fp16 -N2 -n2 --whale-dp=2 --whale-zero=2 --whale-precision=fp16 -- --inject-overflow 5
  run python3 - "$TMPD/fp16-dp2.jsonl" <<'PY'
import json, sys
m = {d["step"]: d for d in (json.loads(l) for l in open(sys.argv[1])) if "step" in d}
assert m[5]["skipped"] and m[5]["loss_scale"] == m[4]["loss_scale"] / 2, (m[4], m[5])
assert m[20]["skipped_steps"] == 1 and not m[6]["skipped"]
print("step 5 skipped, scale %g -> %g" % (m[4]["loss_scale"], m[5]["loss_scale"]))
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "--whale-precision=fp8 is refused before any task starts" {
  run timeout 300 srun -N1 -n1 --whale-precision=fp8 true
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"--whale-precision=fp8: must be one of fp32, bf16, fp16"* ]]
}
