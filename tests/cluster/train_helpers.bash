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
