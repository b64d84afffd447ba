#!/bin/sh
# libwhale.so exports its public API only: every defined dynamic symbol is
# whale_* (runtime/libwhale.map), and the API the tools use is there.
# usage: libwhale_exports.sh LIBWHALE.so
set -u
LIB=$1
syms=$(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//')
[ -n "$syms" ] || { echo "FAILED - no dynamic symbols in $LIB"; exit 1; }
bad=$(echo "$syms" | grep -v '^whale_' || true)
fails=0
if [ -n "$bad" ]; then
  echo "FAILED - $(echo "$bad" | wc -l) internal symbols exported, e.g.: $(echo "$bad" | head -5 | tr '\n' ' ')"
  fails=1
else
  echo "ok - $(echo "$syms" | wc -l) symbols, all whale_*"
fi
for s in whale_init whale_engine_create whale_allreduce whale_ckpt_open whale_plan_from_json; do
  echo "$syms" | grep -qx "$s" || { echo "FAILED - public $s is not exported"; fails=1; }
done
[ "$fails" -eq 0 ]
