#!/usr/bin/env bash
# Tokenizer encode speed: whale-data beside SentencePiece's own command-line
# tool (spm_encode, Debian package `sentencepiece`) on the same corpus with
# the same tokenizer model, at the same thread count. spm_encode has no
# threads option, so N threads of whale-data are compared with N spm_encode
# processes each encoding 1/N of the files (xargs -P N).
#   - whale-data: the whole process (read, check UTF-8, encode, write the
#     shards, fsync) with --tokenizer, plus its encode-only figure;
#   - spm_encode: the whole process, ids written to /dev/null.
# Figures: MB of text per second of wall time and per CPU second (the
# machine may be shared: the CPU figure is steadier), median of REPS runs.
# Usage: contrib/bench/tokenizer-bench.sh [BUILD_DIR] [THREADS] [REPS] [VOCAB]
#   Corpus: the Python standard library (*.py of the system's python3;
#   WHALE_BENCH_CORPUS=DIR or a glob overrides), a tokenizer of VOCAB
#   (default 4096) BPE tokens trained on it first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-$ROOT/build}
THREADS=${2:-2}
REPS=${3:-3}
VOCAB=${4:-4096}
DATA=$BUILD/runtime/tools/data/whale-data
[ -x "$DATA" ] || { echo "tokenizer-bench: $DATA not built (libsentencepiece-dev; ninja -C $BUILD)" >&2; exit 1; }
command -v spm_encode >/dev/null || { echo "tokenizer-bench: spm_encode missing (apt-get install sentencepiece)" >&2; exit 1; }
PYDIR=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
CORPUS=${WHALE_BENCH_CORPUS:-$PYDIR/*.py}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# shellcheck disable=SC2086
ls -d $CORPUS > "$TMP/files"
nfiles=$(wc -l < "$TMP/files")
bytes=$(xargs cat < "$TMP/files" | wc -c)
mb=$(python3 -c "print($bytes / 1048576)")
echo "corpus: $nfiles files, $(printf %.1f "$mb") MB ($CORPUS)"
echo "sentencepiece: $(spm_encode --version 2>&1 | head -n 1); threads: $THREADS; runs: $REPS"

"$DATA" -o "$TMP/tok" --vocab-size "$VOCAB" --val-fraction 0 --threads "$THREADS" --no-progress \
  $(cat "$TMP/files") 2> "$TMP/train.log" || { cat "$TMP/train.log" >&2; exit 1; }
MODEL=$TMP/tok/tokenizer.model
echo "tokenizer: $VOCAB BPE tokens trained on the corpus"

# run_timed OUT CMD...: appends "wall cpu" seconds of CMD (and its children)
run_timed() {
  local out=$1; shift
  /usr/bin/time -f "%e %U %S" -o "$TMP/t" "$@" > /dev/null 2> "$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
  awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$TMP/t" >> "$out"
}

for r in $(seq "$REPS"); do
  rm -rf "$TMP/out"
  run_timed "$TMP/whale" "$DATA" -o "$TMP/out" --tokenizer "$MODEL" --val-fraction 0 \
    --threads "$THREADS" --no-progress $(cat "$TMP/files")
  python3 -c "import json; print(json.load(open('$TMP/out/whale-data.json'))['encode_s'])" >> "$TMP/whale-enc"
  run_timed "$TMP/spm" bash -c "xargs -P $THREADS -n $(( (nfiles + THREADS - 1) / THREADS )) \
    sh -c 'cat \"\$@\" | spm_encode --model=$MODEL --output_format=id > /dev/null' sh < $TMP/files"
done

python3 - "$mb" "$TMP/whale" "$TMP/spm" "$TMP/whale-enc" "$THREADS" <<'PY'
import statistics, sys
mb = float(sys.argv[1])
def med(path, col):
    return statistics.median(float(l.split()[col]) for l in open(path))
w_wall, w_cpu = med(sys.argv[2], 0), med(sys.argv[2], 1)
s_wall, s_cpu = med(sys.argv[3], 0), med(sys.argv[3], 1)
w_enc = med(sys.argv[4], 0)
print("%-34s %10s %12s" % ("", "MB/s wall", "MB/s per CPU-s"))
print("%-34s %10.2f %12.2f" % ("whale-data (whole run, %s thr)" % sys.argv[5], mb / w_wall, mb / w_cpu))
print("%-34s %10.2f %12s" % ("whale-data (encoding only)", mb / w_enc, "-"))
print("%-34s %10.2f %12.2f" % ("spm_encode (x%s processes)" % sys.argv[5], mb / s_wall, mb / s_cpu))
print("ratio whale-data / spm_encode: wall %.2fx, CPU %.2fx" % (s_wall / w_wall, s_cpu / w_cpu))
PY
