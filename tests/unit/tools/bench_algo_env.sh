#!/bin/sh
# whale-bench comm honours WHALE_COLL_ALGO as training does: without -a the
# variable's algorithm is used; -a overrides it. Its report ends with the
# largest rank's peak RSS (comm-vs-openmpi.sh prints it beside Open MPI's).
# usage: bench_algo_env.sh WHALE_RUN WHALE_BENCH
set -u
RUN=$1 BENCH=$2
fails=0
t() { # name, then a command that must succeed
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "FAILED - $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the algo column (last) of every data line, deduplicated
algos() { awk '$1 ~ /^[0-9]+$/ { print $NF }' "$1" | sort -u | tr '\n' ' '; }

WHALE_COLL_ALGO=ring "$RUN" -n 4 --no-label "$BENCH" comm -b 64K -e 1M -f 16 -n 2 -w 1 \
  >"$tmp/env" 2>&1
t "runs with WHALE_COLL_ALGO=ring" [ $? -eq 0 ]
t "WHALE_COLL_ALGO=ring is used (got: $(algos "$tmp/env"))" [ "$(algos "$tmp/env")" = "ring " ]
rss=$(awk '/^# Peak RSS per rank/ { print $7 }' "$tmp/env")
t "peak RSS per rank reported (got: '$rss' MiB)" awk -v r="${rss:-0}" 'BEGIN { exit !(r > 0) }'

WHALE_COLL_ALGO=ring "$RUN" -n 4 --no-label "$BENCH" comm -a rd -b 64K -e 1M -f 16 -n 2 -w 1 \
  >"$tmp/flag" 2>&1
t "runs with -a rd" [ $? -eq 0 ]
t "-a rd overrides the variable (got: $(algos "$tmp/flag"))" [ "$(algos "$tmp/flag")" = "rd " ]

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
