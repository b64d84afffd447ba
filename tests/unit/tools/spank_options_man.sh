#!/bin/sh
# Every --whale-* option the plugin registers (the option table in
# spank/options.c) is described in spank_whale(8), so the page cannot fall
# behind the plugin. usage: spank_options_man.sh SOURCE_ROOT
set -u
ROOT=$1
fails=0
opts=$(grep -oE '\{ OPT_[A-Z_]+, "whale[a-z-]*"' "$ROOT/spank/options.c" | sed 's/.*"\(.*\)"/\1/')
[ "$(echo "$opts" | wc -w)" -gt 10 ] || { echo "FAILED - found too few options in spank/options.c (the pattern is broken)"; exit 1; }
# the page's text with roff's escapes undone: \- is -, fonts dropped
text=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "$ROOT/man/spank_whale.8")
for o in $opts; do
  if echo "$text" | grep -qE -- "--$o([^a-z-]|\$)"; then echo "ok - --$o"
  else echo "FAILED - --$o is registered in spank/options.c but not described in man/spank_whale.8"; fails=$((fails + 1)); fi
done
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
