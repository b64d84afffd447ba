/* One training step: forward and backward over the micro-batches, gradient
 * buckets reduced while backward continues, ZeRO gathers and partitions,
 * loss scaling, clipping and AdamW on this rank's shard. */
#include "device.h"
#include "engine_internal.h"
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"

/* ---- communication bookkeeping ------------------------------------------------ */

static void comm_started(whale_engine *e)
{
    if (e->inflight++ == 0)
        e->busy_since = eng_now();
}

static void comm_finished(whale_engine *e)
{
    if (--e->inflight == 0)
        e->t_comm += eng_now() - e->busy_since;
}

static int req_wait(whale_engine *e, void **req)
{
    if (!*req)
        return 0;
    double t0 = eng_now();
    uint64_t tr = whale_trace_now();
    int rc = e->dp.wait(&e->dp, *req);
    e->t_wait += eng_now() - t0;
    if (whale_trace_on()) /* the exposed part of a DP / ZeRO collective */
        whale_trace_span("allreduce", "dp wait", tr, -1, -1);
    *req = NULL;
    comm_finished(e);
    return rc;
}

static int req_poll(whale_engine *e, void **req, bool *done)
{
    *done = true;
    if (!*req)
        return 0;
    int rc = e->dp.test(&e->dp, *req, done);
    if (rc) {
        *req = NULL;
        comm_finished(e);
        return rc;
    }
    if (*done) {
        *req = NULL;
        comm_finished(e);
    }
    return 0;
}

/* Transient buffers (gathered weights, gradient buckets) from the arena. */
static float *scratch_alloc(whale_engine *e, enum whale_mem_cat cat, size_t n, bool zero)
{
    float *p = whale_arena_alloc(e->arena, cat, n * sizeof(float), zero);
    if (!p)
        return NULL;
    e->scratch_now += (int64_t)n * 4;
    if (e->scratch_now > e->scratch_peak)
        e->scratch_peak = e->scratch_now;
    return p;
}

static void scratch_free(whale_engine *e, enum whale_mem_cat cat, float **p, size_t n)
{
    if (*p) {
        whale_arena_free(e->arena, cat, *p, n * sizeof(float));
        e->scratch_now -= (int64_t)n * 4;
        *p = NULL;
    }
}

/* ---- ZeRO-3 weight gathering --------------------------------------------------- */

static void rebind_w(whale_engine *e, int b, float *base)
{
    struct eng_bucket *bk = &e->buckets[b];
    for (int li = bk->l0; li < bk->l1; li++)
        e->layers[li].w = base ? base + (e->layers[li].flat_begin - bk->flat) : NULL;
}

static void rebind_g(whale_engine *e, int b, float *base)
{
    struct eng_bucket *bk = &e->buckets[b];
    for (int li = bk->l0; li < bk->l1; li++)
        e->layers[li].g = base ? base + (e->layers[li].flat_begin - bk->flat) : NULL;
}

/* Start gathering bucket b's weights (ZeRO 3) and take a reference. With
 * 16-bit params (any ZeRO stage) the bucket's fp32 compute weights are
 * widened from them here (ZeRO 0-2) or once the 16-bit gather lands
 * (ZeRO 3, w_ready): one bucket at a time, never the whole model. */
