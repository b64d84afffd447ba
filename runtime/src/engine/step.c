/* One training step: forward and backward over the micro-batches, gradient
 * buckets reduced while backward continues, ZeRO gathers and partitions,
 * loss scaling, clipping and AdamW on this rank's shard. */
#include "engine_int.h"
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
    int rc = e->dp.wait(&e->dp, *req);
    e->t_wait += eng_now() - t0;
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

static float *scratch_alloc(whale_engine *e, size_t n, bool zero)
{
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(float) + 64))
        return NULL;
    if (zero)
        memset(p, 0, n * sizeof(float));
    e->scratch_now += (int64_t)n * 4;
    if (e->scratch_now > e->scratch_peak)
        e->scratch_peak = e->scratch_now;
    return p;
}

static void scratch_free(whale_engine *e, float **p, size_t n)
{
    if (*p) {
        free(*p);
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

/* Start gathering bucket b's weights (ZeRO 3) and take a reference. */
static int w_acquire(whale_engine *e, int b)
{
    if (e->cfg.zero_stage != 3)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->wref++ > 0)
        return 0;
    if (!(bk->wbuf = scratch_alloc(e, bk->n, false)))
        return WHALE_ENOMEM;
    size_t sb = bk->n / e->dp.size;
    if (e->dp.size == 1) {
        memcpy(bk->wbuf, e->Wsh + bk->shard_off, sb * sizeof(float));
    } else {
        int rc = e->dp.iallgather(&e->dp, e->Wsh + bk->shard_off, bk->wbuf, sb, &bk->wreq);
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
    return req_wait(e, &e->buckets[b].wreq);
}

static void w_release(whale_engine *e, int b)
{
    if (e->cfg.zero_stage != 3)
        return;
    struct eng_bucket *bk = &e->buckets[b];
    if (--bk->wref > 0)
        return;
    scratch_free(e, &bk->wbuf, bk->n);
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
    if (!(bk->gbuf = scratch_alloc(e, bk->n, true)))
        return WHALE_ENOMEM;
    rebind_g(e, b, bk->gbuf);
    return 0;
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
        rc = e->dp.iallreduce(&e->dp, e->G + bk->flat, bk->n, &bk->greq);
        if (!rc)
            comm_started(e);
        bk->g_t0 = eng_now();
        return rc;
    }
    float *dst = e->Gsh + bk->shard_off;
    if (e->dp.size == 1) {
        if (first_micro)
            memcpy(dst, bk->gbuf, sb * sizeof(float));
        else
            k_acc(dst, bk->gbuf, (int64_t)sb);
        scratch_free(e, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
        return 0;
    }
    if (!first_micro && !(bk->rs_tmp = scratch_alloc(e, sb, false)))
        return WHALE_ENOMEM;
    rc = e->dp.ireduce_scatter(&e->dp, bk->gbuf, first_micro ? dst : bk->rs_tmp, sb, &bk->greq);
    if (!rc)
        comm_started(e);
    bk->g_t0 = eng_now();
    return rc;
}

/* Finish bucket b's reduction (blocking). */
static int g_finish(whale_engine *e, int b)
{
    struct eng_bucket *bk = &e->buckets[b];
    bool had = bk->greq != NULL;
    int rc = req_wait(e, &bk->greq);
    if (had || bk->g_t0 > 0)
        eng_trace_span(&e->trace, e->cfg.zero_stage >= 2 ? "dp reduce-scatter" : "dp allreduce",
                       "comm", b, bk->g_t0, eng_now());
    bk->g_t0 = 0;
    const size_t sb = bk->n / e->dp.size;
    if (bk->rs_tmp) {
        k_acc(e->Gsh + bk->shard_off, bk->rs_tmp, (int64_t)sb);
        scratch_free(e, &bk->rs_tmp, sb);
    }
    if (e->cfg.zero_stage >= 2 && bk->gbuf) {
        scratch_free(e, &bk->gbuf, bk->n);
        rebind_g(e, b, NULL);
    }
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

/* ---- forward / backward of one micro-batch ----------------------------------------- */

/* Output of local layer i for micro-batch slot `slot`. */
static float *boundary(whale_engine *e, int slot, int i)
{
    size_t nc = (size_t)e->d.B * e->d.T * e->d.C;
    return e->xb + ((size_t)slot * e->nbnd + i) * nc;
}

static float *saved_of(whale_engine *e, int slot, int i)
{
    if (e->layers[i].recompute) /* one shared area after all slots */
        return e->saved + (size_t)e->nslots * e->saved_per_slot;
    return e->saved + (size_t)slot * e->saved_per_slot + e->saved_off[i];
}

static void io_init(whale_engine *e, struct eng_io *io, int slot, int i, const int32_t *in,
                    const int32_t *tg)
{
    memset(io, 0, sizeof *io);
    io->tokens = in;
    io->targets = tg;
    if (i > 0)
        io->in = boundary(e, slot, i - 1);
    else if (!e->has_embed) /* received from the previous stage */
        io->in = e->xin + (size_t)slot * e->d.B * e->d.T * e->d.C;
    io->out = i < e->nbnd ? boundary(e, slot, i) : NULL;
    io->saved = saved_of(e, slot, i);
    io->scratch = e->scratch;
    io->need_dinput = i > 0 || !e->has_embed;
    io->tp_group = e->tp_group;
}

/* Pipeline point-to-point: one tag per micro-batch and direction, so a
 * receive can only match its own micro-batch even with several in flight
 * (steps are separated by the step's collective). */
static int p2p_tag(int mb, bool grad)
{
    return 0x40000000 | (mb << 1) | (grad ? 1 : 0);
}

static int p2p_wait(whale_engine *e, whale_req **r)
{
    if (!*r)
        return 0;
    double t0 = eng_now();
    int rc = whale_wait(*r);
    e->t_wait += eng_now() - t0;
    eng_trace_span(&e->trace, "send wait", "p2p", -1, t0, eng_now());
    *r = NULL;
    return rc;
}

static int p2p_recv(whale_engine *e, float *buf, int peer, int tag)
{
    double t0 = eng_now();
    int rc = whale_recv(e->pp_group, buf, (size_t)e->d.B * e->d.T * e->d.C, WHALE_FLOAT32, peer,
                        tag);
    e->t_wait += eng_now() - t0;
    eng_trace_span(&e->trace, tag & 1 ? "recv grad" : "recv act", "p2p", (tag & 0xffff) >> 1, t0,
                   eng_now());
    if (rc)
        whale_error("pipeline: receive from stage %d failed: %s", peer, whale_strerror(rc));
    return rc;
}

static int forward(whale_engine *e, int mb, int slot, const int32_t *in, const int32_t *tg,
                   double *loss_sum, double *tc)
{
    const int last = e->nl - 1;
    const int tb = e->tied_bucket; /* bucket of the wte the head reads, or -1 */
    int rc = 0;
    if (!e->has_embed &&
        (rc = p2p_recv(e, e->xin + (size_t)slot * e->d.B * e->d.T * e->d.C, e->pp_rank - 1, p2p_tag(mb, false))))
        return rc;
    if (!e->has_head && (rc = p2p_wait(e, &e->fsend[slot]))) /* slot's last send is done */
        return rc;
    rc = w_acquire(e, e->layers[0].bucket);
    for (int i = 0; i < e->nl && !rc; i++) {
        int b = e->layers[i].bucket;
        bool head = e->has_head && i == last;
        /* prefetch the next layer's weights (and the tied embedding for the head) */
        if (i + 1 < e->nl && e->layers[i + 1].bucket != b)
            rc = w_acquire(e, e->layers[i + 1].bucket);
        if (!rc && e->has_head && i + 1 == last && tb >= 0)
            rc = w_acquire(e, tb);
        if (rc || (rc = w_ready(e, b)))
            break;
        if (head && tb >= 0 && (rc = w_ready(e, tb)))
            break;
        struct eng_io io;
        io_init(e, &io, slot, i, in, tg);
        double t0 = eng_now();
        rc = e->layers[i].ops->forward(&e->layers[i], &io);
        *tc += eng_now() - t0;
        if (head)
            *loss_sum += io.loss_sum;
        if (i + 1 >= e->nl || e->layers[i + 1].bucket != b)
            w_release(e, b);
        if (head && tb >= 0)
            w_release(e, tb);
    }
    if (!rc && !e->has_head)
        rc = whale_isend(e->pp_group, boundary(e, slot, e->nl - 1),
                         (size_t)e->d.B * e->d.T * e->d.C, WHALE_FLOAT32, e->pp_rank + 1, p2p_tag(mb, false),
                         &e->fsend[slot]);
    return rc;
}

static int backward(whale_engine *e, int mb, int slot, const int32_t *in, const int32_t *tg,
                    float dloss, bool first_micro, bool last_micro, double *tc)
{
    const int last = e->nl - 1;
    const int tb = e->tied_bucket;
    int rc = 0;
    /* dstream is reused: the previous gradient sent backward must be out */
    if ((rc = p2p_wait(e, &e->bsend)))
        return rc;
    if (!e->has_head && (rc = p2p_recv(e, e->dstream, e->pp_rank + 1, p2p_tag(mb, true))))
        return rc;
    for (int b = 0; b < e->nb; b++)
        e->buckets[b].pending = e->buckets[b].l1 - e->buckets[b].l0;
    if ((rc = w_acquire(e, e->layers[last].bucket)) || (tb >= 0 && (rc = w_acquire(e, tb))))
        return rc;
    for (int i = last; i >= 0 && !rc; i--) {
        struct eng_layer *l = &e->layers[i];
        int b = l->bucket;
        bool head = e->has_head && i == last;
        bool embed = e->has_embed && i == 0; /* needs no weights in backward */
        if (i - 1 >= 0 && !(e->has_embed && i - 1 == 0) && e->layers[i - 1].bucket != b)
            rc = w_acquire(e, e->layers[i - 1].bucket);
        if (rc || (!embed && (rc = w_ready(e, b))))
            break;
        if (head && tb >= 0 && (rc = w_ready(e, tb)))
            break;
        if ((rc = g_acquire(e, b)) || (head && tb >= 0 && (rc = g_acquire(e, tb))))
            break;
        struct eng_io io;
        io_init(e, &io, slot, i, in, tg);
        double t0 = eng_now();
        if (l->recompute && (rc = l->ops->forward(l, &io))) /* rebuild what was dropped */
            break;
        io.dstream = e->dstream;
        io.dloss = dloss;
        rc = l->ops->backward(l, &io);
        *tc += eng_now() - t0;
        if (rc)
            break;
        if (head && tb >= 0)
            w_release(e, tb);
        if (!embed && (i == 0 || (e->has_embed && i - 1 == 0) || e->layers[i - 1].bucket != b))
            w_release(e, b);
        if (--e->buckets[b].pending == 0 && e->cfg.overlap && !e->buckets[b].deferred)
            rc = g_reduce(e, b, first_micro, last_micro);
        if (!rc && e->dp.size > 1)
            rc = g_poll(e);
    }
    if (!rc && !e->cfg.overlap)
        for (int b = e->nb - 1; b >= 0 && !rc; b--)
            if (!e->buckets[b].deferred)
                rc = g_reduce(e, b, first_micro, last_micro);
    for (int b = 0; b < e->nb; b++) {
        int r2 = g_finish(e, b);
        rc = rc ? rc : r2;
    }
    if (!rc && !e->has_embed)
        rc = whale_isend(e->pp_group, e->dstream, (size_t)e->d.B * e->d.T * e->d.C, WHALE_FLOAT32,
                         e->pp_rank - 1, p2p_tag(mb, true), &e->bsend);
    return rc;
}

/* With pipeline stages the first and last stage both hold wte: after the
 * pipeline is flushed their gradients are summed (so both copies take the
 * same update), then the buckets holding wte are reduced over DP. */
static int tied_sync(whale_engine *e, bool last_micro)
{
    int rc = 0;
    if (e->emb_group && e->tied_param) {
        const struct eng_param *p = e->tied_param;
        double t0 = eng_now();
        rc = whale_allreduce(e->emb_group, e->G + p->flat, e->G + p->flat, p->numel,
                             WHALE_FLOAT32, WHALE_SUM);
        e->t_wait += eng_now() - t0;
        if (rc)
            return rc;
    }
    for (int b = 0; b < e->nb && !rc; b++)
        if (e->buckets[b].deferred)
            rc = g_reduce(e, b, false, last_micro);
    for (int b = 0; b < e->nb; b++) {
        int r2 = g_finish(e, b);
        rc = rc ? rc : r2;
    }
    return rc;
}

/* All micro-batches of one step: plain accumulation, or 1F1B across stages
 * (warm-up forwards, then one forward / one backward, then cool-down). */
static int run_micro_batches(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                             float dloss, double *loss_sum, double *tc)
{
    const size_t bt = (size_t)e->d.B * e->d.T;
    const int M = e->cfg.grad_accum;
    int rc = 0;
    int warm = e->pp - e->pp_rank - 1;
    if (warm > M)
        warm = M;
    int f = 0, b = 0;
    double t0;
#define FWD() (t0 = eng_now(), \
               rc = forward(e, f, f % e->nslots, inputs + f * bt, targets + f * bt, loss_sum, tc), \
               eng_trace_span(&e->trace, "forward", "compute", f, t0, eng_now()), f++)
#define BWD() (t0 = eng_now(), \
               rc = backward(e, b, b % e->nslots, inputs + b * bt, targets + b * bt, dloss, b == 0, \
                             b == M - 1, tc), \
               eng_trace_span(&e->trace, "backward", "compute", b, t0, eng_now()), b++)
    while (!rc && f < warm)
        FWD();
    while (!rc && f < M) {
        FWD();
        if (!rc)
            BWD();
    }
    while (!rc && b < M)
        BWD();
#undef FWD
#undef BWD
    for (int s = 0; s < e->nslots && !rc; s++)
        rc = p2p_wait(e, &e->fsend[s]);
    if (!rc)
        rc = p2p_wait(e, &e->bsend);
    if (!rc && e->pp > 1) {
        t0 = eng_now();
        rc = tied_sync(e, true);
        eng_trace_span(&e->trace, "tied wte sync + dp reduce", "comm", -1, t0, eng_now());
    }
    return rc;
}

/* ---- optimizer on this rank's part ------------------------------------------------- */

/* Calls fn for each (param, flat range [a, z)) this rank updates. */
struct upd_ctx {
    whale_engine *e;
    float grad_mul;
    double sumsq;
    bool bad;
};

static void shard_range(const whale_engine *e, const struct eng_bucket *bk, size_t *lo,
                        size_t *hi)
{
    if (e->cfg.zero_stage == 0 || e->dp.size == 1) {
        *lo = bk->flat;
        *hi = bk->flat + bk->n;
    } else {
        size_t sb = bk->n / e->dp.size;
        *lo = bk->flat + (size_t)e->dp.rank * sb;
        *hi = *lo + sb;
    }
}

/* Pointers to this rank's gradient / weight / moments for flat index a. */
static float *gptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    return e->cfg.zero_stage < 2 ? e->G + a : e->Gsh + bk->shard_off + (a - lo);
}
static float *wptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    return e->cfg.zero_stage < 3 ? e->W + a : e->Wsh + bk->shard_off + (a - lo);
}
static size_t mvoff(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    return e->cfg.zero_stage == 0 ? a : bk->shard_off + (a - lo);
}

