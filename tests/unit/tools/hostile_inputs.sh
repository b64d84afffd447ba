#!/usr/bin/env bash
# Inputs a user names that are not what they should be: a tokenizer that
# never ends (/dev/zero) or blocks (a FIFO), data that is a FIFO, numbers
# strtod reads too generously, a metrics file nested too deep for Python,
# an over-long topology.conf line. Each is refused at once with the
# option or file and the reason; every command runs under `timeout` so
# that a hang fails the check instead of the test.
# usage: hostile_inputs.sh WHALE_TRAIN WHALE_DATA WHALE_GENERATE WHALE_CKPT WHALE_REPORT WHALE_MAP
# (WHALE_DATA and WHALE_GENERATE may be '-' when not built)
set -u
TRAIN=$1 DATA=$2 GEN=$3 CKPT=$4 REPORT=$5 MAP=$6
T=$(mktemp -d /tmp/whale-hostile-inputs-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1 (exit $rc)"; echo "$out" | tail -n 5 | cut -c1-400; fail=1; fi
}
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
mkfifo "$T/fifo"
common=(--model gpt-tiny --batch 2 --seq 16 --no-progress --steps 1)
TO="timeout 30" # each case is refused at once; a hang is a failure

# --tokenizer /dev/zero and a FIFO: whale-train
out=$($TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --tokenizer /dev/zero 2>&1); rc=$?
check "whale-train --tokenizer /dev/zero refused" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"/dev/zero: is a character device; expected a regular file"* ]]'
out=$($TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --tokenizer "$T/fifo" 2>&1); rc=$?
check "whale-train --tokenizer FIFO refused" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"$T/fifo: is a FIFO; expected a regular file"* ]]'
# --data FIFO
out=$($TO "$TRAIN" "${common[@]}" --data "$T/fifo" 2>&1); rc=$?
check "whale-train --data FIFO refused" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"data file $T/fifo: not a regular file"* ]]'

if [ "$DATA" != - ]; then
  mkdir "$T/docs" && cp "$T/data.txt" "$T/docs/a.txt" && cp "$T/data.txt" "$T/docs/b.txt"
  out=$($TO "$DATA" -o "$T/o" --no-progress --val-docs 1 --tokenizer /dev/zero "$T/docs" 2>&1); rc=$?
  check "whale-data --tokenizer /dev/zero refused" \
    '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"/dev/zero: is a character device"* ]]'
  out=$($TO "$DATA" -o "$T/o" --no-progress --val-docs 1 --tokenizer "$T/fifo" "$T/docs" 2>&1); rc=$?
  check "whale-data --tokenizer FIFO refused" \
    '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"$T/fifo: is a FIFO"* ]]'
fi
if [ "$GEN" != - ]; then
  $TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --whale-ckpt-dir "$T/ck" --whale-ckpt-every 1 \
    > /dev/null 2>&1
  # bounded address space: the old unbounded read of /dev/zero must not take the machine's
  # memory (not under AddressSanitizer, which reserves terabytes of address space for itself)
  vlimit=2000000
  ldd "$GEN" 2>/dev/null | grep -q libasan && vlimit=unlimited
  out=$(ulimit -v $vlimit; $TO "$GEN" --ckpt "$T/ck" --tokenizer /dev/zero --prompt a --tokens 2 --threads 1 2>&1); rc=$?
  check "whale-generate --tokenizer /dev/zero refused (no 4 GB read)" \
    '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 134 ] && [[ "$out" == *"/dev/zero: is a character device"* ]]'
  out=$($TO "$GEN" --ckpt "$T/ck" --tokenizer "$T/fifo" --prompt a --tokens 2 --threads 1 2>&1); rc=$?
  check "whale-generate --tokenizer FIFO refused" \
    '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$out" == *"$T/fifo: is a FIFO"* ]]'
fi

