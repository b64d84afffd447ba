"""whale's byte-level BPE (runtime/tools/data/bpe.c, via whale-bpe) gives the
ids of the `tokenizers` package on > 1 MB of varied text, and decodes them
back to the text. The tokenizer.json files are trained here (no downloads)
with the GPT-2, Llama 3 and Qwen2 pre-tokenizer settings (Qwen2's with its
NFC normalizer: the text has combining marks and conjoining Hangul jamo
that NFC composes).
whale-data --tokenizer tokenizer.json writes the same ids (after the BOS of
each document) into its shards, and so does whale-data --tokenizer with a
Llama-2-style SentencePiece .model (identity normalizer, byte fallback:
newlines are its own byte pieces) against Hugging Face's LlamaTokenizer.
Usage: bpe_vs_tokenizers.py WHALE_BPE SRC_DIR [WHALE_DATA]"""
import glob, os, random, subprocess, sys, tempfile, time, unicodedata
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers

import struct
BPE, SRC = sys.argv[1:3]
DATA = sys.argv[3] if len(sys.argv) > 3 else None
T = tempfile.mkdtemp(prefix="whale-bpe.")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    parts = []
    for pat in ("runtime/**/*.c", "runtime/**/*.h", "man/*", "docs/*.md", "tests/**/*.py",
                "tests/**/*.sh", "contrib/**/*.sh"):
        for p in sorted(glob.glob(os.path.join(SRC, pat), recursive=True)):
            try:
                parts.append(open(p, encoding="utf-8").read())
            except (UnicodeDecodeError, IsADirectoryError):
                pass
    r = random.Random(5)
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x5ff),
              (0x600, 0x6ff), (0x900, 0x97f), (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00),
              (0x1f300, 0x1f64f), (0x300, 0x36f), (0x2000, 0x206f), (0xff01, 0xff5e),
              (0x1100, 0x1175)]
    uni = []
    for _ in range(60000):
        a, b = r.choice(ranges)
        n = r.randint(1, 12)
        uni.append("".join(chr(r.randint(a, b)) for _ in range(n)))
        uni.append(r.choice([" ", "  ", "\t", "\n", "\r\n", "   \n\n", " \u00a0", "\u3000", "",
                             "'s ", "'LL ", " 12345 ", "3.14159", "\u2028"]))
    ws = "".join(r.choice([" " * r.randint(1, 9), "\t" * r.randint(1, 3), "\n" * r.randint(1, 4),
                           "x", "yz", "42"]) for _ in range(40000))
    return "".join(parts), "".join(uni) + ws


def train(kind, text):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        pat = LLAMA3 if kind == "llama3" else QWEN2
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], tr)
    path = os.path.join(T, kind + ".json")
    tok.save(path)
    return tok, path


def whale_data(tok, path, text):
    """one document through whale-data: BOS then tokenizers' ids"""
    doc = os.path.join(T, "doc.txt")
    part = text[:200000]
    open(doc, "w", encoding="utf-8").write(part)
    out = os.path.join(T, "wd")
    p = subprocess.run([DATA, "-o", out, "--tokenizer", path, "--val-fraction", "0", "--no-progress",
                        "--threads", "1", doc], capture_output=True, text=True, timeout=600)
    if p.returncode:
        print("  FAIL  whale-data --tokenizer tokenizer.json: %s" % p.stderr.strip()[-500:])
        return False
    raw = open(os.path.join(out, "train_000000.bin"), "rb").read()
    n = struct.unpack("<256i", raw[:1024])[2]
    got = list(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]))
    want = tok.encode(part, add_special_tokens=False).ids
    bos = tok.token_to_id("<|endoftext|>")
    ok = got == [bos] + want
    print("  %s  whale-data --tokenizer tokenizer.json: %d ids %s" %
          ("ok  " if ok else "FAIL", n, "= BOS + tokenizers' ids" if ok else "DIFFER"))
    return ok


