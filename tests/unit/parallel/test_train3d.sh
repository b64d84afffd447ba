#!/bin/sh
# whale-train under whale-run (real processes, PMIx + UCX): a covering set of
# TP x PP x DP layouts, schedules, ZeRO stages and recompute policies gives
# the single-rank loss at every step of a 20-step run (1e-5 relative);
# contradictory and infeasible plans are refused before any step; WHALE_TRACE
# writes one trace per rank showing the 1F1B order.
# Usage: test_train3d.sh WHALE_RUN WHALE_TRAIN
set -eu
RUN=$1
TRAIN=$2
T=$(mktemp -d /tmp/whale-train3d.XXXXXX)
trap 'rm -rf "$T"' EXIT

# 4 blocks so that PP=2 x interleave 2 has a block per virtual stage
printf 'Name=t4 Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256 TiedEmbeddings=yes\n' >"$T/t4.conf"
COMMON="--model $T/t4.conf --data $T/corpus.txt --steps 20 --batch 8 --seq 32 --grad-accum 4 --threads 1 --no-progress"
STEPS=20
# shellcheck source=train3d_lib.sh
. "$(dirname "$0")/train3d_lib.sh"
make_corpus 7 60000

train_reference

train tp2_pp2_dp2_z1 8 --tp 2 --pp 2 --dp 2 -- --zero 1
compare tp2_pp2_dp2_z1
train tp4_dp2_z3 8 --tp 4 --dp 2 -- --zero 3
compare tp4_dp2_z3
train pp4_dp2_z2 8 --pp 4 --dp 2 -- --zero 2
compare pp4_dp2_z2
PLAN='{"version":1,"tp":2,"pp":2,"dp":1,"micro_batch":2,"num_micro_batches":4,"global_batch":8,"schedule":"interleaved","interleave":2,"recompute":"full"}'
train tp2_pp2_interleaved_full 4 --tp 2 --pp 2 --plan "$PLAN" --
compare tp2_pp2_interleaved_full
train pp2_dp2_gpipe_selective_z3 4 --pp 2 --dp 2 -- --schedule gpipe --recompute selective --zero 3
compare pp2_dp2_gpipe_selective_z3
PLAN='{"version":1,"tp":1,"pp":2,"dp":1,"micro_batch":2,"num_micro_batches":4,"global_batch":8,"recompute":"auto","stage_layers":[3,1]}'
train pp2_uneven_auto 2 --pp 2 --plan "$PLAN" --
compare pp2_uneven_auto
# uneven DP shares under a pipeline: replica 0 runs 5 micro-batches, replica 1 three
PLAN='{"version":1,"tp":1,"pp":2,"dp":2,"micro_batch":1,"num_micro_batches":4,"global_batch":8,"zero":1,"dp_batch":[5,3]}'
train pp2_dp2_uneven_shares 4 --pp 2 --dp 2 --plan "$PLAN" --
compare pp2_dp2_uneven_shares

# checkpoint under TP=2 x PP=2 at step 10, resumed re-shaped as PP=4: the
# last 10 steps equal the uninterrupted single-rank run
train ck_tp2pp2 4 --tp 2 --pp 2 -- --whale-ckpt-dir "$T/ck" --whale-ckpt-every 10
train ck_resume_pp4 4 --pp 4 -- --whale-ckpt-dir "$T/ck" --resume "$T/ck/step-00000010"
python3 - "$T/ref.jsonl" "$T/ck_resume_pp4.jsonl" <<'EOF2' || fail "resumed run differs"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"step"' in l]
assert len(b) == 10, len(b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a[10:], b))
print("  %-44s steps 11-20 worst rel diff %.1e" % ("resume tp2pp2 -> pp4", worst))
sys.exit(0 if worst <= 1e-5 else 1)
EOF2

# refusals before any step
expect_refusal() { # name pattern ntasks run-args -- train-args
    name=$1; pat=$2; n=$3; shift 3
    rargs=""
    while [ "$1" != "--" ]; do rargs="$rargs $1"; shift; done
    shift
    # shellcheck disable=SC2086
    if timeout 120 "$RUN" -n "$n" --timeout 100 $rargs "$TRAIN" $COMMON --metrics "$T/$name.jsonl" "$@" \
            >"$T/$name.out" 2>&1; then
        fail "$name: accepted"
    fi
    grep -q "$pat" "$T/$name.out" || { cat "$T/$name.out" >&2; fail "$name: no '$pat' in the message"; }
    if grep -q '"step"' "$T/$name.jsonl" 2>/dev/null; then fail "$name: ran a step"; fi
    echo "  refused $name: $(grep -m1 "$pat" "$T/$name.out" | sed 's/^[0-9]*: //')"
}
PLAN='{"version":1,"tp":2,"pp":1,"dp":1,"micro_batch":2,"num_micro_batches":4}'
expect_refusal plan_vs_run "refusing before any step" 1 --plan "$PLAN" --
expect_refusal tp3 "must be divisible by the tensor-parallel degree TP=3" 3 --tp 3 --
PLAN='{"version":1,"tp":1,"pp":2,"dp":1,"micro_batch":2,"num_micro_batches":4,"stage_layers":[2,3]}'
expect_refusal bad_stages "stage_layers sum to 5" 2 --pp 2 --plan "$PLAN" --
expect_refusal interleave_m "multiple" 2 --pp 2 -- --schedule interleaved --interleave 2 --grad-accum 3 --batch 6
PLAN='{"version":1,"tp":1,"pp":1,"dp":2,"micro_batch":1,"num_micro_batches":4,"global_batch":8,"dp_batch":[3,4]}'
expect_refusal uneven_dp_sum "sum of dp_batch" 2 --dp 2 --plan "$PLAN" --
PLAN='{"version":1,"tp":1,"pp":1,"dp":1,"micro_batch":2,"num_micro_batches":4,"offload":"params"}'
expect_refusal offload_params_zero0 "needs --zero 3" 1 --plan "$PLAN" --

# WHALE_TRACE: one file per rank, forward/backward in 1F1B order
WHALE_TRACE="$T/trace.json" train traced 2 --pp 2 --
for r in 0 1; do [ -s "$T/trace-rank$r.json" ] || fail "no trace for rank $r"; done
python3 - "$T" <<'EOF' || fail "trace order"
import json, sys
want = {0: "F0 F1 B0 F2 B1 F3 B2 B3", 1: "F0 B0 F1 B1 F2 B2 F3 B3"}
for r in (0, 1):
    ev = json.load(open("%s/trace-rank%d.json" % (sys.argv[1], r)))["traceEvents"]
    cats = {e.get("cat") for e in ev}
    for c in ("forward", "backward", "optimizer", "send", "recv"):
        assert c in cats, (r, c, cats)
    fb = sorted((e["ts"], e["cat"][0].upper(), e["args"]["mb"]) for e in ev
                if e.get("cat") in ("forward", "backward"))
    steps = [fb[i:i + 8] for i in range(0, len(fb), 8)]
    assert len(steps) == 20, len(steps)
    for s in steps:
        got = " ".join("%s%d" % (k, mb) for _, k, mb in s)
        assert got == want[r], (r, got)
    print("  trace rank %d: 20 steps of %s" % (r, want[r]))
EOF
echo "ok"
