#!/bin/bash
# whale-train resumes exactly: 20 uninterrupted steps vs 10 steps + save +
# kill -9 + --resume: steps 11..20 have the same loss (within 1e-6; in
# practice bit-identical). Also: --resume latest with no checkpoint starts at
# step 0, a bad --resume path is an error naming it, a checkpoint written by
# a compressed save still resumes (within a looser bound).
# usage: train_resume_exact.sh WHALE_TRAIN WHALE_CKPT SOURCE_ROOT
set -u
train=$1 tool=$2 src=$3
d=$(mktemp -d /tmp/whale-train-resume-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat "$src"/runtime/src/*/*.c > "$d/corpus.txt"
args=(--model gpt-tiny --data "$d/corpus.txt" --steps 20 --batch 8 --threads 1 --no-progress)

compare() { # ref other first_step tol
    python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b = load(sys.argv[1]), load(sys.argv[2])
first, tol = int(sys.argv[3]), float(sys.argv[4])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) for s in b)
print(f"steps {first}..20: worst |loss difference| {worst:.3g} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}

"$train" "${args[@]}" --metrics "$d/ref.jsonl" >/dev/null 2>&1 || fail "reference run"

# 10 steps + save, then kill -9 (the process is killed once step 10 is committed)
"$train" "${args[@]}" --metrics "$d/a.jsonl" --whale-ckpt-dir "$d/ck" --whale-ckpt-every 10 \
    >/dev/null 2>&1 &
pid=$!
# bounded against a hang only (an ASan build on a loaded machine needed more
# than the old 30 s to reach step 10); stops early if the run ended
for _ in $(seq 30000); do
  [ -e "$d/ck/step-00000010/manifest.json" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ -e "$d/ck/step-00000010/manifest.json" ] || fail "no checkpoint at step 10"
"$tool" verify "$d/ck" --which 10 >/dev/null || fail "step 10 does not verify"

"$train" "${args[@]}" --metrics "$d/b.jsonl" --resume "$d/ck/step-00000010" >"$d/b.out" 2>&1 \
    || fail "resume: $(tail -3 "$d/b.out")"
grep -q "resumed from .*step-00000010: step 10" "$d/b.out" || fail "no resume line: $(cat "$d/b.out")"
compare "$d/ref.jsonl" "$d/b.jsonl" 11 1e-6 || fail "resumed losses differ"

# --resume latest under an empty root: a fresh start, said so
out=$("$train" "${args[@]}" --steps 2 --metrics "" --whale-ckpt-dir "$d/empty" --resume latest 2>&1) \
    || fail "--resume latest on an empty root: $out"
echo "$out" | grep -q "no checkpoint under .* yet, starting at step 0" || fail "no fresh-start note: $out"
[ "$(echo "$out" | grep -c "no checkpoint under")" -eq 1 ] || fail "fresh start said more than once: $out"
echo "$out" | grep -q "error" && fail "fresh start logged an error: $out"
# a bad path: named, non-zero
out=$("$train" "${args[@]}" --metrics "" --resume "$d/nope" 2>&1) && fail "bad --resume accepted"
echo "$out" | grep -q "$d/nope" || fail "bad --resume not named: $out"
# --whale-ckpt-every without a directory: refused
out=$(env -u WHALE_CKPT_DIR "$train" "${args[@]}" --metrics "" --whale-ckpt-every 5 2>&1) && fail "every without dir accepted"
echo "$out" | grep -q "needs a checkpoint directory" || fail "every without dir: $out"

# compressed checkpoint (bf16 weights, int8 moments): resumes, loss close
WHALE_CKPT_WEIGHTS=bf16 WHALE_CKPT_MOMENTS=int8 WHALE_CKPT_ASYNC=0 \
    "$train" "${args[@]}" --steps 20 --metrics "" --whale-ckpt-dir "$d/ckc" --whale-ckpt-every 10 \
    >/dev/null 2>&1 || fail "compressed save run"
"$train" "${args[@]}" --metrics "$d/c.jsonl" --resume "$d/ckc/step-00000010" >/dev/null 2>&1 \
    || fail "compressed resume"
compare "$d/ref.jsonl" "$d/c.jsonl" 11 2e-2 || fail "compressed resume drifted"
# fine-tune from a plain safetensors model: export the weights of step 10,
# import them as a new checkpoint, start from it (optimizer afresh)
"$tool" convert "$d/ck" "$d/w.safetensors" --which 10 --params-only >/dev/null || fail "export"
"$tool" convert --from-safetensors "$d/w.safetensors" "$d/ft" --model gpt-tiny >/dev/null || fail "import"
"$train" "${args[@]}" --steps 3 --metrics "$d/ft.jsonl" --resume "$d/ft" >"$d/ft.out" 2>&1 \
    || fail "fine-tune start: $(tail -3 "$d/ft.out")"
grep -q "initialized the weights from" "$d/ft.out" || fail "no init line: $(cat "$d/ft.out")"
python3 - "$d/ref.jsonl" "$d/ft.jsonl" <<'PY' || fail "fine-tune did not start from the trained weights"
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
ft = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"')]
# the first step of the fine-tune sees the step-10 weights: far below a fresh model's loss
print("fresh model %.3f, fine-tune start %.3f" % (ref[0]["loss"], ft[0]["loss"]))
sys.exit(0 if ft[0]["loss"] < ref[0]["loss"] - 0.3 else 1)
PY

# disk full during a background save: training stops with the reason, the
# partial directory is gone, the earlier checkpoint is intact
out=$(WHALE_CKPT_FAULT=enospc_after=2000000 "$train" "${args[@]}" --metrics "" \
      --whale-ckpt-dir "$d/full" --whale-ckpt-every 5 2>&1) && fail "disk full not reported"
echo "$out" | grep -q "No space left on device" || fail "no ENOSPC: $out"
echo "$out" | grep -q "stopping: .*checkpoint.* failed" || fail "training not stopped: $out"
[ "$(readlink "$d/full/latest")" = step-00000005 ] || fail "latest moved: $(ls -a "$d/full")"
ls -a "$d/full" | grep -q '^\.tmp-' && fail "partial directory left: $(ls -a "$d/full")"
"$tool" verify "$d/full" >/dev/null || fail "step 5 no longer verifies"
echo "ok: exact resume after kill -9; disk full stops training, step 5 intact"
