/* Last-position probabilities for generation: a plain forward through the
 * layer chain of a one-rank engine, outside the pipeline executor (no
 * slots, no backward state), into buffers of its own.
 *
 * Shapes: tokens (1,T) int32; the stream between layers (1,T,C) fp32; the
 * head's saved area ends with probs (T,V) (layers.c: lnf (T,C), mean (T),
 * rstd (T), probs (T,V)), row n-1 of which is the answer. */
#include "engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/generate.h"
#include "whale/log.h"

int whale_engine_vocab(const whale_engine *e)
{
    return e->d.Vg;
}

int whale_engine_seq(const whale_engine *e)
{
    return e->d.T;
}

int eng_gen_check_layout(const whale_engine *e)
{
    const char *why = NULL;
    if (e->d.tp != 1 || e->grp.pp.size != 1 || e->dp.size != 1 || e->nchunks != 1)
        why = "a single rank (TP = PP = DP = 1)";
    else if (e->d.B != 1 || e->cfg.grad_accum != 1)
        why = "micro-batch 1 and grad_accum 1";
    else if (eng_lp(e))
        why = "fp32 compute (load a bf16/fp16 checkpoint into an fp32 engine)";
    else if (e->cfg.zero_stage != 0 || e->off.mode)
        why = "ZeRO 0 and no offload";
    if (why) {
        whale_error("generation needs %s", why);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_engine_next_probs(whale_engine *e, const int32_t *tokens, int n, float *probs)
{
    int rc = eng_gen_check_layout(e);
    if (rc)
        return rc;
    const int T = e->d.T, C = e->d.C, V = e->d.V;
    if (n < 1 || n > T) {
        whale_error("generation: %d tokens of context, the window holds 1..%d", n, T);
        return WHALE_EINVAL;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) {
            whale_error("generation: token %d at position %d is outside the vocabulary (%d)",
                        tokens[i], i, V);
            return WHALE_EINVAL;
        }
    size_t sv = 0;
    for (int i = 0; i < e->nl; i++) {
        size_t a = e->layers[i].ops->act_floats(&e->layers[i]);
        if (a > sv)
            sv = a;
    }
    int32_t *tok = calloc(T, sizeof *tok), *tg = calloc(T, sizeof *tg);
    float *x0 = malloc(sizeof(float) * T * C), *x1 = malloc(sizeof(float) * T * C);
    float *saved = malloc(sizeof(float) * sv);
    if (!tok || !tg || !x0 || !x1 || !saved) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    memcpy(tok, tokens, sizeof(int32_t) * n); /* padding: token 0, never seen by n-1 */
    float *cur = x0, *nxt = x1;
    const struct eng_layer *head = NULL;
    for (int i = 0; i < e->nl && !rc; i++) {
        struct eng_layer *l = &e->layers[i];
        if (l->chunk < 0)
            continue; /* a tied copy (PP only) */
        struct eng_io io;
        memset(&io, 0, sizeof io);
        io.tokens = tok;
        io.targets = tg;
        io.in = l->index > 0 ? cur : NULL;
        io.out = l->ops == &eng_head_ops ? NULL : nxt;
        io.saved = saved;
        io.scratch = e->scratch;
        io.att_tmp = e->att_tmp;
        io.mm = e->mm;
        rc = l->ops->forward(l, &io);
        if (l->ops == &eng_head_ops) {
            head = l;
            break;
        }
        float *t = cur;
        cur = nxt;
        nxt = t;
    }
    if (!rc && !head) {
        whale_error("generation: the model has no output head on this rank");
        rc = WHALE_ESTATE;
    }
    if (!rc) {
        size_t a = head->ops->act_floats(head);
        const float *p = saved + a - (size_t)T * V + (size_t)(n - 1) * V;
        double sum = 0;
        for (int v = 0; v < V; v++)
            sum += p[v];
        /* the head's saved layout is the contract above: check it holds */
        if (!(fabs(sum - 1.0) < 1e-3)) {
            whale_error("generation: the output head's probabilities sum to %g, not 1 (its "
                        "saved layout changed?)", sum);
            rc = WHALE_ESTATE;
        } else {
            memcpy(probs, p, sizeof(float) * V);
        }
    }
out:
    free(tok);
    free(tg);
    free(x0);
    free(x1);
    free(saved);
    return rc;
}
