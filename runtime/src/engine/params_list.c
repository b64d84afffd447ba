/* The parameter list of a model without building an engine: the names and
 * global shapes the engine declares (layers.c, block_x.c) and checkpoints
 * store, for tools that check a file against a model before using it
 * (whale-ckpt convert --from-safetensors). */
#include "engine_internal.h"

#include "whale/error.h"

#include <stdlib.h>

int whale_model_params(const struct whale_model_desc *m, whale_param_fn fn, void *user)
{
    if (!m || !fn || m->heads < 1 || m->layers < 0 || m->kv_heads < 1)
        return WHALE_EINVAL;
    /* one TP rank: global shapes; batch and sequence do not shape weights */
    struct eng_dims d = {
        .B = 1, .T = m->seq, .C = m->hidden, .NH = m->heads, .hd = m->hidden / m->heads,
        .F = m->ffn, .V = m->vocab, .Vg = m->vocab, .Ctp = m->hidden, .L = m->layers, .tp = 1,
    };
    eng_arch_dims(m, &d);
    d.Ns = d.T;
    int rc = 0;
    for (int i = 0; i <= d.L + 1 && !rc; i++) {
        int n = i == 0 ? eng_embed_params(&d, i, NULL)
              : i <= d.L ? eng_block_params(&d, i, NULL) : eng_head_params(&d, i, NULL);
        struct eng_param *p = calloc((size_t)n + 1, sizeof *p);
        if (!p)
            return WHALE_ENOMEM;
        if (i == 0)
            eng_embed_params(&d, i, p);
        else if (i <= d.L)
            eng_block_params(&d, i, p);
        else
            eng_head_params(&d, i, p);
        for (int k = 0; k < n && !rc; k++)
            rc = fn(p[k].name, p[k].ndim, p[k].gshape, user);
        free(p);
    }
    return rc;
}
