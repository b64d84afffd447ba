#!/usr/bin/env bash
# Detection and membership-recovery times of the comm layer (whale/elastic.h),
# measured with tests/unit/comm/el_check under whale-run over TCP: per
# failure kind, the median over REPS runs of
#   detect  last sign of life of the failed task -> declared failed
#   agree   entering recovery -> decision known (max over survivors)
#   rebuild groups rebuilt + closing barrier (max over survivors)
# as printed by every survivor's event line. The training-level recovery
# (state transfer, redo) is measured by the training half's benchmark.
#
# usage: contrib/bench/elastic-detect.sh [BUILD_DIR] [REPS]   (default build, 5)
set -u
BUILD=${1:-build}
REPS=${2:-5}
RUN=$BUILD/runtime/tools/run/whale-run
CHECK=$BUILD/tests/unit/comm/el_check
[ -x "$RUN" ] && [ -x "$CHECK" ] || { echo "elastic-detect: build first ($RUN, $CHECK)" >&2; exit 2; }
export WHALE_PEER_TIMEOUT=${WHALE_PEER_TIMEOUT:-2} WHALE_UCX_PEER_MODE=1 UCX_TLS=tcp,self

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

one() {  # name, whale-run args..., -- , el_check args...
  local name=$1; shift
  local ra=() ca=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do ra+=("$1"); shift; done
  shift
  ca=("$@")
  local d=() a=() r=() ok=0
  for _ in $(seq "$REPS"); do
    out=$("$RUN" "${ra[@]}" --keep-going --timeout 120 "$CHECK" "${ca[@]}" 2>&1)
    ev=$(printf '%s\n' "$out" | grep 'el_check: task .* event epoch 1 ')
    [ -n "$ev" ] || continue
    ok=$((ok + 1))
    d+=("$(printf '%s\n' "$ev" | sed -n 's/.* detect \([0-9.]*\) s.*/\1/p' | sort -g | tail -1)")
    a+=("$(printf '%s\n' "$ev" | sed -n 's/.* agree \([0-9.]*\) s.*/\1/p' | sort -g | tail -1)")
    r+=("$(printf '%s\n' "$ev" | sed -n 's/.* rebuild \([0-9.]*\) s.*/\1/p' | sort -g | tail -1)")
  done
  printf '%-34s %3d/%-3d %9s %9s %9s\n' "$name" "$ok" "$REPS" \
    "$(printf '%s\n' "${d[@]}" | median)" "$(printf '%s\n' "${a[@]}" | median)" \
    "$(printf '%s\n' "${r[@]}" | median)"
}

echo "elastic-detect: whale-run over TCP, WHALE_PEER_TIMEOUT=$WHALE_PEER_TIMEOUT, median of $REPS (seconds)"
printf '%-34s %7s %9s %9s %9s\n' scenario runs detect agree rebuild
one "kill -9 one rank (CRASH)" -n 4 --nodes 4 --spares 1 -- kill --victims 1
one "kill -9 two ranks at once" -n 6 --nodes 6 --spares 2 -- kill --victims 1,2
one "SIGSTOP one rank (HANG)" -n 4 --nodes 4 --spares 1 -- stop --victims 2
one "kill, no spare: shrink DP 2->1" -n 4 --nodes 2 --tp 2 -- kill --victims 3
