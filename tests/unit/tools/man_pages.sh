#!/bin/sh
# Every page a man page, the README, a guide in docs/ or a tool's --help cites as NAME(N) for a
# Whale program exists under man/, is installed (man/meson.build), and
# renders without groff warnings or empty .TP entries. usage: man_pages.sh SOURCE_ROOT
set -u
ROOT=$1
fails=0
cited=$(cat "$ROOT"/man/*.[158] "$ROOT"/README.md "$ROOT"/docs/*.md "$ROOT"/runtime/tools/*/*.c 2>/dev/null |
  sed 's/\\f[BIRP]//g; s/\\-/-/g' |
  grep -oE '(whale-[a-z]+|spank_whale|whale\.conf) ?\(\\?[158]\)' | tr -d ' \\' | sort -u)
[ -n "$cited" ] || { echo "FAILED - found no citations (the pattern is broken)"; exit 1; }
for c in $cited; do
  page=$(echo "$c" | sed 's/(\([158]\))/.\1/')
  if [ ! -f "$ROOT/man/$page" ]; then
    echo "FAILED - $c is cited but man/$page does not exist"; fails=$((fails + 1)); continue
  fi
  if ! grep -q "'$page'" "$ROOT/man/meson.build"; then
    echo "FAILED - man/$page is not installed by man/meson.build"; fails=$((fails + 1))
  fi
done
for f in "$ROOT"/man/*.[158]; do
  # a .TP directly followed by another paragraph macro is an empty entry,
  # which groff renders without a warning
  e=$(awk 'prev == ".TP" && /^\.(TP|PP|P|LP|IP|SH|SS)( |$)/ { print FILENAME ":" NR - 1 ": .TP with no tag" }
           { prev = $0 }' "$f")
  if [ -n "$e" ]; then echo "FAILED - $e"; fails=$((fails + 1)); fi
  w=$(LC_ALL=C.UTF-8 groff -man -ww -z -Tutf8 "$f" 2>&1)
  if [ -n "$w" ]; then echo "FAILED - $f: $w"; fails=$((fails + 1)); else echo "ok - $(basename "$f")"; fi
done
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
