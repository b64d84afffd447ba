#!/bin/bash
# Elastic recovery under srun on the minicluster.
# For each model shape, in one run:
#   1. baseline: the layout without spares (no in-memory copies)     -> step time
#   2. the same layout + 1 spare node, uninterrupted                  -> step time,
#      redundancy bytes and seconds per step: overhead vs 1.     target <= 5 %
#   3. + a fault (WHALE_FAULT kill of one rank, or -k: the minicluster kills
#      that rank's whole node): the recovery event -> detect, agree, transfer,
#      rebuild, redo seconds, steps lost                target <= 10 s, <= 1 step
#   4. the competitor, measured here too: what a restart-based system does
#      (torchrun / a new job): the failed run stops, a new srun resumes from
#      the last disk checkpoint -> seconds from the failure until the failed
#      step is computed again, and the steps lost (since the checkpoint).
# usage: contrib/bench/elastic-recovery-srun.sh [-b BUILD] [-m MODELS] [-s STEPS]
#            [-f FAIL_STEP] [-c CKPT_EVERY] [-k]
#   MODELS: comma-separated presets (default gpt-small,gpt2-124m); gpt2-124m
#   runs with a short sequence and TP=2 PP=2 DP=1 so it fits 2 cores.
# Needs the minicluster up with 5 nodes (eval "$(whale-minicluster env)").
set -euo pipefail
build=build models=gpt-small,gpt2-124m steps=16 fail=8 ckevery=4 nodekill=0
while getopts "b:m:s:f:c:kh" o; do
    case $o in
    b) build=$OPTARG ;; m) models=$OPTARG ;; s) steps=$OPTARG ;; f) fail=$OPTARG ;;
    c) ckevery=$OPTARG ;; k) nodekill=1 ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
