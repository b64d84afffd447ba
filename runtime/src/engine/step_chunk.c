/* Forward and backward of one model chunk for one micro-batch: layer by
 * layer, with the weights of the next buckets acquired ahead (prefetch),
 * 16-bit rounding of what a 16-bit model keeps, full recomputation, and
 * each gradient bucket handed to its reduction as backward finishes it. */
#include "step.h"

#include <string.h>

#include "whale/trace.h"

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

/* EP: the weights of a layer's expert bucket (gathered over the
 * expert-data-parallel group under ZeRO 3). Acquired with the layer's
 * dense weights, `ahead` layers before the layer runs, so that the gather
 * of the next MoE layer's expert shards overlaps this layer's compute as
 * the dense buckets' does; x_ready waits for them, x_release drops them
 * after the layer's pass. */
static int x_acquire(whale_engine *e, const struct eng_layer *l)
{
    return l->xbucket < 0 ? 0 : eng_w_acquire(e, l->xbucket);
}

static int x_ready(whale_engine *e, const struct eng_layer *l)
{
    if (l->xbucket < 0)
        return 0;
    eng_move_wait(e, &e->buckets[l->xbucket].wup);
    return eng_w_ready(e, l->xbucket);
}

static void x_release(whale_engine *e, const struct eng_layer *l)
{
    if (l->xbucket >= 0)
        eng_w_release(e, l->xbucket);
}

int eng_chunk_forward(whale_engine *e, int c, struct eng_slot *s, const int32_t *in,
                      const int32_t *tg, double *loss_sum, double *tc)
{
    const struct eng_chunk *ch = &e->chunks[c];
    eng_phase(e, WHALE_ENGINE_FORWARD);
    uint64_t tr0 = whale_trace_now();
    const int ahead = e->off.prefetch > 0 ? e->off.prefetch : 1;
    int pf = ch->l0; /* highest layer whose weights are acquired */
    int rc = eng_w_acquire(e, e->layers[ch->l0].bucket);
    if (!rc && tied_head(&e->layers[ch->l0]))
        rc = eng_w_acquire(e, e->layers[ch->l0].tied->bucket);
    if (!rc)
        rc = x_acquire(e, &e->layers[ch->l0]);
    for (int i = ch->l0; i < ch->l1 && !rc; i++) {
        struct eng_layer *l = &e->layers[i];
        int b = l->bucket;
        /* prefetch the weights `ahead` layers on (and the tied embedding for the head) */
        while (!rc && pf < ch->l1 - 1 && pf < i + ahead) {
            pf++;
            if (e->layers[pf].bucket != e->layers[pf - 1].bucket)
                rc = eng_w_acquire(e, e->layers[pf].bucket);
            if (!rc && tied_head(&e->layers[pf]))
                rc = eng_w_acquire(e, e->layers[pf].tied->bucket);
            if (!rc)
                rc = x_acquire(e, &e->layers[pf]);
        }
        /* optimizer offload: this bucket's updated weights are back */
        eng_move_wait(e, &e->buckets[b].wup);
        if (tied_head(l))
            eng_move_wait(e, &e->buckets[l->tied->bucket].wup);
        if (rc || (rc = eng_w_ready(e, b)))
            break;
        if (tied_head(l) && (rc = eng_w_ready(e, l->tied->bucket)))
            break;
        if ((rc = x_ready(e, l)))
            break;
        struct eng_io io;
        io_init(e, &io, c, s, i, in, tg);
        double t0 = eng_now();
        rc = l->ops->forward(l, &io);
        x_release(e, l);
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
            eng_w_release(e, b);
        if (tied_head(l))
            eng_w_release(e, l->tied->bucket);
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
    if (e->layers[top].index > 0 && (rc = eng_w_acquire(e, e->layers[top].bucket)))
        return rc;
    if (tied_head(&e->layers[top]) && (rc = eng_w_acquire(e, e->layers[top].tied->bucket)))
        return rc;
    if ((rc = x_acquire(e, &e->layers[top])))
        return rc;
    for (int i = top; i >= ch->l0 && !rc; i--) {
        struct eng_layer *l = &e->layers[i];
        int b = l->bucket;
        bool needs_w = l->index > 0;
        while (!rc && pf > ch->l0 && pf > i - ahead) {
            pf--;
            if (e->layers[pf].index > 0 && e->layers[pf].bucket != e->layers[pf + 1].bucket)
                rc = eng_w_acquire(e, e->layers[pf].bucket);
            if (!rc)
                rc = x_acquire(e, &e->layers[pf]);
        }
        if (rc || (needs_w && (rc = eng_w_ready(e, b))))
            break;
        if (tied_head(l) && (rc = eng_w_ready(e, l->tied->bucket)))
            break;
        if ((rc = eng_g_acquire(e, b)) || (tied_head(l) && (rc = eng_g_acquire(e, l->tied->bucket))))
            break;
        if (l->xbucket >= 0 && ((rc = x_ready(e, l)) || (rc = eng_g_acquire(e, l->xbucket))))
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
            eng_w_release(e, l->tied->bucket);
        if (needs_w && (i == ch->l0 || e->layers[i - 1].index == 0 ||
                        e->layers[i - 1].bucket != b))
            eng_w_release(e, b);
        x_release(e, l);
        /* the layer's expert bucket (EP) first: it is the later one in flat order */
        for (int k = 0; k < 2 && !rc; k++) {
            int rb = k == 0 ? l->xbucket : b;
            if (rb < 0)
                continue;
            if (--e->buckets[rb].pending == 0 && e->cfg.overlap && !e->buckets[rb].tied_defer) {
                rc = eng_g_reduce(e, rb, first_micro, last_micro);
                if (!rc && e->buckets[rb].comm->size == 1 && last_micro)
                    eng_off_grad_ready(e, rb); /* nothing to reduce: final now */
            }
        }
        if (!rc && e->dp.size > 1)
            rc = eng_g_poll(e);
    }
    if (!rc && !e->cfg.overlap)
        for (int b = ch->b1 - 1; b >= ch->b0 && !rc; b--)
            if (!e->buckets[b].tied_defer)
                rc = eng_g_reduce(e, b, first_micro, last_micro);
    for (int b = ch->b0; b < ch->b1; b++) {
        if (e->buckets[b].tied_defer)
            continue;
        int r2 = eng_g_finish(e, b);
        rc = rc ? rc : r2;
    }
    return rc;
}
