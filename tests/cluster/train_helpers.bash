# Shared by the whale-train equivalence tests (train-dp, train-tp, train-3d).

# make_corpus DIR: real text, the project's own sources (always present)
make_corpus() {
  cat "$WHALE_SRC_DIR"/runtime/src/*/*.c > "$1/corpus.txt"
}

# same_losses REF OTHER [--grad-norm]: both runs have 20 steps and every
# step's loss is within 1e-5 relative (with --grad-norm also the gradient
# norm within 1e-4).
same_losses() {
  python3 - "$1" "$2" "${3:-}" <<'PY'
import json, sys
def load(p):
    # the last line of a step counts: a recovery writes redone steps again
    d = {}
    for l in open(p):
        if l.startswith('{"step"'):
            j = json.loads(l)
            d[j["step"]] = j
    return [d[k] for k in sorted(d)]
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == 20 and len(b) == 20, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
ok = worst < 1e-5
msg = "worst relative loss difference %.2e" % worst
if sys.argv[3] == "--grad-norm":
    gn = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]) for x, y in zip(a, b))
    msg += ", grad norm %.2e" % gn
    ok = ok and gn < 1e-4
print(msg)
sys.exit(0 if ok else 1)
PY
}

# run_numbers METRICS STEPS TOKENS [SAVES]: the numbers of a run's metrics
# file are the whole run's and measured ones, also after a resume, a
# recovery (a promoted spare or a renumbered rank 0 writes the summary) or
# redone steps: MFU in (0, 1] on every line and in the summary; each
# line's tokens/s is TOKENS (global batch x seq) over its step_s; the
# summary's tokens/s lies within the lines' (it is tokens over time of some
# of them); the summary counts STEPS steps (a redone step once) and
# STEPS x TOKENS tokens, its first loss is the first step's and its final
# loss the last line's; SAVES checkpoints (when given).
run_numbers() {
  python3 - "$@" <<'PY'
import json, sys
path, steps, tok = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
saves = int(sys.argv[4]) if len(sys.argv) > 4 else None
recs = [json.loads(l) for l in open(path) if l.startswith("{")]
st = [j for j in recs if "step" in j and "mfu" in j]
sm = [j["summary"] for j in recs if "summary" in j]
assert st, "no step lines in %s" % path
assert sm, "no summary in %s" % path
s = sm[-1]
print("summary: steps %s, first_loss %s, final_loss %s, tokens/s %.0f, mfu %.4f, tokens %s, "
      "redone %s, checkpoints %s" % (s["steps"], s["first_loss"], s["final_loss"],
      s["tokens_per_s"], s["mfu"], s.get("tokens"), s.get("redone_steps", 0), s.get("checkpoints")))
bad = [(j["step"], j["mfu"]) for j in st if not 0 < j["mfu"] <= 1]
assert not bad, "MFU outside (0, 1] on step lines: %s" % bad[:8]
assert 0 < s["mfu"] <= 1, "summary MFU %s" % s["mfu"]
off = [(j["step"], j["tokens_per_s"] * j["step_s"]) for j in st
       if abs(j["tokens_per_s"] * j["step_s"] - tok) > 1e-6 * tok]
assert not off, "tokens/s x step_s is not %g tokens: %s" % (tok, off[:5])
rates = [j["tokens_per_s"] for j in st]
assert min(rates) * (1 - 1e-9) <= s["tokens_per_s"] <= max(rates) * (1 + 1e-9), \
    "summary tokens/s %g outside the steps' [%g, %g]" % (s["tokens_per_s"], min(rates), max(rates))
assert s["steps"] == steps, "summary steps %s, want %d" % (s["steps"], steps)
if "tokens" in s:
    assert abs(s["tokens"] - steps * tok) <= 1e-9 * steps * tok, "summary tokens %s" % s["tokens"]
first = min(j["step"] for j in st)
firsts = [j["loss"] for j in st if j["step"] == first]
assert s["first_loss"] == firsts[0], "summary first loss %s, step %d's is %s" % (s["first_loss"], first, firsts[0])
assert s["final_loss"] == st[-1]["loss"], "summary final loss %s, last line's %s" % (s["final_loss"], st[-1]["loss"])
if saves is not None:
    got = (s.get("checkpoints") or {}).get("saves", 0)
    assert got == saves, "summary says %s checkpoints saved, %d were committed" % (got, saves)
PY
}

# committed ROOT: how many checkpoints were committed under ROOT (a run
# with --ckpt-keep 0: none pruned)
committed() {
  find "$1" -mindepth 1 -maxdepth 1 -type d -name 'step-*' | wc -l
}
