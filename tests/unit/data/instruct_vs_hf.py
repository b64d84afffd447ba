"""whale-data --instruct against Hugging Face's apply_chat_template.

Tiny byte-level BPE tokenizers are trained here (no downloads) with the
special tokens of Qwen2, Llama 3 and Llama 2 / Mistral; tokenizer_config.json
holds the real chat_template of Qwen2-Instruct, Llama-3-Instruct,
Llama-2-chat and Mistral-7B-Instruct-v0.1. For each: whale-data's ids equal
transformers' apply_chat_template(messages, tokenize=True) for every
conversation, and its mask equals return_assistant_tokens_mask (the same
template with {% generation %} around the assistant's output; the test also
checks that it renders the same ids). A Llama-2-style SentencePiece .model
gives LlamaTokenizer's ids with the llama2 template. --chat-template auto
recognises each template; bad records and an unknown template are refused with file:line or
the file named; --max-tokens truncates and counts.
Then the whole fine-tuning flow: whale-data --instruct -> whale-train
--init-from a tiny Qwen2 model made here: no --lr gives the fine-tuning
rate, and every step's loss_tokens equals the mask's ones in that step's
windows (the loss counts the response tokens only, the data from sample 0).
Usage: instruct_vs_hf.py WHALE_DATA WHALE_TRAIN"""
import json, os, shutil, struct, subprocess, sys, tempfile
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers
import transformers

DATA, TRAIN = sys.argv[1:3]
T = tempfile.mkdtemp(prefix="whale-instruct.")
transformers.logging.set_verbosity_error()
fails = []

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The published templates, verbatim (Qwen2's with real newlines inside its
# string literals, as its tokenizer_config.json has them; the others with
# the \n escapes theirs have).
QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
QWEN2_GEN = QWEN2.replace(
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
    "{{'<|im_start|>' + message['role'] + '\n'}}{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}"
    "{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
          "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
          "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
LLAMA3_GEN = ("{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
              "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
              "{% if message['role'] == 'assistant' %}{% generation %}"
              "{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}{% else %}"
              "{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}")
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
           "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
           "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
           "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and "
           "assistant roles are supported!') }}{% endif %}{% endfor %}")
MISTRAL_GEN = MISTRAL.replace("{{ message['content'] + eos_token}}",
                              "{% generation %}{{ message['content'] + eos_token}}{% endgeneration %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = "
          "messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception("
          "'Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
          "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
          "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
          "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
LLAMA2_GEN = LLAMA2.replace("{{ ' '  + content.strip() + ' ' + eos_token }}",
                            "{{ ' ' }}{% generation %}{{ content.strip() + ' ' + eos_token }}"
                            "{% endgeneration %}")
LLAMA31_HEAD = "{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}Cutting Knowledge Date: "

SYS = {"role": "system", "content": "You are terse.\nAnswer in one line."}
CONVS = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}],
    [SYS, {"role": "user", "content": "  Write a loop  "},
     {"role": "assistant", "content": "\n\n    for i in range(3):\n        print(i)\n"},
     {"role": "user", "content": "Größe? 日本語 é"},
     {"role": "assistant", "content": "!Sure, it's  fine\t"}],
    [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": " hi there"},
     {"role": "user", "content": "again"}, {"role": "assistant", "content": ""}],
]


def check(cond, what):
    print(("  ok    " if cond else "  FAIL  ") + what)
    if not cond:
        fails.append(what)


def text():
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../docs")
    parts = []
    for f in sorted(os.listdir(src))[:6]:
        parts.append(open(os.path.join(src, f), encoding="utf-8").read())
    parts.append("Größe 日本語 é 2+2=4 for i in range(3): print(i) user assistant system " * 20)
    return "".join(parts)[:300000]


def tokenizer(kind, specials, corpus):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE if kind == "llama3" else QWEN2_RE),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=specials, show_progress=False)
    tok.train_from_iterator([corpus[i:i + 4096] for i in range(0, len(corpus), 4096)], tr)
    return tok


