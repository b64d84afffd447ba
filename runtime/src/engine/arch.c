/* The model description's architecture keys as the engine runs them: which
 * block (layers.c's GPT-2 block or block_x.c's configurable one), and how
 * grouped key/value heads fall on the tensor-parallel ranks. */
#include "engine_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

int eng_arch_check(const struct whale_model_desc *m)
{
    const char *src = m->source[0] ? m->source : m->name;
    if (m->position == WHALE_POS_ALIBI) {
        whale_error("%s: Position=alibi: not implemented by the engine (it runs "
                    "Position=learned or Position=rotary)", src);
        return WHALE_ENOTSUP;
    }
    if (m->heads < 1 || m->hidden % m->heads) {
        whale_error("%s: Hidden=%d is not divisible by Heads=%d", src, m->hidden, m->heads);
        return WHALE_EINVAL;
    }
    if (m->position == WHALE_POS_ROTARY && (m->hidden / m->heads) % 2) {
        whale_error("%s: Position=rotary needs an even head size; Hidden/Heads is %d", src,
                    m->hidden / m->heads);
        return WHALE_EINVAL;
    }
    if (m->kv_heads < 1 || m->heads % m->kv_heads) {
        whale_error("%s: KVHeads=%d must divide Heads=%d", src, m->kv_heads, m->heads);
        return WHALE_EINVAL;
    }
    if (m->position == WHALE_POS_ROTARY && m->rope_theta != 0 && !(m->rope_theta > 1.0f)) {
        whale_error("%s: RopeTheta=%g must be > 1", src, (double)m->rope_theta);
        return WHALE_EINVAL;
    }
    /* LayerNorm's kernels (both backends) have a fixed epsilon; RMSNorm's is
     * the description's */
    if (m->norm_eps > 0 && m->norm == WHALE_NORM_LAYERNORM && m->norm_eps != 1e-5f) {
        whale_error("%s: NormEps=%g with Norm=layernorm: the engine's LayerNorm uses 1e-05 "
                    "(Norm=rmsnorm takes any NormEps)", src, (double)m->norm_eps);
        return WHALE_ENOTSUP;
    }
    return 0;
}

int whale_engine_model_check(const struct whale_model_desc *m)
{
    return eng_arch_check(m);
}

void eng_arch_dims(const struct whale_model_desc *m, struct eng_dims *d)
{
    d->mlp = m->mlp;
    d->norm = m->norm;
    d->pos = m->position;
    d->attn = m->attention;
    d->no_bias = m->no_bias;
    d->untied = !m->tied_embeddings;
    d->rope_theta = m->rope_theta > 0 ? m->rope_theta : 10000.0f; /* 0: a struct built in code */
    d->rope_sc = m->rope_scaling;
    d->norm_eps = m->norm_eps > 0 ? m->norm_eps : 1e-5f;
    d->KV = m->kv_heads;
    d->xblock = m->mlp != WHALE_MLP_GELU || m->norm != WHALE_NORM_LAYERNORM ||
                m->position != WHALE_POS_LEARNED || m->no_bias ||
                m->attention != WHALE_ATTN_PLAIN || m->kv_heads != m->heads;
    /* MoE blocks are block_x.c's (its MLP hands over to moe.c) */
    d->moe = m->moe;
    if (m->moe.experts > 0) {
        d->xblock = true;
        d->Fe = m->moe.ffn / d->tp;
        d->Fs = m->moe.shared * m->moe.ffn / d->tp;
    }
    const int g = m->heads / m->kv_heads;
    d->hq0 = d->tp_rank * d->NH;
    if (m->kv_heads % d->tp == 0) {
        /* Megatron: each rank holds KVHeads/TP heads, the ones its query heads use */
        d->KVl = m->kv_heads / d->tp;
        d->k0 = d->tp_rank * d->KVl;
        d->kv_rep = false;
        return;
    }
    /* fewer KV heads than ranks (or not a multiple): each rank computes the
     * KV heads its query heads read; the weights stay whole on every rank */
    d->k0 = d->hq0 / g;
    d->KVl = (d->hq0 + d->NH - 1) / g + 1 - d->k0;
    d->kv_rep = true;
    static bool told;
    if (!told && d->tp_rank == 0)
        whale_info("model %s: KVHeads=%d is not divisible by TP=%d: the key/value weights are "
                   "replicated on every TP rank (each computes the %d KV head(s) its %d query "
                   "heads read) and their gradients are summed over TP", m->name, m->kv_heads,
                   d->tp, d->KVl, d->NH);
    told = true;
}
