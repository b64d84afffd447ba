"""Hugging Face interchange against transformers (Debian's torch, fp32).

For GPT-2, Llama, Mistral, Qwen2 and Mixtral (small configs, random weights made
here, no downloads): whale-ckpt import, then the loss and gradient norm of
whale-train's first step (1 rank and TP 2 x PP 2) equal torch autograd on
the transformers model; export -> from_pretrained loads with no missing or
unexpected keys and gives identical logits; import -> export -> import is
bit-exact; unsupported config fields are refused with the field named.
Greedy generation (whale-generate --greedy) equals transformers'
generate(do_sample=False).
Usage: hf_interop.py WHALE_CKPT WHALE_TRAIN WHALE_RUN WHALE_GENERATE [FAMILY...]"""
import json, os, struct, subprocess, sys, tempfile
import torch
import transformers
from transformers import AutoModelForCausalLM
from safetensors.torch import load_file, save_file

CKPT, TRAIN, RUN, GEN = sys.argv[1:5]
T = tempfile.mkdtemp(prefix="whale-hf.")
B, S = 4, 32  # S = n_positions: whale's wpe has the run's sequence length
NGEN = 12     # generated tokens (prompt 9 + 12 < S)
AUX_COEF = 0.02  # Mixtral's router_aux_loss_coef: large enough to show in the loss
fails = []
last_row = {}
transformers.logging.set_verbosity_error()
# generate() asks whether the model is FSDP-managed by importing
# torch.distributed.fsdp, which Debian's torch 1.13 cannot import on Python
# 3.11 (a dataclass with a mutable default): these models never are
import transformers.generation.utils as _gu
_gu.is_fsdp_managed_module = lambda m: False
transformers.utils.logging.disable_progress_bar()


def sh(args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if ok and p.returncode:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit("FAIL: %s exited %d" % (args[:3], p.returncode))
    return p


def check(cond, what):
    print(("  ok    " if cond else "  FAIL  ") + what)
    if not cond:
        fails.append(what)


def model_for(kind):
    common = dict(vocab_size=256)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=32, **common)
    else:
        kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=176, max_position_embeddings=32,
                  rms_norm_eps=1e-5, **common)
        if kind == "llama":
            # Llama 3.1's rope scaling with an original length that puts the
            # 8 frequencies of a 16-wide head in all three bands (kept,
            # blended, divided by factor) within these 32 positions
            cfg = transformers.LlamaConfig(rope_theta=500000.0, rope_scaling=dict(
                rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=64), **kw)
        elif kind == "llama-mha-tied":
            kw["num_key_value_heads"] = 4
            cfg = transformers.LlamaConfig(tie_word_embeddings=True,
                                           rope_scaling=dict(type="linear", factor=2.0), **kw)
        elif kind == "mistral":
            cfg = transformers.MistralConfig(sliding_window=4096, **kw)
        elif kind == "mixtral":  # 4 experts, top 3 (whale: every block MoE, EP 1)
            # with the load-balancing loss (output_router_logits): every
            # loss and gradient check below includes it (aux_ref)
            kw["intermediate_size"] = 96
            # (top 3 of 4 experts over 2 layers: whale's AuxLoss = coef K / L differs
            # from the coefficient)
            cfg = transformers.MixtralConfig(sliding_window=None, num_local_experts=4,
                                             num_experts_per_tok=3, output_router_logits=True,
                                             router_aux_loss_coef=AUX_COEF, **kw)
        else:  # Qwen2's own epsilon (1e-6), carried into whale's RMSNorm
            kw["rms_norm_eps"] = 1e-6
            cfg = transformers.Qwen2Config(**kw)
    torch.manual_seed(1)
    m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # every weight random: a swapped norm or bias shows
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if p.dim() == 1 else 0.0) * 0.5)
        if kind == "qwen2":  # mean(x^2) ~ 1e-6 at the first norm: eps 1e-6 vs 1e-5 shows
            m.model.embed_tokens.weight.mul_(0.01)
    return m.eval()


def tokens_file(path, n):
    g = torch.Generator().manual_seed(2)
    tok = torch.randint(0, 256, (n,), generator=g)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *tok.tolist()))
    return tok


