/* The name and layout table between whale's tensors (engine/layers.c,
 * engine/block_x.c) and Hugging Face's, for import and export. */
#include "hf_internal.h"

#include "whale/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tab {
    struct hf_ent *e;
    size_t n, cap;
    int err;
};

static struct hf_ent *add(struct tab *t, enum hf_op op, int ndim, const int64_t *shape,
                          int sndim, const int64_t *sshape, const char *wfmt, int layer)
{
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 64;
        struct hf_ent *ne = realloc(t->e, nc * sizeof *ne);
        if (!ne) {
            t->err = WHALE_ENOMEM;
            return NULL;
        }
        t->e = ne;
        t->cap = nc;
    }
    struct hf_ent *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->whale, sizeof e->whale, wfmt, layer);
    e->op = op;
    e->ndim = ndim;
    memcpy(e->shape, shape, sizeof(int64_t) * ndim);
    e->sndim = sndim;
    memcpy(e->sshape, sshape, sizeof(int64_t) * sndim);
    return e;
}

static void src(struct hf_ent *e, const char *prefix, const char *fmt, int layer)
{
    if (!e)
        return;
    char b[128];
    snprintf(b, sizeof b, fmt, layer);
    snprintf(e->src[e->nsrc++], sizeof e->src[0], "%s%s", prefix, b);
}

#define SH(...) ((const int64_t[]){ __VA_ARGS__ })

static void gpt2_layer(struct tab *t, const struct whale_model_desc *md, const char *p, int i)
{
    const int64_t C = md->hidden, F = md->ffn;
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln1.w", i), p, "h.%d.ln_1.weight", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln1.b", i), p, "h.%d.ln_1.bias", i);
    src(add(t, HF_GPT2_QKV, 3, SH(3, C, C), 2, SH(C, 3 * C), "h.%d.attn.qkv.w", i), p,
        "h.%d.attn.c_attn.weight", i);
    src(add(t, HF_COPY, 2, SH(3, C), 1, SH(3 * C), "h.%d.attn.qkv.b", i), p,
        "h.%d.attn.c_attn.bias", i);
    src(add(t, HF_TRANSPOSE, 2, SH(C, C), 2, SH(C, C), "h.%d.attn.proj.w", i), p,
        "h.%d.attn.c_proj.weight", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.attn.proj.b", i), p, "h.%d.attn.c_proj.bias", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln2.w", i), p, "h.%d.ln_2.weight", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln2.b", i), p, "h.%d.ln_2.bias", i);
    src(add(t, HF_TRANSPOSE, 2, SH(F, C), 2, SH(C, F), "h.%d.mlp.fc.w", i), p,
        "h.%d.mlp.c_fc.weight", i);
    src(add(t, HF_COPY, 1, SH(F), 1, SH(F), "h.%d.mlp.fc.b", i), p, "h.%d.mlp.c_fc.bias", i);
    src(add(t, HF_TRANSPOSE, 2, SH(C, F), 2, SH(F, C), "h.%d.mlp.proj.w", i), p,
        "h.%d.mlp.c_proj.weight", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.mlp.proj.b", i), p, "h.%d.mlp.c_proj.bias", i);
}

/* Mixtral's block_sparse_moe: the router and each expert's w1 (gate), w3
 * (up) and w2 (down) are whale's moe.router.w and moe.expert.E.gate/up/proj
 * (engine/moe.c), same layouts. */
static void mixtral_moe(struct tab *t, const struct whale_model_desc *md, const char *p, int i)
{
    const int64_t C = md->hidden, F = md->moe.ffn, E = md->moe.experts;
    char w[96], h[128];
    src(add(t, HF_COPY, 2, SH(E, C), 2, SH(E, C), "h.%d.moe.router.w", i), p,
        "layers.%d.block_sparse_moe.gate.weight", i);
    static const char *const part[3][2] = {{"gate", "w1"}, {"up", "w3"}, {"proj", "w2"}};
    for (int e = 0; e < E; e++)
        for (int k = 0; k < 3; k++) {
            bool down = k == 2;
            snprintf(w, sizeof w, "h.%%d.moe.expert.%d.%s.w", e, part[k][0]);
            snprintf(h, sizeof h, "layers.%%d.block_sparse_moe.experts.%d.%s.weight", e,
                     part[k][1]);
            src(add(t, HF_COPY, 2, down ? SH(C, F) : SH(F, C), 2, down ? SH(C, F) : SH(F, C), w,
                    i), p, h, i);
        }
}

/* Llama / Mistral / Qwen2 / Mixtral: whale fuses q|k|v into attn.qkv.w (3, C, C)
 * when every head has its own K/V (block_x.c xb_combined), else q apart
 * and k|v in attn.kv.w (2, KV*hd, C). */
