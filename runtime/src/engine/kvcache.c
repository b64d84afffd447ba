/* Generation with a KV cache: each token runs once through the model, one
 * position at a time, and attention reads the keys and values of the
 * earlier positions from a per-block cache instead of recomputing them.
 *
 * Cache: per block K and V (KVl, S, hd), S = the engine's window; keys
 * are stored after rotary at their absolute position, so a later token
 * never touches them again. The prompt (prefill) goes through the same
 * one-position step, so the cached path and the full forward run the same
 * operations per token except attention's summation order.
 *
 * Every kernel runs through the engine's backend (whale/backend.h); a
 * backend without the two generation operations (whale_k_rope_at,
 * whale_k_attention_decode: cuda today) is refused with WHALE_ENOTSUP at
 * whale_kv_cache_create, and the caller recomputes the window instead.
 * The buffers are host memory: the engine's layout check (one fp32 rank)
 * and the cpu backend read them directly. */
#include "engine_internal.h"
#include "moe.h"

#include <stdlib.h>
#include <string.h>

#include "whale/backend.h"
#include "whale/error.h"
#include "whale/generate.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

#define F32 WHALE_FLOAT32

struct whale_kv_cache {
    int n;             /* positions cached */
    int S, nb;         /* window; blocks */
    float **k, **v;    /* per engine layer index (blocks only): (KVl,S,hd) */
    struct eng_dims d1; /* the engine's dims with one row (B = T = Ns = 1): MoE routing */
    /* one row's work areas */
    float *x, *y, *ln, *mean, *rstd, *qkv, *atty, *tmp, *r1, *fc, *up, *h, *probs, *red, *loss;
    float *moe_saved, *moe_scratch;
};

void whale_kv_cache_destroy(whale_kv_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nb; i++) {
        if (c->k)
            free(c->k[i]);
        if (c->v)
            free(c->v[i]);
    }
    free(c->k);
    free(c->v);
    float *bufs[] = { c->x, c->y, c->ln, c->mean, c->rstd, c->qkv, c->atty, c->tmp, c->r1,
                      c->fc, c->up, c->h, c->probs, c->red, c->loss, c->moe_saved,
                      c->moe_scratch };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c);
}

int whale_kv_cache_len(const whale_kv_cache *c)
{
    return c ? c->n : 0;
}

void whale_kv_cache_reset(whale_kv_cache *c)
{
    if (c)
        c->n = 0;
}

int whale_kv_cache_create(whale_engine *e, whale_kv_cache **out)
{
    *out = NULL;
    int rc = eng_gen_check_layout(e);
    if (rc)
        return rc;
    const struct eng_dims *d = &e->d;
    if (!whale_backend_has_decode(d->bk))
        return WHALE_ENOTSUP; /* said by the caller: it recomputes instead */
    whale_kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        return WHALE_ENOMEM;
    c->S = d->T;
    c->nb = e->nl;
    c->d1 = *d;
    c->d1.B = c->d1.T = c->d1.Ns = 1;
    c->d1.r0 = 0;
    c->k = calloc(e->nl, sizeof *c->k);
    c->v = calloc(e->nl, sizeof *c->v);
    const size_t C = d->C, Ct = d->Ctp, KVc = (size_t)d->KVl * d->hd, F = d->F;
    const size_t plane = (size_t)d->KVl * d->T * d->hd;
    bool moe = false;
    for (int i = 0; i < e->nl && c->k && c->v; i++)
        if (e->layers[i].ops == &eng_block_ops) {
            if (!(c->k[i] = calloc(plane, sizeof(float))) ||
                !(c->v[i] = calloc(plane, sizeof(float))))
                break;
            moe = moe || eng_moe_block(d, e->layers[i].index);
        }
    size_t wide = C > Ct ? C : Ct;
#define ALLOC(f, n) (c->f = malloc(sizeof(float) * ((n) > 0 ? (n) : 1)))
    bool ok = c->k && c->v && ALLOC(x, C) && ALLOC(y, C) && ALLOC(ln, C) && ALLOC(mean, 1) &&
              ALLOC(rstd, 1) && ALLOC(qkv, Ct + 2 * KVc) && ALLOC(atty, Ct) &&
              ALLOC(tmp, wide) && ALLOC(r1, C) && ALLOC(fc, F) && ALLOC(up, F) && ALLOC(h, F) &&
              ALLOC(probs, (size_t)d->V) && ALLOC(red, 3) && ALLOC(loss, 1);
    if (ok && moe)
        ok = ALLOC(moe_saved, eng_moe_saved_floats(&c->d1)) &&
             ALLOC(moe_scratch, eng_moe_scratch_floats(&c->d1));
#undef ALLOC
    for (int i = 0; ok && i < e->nl; i++)
        if (e->layers[i].ops == &eng_block_ops && (!c->k[i] || !c->v[i]))
            ok = false;
    if (!ok) {
        whale_kv_cache_destroy(c);
        return WHALE_ENOMEM;
    }
    *out = c;
    return 0;
}