def ref_step(m, kind, tok, mask=None, dp=1):
    """loss and global gradient norm of one step on B samples of S+1 tokens
    (mask: one 0/1 per token, 0 = that token is no target: ignore_index;
    dp: the MoE aux loss as whale's DP ranks compute it, each on its B/dp
    samples, averaged)"""
    extra = []
    if kind == "qwen2":  # whale's Qwen2 has zero o/mlp biases: they get gradients too
        for l in m.model.layers:
            for lin in (l.self_attn.o_proj, l.mlp.gate_proj, l.mlp.up_proj, l.mlp.down_proj):
                lin.bias = torch.nn.Parameter(torch.zeros(lin.out_features))
                extra.append(lin.bias)
    x = torch.stack([tok[b * S:b * S + S] for b in range(B)])
    y = torch.stack([tok[b * S + 1:b * S + S + 1] for b in range(B)])
    if mask is not None:
        ym = torch.stack([mask[b * S + 1:b * S + S + 1] for b in range(B)])
        y = torch.where(ym > 0, y, torch.full_like(y, -100))
    m.zero_grad()
    out = m(x)
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    if kind == "mixtral":
        rows = B // dp * S
        loss = loss + m.config.router_aux_loss_coef * sum(
            aux_ref(m, [r[d * rows:(d + 1) * rows] for r in out.router_logits])[0]
            for d in range(dp)) / dp
    loss.backward()
    gn = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters() if p.grad is not None))
    for l in m.model.layers if kind == "qwen2" else []:
        for lin in (l.self_attn.o_proj, l.mlp.gate_proj, l.mlp.up_proj, l.mlp.down_proj):
            lin.bias = None
    return loss.item(), gn.item(), x


def aux_ref(m, router_logits):
    """whale's Mixtral load-balancing term (AuxLoss = coef K / L summed over
    its L blocks, hf_config.c): the mean over layers of transformers'
    load_balancing_loss_func applied to each layer alone; also transformers'
    own value (all layers as one batch) and E sum_e cov_l(F_le, P_le), by
    which the two differ"""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
    E, K = m.config.num_local_experts, m.config.num_experts_per_tok
    per = [load_balancing_loss_func((r,), E, K) for r in router_logits]
    pooled = load_balancing_loss_func(tuple(router_logits), E, K)
    with torch.no_grad():
        F = torch.stack([torch.nn.functional.one_hot(torch.topk(r, K, dim=-1)[1], E).sum(1)
                         .double().mean(0) for r in router_logits])  # [L, E], rows sum to K
        P = torch.stack([torch.softmax(r.double(), -1).mean(0) for r in router_logits])
        cov = E * ((F * P).mean(0) - F.mean(0) * P.mean(0)).sum()
    return sum(per) / len(per), pooled, cov


