#!/usr/bin/env bash
# ZeRO 1/2 leave the gather of each bucket's updated weights in flight
# after the step and wait for it right before the bucket's next use. With
# WHALE_ZERO_LATE_GATHER=1 the other ranks' blocks are NaN until that wait
# and the gather only starts there, so a read of the weights that skips
# the wait (a layer's forward, an evaluation, a checkpoint save) shows as
# a NaN or different loss, or a different checkpoint. Each case: DP 2 under
# whale-run, late gather against the ordinary run, per-step losses and
# the checkpoint equal bit for bit; the ordinary ZeRO 1 run within 1e-6 of
# one rank (its gradients now come from a reduce-scatter).
# usage: zero_gather.sh WHALE_RUN WHALE_TRAIN
set -u
RUN=$1 TRAIN=$2
T=$(mktemp -d /tmp/whale-zgather-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail=0
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 8 --seq 16 --steps 4 --no-progress
        --threads 1 --val-data "$T/data.txt" --eval-every 2 --eval-batches 1 --whale-ckpt-every 4 --ckpt-keep 1)
losses() { # metrics file -> the train and eval losses of every step, as exact text
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    for k in ("loss", "val_loss", "eval_loss"):
        if k in r and "summary" not in r:
            print(r.get("step"), k, repr(r[k]))' "$1"
}
run() { # name, ranks, args...
  local name=$1 n=$2; shift 2
  if [ "$n" = 1 ]; then
    out=$("$TRAIN" "${common[@]}" --whale-ckpt-dir "$T/$name.ck" --metrics "$T/$name.jsonl" "$@" 2>&1)
  else
    out=$("$RUN" -n "$n" "$TRAIN" "${common[@]}" --whale-ckpt-dir "$T/$name.ck" \
          --metrics "$T/$name.jsonl" "$@" 2>&1)
  fi || { echo "not ok - $name: exit status"; echo "$out" | tail -n 5; fail=1; return 1; }
}
same() { # a, b: losses and checkpoint tensors equal
  local a=$1 b=$2
  if [ "$(losses "$T/$a.jsonl")" != "$(losses "$T/$b.jsonl")" ] ||
     [ -z "$(losses "$T/$a.jsonl")" ] || grep -qi nan "$T/$b.jsonl"; then
    echo "not ok - $b: losses differ from $a"; diff <(losses "$T/$a.jsonl") <(losses "$T/$b.jsonl") | head -n 6
    fail=1; return
  fi
  if ! diff -rq -x '*.json' "$T/$a.ck" "$T/$b.ck" >/dev/null; then
    echo "not ok - $b: checkpoint tensors differ from $a"; diff -rq -x '*.json' "$T/$a.ck" "$T/$b.ck" | head -n 3
    fail=1; return
  fi
  echo "ok - $b equals $a (losses, evaluations, checkpoint)"
}

run one 1 --zero 0
for c in "z1|--zero 1" "z2|--zero 2" \
         "z1-bf16-r16|--zero 1 --precision bf16 --grad-reduce 16 --grad-accum 2"; do
  name=${c%%|*} args=${c#*|}
  # shellcheck disable=SC2086
  run "$name" 2 $args || continue
  # shellcheck disable=SC2086
  WHALE_ZERO_LATE_GATHER=1 run "$name-late" 2 $args && same "$name" "$name-late"
done
d=$(python3 - "$T/one.jsonl" "$T/z1.jsonl" <<'PY'
import json, sys
def losses(f):
    return [r["loss"] for r in map(json.loads, open(f)) if "loss" in r and "summary" not in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("%.3g" % max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 4 else "steps")
PY
)
if python3 -c "import sys; sys.exit(0 if sys.argv[1] != 'steps' and float(sys.argv[1]) <= 1e-6 else 1)" "$d"
then echo "ok - ZeRO 1 at DP 2 within 1e-6 of one rank ($d)"
else echo "not ok - ZeRO 1 at DP 2 against one rank: $d"; fail=1; fi
exit $fail
