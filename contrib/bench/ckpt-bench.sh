#!/bin/bash
# Checkpoint benchmark. Figures, with the competitor
# measured in the same run, rounds interleaved, load average beside each:
#   - training stall per checkpoint: async (snapshot copy, deferred snapshot)
#     vs a synchronous save of the same tensors      target: stall <= 5 % of sync
#   - persist bandwidth of the background save (hash, stage, write, fsync,
#     commit; WHALE_CKPT_WRITERS writers) vs `dd oflag=direct conv=fdatasync`
#     of the same size into the same directory, dd run at the persist
#     thread's priority (nice +10 unless WHALE_CKPT_PRIORITY=normal), so both
#     get the same share of a loaded CPU           target: >= 80 % of dd
#     (dd through the page cache is printed too, for reference)
#   - load bandwidth (whale_ckpt_read, page cache dropped, WHALE_CKPT_READERS
#     threads) vs `dd iflag=direct` of the same bytes   target: >= 80 % of dd
#   - whale-train (gpt-small and gpt2-124m, a checkpoint every 10 steps):
#     the stall per save the run reports (its save call + the optimizer's
#     wait for a deferred snapshot) with WHALE_CKPT_ASYNC=0,
#     WHALE_CKPT_SNAPSHOT=copy and =deferred (the default), as % of the
#     synchronous save and the whole stall as % of the run's wall time (and
#     with WHALE_CKPT_BUSY=defer: a save due while one is written is postponed)
#                                   target: deferred <= 5 % of sync, <= 2 % of the run
#   - bytes written per save by delta saves (WHALE_CKPT_DELTA) against full
#     fp32 saves over 100 steps of gpt-small training, exact and with INT8
#     moments and/or weights (WHALE_CKPT_MOMENTS/WEIGHTS=int8), each with
#     its restore error against the exact run    target: <= 50 %
#     (and, with numpy and zstandard, other exact encodings measured on the
#     same full saves: contrib/bench/ckpt-delta-study.py)
#   - bytes written by an incremental save with half the layers frozen
#   - size and restore error per compression mode
# A target is judged only when the 1-minute load average stayed at or below
# the core count during its rounds; otherwise the summary says "not judged
# (load)". Median and best of the rounds are printed.
# usage: contrib/bench/ckpt-bench.sh [-b BUILD_DIR] [-d SCRATCH_DIR] [-m MB] [-r RUNS]
#            [-c COMPUTE_MS] [-s TRAIN_STEPS (0: skip whale-train)] [-e SAVE_EVERY]
#            [-M "MODELS"] [-D DELTA_STEPS (0: skip the delta bytes)] [-p PARTS]
#   PARTS: any of persist,stall,train,delta,extra (default all)
set -euo pipefail
build=build dir=${TMPDIR:-/tmp} mb=512 runs=5 compute_ms=400 tsteps=30 every=10
models="gpt-small gpt2-124m" dsteps=100 parts=persist,stall,train,delta,extra
while getopts "b:d:m:r:c:s:e:M:D:p:h" o; do
    case $o in
    b) build=$OPTARG ;; d) dir=$OPTARG ;; m) mb=$OPTARG ;; r) runs=$OPTARG ;;
    c) compute_ms=$OPTARG ;; s) tsteps=$OPTARG ;; e) every=$OPTARG ;; M) models=$OPTARG ;;
    D) dsteps=$OPTARG ;; p) parts=$OPTARG ;;
    *) sed -n '2,32p' "$0"; exit 2 ;;
    esac
done
part() { [[ ",$parts," == *",$1,"* ]]; }
tool=$build/runtime/tools/ckpt/whale-ckpt
[ -x "$tool" ] || { echo "ckpt-bench: $tool not built (ninja -C $build)" >&2; exit 1; }
scratch=$(mktemp -d "$dir/whale-ckpt-bench-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
cores=$(nproc)
# dd at the priority of the thread that persists a save (see above)
case ${WHALE_CKPT_PRIORITY:-low} in
normal) ddnice=() ;;
*) ddnice=(nice -n 10) ;;
esac

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
best_max() { sort -g | tail -1; }
best_min() { sort -g | head -1; }
get() { sed -n "s/.*\b$1=\([0-9.e+-]*\).*/\1/p" | head -1; }
load1() { cut -d' ' -f1 /proc/loadavg; }
rate() { echo "$1 $2 $3" | awk '{printf "%.1f", $1 * 8.388608 / ($3 - $2)}'; }

