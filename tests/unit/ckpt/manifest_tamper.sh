#!/bin/bash
# A checkpoint manifest edited after it was written is refused, never read
# as other values: every field that gives the stored bytes their meaning
# (a chunk's shuffle, the dtype, the shape, a region's offsets, the stored
# checksum, the file offset) is checked by `whale-ckpt verify`, by
# `convert` and by `whale-train --resume`, with the manifest's own digest
# in place (stale after the edit) and with it removed (as in a manifest of
# an older whale, where each chunk's content hash still catches it).
# Usage: manifest_tamper.sh WHALE_TRAIN WHALE_CKPT SRC_DIR
set -u
train=$1 tool=$2 src=$3
d=$(mktemp -d /tmp/whale-tamper.XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat "$src"/runtime/src/ckpt/*.c >"$d/corpus.txt"
args=(--model gpt-tiny --data "$d/corpus.txt" --batch 4 --seq 32 --threads 1 --no-progress
      --metrics "")
WHALE_CKPT_ZSTD=3 "$train" "${args[@]}" --steps 4 --whale-ckpt-dir "$d/ck" \
    --whale-ckpt-every 4 >"$d/save.out" 2>&1 || fail "save run: $(tail -3 "$d/save.out")"
step="$d/ck/step-00000004"
"$tool" verify "$d/ck" >/dev/null 2>&1 || fail "untouched checkpoint does not verify"
cp -a "$d/ck" "$d/orig"

# edit CASE [nodigest]: changes one field of manifest.json in place
edit() {
    python3 - "$step/manifest.json" "$1" "${2:-}" <<'PY'
import json, sys
p, case, nodigest = sys.argv[1], sys.argv[2], sys.argv[3]
m = json.load(open(p))
t = m["tensors"]["wte"]
c = t["chunks"][0]
if case == "shuffle":
    assert c["shuffle"] == 4, c
    c["shuffle"] = 0
elif case == "dtype":
    t["dtype"] = "F16"
elif case == "shape":
    t["shape"] = [2**31, 64]
elif case == "offsets":
    # a region moved inside the (unchanged) shape: 128 rows at row 64
    n = m["tensors"]["h.0.mlp.fc.w"]["chunks"][0]["region"]
    n["offsets"][0] = 1
    n["count"][0] -= 1
    n["flat"][1] -= n["count"][1]
elif case == "hash":
    c["xxh3_128"] = "0" * 32
elif case == "begin":
    c["begin"] += 8
elif case == "step":
    m["step"] = 3
if nodigest:
    del m["manifest_xxh3_128"]
json.dump(m, open(p, "w"), indent=1)
PY
}

for nd in "" nodigest; do
    for case in shuffle dtype shape offsets hash begin step; do
        [ -n "$nd" ] && [ "$case" = step ] && continue # only the digest covers it
        rm -rf "$d/ck" && cp -a "$d/orig" "$d/ck"
        edit "$case" "$nd" || fail "$case: edit"
        what="$case${nd:+ (no digest)}"
        out=$("$tool" verify "$d/ck" 2>&1) && fail "$what: verify said ok: $out"
        if [ -z "$nd" ]; then
            echo "$out" | grep -q "manifest.json: field manifest_xxh3_128 does not match" \
                || fail "$what: verify does not name the manifest and its digest: $out"
        elif [ "$case" = hash ] || [ "$case" = begin ]; then
            echo "$out" | grep -q "tensor wte: checksum mismatch" \
                || fail "$what: verify does not name the tensor: $out"
        else
            echo "$out" | grep -Eq "tensor (wte|h.0.mlp.fc.w)" \
                || fail "$what: verify does not name the tensor: $out"
        fi
        out=$("$tool" convert "$d/ck" "$d/out.safetensors" 2>&1) \
            && fail "$what: convert accepted it: $out"
        echo "$out" | grep -q "error: .*\(manifest.json\|tensor\)" \
            || fail "$what: convert failed without naming the problem: $out"
        if [ "$case" = shape ] && [ -n "$nd" ]; then
            echo "$out" | grep -q "tensor wte: shape \[2147483648, 64\]" \
                || fail "$what: convert does not name the tensor and its shape: $out"
        fi
        [ -e "$d/out.safetensors" ] && fail "$what: convert left an output"
        out=$("$train" "${args[@]}" --steps 6 --resume "$step" 2>&1) \
            && fail "$what: --resume accepted it: $(echo "$out" | tail -3)"
        echo "$out" | grep -q "checkpoint" || fail "$what: --resume gave no reason: $out"
        echo "ok: $what refused"
    done
done

# an older manifest (no digests at all) is still accepted, with a warning
rm -rf "$d/ck" && cp -a "$d/orig" "$d/ck"
python3 - "$step/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["manifest_xxh3_128"]
for t in m["tensors"].values():
    for c in t["chunks"]:
        del c["content_xxh3_128"]
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
out=$("$tool" verify "$d/ck" 2>&1) || fail "old manifest refused: $out"
echo "$out" | grep -q "has no manifest_xxh3_128" || fail "old manifest: no warning: $out"
"$train" "${args[@]}" --steps 5 --resume "$step" >/dev/null 2>&1 || fail "old manifest: resume"
echo "ok: an older manifest without digests is accepted with a warning"
