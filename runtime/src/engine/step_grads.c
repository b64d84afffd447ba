/* Gradient buckets: the ZeRO 2/3 full-size buffer while a bucket is in
 * backward, its reduction over DP as soon as its last layer's backward is
 * done (allreduce, or reduce-scatter into this rank's shard; optionally in
 * 16 bits), accumulation over micro-batches, and after the pipeline the
 * tied embedding's sum over the first and last stage. */
#include "step.h"

#include <string.h>

#include "whale/error.h"

static void rebind_g(whale_engine *e, int b, float *base)
{
    struct eng_bucket *bk = &e->buckets[b];
    for (int li = bk->l0; li < bk->l1; li++) {
        struct eng_layer *l = &e->layers[li];
        if (bk->expert)
            l->gx = base ? base + (l->flat_xbegin - bk->flat) : NULL;
        else
            l->g = base ? base + (l->flat_begin - bk->flat) : NULL;
    }
}

/* ZeRO 2/3: a zeroed full-size gradient buffer while the bucket is in backward. */
int eng_g_acquire(whale_engine *e, int b)
{
    if (e->cfg.zero_stage < 2)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->gbuf)
        return 0;
    if (!(bk->gbuf = eng_scratch_alloc(e, WHALE_MEM_GRAD, bk->n, true)))
        return WHALE_ENOMEM;
    rebind_g(e, b, bk->gbuf);
    return 0;
}

/* 16-bit gradient reduction for this engine? (DP backends that offer it) */
static bool g_reduce_16(const whale_engine *e, const struct eng_bucket *bk)
{
    const struct whale_par_comm *g = bk->comm;
    return eng_lp(e) && e->cfg.grad_reduce_16 && g->size > 1 && g->iallreduce16 &&
           g->ireduce_scatter16;
}

/* ZeRO 1: the optimizer reads only this rank's block of the summed
 * gradient, so a reduce-scatter (half an allreduce's traffic) suffices.
 * The block lands in a scratch buffer (16 bits: after the bucket in g16)
 * and eng_g_finish copies it to its place in G; the other blocks of G keep
 * this rank's local sums, which nothing reads before they are zeroed. */
static int g_reduce_scatter_z1(whale_engine *e, struct eng_bucket *bk)
{
    const size_t sb = bk->n / bk->comm->size;
    int rc;
    if (g_reduce_16(e, bk)) {
        if (!(bk->g16 = (uint16_t *)eng_scratch_alloc(e, WHALE_MEM_GRAD, (bk->n + sb) / 2, false)))
            return WHALE_ENOMEM;
        eng_lp_store(e, bk->g16, e->G + bk->flat, bk->n);
        rc = bk->comm->ireduce_scatter16(bk->comm, bk->g16, bk->g16 + bk->n, sb, e->lp, &bk->greq);
    } else {
        if (!(bk->rs_tmp = eng_scratch_alloc(e, WHALE_MEM_GRAD, sb, false)))
            return WHALE_ENOMEM;
        rc = bk->comm->ireduce_scatter(bk->comm, e->G + bk->flat, bk->rs_tmp, sb, &bk->greq);
    }
    if (!rc) {
        eng_comm_started(e);
        eng_phase(e, WHALE_ENGINE_COLLECTIVE);
    }
    return rc;
}

/* ZeRO 1: the reduced block from the scratch buffer into G. */
static void g_finish_z1(whale_engine *e, struct eng_bucket *bk)
{
    const size_t sb = bk->n / bk->comm->size;
    float *own = e->G + bk->flat + (size_t)bk->comm->rank * sb;
    if (bk->g16) {
        eng_lp_load(e, own, bk->g16 + bk->n, sb);
        float *f = (float *)bk->g16;
        eng_scratch_free(e, WHALE_MEM_GRAD, &f, (bk->n + sb) / 2);
        bk->g16 = NULL;
    } else if (bk->rs_tmp) {
        memcpy(own, bk->rs_tmp, sb * sizeof(float));
        eng_scratch_free(e, WHALE_MEM_GRAD, &bk->rs_tmp, sb);
    }
}