echo "# whale-ckpt benchmark: $mb MiB model, $runs interleaved rounds, scratch $scratch"
echo "# $cores cores, $(df -h --output=source,fstype "$scratch" | tail -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# WHALE_CKPT_WRITERS=${WHALE_CKPT_WRITERS:-2} WHALE_CKPT_READERS=${WHALE_CKPT_READERS:-4} WHALE_CKPT_PRIORITY=${WHALE_CKPT_PRIORITY:-low}; dd runs under: ${ddnice[*]:-normal priority}"
dd_mbps=() ddd_mbps=() ddr_mbps=() load_mbps=() ours=() sync_s=() astall=() dstall=() loads_p=() loads_s=()
part persist || runs_p=0
part stall || runs_s=0
bytes=$("$tool" bench --dir "$scratch" --mb "$mb" --part none 2>/dev/null | get bytes)
count=$(( (bytes + 8388607) / 8388608 ))
# persist bandwidth vs dd: the same bytes, alternating, each after the same
# pause with dirty pages flushed (the disk and its host cache are shared)
for i in $(seq "${runs_p:-$runs}"); do
    l0=$(load1)
    sync; sleep 2
    # the raw device rate: O_DIRECT, no page cache
    t0=$(date +%s.%N)
    "${ddnice[@]}" dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" oflag=direct \
        conv=fdatasync status=none
    t1=$(date +%s.%N)
    ddd_mbps+=("$(rate "$count" "$t0" "$t1")")
    # the raw read rate of the same bytes: O_DIRECT
    t0=$(date +%s.%N)
    dd if="$scratch/dd.bin" of=/dev/null bs=8M iflag=direct status=none
    t1=$(date +%s.%N)
    ddr_mbps+=("$(rate "$count" "$t0" "$t1")")
    rm -f "$scratch/dd.bin"
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --part load)
    load_mbps+=("$(echo "$out" | get load_MBps)")
    sync; sleep 2
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --part persist)
    ours+=("$(echo "$out" | get persist_MBps)")
    sync; sleep 2
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$scratch/dd.bin" bs=8M count="$count" conv=fdatasync status=none
    t1=$(date +%s.%N)
    rm -f "$scratch/dd.bin"
    dd_mbps+=("$(rate "$count" "$t0" "$t1")")
    l1=$(load1)
    loads_p+=("$l0" "$l1")
    echo "persist round $i: whale-ckpt ${ours[-1]} MB/s, dd oflag=direct ${ddd_mbps[-1]} MB/s, dd (page cache) ${dd_mbps[-1]} MB/s; load: whale-ckpt ${load_mbps[-1]} MB/s, dd iflag=direct ${ddr_mbps[-1]} MB/s  [load $l0 -> $l1]"
done
# stall per checkpoint: sync save vs async (copy) vs async (deferred copy)
for i in $(seq "${runs_s:-$runs}"); do
    l0=$(load1)
    sync; sleep 1
    out=$("$tool" bench --dir "$scratch" --mb "$mb" --repeat 1 --compute-ms "$compute_ms" --part stall)
    sync_s+=("$(echo "$out" | get sync_s)")
    astall+=("$(echo "$out" | get async_stall_s)")
    dstall+=("$(echo "$out" | get deferred_stall_s)")
    l1=$(load1)
    loads_s+=("$l0" "$l1")
    echo "stall round $i: sync save ${sync_s[-1]} s, async stall ${astall[-1]} s, deferred stall ${dstall[-1]} s  [load $l0 -> $l1]"
