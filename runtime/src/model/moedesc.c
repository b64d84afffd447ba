/* Mixture-of-experts keys of a model description: parsing, the checks
 * across keys (with the file:line of the key at fault) and the parameter
 * counts of MoE blocks (all parameters, and the active ones a token uses). */
#include "moedesc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "whale/error.h"
#include "whale/log.h"

#define MOE_MAX_EXPERTS 4096
#define MOE_MAX_SHARED 64

void md_moe_defaults(struct whale_moe_desc *d)
{
    memset(d, 0, sizeof *d);
    d->topk = 1;
    d->every = 1;
    d->gate = WHALE_GATE_SOFTMAX;
    d->aux = 0.01;
    d->zloss = 0.001;
}

static const char *const moe_keys[] = { "Experts", "TopK", "ExpertFFN", "SharedExperts",
                                        "MoEEvery", "MoEFirst", "Gate", "GateRenorm",
                                        "CapacityFactor", "AuxLoss", "ZLoss" };

bool md_moe_is_key(const char *key)
{
    for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++)
        if (!strcasecmp(key, moe_keys[i]))
            return true;
    return false;
}

const char *whale_gate_name(enum whale_gate_kind k)
{
    return k == WHALE_GATE_SOFTMAX ? "softmax" : k == WHALE_GATE_SIGMOID ? "sigmoid" : "?";
}

static int md_int(const struct whale_kv_line *l, const struct whale_kv *kv, long lo, long hi,
                  int *dst, int *line)
{
    long v;
    int rc = whale_kv_to_long(l, kv, lo, hi, false, &v);
    if (rc)
        return rc;
    *dst = (int)v;
    *line = l->line;
    return 0;
}

int md_moe_key(const struct whale_kv_line *l, const struct whale_kv *kv, struct whale_model_desc *m,
               struct md_moe_seen *seen)
{
    struct whale_moe_desc *d = &m->moe;
    int rc = 0;
    snprintf(seen->file, sizeof seen->file, "%s", l->file);
    if (!seen->any) {
        seen->any = l->line;
        for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++)
            if (!strcasecmp(kv->key, moe_keys[i]))
                seen->any_key = moe_keys[i];
    }
    if (!strcasecmp(kv->key, "Experts"))
        return md_int(l, kv, 0, MOE_MAX_EXPERTS, &d->experts, &seen->experts);
    if (!strcasecmp(kv->key, "TopK"))
        return md_int(l, kv, 1, MOE_MAX_EXPERTS, &d->topk, &seen->topk);
    if (!strcasecmp(kv->key, "ExpertFFN"))
        return md_int(l, kv, 1, 4L << 20, &d->ffn, &seen->ffn);
    if (!strcasecmp(kv->key, "SharedExperts"))
        return md_int(l, kv, 0, MOE_MAX_SHARED, &d->shared, &seen->shared);
    if (!strcasecmp(kv->key, "MoEEvery"))
        return md_int(l, kv, 1, 1L << 16, &d->every, &seen->every);
    if (!strcasecmp(kv->key, "MoEFirst"))
        return md_int(l, kv, 0, 1L << 16, &d->first, &seen->first);
    if (!strcasecmp(kv->key, "Gate")) {
        if (!strcasecmp(kv->value, "softmax"))
            d->gate = WHALE_GATE_SOFTMAX;
        else if (!strcasecmp(kv->value, "sigmoid"))
            d->gate = WHALE_GATE_SIGMOID;
        else {
            whale_error("%s:%d: Gate=%s: expected one of softmax, sigmoid", l->file, l->line,
                        kv->value);
            return WHALE_ECONF;
        }
        seen->gate = l->line;
        return 0;
    }
    if (!strcasecmp(kv->key, "GateRenorm")) {
        seen->renorm = l->line;
        return whale_kv_to_bool(l, kv, &d->renorm);
    }
    if (!strcasecmp(kv->key, "CapacityFactor")) {
        seen->capacity = l->line;
        if (!strcasecmp(kv->value, "dropless")) {
            d->capacity = 0;
            return 0;
        }
        double v;
        if ((rc = whale_kv_to_double(l, kv, 0.0, 1024.0, &v)))
            return rc;
        if (v <= 0) {
            whale_error("%s:%d: CapacityFactor=%s: must be > 0 (or 'dropless' for no cap)",
                        l->file, l->line, kv->value);
            return WHALE_ECONF;
        }
        d->capacity = v;
        return 0;
    }
    if (!strcasecmp(kv->key, "AuxLoss")) {
        seen->aux = l->line;
        return whale_kv_to_double(l, kv, 0.0, 1000.0, &d->aux);
    }
    if (!strcasecmp(kv->key, "ZLoss")) {
        seen->zloss = l->line;
        return whale_kv_to_double(l, kv, 0.0, 1000.0, &d->zloss);
    }
    return WHALE_ECONF;
}