# numbers: the option, the value and the allowed range; exit 2
out=$($TO "$CKPT" bench --dir "$T/b" --mb nan 2>&1); rc=$?
check "whale-ckpt bench --mb nan refused" '[ $rc -eq 2 ] && [[ "$out" == *"--mb nan: expected a number in 1..65536"* ]]'
out=$($TO "$CKPT" bench --dir "$T/b" --mb 1e400 2>&1); rc=$?
check "whale-ckpt bench --mb 1e400 refused" '[ $rc -eq 2 ] && [[ "$out" == *"--mb 1e400: expected"* ]]'
out=$($TO "$CKPT" bench --dir '' --mb 1 2>&1); rc=$?
check "whale-ckpt bench --dir '' refused" '[ $rc -eq 2 ] && [[ "$out" == *"bench needs --dir DIR"* ]]'
out=$($TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --prom-port 0x10 2>&1); rc=$?
check "whale-train --prom-port 0x10 refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--prom-port=0x10: expected a number in 0..65535 (decimal"* ]]'
out=$($TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --prom-bind abc --prom-port 0 2>&1); rc=$?
check "whale-train --prom-bind abc refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--prom-bind=abc: expected an IPv4 address"* ]]'
out=$($TO "$TRAIN" "${common[@]}" --data "$T/data.txt" --prom-bind 127.0.0.1 2>&1); rc=$?
check "whale-train --prom-bind without --prom-port refused" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--prom-bind=127.0.0.1 needs --prom-port"* ]]'

# whale-report on JSON nested deeper than Python's parser: a message, no traceback
python3 -c "print('{\"step\":1,\"loss\":' + '['*100000 + ']'*100000 + '}')" > "$T/deep.jsonl"
out=$($TO python3 "$REPORT" "$T/deep.jsonl" -o "$T/r.html" 2>&1); rc=$?
check "whale-report: deeply nested JSON gives a message, not a traceback" \
  '[ $rc -eq 1 ] && [[ "$out" != *Traceback* ]] && [[ "$out" == *"nested too deeply"* ]]'
printf '{"step":1,"loss":2.5}\n' > "$T/ok.jsonl"
python3 -c "print('['*100000 + ']'*100000)" > "$T/deep.json"
out=$($TO python3 "$REPORT" "$T/ok.jsonl" --trace "$T/deep.json" -o "$T/r.html" 2>&1); rc=$?
check "whale-report: a deeply nested trace is skipped with a message" \
  '[ $rc -eq 0 ] && [[ "$out" != *Traceback* ]] && [[ "$out" == *"deep.json: not a JSON trace (or nested too deeply)"* ]]'

# an over-long topology.conf line: the reason survives, the echo is bounded
printf 'TopologyFile=%s\nNodeName=DEFAULT GPUs=8\n' "$T/t.conf" > "$T/w.conf"
python3 -c "print('SwitchName=leaf0 Nodes=n[1-2] ' + 'x' * 5000)" > "$T/t.conf"
out=$($TO "$MAP" -c "$T/w.conf" -w 'n[1-2]' -t 1 --tp 1 2>&1); rc=$?
check "topology.conf: a 5000-byte word keeps its reason, echo bounded" \
  '[ $rc -ne 0 ] && [[ "$out" == *"t.conf:1: '"'"'"*"...'"'"' is not of the form Key=Value"* ]] && [ "$(head -1 <<< "$out" | wc -c)" -lt 400 ]'
python3 -c "print('SwitchName=leaf0 Nodes=n[1-2] ' + 'Bogus' * 1000 + '=1')" > "$T/t.conf"
out=$($TO "$MAP" -c "$T/w.conf" -w 'n[1-2]' -t 1 --tp 1 2>&1); rc=$?
check "topology.conf: a 5000-byte unknown key keeps its reason, echo bounded" \
  '[ $rc -ne 0 ] && [[ "$out" == *"unknown key '"'"'BogusBogus"*"...'"'"' in"* ]] && [ "$(head -1 <<< "$out" | wc -c)" -lt 400 ]'
exit $fail
