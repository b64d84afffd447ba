#!/bin/sh
# One declaration per knob: every "WHALE_..." name the code uses
# is in the knob table (runtime/src/util/knobs.c), whale-train and whale-run
# print that table with --help-env, and whale-train(1)'s table is exactly it.
# usage: knobs.sh SOURCE_ROOT WHALE_TRAIN WHALE_RUN
set -u
ROOT=$1 TRAIN=$2 RUN=$3
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$TRAIN" --help-env > "$tmp/train" || { echo "FAILED - whale-train --help-env"; exit 1; }
"$RUN" --help-env > "$tmp/run" || { echo "FAILED - whale-run --help-env"; exit 1; }
names() { grep -oE '^WHALE_[A-Z0-9_]+' "$1" | sort -u; }
names "$tmp/train" > "$tmp/declared"
[ "$(wc -l < "$tmp/declared")" -gt 30 ] || { echo "FAILED - --help-env lists too few knobs"; exit 1; }
if cmp -s "$tmp/train" "$tmp/run"; then echo "ok - whale-run --help-env = whale-train --help-env"
else echo "FAILED - whale-run and whale-train print different tables"; fails=1; fi
# every literal "WHALE_X" in C sources (not the WHALE_E* error codes: those are not strings)
find "$ROOT/runtime" "$ROOT/spank" -name '*.[ch]' -print0 | xargs -0 grep -ohE '"WHALE_[A-Z0-9_]+"' |
  tr -d '"' | sort -u > "$tmp/used"
missing=$(comm -23 "$tmp/used" "$tmp/declared")
if [ -z "$missing" ]; then echo "ok - every WHALE_* name in the code is declared ($(wc -l < "$tmp/used") used)"
else echo "FAILED - used but not in the knob table (runtime/src/util/knobs.c): $(echo $missing)"; fails=1; fi
# ... and read through the table: whale_knob_getenv("WHALE_X") (or util's
# whale_env_* helpers), never a bare getenv("WHALE_X") that bypasses it.
# No exceptions: the CUDA backend (.cu) includes whale/knobs.h too.
bare=$(find "$ROOT/runtime" "$ROOT/spank" \( -name '*.[ch]' -o -name '*.cu' \) -print0 |
  xargs -0 grep -nE '(^|[^_a-z])getenv\("WHALE_' | sed "s|^$ROOT/||" || true)
if [ -z "$bare" ]; then echo "ok - every WHALE_* variable is read through the knob table"
else echo "FAILED - getenv(\"WHALE_...\") bypasses whale_knob_getenv (whale/knobs.h):"; echo "$bare"; fails=1; fi
# whale-train(1)'s ENVIRONMENT table is the table: the same names, types,
# defaults and meanings, in order (the guides in docs/ do not repeat it)
"$TRAIN" --help-env=markdown > "$tmp/md"
if python3 - "$ROOT/man/whale-train.1" "$tmp/md" "$tmp/roff" <<'PY'
import sys
man, md, out = sys.argv[1:4]
lines = []
for l in open(md):
    if not l.startswith("| `"):
        continue
    name, typ, dflt, meaning = l.strip()[2:-2].split(" | ", 3)
    head = "(%s)" % typ if dflt == "-" else "(%s; default: %s)" % (typ, dflt)
    text = (head + " " + meaning).replace("\\", "\\e")
    lines += [".TP", ".B " + name.strip("`"), text]
block = "\n".join(lines) + "\n"
open(out, "w").write(block)
sys.exit(0 if block in open(man).read() else 1)
PY
then echo "ok - whale-train(1)'s table of variables is whale-train --help-env"
else
  echo "FAILED - man/whale-train.1's table (ENVIRONMENT, \"Every WHALE_* variable\") differs"
  echo "         from whale-train --help-env; the table it should hold:"
  cat "$tmp/roff"
  fails=1
fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
