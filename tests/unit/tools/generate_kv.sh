#!/usr/bin/env bash
# whale-generate with a KV cache (the default) against --no-kv-cache, which
# runs the whole window again per token: the same token ids, greedy and
# sampled with a fixed seed, for GPT-2 (learned positions, LayerNorm, GELU)
# and Llama (rotary incl. llama3 rope scaling, GQA, RMSNorm, SwiGLU, MoE),
# also once the text outgrows the window. Tiny shapes: seconds.
# usage: generate_kv.sh WHALE_TRAIN WHALE_GENERATE
set -u
TRAIN=$1 GEN=$2
T=$(mktemp -d /tmp/whale-genkv-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
out=
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 8; fail=1; fi
}
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
# llama-tiny with llama3 rope scaling: positions matter at every frequency
sed -e 's/^Name=llama-tiny/Name=llama-tiny-rs/' -e 's/Attention=flash/Attention=flash RopeScaling=llama3 RopeFactor=8 RopeLowFreq=1 RopeHighFreq=4 RopeOrigSeq=16/' \
  "$WHALE_MODEL_PATH/llama-tiny.conf" > "$T/llama-tiny-rs.conf"
for m in gpt-tiny llama-tiny "$T/llama-tiny-rs.conf" llama-moe-tiny; do
  tag=$(basename "$m" .conf)
  out=$("$TRAIN" --model "$m" --vocab 256 --data "$T/data.txt" --steps 3 --batch 2 --seq 32 \
        --threads 1 --no-progress --whale-ckpt-dir "$T/$tag" --whale-ckpt-every 3 2>&1); rc=$?
  check "$tag: a 3-step checkpoint" '[ $rc -eq 0 ]'
  for mode in "--greedy" "--seed 11 --temperature 1.0 --top-k 0 --top-p 0.95"; do
    # 12 prompt + 40 new > the 32-token window: the last tokens slide it
    args=(--ckpt "$T/$tag" --prompt "the quick b" --tokens 40 --print-ids --threads 1 $mode)
    kv=$("$GEN" "${args[@]}" 2>"$T/kv.err"); rc1=$?
    full=$("$GEN" "${args[@]}" --no-kv-cache 2>"$T/full.err"); rc2=$?
    out="kv:   $kv
full: $full
$(cat "$T/kv.err" "$T/full.err")"
    check "$tag $mode: the KV cache gives the ids of the full recompute" \
      '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$kv" ] && [ "$kv" == "$full" ] && grep -q "KV cache)" "$T/kv.err" && grep -q "recomputing the window" "$T/full.err"'
  done
done
out=$("$GEN" --ckpt "$T/gpt-tiny" --prompt "the" --tokens 8 --greedy --threads 1 --bench 2>&1); rc=$?
check "--bench prints both rates and their ratio" \
  '[ $rc -eq 0 ] && [[ "$out" == *"KV cache "*"tokens/s, recompute "*"ratio "*"same tokens: yes"* ]]'
exit $fail