done
# whale-train: the stall per save it reports, a save every $every steps
train=$build/runtime/tools/train/whale-train
tr_lines=()
if [ "$tsteps" -gt 0 ] && part train; then
    head -c 3000000 /dev/urandom | base64 > "$scratch/corpus.txt"
    train_run() { # MODEL MODE -> "per_save_s pct_of_run saves"
        local env=(WHALE_CKPT_SNAPSHOT="$2")
        [ "$2" = sync ] && env=(WHALE_CKPT_ASYNC=0)
        [ "$2" = defer ] && env=(WHALE_CKPT_SNAPSHOT=deferred WHALE_CKPT_BUSY=defer)
        rm -rf "$scratch/ck"
        env "${env[@]}" "$train" --model "$1" --data "$scratch/corpus.txt" --steps "$tsteps" \
            --batch 4 --seq 64 --threads "$cores" --no-progress --whale-ckpt-dir "$scratch/ck" \
            --whale-ckpt-every "$every" --metrics "$scratch/m.jsonl" 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{\"summary\""):
        c = json.loads(l)["summary"]["checkpoints"]
        print("%.4f %.3f %d" % (c["stall_per_save_s"], c["stall_pct_of_run"], c["saves"]))'
    }
    for model in $models; do
        t_sync=() t_copy=() t_def=() p_def=() t_dfr=() loads_t=()
        for i in $(seq "$runs"); do
            l0=$(load1)
            read -r s_ps _ _ <<<"$(train_run "$model" sync)"
            read -r c_ps _ _ <<<"$(train_run "$model" copy)"
            read -r d_ps d_pct n_sv <<<"$(train_run "$model" deferred)"
            read -r f_ps f_pct f_sv <<<"$(train_run "$model" defer)"
            t_sync+=("$s_ps") t_copy+=("$c_ps") t_def+=("$d_ps") p_def+=("$d_pct") t_dfr+=("$f_ps")
            l1=$(load1)
            loads_t+=("$l0" "$l1")
            echo "whale-train $model round $i ($n_sv saves, every $every of $tsteps steps): stall per save sync $s_ps s, copy $c_ps s, deferred $d_ps s ($d_pct % of the run); with WHALE_CKPT_BUSY=defer $f_ps s ($f_sv saves, $f_pct % of the run)  [load $l0 -> $l1]"
        done
        tr_lines+=("$(awk -v m="$model" -v s="$(printf '%s\n' "${t_sync[@]}" | median)" \
            -v c="$(printf '%s\n' "${t_copy[@]}" | median)" -v d="$(printf '%s\n' "${t_def[@]}" | median)" \
            -v bd="$(printf '%s\n' "${t_def[@]}" | best_min)" -v pr="$(printf '%s\n' "${p_def[@]}" | median)" \
            -v lt="$(printf '%s\n' "${loads_t[@]}" | best_max)" -v cores="$cores" -v e="$every" 'BEGIN {
  v = lt > cores ? sprintf("NOT JUDGED (load up to %.1f on %d cores)", lt, cores) : (d <= 0.05 * s && pr <= 2 ? "MET" : "NOT MET")
  printf "whale-train %s, a save every %d steps: stall per save sync %.3f s, copy %.4f s (%.1f %%), deferred %.4f s = %.1f %% of sync (best %.1f %%), %.2f %% of the run  target <= 5 %% and <= 2 %%: %s\n", m, e, s, c, 100*c/s, d, 100*d/s, 100*bd/s, pr, v
}')")
    done
    rm -rf "$scratch/ck"
fi
# delta saves: bytes written per save over a real run, per storage mode,
# as % of a full fp32 save, with each mode's restore error of the last step
# (a delta: restored through its chain) against the exact run's last step
delta_line=
if [ "$dsteps" -gt 0 ] && part delta; then
    [ -f "$scratch/corpus.txt" ] || head -c 3000000 /dev/urandom | base64 > "$scratch/corpus.txt"
    mode_run() { # TAG VAR=VALUE... -> "mean bytes written per save, saves, verify of the last"
        local tag=$1 last v=ok
        shift
        rm -rf "$scratch/ck"
        env "$@" WHALE_CKPT_KEEP=0 "$train" --model gpt-small --data "$scratch/corpus.txt" \
            --steps "$dsteps" --batch 4 --seq 64 --threads "$cores" --no-progress \
            --whale-ckpt-dir "$scratch/ck" --whale-ckpt-every "$every" --metrics "$scratch/m.jsonl" \
            >/dev/null 2>&1
        last=$(ls "$scratch/ck" | grep '^step-' | tail -1)
        "$tool" verify "$scratch/ck/$last" >/dev/null 2>&1 || v=FAILED
        "$tool" convert "$scratch/ck/$last" "$scratch/$tag.safetensors" >/dev/null 2>&1 || v=FAILED
        python3 - "$scratch/ck" "$v" <<'PY'
import json, os, sys
root = sys.argv[1]
steps = sorted(d for d in os.listdir(root) if d.startswith("step-"))
w = [json.load(open(os.path.join(root, d, "manifest.json")))["bytes"]["written"] for d in steps]
print("%.0f %d %s" % (sum(w) / len(w), len(w), sys.argv[2]))
PY
    }
    # rel. L2 of weights, first and second moments of $1 against $2 (plain safetensors)
    rel_err() {
        python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "n/a n/a n/a"
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: np.frombuffer(b, dtype=np.float32, count=(v["data_offsets"][1] - v["data_offsets"][0]) // 4,
                             offset=8 + n + v["data_offsets"][0]).astype(np.float64)
            for k, v in h.items() if v["dtype"] == "F32"}