/* Squared norm and inf/NaN check over this rank's gradient part. Every
 * element is counted once over the whole job: a replicated parameter
 * (LayerNorm, row-parallel bias, wpe) on TP rank 0 only, the last stage's
 * copy of the tied wte not at all, and without ZeRO each DP rank its slice. */
static bool counted(const whale_engine *e, const struct eng_param *p)
{
    return !p->tied_copy && (p->split != WHALE_SPLIT_NONE || e->d.tp_rank == 0);
}

static void grad_stats(whale_engine *e, double *sumsq, bool *bad)
{
    double s = 0;
    bool b = false;
    for (int k = 0; k < e->nb; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t lo, hi;
        shard_range(e, bk, &lo, &hi);
        if (e->cfg.zero_stage == 0 && e->dp.size > 1) {
            /* every rank holds the full sum: count each element once */
            size_t sb = bk->n / e->dp.size;
            lo = bk->flat + (size_t)e->dp.rank * sb;
            hi = lo + sb;
        }
        b = b || whale_has_inf_nan(gptr(e, bk, lo, lo), hi - lo);
        for (int li = bk->l0; li < bk->l1; li++) {
            const struct eng_layer *l = &e->layers[li];
            for (int pi = 0; pi < l->nparams; pi++) {
                const struct eng_param *p = &l->params[pi];
                size_t a = p->flat > lo ? p->flat : lo;
                size_t z = p->flat + p->numel < hi ? p->flat + p->numel : hi;
                if (a < z && counted(e, p))
                    s += whale_sumsq(gptr(e, bk, lo, a), z - a);
            }
        }
    }
    *sumsq = s;
    *bad = b;
}