def whale_step(tag, conf, data, ck, n=1, layout=(), extra=()):
    met = os.path.join(T, tag + ".jsonl")
    start = ["--init-from", ck] if conf is None else ["--model", conf, "--resume", ck]
    args = [TRAIN] + start + ["--data", data, "--steps", "1",
            "--batch", str(B), "--seq", str(S), "--threads", "1", "--no-progress",
            "--metrics", met, "--precision", "fp32"] + list(extra)
    if n > 1:
        args = [RUN, "-n", str(n), "--timeout", "280"] + list(layout) + args
    sh(["timeout", "300"] + args)
    rows = [json.loads(l) for l in open(met) if '"step"' in l]
    last_row.clear()
    last_row.update(rows[0])
    return rows[0]["loss"], rows[0]["grad_norm"]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def family(kind):
    print(kind)
    d = os.path.join(T, kind)
    m = model_for(kind)
    m.save_pretrained(d + "/hf", safe_serialization=True)
    tok = tokens_file(d + "/tok.bin", B * S + 1)
    sh([CKPT, "import", d + "/hf", "-o", d + "/w"])
    conf = d + "/w/model.conf"
    loss, gn, x = ref_step(m, kind, tok)
    wl, wg = whale_step(kind + "-1", conf, d + "/tok.bin", d + "/w")
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "1 rank: loss %.7f vs torch %.7f (rel %.1e), grad norm %.6f vs %.6f (rel %.1e)"
          % (wl, loss, rel(wl, loss), wg, gn, rel(wg, gn)))
    if kind == "llama":
        masked(m, kind, d, tok, conf)
    if kind == "mixtral":
        aux_check(m, x, conf)
    # lr 0: the checkpoint it saves (TP 2 x PP 2) holds the imported weights
    wl4, wg4 = whale_step(kind + "-4", conf, d + "/tok.bin", d + "/w", 4,
                          ("--tp", "2", "--pp", "2"),
                          ("--lr", "0", "--whale-ckpt-dir", d + "/ck4",
                           "--whale-ckpt-every", "1"))
    check(rel(wl4, loss) <= 1e-5 and rel(wg4, gn) <= 1e-4,
          "TP2xPP2: loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
          % (wl4, rel(wl4, loss), wg4, rel(wg4, gn)))
    # greedy continuation: whale-generate on the imported weights equals
    # transformers' generate(do_sample=False) (its KV cache) token for token
    prompt = "whale, hf"
    ids = torch.tensor([list(prompt.encode())])
    # generate() with output_router_logits fails inside transformers 4.46's
    # load_balancing_loss_func (its cached steps' attention mask): the loss
    # plays no part in generation
    m.config.output_router_logits = False
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=NGEN, do_sample=False, eos_token_id=None,
                         pad_token_id=0, attention_mask=torch.ones_like(ids))[0].tolist()
    p = sh([GEN, "--ckpt", d + "/w", "--model", conf, "--prompt", prompt, "--tokens", str(NGEN),
            "--greedy", "--print-ids", "--threads", "1"])
    got = [int(t) for t in p.stdout.split()]
    check(got == ref, "greedy generation of %d tokens equals transformers' generate: %s"
          % (NGEN, "same" if got == ref else "%s vs %s" % (got, ref)))
    m.config.output_router_logits = kind == "mixtral"
    # export -> from_pretrained: no missing/unexpected keys, identical logits
    sh([CKPT, "export", "--hf", d + "/out", d + "/w", "--model", conf, "--hf-config",
        d + "/w/hf_config.json", "--max-shard-mb", "0.05"])
    m2, info = AutoModelForCausalLM.from_pretrained(d + "/out", output_loading_info=True,
                                                    torch_dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v}
    check(not bad, "export loads with no missing/unexpected keys: %s" % (bad or "none"))
    nsh = len([f for f in os.listdir(d + "/out") if f.endswith(".safetensors")])
    if kind == "mixtral":
        check(m2.config.output_router_logits and m2.config.router_aux_loss_coef == AUX_COEF,
              "export: router_aux_loss_coef %g" % m2.config.router_aux_loss_coef)
    with torch.no_grad():
        same = torch.equal(m(x).logits, m2.eval()(x).logits)
    check(same, "export -> from_pretrained: identical logits (%d shard files)" % nsh)
    # --init-from HF_DIR: the model from config.json, each rank's slices from the files
    wl, wg = whale_step(kind + "-i1", None, d + "/tok.bin", d + "/hf")
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "--init-from, 1 rank: loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
          % (wl, rel(wl, loss), wg, rel(wg, gn)))
    if kind == "mixtral":  # whale's aux loss: per DP rank's micro-batch
        loss, gn, _ = ref_step(m, kind, tok, dp=2)
    wl, wg = whale_step(kind + "-i4", None, d + "/tok.bin", d + "/hf", 4,
                        ("--tp", "2", "--dp", "2"), ("--zero", "3"))
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "--init-from, TP2xDP2 ZeRO-3 (flat shards): loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
          % (wl, rel(wl, loss), wg, rel(wg, gn)))
    if kind == "mixtral":  # experts sharded over EP 2: each rank reads only its own experts
        wl, wg = whale_step(kind + "-ep", None, d + "/tok.bin", d + "/hf", 2,
                            ("--dp", "2", "--ep", "2"), ("--zero", "1"))
        check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
              "--init-from, DP2xEP2 ZeRO-1: loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
              % (wl, rel(wl, loss), wg, rel(wg, gn)))
    if kind in ("gpt2", "llama"):
        bf16_exact(m, kind, d)
    if os.path.isdir(d + "/ck4"):  # export from the 4-rank layout
        sh([CKPT, "export", "--hf", d + "/out4", d + "/ck4", "--model", conf, "--hf-config",
            d + "/w/hf_config.json"])
        m4, info4 = AutoModelForCausalLM.from_pretrained(d + "/out4", output_loading_info=True,
                                                         torch_dtype=torch.float32)
        with torch.no_grad():
            same = torch.equal(m(x).logits, m4.eval()(x).logits)
        check(same and not any(info4.values()),
              "export of the TP2xPP2 checkpoint -> from_pretrained: identical logits")
    # import -> export -> import: bit-exact whale checkpoints
    sh([CKPT, "import", d + "/out", "-o", d + "/w2"])
    sh([CKPT, "convert", d + "/w", d + "/a.safetensors"])
    sh([CKPT, "convert", d + "/w2", d + "/b.safetensors"])
    a, b = load_file(d + "/a.safetensors"), load_file(d + "/b.safetensors")
    check(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a),
          "import -> export -> import bit-exact (%d tensors)" % len(a))


