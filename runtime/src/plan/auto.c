/* From a search result to the runtime's plan (whale/planfile.h), and the
 * single entry point the SPANK plugin calls for --whale-plan=auto. */
#include "plan_internal.h"
#include "whale/error.h"
#include "whale/log.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *prediction_json(const struct whale_cluster *c, const struct whale_plan_candidate *cd)
{
    const struct whale_plan_prediction *p = &cd->pred;
    char cl[320];
    whale_cluster_describe(c, cl, sizeof cl);
    json_t *o = json_object();
    json_t *mem = json_object(), *t = json_object();
    if (!o || !mem || !t) {
        json_decref(o);
        json_decref(mem);
        json_decref(t);
        return NULL;
    }
    json_object_set_new(o, "planner", json_string("whale-plan " "1"));
    json_object_set_new(o, "cluster", json_string(cl));
    json_object_set_new(o, "step_seconds", json_real(p->t_step));
    /* labelled rates: hardware FLOPs count recomputation (HFU), model
     * FLOPs do not (MFU); "tflops_per_gpu" is the hardware figure, kept
     * under its wave-1 name for readers of older plans */
    json_object_set_new(o, "tflops_per_gpu", json_real(p->tflops_per_gpu));
    json_object_set_new(o, "hardware_tflops_per_gpu", json_real(p->tflops_per_gpu));
    json_object_set_new(o, "model_tflops_per_gpu", json_real(p->model_tflops_per_gpu));
    json_object_set_new(o, "mfu", json_real(p->mfu));
    json_object_set_new(o, "hfu", json_real(p->hfu));
    json_object_set_new(o, "tokens_per_second", json_real(p->tokens_per_s));
    json_object_set_new(o, "fits", json_boolean(p->fits));
    if (cd->cfg.recompute == WHALE_RECOMPUTE_AUTO) {
        json_object_set_new(o, "recompute_full_layers", json_integer(cd->cfg.rc_full));
        json_object_set_new(o, "recompute_selective_layers", json_integer(cd->cfg.rc_selective));
    }
    json_object_set_new(mem, "stage", json_integer(p->worst_stage));
    json_object_set_new(mem, "weights", json_real(p->mem_weights));
    json_object_set_new(mem, "gradients", json_real(p->mem_grads));
    json_object_set_new(mem, "optimizer", json_real(p->mem_optim));
    json_object_set_new(mem, "activations", json_real(p->mem_act));
    json_object_set_new(mem, "buffers", json_real(p->mem_buffers));
    json_object_set_new(mem, "runtime", json_real(p->mem_overhead));
    json_object_set_new(mem, "total", json_real(p->mem_total));
    json_object_set_new(mem, "capacity", json_real(p->mem_capacity));
    json_object_set_new(o, "memory_bytes", mem);
    json_object_set_new(t, "compute", json_real(p->t_compute));
    json_object_set_new(t, "recompute", json_real(p->t_recompute));
    json_object_set_new(t, "bubble", json_real(p->t_bubble));
    json_object_set_new(t, "tp_comm", json_real(p->t_tp));
    if (p->t_ep > 0)
        json_object_set_new(t, "ep_comm", json_real(p->t_ep));
    json_object_set_new(t, "pp_comm", json_real(p->t_pp));
    json_object_set_new(t, "dp_comm", json_real(p->t_dp));
    json_object_set_new(t, "optimizer", json_real(p->t_optim));
    json_object_set_new(t, "offload", json_real(p->t_offload));
    json_object_set_new(o, "time_seconds", t);
    /* how sure: the spread of the held-out errors on published runs of
     * this kind (range.c), as fractions and as the rate and step time it
     * gives; absent for CPU and mixed clusters (no published runs) */
    char kind[32];
    double lo, hi;
    json_t *r;
    if (!whale_plan_kind(c, &cd->cfg, kind, sizeof kind) && !whale_plan_range(c, &cd->cfg, &lo, &hi) &&
        (r = json_object())) {
        json_object_set_new(r, "kind", json_string(kind));
        json_object_set_new(r, "low", json_real(lo));
        json_object_set_new(r, "high", json_real(hi));
        json_object_set_new(r, "model_tflops_per_gpu",
                            json_pack("[f,f]", p->model_tflops_per_gpu * (1 + lo), p->model_tflops_per_gpu * (1 + hi)));
        json_object_set_new(r, "step_seconds", json_pack("[f,f]", p->t_step / (1 + hi), p->t_step / (1 + lo)));
        json_object_set_new(o, "range", r);
    }
    return o;
}