def spm_llama2(text):
    """a Llama-2-style SentencePiece model: whale-data's ids = BOS + LlamaTokenizer's"""
    import transformers
    transformers.logging.set_verbosity_error()
    corpus = os.path.join(T, "spm-corpus.txt")
    open(corpus, "w", encoding="utf-8").write(text[:600000])
    pre = os.path.join(T, "llama2ish")
    p = subprocess.run(["spm_train", "--input=" + corpus, "--model_prefix=" + pre,
                        "--vocab_size=2000", "--model_type=bpe", "--byte_fallback=true",
                        "--normalization_rule_name=identity", "--add_dummy_prefix=true",
                        "--split_digits=true", "--remove_extra_whitespaces=false",
                        "--allow_whitespace_only_pieces=true", "--character_coverage=0.9995",
                        "--unk_id=0", "--bos_id=1", "--eos_id=2"], capture_output=True, text=True)
    if p.returncode:
        print("  FAIL  spm_train: %s" % p.stderr[-500:])
        return False
    doc = text.replace("<s>", "").replace("</s>", "").replace("<unk>", "")  # no specials
    tok = transformers.LlamaTokenizer(pre + ".model", legacy=True, add_bos_token=False,
                                      add_eos_token=False)
    want = tok.encode(doc)
    df = os.path.join(T, "spm-doc.txt")
    open(df, "w", encoding="utf-8").write(doc)
    out = os.path.join(T, "wd-spm")
    p = subprocess.run([DATA, "-o", out, "--tokenizer", pre + ".model", "--val-fraction", "0",
                        "--no-progress", "--threads", "1", df], capture_output=True, text=True,
                       timeout=600)
    if p.returncode:
        print("  FAIL  whale-data --tokenizer llama2ish.model: %s" % p.stderr.strip()[-500:])
        return False
    raw = open(os.path.join(out, "train_000000.bin"), "rb").read()
    n = struct.unpack("<256i", raw[:1024])[2]
    got = list(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]))
    ok = got == [1] + want
    first = next((i for i, (a, b) in enumerate(zip(got[1:], want)) if a != b), None)
    print("  %s  whale-data --tokenizer Llama-2-style .model: %d ids (%.2f MB) %s" %
          ("ok  " if ok else "FAIL", n, len(doc.encode()) / 1e6,
           "= BOS + LlamaTokenizer's" if ok else "DIFFER from token %s" % first))
    return ok


def main():
    src, uni = corpus()
    text = src + uni
    tf = os.path.join(T, "text.txt")
    open(tf, "w", encoding="utf-8").write(text)
    nbytes = len(text.encode())
    print("text: %.2f MB (%d characters), in %s" % (nbytes / 1e6, len(text), T))
    assert nbytes >= 1e6
    bad = 0
    for kind in ("gpt2", "llama3", "qwen2"):
        tok, path = train(kind, src[: len(src) // 2] + uni[: len(uni) // 4])
        t0 = time.perf_counter()
        ref = tok.encode(text, add_special_tokens=False).ids
        t_hf = time.perf_counter() - t0
        p = subprocess.run([BPE, "encode", path, tf], capture_output=True, text=True, timeout=600)
        if p.returncode:
            print("  FAIL  %s: whale-bpe: %s" % (kind, p.stderr.strip()))
            bad += 1
            continue
        got = [int(x) for x in p.stdout.split()]
        first = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b),
                     None if len(ref) == len(got) else min(len(ref), len(got)))
        same = first is None
        if not same:
            ctx = tok.decode(ref[max(0, first - 3):first + 3])
            print("  first difference at token %d: %r whale %r near %r"
                  % (first, ref[first:first + 5], got[first:first + 5], ctx))
        idf = os.path.join(T, kind + ".ids")
        open(idf, "w").write(p.stdout)
        dp = subprocess.run([BPE, "decode", path, idf], capture_output=True, timeout=600)
        # decoding gives the normalized text
        want = unicodedata.normalize("NFC", text) if kind == "qwen2" else text
        round_trip = dp.returncode == 0 and dp.stdout == want.encode()
        print("  %s  %s: %d tokens %s; decode %s; whale %s, tokenizers %.3f s (1 thread)"
              % ("ok  " if same and round_trip else "FAIL", kind, len(ref),
                 "identical" if same else "DIFFER", "round-trips" if round_trip else "DIFFERS",
                 p.stderr.strip().split(": ", 1)[-1], t_hf))
        bad += not (same and round_trip)
        if DATA and kind == "llama3":
            bad += not whale_data(tok, path, text)
    if DATA:
        bad += not spm_llama2(text)
    if bad:
        raise SystemExit("FAIL: %d tokenizer(s) differ" % bad)
    subprocess.run(["rm", "-rf", T])
    print("all ok")


main()