def aux_check(m, x, conf):
    """whale's per-block aux (metrics moe.aux, normalised by N K) times K is
    transformers' load_balancing_loss_func of that layer alone; the
    description carries coef K / L; transformers' all-layers value differs
    from the per-layer mean by exactly E sum_e cov_l(F_le, P_le)"""
    E, K, L = (m.config.num_local_experts, m.config.num_experts_per_tok,
               m.config.num_hidden_layers)
    with torch.no_grad():
        per, pooled, cov = aux_ref(m, m(x).router_logits)
    per, pooled, cov = float(per), float(pooled), float(cov)
    got = last_row["moe"]["aux"] * K
    check(rel(got, per) <= 1e-5,
          "aux loss: whale's mean block aux x K %.7f vs load_balancing_loss_func per layer %.7f "
          "(rel %.1e)" % (got, per, rel(got, per)))
    want = "AuxLoss=%.9g" % (AUX_COEF * K / L)
    check(want in open(conf).read(), "router_aux_loss_coef %g -> %s" % (AUX_COEF, want))
    check(abs((per - pooled) - cov) <= 1e-6,
          "transformers' all-layers aux %.7f = per-layer mean %.7f - %.2e (E sum_e cov_l(F, P) "
          "%.2e)" % (pooled, per, per - pooled, cov))


def bf16_exact(m, kind, d):
    """a bf16 checkpoint (as most are published): --init-from into TP 2 x PP 2
    (mapped slices, streaming widening to fp32, GPT-2's transposes) gives bit
    for bit the weights whale-ckpt import gives"""
    import copy
    copy.deepcopy(m).to(torch.bfloat16).save_pretrained(d + "/hf16", safe_serialization=True)
    sh([CKPT, "import", d + "/hf16", "-o", d + "/w16"])
    whale_step(kind + "-b4", None, d + "/tok.bin", d + "/hf16", 4, ("--tp", "2", "--pp", "2"),
               ("--lr", "0", "--whale-ckpt-dir", d + "/ck16", "--whale-ckpt-every", "1"))
    sh([CKPT, "convert", d + "/w16", d + "/i16.safetensors"])
    sh([CKPT, "convert", d + "/ck16", d + "/t16.safetensors"])
    a, b = load_file(d + "/i16.safetensors"), load_file(d + "/t16.safetensors")
    same = [k for k in a if k in b and torch.equal(a[k].float(), b[k].float())]
    check(len(same) == len(a), "bf16 files: --init-from TP2xPP2 equals whale-ckpt import bit for "
          "bit (%d of %d tensors)" % (len(same), len(a)))


def refused(name, mutate, field, kind="llama"):
    d = os.path.join(T, "bad-" + name)
    m = model_for(kind)
    m.save_pretrained(d, safe_serialization=True)
    mutate(d)
    p = sh([CKPT, "import", d, "-o", d + "/w"], ok=False)
    check(p.returncode != 0 and field in p.stderr and not os.path.exists(d + "/w"),
          "refused %s: %s" % (name, (p.stderr.strip().splitlines() or ["(nothing)"])[-1]))


def set_cfg(**kv):
    def f(d):
        c = json.load(open(d + "/config.json"))
        c.update(kv)
        json.dump(c, open(d + "/config.json", "w"))
    return f


def add_tensor(d):
    t = load_file(d + "/model.safetensors")
    t["model.layers.0.self_attn.q_norm.weight"] = torch.ones(16)
    save_file(t, d + "/model.safetensors", metadata={"format": "pt"})


def drop_tensor(d):
    t = load_file(d + "/model.safetensors")
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, d + "/model.safetensors", metadata={"format": "pt"})


