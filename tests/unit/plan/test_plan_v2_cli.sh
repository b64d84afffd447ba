#!/bin/sh
# Planner v2 on the command line: labelled MFU/HFU rates, what once went
# wrong there (--evaluate of a configuration that does not fit, --explain-model
# without --nodes, --seqpar yes with --tp 1), --precision, Llama-style
# presets, and whale-train refusing a model description the engine cannot
# run (naming the model file field).
#   test_plan_v2_cli.sh /path/to/whale-plan /path/to/whale-train
set -u
P=$1
TRAIN=$2
fails=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

expect() { # expect RC DESCRIPTION -- command...
    want=$1; what=$2; shift 3
    "$@" > "$TMP/out" 2> "$TMP/err"
    got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: $what: exit $got, wanted $want"; cat "$TMP/out" "$TMP/err"; fails=$((fails + 1))
    fi
}
has() { # has FILE PATTERN DESCRIPTION
    grep -q -- "$2" "$1" || { echo "FAIL: $3: '$2' not in output"; cat "$1"; fails=$((fails + 1)); }
}
hasnt() {
    ! grep -q -- "$2" "$1" || { echo "FAIL: $3: '$2' in output"; cat "$1"; fails=$((fails + 1)); }
}

# labelled rates everywhere a TFLOP/s figure appears
expect 0 "search" -- "$P" -m llama3-8b -b 64 -N 1 -G H100-80GB
has "$TMP/out" "hw TF/s" "hardware column"
has "$TMP/out" "modelTF/s" "model column"
has "$TMP/out" "hardware .* TFLOP/s per device (recompute counted, HFU" "breakdown hardware label"
has "$TMP/out" "model .* TFLOP/s per device (6N + attention, MFU" "breakdown model label"
has "$TMP/out" "swiglu MLP, GQA 8 kv heads, rmsnorm, rotary positions, flash attention" "model description line"
expect 0 "quiet" -- "$P" -m llama3-8b -b 64 -N 1 -G H100-80GB -q
has "$TMP/out" "hardware / .* model TFLOP/s/device (MFU" "quiet labels"
expect 0 "json" -- "$P" -m llama3-8b -b 64 -N 1 -G H100-80GB -q --json "$TMP/p.json"
has "$TMP/p.json" '"model_tflops_per_gpu"' "json model rate"
has "$TMP/p.json" '"hardware_tflops_per_gpu"' "json hardware rate"
has "$TMP/p.json" '"precision": "bf16"' "json precision"

# defect: --evaluate of a configuration that does not fit prints its whole prediction
expect 1 "evaluate, does not fit" -- "$P" -m gpt-39.1b -b 1536 -N 2 --tp 8 --pp 2 --zero 0 \
    --recompute none --microbatch 4 --interleave 1 --offload none --seqpar no --evaluate
has "$TMP/err" "needs 1[0-9.]* GiB per device even with micro-batch 4" "reason names memory at micro-batch 4"
hasnt "$TMP/err" "no valid layout" "no 'no valid layout' for a fixed config that does not fit"
has "$TMP/out" "evaluated (does not fit): tp=8 pp=2 dp=1 mb=4" "evaluated line"
has "$TMP/out" "over by [0-9.]* GiB" "how far over"
has "$TMP/out" "time per step" "whole prediction"
has "$TMP/out" "rates: hardware" "rates of the config that does not fit"

# defect: --explain-model needs no cluster
expect 0 "explain-model alone" -- "$P" --explain-model -G B200
has "$TMP/out" "B200 .*peak 2250" "device constants"
has "$TMP/out" "GEMM efficiency" "per-device GEMM efficiency"

# defect: --seqpar yes with --tp 1
expect 2 "seqpar with tp 1" -- "$P" -m gpt-1.7b -b 512 -N 4 --tp 1 --seqpar yes
has "$TMP/err" "--seqpar yes needs --tp >= 2" "seqpar message"
expect 0 "seqpar yes, tp free" -- "$P" -m gpt-1.7b -b 512 -N 4 --seqpar yes -q
hasnt "$TMP/out" "tp=1 " "seqpar yes picks tp >= 2"

# precision
expect 2 "bad precision" -- "$P" -m gpt-1.7b -b 512 -N 4 --precision fp8
has "$TMP/err" "expected auto, fp32, bf16 or fp16" "precision message"
expect 0 "fp32 on GPUs" -- "$P" -m gpt-1.7b -b 512 -N 4 --precision fp32 -q
has "$TMP/out" "step" "fp32 plan"

# uneven interleaving: 126 layers on 16 stages
expect 0 "uneven interleave" -- "$P" -m llama3-405b -b 2048 -N 1024 -G H100-80GB --tp 8 --pp 16 \
    --zero 2 --seqpar yes --microbatch 1 --interleave 7 -q --json "$TMP/l.json"
has "$TMP/l.json" '"stage_layers"' "uneven chunks written to the plan"

# whale-train refuses a description the engine cannot run, naming the field
# (Llama-style blocks run; ALiBi positions do not)
printf 'Name=ab Layers=2 Hidden=64 Heads=4 Seq=32 Vocab=256 Position=alibi\n' > "$TMP/alibi.conf"
expect 1 "whale-train, alibi model" -- "$TRAIN" --model "$TMP/alibi.conf" --data "$TMP/none.bin" --steps 1
has "$TMP/err" "alibi.conf: Position=alibi" "refusal names the model file field"

# a mixed cluster's uneven batch split is predicted and written as planned:
# per-replica shares (dp_batch, samples) that add up to the global batch,
# each a multiple of the micro-batch (what whale-train runs at ZeRO 0/1)
expect 0 "mixed cluster plan file" -- "$P" -m gpt-3.6b -b 512 -N 2 -G H100-80GB --group 2:8:A100-80GB \
    --json "$TMP/mixed.json"
python3 - "$TMP/mixed.json" <<'PY2' || { echo "FAIL: mixed plan file lacks the uneven shares or they do not add up"; fails=$((fails + 1)); }
import json, sys
p = json.load(open(sys.argv[1]))
db = p.get("dp_batch", [])
assert len(db) == p["dp"] and len(set(db)) == 2, db
assert sum(db) == p["global_batch"] == 512, p
assert p["zero"] >= 2 or all(b % p["micro_batch"] == 0 for b in db), p
PY2

[ $fails -eq 0 ] && echo "all planner v2 command-line checks passed"
exit $fails