static int w_acquire(whale_engine *e, int b)
{
    const bool lp = eng_lp(e);
    if (e->cfg.zero_stage != 3 && !lp)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->wref++ > 0)
        return 0;
    if (!(bk->wbuf = scratch_alloc(e, WHALE_MEM_PARAM, bk->n, false)))
        return WHALE_ENOMEM;
    size_t sb = bk->n / e->dp.size;
    eng_move_wait(e, &bk->wup); /* optimizer offload: the shard's update is back */
    if (lp && e->cfg.zero_stage < 3) {
        eng_lp_load(e, bk->wbuf, e->W16 + bk->flat, bk->n);
    } else if (lp) {
        /* 16-bit gather: the shard is a multiple of 16 elements, moved as
         * sb/2 fp32 words (an allgather only copies) */
        if (!(bk->wbuf16 = (uint16_t *)scratch_alloc(e, WHALE_MEM_PARAM, bk->n / 2, false)))
            return WHALE_ENOMEM;
        const void *src = e->W16sh ? e->W16sh + bk->shard_off : NULL;
        int rc = 0;
        if (eng_off_rparams(e)) /* the shard lives in another task (offload_rparams.c) */
            rc = e->dp.size == 1 ? eng_off_rp_fetch(e, b, bk->wbuf16, sb, true)
                                 : eng_off_rp_stage(e, b, sb, true, &src);
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
        if (e->dp.size == 1) {
            if (!eng_off_rparams(e))
                memcpy(bk->wbuf16, src, sb * sizeof(uint16_t));
        } else {
            rc = e->dp.iallgather(&e->dp, (const float *)src, (float *)bk->wbuf16, sb / 2,
                                  &bk->wreq);
            if (rc)
                return rc;
            comm_started(e);
        }
    } else if (e->dp.size == 1 && eng_off_rparams(e)) {
        /* the shard lives in another task: an RMA get, waited for in w_ready */
        int rc = eng_off_rp_fetch(e, b, bk->wbuf, sb, false);
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
    } else if (e->dp.size == 1 && e->off.mode == WHALE_OFFLOAD_PARAMS) {
        /* the shard lives in the host tier: fetched ahead by the mover */
        eng_move_post(e, &bk->wfetch, bk->wbuf, e->Wsh + bk->shard_off, sb * sizeof(float));
    } else if (e->dp.size == 1) {
        memcpy(bk->wbuf, e->Wsh + bk->shard_off, sb * sizeof(float));
    } else {
        /* with params offload the gather reads the host-tier shard directly
         * (remote tier: a host copy of it, fetched first) */
        const void *src = e->Wsh ? e->Wsh + bk->shard_off : NULL;
        int rc = eng_off_rparams(e) ? eng_off_rp_stage(e, b, sb, false, &src) : 0;
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
        rc = e->dp.iallgather(&e->dp, src, bk->wbuf, sb, &bk->wreq);
        if (rc)
            return rc;
        comm_started(e);
    }
    rebind_w(e, b, bk->wbuf);
    return 0;
}

static int w_ready(whale_engine *e, int b)
{
    if (e->cfg.zero_stage != 3)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    eng_move_wait(e, &bk->wfetch);
    int rc = eng_off_rp_wait(e, b); /* remote tier, DP 1: the get into wbuf / wbuf16 */
    int r2 = req_wait(e, &bk->wreq);
    rc = rc ? rc : r2;
    eng_off_rp_done(e, b); /* DP > 1: the gather has read the host copy */
    if (!rc && bk->wbuf16) {
        eng_lp_load(e, bk->wbuf, bk->wbuf16, bk->n);
        float *w16 = (float *)bk->wbuf16;
        scratch_free(e, WHALE_MEM_PARAM, &w16, bk->n / 2);
        bk->wbuf16 = NULL;
    }
    return rc;
}

static void w_release(whale_engine *e, int b)
{
    if (e->cfg.zero_stage != 3 && !eng_lp(e))
        return;
    struct eng_bucket *bk = &e->buckets[b];
    if (--bk->wref > 0)
        return;
    /* released before use (a failed step): a get into the buffers freed
     * here must have landed (a gather still in flight keeps its host copy:
     * offload_rparams.c reuses or frees it), and so must the local tier's
     * fetch the mover thread may still be copying into wbuf */
    eng_move_wait(e, &bk->wfetch);
    eng_off_rp_wait(e, b);
    if (!bk->wreq)
        eng_off_rp_done(e, b);
    if (bk->wbuf16) { /* released before use (a failed step) */
        float *w16 = (float *)bk->wbuf16;
        scratch_free(e, WHALE_MEM_PARAM, &w16, bk->n / 2);
        bk->wbuf16 = NULL;
    }
    scratch_free(e, WHALE_MEM_PARAM, &bk->wbuf, bk->n);
    rebind_w(e, b, NULL);
}

/* ---- gradient buckets ---------------------------------------------------------- */

/* ZeRO 2/3: a zeroed full-size gradient buffer while the bucket is in backward. */
static int g_acquire(whale_engine *e, int b)
{
    if (e->cfg.zero_stage < 2)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->gbuf)
        return 0;
    if (!(bk->gbuf = scratch_alloc(e, WHALE_MEM_GRAD, bk->n, true)))
        return WHALE_ENOMEM;
    rebind_g(e, b, bk->gbuf);
    return 0;
}

/* 16-bit gradient reduction for this engine? (DP backends that offer it) */
static bool g_reduce_16(const whale_engine *e)
{
    return eng_lp(e) && e->cfg.grad_reduce_16 && e->dp.size > 1 && e->dp.iallreduce16 &&
           e->dp.ireduce_scatter16;
}