int whale_plan_to_planfile(const struct whale_model_desc *model, long global_batch,
                           const struct whale_cluster *c, const struct whale_plan_candidate *cand,
                           struct whale_plan *out)
{
    const struct whale_plan_config *g = &cand->cfg;
    whale_plan_init(out);
    snprintf(out->model, sizeof out->model, "%s", model->name);
    out->tp = g->tp;
    out->pp = g->pp;
    out->dp = g->dp;
    out->ep = whale_grid_ep(&g->grid);
    out->micro_batch = g->microbatch;
    out->num_micro_batches = g->nmicro;
    out->global_batch = (int)global_batch;
    out->interleave = g->interleave;
    out->schedule = g->interleave > 1 ? WHALE_SCHED_INTERLEAVED : WHALE_SCHED_1F1B;
    out->sequence_parallel = g->seqpar && g->tp > 1;
    out->zero = g->zero;
    out->recompute = (enum whale_recompute)g->recompute;
    out->offload = (enum whale_offload)g->offload;
    /* the precision the prediction assumed (the model's Precision=, else
     * fp32 on CPU ranks and bf16 on GPUs) */
    (void)c;
    out->precision = (enum whale_precision)g->precision;
    if (!g->uneven && g->interleave > 1 && model->layers % (g->pp * g->interleave)) {
        /* uneven interleaving: spell out the chunk sizes the prediction
         * assumed (entry k * pp + s is chunk k of rank s) */
        int n = g->pp * g->interleave;
        out->stage_layers = calloc((size_t)n, sizeof(int));
        if (!out->stage_layers)
            goto nomem;
        out->n_stage_layers = n;
        plan_split_even(model->layers, n, out->stage_layers);
    }
    if (g->uneven) {
        /* stage_layers has one entry per virtual stage (pp * v), in chunk
         * order chunk-major: chunk k of rank s is entry k * pp + s */
        int v = g->interleave, n = g->pp * v;
        out->stage_layers = calloc((size_t)n, sizeof(int));
        if (!out->stage_layers)
            goto nomem;
        out->n_stage_layers = n;
        for (int s = 0; s < g->pp; s++)
            for (int k = 0; k < v; k++)
                out->stage_layers[k * g->pp + s] = g->stage_layers[s] / v + (k < g->stage_layers[s] % v);
        if (g->dp <= WHALE_PLAN_MAX_STAGES && g->replica_micro[0] > 0) {
            out->dp_batch = calloc((size_t)g->dp, sizeof(int));
            if (!out->dp_batch)
                goto nomem;
            out->n_dp_batch = g->dp;
            for (int r = 0; r < g->dp; r++)
                out->dp_batch[r] = g->replica_micro[r] * g->microbatch;
        }
    }
    json_t *pj = prediction_json(c, cand);
    if (!pj)
        goto nomem;
    out->prediction_json = json_dumps(pj, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(pj);
    if (!out->prediction_json)
        goto nomem;
    return 0;
nomem:
    whale_plan_free(out);
    return WHALE_ENOMEM;
}

int whale_plan_auto(const struct whale_model_desc *model, long global_batch,
                    const struct whale_cluster *c, const struct whale_calib *cal,
                    const struct whale_plan_request *limits,
                    struct whale_plan *out, char *explain, size_t explain_len)
{
    int rc;
    struct whale_cluster cc = *c;
    if (cal)
        whale_calib_apply(cal, &cc);
    struct whale_plan_request rq;
    if (limits) {
        rq = *limits;
    } else {
        whale_plan_request_init(&rq);
        rq.seqpar = -1;      /* free: the engine runs sequence parallelism with TP >= 2 */
    }
    rq.model = model;
    rq.global_batch = global_batch;
    rq.cluster = &cc;
    rq.topk = 4;
    /* The plan a step runs: whale-train runs a MoE model's experts on every
     * rank and refuses EP > 1 until expert parallelism runs in the engine,
     * so the step's plan keeps EP 1 unless the step asks for one
     * (--whale-ep); whale-plan searches EP freely. */
    if (rq.ep <= 0)
        rq.ep = 1;
    struct whale_plan_result *res = malloc(sizeof *res);
    if (!res)
        return WHALE_ENOMEM;
    rc = whale_plan_search(&rq, res);
    if (explain && explain_len) {
        explain[0] = 0;
        if (rc == 0 || rc == WHALE_ENOFIT) {
            char cfg[200];
            if (res->found) {
                whale_plan_format_config(&res->best.cfg, cfg, sizeof cfg);
                snprintf(explain, explain_len,
                         "plan %s: predicted %.4g s/step, %.3g hardware / %.3g model TFLOP/s per "
                         "device (MFU %.0f%%), %.3g GiB of %.3g GiB per device (searched %lld "
                         "configurations in %.3f s)",
                         cfg, res->best.pred.t_step, res->best.pred.tflops_per_gpu,
                         res->best.pred.model_tflops_per_gpu, 100 * res->best.pred.mfu,
                         res->best.pred.mem_total / 1073741824.0,
                         res->best.pred.mem_capacity / 1073741824.0,
                         (long long)res->evaluated, res->search_seconds);
            } else {
                snprintf(explain, explain_len, "%s", res->why_none);
            }
        }
    }
    if (rc == 0)
        rc = whale_plan_to_planfile(model, global_batch, &cc, &res->best, out);
    free(res);
    return rc;
}

int whale_plan_predict(const struct whale_model_desc *model, const struct whale_cluster *c,
                       const struct whale_plan *plan, struct whale_plan_candidate *out,
                       char *why, size_t why_len)
{
    struct whale_plan_config *g = &out->cfg;
    memset(out, 0, sizeof *out);
    if (why && why_len)
        why[0] = 0;
    g->tp = plan->tp;
    g->pp = plan->pp;
    g->dp = plan->dp;
    g->ep = whale_grid_ep(&plan->grid);
    g->microbatch = plan->micro_batch;
    g->interleave = plan->interleave > 0 ? plan->interleave : 1;
    g->zero = plan->zero;
    /* an explicit layer set is predicted like the optimal set of its size */
    g->recompute = plan->recompute == WHALE_RECOMPUTE_LAYERS ? WHALE_RECOMPUTE_AUTO : (int)plan->recompute;
    g->offload = (int)plan->offload;
    g->seqpar = plan->sequence_parallel;
    long batch = plan->global_batch > 0 ? plan->global_batch
               : (long)plan->micro_batch * plan->num_micro_batches * plan->dp;
    if (plan->n_dp_batch) {
        batch = 0;
        for (int i = 0; i < plan->n_dp_batch; i++)
            batch += plan->dp_batch[i];
    }
    if (plan->n_stage_layers) {
        int v = g->interleave;
        if (plan->n_stage_layers != g->pp * v || g->pp > WHALE_PLAN_MAX_STAGES) {
            snprintf(why, why_len, "stage_layers has %d entries, expected pp*interleave = %d",
                     plan->n_stage_layers, g->pp * v);
            return WHALE_EINVAL;
        }
        for (int s = 0; s < g->pp; s++)
            for (int k = 0; k < v; k++)
                g->stage_layers[s] += plan->stage_layers[k * g->pp + s];
        g->layers_given = true;
    }
    if (whale_cluster_validate(c))
        return WHALE_EINVAL;
    struct plan_ctx x;
    plan_ctx_init(&x, model, batch, c);
    plan_ctx_set_precision(&x, (int)plan->precision);
    if (g->tp < 1 || g->microbatch < 1) {
        snprintf(why, why_len, "tp and micro_batch must be >= 1");
        return WHALE_EINVAL;
    }
    struct plan_layer_cost lc[WHALE_CLUSTER_MAX_GROUPS];
    for (int i = 0; i < c->ngroups; i++)
        plan_layer_cost(&x, &c->group[i].gpu, g->tp, g->seqpar && g->tp > 1, g->microbatch, &lc[i]);
    int rc = plan_eval_lc(&x, g, lc, &out->pred, why, why_len);
    if (rc)
        return rc;
    if (!out->pred.fits) {
        const struct whale_plan_prediction *p = &out->pred;
        const double G = 1073741824.0;
        snprintf(why, why_len,
                 "needs %.1f GiB per device on pipeline stage %d, %.1f GiB usable (weights %.1f, "
                 "gradients %.1f, optimizer %.1f, activations %.1f, buffers %.1f, runtime %.1f GiB)",
                 p->mem_total / G, p->worst_stage, p->mem_capacity / G, p->mem_weights / G,
                 p->mem_grads / G, p->mem_optim / G, p->mem_act / G, p->mem_buffers / G,
                 p->mem_overhead / G);
        return WHALE_ENOFIT;
    }
    return 0;
}

/* predicted step of cfg with the compute efficiencies scaled by k */
static int step_with(const struct whale_model_desc *m, long B, const struct whale_cluster *c,
                     const struct whale_plan_config *cfg, const struct whale_calib *cal, double ge,
                     double me, double *t)
{
    struct whale_cluster cc = *c;
    whale_calib_apply(cal, &cc);
    cc.eff.gemm_eff = ge;
    cc.eff.mem_eff = me;
    struct whale_plan_config g = *cfg;
    struct whale_plan_prediction p;
    int rc = whale_plan_eval(m, B, &cc, &g, &p);
    *t = p.t_step;
    return rc;
}

int whale_calib_fit_step(const struct whale_model_desc *model, long global_batch,
                         const struct whale_cluster *c, const struct whale_plan_config *cfg,
                         double measured_s, struct whale_calib *cal)
{
    if (!(measured_s > 0)) {
        whale_error("calibration: measured step time must be > 0");
        return WHALE_EINVAL;
    }
    struct whale_cluster cc = *c;
    whale_calib_apply(cal, &cc);
    /* 0 = the device type's measured GEMM efficiency: scale that one */
    double g0 = cc.eff.gemm_eff > 0 ? cc.eff.gemm_eff : cc.group[0].gpu.gemm_eff, m0 = cc.eff.mem_eff;
    double kmax = 1.0 / fmax(g0, m0), lo = 1e-4, hi = kmax, t;
    int rc = step_with(model, global_batch, c, cfg, cal, g0 * hi, m0 * hi, &t);
    if (rc)
        return rc;
    if (t > measured_s) {
        whale_error("calibration: even at 100%% efficiency the model predicts %.4g s > measured "
                    "%.4g s (check peak FLOP/s and bandwidth)", t, measured_s);
        return WHALE_ERANGE;
    }
    for (int it = 0; it < 60; it++) {   /* time falls as efficiency rises */
        double mid = sqrt(lo * hi);
        if ((rc = step_with(model, global_batch, c, cfg, cal, g0 * mid, m0 * mid, &t)))
            return rc;
        if (t > measured_s)
            lo = mid;
        else
            hi = mid;
    }
    cal->gemm_eff = g0 * hi;
    cal->mem_eff = m0 * hi;
    cal->has |= WHALE_CAL_GEMM_EFF | WHALE_CAL_MEM_EFF;
    return 0;
}
