#!/usr/bin/env bash
# Engine equivalence through whale-train --device: the same gpt-tiny run (same
# seed, data and batches) on --device cpu and --device cuda; every step's
# loss within 1e-4 relative in fp32 and 2e-2 in bf16 (mixed precision: 16-bit
# GEMM operands summed in different orders). With 2 or more GPUs, the same
# fp32 run with tensor parallelism (whale-run -n 2 --tp 2: the TP sums over
# NCCL on cuda, over the host group on cpu) within 1e-4. Exits 77 (meson:
# SKIP) and says so when whale-train cannot use a GPU here. Also a gpt-tiny
# with an untied head (TiedEmbeddings=no) in fp32 within 1e-4, and the
# Llama-style block (engine/block_x.c through the backend ops): llama-tiny
# (RMSNorm, SwiGLU, rotary, 4 query heads on 2 KV heads, Bias=no, untied,
# Attention=flash) in fp32 within 1e-4 and bf16 within 2e-2; the same with
# Attention=plain (cpu: expanded heads and kept probabilities; cuda: the
# grouped flash kernel) and with selective recompute in fp32; a variant with
# biases, LayerNorm and GeGLU (strided biased q/k/v projections) in fp32;
# and stream-ordered cuda (WHALE_CUDA_STREAM_ORDERED=1) on gpt-tiny and
# llama-tiny against the same cpu runs.
# usage: engine_device.sh WHALE_TRAIN [WHALE_RUN]
# WHALE_ENGINE_DEVICE_SELFTEST=1 (contrib/gpu-check.sh --selftest): no GPU
# needed, the "cuda" side of every comparison runs --device cpu, so every
# command line and comparison of this script runs (and must agree exactly).
set -u
TRAIN=$1
RUN=${2:-}
GDEV=cuda
[ "${WHALE_ENGINE_DEVICE_SELFTEST:-0}" = 1 ] && GDEV=cpu
# dev_of cpu|cuda: the --device the side runs on
dev_of() { if [ "$1" = cuda ]; then echo "$GDEV"; else echo cpu; fi; }
T=$(mktemp -d /tmp/whale-gpu-engine-XXXXXX)
trap 'rm -rf "$T"' EXIT
for i in $(seq 2000); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 8 --seq 64 --steps 6 --no-progress --seed 7)

probe=$("$TRAIN" "${common[@]}" --steps 0 --device "$GDEV" --metrics "$T/p.jsonl" 2>&1)
if [ $? -ne 0 ]; then
  echo "SKIP: whale-train cannot use a GPU here: $(echo "$probe" | grep -m1 'cannot run here')"
  exit 77
fi
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | cut -d: -f2; }
fail=0
for prec in fp32 bf16; do
  tol=1e-4; [ $prec = bf16 ] && tol=2e-2
  for dev in cpu cuda; do
    if ! "$TRAIN" "${common[@]}" --precision $prec --device $(dev_of $dev) --metrics "$T/$dev-$prec.jsonl" \
         >"$T/$dev-$prec.log" 2>&1; then
      echo "FAIL $prec $dev: whale-train failed"; tail -n 5 "$T/$dev-$prec.log"; fail=1; continue 2
    fi
  done
  paste <(losses "$T/cpu-$prec.jsonl") <(losses "$T/cuda-$prec.jsonl") | awk -v p=$prec -v tol=$tol '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
      printf "%s %s step %d cpu %.7f cuda %.7f rel %.2e\n", r <= tol ? "ok" : "FAIL", p, n, $1, $2, r;
      if (r > tol) bad = 1 }
    END { if (n < 6) { print "FAIL " p ": " n " steps compared, expected 6"; bad = 1 }; exit bad }' \
    || fail=1
done
cmp_losses() { # label tol cpu.jsonl cuda.jsonl
  paste <(losses "$3") <(losses "$4") | awk -v p="$1" -v tol="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
      printf "%s %s step %d cpu %.7f cuda %.7f rel %.2e\n", r <= tol ? "ok" : "FAIL", p, n, $1, $2, r;
      if (r > tol) bad = 1 }
    END { if (n < 6) { print "FAIL " p ": " n " steps compared, expected 6"; bad = 1 }; exit bad }'
}
# an untied head (lm_head.w of its own): the same fp32 run on both devices
sed 's/^Name=gpt-tiny /Name=gpt-tiny-untied /; s/TiedEmbeddings=yes/TiedEmbeddings=no/' \
  "${WHALE_MODEL_PATH%%:*}/gpt-tiny.conf" > "$T/gpt-tiny-untied.conf"
