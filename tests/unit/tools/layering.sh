#!/bin/sh
# The module layering of runtime/ARCHITECTURE.md holds (contrib/check-layering.py),
# and the check catches an upward include (planted in a copy of the tree).
# usage: layering.sh SOURCE_ROOT
set -u
ROOT=$1
fails=0
if python3 "$ROOT/contrib/check-layering.py" "$ROOT"; then echo "ok - the tree is layered"
else echo "FAILED - upward includes (above)"; fails=1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/runtime" "$tmp/contrib"
cp -r "$ROOT/runtime/include" "$ROOT/runtime/src" "$ROOT/runtime/ARCHITECTURE.md" "$tmp/runtime/"
cp -r "$ROOT/spank" "$tmp/"
printf '#include "whale/engine.h"\n' >> "$tmp/runtime/src/util/log.c"
out=$(python3 "$ROOT/contrib/check-layering.py" "$tmp" 2>&1)
if [ $? -ne 0 ] && echo "$out" | grep -q 'runtime/src/util/log.c:.*util (level 0) includes whale/engine.h'; then
  echo "ok - a planted upward include is caught and named"
else echo "FAILED - the planted include util -> engine was not reported: $out"; fails=1; fi
[ "$fails" -eq 0 ]
