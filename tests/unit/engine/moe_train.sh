#!/bin/bash
# A MoE model through whale-train: the metrics lines and the summary carry
# the routing statistics ("moe": imbalance, dropped, aux, z-loss; active
# parameters below all parameters), whale-report draws them, and a
# checkpoint holds every expert's tensors by name (h.N.moe.expert.E.*) and
# resumes exactly: 10 steps + save + --resume to 20 equals 20 steps.
# usage: moe_train.sh WHALE_TRAIN WHALE_CKPT SOURCE_ROOT
set -u
train=$1 tool=$2 src=$3
d=$(mktemp -d /tmp/whale-moe-train-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat "$src"/runtime/src/engine/*.c > "$d/corpus.txt"
args=(--model gpt-moe-tiny --data "$d/corpus.txt" --format bytes --batch 8 --threads 1 --no-progress)

"$train" "${args[@]}" --steps 20 --metrics "$d/ref.jsonl" >"$d/ref.out" 2>&1 || fail "reference run: $(tail -3 "$d/ref.out")"
grep -q "routing (rank 0)" "$d/ref.out" || fail "no routing line in the summary: $(tail -5 "$d/ref.out")"
python3 - "$d/ref.jsonl" <<'PY' || fail "metrics"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step" in l]
summ = [l["summary"] for l in lines if "summary" in l][0]
assert len(steps) == 20, len(steps)
for s in steps:
    m = s["moe"]
    assert m["routed"] == 2 * 8 * 64 * 2, m  # TopK x batch x seq x MoE blocks
    assert 0 <= m["dropped"] <= m["routed"] and m["imbalance"] >= 1.0 and m["tok_max"] >= m["tok_min"], m
    assert m["aux"] > 0 and m["zloss"] > 0, m
m = summ["moe"]
assert m["experts"] == 4 and m["topk"] == 2 and m["moe_blocks"] == 2, m
assert 0 < m["active_params"] < m["params"], m
print("metrics: %d steps, imbalance %.2f, dropped %.1f %%, active %d of %d parameters"
      % (len(steps), m["imbalance"], 100 * m["dropped_frac"], m["active_params"], m["params"]))
PY
python3 "$src/runtime/tools/report/whale-report.py" "$d/ref.jsonl" -o "$d/r.html" >/dev/null 2>&1 || fail "whale-report"
grep -q 'id="fig-moe"' "$d/r.html" || fail "no routing figure in the report"
grep -q "expert routing" "$d/r.html" || fail "no routing row in the report"

# the same 20-step run (its LR schedule), stopped once step 10 is saved
"$train" "${args[@]}" --steps 20 --metrics "" --whale-ckpt-dir "$d/ck" --whale-ckpt-every 10 \
    >"$d/a.out" 2>&1 &
pid=$!
for _ in $(seq 30000); do # bounded against a hang only
  [ -e "$d/ck/step-00000010/manifest.json" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ -e "$d/ck/step-00000010/manifest.json" ] || fail "no checkpoint at step 10: $(tail -3 "$d/a.out")"
"$tool" ls "$d/ck/step-00000010" >"$d/ls.out" 2>&1 || "$tool" info "$d/ck/step-00000010" >"$d/ls.out" 2>&1
grep -rqa "h.1.moe.expert.3.proj.w" "$d/ck/step-00000010" "$d/ls.out" || fail "no expert tensor names in the checkpoint"
grep -rqa "h.0.moe.router.w" "$d/ck/step-00000010" "$d/ls.out" || fail "no router tensor in the checkpoint"
"$train" "${args[@]}" --steps 20 --metrics "$d/b.jsonl" --resume "$d/ck/step-00000010" >"$d/b.out" 2>&1 \
    || fail "resume: $(tail -3 "$d/b.out")"
python3 - "$d/ref.jsonl" "$d/b.jsonl" <<'PY' || fail "resumed losses differ"
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(11, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) for s in b)
print(f"resume: steps 11..20 worst |loss difference| {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
echo "PASS"
