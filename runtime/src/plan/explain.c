/* Human-readable output of the planner: table rows, breakdowns and the
 * explanation of why the winner wins and why faster plans were rejected. */
#include "plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GiB 1073741824.0

static void cat(char *buf, size_t len, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cat(char *buf, size_t len, size_t *o, const char *fmt, ...)
{
    if (*o >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, len - *o, fmt, ap);
    va_end(ap);
    if (n > 0)
        *o = *o + (size_t)n < len ? *o + (size_t)n : len;
}

void whale_plan_format_config(const struct whale_plan_config *cfg, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    cat(buf, len, &o, "tp=%d pp=%d dp=%d mb=%d m=%d", cfg->tp, cfg->pp, cfg->dp, cfg->microbatch,
        cfg->nmicro);
    if (whale_grid_ep(&cfg->grid) > 1)
        cat(buf, len, &o, " ep=%d", cfg->ep);
    if (cfg->interleave > 1)
        cat(buf, len, &o, " v=%d", cfg->interleave);
    if (cfg->seqpar)
        cat(buf, len, &o, " sp");
    cat(buf, len, &o, " zero=%d rc=%s", cfg->zero, whale_recompute_name(cfg->recompute));
    if (cfg->offload)
        cat(buf, len, &o, " offload=%s", whale_offload_name(cfg->offload));
    if (cfg->uneven)
        cat(buf, len, &o, " uneven");
}

void whale_plan_format_header(char *buf, size_t len)
{
    /* two labelled rates: hardware TFLOP/s (recompute counted) and model
     * TFLOP/s (6N + attention, the MFU numerator) per device */
    snprintf(buf, len, "%4s %4s %5s %3s %3s %5s %2s %2s %4s %-9s %-5s %8s %9s %8s %8s %5s %6s %6s %6s",
             "TP", "PP", "DP", "EP", "MB", "M", "V", "SP", "ZeRO", "recompute", "offl", "mem GiB",
             "step s", "hw TF/s", "modelTF/s", "MFU", "bubble", "comm", "recomp");
}

void whale_plan_format_row(const struct whale_plan_candidate *c, char *buf, size_t len)
{
    const struct whale_plan_config *g = &c->cfg;
    const struct whale_plan_prediction *p = &c->pred;
    char rc[16];
    if (g->recompute == WHALE_RECOMPUTE_AUTO)
        snprintf(rc, sizeof rc, "auto%d/%d", g->rc_full, g->rc_selective);
    else
        snprintf(rc, sizeof rc, "%s", whale_recompute_name(g->recompute));
    double T = p->t_step > 0 ? p->t_step : 1;
    snprintf(buf, len, "%4d %4d %5d %3d %3d %5d %2d %2s %4d %-9s %-5.5s %8.3g %9.4g %8.4g %9.4g %4.0f%% %5.1f%% %5.1f%% %5.1f%%",
             g->tp, g->pp, g->dp, whale_grid_ep(&g->grid), g->microbatch, g->nmicro, g->interleave, g->seqpar ? "y" : "-",
             g->zero, rc, whale_offload_name(g->offload), p->mem_total / GiB, p->t_step,
             p->tflops_per_gpu, p->model_tflops_per_gpu, 100 * p->mfu, 100 * p->t_bubble / T,
             100 * (p->t_tp + p->t_ep + p->t_pp + p->t_dp + p->t_offload) / T, 100 * p->t_recompute / T);
}

void whale_plan_format_breakdown(const struct whale_plan_candidate *c, char *buf, size_t len)
{
    const struct whale_plan_prediction *p = &c->pred;
    size_t o = 0;
    buf[0] = 0;
    double T = p->t_step > 0 ? p->t_step : 1;
    cat(buf, len, &o, "memory per device (stage %d, worst): %.2f GiB of %.2f GiB usable%s\n",
        p->worst_stage, p->mem_total / GiB, p->mem_capacity / GiB, p->fits ? "" : "  DOES NOT FIT");
    if (!p->fits && p->mem_total > p->mem_capacity)
        cat(buf, len, &o, "  over by %.2f GiB (%.1f%% more than fits)\n",
            (p->mem_total - p->mem_capacity) / GiB, 100 * (p->mem_total / p->mem_capacity - 1));
    cat(buf, len, &o, "  weights %.2f  gradients %.2f  optimizer %.2f  activations %.2f  "
        "buffers %.2f  runtime %.2f GiB\n", p->mem_weights / GiB, p->mem_grads / GiB,
        p->mem_optim / GiB, p->mem_act / GiB, p->mem_buffers / GiB, p->mem_overhead / GiB);
    cat(buf, len, &o, "time per step: %.4g s = compute %.4g (%.1f%%) + recompute %.4g (%.1f%%) + "
        "bubble %.4g (%.1f%%)\n", p->t_step, p->t_compute, 100 * p->t_compute / T, p->t_recompute,
        100 * p->t_recompute / T, p->t_bubble, 100 * p->t_bubble / T);
    cat(buf, len, &o, "  + TP comm %.4g [%s] + PP comm %.4g [%s] + DP/ZeRO exposed %.4g [%s] + "
        "optimizer %.4g + offload %.4g\n", p->t_tp, whale_plan_link_name(p->link_tp), p->t_pp,
        whale_plan_link_name(p->link_pp), p->t_dp, whale_plan_link_name(p->link_dp), p->t_optim,
        p->t_offload);
    if (whale_grid_ep(&c->cfg.grid) > 1 || p->t_ep > 0)
        cat(buf, len, &o, "  + EP all-to-all %.4g (ep=%d: token dispatch and combine of the MoE blocks)\n",
            p->t_ep, whale_grid_ep(&c->cfg.grid));
    cat(buf, len, &o, "rates: hardware %.1f TFLOP/s per device (recompute counted, HFU %.1f%%), "
        "model %.1f TFLOP/s per device (6N + attention, MFU %.1f%%), %.4g tokens/s (%s)\n",
        p->tflops_per_gpu, 100 * p->hfu, p->model_tflops_per_gpu, 100 * p->mfu, p->tokens_per_s,
        whale_precision_name((enum whale_precision)c->cfg.precision));
}

static const char *whale_link_class_name_or(int cls)
{
    return cls == WHALE_PLAN_LINK_NVLINK ? "NVLink" : cls == WHALE_PLAN_LINK_LEAF
         ? "one leaf switch" : "the spine";
}

/* The component in which `a` loses most time against `b`. */
static const char *worst_component(const struct whale_plan_prediction *a,
                                   const struct whale_plan_prediction *b, double *d)
{
    struct { const char *n; double v; } comp[] = {
        { "compute on the slowest stage (smaller matrices, or the output layer unbalancing the last stage)",
          a->t_compute - b->t_compute },
        { "recomputation", a->t_recompute - b->t_recompute },
        { "pipeline bubble", a->t_bubble - b->t_bubble },
        { "tensor-parallel communication", a->t_tp - b->t_tp },
        { "expert-parallel all-to-all", a->t_ep - b->t_ep },
        { "pipeline communication", a->t_pp - b->t_pp },
        { "data-parallel / ZeRO communication", a->t_dp - b->t_dp },
        { "optimizer step", a->t_optim - b->t_optim },
        { "offload transfers", a->t_offload - b->t_offload },
    };
    int k = 0;
    for (int i = 1; i < (int)(sizeof comp / sizeof comp[0]); i++)
        if (comp[i].v > comp[k].v)
            k = i;
    *d = comp[k].v;
    return comp[k].n;
}

void whale_plan_explain(const struct whale_plan_request *req, const struct whale_plan_result *res,
                        char *buf, size_t len)
{
    size_t o = 0;
    char line[256], cl[320];
    buf[0] = 0;
    whale_cluster_describe(req->cluster, cl, sizeof cl);
    const struct whale_model_desc *md = req->model;
    char kvs[32] = "";
    if (md->kv_heads != md->heads)
        snprintf(kvs, sizeof kvs, "%s %d kv heads, ", md->kv_heads == 1 ? "MQA" : "GQA", md->kv_heads);
    cat(buf, len, &o, "model %s (%.3g B parameters; %s MLP, %s%s, %s positions, %s attention), global "
        "batch %ld x %d tokens, on %s\n", md->name, whale_model_desc_params(md) / 1e9,
        whale_mlp_name(md->mlp), kvs, whale_norm_name(md->norm), whale_pos_name(md->position),
        whale_attn_name(md->attention), req->global_batch, md->seq, cl);
    cat(buf, len, &o, "searched %lld configurations (%lld branches pruned) in %.3f s\n",
        (long long)res->evaluated, (long long)res->pruned, res->search_seconds);
    if (!res->found) {
        cat(buf, len, &o, "%s\n", res->why_none);
        return;
    }
    whale_plan_format_header(line, sizeof line);
    cat(buf, len, &o, "\n     %s\n", line);
    for (int i = 0; i < res->ntop; i++) {
        whale_plan_format_row(&res->top[i], line, sizeof line);
        cat(buf, len, &o, "%s %s\n", i == 0 ? "best" : "    ", line);
    }
    const struct whale_plan_candidate *b = &res->best;
    cat(buf, len, &o, "\n");
    char bd[1024];
    whale_plan_format_breakdown(b, bd, sizeof bd);
    cat(buf, len, &o, "%s", bd);
    /* how sure: the held-out errors of published runs of this kind */
    double lo, hi;
    char kind[32];
    if (!whale_plan_range(req->cluster, &b->cfg, &lo, &hi) &&
        !whale_plan_kind(req->cluster, &b->cfg, kind, sizeof kind))
        cat(buf, len, &o, "expected: %.0f model TFLOP/s per device (%+.0f %% / %+.0f %%), %.4g s per step "
            "(%+.0f %% / %+.0f %%): the spread of published %s runs predicted without their source "
            "(docs/planning.md)\n", b->pred.model_tflops_per_gpu, 100 * lo, 100 * hi, b->pred.t_step,
            100 * (1 / (1 + hi) - 1), 100 * (1 / (1 + lo) - 1), kind);
    else
        cat(buf, len, &o, "expected: no published runs of this kind to say how sure (CPU or mixed "
            "generations: calibrate with whale-bench)\n");

    cat(buf, len, &o, "\nwhy this plan:\n");
    const struct whale_plan_prediction *p = &b->pred;
    double T = p->t_step;
    if (b->cfg.tp > 1)
        cat(buf, len, &o, "  - tp=%d: tensor-parallel all-reduces stay on %s and cost %.1f%% of the step\n",
            b->cfg.tp, whale_link_class_name_or(p->link_tp), 100 * p->t_tp / T);
    else
        cat(buf, len, &o, "  - no tensor parallelism: the full-width matrices run most efficiently\n");
    if (b->cfg.pp > 1)
        cat(buf, len, &o, "  - pp=%d with %d micro-batches%s: the pipeline bubble costs %.1f%%\n",
            b->cfg.pp, b->cfg.nmicro, b->cfg.interleave > 1 ? " (interleaved)" : "",
            100 * p->t_bubble / T);
    else
        cat(buf, len, &o, "  - no pipeline: no bubble\n");
    if (b->cfg.dp > 1)
        cat(buf, len, &o, "  - dp=%d, ZeRO-%d: gradient reduction over %s, %.1f%% of the step left "
            "exposed after overlap\n", b->cfg.dp, b->cfg.zero, whale_link_class_name_or(p->link_dp),
            100 * p->t_dp / T);
    if (whale_grid_ep(&b->cfg.grid) > 1)
        cat(buf, len, &o, "  - ep=%d: each rank holds 1/%d of the experts (their optimizer states sharded "
            "over %d replicas); the tokens' all-to-all costs %.1f%% of the step\n", b->cfg.ep, b->cfg.ep,
            b->cfg.dp / b->cfg.ep, 100 * p->t_ep / T);
    if (b->cfg.recompute != WHALE_RECOMPUTE_NONE)
        cat(buf, len, &o, "  - recompute=%s (first stage: %d layers full, %d selective) is what fits; "
            "it costs %.1f%% of the step on the slowest stage\n", whale_recompute_name(b->cfg.recompute),
            b->cfg.rc_full, b->cfg.rc_selective, 100 * p->t_recompute / T);
    for (int i = 1; i < res->ntop && i < 4; i++) {
        const struct whale_plan_candidate *a = &res->top[i];
        double d;
        const char *why = worst_component(&a->pred, p, &d);
        whale_plan_format_config(&a->cfg, line, sizeof line);
        cat(buf, len, &o, "  - %s is %.1f%% slower, mostly %s (+%.3g s)\n", line,
            100 * (a->pred.t_step / T - 1), why, d);
    }
    if (res->nrejected) {
        cat(buf, len, &o, "rejected (faster, but do not fit):\n");
        for (int i = 0; i < res->nrejected; i++) {
            const struct whale_plan_candidate *r = &res->rejected[i];
            whale_plan_format_config(&r->cfg, line, sizeof line);
            cat(buf, len, &o, "  - %s would be %.1f%% faster but needs %.1f GiB per device "
                "(%.1f GiB over the %.1f GiB usable)\n", line, 100 * (1 - r->pred.t_step / T),
                r->pred.mem_total / GiB, (r->pred.mem_total - r->pred.mem_capacity) / GiB,
                r->pred.mem_capacity / GiB);
        }
    }
    if (res->mixed) {
        const struct whale_plan_candidate *e = &res->even;
        whale_plan_format_config(&e->cfg, line, sizeof line);
        cat(buf, len, &o, "mixed cluster: best even split (%s) %.4g s; chosen plan %.4g s "
            "(%.1f%% faster)\n", line, e->pred.t_step, T, 100 * (e->pred.t_step / T - 1));
        if (b->cfg.uneven) {
            cat(buf, len, &o, "  layers per stage:");
            for (int s = 0; s < b->cfg.pp; s++)
                cat(buf, len, &o, " %d", b->cfg.stage_layers[s]);
            cat(buf, len, &o, "\n  micro-batches per replica:");
            for (int r = 0; r < b->cfg.dp && r < WHALE_PLAN_MAX_STAGES; r++)
                cat(buf, len, &o, " %d", b->cfg.replica_micro[r]);
            cat(buf, len, &o, "\n");
        }
    }
}