/* Bucket b has all gradients of this micro-batch: reduce it. */
static int g_reduce(whale_engine *e, int b, bool first_micro, bool last_micro)
{
    struct eng_bucket *bk = &e->buckets[b];
    const int z = e->cfg.zero_stage;
    const size_t sb = bk->n / e->dp.size;
    int rc = 0;
    if (z < 2) {
        /* full gradients stay local until the last micro-batch (no_sync) */
        if (!last_micro || e->dp.size == 1)
            return 0;
        if (g_reduce_16(e)) {
            /* round the fp32 sum to 16 bits, reduce, widen back in g_finish */
            if (!(bk->g16 = (uint16_t *)scratch_alloc(e, WHALE_MEM_GRAD, bk->n / 2, false)))
                return WHALE_ENOMEM;
            eng_lp_store(e, bk->g16, e->G + bk->flat, bk->n);
            rc = e->dp.iallreduce16(&e->dp, bk->g16, bk->n, e->lp, &bk->greq);
        } else {
            rc = e->dp.iallreduce(&e->dp, e->G + bk->flat, bk->n, &bk->greq);
        }
        if (!rc) {
            comm_started(e);
            eng_phase(e, WHALE_ENGINE_COLLECTIVE);
        }
        return rc;
    }
    float *dst = e->Gsh + bk->shard_off;
    if (e->dp.size == 1) {
        if (first_micro)
            memcpy(dst, bk->gbuf, sb * sizeof(float));
        else if ((rc = whale_k_acc(e->bk, NULL, WHALE_FLOAT32, dst, bk->gbuf, (int64_t)sb)))
            return rc;
        scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
        return 0;
    }
    if (g_reduce_16(e)) {
        /* send: the whole bucket in 16 bits; receive: my block, after it */
        if (!(bk->g16 = (uint16_t *)scratch_alloc(e, WHALE_MEM_GRAD, (bk->n + sb) / 2, false)))
            return WHALE_ENOMEM;
        eng_lp_store(e, bk->g16, bk->gbuf, bk->n);
        if (!first_micro && !(bk->rs_tmp = scratch_alloc(e, WHALE_MEM_GRAD, sb, false)))
            return WHALE_ENOMEM;
        rc = e->dp.ireduce_scatter16(&e->dp, bk->g16, bk->g16 + bk->n, sb, e->lp, &bk->greq);
        if (!rc) {
            comm_started(e);
            eng_phase(e, WHALE_ENGINE_COLLECTIVE);
        }
        return rc;
    }
    if (!first_micro && !(bk->rs_tmp = scratch_alloc(e, WHALE_MEM_GRAD, sb, false)))
        return WHALE_ENOMEM;
    rc = e->dp.ireduce_scatter(&e->dp, bk->gbuf, first_micro ? dst : bk->rs_tmp, sb, &bk->greq);
    if (!rc) {
        comm_started(e);
        eng_phase(e, WHALE_ENGINE_COLLECTIVE);
    }
    return rc;
}

/* Finish bucket b's reduction (blocking). */
static int g_finish(whale_engine *e, int b)
{
    struct eng_bucket *bk = &e->buckets[b];
    int rc = req_wait(e, &bk->greq);
    const size_t sb = bk->n / e->dp.size;
    if (bk->g16) {
        if (e->cfg.zero_stage < 2) {
            eng_lp_load(e, e->G + bk->flat, bk->g16, bk->n);
            float *f = (float *)bk->g16;
            scratch_free(e, WHALE_MEM_GRAD, &f, bk->n / 2);
        } else {
            eng_lp_load(e, bk->rs_tmp ? bk->rs_tmp : e->Gsh + bk->shard_off, bk->g16 + bk->n, sb);
            float *f = (float *)bk->g16;
            scratch_free(e, WHALE_MEM_GRAD, &f, (bk->n + sb) / 2);
        }
        bk->g16 = NULL;
    }
    if (bk->rs_tmp) {
        int arc = whale_k_acc(e->bk, NULL, WHALE_FLOAT32, e->Gsh + bk->shard_off, bk->rs_tmp,
                              (int64_t)sb);
        if (arc)
            return arc;
        scratch_free(e, WHALE_MEM_GRAD, &bk->rs_tmp, sb);
    }
    if (e->cfg.zero_stage >= 2 && bk->gbuf) {
        scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
    }
    if (!rc && e->off.last_micro && !bk->tied_defer)
        eng_off_grad_ready(e, b);
    return rc;
}

/* Release buckets whose reduction completed (called between layers). */
static int g_poll(whale_engine *e)
{
    for (int b = 0; b < e->nb; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        if (!bk->greq)
            continue;
        bool done;
        int rc = req_poll(e, &bk->greq, &done);
        if (rc)
            return rc;
        if (done && (rc = g_finish(e, b)))
            return rc;
    }
    return 0;
}

/* ---- forward / backward of one chunk for one micro-batch ----------------------------- */

static size_t ncols(const whale_engine *e)
{
    return (size_t)e->d.Ns * e->d.C; /* B*T rows, or this rank's sequence shard (SP) */
}

