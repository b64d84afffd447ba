#!/bin/sh
# Checkpoints of a run whose ZeRO-3 params and optimizer state live on a
# spare (--whale-offload-target spares): that state is fetched into
# buffers only for the tensor walk, so the saver must have copied it
# before the walk ends (it used to read it after, freed: heap-use-after-free
# under ASan, SIGSEGV in whale_ckpt_fence under srun). Both snapshot modes
# save, the checkpoints verify, and a resume from step 20 repeats steps
# 21..40 of the uninterrupted run (so the saved moments are the real ones).
# Usage: train_offload_spares_ckpt.sh WHALE_RUN WHALE_TRAIN WHALE_CKPT
set -eu
RUN=$1 TRAIN=$2 TOOL=$3
T=$(mktemp -d /tmp/whale-ckpt-spares.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 - "$T/corpus.txt" <<'PY'
import sys, random
r = random.Random(7)
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os", "\n",
         "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PY
printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' >"$T/t4.conf"
C="--model $T/t4.conf --data $T/corpus.txt --batch 8 --seq 32 --grad-accum 4 --threads 1
   --no-progress --zero 3 --offload params --whale-offload-target spares"

run() { # name snapshot-mode whale-train-args...
    name=$1 mode=$2; shift 2
    # shellcheck disable=SC2086
    WHALE_CKPT_SNAPSHOT=$mode timeout 600 "$RUN" -n 3 --dp 2 --spares 1 --nodes 3 --timeout 580 \
        "$TRAIN" $C --metrics "$T/$name.jsonl" "$@" >"$T/$name.out" 2>&1 \
        || { tail -30 "$T/$name.out" >&2; fail "$name: exit status"; }
    if grep -q "AddressSanitizer\|runtime error" "$T/$name.out"; then
        grep -A12 "AddressSanitizer\|runtime error" "$T/$name.out" | head -40 >&2
        fail "$name: sanitizer report"
    fi
}
run deferred deferred --steps 40 --whale-ckpt-dir "$T/ck" --whale-ckpt-every 20
"$TOOL" verify --which 20 "$T/ck" >/dev/null || fail "step 20 does not verify"
"$TOOL" verify --which 40 "$T/ck" >/dev/null || fail "step 40 does not verify"
run resumed copy --steps 40 --resume "$T/ck/step-00000020" --whale-ckpt-dir "$T/ck2" \
    --whale-ckpt-every 10
"$TOOL" verify --which 30 "$T/ck2" >/dev/null || fail "copy mode: step 30 does not verify"
python3 - "$T/deferred.jsonl" "$T/resumed.jsonl" <<'PY' || fail "the resume differs"
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(21, 41)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print("resume from step 20 with the state on a spare: worst rel loss diff %.1e" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PY
