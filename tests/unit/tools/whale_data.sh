#!/usr/bin/env bash
# whale-data -> whale-train --val-data -> whale-generate on one rank (issue
# 16): shards in the llm.c format that agree with whale-data.json, the same
# bytes whatever the thread count, a loaded tokenizer giving the same ids,
# clear errors with nothing half-written, validation loss in the metrics and
# summary, the tokenizer recorded in the checkpoint, deterministic
# generation. Each check prints what it saw on failure.
# usage: whale_data.sh WHALE_DATA WHALE_TRAIN WHALE_GENERATE SOURCE_ROOT
set -u
DATA=$1 TRAIN=$2 GEN=$3 SRC=$4
T=$(mktemp -d /tmp/whale-data-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
out=
check() { # name, condition (as a command)
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; echo "$out" | tail -n 8; fail=1; fi
}
# the corpus: this project's C sources (always present), one document per file
mkdir -p "$T/in/sub"
cp "$SRC"/runtime/src/engine/*.c "$SRC"/runtime/src/ckpt/*.c "$T/in/"
cp "$SRC"/runtime/src/comm/*.c "$SRC"/runtime/src/comm/*/*.c "$SRC"/runtime/src/member/*.c "$T/in/sub/"
ndocs=$(find "$T/in" -name '*.c' | wc -l)

out=$("$DATA" -o "$T/o1" --vocab-size 512 --val-docs 3 --threads 1 --no-progress "$T/in" 2>&1); rc=$?
check "whale-data trains a 512-token tokenizer and writes shards" \
  '[ $rc -eq 0 ] && [ -s "$T/o1/tokenizer.model" ] && [ -s "$T/o1/train_000000.bin" ] && [ -s "$T/o1/val_000000.bin" ]'
out=$(python3 - "$T/o1" "$ndocs" <<'PY' 2>&1
import json, struct, sys, os
d, ndocs = sys.argv[1], int(sys.argv[2])
m = json.load(open(os.path.join(d, "whale-data.json")))
assert m["vocab_size"] == 512, m["vocab_size"]
assert m["library"] == "sentencepiece" and m["library_version"], m
sp = m["splits"]
assert sp["val"]["documents"] == 3 and sp["train"]["documents"] == ndocs - 3, sp
assert len(m["sources"]) == ndocs
for split in ("train", "val"):
    tot = 0
    for name in sp[split]["shards"]:
        b = open(os.path.join(d, name), "rb").read()
        magic, ver, n = struct.unpack("<3i", b[:12])
        assert magic == 20240520 and ver == 1, (magic, ver)
        assert len(b) == 1024 + 2 * n, (len(b), n)
        toks = struct.unpack("<%dH" % n, b[1024:])
        assert max(toks) < 512
        assert toks[0] == m["bos_id"]          # every document starts with BOS
        assert toks.count(m["bos_id"]) == sp[split]["documents"]
        assert m["newline_id"] in toks
        tot += n
    assert tot == sp[split]["tokens"], (tot, sp[split]["tokens"])
print("shards agree with whale-data.json")
PY
); rc=$?
check "shards are llm.c format and agree with whale-data.json" '[ $rc -eq 0 ]'

out=$("$DATA" -o "$T/o2" --vocab-size 512 --val-docs 3 --threads 3 --no-progress "$T/in" 2>&1); rc=$?
# (the .model files differ: SentencePiece stores num_threads in them)
check "3 threads: byte-identical shards" \
  '[ $rc -eq 0 ] && cmp "$T/o1/train_000000.bin" "$T/o2/train_000000.bin" && cmp "$T/o1/val_000000.bin" "$T/o2/val_000000.bin"'
out=$("$DATA" -o "$T/o3" --tokenizer "$T/o1/tokenizer.model" --val-docs 3 --threads 2 --no-progress "$T/in" 2>&1); rc=$?
check "--tokenizer: a loaded model gives the same ids" \
  '[ $rc -eq 0 ] && cmp "$T/o1/train_000000.bin" "$T/o3/train_000000.bin" && grep -q tokenizer_source "$T/o3/whale-data.json"'
# (unigram training is the costly one: the comm/ part of the corpus only,
# 3.9 s of CPU under ASan instead of 13 s)
out=$("$DATA" -o "$T/o4" --vocab-size 512 --val-fraction 0.1 --shard-tokens 2048 --model-type unigram --no-progress "$T/in/sub" 2>&1); rc=$?
check "unigram, --val-fraction and several shards" \
  '[ $rc -eq 0 ] && [ -s "$T/o4/train_000001.bin" ] && grep -q "\"unigram\"" "$T/o4/whale-data.json"'

# JSON lines
for i in $(seq 60); do printf '{"id": %d, "text": "record %d says: the fox jumps over dog %d.\\nsecond line %d"}\n' $i $i $((i * 7)) $i; done > "$T/a.jsonl"
out=$("$DATA" -o "$T/oj" --jsonl text --vocab-size 320 --val-docs 6 --no-progress "$T/a.jsonl" 2>&1); rc=$?
check "--jsonl: one document per record" \
  '[ $rc -eq 0 ] && python3 -c "import json,sys; m=json.load(open(\"$T/oj/whale-data.json\")); sys.exit(m[\"splits\"][\"train\"][\"documents\"] != 54)"'

# bad input: the message names the problem, exit 1, nothing written
printf 'good line\nbad \xff byte\n' > "$T/bad.txt"
out=$("$DATA" -o "$T/ob" --no-progress "$T/bad.txt" 2>&1); rc=$?
check "invalid UTF-8 named with file:line:column" \
  '[ $rc -eq 1 ] && [[ "$out" == *"bad.txt:2:5: not UTF-8 text (byte 0xff"* ]] && [ ! -e "$T/ob/whale-data.json" ]'
printf '{"text": "ok"}\n{"text": 3}\n' > "$T/b.jsonl"
out=$("$DATA" -o "$T/ob" --jsonl text --no-progress "$T/b.jsonl" 2>&1); rc=$?
check "--jsonl: a non-string field named with file:line" '[ $rc -eq 1 ] && [[ "$out" == *"b.jsonl:2: field \"text\" is not a string"* ]]'
printf '{"text": "ok"}\n{"text": \n' > "$T/c.jsonl"
out=$("$DATA" -o "$T/ob" --jsonl text --no-progress "$T/c.jsonl" 2>&1); rc=$?
check "--jsonl: broken JSON named with file:line" '[ $rc -eq 1 ] && [[ "$out" == *"c.jsonl:2: not valid JSON"* ]]'
out=$("$DATA" -o "$T/ob" --no-progress "$T/in/nothing*.c" 2>&1); rc=$?
check "a pattern with no match" '[ $rc -eq 1 ] && [[ "$out" == *"the pattern matches no file"* ]]'
out=$("$DATA" -o "$T/ob" --val-fraction 0.01 --no-progress "$T/in/pipe.c" 2>&1); rc=$?
check "a split that selects no validation document is refused" '[ $rc -eq 1 ] && [[ "$out" == *"selects none"* ]]'
out=$("$DATA" -o "$T/ob" --vocab-size 70000 "$T/in" 2>&1); rc=$?
check "--vocab-size out of range names the range" '[ $rc -eq 2 ] && [[ "$out" == *"--vocab-size=70000: expected an integer in 64..65536"* ]]'
out=$("$DATA" -o "$T/ob" --vocab-size 60000 --val-docs 3 --no-progress "$T/in" 2>&1); rc=$?
check "a vocabulary too large for the corpus: the library's reason, nothing left behind" \
  '[ $rc -eq 1 ] && [[ "$out" == *"training the tokenizer"* ]] && [ -z "$(ls -A "$T/ob" 2>/dev/null)" ]'
out=$("$DATA" -o "$T/o1" --vocab-size 512 --val-docs 3 --no-progress "$T/in" 2>&1); rc=$?
check "an existing output needs --force" '[ $rc -eq 1 ] && [[ "$out" == *"--force replaces it"* ]]'
out=$("$DATA" -o "$T/o4" --force --vocab-size 512 --val-docs 3 --no-progress "$T/in" 2>&1); rc=$?
check "--force replaces it and removes stale shards" \
  '[ $rc -eq 0 ] && [ ! -e "$T/o4/train_000001.bin" ] && [ -z "$(ls -A "$T/o4" | grep tmp)" ]'

# whale-train --val-data: val_loss in the metrics at every evaluation, the
# best in the summary; the tokenizer recorded in the checkpoint
common=(--model gpt-tiny --vocab 512 --data "$T/o1/train_000000.bin" --batch 4 --seq 32 --threads 1 --no-progress)
out=$("$TRAIN" "${common[@]}" --steps 30 --lr 3e-3 --val-data "$T/o1/val_000000.bin" --eval-every 10 \
      --metrics "$T/m.jsonl" --whale-ckpt-dir "$T/ck" --whale-ckpt-every 30 2>&1); rc=$?
check "whale-train --val-data --eval-every 10 runs" '[ $rc -eq 0 ]'
out=$(python3 - "$T/m.jsonl" <<'PY' 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step" in r]
vals = [(r["step"], r["val_loss"]) for r in steps if "val_loss" in r]
assert [s for s, _ in vals] == [10, 20, 30], vals
assert vals[-1][1] < vals[0][1], vals                 # it falls
sm = rows[-1]["summary"]
best = min(vals, key=lambda x: x[1])
assert abs(sm["best_val_loss"] - best[1]) < 1e-12 and sm["best_val_step"] == best[0], sm
assert sm["evals"] == 3
print(vals)
PY
); rc=$?
check "val_loss at steps 10, 20, 30, falling; best in the summary" '[ $rc -eq 0 ]'
out=$(python3 -c "
import json,sys; m=json.load(open('$T/ck/latest/manifest.json'))['data']
assert m['vocab']==512 and m['model']=='gpt-tiny' and m['seq']==32, m
assert m['tokenizer']['path'].endswith('o1/tokenizer.model') and len(m['tokenizer']['xxh64'])==16, m
" 2>&1); rc=$?
check "the checkpoint manifest records model, vocab, seq and tokenizer" '[ $rc -eq 0 ]'
out=$("$TRAIN" "${common[@]}" --steps 1 2>&1 --vocab 256); rc=$?
check "a tokenizer larger than the model's vocabulary is refused with the fix" \
  '[ $rc -eq 1 ] && [[ "$out" == *"tokenizer has 512 tokens but model gpt-tiny has Vocab=256: give --vocab 512"* ]]'
out=$("$TRAIN" "${common[@]}" --steps 1 --eval-every 5 2>&1); rc=$?
check "--eval-every without --val-data is refused" '[ $rc -eq 1 ] && [[ "$out" == *"need --val-data"* ]]'

# generation: deterministic for a seed, greedy, from the recorded tokenizer
g1=$("$GEN" --ckpt "$T/ck" --prompt "static int" --tokens 20 --seed 7 --threads 1 2>/dev/null); rc1=$?
g2=$("$GEN" --ckpt "$T/ck" --prompt "static int" --tokens 20 --seed 7 --threads 1 2>/dev/null); rc2=$?
out="$g1 / $g2"
check "whale-generate: the same seed gives the same text, starting with the prompt" \
  '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$g1" == "$g2" ] && [[ "$g1" == "static int"* ]] && [ ${#g1} -gt 12 ]'
out=$("$GEN" --ckpt "$T/ck" --prompt "int" --tokens 10 --greedy --threads 1 2>&1); rc=$?
check "whale-generate --greedy" '[ $rc -eq 0 ] && [[ "$out" == *"greedy"* ]]'
cp "$T/o1/tokenizer.model" "$T/tok.bak"
printf 'x' >> "$T/o1/tokenizer.model"
out=$("$GEN" --ckpt "$T/ck" --prompt "int" --tokens 5 2>&1); rc=$?
check "a tokenizer changed since training is refused" '[ $rc -eq 1 ] && [[ "$out" == *"changed since training"* ]]'
out=$("$GEN" --ckpt "$T/ck" --tokenizer "$T/tok.bak" --prompt "int" --tokens 5 --threads 1 2>&1); rc=$?
check "--tokenizer FILE overrides the record" '[ $rc -eq 0 ]'
out=$("$GEN" --ckpt "$T/nope" 2>&1); rc=$?
check "a missing checkpoint is named" '[ $rc -eq 1 ] && [[ "$out" == *"$T/nope"* ]]'
out=$("$GEN" --ckpt "$T/ck" --temperature -1 2>&1); rc=$?
check "--temperature out of range" '[ $rc -eq 2 ] && [[ "$out" == *"--temperature=-1: expected a number in 0..100"* ]]'
exit $fail
