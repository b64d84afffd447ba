# Shared by the whale-run layout tests (sourced, POSIX sh): the same training
# under several parallel layouts must give one rank's losses.
#   T      scratch directory (made and removed here)
#   RUN    whale-run, TRAIN whale-train
#   C      the whale-train arguments every run shares (set after sourcing)
# layout_corpus FILE    a fixed code-like corpus (seeded: runs are comparable)
# run NAME N [whale-run args] -- [whale-train args]   metrics in $T/NAME.jsonl
# compare NAME FIRST [REF [TOL]]   steps FIRST..20 of NAME equal REF's (ref)
#                                  to TOL relative (1e-5)
T=$(mktemp -d /tmp/whale-layouts.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

layout_corpus() {
    python3 - "$1" <<'PY'
import sys, random
r = random.Random(7)
words = ["def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ", "import ", "os", "\n",
         "for i in range(10):", "while ", "True", "None", "[", "]", "+", "1"]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PY
}

run() {
    name=$1 n=$2; shift 2
    rargs=""
    while [ "$1" != "--" ]; do rargs="$rargs $1"; shift; done
    shift
    # shellcheck disable=SC2086
    timeout 300 "$RUN" -n "$n" --timeout 280 $rargs "$TRAIN" $C --metrics "$T/$name.jsonl" "$@" \
        >"$T/$name.out" 2>&1 || { tail -20 "$T/$name.out" >&2; fail "$name"; }
}

compare() {
    python3 - "$T/${3:-ref}.jsonl" "$T/$1.jsonl" "$2" "$1" "${4:-1e-5}" <<'PY' || fail "$1: losses differ"
import json, sys
def load(p):
    return {d["step"]: d["loss"] for d in (json.loads(l) for l in open(p)) if "step" in d}
a, b, first, tol = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), float(sys.argv[5])
assert sorted(b) == list(range(first, 21)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
print("  %-36s steps %d..20, worst rel loss diff %.1e" % (sys.argv[4], first, worst))
sys.exit(0 if worst <= tol else 1)
PY
}
