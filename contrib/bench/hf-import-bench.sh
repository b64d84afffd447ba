#!/usr/bin/env bash
# Hugging Face import speed and memory: a Llama-shaped bf16 checkpoint with
# random weights (made here, sharded safetensors + index) loaded by
# `whale-train --init-from` into TP 2 x PP 2 (4 ranks, --steps 0), against
# reading the same bytes with `cat > /dev/null` in the same run (warm page
# cache for both: cat runs first and again last, the slower of its two runs
# is the figure). Each rank logs its own load time and resident-memory
# growth (hf_load.c); the import time is the slowest rank's.
# Target: cat time / import time >= 0.8; each rank's growth during the load
# (its peak, hf_load.c samples it) no more than a bounded buffer: the
# engine's weights are allocated before, and the mapped file pages are
# dropped as they are converted. Each rank also logs the CPU time of its
# load: on a loaded machine (4 ranks on 2 CPUs, other jobs) the wall time
# is mostly waiting for a CPU. The whole --steps 0 run (start-up, engine,
# load, exit) is timed too: --init-from skips the random initialisation.
# Usage: contrib/bench/hf-import-bench.sh [BUILD_DIR] [1b|1b4|350m|tiny]
#   1b: hidden 2048, 16 layers, 32 heads / 8 KV, FFN 8192, vocab 32000
#   (1.1 B parameters, 2.2 GB of bf16); needs ~4 x 5 GB of memory.
#   1b4: the same widths, 4 layers (0.37 B parameters, 0.75 GB): the 1b
#   tensors' shapes where memory is short.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-$ROOT/build}
SHAPE=${2:-1b}
TRAIN=$BUILD/runtime/tools/train/whale-train
RUN=$BUILD/runtime/tools/run/whale-run
[ -x "$TRAIN" ] && [ -x "$RUN" ] || { echo "hf-import-bench: build $BUILD first" >&2; exit 1; }
case $SHAPE in
  1b)   C=2048 L=16 H=32 KV=8 F=8192 V=32000 ;;
  1b4)  C=2048 L=4 H=32 KV=8 F=8192 V=32000 ;;
  350m) C=1024 L=24 H=16 KV=8 F=2816 V=32000 ;;
  tiny) C=512 L=8 H=8 KV=4 F=1408 V=32000 ;;
  *) echo "hf-import-bench: shape $SHAPE is not 1b, 1b4, 350m or tiny" >&2; exit 2 ;;
esac
TMP=$(mktemp -d "${TMPDIR:-/tmp}/whale-hfbench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

/usr/bin/python3 - "$TMP/hf" $C $L $H $KV $F $V <<'PY'
import json, os, sys, torch
from safetensors.torch import save_file
d, C, L, H, KV, F, V = sys.argv[1], *map(int, sys.argv[2:])
os.makedirs(d)
hd = C // H
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
           "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
           "hidden_act": "silu", "torch_dtype": "bfloat16"}, open(d + "/config.json", "w"))
g = torch.Generator().manual_seed(1)
def r(*s):
    return (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)
shards, cur, size, wmap = [], {}, 0, {}
def flush():
    global cur, size
    if cur:
        name = "model-%05d.safetensors" % (len(shards) + 1)
        save_file(cur, os.path.join(d, name), metadata={"format": "pt"})
        shards.append(name)
        for k in cur:
            wmap[k] = name
        cur, size = {}, 0
def put(k, t):
    global size
    cur[k] = t
    size += t.numel() * 2
    if size >= 500 << 20:
        flush()
put("model.embed_tokens.weight", r(V, C))
for i in range(L):
    p = "model.layers.%d." % i
    put(p + "input_layernorm.weight", torch.ones(C, dtype=torch.bfloat16))
    put(p + "post_attention_layernorm.weight", torch.ones(C, dtype=torch.bfloat16))
    put(p + "self_attn.q_proj.weight", r(C, C))
    put(p + "self_attn.k_proj.weight", r(KV * hd, C))
    put(p + "self_attn.v_proj.weight", r(KV * hd, C))
    put(p + "self_attn.o_proj.weight", r(C, C))
    put(p + "mlp.gate_proj.weight", r(F, C))
    put(p + "mlp.up_proj.weight", r(F, C))
    put(p + "mlp.down_proj.weight", r(C, F))
put("model.norm.weight", torch.ones(C, dtype=torch.bfloat16))
put("lm_head.weight", r(V, C))
flush()
total = sum(os.path.getsize(os.path.join(d, s)) for s in shards)
json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
          open(d + "/model.safetensors.index.json", "w"))
import struct  # a few tokens for --data (whale's token file: header, uint16 ids)
n = 4096
with open(os.path.join(os.path.dirname(d), "tok.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *torch.randint(0, V, (n,), generator=g).tolist()))
PY
bytes=$(cat "$TMP"/hf/*.safetensors | wc -c)
echo "checkpoint: $SHAPE Llama-shaped, bf16, $(ls "$TMP"/hf/*.safetensors | wc -l) shards, $((bytes >> 20)) MiB; $(nproc) CPUs; $(uptime | sed 's/.*load/load/')"

tcat() { local t0 t1; t0=$(date +%s.%N); cat "$TMP"/hf/*.safetensors > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
c1=$(tcat)
r0=$(date +%s.%N)
WHALE_LOG=info "$RUN" -n 4 --timeout 3000 --tp 2 --pp 2 "$TRAIN" --init-from "$TMP/hf" --data "$TMP/tok.bin" --steps 0 \
  --batch 4 --seq 64 --threads 1 --no-progress > "$TMP/out.log" 2>&1 || { grep -v "^[0-9]: " "$TMP/out.log" | tail -5 >&2; grep -m3 "^0: .*whale-train" "$TMP/out.log" >&2; exit 1; }
r1=$(date +%s.%N)
c2=$(tcat)
grep "init-from" "$TMP/out.log" | grep " s of CPU), resident" > "$TMP/ranks" || { tail -20 "$TMP/out.log" >&2; exit 1; }
python3 - "$TMP/ranks" "$c1" "$c2" "$bytes" "$(echo "$r1 - $r0" | bc -l)" <<'PY'
import re, sys
rows = [re.search(r"([0-9]+) elements .* in ([0-9.]+) s \(([0-9.]+) s of CPU\), resident memory "
                  r"\+(-?[0-9]+) MB", l) for l in open(sys.argv[1])]
rows = [(int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)))
        for m in rows if m]
c = max(float(sys.argv[2]), float(sys.argv[3]))
nb = int(sys.argv[4])
t = max(r[1] for r in rows)
for i, (el, s, cpu, mb) in enumerate(rows):
    print("rank line %d: %d elements (%.0f MB in fp32, its shard) in %.2f s (%.2f s of CPU), "
          "resident growth at the peak +%.0f MB (%.3fx its shard)"
          % (i, el, el * 4 / 1e6, s, cpu, mb, mb / (el * 4 / 1e6)))
print("cat > /dev/null: %.2f s (%.0f MB/s); import (slowest of %d ranks): %.2f s, %.2f s of CPU; "
      "cat/import = %.2f (target >= 0.8)"
      % (c, nb / c / 1e6, len(rows), t, max(r[2] for r in rows), c / t))
print("whole whale-run --steps 0 (start-up, engine, load, exit): %.2f s" % float(sys.argv[5]))
PY
echo "after: $(uptime | sed 's/.*load/load/')"