int md_moe_finish(struct whale_model_desc *m, const struct md_moe_seen *seen)
{
    struct whale_moe_desc *d = &m->moe;
    const char *f = seen->file;
    if (!seen->any)
        return 0;
    if (d->experts == 0) {
        whale_error("%s:%d: %s= given but the model has no experts (add Experts=N, N >= 2)", f,
                    seen->any, seen->any_key ? seen->any_key : "a MoE key");
        return WHALE_ECONF;
    }
    if (d->experts < 2) {
        whale_error("%s:%d: Experts=%d: a MoE block needs at least 2 experts", f, seen->experts,
                    d->experts);
        return WHALE_ECONF;
    }
    if (d->topk > d->experts) {
        whale_error("%s:%d: TopK=%d is more than Experts=%d", f, seen->topk, d->topk,
                    d->experts);
        return WHALE_ECONF;
    }
    if (d->first >= m->layers) {
        whale_error("%s:%d: MoEFirst=%d: the model has blocks 0..%d (Layers=%d)", f,
                    seen->first, d->first, m->layers - 1, m->layers);
        return WHALE_ECONF;
    }
    if (d->every > m->layers) {
        whale_error("%s:%d: MoEEvery=%d is more than Layers=%d", f, seen->every, d->every,
                    m->layers);
        return WHALE_ECONF;
    }
    if (!d->ffn)
        d->ffn = m->ffn;
    if (d->renorm && d->topk == 1 && d->gate == WHALE_GATE_SOFTMAX)
        whale_debug("%s:%d: GateRenorm=yes with TopK=1: every gate is 1", f, seen->renorm);
    return 0;
}

/* ---- parameter counts (whale/modeldesc.h) ------------------------------------ */

bool whale_model_desc_is_moe(const struct whale_model_desc *m, int i)
{
    const struct whale_moe_desc *d = &m->moe;
    return d->experts > 0 && i >= d->first && (i - d->first) % (d->every > 0 ? d->every : 1) == 0;
}

int whale_model_desc_moe_blocks(const struct whale_model_desc *m)
{
    int n = 0;
    for (int i = 0; i < m->layers; i++)
        n += whale_model_desc_is_moe(m, i);
    return n;
}

/* One expert's FFN of width f (the description's MLP kind and biases). */
static int64_t md_ffn_params(const struct whale_model_desc *m, int64_t f)
{
    int64_t h = m->hidden, bias = m->no_bias ? 0 : 1;
    return m->mlp == WHALE_MLP_GELU ? 2 * h * f + bias * (f + h) : 3 * h * f + bias * (2 * f + h);
}

int64_t whale_model_desc_moe_block_params(const struct whale_model_desc *m, bool active)
{
    const struct whale_moe_desc *d = &m->moe;
    int64_t dense_mlp = md_ffn_params(m, m->ffn);
    int64_t rest = whale_model_desc_block_params(m) - dense_mlp;
    int64_t fe = d->ffn ? d->ffn : m->ffn;
    int64_t routed = active ? d->topk : d->experts;
    int64_t shared = d->shared ? md_ffn_params(m, fe * d->shared) : 0;
    return rest + (int64_t)d->experts * m->hidden + routed * md_ffn_params(m, fe) + shared;
}