/* Arguments of local layer i of chunk c working on slot s. */
static void io_init(whale_engine *e, struct eng_io *io, int c, struct eng_slot *s, int i,
                    const int32_t *in, const int32_t *tg)
{
    const struct eng_chunk *ch = &e->chunks[c];
    const struct eng_layer *l = &e->layers[i];
    const int k = i - ch->l0;
    memset(io, 0, sizeof *io);
    io->tokens = in;
    io->targets = tg;
    io->in = l->index > 0 ? s->bnd + (size_t)k * ncols(e) : NULL;
    io->out = l->ops == &eng_head_ops ? NULL : s->bnd + (size_t)(k + 1) * ncols(e);
    io->saved = l->rc == ENG_RC_FULL ? e->rc_saved
              : eng_lp(e) ? e->sv32 : s->saved + ch->saved_off[k];
    io->scratch = e->scratch;
    io->need_dinput = l->index > 0;
    io->tp_group = e->d.tp > 1 ? &e->grp.tp : NULL;
    io->att_tmp = e->att_tmp;
    io->mm = e->mm;
    io->moe = &e->moe;
}

static bool is_head(const struct eng_layer *l)
{
    return l->ops == &eng_head_ops;
}

/* The head reads the embedding's wte (tied embeddings): its bucket too */
static bool tied_head(const struct eng_layer *l)
{
    return is_head(l) && l->tied;
}

int eng_chunk_forward(whale_engine *e, int c, struct eng_slot *s, const int32_t *in,
                      const int32_t *tg, double *loss_sum, double *tc)
{
    const struct eng_chunk *ch = &e->chunks[c];
    eng_phase(e, WHALE_ENGINE_FORWARD);
    uint64_t tr0 = whale_trace_now();
    const int ahead = e->off.prefetch > 0 ? e->off.prefetch : 1;
    int pf = ch->l0; /* highest layer whose weights are acquired */
    int rc = w_acquire(e, e->layers[ch->l0].bucket);
    if (!rc && tied_head(&e->layers[ch->l0]))
        rc = w_acquire(e, e->layers[ch->l0].tied->bucket);
    for (int i = ch->l0; i < ch->l1 && !rc; i++) {
        struct eng_layer *l = &e->layers[i];
        int b = l->bucket;
        /* prefetch the weights `ahead` layers on (and the tied embedding for the head) */
        while (!rc && pf < ch->l1 - 1 && pf < i + ahead) {
            pf++;
            if (e->layers[pf].bucket != e->layers[pf - 1].bucket)
                rc = w_acquire(e, e->layers[pf].bucket);
            if (!rc && tied_head(&e->layers[pf]))
                rc = w_acquire(e, e->layers[pf].tied->bucket);
        }
        /* optimizer offload: this bucket's updated weights are back */
        eng_move_wait(e, &e->buckets[b].wup);
        if (tied_head(l))
            eng_move_wait(e, &e->buckets[l->tied->bucket].wup);
        if (rc || (rc = w_ready(e, b)))
            break;
        if (tied_head(l) && (rc = w_ready(e, l->tied->bucket)))
            break;
        struct eng_io io;
        io_init(e, &io, c, s, i, in, tg);
        double t0 = eng_now();
        rc = l->ops->forward(l, &io);
        if (!rc && eng_lp(e)) {
            /* what a 16-bit model keeps: its output and saved activations */
            if (io.out)
                eng_lp_round(e, io.out, ncols(e));
            if (l->rc != ENG_RC_FULL)
                eng_lp_store(e, s->saved16 + ch->saved_off[i - ch->l0], io.saved,
                             l->ops->act_floats(l));
        }
        *tc += eng_now() - t0;
        if (is_head(l))
            *loss_sum += io.loss_sum;
        if (i + 1 >= ch->l1 || e->layers[i + 1].bucket != b)
            w_release(e, b);
        if (tied_head(l))
            w_release(e, l->tied->bucket);
    }
    (void)tr0;
    return rc;
}

