#!/usr/bin/env bash
# whale-train --device on this machine: bad values are usage errors naming
# the allowed ones; auto says which device it chose and why and trains; cpu
# trains; cuda where no GPU answers (or the build has no CUDA backend) stops
# with exit 2 and the reason, before any step. On a machine with a usable
# GPU the cuda refusal check is skipped (the GPU suite covers that case).
# usage: train_device.sh WHALE_TRAIN
set -u
TRAIN=$1
T=$(mktemp -d /tmp/whale-train-device-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 5; fail=1; fi
}
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done > "$T/data.txt"
common=(--model gpt-tiny --data "$T/data.txt" --batch 2 --seq 16 --no-progress --threads 1
        --metrics "$T/m.jsonl")

out=$("$TRAIN" "${common[@]}" --steps 1 --device tpu 2>&1); rc=$?
check "--device tpu refused with the allowed values" \
  '[ $rc -eq 2 ] && [[ "$out" == *"--device=tpu: expected cpu, cuda or auto"* ]]'
out=$(WHALE_DEVICE=gpu "$TRAIN" "${common[@]}" --steps 1 2>&1); rc=$?
check "WHALE_DEVICE=gpu refused, naming the variable" \
  '[ $rc -eq 2 ] && [[ "$out" == *"WHALE_DEVICE=gpu: expected cpu, cuda or auto"* ]]'

out=$("$TRAIN" "${common[@]}" --steps 1 --device cpu 2>&1); rc=$?
check "--device cpu trains" '[ $rc -eq 0 ] && [[ "$out" == *"device: cpu (cpu asked for)"* ]]'

out=$(CUDA_VISIBLE_DEVICES= "$TRAIN" "${common[@]}" --steps 1 2>&1); rc=$?
check "default auto without a bound GPU: cpu, with the reason" \
  '[ $rc -eq 0 ] && [[ "$out" == *"device: cpu (auto chose cpu: "* ]]'

out=$("$TRAIN" "${common[@]}" --steps 1 --device cuda 2>&1); rc=$?
if [[ "$out" == *"device: cuda"* ]]; then
  echo "ok - # SKIP a GPU answers here: the cuda refusal is not testable"
else
  check "--device cuda without a usable GPU: exit 2 with the reason, no step" \
    '[ $rc -eq 2 ] && [[ "$out" == *"--device=cuda cannot run here: "* ]] && [[ "$out" != *"step 1"* ]]'
  check "the reason names the cause" \
    '[[ "$out" =~ (no\ CUDA\ backend|CUDA\ driver|no\ GPU) ]]'
fi
exit $fail
