# Shared by test_train3d.sh and test_train3d_llama.sh (sourced; POSIX sh).
# The caller sets RUN, TRAIN, T (a scratch folder), COMMON (whale-train
# arguments of every run) and STEPS (the run length COMMON asks for).
fail() { echo "FAIL: $*" >&2; exit 1; }

# make_corpus SEED WORDS: Python-like text, deterministic, into $T/corpus.txt
make_corpus() {
    python3 - "$T/corpus.txt" "$1" "$2" <<'EOF'
import sys, random
r = random.Random(int(sys.argv[2]))
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os",
         "\n", "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
with open(sys.argv[1], "w") as f:
    f.write("".join(r.choice(words) for _ in range(int(sys.argv[3]))))
EOF
}

train() { # name ntasks whale-run-args... -- whale-train-args...
    name=$1; n=$2; shift 2
    rargs=""
    while [ "$1" != "--" ]; do rargs="$rargs $1"; shift; done
    shift
    # shellcheck disable=SC2086
    if ! timeout 300 "$RUN" -n "$n" --timeout 280 $rargs "$TRAIN" $COMMON --metrics "$T/$name.jsonl" "$@" \
            >"$T/$name.out" 2>&1; then
        cat "$T/$name.out" >&2
        fail "$name: whale-train failed"
    fi
}

compare() { # name: every step's loss within 1e-5 relative of the single-rank run
    python3 - "$T/ref.jsonl" "$T/$1.jsonl" "$1" "$STEPS" <<'EOF' || fail "$1: losses differ from the single-rank run"
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"step"' in l]
a, b, n = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[4])
assert len(a) == n and len(b) == n, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("  %-44s loss %.4f -> %.4f  worst rel diff %.1e" % (sys.argv[3], b[0], b[-1], worst))
sys.exit(0 if worst <= 1e-5 else 1)
EOF
}

# the single-rank reference, which must learn
train_reference() {
    train ref 1 --
    python3 -c "
import json
l=[json.loads(x)['loss'] for x in open('$T/ref.jsonl') if '\"step\"' in x]
assert l[-1] < l[0] - 0.3, l" || fail "the reference run does not learn"
}