int eng_chunk_backward(whale_engine *e, int c, struct eng_slot *s, const int32_t *in,
                       const int32_t *tg, float dloss, bool first_micro, bool last_micro,
                       double *tc)
{
    const struct eng_chunk *ch = &e->chunks[c];
    int rc = 0;
    eng_phase(e, WHALE_ENGINE_BACKWARD);
    for (int b = ch->b0; b < ch->b1; b++)
        e->buckets[b].pending = e->buckets[b].l1 - e->buckets[b].l0;
    const int top = ch->l1 - 1;
    const int ahead = e->off.prefetch > 0 ? e->off.prefetch : 1;
    int pf = top; /* lowest layer whose weights are acquired */
    e->off.last_micro = last_micro;
    /* the embedding's backward needs no weights; the head needs wte too */
    if (e->layers[top].index > 0 && (rc = w_acquire(e, e->layers[top].bucket)))
        return rc;
    if (tied_head(&e->layers[top]) && (rc = w_acquire(e, e->layers[top].tied->bucket)))
        return rc;
    for (int i = top; i >= ch->l0 && !rc; i--) {
        struct eng_layer *l = &e->layers[i];
        int b = l->bucket;
        bool needs_w = l->index > 0;
        while (!rc && pf > ch->l0 && pf > i - ahead) {
            pf--;
            if (e->layers[pf].index > 0 && e->layers[pf].bucket != e->layers[pf + 1].bucket)
                rc = w_acquire(e, e->layers[pf].bucket);
        }
        if (rc || (needs_w && (rc = w_ready(e, b))))
            break;
        if (tied_head(l) && (rc = w_ready(e, l->tied->bucket)))
            break;
        if ((rc = g_acquire(e, b)) || (tied_head(l) && (rc = g_acquire(e, l->tied->bucket))))
            break;
        struct eng_io io;
        io_init(e, &io, c, s, i, in, tg);
        double t0 = eng_now();
        if (l->rc == ENG_RC_FULL) {
            /* recompute: the layer's saved area from its kept input */
            uint64_t r0 = whale_trace_now();
            io.out = e->rc_out;
            io.moe = NULL; /* counted by the first forward */
            rc = l->ops->forward(l, &io);
            /* the same 16-bit values the kept layers see */
            if (!rc && eng_lp(e))
                eng_lp_round(e, io.saved, l->ops->act_floats(l));
            e->t_recompute += eng_now() - t0;
            if (whale_trace_on())
                whale_trace_span("recompute", "recompute", r0, c, -1);
            if (rc)
                break;
        }
        if (eng_lp(e) && l->rc != ENG_RC_FULL)
            eng_lp_load(e, io.saved, s->saved16 + ch->saved_off[i - ch->l0],
                        l->ops->act_floats(l));
        io.dstream = s->dgrad;
        io.dloss = dloss;
        rc = l->ops->backward(l, &io);
        e->t_recompute += io.recompute_s; /* selective: the attention probabilities */
        /* the gradient a 16-bit model passes down (fp16 overflows here) */
        if (!rc && eng_lp(e) && io.need_dinput)
            eng_lp_round(e, s->dgrad, ncols(e));
        *tc += eng_now() - t0;
        if (rc)
            break;
        if (tied_head(l))
            w_release(e, l->tied->bucket);
        if (needs_w && (i == ch->l0 || e->layers[i - 1].index == 0 ||
                        e->layers[i - 1].bucket != b))
            w_release(e, b);
        if (--e->buckets[b].pending == 0 && e->cfg.overlap && !e->buckets[b].tied_defer) {
            rc = g_reduce(e, b, first_micro, last_micro);
            if (!rc && e->dp.size == 1 && last_micro)
                eng_off_grad_ready(e, b); /* nothing to reduce: final now */
        }
        if (!rc && e->dp.size > 1)
            rc = g_poll(e);
    }
    if (!rc && !e->cfg.overlap)
        for (int b = ch->b1 - 1; b >= ch->b0 && !rc; b--)
            if (!e->buckets[b].tied_defer)
                rc = g_reduce(e, b, first_micro, last_micro);
    for (int b = ch->b0; b < ch->b1; b++) {
        if (e->buckets[b].tied_defer)
            continue;
        int r2 = g_finish(e, b);
        rc = rc ? rc : r2;
    }
    return rc;
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
        if (z >= 2 && !bk->gbuf && (rc = g_acquire(e, b)))
            return rc;
        float *g = z < 2 ? e->G + wte->flat : bk->gbuf + (wte->flat - bk->flat);
        uint64_t t0 = whale_trace_now();
        if (e->grp.emb.size > 1)
            rc = e->grp.emb.allreduce(&e->grp.emb, g, wte->numel, WHALE_SUM);
        if (whale_trace_on())
            whale_trace_span("allreduce", "tied wte", t0, -1, -1);
        if (rc)
            return rc;
        const size_t sb = bk->n / e->dp.size;
        if (z < 2) {
            if (e->dp.size > 1) {
                rc = e->dp.iallreduce(&e->dp, e->G + bk->flat, bk->n, &bk->greq);
                if (!rc) {
                    comm_started(e);
                    rc = req_wait(e, &bk->greq);
                }
            }
        } else {
            float *dst = e->Gsh + bk->shard_off;
            if (e->dp.size == 1) {
                memcpy(dst, bk->gbuf, sb * sizeof(float));
            } else {
                rc = e->dp.ireduce_scatter(&e->dp, bk->gbuf, dst, sb, &bk->greq);
                if (!rc) {
                    comm_started(e);
                    rc = req_wait(e, &bk->greq);
                }
            }
            scratch_free(e, WHALE_MEM_GRAD, &bk->gbuf, bk->n);
            rebind_g(e, b, NULL);
        }
        if (!rc)
            eng_off_grad_ready(e, b);
    }
    return rc;
}