a, r = load(sys.argv[1]), load(sys.argv[2])
def kind(k):
    return 1 if k.startswith("opt.m.") else 2 if k.startswith("opt.v.") else 0
num, den = [0.0] * 3, [0.0] * 3
for k, x in r.items():
    y = a.get(k)
    if y is None or y.shape != x.shape:
        continue
    num[kind(k)] += float(((y - x) ** 2).sum())
    den[kind(k)] += float((x ** 2).sum())
print(" ".join("%.2e" % ((num[i] / den[i]) ** 0.5) if den[i] else "n/a" for i in range(3)))
PY
    }
    l0=$(load1)
    read -r full_b nfull vfull <<<"$(mode_run full WHALE_CKPT_DELTA=0)"
    # other exact encodings, measured on the same full saves (needs numpy, zstandard)
    study=
    if python3 -c 'import numpy, zstandard' 2>/dev/null; then
        study=$(DELTA_STUDY_QUICK=1 python3 "$(dirname "$0")/ckpt-delta-study.py" "$scratch/ck" 4 2>&1 | sed 's/^/    /')
    fi
    read -r d_b nd vd <<<"$(mode_run delta WHALE_CKPT_DELTA=4)"
    read -r q_b nq vq <<<"$(mode_run q8 WHALE_CKPT_DELTA=0 WHALE_CKPT_MOMENTS=int8)"
    read -r qd_b nqd vqd <<<"$(mode_run q8delta WHALE_CKPT_DELTA=4 WHALE_CKPT_MOMENTS=int8)"
    read -r wqd_b nwqd vwqd <<<"$(mode_run wq8delta WHALE_CKPT_DELTA=4 WHALE_CKPT_MOMENTS=int8 WHALE_CKPT_WEIGHTS=int8)"
    l1=$(load1)
    ref="$scratch/full.safetensors"
    delta_line=$(
        printf 'bytes written per save over %d steps of gpt-small (a save every %d steps: %d saves; delta modes: a full save every 5), as %% of a full fp32 save (%.1f MB); restore error of the last step (a delta: through its chain) as rel. L2 against the exact run (weights, 1st moment, 2nd moment):\n' \
            "$dsteps" "$every" "$nfull" "$(awk -v f="$full_b" 'BEGIN {print f/1e6}')"
        best=
        for m in "full fp32|$full_b|$vfull|full" "exact delta|$d_b|$vd|delta" \
                 "INT8 moments, full|$q_b|$vq|q8" "INT8 moments + delta|$qd_b|$vqd|q8delta" \
                 "INT8 weights + moments + delta|$wqd_b|$vwqd|wq8delta"; do
            IFS='|' read -r name bytes v tag <<<"$m"
            read -r ew em ev <<<"$(rel_err "$scratch/$tag.safetensors" "$ref")"
            [ "$tag" = full ] && ew=reference em=- ev=-
            pct=$(awk -v f="$full_b" -v d="$bytes" 'BEGIN {printf "%.1f", 100*d/f}')
            printf '  %-32s %6s %%  %s  error w %s m %s v %s  verify %s\n' "$name" "$pct" \
                "$(awk -v p="$pct" 'BEGIN {print (p <= 50 ? "<= 50 %" : "> 50 % ")}')" "$ew" "$em" "$ev" "$v"
            awk -v p="$pct" 'BEGIN {exit !(p <= 50)}' && best="${best:+$best, }$name ($pct %, moments error $em / $ev)"
        done
        [ -n "$best" ] && echo "  target <= 50 %: MET by $best" || echo "  target <= 50 %: NOT MET"
        awk -v f="$full_b" -v d="$d_b" 'BEGIN {exit !(d > 0.5*f)}' &&
            echo "  exact deltas stay above 50 %: Adam's first moment is mostly new after $every steps (per tensor kind: contrib/bench/ckpt-delta-study.py below)" || true
    )
    echo "delta run: [load $l0 -> $l1]"
    echo "$delta_line"
    rm -rf "$scratch/ck" "$scratch"/*.safetensors
fi
m_sync=$(printf '%s\n' "${sync_s[@]}" | median)
set +u # the arrays of a part not run are empty
m_as=$(printf '%s\n' "${astall[@]}" | median); b_as=$(printf '%s\n' "${astall[@]}" | best_min)
m_ds=$(printf '%s\n' "${dstall[@]}" | median); b_ds=$(printf '%s\n' "${dstall[@]}" | best_min)
m_ours=$(printf '%s\n' "${ours[@]}" | median); b_ours=$(printf '%s\n' "${ours[@]}" | best_max)
m_dd=$(printf '%s\n' "${dd_mbps[@]}" | median)
m_ld=$(printf '%s\n' "${load_mbps[@]}" | median); m_ddr=$(printf '%s\n' "${ddr_mbps[@]}" | median)
m_ddd=$(printf '%s\n' "${ddd_mbps[@]}" | median); b_ddd=$(printf '%s\n' "${ddd_mbps[@]}" | best_max)
maxload_p=$(printf '%s\n' "${loads_p[@]}" | best_max)
maxload_s=$(printf '%s\n' "${loads_s[@]}" | best_max)
echo
echo "== medians (best) of $runs rounds"
if part persist; then
awk -v s="$m_sync" -v a="$m_as" -v ba="$b_as" -v d="$m_ds" -v bd="$b_ds" -v o="$m_ours" \
    -v bo="$b_ours" -v dd="$m_dd" -v ddd="$m_ddd" -v bddd="$b_ddd" -v lp="$maxload_p" \
    -v ls="$maxload_s" -v cores="$cores" -v ld="$m_ld" -v ddr="$m_ddr" '
function verdict(ok, load) {
  if (load > cores) return sprintf("NOT JUDGED (load up to %.1f on %d cores)", load, cores)
  return ok ? "MET" : "NOT MET"
}
BEGIN {
  if (s > 0) {
  printf "synchronous save              %8.3f s\n", s
  printf "async stall, snapshot copy    %8.4f s  = %5.1f %% of sync (best %.1f %%)\n", a, 100*a/s, 100*ba/s
  printf "async stall, deferred copy    %8.4f s  = %5.1f %% of sync (best %.1f %%)  target <= 5 %%: %s\n", d, 100*d/s, 100*bd/s, verdict(100*d/s <= 5, ls)
  }
  printf "persist bandwidth             %8.1f MB/s = %5.1f %% of dd oflag=direct %.1f MB/s (best %.1f of %.1f)  target >= 80 %%: %s\n", o, 100*o/ddd, ddd, bo, bddd, verdict(o >= 0.8*ddd, lp)
  printf "                                          (dd through the page cache: %.1f MB/s)\n", dd
  printf "load bandwidth                %8.1f MB/s = %5.1f %% of dd iflag=direct %.1f MB/s  target >= 80 %%: %s\n", ld, 100*ld/ddr, ddr, verdict(ld >= 0.8*ddr, lp)
}'
fi
for l in "${tr_lines[@]}"; do echo "$l"; done
[ -z "$delta_line" ] || echo "$delta_line"
[ -z "${study:-}" ] || { echo "  other exact delta encodings on the same saves (contrib/bench/ckpt-delta-study.py):"; echo "$study"; }
part extra || exit 0
echo
echo "== incremental and compression (one run each)"
"$tool" bench --dir "$scratch" --mb "$mb" --part incremental | grep -v RESULT
"$tool" bench --dir "$scratch" --mb "$mb" --part compression | grep -v RESULT
