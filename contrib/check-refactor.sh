#!/usr/bin/env bash
# Behaviour check for a refactor of the training runtime: the same runs with
# two builds (before and after) must give bit-identical per-step numbers
# (loss, gradient norm, learning rate, loss scale, skipped) and byte-identical
# checkpoint files. Covers gpt-tiny, llama-tiny and gpt-moe-tiny; ZeRO 0..3;
# gradient accumulation; no-overlap; optimizer and params offload; bf16 and
# fp16 (an injected overflow) with 16-bit gradient reduction; recompute;
# PP 2 and TP 2 under whale-run; plain attention with grouped KV heads.
#
# usage: contrib/check-refactor.sh BUILD_A BUILD_B [WORKDIR]
#   BUILD_A, BUILD_B  meson build directories (e.g. of main and of a branch)
#   WORKDIR           where runs go (default: a new temporary directory); the
#                     corpus path is recorded in checkpoints, so compare runs
#                     of one WORKDIR only
# Environment: CHECK_REFACTOR_REUSE_A=1 reuses WORKDIR/A from an earlier run,
# CHECK_REFACTOR_ONLY=NAME[,NAME] runs only those cases.
# Checkpoint JSON is compared without its run id and creation time.
# Exit status 0 when every case matches; prints one line per case.
set -uo pipefail
[ $# -ge 2 ] || { sed -n "2,18p" "$0"; exit 2; }
A=$(cd "$1" && pwd) || exit 2
B=$(cd "$2" && pwd) || exit 2
W=${3:-$(mktemp -d /tmp/check-refactor.XXXXXX)}
mkdir -p "$W"
SRC=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
[ -f "$W/corpus.txt" ] || cat "$SRC"/runtime/src/*/*.c > "$W/corpus.txt"
# llama-tiny with plain attention: grouped KV heads through the host-side
# expand / fold on cpu (the preset runs the flash kernels)
sed 's/Attention=flash/Attention=plain/' "$SRC/config/models/llama-tiny.conf" > "$W/llama-plain.conf"

# NAME|RANKS|LAYOUT|ARGS  (RANKS 1: a plain start; LAYOUT: whale-run's --tp/--pp)
CASES=(
  "gpt-z0|1||--model gpt-tiny"
  "gpt-z1-dp2|2||--model gpt-tiny --zero 1"
  "gpt-z2-dp2-noovl|2||--model gpt-tiny --zero 2 --no-overlap"
  "gpt-z3-dp2-acc2|2||--model gpt-tiny --zero 3 --grad-accum 2"
  "gpt-z0-dp2-acc2|2||--model gpt-tiny --zero 0 --grad-accum 2"
  "gpt-recompute-full|1||--model gpt-tiny --recompute full"
  "llama-z0-bf16|1||--model llama-tiny --precision bf16"
  "llama-z2-dp2-sel|2||--model llama-tiny --zero 2 --recompute selective"
  "llama-plain-sel|1||--model @W@/llama-plain.conf --recompute selective"
  "llama-plain-tp2|2|--tp 2|--model @W@/llama-plain.conf"
  "moe-z1-dp2|2||--model gpt-moe-tiny --zero 1"
  "moe-z3-acc2|1||--model gpt-moe-tiny --zero 3 --grad-accum 2"
  "off-opt-z1|1||--model gpt-tiny --zero 1 --offload optimizer"
  "off-opt-z0-dp2|2||--model gpt-tiny --zero 0 --offload optimizer"
  "off-params-z3-dp2|2||--model gpt-tiny --zero 3 --offload params --offload-prefetch 2"
  "off-params-z3-bf16|1||--model gpt-tiny --zero 3 --offload params --precision bf16"
  "bf16-off-opt-z2-dp2|2||--model gpt-tiny --zero 2 --offload optimizer --precision bf16"
  "bf16-z3-dp2-red16|2||--model gpt-tiny --zero 3 --precision bf16 --grad-reduce 16"
  "bf16-z1-dp2-red16|2||--model gpt-tiny --zero 1 --precision bf16 --grad-reduce 16"
  "fp16-z2-dp2-ovf|2||--model gpt-tiny --zero 2 --precision fp16 --inject-overflow 3"
  "pp2-z1-acc2|2|--pp 2|--model gpt-tiny --zero 1 --grad-accum 2"
  "pp2-z3-bf16-acc2|2|--pp 2|--model gpt-tiny --zero 3 --precision bf16 --grad-accum 2"
  "pp2-interleaved|2|--pp 2|--model gpt-tiny --schedule interleaved --interleave 2 --grad-accum 4"
  "tp2-z3-off-params|2|--tp 2|--model gpt-tiny --zero 3 --offload params"
  "tp2-llama-seqpar|2|--tp 2|--model llama-tiny --seqpar --zero 1"
  "pp2tp2-z2|4|--pp 2 --tp 2|--model gpt-tiny --zero 2 --grad-accum 2"
  "ckpt-z3-dp2-bf16|2||--model gpt-tiny --zero 3 --precision bf16 CKPT"
  "ckpt-z1-pp2|2|--pp 2|--model gpt-tiny --zero 1 --grad-accum 2 CKPT"
  "ckpt-z0-off-opt|1||--model llama-tiny --offload optimizer CKPT"
)

# run_case BUILD OUTDIR SPEC
run_case() {
  local build=$1 out=$2 name ranks lay args
  IFS='|' read -r name ranks lay args <<< "$3"
  args=${args//@W@/$W}
  rm -rf "$out/$name"
  mkdir -p "$out/$name"
  local ck=()
  if [[ $args == *CKPT* ]]; then
    args=${args/CKPT/}
    ck=(--whale-ckpt-dir "$out/$name/ckpt" --whale-ckpt-every 3 --ckpt-keep 0)
  fi
  local cmd=("$build/runtime/tools/train/whale-train" $args --data "$W/corpus.txt" --steps 6
             --batch 8 --seq 64 --threads 1 --no-progress --metrics "$out/$name/m.jsonl" "${ck[@]}")
  if [ "$ranks" -gt 1 ]; then
    # shellcheck disable=SC2086
    cmd=(timeout 600 "$build/runtime/tools/run/whale-run" -n "$ranks" $lay --timeout 580 "${cmd[@]}")
  fi
  (cd "$out/$name" && env -u WHALE_PLAN "${cmd[@]}" > out.txt 2>&1)
}

# numbers FILE: the per-step numbers that must not change, one line per step
numbers() {
  python3 - "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{"step"'):
        j = json.loads(l)
        print(j["step"], *(repr(j.get(k)) for k in
              ("loss", "grad_norm", "lr", "loss_scale", "skipped", "tokens")))
PY
}

# ckpt_sums DIR: sha256 of every checkpoint file, relative names; JSON files
# without what differs between two runs of the same build (the run id, the
# creation time and the manifest's hash, which covers both)
ckpt_sums() {
  [ -d "$1" ] || return 0
  python3 - "$1" <<'PY'
import hashlib, json, os, sys
VOLATILE = {"run", "created", "manifest_xxh3_128"}
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
root = sys.argv[1]
for d, _, fs in sorted(os.walk(root)):
    for f in sorted(fs):
        p = os.path.join(d, f)
        data = open(p, "rb").read()
        if f.endswith(".json"):
            data = json.dumps(strip(json.loads(data)), sort_keys=True).encode()
        print(hashlib.sha256(data).hexdigest(), os.path.relpath(p, root))
PY
}

fails=0
for spec in "${CASES[@]}"; do
  name=${spec%%|*}
  if [ -n "${CHECK_REFACTOR_ONLY:-}" ] && [[ ",$CHECK_REFACTOR_ONLY," != *",$name,"* ]]; then
    continue
  fi
  if [ "${CHECK_REFACTOR_REUSE_A:-0}" != 1 ] || [ ! -s "$W/A/$name/m.jsonl" ]; then
    run_case "$A" "$W/A" "$spec" || { echo "FAIL $name: the run with $A failed ($W/A/$name/out.txt)"; fails=$((fails + 1)); continue; }
  fi
  run_case "$B" "$W/B" "$spec" || { echo "FAIL $name: the run with $B failed ($W/B/$name/out.txt)"; fails=$((fails + 1)); continue; }
  na=$(numbers "$W/A/$name/m.jsonl"); nb=$(numbers "$W/B/$name/m.jsonl")
  ca=$(ckpt_sums "$W/A/$name/ckpt"); cb=$(ckpt_sums "$W/B/$name/ckpt")
  steps=$(printf '%s\n' "$na" | grep -c .)
  files=$(printf '%s\n' "$ca" | grep -c .)
  if [ "$steps" -eq 0 ]; then
    echo "FAIL $name: no step lines"; fails=$((fails + 1))
  elif [ "$na" != "$nb" ]; then
    echo "FAIL $name: per-step numbers differ"; diff <(echo "$na") <(echo "$nb") | head -6
    fails=$((fails + 1))
  elif [ "$ca" != "$cb" ]; then
    echo "FAIL $name: checkpoint bytes differ"; diff <(echo "$ca") <(echo "$cb") | head -6
    fails=$((fails + 1))
  else
    last=$(printf '%s\n' "$na" | tail -1)
    echo "ok   $name: $steps steps identical (last: $last), $files checkpoint files identical"
  fi
done
echo "check-refactor: $fails case(s) differ; runs in $W"
[ "$fails" -eq 0 ]