/* ---- optimizer on this rank's part ------------------------------------------------- */

/* Does this rank count parameter p in the global gradient norm? TP
 * replicas (LayerNorms, row-parallel biases) count on TP rank 0 only; the
 * last stage's wte copy never (its gradient equals the first stage's). */
static bool counts_in_norm(const whale_engine *e, const struct eng_layer *l,
                           const struct eng_param *p)
{
    if (l->chunk < 0)
        return false;
    return p->split != WHALE_SPLIT_NONE || e->d.tp_rank == 0;
}

/* Squared norm and inf/NaN check over this rank's gradient part: its 1/DP
 * of each bucket at every ZeRO stage (ZeRO 0: every rank holds the full
 * sum, so each element counts on one rank). */
static void grad_stats(whale_engine *e, double *sumsq, bool *bad)
{
    double s = 0;
    bool b = false;
    struct eng_pieces it;
    for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_SHARD); eng_pieces_next(&it);) {
        const float *g = eng_gptr(e, it.bk, it.lo, it.a);
        const int64_t n = (int64_t)(it.z - it.a);
        /* the backend's reductions: whale_sumsq / whale_has_inf_nan on cpu */
        double ss = 0;
        bool bad1 = false, summed = counts_in_norm(e, it.l, it.p);
        if (summed && whale_k_sumsq(e->bk, NULL, g, n, &ss))
            ss = NAN; /* a failed reduction must not look like a clean gradient */
        s += ss;
        /* A finite sum of squares (no cancellation: every term is >= 0)
         * means no element is inf or NaN: skip the second pass over
         * the gradient (about 1 % of a gpt2-124m step on CPU). */
        if (!b && !(summed && isfinite(ss)) && whale_k_has_inf_nan(e->bk, NULL, g, n, &bad1))
            bad1 = true;
        b = b || bad1;
    }
    *sumsq = s;
    *bad = b;
}

/* AdamW over every (param, range) this rank updates, in ONE backend call:
 * on cpu that is one parallel region over all tensors (optim/adamw_multi.c)
 * instead of one per parameter, on cuda one launch per 32 pieces. The
 * pieces are independent, so the bits are those of the per-piece calls. */
static int apply_adamw(whale_engine *e, float grad_mul)
{
    struct eng_pieces it;
    size_t cap = 1;
    for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_UPDATE); eng_pieces_next(&it);)
        cap++;
    struct whale_adamw_piece *pc = malloc(cap * sizeof *pc);
    if (!pc)
        return WHALE_ENOMEM;
    int np = 0;
    for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_UPDATE); eng_pieces_next(&it);) {
        size_t o = eng_mvoff(e, it.bk, it.lo, it.a);
        pc[np++] = (struct whale_adamw_piece){ .w = eng_wptr(e, it.bk, it.lo, it.a),
                                               .g = eng_gptr(e, it.bk, it.lo, it.a),
                                               .m = e->M + o, .v = e->V + o,
                                               .w16 = eng_w16ptr(e, it.bk, it.lo, it.a),
                                               .n = it.z - it.a, .decay = it.p->decay };
    }
    int rc = whale_k_adamw(e->bk, NULL, &e->adam, e->adam_t, grad_mul, pc, np,
                           eng_lp(e) ? e->lp : WHALE_BFLOAT16);
    free(pc);
    return rc;
}

/* ZeRO 1/2: every rank gets everybody's updated shard. */
static int allgather_weights(whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    if ((z != 1 && z != 2) || e->dp.size == 1)
        return 0;
    int rc = 0;
    void **reqs = calloc(e->nb > 0 ? (size_t)e->nb : 1, sizeof *reqs);
    if (!reqs)
        return WHALE_ENOMEM;
    for (int k = 0; k < e->nb && !rc; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t sb = bk->n / e->dp.size;
        if (eng_lp(e)) {
            /* the 16-bit params travel (as sb/2 fp32 words: a gather only copies) */
            uint16_t *own = (uint16_t *)e->agtmp + bk->shard_off;
            if (e->off.mode) /* offload: the mover brings the updated shard back */
                eng_move_wait(e, &bk->wup);
            memcpy(own, e->W16 + bk->flat + (size_t)e->dp.rank * sb, sb * sizeof(uint16_t));
            rc = e->dp.iallgather(&e->dp, (const float *)own, (float *)(e->W16 + bk->flat),
                                  sb / 2, &reqs[k]);
        } else {
            if (e->off.mode) /* offload: the mover put the updated shard there */
                eng_move_wait(e, &bk->wup);
            else
                memcpy(e->agtmp + bk->shard_off, e->W + bk->flat + (size_t)e->dp.rank * sb,
                       sb * sizeof(float));
            rc = e->dp.iallgather(&e->dp, e->agtmp + bk->shard_off, e->W + bk->flat, sb,
                                  &reqs[k]);
        }
        if (!rc)
            comm_started(e);
    }
    for (int k = 0; k < e->nb; k++) {
        int r2 = req_wait(e, &reqs[k]);
        rc = rc ? rc : r2;
    }
    free(reqs);
    return rc;
}