/* The plain GPT-2 block's (layers.c) parameter order in the configurable
 * block's terms: LayerNorm, combined q|k|v, GELU MLP, every bias. */
static void plain_ix(struct eng_xb_ix *ix)
{
    *ix = (struct eng_xb_ix){ .ln1w = 0, .ln1b = 1, .qw = 2, .qb = 3, .kvw = -1, .kvb = -1,
                              .ow = 4, .ob = 5, .ln2w = 6, .ln2b = 7, .fcw = 8, .fcb = 9,
                              .upw = -1, .upb = -1, .pw = 10, .pb = 11, .moe = -1 };
}

static const float *pw_opt(const struct eng_layer *l, int i)
{
    return i < 0 ? NULL : eng_pw(l, i);
}

/* The block's norm of one row: the plain block's LayerNorm, else the
 * description's */
static int norm1(const struct eng_layer *l, whale_kv_cache *c, float *out, const float *in,
                 int w, int b)
{
    const struct eng_dims *d = l->d;
    if (!d->xblock)
        return whale_k_layernorm_fwd(d->bk, NULL, F32, out, c->mean, c->rstd, in, eng_pw(l, w),
                                     eng_pw(l, b), 1, d->C);
    return eng_norm_fwd(d, out, c->mean, c->rstd, in, eng_pw(l, w), pw_opt(l, b), 1, d->C);
}

/* y (C) = block(x (C)) for the token at position pos; its k, v join the
 * cache of this layer */
static int block_step(whale_engine *e, whale_kv_cache *c, int li, int pos)
{
    struct eng_layer *l = &e->layers[li];
    const struct eng_dims *d = l->d;
    whale_backend *bk = d->bk;
    const int C = d->C, Ct = d->Ctp, KVc = d->KVl * d->hd, F = d->F;
    struct eng_xb_ix ix;
    if (d->xblock)
        eng_xblock_ix(d, l->index, &ix);
    else
        plain_ix(&ix);
    struct whale_attn_heads hm = { .NH = d->NH, .KVl = d->KVl, .hd = d->hd, .hq0 = d->hq0,
                                   .g = d->xblock ? (d->NH * d->tp) / d->KV : 1, .k0 = d->k0 };
    if (!d->xblock) {
        hm.KVl = d->NH;
        hm.hq0 = hm.k0 = 0;
    }
    float *q = c->qkv, *k = c->qkv + Ct, *v = c->qkv + Ct + KVc;
    BK(norm1(l, c, c->ln, c->x, ix.ln1w, ix.ln1b));
    if (ix.kvw < 0) { /* combined q|k|v (3Ct,C) */
        BK(whale_k_linear_fwd(bk, NULL, F32, c->qkv, c->ln, eng_pw(l, ix.qw), pw_opt(l, ix.qb),
                              1, C, Ct + 2 * KVc));
    } else { /* q (Ct,C); kv (2,KVc,C): one rank holds every KV head */
        const float *wkv = eng_pw(l, ix.kvw), *bkv = pw_opt(l, ix.kvb);
        BK(whale_k_linear_fwd(bk, NULL, F32, q, c->ln, eng_pw(l, ix.qw), pw_opt(l, ix.qb), 1, C,
                              Ct));
        BK(whale_k_linear_fwd(bk, NULL, F32, k, c->ln, wkv, bkv, 1, C, KVc));
        BK(whale_k_linear_fwd(bk, NULL, F32, v, c->ln, wkv + (size_t)KVc * C,
                              bkv ? bkv + KVc : NULL, 1, C, KVc));
    }
    if (d->xblock && d->pos == WHALE_POS_ROTARY) {
        BK(whale_k_rope_at(bk, NULL, F32, q, d->NH, d->hd, pos, d->rope_theta, &d->rope_sc));
        BK(whale_k_rope_at(bk, NULL, F32, k, hm.KVl, d->hd, pos, d->rope_theta, &d->rope_sc));
    }
    BK(whale_k_attention_decode(bk, NULL, F32, c->atty, q, k, v, c->k[li], c->v[li], pos, c->S,
                                &hm));
    BK(whale_k_linear_fwd(bk, NULL, F32, c->tmp, c->atty, eng_pw(l, ix.ow), pw_opt(l, ix.ob), 1,
                          Ct, C));
    BK(whale_k_add(bk, NULL, F32, c->r1, c->x, c->tmp, C));
    BK(norm1(l, c, c->ln, c->r1, ix.ln2w, ix.ln2b));
    if (ix.moe >= 0) { /* the single token routed as in training, over a one-row shape */
        struct eng_layer l1 = *l;
        l1.d = &c->d1;
        struct eng_io io;
        memset(&io, 0, sizeof io);
        io.mm = e->mm;
        BK(eng_moe_fwd(&l1, &io, ix.moe, c->moe_saved, c->moe_scratch, c->ln, c->tmp));
        return whale_k_add(bk, NULL, F32, c->y, c->r1, c->tmp, C);
    }
    BK(whale_k_linear_fwd(bk, NULL, F32, c->fc, c->ln, eng_pw(l, ix.fcw), pw_opt(l, ix.fcb), 1, C,
                          F));
    if (d->xblock && (d->mlp == WHALE_MLP_SWIGLU || d->mlp == WHALE_MLP_GEGLU)) {
        BK(whale_k_linear_fwd(bk, NULL, F32, c->up, c->ln, eng_pw(l, ix.upw), pw_opt(l, ix.upb),
                              1, C, F));
        BK(whale_k_glu_fwd(bk, NULL, F32,
                           d->mlp == WHALE_MLP_SWIGLU ? WHALE_GLU_SILU : WHALE_GLU_GELU, c->h,
                           c->fc, c->up, F));
    } else {
        BK(whale_k_gelu_fwd(bk, NULL, F32, c->h, c->fc, F));
    }
    BK(whale_k_linear_fwd(bk, NULL, F32, c->tmp, c->h, eng_pw(l, ix.pw), pw_opt(l, ix.pb), 1, F,
                          C));
    return whale_k_add(bk, NULL, F32, c->y, c->r1, c->tmp, C);
}