[ "$fail" -lt "$steps" ] || { echo "elastic-recovery: -f $fail must be below -s $steps" >&2; exit 2; }
here=$(cd "$(dirname "$0")/../.." && pwd)
train=$build/runtime/tools/train/whale-train
mc=$here/contrib/minicluster/whale-minicluster
[ -x "$train" ] || { echo "elastic-recovery: $train not built (ninja -C $build)" >&2; exit 1; }
: "${SLURM_CONF:?start the minicluster and eval \"\$(whale-minicluster env)\" first}"
[ "$(sinfo -h -N -o %N | sort -u | wc -l)" -ge 5 ] || { echo "elastic-recovery: needs 5 nodes" >&2; exit 1; }
I=${WHALE_MC_INSTANCE:-0}
work=$(mktemp -d /tmp/whale-elastic-bench-XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
cat "$here"/runtime/src/*/*.c > "$work/corpus.txt"

resume_drained() {
    for n in $(sinfo -h -N -o '%N %t' | awk '$2 ~ /^(dr|down)/ {print $1}'); do
        "$mc" -i "$I" link-up "$n" >/dev/null 2>&1 || true
        "$mc" -i "$I" start-node "$n" >/dev/null 2>&1 || true
        for _ in $(seq 150); do
            scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
            [ "$(sinfo -h -n "$n" -o %t)" = idle ] && break
            sleep 0.2
        done
    done
}

# stats FILE: median step_s over steps 3.. (first steps warm up), redundancy
med() {
    python3 - "$@" <<'PY'
import json, sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    if l.startswith('{"step"'):
        j = json.loads(l); rows[j["step"]] = j
r = [rows[s] for s in sorted(rows) if s >= 3]
print("%.4f %.4f %.0f" % (st.median(x["step_s"] for x in r),
                          st.median(x.get("redundancy_s", 0) for x in r),
                          st.median(x.get("redundancy_bytes", 0) for x in r)))
PY
}

node_of_rank() {
    local n p
    for n in $(sinfo -h -N -o %N | sort -u); do
        for p in $(ip netns pids "wmc$I-$n" 2>/dev/null); do
            tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q 'whale-train' || continue
            tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "WHALE_RANK=$1" && { echo "$n"; return; }
        done
    done
}

printf '%-10s %-8s %9s %9s %8s %10s | %7s %6s %6s %8s %7s %6s %5s | %9s %5s\n' \
    model case step_s +spare_s ovh% red_MB/st detect agree xfer rebuild redo total lost \
    restart_s lost
for model in ${models//,/ }; do
    case $model in
    gpt2-124m) seq=64 batch=4 accum=2 lay=(-N3 -n6 --whale-tp=2 --whale-pp=2); spares=(-N4 -n8) ;;
    *) seq=64 batch=8 accum=4 lay=(-N4 -n8 --whale-tp=2 --whale-pp=2 --whale-dp=2); spares=(-N5 -n10) ;;
    esac
    args=(--model "$model" --data "$work/corpus.txt" --steps "$steps" --batch $batch --seq $seq
          --grad-accum $accum --threads 1 --no-progress --log-every 1)
    sp=("${spares[@]}" "${lay[@]:2}" --whale-spares=1)
    # 1 + 2: step time without and with the copies
    timeout 3600 srun "${lay[@]}" "$train" "${args[@]}" --metrics "$work/base.jsonl" >"$work/base.out" 2>&1
    timeout 3600 srun "${sp[@]}" "$train" "${args[@]}" --metrics "$work/spare.jsonl" >"$work/spare.out" 2>&1
    read -r b_s _ _ <<<"$(med "$work/base.jsonl")"
    read -r s_s red_s red_b <<<"$(med "$work/spare.jsonl")"
    # 3: the fault
    rm -f "$work/fault.jsonl"
    if [ "$nodekill" = 1 ]; then
        timeout 3600 srun "${sp[@]}" "$train" "${args[@]}" --metrics "$work/fault.jsonl" \
            >"$work/fault.out" 2>&1 &
        pid=$!
        until [ -s "$work/fault.jsonl" ] && [ "$(grep -c '^{"step"' "$work/fault.jsonl")" -ge "$fail" ]; do
            kill -0 $pid 2>/dev/null || break; sleep 0.2
        done
        node=$(node_of_rank 1)
        [ -n "$node" ] && "$mc" -i "$I" kill-node "$node" >/dev/null
        wait $pid || true
        how=node
    else
        WHALE_FAULT=kill:rank=1:step=$fail timeout 3600 srun "${sp[@]}" "$train" "${args[@]}" \
            --metrics "$work/fault.jsonl" >"$work/fault.out" 2>&1 || true
        how=crash
    fi
    ev=$(grep -m1 '^{"event":"recovery"' "$work/fault.jsonl" || true)
    if [ -z "$ev" ]; then
        rec="$(printf '%7s %6s %6s %8s %7s %6s %5s' - - - - - - -)"
        note="no recovery event ($(grep -m1 -E 'not available|stopping|error' "$work/fault.out" || echo 'see the log'))"
    else
        rec=$(python3 -c '
import json,sys; e=json.loads(sys.argv[1])
t=sum(e.get(k,0) for k in ("detect_s","agree_s","transfer_s","rebuild_s","redo_s"))
print("%7.2f %6.2f %6.2f %8.2f %7.2f %6.2f %5d" % (e.get("detect_s",0),e.get("agree_s",0),
      e.get("transfer_s",0),e.get("rebuild_s",0),e.get("redo_s",0),t,e.get("steps_lost",-1)))' "$ev")
        note=""
    fi
    resume_drained
    # 4: the competitor: stop on the failure, new srun from the last checkpoint
    rm -rf "$work/ck"
    WHALE_FAULT=kill:rank=1:step=$fail timeout 3600 srun "${lay[@]}" --whale-ckpt-dir="$work/ck" \
        --whale-ckpt-every="$ckevery" "$train" "${args[@]}" --metrics "$work/c1.jsonl" \
        >"$work/c1.out" 2>&1 || true
    t_r0=$(date +%s.%N)
    timeout 3600 srun "${lay[@]}" --whale-ckpt-dir="$work/ck" "$train" "${args[@]}" --resume latest \
        --steps "$fail" --metrics "$work/c2.jsonl" >"$work/c2.out" 2>&1 || true
    t_r1=$(date +%s.%N)
    last_ck=$(( (fail - 1) / ckevery * ckevery ))
    restart=$(python3 -c "print('%.2f' % ($t_r1 - $t_r0))")
    ovh=$(python3 -c "print('%.1f' % (100.0 * ($s_s - $b_s) / $b_s))")
    printf '%-10s %-8s %9.4f %9.4f %8s %10.2f | %s | %9s %5d %s\n' "$model" "$how" "$b_s" "$s_s" \
        "$ovh" "$(python3 -c "print($red_b / 1048576)")" "$rec" "$restart" $((fail - 1 - last_ck)) "$note"
    resume_drained
done
echo "# step_s: median seconds per step (steps >= 3), without / with a spare node and in-memory copies;"
echo "# ovh%: redundancy overhead per step (target <= 5); red_MB/st: bytes copied per step;"
echo "# recovery seconds per phase from the recovery event (target total <= 10, lost <= 1);"
echo "# restart_s: the restart-from-checkpoint competitor: a new srun, --resume latest, redo up to"
echo "# step $fail (a lower bound: without detecting the failure and without the scheduler's queue);"
echo "# its lost steps: computed since the last checkpoint (every $ckevery steps)"