/* memset over the OpenMP pool in 4 MiB pieces: one thread clearing gpt2-124m's
 * 500 MB of gradients took ~1 % of a 2-thread step while the other idled. */
static void zero_floats(float *p, size_t n)
{
    enum { CH = 1 << 20 };
    long nch = (long)((n + CH - 1) / CH);
#pragma omp parallel for schedule(static) if (nch > 1)
    for (long c = 0; c < nch; c++) {
        size_t lo = (size_t)c * CH, len = n - lo < CH ? n - lo : CH;
        memset(p + lo, 0, len * sizeof(float));
    }
}

static void zero_grads(whale_engine *e)
{
    if (e->G)
        zero_floats(e->G, e->P);
    if (e->Gsh)
        zero_floats(e->Gsh, e->S);
}

/* Sum three scalars over the DP group. */
static int dp_sum3(whale_engine *e, double v[3])
{
    if (e->dp.size == 1)
        return 0;
    float f[3] = { (float)v[0], (float)v[1], (float)v[2] };
    void *req;
    int rc = e->dp.iallreduce(&e->dp, f, 3, &req);
    if (!rc) {
        comm_started(e);
        rc = req_wait(e, &req);
    }
    for (int i = 0; i < 3; i++)
        v[i] = f[i];
    return rc;
}

/* Sum three scalars over the TP and pipeline groups (after dp_sum3: the
 * whole world). */
static int mp_sum3(whale_engine *e, double v[3])
{
    struct whale_par_comm *g[2] = { &e->grp.tp, &e->grp.pp };
    for (int k = 0; k < 2; k++) {
        if (g[k]->size <= 1)
            continue;
        float f[3] = { (float)v[0], (float)v[1], (float)v[2] };
        int rc = g[k]->allreduce(g[k], f, 3, WHALE_SUM);
        if (rc)
            return rc;
        for (int i = 0; i < 3; i++)
            v[i] = f[i];
    }
    return 0;
}

static void poison_one_gradient(whale_engine *e)
{
    /* an element this rank updates, so the check below must see it */
    const struct eng_bucket *bk = &e->buckets[e->nb - 1];
    size_t lo, hi;
    eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
    float *g = eng_gptr(e, bk, lo, lo);
    g[0] = INFINITY;
}

/* Samples of one step over the DP group (the replicas' shares summed). */
static int64_t eng_global_batch(const whale_engine *e)
{
    return e->cfg.global_batch ? e->cfg.global_batch
                               : (int64_t)e->d.B * e->cfg.grad_accum * e->dp.size;
}