for dev in cpu cuda; do
  if ! "$TRAIN" "${common[@]}" --model "$T/gpt-tiny-untied.conf" --precision fp32 --device $(dev_of $dev) \
       --metrics "$T/untied-$dev.jsonl" >"$T/untied-$dev.log" 2>&1; then
    echo "FAIL fp32 untied $dev: whale-train failed"; tail -n 5 "$T/untied-$dev.log"; fail=1
  fi
done
[ -s "$T/untied-cuda.jsonl" ] && { cmp_losses "fp32 untied" 1e-4 "$T/untied-cpu.jsonl" "$T/untied-cuda.jsonl" || fail=1; }
# the Llama block: label, precision, tolerance, model file, extra options
llama_case() {
  local label=$1 prec=$2 tol=$3 model=$4; shift 4
  for dev in cpu cuda; do
    if ! "$TRAIN" "${common[@]}" --model "$model" --precision "$prec" --device $(dev_of $dev) "$@" \
         --metrics "$T/$label-$dev.jsonl" >"$T/$label-$dev.log" 2>&1; then
      echo "FAIL $label $dev: whale-train failed"; tail -n 5 "$T/$label-$dev.log"; fail=1
      return
    fi
  done
  cmp_losses "$label" "$tol" "$T/$label-cpu.jsonl" "$T/$label-cuda.jsonl" || fail=1
}
LT="${WHALE_MODEL_PATH%%:*}/llama-tiny.conf"
sed 's/^Name=llama-tiny /Name=llama-tiny-plain /; s/Attention=flash/Attention=plain/' "$LT" \
  > "$T/llama-plain.conf"
sed 's/^Name=llama-tiny /Name=llama-tiny-bias /; s/Bias=no/Bias=yes/; s/Norm=rmsnorm/Norm=layernorm/; s/MLP=swiglu/MLP=geglu/' \
  "$LT" > "$T/llama-bias.conf"
llama_case "llama fp32" fp32 1e-4 "$LT"
llama_case "llama bf16" bf16 2e-2 "$LT"
llama_case "llama plain fp32" fp32 1e-4 "$T/llama-plain.conf"
llama_case "llama plain selective fp32" fp32 1e-4 "$T/llama-plain.conf" --recompute selective
llama_case "llama bias layernorm geglu fp32" fp32 1e-4 "$T/llama-bias.conf"
# stream-ordered cuda (no sync per call; syncs at the engine's host-access
# points, engine/device.c): the same numbers, GPT and Llama, fp32 and bf16
export WHALE_CUDA_STREAM_ORDERED=1
llama_case "gpt stream-ordered fp32" fp32 1e-4 gpt-tiny
llama_case "llama stream-ordered fp32" fp32 1e-4 "$LT"
llama_case "llama stream-ordered bf16" bf16 2e-2 "$LT"
unset WHALE_CUDA_STREAM_ORDERED
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$GDEV" = cpu ] && ngpu=2 # selftest: the TP command lines run on the cpu too
if [ -z "$RUN" ] || [ "$ngpu" -lt 2 ]; then
  echo "SKIP fp32 tp2: needs whale-run and 2 GPUs (this machine shows $ngpu)"
else
  for dev in cpu cuda; do
    # rank 0 writes the metrics file
    if ! "$RUN" -n 2 --tp 2 --timeout 240 "$TRAIN" "${common[@]}" --precision fp32 --device $(dev_of $dev) \
         --metrics "$T/tp-$dev.jsonl" >"$T/tp-$dev.log" 2>&1; then
      echo "FAIL fp32 tp2 $dev: whale-run failed"; tail -n 5 "$T/tp-$dev.log"; fail=1
    fi
  done
  [ $fail -eq 0 ] && { cmp_losses "fp32 tp2" 1e-4 "$T/tp-cpu.jsonl" "$T/tp-cuda.jsonl" || fail=1; }
  # llama-tiny with TP 2: each rank one of the 2 KV heads (TP sums over NCCL on cuda)
  for dev in cpu cuda; do
    if ! "$RUN" -n 2 --tp 2 --timeout 240 "$TRAIN" "${common[@]}" --model "$LT" --precision fp32 \
         --device $(dev_of $dev) --metrics "$T/ltp-$dev.jsonl" >"$T/ltp-$dev.log" 2>&1; then
      echo "FAIL llama fp32 tp2 $dev: whale-run failed"; tail -n 5 "$T/ltp-$dev.log"; fail=1
    fi
  done
  [ -s "$T/ltp-cuda.jsonl" ] && { cmp_losses "llama fp32 tp2" 1e-4 "$T/ltp-cpu.jsonl" "$T/ltp-cuda.jsonl" || fail=1; }
fi
exit $fail