def model_dir(name, tok, template, bos, eos):
    d = os.path.join(T, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template,
           "bos_token": bos, "eos_token": eos, "model_max_length": 4096,
           "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=1)
    return d


def run_data(d, jsonl, out, *extra, ok=True):
    args = [DATA, "-o", out, "--tokenizer", os.path.join(d, "tokenizer.json"), "--instruct",
            "--val-fraction", "0", "--no-shuffle", "--no-progress", "--threads", "1",
            "--force"] + list(extra) + [jsonl]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if ok and p.returncode:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit("FAIL: whale-data exited %d" % p.returncode)
    return p


def shard(out):
    raw = open(os.path.join(out, "train_000000.bin"), "rb").read()
    _, ver, n = struct.unpack("<256i", raw[:1024])[:3]
    ids = list(struct.unpack("<%d%s" % (n, "I" if ver == 2 else "H"),
                             raw[1024:1024 + (4 if ver == 2 else 2) * n]))
    mask = list(open(os.path.join(out, "train_000000.bin.mask"), "rb").read())
    return ids, mask


def write_jsonl(path, convs):
    with open(path, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")


def compare(name, d, gen_template, convs, expect_name):
    hf = transformers.AutoTokenizer.from_pretrained(d)
    want_ids, want_mask = [], []
    for c in convs:
        ids = hf.apply_chat_template(c, tokenize=True)
        g = hf.apply_chat_template(c, tokenize=True, chat_template=gen_template,
                                   return_dict=True, return_assistant_tokens_mask=True)
        check(g["input_ids"] == ids, "%s: the {%% generation %%} template renders the same ids "
              "(%d)" % (name, len(ids)))
        want_ids += ids
        want_mask += g["assistant_masks"]
    jl = os.path.join(T, name + ".jsonl")
    write_jsonl(jl, convs)
    out = os.path.join(T, name + ".out")
    p = run_data(d, jl, out)
    ids, mask = shard(out)
    first = next((i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b),
                 None if len(ids) == len(want_ids) else min(len(ids), len(want_ids)))
    check(first is None, "%s: whale-data ids = apply_chat_template's (%d tokens, %d conversations)%s"
          % (name, len(want_ids), len(convs), "" if first is None else
             " DIFFER at %d: whale %r hf %r (%r)" % (first, ids[first:first + 6],
                                                     want_ids[first:first + 6],
                                                     hf.decode(want_ids[max(0, first - 4):first + 4]))))
    mfirst = next((i for i, (a, b) in enumerate(zip(mask, want_mask)) if a != b), None)
    check(mask == want_mask, "%s: mask = return_assistant_tokens_mask (%d of %d tokens)%s"
          % (name, sum(want_mask), len(want_mask), "" if mfirst is None else
             " DIFFER at %d: whale %r hf %r" % (mfirst, mask[mfirst:mfirst + 8],
                                                want_mask[mfirst:mfirst + 8])))
    check(("chat template %s" % expect_name) in p.stderr,
          "%s: --chat-template auto recognises it as %s" % (name, expect_name))
    return hf


def spm_llama2(corpus):
    """a Llama-2-style SentencePiece .model: <s> and </s> its control pieces,
    [INST] text; ids = LlamaTokenizer's apply_chat_template (legacy, as the
    Llama 2 checkpoints ship), the mask on the responses"""
    d = os.path.join(T, "spm")
    os.makedirs(d, exist_ok=True)
    cf = os.path.join(d, "corpus.txt")
    open(cf, "w", encoding="utf-8").write(corpus)
    p = subprocess.run(["spm_train", "--input=" + cf, "--model_prefix=" + d + "/tokenizer",
                        "--vocab_size=800", "--model_type=bpe", "--byte_fallback=true",
                        "--normalization_rule_name=identity", "--add_dummy_prefix=true",
                        "--split_digits=true", "--remove_extra_whitespaces=false",
                        "--allow_whitespace_only_pieces=true", "--character_coverage=0.9995",
                        "--unk_id=0", "--bos_id=1", "--eos_id=2"], capture_output=True, text=True)
    if p.returncode:
        check(False, "spm_train: %s" % p.stderr[-300:])
        return
    tok = transformers.LlamaTokenizer(d + "/tokenizer.model", legacy=True, add_bos_token=False,
                                      add_eos_token=False)
    tok.chat_template = LLAMA2
    convs = CONVS[:2]
    want = []
    for c in convs:
        want += tok.apply_chat_template(c, tokenize=True)
    jl = os.path.join(T, "spm.jsonl")
    write_jsonl(jl, convs)
    out = os.path.join(T, "spm.out")
    p = subprocess.run([DATA, "-o", out, "--tokenizer", d + "/tokenizer.model", "--chat-template",
                        "llama2", "--val-fraction", "0", "--no-shuffle", "--no-progress",
                        "--threads", "1", jl], capture_output=True, text=True, timeout=120)
    if p.returncode:
        check(False, "whale-data --chat-template llama2 --tokenizer .model: %s" % p.stderr[-500:])
        return
    ids, mask = shard(out)
    first = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), None)
    check(ids == want, "llama2, SentencePiece .model: whale-data ids = LlamaTokenizer's "
          "apply_chat_template (%d tokens)%s" % (len(want), "" if ids == want else
                                                 " DIFFER at %s: %r %r" % (first, ids[first:first + 6], want[first:first + 6])))
    got = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    resp = [m["content"].strip() for c in convs for m in c if m["role"] == "assistant"]
    check(all(r.split()[0] in got for r in resp) and got.count("</s>") == len(resp) and
          "[INST]" not in got and "Write" not in got,
          "llama2, SentencePiece .model: the mask covers the responses and their </s> only "
          "(%d tokens: %r)" % (sum(mask), got[:60]))