int whale_engine_step(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      struct whale_step_stats *st)
{
    const double t_start = eng_now();
    const int A = e->cfg.grad_accum;
    double tc = 0, loss_sum = 0;
    e->t_comm = e->t_wait = 0;
    int rc = 0;
    const double tokens_global = (double)e->d.T * eng_global_batch(e);
    const float dloss = (float)(e->scaler.scale / tokens_global);

    struct whale_pp_stats pst = { 0 };
    e->t_recompute = 0;
    memset(&e->moe, 0, sizeof e->moe);
    whale_arena_reset_peak(e->arena);
    if ((rc = eng_off_step_begin(e)) || (rc = eng_dev_tokens(e, &inputs, &targets)))
        return rc;
    rc = eng_pipe_step(e, inputs, targets, dloss, &loss_sum, &tc, &pst);
    if (!rc)
        rc = eng_grads_finish(e);
    if (rc) {
        whale_error("step %lld failed: %s", (long long)e->step + 1, whale_strerror(rc));
        return rc;
    }
    if (e->inject_overflow) { /* a host write: a host-access point (device.c) */
        if ((rc = eng_dev_host_access(e)))
            return rc;
        poison_one_gradient(e);
        e->inject_overflow = false;
    }

    double t0 = eng_now();
    uint64_t opt_t0 = whale_trace_now();
    double sumsq;
    bool bad;
    grad_stats(e, &sumsq, &bad);
    /* the loss counts once per DP replica: on its last stage's TP rank 0 */
    bool loss_here = e->last_stage && e->d.tp_rank == 0;
    double red[3] = { loss_here ? loss_sum : 0, sumsq, bad ? 1.0 : 0.0 };
    /* MoE auxiliary losses: every stage's, once per TP group (routing is
     * the same on every TP rank) */
    if (e->d.tp_rank == 0)
        red[0] += e->moe.loss_sum;
    if ((rc = dp_sum3(e, red)) || (rc = mp_sum3(e, red)))
        return rc;
    bad = red[2] != 0 || !isfinite(red[1]);
    const float scale_bw = e->scaler.scale; /* the scale backward ran with */
    double norm = sqrt(red[1]) / scale_bw;
    const float lr = whale_lr_at(&e->sched, e->step);
    e->adam.lr = lr;
    bool skip = whale_loss_scaler_update(&e->scaler, bad);
    eng_phase(e, WHALE_ENGINE_OPTIMIZER);
    if (!skip) {
        e->adam_t++;
        /* gradients hold scale x (true gradient): unscale and clip in one factor */
        float clip = whale_clip_coef(norm, e->cfg.grad_clip);
        if (e->off.mode)
            rc = eng_off_apply(e, clip / scale_bw);
        else
            rc = apply_adamw(e, clip / scale_bw);
        if (!rc)
            rc = allgather_weights(e);
    } else {
        whale_warn("step %lld: gradient overflow (inf/NaN), step skipped, loss scale now %g",
                   (long long)e->step + 1, (double)e->scaler.scale);
    }
    eng_off_grads_down(e); /* gradients read before zeroing */
    /* host-access point (device.c): the host zeroes the gradients, and what
     * runs between steps reads engine memory; stream-ordered cuda drains the
     * device here, a no-op elsewhere */
    int hrc = eng_dev_host_access(e);
    if (hrc && !rc)
        rc = hrc;
    zero_grads(e);
    tc += eng_now() - t0;
    if (whale_trace_on())
        whale_trace_span("optimizer", "optimizer", opt_t0, -1, -1);
    e->step++;
    e->samples += eng_global_batch(e);

    if (st) {
        memset(st, 0, sizeof *st);
        st->loss = red[0] / tokens_global;
        st->grad_norm = norm;
        st->lr = lr;
        st->skipped = skip;
        st->loss_scale = e->scaler.scale;
        st->t_total = eng_now() - t_start;
        st->t_compute = tc;
        st->t_comm = e->t_comm;
        st->t_wait = e->t_wait;
        st->overlap = e->t_comm > 0 ? 1.0 - e->t_wait / e->t_comm : 0;
        if (st->overlap < 0)
            st->overlap = 0;
        double fl = 0;
        for (int i = 0; i < e->nl; i++) {
            double f, b;
            if (e->layers[i].chunk < 0)
                continue;
            e->layers[i].ops->flops(&e->layers[i], &f, &b);
            fl += f + b;
        }
        st->flops = fl * A;
        st->t_pipe_wait = pst.t_wait;
        st->t_recompute = e->t_recompute;
        st->act_peak_bytes = e->act_peak;
        struct whale_arena_stats as;
        whale_arena_stats(e->arena, &as);
        st->arena_peak_bytes = as.peak;
        st->host_bytes = eng_off_host_bytes(e);
        st->t_offload = eng_off_take_busy(e, &st->offload_bytes) + e->off.t_rma;
        st->t_offload_wait = e->off.t_move_wait + e->off.t_rma;
        st->offload_hidden = st->t_offload > 0 ? 1.0 - st->t_offload_wait / st->t_offload : 0;
        if (st->offload_hidden < 0)
            st->offload_hidden = 0;
        st->moe = e->moe;
        if (e->moe.forwards > 0) { /* sums -> means per MoE block forward */
            st->moe.aux /= (double)e->moe.forwards;
            st->moe.zloss /= (double)e->moe.forwards;
            st->moe.imbalance /= (double)e->moe.forwards;
        }
    }
    return rc;
}

int whale_engine_eval(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      double *loss)
{
    double loss_sum = 0;
    int rc = eng_dev_tokens(e, &inputs, &targets);
    if (!rc)
        rc = eng_pipe_forward_only(e, inputs, targets, &loss_sum);
    if (rc)
        return rc;
    bool loss_here = e->last_stage && e->d.tp_rank == 0;
    double red[3] = { loss_here ? loss_sum : 0, 0, 0 };
    if ((rc = dp_sum3(e, red)) || (rc = mp_sum3(e, red)))
        return rc;
    *loss = red[0] / ((double)e->d.T * eng_global_batch(e));
    return 0;
}