static void apply_adamw(whale_engine *e, float grad_mul)
{
    for (int k = 0; k < e->nb; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t lo, hi;
        shard_range(e, bk, &lo, &hi);
        for (int li = bk->l0; li < bk->l1; li++) {
            struct eng_layer *l = &e->layers[li];
            for (int pi = 0; pi < l->nparams; pi++) {
                const struct eng_param *p = &l->params[pi];
                size_t a = p->flat > lo ? p->flat : lo;
                size_t z = p->flat + p->numel < hi ? p->flat + p->numel : hi;
                if (a >= z)
                    continue;
                size_t o = mvoff(e, bk, lo, a);
                whale_adamw_update(&e->adam, e->adam_t, wptr(e, bk, lo, a), gptr(e, bk, lo, a),
                                   e->M + o, e->V + o, z - a, grad_mul, p->decay);
            }
        }
    }
}

/* ZeRO 1/2: every rank gets everybody's updated shard. */
static int allgather_weights(whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    if ((z != 1 && z != 2) || e->dp.size == 1)
        return 0;
    int rc = 0;
    void **reqs = calloc(e->nb, sizeof *reqs);
    if (!reqs)
        return WHALE_ENOMEM;
    for (int k = 0; k < e->nb && !rc; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t sb = bk->n / e->dp.size;
        memcpy(e->agtmp + bk->shard_off, e->W + bk->flat + (size_t)e->dp.rank * sb,
               sb * sizeof(float));
        rc = e->dp.iallgather(&e->dp, e->agtmp + bk->shard_off, e->W + bk->flat, sb, &reqs[k]);
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

static void zero_grads(whale_engine *e)
{
    if (e->G)
        memset(e->G, 0, e->P * sizeof(float));
    if (e->Gsh)
        memset(e->Gsh, 0, e->S * sizeof(float));
}

/* Sum three scalars over the DP group (the in-process test backend). */
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

/* Loss sum, squared gradient norm and overflow flag summed over the whole
 * job: the loss counted once per DP replica (last stage, TP rank 0). */
static int step_reduce(whale_engine *e, double v[3])
{
    if (!e->world_group)
        return dp_sum3(e, v);
    float f[3] = { e->has_head && e->d.tp_rank == 0 ? (float)v[0] : 0.0f, (float)v[1],
                   (float)v[2] };
    double t0 = eng_now();
    int rc = whale_allreduce(e->world_group, f, f, 3, WHALE_FLOAT32, WHALE_SUM);
    e->t_wait += eng_now() - t0;
    for (int i = 0; i < 3; i++)
        v[i] = f[i];
    return rc;
}

static void poison_one_gradient(whale_engine *e)
{
    /* an element this rank updates, so the check below must see it */
    const struct eng_bucket *bk = &e->buckets[e->nb - 1];
    size_t lo, hi;
    shard_range(e, bk, &lo, &hi);
    float *g = gptr(e, bk, e->cfg.zero_stage < 2 ? 0 : lo, lo);
    g[0] = INFINITY;
}

int whale_engine_step(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      struct whale_step_stats *st)
{
    const double t_start = eng_now();
    const size_t bt = (size_t)e->d.B * e->d.T;
    const int A = e->cfg.grad_accum;
    double tc = 0, loss_sum = 0;
    e->t_comm = e->t_wait = 0;
    int rc = 0;
    const double tokens_global = (double)bt * A * e->dp.size;
    const float dloss = (float)(e->scaler.scale / tokens_global);

    rc = run_micro_batches(e, inputs, targets, dloss, &loss_sum, &tc);
    if (rc) {
        whale_error("step %lld failed: %s", (long long)e->step + 1, whale_strerror(rc));
        return rc;
    }
    if (e->inject_overflow) {
        poison_one_gradient(e);
        e->inject_overflow = false;
    }

    double t0 = eng_now();
    double sumsq;
    bool bad;
    grad_stats(e, &sumsq, &bad);
    double t_red = eng_now();
    double red[3] = { loss_sum, sumsq, bad ? 1.0 : 0.0 };
    if ((rc = step_reduce(e, red)))
        return rc;
    eng_trace_span(&e->trace, "loss/norm allreduce", "comm", -1, t_red, eng_now());
    bad = red[2] != 0 || !isfinite(red[1]);
    const float scale_bw = e->scaler.scale; /* the scale backward ran with */
    double norm = sqrt(red[1]) / scale_bw;
    const float lr = whale_lr_at(&e->sched, e->step);
    e->adam.lr = lr;
    bool skip = whale_loss_scaler_update(&e->scaler, bad);
    if (!skip) {
        e->adam_t++;
        /* gradients hold scale x (true gradient): unscale and clip in one factor */
        float clip = whale_clip_coef(norm, e->cfg.grad_clip);
        apply_adamw(e, clip / scale_bw);
        rc = allgather_weights(e);
    } else {
        whale_warn("step %lld: gradient overflow (inf/NaN), step skipped, loss scale now %g",
                   (long long)e->step + 1, (double)e->scaler.scale);
    }
    zero_grads(e);
    eng_trace_span(&e->trace, "optimizer", "compute", -1, t_red, eng_now());
    tc += eng_now() - t0;
    e->step++;
    e->samples += (int64_t)e->d.B * A * e->dp.size;

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
            e->layers[i].ops->flops(&e->layers[i], &f, &b);
            fl += f + b;
        }
        st->flops = fl * A;
    }
    return rc;
}

int whale_engine_eval(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      double *loss)
{
    const size_t bt = (size_t)e->d.B * e->d.T;
    double tc = 0, loss_sum = 0;
    int rc = 0;
    for (int mb = 0; mb < e->cfg.grad_accum && !rc; mb++)
        rc = forward(e, mb, mb % e->nslots, inputs + mb * bt, targets + mb * bt, &loss_sum, &tc);
    for (int s = 0; s < e->nslots && !rc; s++)
        rc = p2p_wait(e, &e->fsend[s]);
    if (rc)
        return rc;
    double red[3] = { loss_sum, 0, 0 };
    if ((rc = step_reduce(e, red)))
        return rc;
    *loss = red[0] / ((double)bt * e->cfg.grad_accum * e->dp.size);
    return 0;
}