/* Bucket b has all gradients of this micro-batch: reduce it. */
int eng_g_reduce(whale_engine *e, int b, bool first_micro, bool last_micro)
{
    struct eng_bucket *bk = &e->buckets[b];
    const int z = e->cfg.zero_stage;
    const size_t sb = bk->n / bk->comm->size;
    int rc = 0;
    if (z < 2) {
        /* full gradients stay local until the last micro-batch (no_sync) */
        if (!last_micro || bk->comm->size == 1)
            return 0;
        if (z == 1)
            return g_reduce_scatter_z1(e, bk);
        if (g_reduce_16(e, bk)) {
            /* round the fp32 sum to 16 bits, reduce, widen back in eng_g_finish */
            if (!(bk->g16 = (uint16_t *)eng_scratch_alloc(e, WHALE_MEM_GRAD, bk->n / 2, false)))
                return WHALE_ENOMEM;
            eng_lp_store(e, bk->g16, e->G + bk->flat, bk->n);
            rc = bk->comm->iallreduce16(bk->comm, bk->g16, bk->n, e->lp, &bk->greq);
        } else {
            rc = bk->comm->iallreduce(bk->comm, e->G + bk->flat, bk->n, &bk->greq);
        }
        if (!rc) {
            eng_comm_started(e);
            eng_phase(e, WHALE_ENGINE_COLLECTIVE);
        }
        return rc;
    }
    float *dst = e->Gsh + bk->shard_off;
    if (bk->comm->size == 1) {
        if (first_micro)
            memcpy(dst, bk->gbuf, sb * sizeof(float));
        else if ((rc = whale_k_acc(e->bk, NULL, WHALE_FLOAT32, dst, bk->gbuf, (int64_t)sb)))
            return rc;
        eng_scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
        return 0;
    }
    if (g_reduce_16(e, bk)) {
        /* send: the whole bucket in 16 bits; receive: my block, after it */
        if (!(bk->g16 = (uint16_t *)eng_scratch_alloc(e, WHALE_MEM_GRAD, (bk->n + sb) / 2, false)))
            return WHALE_ENOMEM;
        eng_lp_store(e, bk->g16, bk->gbuf, bk->n);
        if (!first_micro && !(bk->rs_tmp = eng_scratch_alloc(e, WHALE_MEM_GRAD, sb, false)))
            return WHALE_ENOMEM;
        rc = bk->comm->ireduce_scatter16(bk->comm, bk->g16, bk->g16 + bk->n, sb, e->lp, &bk->greq);
        if (!rc) {
            eng_comm_started(e);
            eng_phase(e, WHALE_ENGINE_COLLECTIVE);
        }
        return rc;
    }
    if (!first_micro && !(bk->rs_tmp = eng_scratch_alloc(e, WHALE_MEM_GRAD, sb, false)))
        return WHALE_ENOMEM;
    rc = bk->comm->ireduce_scatter(bk->comm, bk->gbuf, first_micro ? dst : bk->rs_tmp, sb, &bk->greq);
    if (!rc) {
        eng_comm_started(e);
        eng_phase(e, WHALE_ENGINE_COLLECTIVE);
    }
    return rc;
}

/* Finish bucket b's reduction (blocking). */
int eng_g_finish(whale_engine *e, int b)
{
    struct eng_bucket *bk = &e->buckets[b];
    int rc = eng_req_wait(e, &bk->greq);
    const size_t sb = bk->n / bk->comm->size;
    if (e->cfg.zero_stage == 1 && bk->comm->size > 1) {
        g_finish_z1(e, bk);
    } else if (bk->g16) {
        if (e->cfg.zero_stage < 2) {
            eng_lp_load(e, e->G + bk->flat, bk->g16, bk->n);
            float *f = (float *)bk->g16;
            eng_scratch_free(e, WHALE_MEM_GRAD, &f, bk->n / 2);
        } else {
            eng_lp_load(e, bk->rs_tmp ? bk->rs_tmp : e->Gsh + bk->shard_off, bk->g16 + bk->n, sb);
            float *f = (float *)bk->g16;
            eng_scratch_free(e, WHALE_MEM_GRAD, &f, (bk->n + sb) / 2);
        }
        bk->g16 = NULL;
    }
    if (bk->rs_tmp) {
        int arc = whale_k_acc(e->bk, NULL, WHALE_FLOAT32, e->Gsh + bk->shard_off, bk->rs_tmp,
                              (int64_t)sb);
        if (arc)
            return arc;
        eng_scratch_free(e, WHALE_MEM_GRAD, &bk->rs_tmp, sb);
    }
    if (e->cfg.zero_stage >= 2 && bk->gbuf) {
        eng_scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
    }
    if (!rc && e->off.last_micro && !bk->tied_defer)
        eng_off_grad_ready(e, b);
    return rc;
}

/* Release buckets whose reduction completed (called between layers). */
int eng_g_poll(whale_engine *e)
{
    for (int b = 0; b < e->nb; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        if (!bk->greq)
            continue;
        bool done;
        int rc = eng_req_poll(e, &bk->greq, &done);
        if (rc)
            return rc;
        if (done && (rc = eng_g_finish(e, b)))
            return rc;
    }
    return 0;
}

/* After every backward of the step: the tied embedding's bucket (PP > 1)
 * gets the sum of both stages' wte gradients, then its DP reduction. */
int eng_grads_finish(whale_engine *e)
{
    int rc = 0;
    for (int b = 0; b < e->nb && !rc; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        if (!bk->tied_defer)
            continue;
        const struct eng_layer *l = &e->layers[bk->l0];
        const struct eng_param *wte = &l->params[0];
        const int z = e->cfg.zero_stage;
        if (z >= 2 && !bk->gbuf && (rc = eng_g_acquire(e, b)))
            return rc;
        float *g = z < 2 ? e->G + wte->flat : bk->gbuf + (wte->flat - bk->flat);
        uint64_t t0 = whale_trace_now();
        if (e->grp.emb.size > 1)
            rc = e->grp.emb.allreduce(&e->grp.emb, g, wte->numel, WHALE_SUM);
        if (whale_trace_on())
            whale_trace_span("allreduce", "tied wte", t0, -1, -1);
        if (rc)
            return rc;
        const size_t sb = bk->n / bk->comm->size;
        if (z < 2) {
            if (bk->comm->size > 1) {
                rc = bk->comm->iallreduce(bk->comm, e->G + bk->flat, bk->n, &bk->greq);
                if (!rc) {
                    eng_comm_started(e);
                    rc = eng_req_wait(e, &bk->greq);
                }
            }
        } else {
            float *dst = e->Gsh + bk->shard_off;
            if (bk->comm->size == 1) {
                memcpy(dst, bk->gbuf, sb * sizeof(float));
            } else {
                rc = bk->comm->ireduce_scatter(bk->comm, bk->gbuf, dst, sb, &bk->greq);
                if (!rc) {
                    eng_comm_started(e);
                    rc = eng_req_wait(e, &bk->greq);
                }
            }
            eng_scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
            rebind_g(e, b, NULL);
        }
        if (!rc)
            eng_off_grad_ready(e, b);
    }
    return rc;
}
