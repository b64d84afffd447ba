#!/bin/bash
# Mixed precision and checkpoints, end to end with whale-train:
#  - bf16 and fp16 (with an injected overflow: step 4 skipped, scale 65536 ->
#    32768) resume exactly: 20 uninterrupted steps vs 10 + save + --resume,
#    steps 11..20 bit-identical, skipped steps and loss scale carried over;
#  - the manifest records the precision; params are BF16, opt.master.* F32;
#  - a bf16 checkpoint resumes in fp32 (weights from the master) and an fp32
#    checkpoint in bf16 (master from the weights), said so;
#  - whale-ckpt convert --dtype bf16 gives an inference file the real
#    `safetensors` package opens: BF16 params only, equal to the run's
#    16-bit params (= round(master)).
# usage: train_precision.sh WHALE_TRAIN WHALE_CKPT SOURCE_ROOT
set -u
train=$1 tool=$2 src=$3
d=$(mktemp -d /tmp/whale-train-precision-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat "$src"/runtime/src/*/*.c > "$d/corpus.txt"
args=(--model gpt-tiny --data "$d/corpus.txt" --steps 20 --batch 8 --threads 1 --no-progress)

compare() { # ref other first_step tol
    python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {d["step"]: d for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b = load(sys.argv[1]), load(sys.argv[2])
first, tol = int(sys.argv[3]), float(sys.argv[4])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s]["loss"] - b[s]["loss"]) for s in b)
for s in b:
    for k in ("loss_scale", "skipped", "skipped_steps", "precision"):
        assert a[s][k] == b[s][k], (s, k, a[s][k], b[s][k])
print(f"steps {first}..20: worst |loss difference| {worst:.3g} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}

for p in bf16 fp16; do
    extra=()
    [ "$p" = fp16 ] && extra=(--inject-overflow 4)
    # the uninterrupted reference is the saving run itself (a save changes
    # no state: ckpt-train-resume-exact checks that against a run without
    # saves); one 20-step run less per precision, the test's slowest part
    # under ASan on a loaded machine (275 s at load 28 against a 300 s limit)
    "$train" "${args[@]}" --precision $p "${extra[@]}" --metrics "$d/ref-$p.jsonl" \
        --whale-ckpt-dir "$d/ck-$p" --whale-ckpt-every 10 >/dev/null 2>&1 || fail "$p save run"
    "$tool" verify "$d/ck-$p" --which 10 >/dev/null || fail "$p step 10 does not verify"
    "$train" "${args[@]}" --precision $p --metrics "$d/res-$p.jsonl" \
        --resume "$d/ck-$p/step-00000010" >"$d/res-$p.out" 2>&1 || fail "$p resume: $(tail -3 "$d/res-$p.out")"
    compare "$d/ref-$p.jsonl" "$d/res-$p.jsonl" 11 0 || fail "$p resumed losses differ"
done
# the injected overflow: step 4 skipped, the scale backed off, the run went on
python3 - "$d/ref-fp16.jsonl" <<'PY' || fail "fp16 overflow not skipped / scale not backed off"
import json, sys
m = {d["step"]: d for d in (json.loads(l) for l in open(sys.argv[1])) if "step" in d}
assert m[3]["loss_scale"] == 65536 and not m[3]["skipped"], m[3]
assert m[4]["skipped"] and m[4]["loss_scale"] == 32768 and m[4]["skipped_steps"] == 1, m[4]
assert not m[5]["skipped"] and m[20]["skipped_steps"] == 1, m[20]
assert m[20]["loss"] < m[1]["loss"] - 0.5, (m[1]["loss"], m[20]["loss"])
print("fp16: step 4 skipped, scale 65536 -> 32768, loss %.3f -> %.3f" % (m[1]["loss"], m[20]["loss"]))
PY

# what the manifest says
python3 - "$d/ck-bf16/step-00000010/manifest.json" <<'PY' || fail "manifest"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["extra"]["train_state"]["precision"] == "bf16", m["extra"]
t = m["tensors"]
assert t["wte"]["dtype"] == "BF16" and t["opt.master.wte"]["dtype"] == "F32", (t["wte"], t["opt.master.wte"])
assert t["opt.m.wte"]["dtype"] == "F32"
print("manifest: precision bf16, params BF16, master/moments F32")
PY

# switching precision on resume
"$train" "${args[@]}" --steps 12 --precision fp32 --metrics "" --resume "$d/ck-bf16/step-00000010" \
    >"$d/sw1.out" 2>&1 || fail "bf16 -> fp32 resume: $(tail -3 "$d/sw1.out")"
grep -q "trained in bf16, resuming in fp32: weights from its fp32 master" "$d/sw1.out" \
    || fail "no switch note: $(cat "$d/sw1.out")"
"$train" "${args[@]}" --metrics "" --whale-ckpt-dir "$d/ck-fp32" --whale-ckpt-every 10 \
    >/dev/null 2>&1 || fail "fp32 save run"
"$train" "${args[@]}" --steps 12 --precision bf16 --metrics "$d/sw2.jsonl" \
    --resume "$d/ck-fp32/step-00000010" >"$d/sw2.out" 2>&1 || fail "fp32 -> bf16 resume: $(tail -3 "$d/sw2.out")"
grep -q "trained in fp32, resuming in bf16: master weights from its fp32 weights" "$d/sw2.out" \
    || fail "no switch note: $(cat "$d/sw2.out")"
python3 - "$d/ref-bf16.jsonl" "$d/sw2.jsonl" <<'PY' || fail "fp32 -> bf16 resume did not continue the trained model"
import json, sys
ref = {d["step"]: d for d in (json.loads(l) for l in open(sys.argv[1])) if "step" in d}
sw = {d["step"]: d for d in (json.loads(l) for l in open(sys.argv[2])) if "step" in d}
# the fp32-trained model at step 10 resumed in bf16 tracks the bf16 run's step 11
assert abs(sw[11]["loss"] - ref[11]["loss"]) < 0.05 * ref[11]["loss"], (sw[11]["loss"], ref[11]["loss"])
print("fp32 -> bf16: step 11 loss %.4f (bf16 run %.4f)" % (sw[11]["loss"], ref[11]["loss"]))
PY

# an inference file in bf16
"$tool" convert "$d/ck-bf16" "$d/infer.safetensors" --which 10 --params-only --dtype bf16 >/dev/null \
    || fail "convert --dtype bf16"
"$tool" convert "$d/ck-bf16" "$d/all.safetensors" --which 10 >/dev/null || fail "convert (all)"
python3 - "$d/infer.safetensors" "$d/all.safetensors" <<'PY' || fail "inference file"
import json, struct, sys
import numpy as np
from safetensors import safe_open

def raw(path):
    """tensors by name, read per the safetensors spec (numpy has no bfloat16)"""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
        body = fh.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = body[a:b]
        if v["dtype"] == "BF16":
            x = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(buf, {"F32": np.float32, "F16": np.float16}[v["dtype"]]).astype(np.float32)
        out[k] = (v["dtype"], x.reshape(v["shape"]))
    return out

with safe_open(sys.argv[1], framework="numpy") as f:  # the package validates the file
    keys = sorted(f.keys())
    dts = {k: f.get_slice(k).get_dtype() for k in keys}
assert keys and not any(k.startswith("opt.") for k in keys), keys
assert all(d == "BF16" for d in dts.values()), dts
inf, full = raw(sys.argv[1]), raw(sys.argv[2])
for k in keys:
    dt, x = inf[k]
    pdt, p = full[k]          # the run's 16-bit params
    mdt, m = full["opt.master." + k]
    assert pdt == "BF16" and mdt == "F32", (k, pdt, mdt)
    assert np.array_equal(x, p), k
    # round(master) to bf16, nearest even
    u = m.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    assert np.array_equal(x, r), k
print(f"inference file: {len(keys)} BF16 tensors, equal to the run's params = round(master)")
PY
echo "ok"
