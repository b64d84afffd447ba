/* One training step, its parts in order: offload's re-arm; forward and
 * backward of every micro-batch on the pipeline's schedule (pipe.c ->
 * step_chunk.c; buckets reduced over DP while backward goes on:
 * step_grads.c); the global loss and gradient norm; loss scaling, clipping
 * and the update (step_optim.c, or offload_apply.c on the host tier); the
 * step's statistics. And evaluation's forward-only pass. */
#include "device.h"
#include "step.h"

#include <math.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/trace.h"

/* Sum three scalars over the DP group. */
static int dp_sum3(whale_engine *e, double v[3])
{
    if (e->dp.size == 1)
        return 0;
    float f[3] = { (float)v[0], (float)v[1], (float)v[2] };
    void *req;
    int rc = e->dp.iallreduce(&e->dp, f, 3, &req);
    if (!rc) {
        eng_comm_started(e);
        rc = eng_req_wait(e, &req);
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

/* The step's global loss sum, squared gradient norm and overflow flag:
 * this rank's parts summed over DP, then TP and PP. */
static int step_reduce(whale_engine *e, double loss_sum, double red[3])
{
    double sumsq;
    bool bad;
    eng_grad_stats(e, &sumsq, &bad);
    /* the loss counts once per DP replica: on its last stage's TP rank 0 */
    bool loss_here = e->last_stage && e->d.tp_rank == 0;
    red[0] = loss_here ? loss_sum : 0;
    red[1] = sumsq;
    red[2] = bad ? 1.0 : 0.0;
    /* MoE auxiliary losses: every stage's, once per TP group (routing is
     * the same on every TP rank) */
    if (e->d.tp_rank == 0)
        red[0] += e->moe.loss_sum;
    int rc = dp_sum3(e, red);
    return rc ? rc : mp_sum3(e, red);
}

/* Loss scaling, learning rate, clipping and the update of this rank's
 * range (host tier with offload), or the skip of an overflowed step. */
static int step_update(whale_engine *e, const double red[3], double *norm, float *lr, bool *skip)
{
    const bool bad = red[2] != 0 || !isfinite(red[1]);
    const float scale_bw = e->scaler.scale; /* the scale backward ran with */
    *norm = sqrt(red[1]) / scale_bw;
    *lr = whale_lr_at(&e->sched, e->step);
    e->adam.lr = *lr;
    *skip = whale_loss_scaler_update(&e->scaler, bad);
    eng_phase(e, WHALE_ENGINE_OPTIMIZER);
    if (*skip) {
        whale_warn("step %lld: gradient overflow (inf/NaN), step skipped, loss scale now %g",
                   (long long)e->step + 1, (double)e->scaler.scale);
        return 0;
    }
    e->adam_t++;
    /* gradients hold scale x (true gradient): unscale and clip in one factor */
    float clip = whale_clip_coef(*norm, e->cfg.grad_clip);
    int rc = e->off.mode ? eng_off_apply(e, clip / scale_bw) : eng_apply_adamw(e, clip / scale_bw);
    return rc ? rc : eng_allgather_weights(e);
}

/* Timings, memory and MoE routing of the step just done. */
static void step_stats(whale_engine *e, struct whale_step_stats *st, double t_start, double tc,
                       double t_pipe_wait)
{
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
    st->flops = fl * e->cfg.grad_accum;
    st->t_pipe_wait = t_pipe_wait;
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

/* Targets counted in the loss over the global batch: all of them, or with
 * loss_mask those >= 0, counted by the ranks that hold the loss and summed
 * over the world (as the loss itself), so every DP / micro-batch layout
 * divides by the same count. */
static int step_tokens(whale_engine *e, const int32_t *targets, double *tokens)
{
    *tokens = (double)e->d.T * eng_global_batch(e);
    if (!e->cfg.loss_mask)
        return 0;
    const size_t n = (size_t)e->d.B * e->d.T * e->cfg.grad_accum;
    double red[3] = { 0, 0, 0 };
    if (e->last_stage && e->d.tp_rank == 0)
        for (size_t i = 0; i < n; i++)
            red[0] += targets[i] >= 0;
    int rc = dp_sum3(e, red);
    if (!rc)
        rc = mp_sum3(e, red);
    /* a batch of prompts only: nothing counts, and the gradients are zero */
    *tokens = red[0] > 0 ? red[0] : 1;
    return rc;
}

int whale_engine_step(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      struct whale_step_stats *st)
{
    const double t_start = eng_now();
    double tc = 0, loss_sum = 0;
    e->t_comm = e->t_wait = 0;
    int rc = 0;
    double tokens_global;
    if ((rc = step_tokens(e, targets, &tokens_global)))
        return rc;
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
        /* the last step's weight gathers a failed forward did not reach
         * complete (or fail) before the caller reads or frees the weights */
        (void)eng_w_settle_all(e);
        whale_error("step %lld failed: %s", (long long)e->step + 1, whale_strerror(rc));
        return rc;
    }
    if (e->inject_overflow) { /* a host write: a host-access point (device.c) */
        if ((rc = eng_dev_host_access(e)))
            return rc;
        poison_one_gradient(e);
        e->inject_overflow = false;
    }

    uint64_t opt_t0 = whale_trace_now();
    double red[3], norm;
    float lr;
    bool skip;
    /* the scalars' reduction is a wait for the slowest rank, not compute:
     * left out of tc like the other collective waits (a fast replica would
     * otherwise carry a slow one's time and --dp-shares=auto see no gap) */
    if ((rc = step_reduce(e, loss_sum, red)))
        return rc;
    double t0 = eng_now(), w0 = e->t_wait;
    rc = step_update(e, red, &norm, &lr, &skip);
    eng_off_grads_down(e); /* gradients read before zeroing */
    /* host-access point (device.c): the host zeroes the gradients, and what
     * runs between steps reads engine memory; stream-ordered cuda drains the
     * device here, a no-op elsewhere */
    int hrc = eng_dev_host_access(e);
    if (hrc && !rc)
        rc = hrc;
    eng_zero_grads(e);
    tc += eng_now() - t0 - (e->t_wait - w0); /* less the weight gathers' waits */
    if (whale_trace_on())
        whale_trace_span("optimizer", "optimizer", opt_t0, -1, -1);
    e->step++;
    e->samples += eng_global_batch(e);

    if (st) {
        memset(st, 0, sizeof *st);
        st->loss = red[0] / tokens_global;
        st->loss_tokens = (int64_t)tokens_global;
        st->grad_norm = norm;
        st->lr = lr;
        st->skipped = skip;
        st->loss_scale = e->scaler.scale;
        step_stats(e, st, t_start, tc, pst.t_wait);
    }
    return rc;
}

int whale_engine_eval(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      double *loss)
{
    double loss_sum = 0, tokens;
    int rc = eng_w_settle_all(e); /* the weights the last step updated, all of them */
    if (!rc)
        rc = step_tokens(e, targets, &tokens);
    if (!rc)
        rc = eng_dev_tokens(e, &inputs, &targets);
    if (!rc)
        rc = eng_pipe_forward_only(e, inputs, targets, &loss_sum);
    if (rc)
        return rc;
    bool loss_here = e->last_stage && e->d.tp_rank == 0;
    double red[3] = { loss_here ? loss_sum : 0, 0, 0 };
    if ((rc = dp_sum3(e, red)) || (rc = mp_sum3(e, red)))
        return rc;
    *loss = red[0] / tokens;
    return 0;
}
