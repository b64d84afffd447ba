#!/usr/bin/python3
"""Byte-level BPE encode speed: whale's (runtime/tools/data/bpe.c, via
whale-bpe) against the `tokenizers` package, the same tokenizer.json on the
same text, one thread each (whale-bpe is single-threaded; tokenizers runs
with RAYON_NUM_THREADS=1). Both as one text and as documents (tokenizers'
encode_batch over the files, whale-bpe over their concatenation: whale-data
encodes documents one by one the same way). The tokenizer is trained here
with Qwen2's settings (NFC, its Split regex, ByteLevel) or Llama 3's.
Figures: MB/s of UTF-8 input, best of REPS; the ids are checked equal.
Usage: contrib/bench/tokenizer-vs-hf.py [BUILD_DIR] [qwen2|llama3] [REPS]
Corpus: the Python standard library (WHALE_BENCH_CORPUS=GLOB overrides)."""
import glob, os, subprocess, sys, sysconfig, tempfile, time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
KIND = sys.argv[2] if len(sys.argv) > 2 else "qwen2"
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BPE = os.path.join(BUILD, "runtime/tools/data/whale-bpe")
PAT = {"llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
       "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}[KIND]

files = sorted(glob.glob(os.environ.get("WHALE_BENCH_CORPUS",
                                        os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))))
docs = []
for p in files:
    try:
        docs.append(open(p, encoding="utf-8").read())
    except (UnicodeDecodeError, IsADirectoryError):
        pass
text = "".join(docs)
nb = len(text.encode())
T = tempfile.mkdtemp(prefix="whale-tokbench.")
tf = os.path.join(T, "text.txt")
open(tf, "w", encoding="utf-8").write(text)

tok = Tokenizer(models.BPE(ignore_merges=(KIND == "llama3")))
if KIND == "qwen2":
    tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(docs[: max(1, len(docs) // 2)],
                        trainers.BpeTrainer(vocab_size=16384, show_progress=False,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tj = os.path.join(T, "tokenizer.json")
tok.save(tj)
print("corpus: %d files, %.1f MB; tokenizer: %s-style, %d tokens; 1 thread each; best of %d"
      % (len(docs), nb / 1e6, KIND, tok.get_vocab_size(), REPS))


def best(fn):
    t = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        out = fn()
        t.append(time.perf_counter() - t0)
    return min(t), out


t_one, ref = best(lambda: tok.encode(text, add_special_tokens=False).ids)
t_docs, refd = best(lambda: tok.encode_batch(docs, add_special_tokens=False))
ids_docs = [i for e in refd for i in e.ids]


def whale():
    p = subprocess.run([BPE, "encode", tj, tf], capture_output=True, text=True, check=True)
    return p


t_w, p = best(whale)
got = [int(x) for x in p.stdout.split()]
# whale-bpe's own encode time (without starting, reading and printing)
enc = float(p.stderr.split(" in ")[1].split(" s")[0])
print("tokenizers, one text:        %7.2f MB/s" % (nb / t_one / 1e6))
print("tokenizers, encode_batch:    %7.2f MB/s (%d documents)" % (nb / t_docs / 1e6, len(docs)))
print("whale-bpe, whole process:    %7.2f MB/s" % (nb / t_w / 1e6))
print("whale-bpe, encode only:      %7.2f MB/s" % (nb / enc / 1e6))
print("ratio whale (process) / tokenizers (one text): %.2fx; / encode_batch: %.2fx"
      % (t_one / t_w, t_docs / t_w))
print("ids equal to tokenizers' (one text): %s" % ("yes" if got == ref else "NO"))
subprocess.run(["rm", "-rf", T])