/* c->x (C) = the embedding of tok at position pos */
static int embed_step(const struct eng_layer *l, whale_kv_cache *c, int32_t tok, int pos)
{
    const struct eng_dims *d = l->d;
    const float *wpe = d->pos == WHALE_POS_LEARNED ? eng_pw(l, 1) + (size_t)pos * d->C : NULL;
    return eng_tp_embed_fwd(d->bk, NULL, c->x, &tok, eng_pw(l, 0), d->v0, d->V, wpe, 1, 1,
                            d->C);
}

/* c->probs (V) = softmax(head(c->x)) */
static int head_step(const struct eng_layer *l, whale_kv_cache *c)
{
    const struct eng_dims *d = l->d;
    const bool ln = d->norm == WHALE_NORM_LAYERNORM;
    const float *w = l->tied ? eng_pw(l->tied, 0) : eng_pw(l, l->nparams - 1);
    BK(eng_norm_fwd(d, c->ln, c->mean, c->rstd, c->x, eng_pw(l, 0), ln ? eng_pw(l, 1) : NULL, 1,
                    d->C));
    BK(whale_k_linear_fwd(d->bk, NULL, F32, c->probs, c->ln, w, NULL, 1, d->C, d->V));
    const int32_t target = 0;
    BK(eng_tp_xent_fwd(d->bk, NULL, c->probs, c->loss, &target, d->v0, 1, d->V, c->red));
    return whale_backend_host_access(d->bk);
}

/* One token through the whole model at position c->n; probs of the last
 * position into c->probs when want_probs */
static int token_step(whale_engine *e, whale_kv_cache *c, int32_t tok, bool want_probs)
{
    const int pos = c->n;
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        if (l->chunk < 0)
            continue;
        if (l->ops == &eng_embed_ops) {
            BK(embed_step(l, c, tok, pos));
        } else if (l->ops == &eng_block_ops) {
            BK(block_step(e, c, i, pos));
            float *t = c->x;
            c->x = c->y;
            c->y = t;
        } else if (l->ops == &eng_head_ops) {
            if (want_probs)
                BK(head_step(l, c));
            break;
        }
    }
    c->n++;
    return 0;
}

int whale_engine_kv_next_probs(whale_engine *e, whale_kv_cache *c, const int32_t *tokens, int n,
                               float *probs)
{
    const int V = e->d.V;
    if (n < 1 || n > c->S || n <= c->n) {
        whale_error("generation: %d tokens of context with %d cached, the window holds 1..%d "
                    "and at least one token must be new", n, c->n, c->S);
        return WHALE_EINVAL;
    }
    for (int i = c->n; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) {
            whale_error("generation: token %d at position %d is outside the vocabulary (%d)",
                        tokens[i], i, V);
            return WHALE_EINVAL;
        }
    for (int i = c->n; i < n; i++) {
        int rc = token_step(e, c, tokens[i], i == n - 1);
        if (rc) {
            c->n = 0; /* a half-written position: start over next time */
            return rc;
        }
    }
    memcpy(probs, c->probs, sizeof(float) * V);
    return 0;
}