def refusals(d):
    """bad records: file:line and the problem; an unknown template: the file"""
    cases = [
        ("not json", '{"messages": [', "not valid JSON"),
        ("missing field", '{"prompt": "p"}', '"response" is missing'),
        ("role order", json.dumps({"messages": [{"role": "assistant", "content": "a"}]}),
         'message 1 has role "assistant" where "user" was expected'),
        ("last not assistant", json.dumps({"messages": [{"role": "user", "content": "u"}]}),
         "the last message is not an assistant's"),
        ("special in content", json.dumps({"prompt": "x<|im_end|>y", "response": "r"}),
         "contains the template's special token <|im_end|>"),
    ]
    for what, line, msg in cases:
        jl = os.path.join(T, "bad.jsonl")
        open(jl, "w").write('{"prompt": "fine", "response": "ok"}\n\n' + line + "\n")
        p = run_data(d, jl, os.path.join(T, "bad.out"), ok=False)
        check(p.returncode != 0 and ("%s:3:" % jl) in p.stderr and msg in p.stderr,
              "refused with file:line (%s): %s" % (what, p.stderr.strip().splitlines()[-1:]))
    bad = model_dir("llama31", Tokenizer.from_file(os.path.join(d, "tokenizer.json")),
                    LLAMA31_HEAD + "<|start_header_id|>", "<|endoftext|>", "<|endoftext|>")
    jl = os.path.join(T, "ok.jsonl")
    open(jl, "w").write('{"prompt": "fine", "response": "ok"}\n')
    p = run_data(bad, jl, os.path.join(T, "bad.out"), ok=False)
    cfg = os.path.join(bad, "tokenizer_config.json")
    check(p.returncode != 0 and cfg in p.stderr and "--chat-template" in p.stderr,
          "an unrecognised chat_template is refused naming the file and --chat-template")
    long = os.path.join(T, "long.jsonl")
    open(long, "w").write('{"prompt": "fine", "response": "ok"}\n' +
                          json.dumps({"prompt": "p " * 40, "response": "r " * 40}) + "\n")
    p = run_data(d, long, os.path.join(T, "long.out"), "--max-tokens", "50", ok=False)
    check(p.returncode != 0 and ("%s:2:" % long) in p.stderr and "--max-tokens 50" in p.stderr,
          "a record over --max-tokens is refused by default, with file:line")
    p = run_data(d, long, os.path.join(T, "long.out"), "--max-tokens", "50", "--overlong",
                 "truncate")
    meta = json.load(open(os.path.join(T, "long.out", "whale-data.json")))["instruct"]
    check(meta["truncated"] == 1 and meta["truncated_without_target"] == 1 and
          "1 truncated" in p.stderr, "--overlong truncate: counted in the summary and whale-data.json")
    # plain text over it with --force: no mask of the instruction run stays
    # beside the new shard (whale-train would read it with the new tokens)
    had = os.path.exists(os.path.join(T, "long.out", "train_000000.bin.mask"))
    txt = os.path.join(T, "plain.txt")
    open(txt, "w").write("plain text, no records\n")
    subprocess.run([DATA, "-o", os.path.join(T, "long.out"), "--tokenizer",
                    os.path.join(d, "tokenizer.json"), "--val-fraction", "0", "--force",
                    "--no-progress", txt], capture_output=True, check=True, timeout=120)
    check(had and not os.path.exists(os.path.join(T, "long.out", "train_000000.bin.mask")),
          "--force with plain text removes the masks of the instruction output it replaces")
    # a vocabulary over 65536 (Llama 3, Qwen2): uint32 shards (version 2), the same ids
    w = os.path.join(T, "wide")
    os.makedirs(w, exist_ok=True)
    tj = json.load(open(os.path.join(d, "tokenizer.json")))
    tj["added_tokens"].append({"id": 151643, "content": "<|far|>", "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False,
                               "special": True})
    json.dump(tj, open(os.path.join(w, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(d, "tokenizer_config.json"), w)
    run_data(d, jl, os.path.join(T, "narrow.out"))
    p = run_data(w, jl, os.path.join(T, "wide.out"))
    raw = open(os.path.join(T, "wide.out", "train_000000.bin"), "rb").read()
    check(struct.unpack("<2i", raw[4:12])[0] == 2 and
          shard(os.path.join(T, "wide.out")) == shard(os.path.join(T, "narrow.out")),
          "a tokenizer of 151644 ids: uint32 shards (llm.c version 2) with the same ids and mask")
    p = run_data(d, long, os.path.join(T, "drop.out"), "--max-tokens", "1", "--overlong", "drop",
                 ok=False)
    check(p.returncode != 0 and "all 2 records were dropped" in p.stderr,
          "--overlong drop of every record: refused, not an empty output")


def finetune(d, hf):
    """whale-data --instruct -> whale-train --init-from: the loss counts the mask's ones"""
    import torch
    cfg = transformers.Qwen2Config(vocab_size=len(hf), hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(d, safe_serialization=True)
    jl = os.path.join(T, "sft.jsonl")
    with open(jl, "w") as f:
        for i in range(24):
            if i % 2:
                f.write(json.dumps({"prompt": "What is %d+%d?" % (i, i), "response": "%d." % (2 * i)}) + "\n")
            else:
                f.write(json.dumps({"messages": [SYS, {"role": "user", "content": "Count to %d" % (i % 5)},
                                                 {"role": "assistant", "content": " ".join(map(str, range(i % 5 + 1)))}]}) + "\n")
    out = os.path.join(T, "sft")
    run_data(d, jl, out)
    ids, mask = shard(out)
    S, B, steps = 32, 4, 3
    met = os.path.join(T, "sft.metrics.jsonl")
    p = subprocess.run(["timeout", "300", TRAIN, "--init-from", d, "--data",
                        os.path.join(out, "train_000000.bin"), "--seq", str(S), "--batch", str(B),
                        "--steps", str(steps), "--threads", "1", "--no-progress", "--metrics", met,
                        "--precision", "fp32"], capture_output=True, text=True, timeout=320)
    if p.returncode:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-3000:])
        check(False, "whale-train --init-from with the instruction data")
        return
    rows = [json.loads(l) for l in open(met) if '"step"' in l]
    epoch = (len(ids) - 1) // S
    want = []
    for s in range(steps):
        n = 0
        for b in range(B):
            st = ((s * B + b) % epoch) * S
            n += sum(mask[st + 1:st + S + 1])
        want.append(n)
    got = [r.get("loss_tokens") for r in rows]
    check(got == want, "whale-train: loss_tokens per step %s = the mask's ones in its windows %s "
          "(of %d targets)" % (got, want, B * S))
    lrs = [r["lr"] for r in rows]
    check(max(lrs) <= 2e-5 + 1e-12 and "learning rate 2e-05" in p.stderr,
          "--init-from without --lr: the fine-tuning rate (peak 2e-5, warmup), lr %s" % lrs)
    check(all(r["loss"] == r["loss"] and r["loss"] < 20 for r in rows),
          "the loss is finite: %s" % [round(r["loss"], 4) for r in rows])


def main():
    corpus = text()
    qwen = tokenizer("qwen2", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], corpus)
    l3 = tokenizer("llama3", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                              "<|end_header_id|>", "<|eot_id|>"], corpus)
    l2 = tokenizer("gpt2", ["<unk>", "<s>", "</s>"], corpus)
    dq = model_dir("qwen2", qwen, QWEN2, None, "<|im_end|>")
    hf = compare("qwen2", dq, QWEN2_GEN, CONVS, "qwen2")
    compare("llama3", model_dir("llama3", l3, LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
            LLAMA3_GEN, CONVS, "llama3")
    compare("llama2", model_dir("llama2", l2, LLAMA2, "<s>", "</s>"), LLAMA2_GEN, CONVS, "llama2")
    compare("mistral", model_dir("mistral", l2, MISTRAL, "<s>", "</s>"), MISTRAL_GEN,
            [c[1:] if c[0]["role"] == "system" else c for c in CONVS], "mistral")
    spm_llama2(corpus)
    refusals(dq)
    finetune(dq, hf)
    if fails:
        raise SystemExit("FAIL: %d check(s)" % len(fails))
    shutil.rmtree(T)
    print("all ok")


main()
