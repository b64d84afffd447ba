#!/bin/sh
# libwhale.so exports exactly the public API the tools use
# (runtime/libwhale.map): every defined dynamic symbol is whale_*, and each
# of them is called by at least one tool (the link of the tools checks the
# other direction: what they call is exported).
# usage: libwhale_exports.sh LIBWHALE.so TOOL...
set -u
LIB=$1; shift
syms=$(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//' | sort -u)
[ -n "$syms" ] || { echo "FAILED - no dynamic symbols in $LIB"; exit 1; }
bad=$(echo "$syms" | grep -v '^whale_' || true)
fails=0
if [ -n "$bad" ]; then
  echo "FAILED - $(echo "$bad" | wc -l) internal symbols exported, e.g.: $(echo "$bad" | head -5 | tr '\n' ' ')"
  fails=1
else
  echo "ok - $(echo "$syms" | wc -l) symbols, all whale_*"
fi
used=$(for t in "$@"; do nm -D --undefined-only "$t" | awk '{print $2}' | sed 's/@.*//'; done |
  grep '^whale_' | sort -u)
[ -n "$used" ] || { echo "FAILED - the tools use no whale_* symbol: wrong arguments?"; exit 1; }
unused=$(printf '%s\n' "$syms" | grep -vxF "$used" || true)
if [ -n "$unused" ]; then
  echo "FAILED - $(echo "$unused" | wc -l) exported but used by no tool (drop them from runtime/libwhale.map): $(echo "$unused" | head -8 | tr '\n' ' ')"
  fails=1
else
  echo "ok - every export is used by a tool ($# tools)"
fi
for s in whale_init whale_engine_create whale_allreduce whale_ckpt_open; do
  echo "$syms" | grep -qx "$s" || { echo "FAILED - public $s is not exported"; fails=1; }
done
[ "$fails" -eq 0 ]
