# Shared by the layout-equivalence tests (train-3d, train-llama): each runs
# one single-rank reference in setup_file and then srun layouts that must
# give its losses. The test file defines train_args (its model and run).
# Needs train_helpers (make_corpus, same_losses) loaded first.

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"

# layouts_setup_file: the minicluster is up; TMPD holds the corpus
layouts_setup_file() {
  : "${SLURM_CONF:?run through contrib/test.sh (needs the minicluster)}"
  export TMPD=$(mktemp -d)
  make_corpus "$TMPD"
}
teardown_file() { rm -rf "$TMPD"; }

# srun_train NAME SRUN-OPTIONS... -- TRAIN-OPTIONS...: the run under srun
# succeeds and its losses ($TMPD/NAME.jsonl) are the reference's
srun_train() {
  local name=$1; shift
  local sopts=()
  while [ "$1" != "--" ]; do sopts+=("$1"); shift; done
  shift
  run timeout 300 srun "${sopts[@]}" "$TRAIN" $(train_args) --metrics "$TMPD/$name.jsonl" "$@"
  echo "$output" | tail -3
  [ "$status" -eq 0 ]
  run same_losses "$TMPD/ref.jsonl" "$TMPD/$name.jsonl"
  echo "$name: $output"
  [ "$status" -eq 0 ]
}

# reference_learns: the reference's last loss is 0.3 below its first
reference_learns() {
  run python3 -c "import json;l=[json.loads(x) for x in open('$TMPD/ref.jsonl') if x.startswith('{\"step\"')];assert l[-1]['loss']<l[0]['loss']-0.3"
  [ "$status" -eq 0 ]
}
