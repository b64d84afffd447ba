#!/bin/sh
# whale-bench offload adamw: every row the offload benchmark
# parses is printed with a positive time, on every SIMD path this CPU runs,
# and bad options are refused with a message naming them. Figures are not
# judged here (no timing asserts: CI is a busy 2-core machine); one OpenMP
# thread, so a loaded machine cannot stall the barriers.
# usage: bench_adamw.sh WHALE_BENCH
set -u
BENCH=$1
fails=0
t() { # name, then a command that must succeed
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "FAILED - $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows="whale-host whale-pertensor whale-loop bound-stream28 bound-compute-l2 whale-clip whale-mixed-bf16"
for simd in scalar avx2 avx512; do
  OMP_NUM_THREADS=1 "$BENCH" offload adamw -m gpt-tiny -r 1 --simd "$simd" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] && grep -q "this CPU runs at most" "$tmp/err"; then
    echo "ok - --simd $simd: not on this CPU (refused: $(cat "$tmp/err"))"
    continue
  fi
  t "--simd $simd runs" [ $rc -eq 0 ]
  t "--simd $simd: the path is named in the header" grep -q "host AdamW path $simd" "$tmp/out"
  for r in $rows; do
    t "--simd $simd: row $r with a positive median" \
      awk -v r="$r" '$1 == r && $3 > 0 { f = 1 } END { exit !f }' "$tmp/out"
  done
done
"$BENCH" offload adamw -m gpt-tiny -r 0 >/dev/null 2>"$tmp/err"
t "-r 0 is refused" [ $? -ne 0 ]
t "-r 0: the message names the range" grep -q -- "-r 0: expected 1..1000" "$tmp/err"
"$BENCH" offload adamw -m gpt-tiny --simd avx9 >/dev/null 2>"$tmp/err"
t "--simd avx9 is refused" [ $? -ne 0 ]
t "--simd avx9: the message names the choices" grep -q "expected scalar, avx2 or avx512" "$tmp/err"
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