static void llama_layer(struct tab *t, const struct whale_model_desc *md, const char *p, int i)
{
    const int64_t C = md->hidden, F = md->ffn, kvc = (int64_t)md->kv_heads * (C / md->heads);
    const bool bias = !md->no_bias, fused = md->kv_heads == md->heads;
    struct hf_ent *e;
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln1.w", i), p,
        "layers.%d.input_layernorm.weight", i);
    if (fused) {
        e = add(t, HF_STACK, 3, SH(3, C, C), 2, SH(C, C), "h.%d.attn.qkv.w", i);
        src(e, p, "layers.%d.self_attn.q_proj.weight", i);
        src(e, p, "layers.%d.self_attn.k_proj.weight", i);
        src(e, p, "layers.%d.self_attn.v_proj.weight", i);
        if (bias) {
            e = add(t, HF_STACK, 2, SH(3, C), 1, SH(C), "h.%d.attn.qkv.b", i);
            src(e, p, "layers.%d.self_attn.q_proj.bias", i);
            src(e, p, "layers.%d.self_attn.k_proj.bias", i);
            src(e, p, "layers.%d.self_attn.v_proj.bias", i);
        }
    } else {
        src(add(t, HF_COPY, 2, SH(C, C), 2, SH(C, C), "h.%d.attn.q.w", i), p,
            "layers.%d.self_attn.q_proj.weight", i);
        if (bias)
            src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.attn.q.b", i), p,
                "layers.%d.self_attn.q_proj.bias", i);
        e = add(t, HF_STACK, 3, SH(2, kvc, C), 2, SH(kvc, C), "h.%d.attn.kv.w", i);
        src(e, p, "layers.%d.self_attn.k_proj.weight", i);
        src(e, p, "layers.%d.self_attn.v_proj.weight", i);
        if (bias) {
            e = add(t, HF_STACK, 2, SH(2, kvc), 1, SH(kvc), "h.%d.attn.kv.b", i);
            src(e, p, "layers.%d.self_attn.k_proj.bias", i);
            src(e, p, "layers.%d.self_attn.v_proj.bias", i);
        }
    }
    src(add(t, HF_COPY, 2, SH(C, C), 2, SH(C, C), "h.%d.attn.proj.w", i), p,
        "layers.%d.self_attn.o_proj.weight", i);
    if (bias)
        add(t, HF_ZERO, 1, SH(C), 0, NULL, "h.%d.attn.proj.b", i);
    src(add(t, HF_COPY, 1, SH(C), 1, SH(C), "h.%d.ln2.w", i), p,
        "layers.%d.post_attention_layernorm.weight", i);
    if (md->moe.experts > 0 && whale_model_desc_is_moe(md, i)) {
        mixtral_moe(t, md, p, i);
        return;
    }
    src(add(t, HF_COPY, 2, SH(F, C), 2, SH(F, C), "h.%d.mlp.gate.w", i), p,
        "layers.%d.mlp.gate_proj.weight", i);
    if (bias)
        add(t, HF_ZERO, 1, SH(F), 0, NULL, "h.%d.mlp.gate.b", i);
    src(add(t, HF_COPY, 2, SH(F, C), 2, SH(F, C), "h.%d.mlp.up.w", i), p,
        "layers.%d.mlp.up_proj.weight", i);
    if (bias)
        add(t, HF_ZERO, 1, SH(F), 0, NULL, "h.%d.mlp.up.b", i);
    src(add(t, HF_COPY, 2, SH(C, F), 2, SH(C, F), "h.%d.mlp.proj.w", i), p,
        "layers.%d.mlp.down_proj.weight", i);
    if (bias)
        add(t, HF_ZERO, 1, SH(C), 0, NULL, "h.%d.mlp.proj.b", i);
}

int hf_map_build(const struct whale_model_desc *md, enum hf_family fam, const char *prefix,
                 struct hf_ent **out, size_t *n)
{
    struct tab t = {0};
    const int64_t C = md->hidden, V = md->vocab;
    if (fam == HF_GPT2) {
        src(add(&t, HF_COPY, 2, SH(V, C), 2, SH(V, C), "wte", 0), prefix, "wte.weight", 0);
        src(add(&t, HF_COPY, 2, SH(md->seq, C), 2, SH(md->seq, C), "wpe", 0), prefix,
            "wpe.weight", 0);
        for (int i = 0; i < md->layers; i++)
            gpt2_layer(&t, md, prefix, i);
        src(add(&t, HF_COPY, 1, SH(C), 1, SH(C), "lnf.w", 0), prefix, "ln_f.weight", 0);
        src(add(&t, HF_COPY, 1, SH(C), 1, SH(C), "lnf.b", 0), prefix, "ln_f.bias", 0);
    } else {
        src(add(&t, HF_COPY, 2, SH(V, C), 2, SH(V, C), "wte", 0), prefix, "embed_tokens.weight",
            0);
        for (int i = 0; i < md->layers; i++)
            llama_layer(&t, md, prefix, i);
        src(add(&t, HF_COPY, 1, SH(C), 1, SH(C), "lnf.w", 0), prefix, "norm.weight", 0);
    }
    if (!md->tied_embeddings) /* lm_head sits outside the base model's prefix */
        src(add(&t, HF_COPY, 2, SH(V, C), 2, SH(V, C), "lm_head.w", 0), "", "lm_head.weight", 0);
    if (t.err) {
        free(t.e);
        return t.err;
    }
    *out = t.e;
    *n = t.n;
    return 0;
}