def masked(m, kind, d, tok, conf):
    """instruction data: the loss masked to the response tokens (a mask file
    beside the data, one byte per token) equals cross_entropy(ignore_index)
    on 1 rank, and DP 2 with 2 micro-batches per rank (--loss-mask) equals it:
    the counted targets are summed over ranks and micro-batches"""
    n = B * S + 1
    mask = (torch.arange(n) % 11 >= 4).to(torch.uint8)  # prompts of 4, responses of 7
    mask[S + 1:2 * S + 1] = 0  # a whole sample of prompt: only the other ranks count
    os.symlink(d + "/tok.bin", d + "/tokm.bin")
    with open(d + "/tokm.bin.mask", "wb") as f:
        f.write(bytes(mask.tolist()))
    loss, gn, _ = ref_step(m, kind, tok, mask)
    wl, wg = whale_step(kind + "-m1", conf, d + "/tokm.bin", d + "/w")
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "masked loss, 1 rank: loss %.7f vs torch ignore_index %.7f (rel %.1e), grad norm "
          "%.6f vs %.6f (rel %.1e)" % (wl, loss, rel(wl, loss), wg, gn, rel(wg, gn)))
    wl, wg = whale_step(kind + "-m2", conf, d + "/tok.bin", d + "/w", 2, ("--dp", "2"),
                        ("--grad-accum", "2", "--loss-mask", d + "/tokm.bin.mask"))
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "masked loss, DP 2 x 2 micro-batches: loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
          % (wl, rel(wl, loss), wg, rel(wg, gn)))
    # vocabulary-parallel cross-entropy (TP) and the loss on the last stage (PP)
    wl, wg = whale_step(kind + "-m4", conf, d + "/tokm.bin", d + "/w", 4, ("--tp", "2", "--pp", "2"),
                        ("--grad-accum", "2"))
    check(rel(wl, loss) <= 1e-5 and rel(wg, gn) <= 1e-4,
          "masked loss, TP2xPP2: loss %.7f (rel %.1e), grad norm %.6f (rel %.1e)"
          % (wl, rel(wl, loss), wg, rel(wg, gn)))


def main():
    print("transformers %s, torch %s, in %s" % (transformers.__version__, torch.__version__, T))
    for kind in (sys.argv[5:] or ["gpt2", "llama", "llama-mha-tied", "mistral", "qwen2",
                                  "mixtral"]):
        family(kind)
    print("refusals")
    refused("rope_scaling yarn", set_cfg(rope_scaling={"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 16}), '"rope_scaling.rope_type" = "yarn"')
    refused("rope_scaling dynamic", set_cfg(rope_scaling={"type": "dynamic", "factor": 2.0}),
            '"rope_scaling.type" = "dynamic"')
    refused("rope_scaling llama3 incomplete", set_cfg(rope_scaling={"rope_type": "llama3",
            "factor": 8.0}), '"rope_scaling.low_freq_factor"')
    refused("mistral rope_scaling", set_cfg(rope_scaling={"type": "linear", "factor": 2.0}),
            '"rope_scaling.type" = "linear" is not supported for model_type mistral', "mistral")
    refused("model_type", set_cfg(model_type="gpt_neox"), '"model_type" = "gpt_neox"')
    refused("mixtral router_jitter_noise", set_cfg(router_jitter_noise=0.1),
            '"router_jitter_noise" = 0.1', "mixtral")
    refused("gpt2 layer_norm_epsilon", set_cfg(layer_norm_epsilon=1e-6),
            '"layer_norm_epsilon" = 1e-06', "gpt2")
    refused("attention_bias", set_cfg(attention_bias=True), '"attention_bias" = true')
    refused("qwen2 sliding window", set_cfg(use_sliding_window=True), '"use_sliding_window"',
            "qwen2")
    refused("head_dim", set_cfg(head_dim=32), '"head_dim" = 32')
    refused("unexpected tensor", add_tensor, "unexpected tensor model.layers.0.self_attn.q_norm")
    refused("missing tensor", drop_tensor, "model.layers.1.mlp.up_proj.weight is missing")
    refused("tie mismatch", set_cfg(tie_word_embeddings=True), "lm_head.weight")
    if fails:
        raise SystemExit("FAIL: %d check(s): %s" % (len(fails), "; ".join(fails)))
    subprocess.run(["rm", "-rf", T])
    print("all ok")


main()
