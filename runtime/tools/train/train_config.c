/* Resolving whale-train's knobs: flags > WHALE_* variables > the plan >
 * documented defaults. Three steps: before the ranks exist (plan, the
 * environment, the model), once they do (the layout the step really runs:
 * degrees checked against the plan, the batch split) and the engine's
 * configuration (with each area's configure hook). */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/ckpt_hf.h"
#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/grid.h"
#include "whale/knobs.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/parallel.h"
#include "whale/planjob.h"

#include "train.h"
#include "train_areas.h"

/* recompute=auto's budget from a planner's plan: the device memory the
 * prediction leaves for activations (usable capacity minus everything
 * else it counted). 0 when the plan carries no such prediction. */
static int64_t plan_act_budget(const struct whale_plan *p)
{
    if (!p->prediction_json)
        return 0;
    json_t *j = json_loads(p->prediction_json, 0, NULL);
    json_t *mb = j ? json_object_get(j, "memory_bytes") : NULL;
    double cap = json_number_value(json_object_get(mb, "capacity"));
    double tot = json_number_value(json_object_get(mb, "total"));
    double act = json_number_value(json_object_get(mb, "activations"));
    json_decref(j);
    double left = cap - (tot - act);
    return mb && cap > 0 && left > 0 ? (int64_t)left : 0;
}

/* Default warmup of a fine-tuning run (--resume of weights without a
 * train state): a tenth of the steps, at least min(steps/2, 100), so that
 * the fresh AdamW moments settle before the full rate (with steps/20 a
 * short fine-tune had no warmup at all). */
long train_finetune_warmup(long steps)
{
    long floor_ = steps / 2 < 100 ? steps / 2 : 100;
    return steps / 10 > floor_ ? steps / 10 : floor_;
}

/* --plan FILE, else WHALE_PLAN (inline JSON or a path). */
static int load_plan(struct train *t)
{
    const char *pv = whale_knob_getenv("WHALE_PLAN");
    int prc = 0;
    if (t->o.plan) {
        snprintf(t->plan_src, sizeof t->plan_src, "--plan %s", t->o.plan);
        prc = whale_plan_load_file(t->o.plan, &t->plan);
        t->have_plan = true;
    } else if (pv && *pv) {
        snprintf(t->plan_src, sizeof t->plan_src, "WHALE_PLAN");
        prc = whale_plan_from_env_value(pv, &t->plan);
        t->have_plan = true;
    }
    return prc ? 1 : TRAIN_GO;
}

/* EP from --ep, else WHALE_EP, else the plan: more than 1 with a dense model
 * is refused before any rank starts, instead of silently training dense. */
static int check_ep(const struct train *t)
{
    long ep = t->o.ep, env_ep;
    char from[64];
    if (whale_env_long(WHALE_ENV_EP, 1, WHALE_GRID_MAX_DP, 0, &env_ep))
        return 2;
    if (ep && env_ep && ep != env_ep) { /* the step's layout is fixed by its launcher */
        fprintf(stderr, "whale-train: --ep %ld but this step runs %s=%ld\n", ep, WHALE_ENV_EP,
                env_ep);
        return 2;
    }
    snprintf(from, sizeof from, "--ep %ld", ep);
    if (!ep) {
        ep = env_ep;
        snprintf(from, sizeof from, "%s=%ld", WHALE_ENV_EP, ep);
    }
    if (!ep && t->have_plan) {
        ep = whale_grid_ep(&t->plan.grid);
        snprintf(from, sizeof from, "the plan's \"ep\": %ld", ep);
    }
    if (ep > 1 && whale_model_desc_moe_blocks(&t->md) == 0) {
        fprintf(stderr, "whale-train: %s needs a model with MoE layers; %s has none\n", from,
                t->o.model);
        return 2;
    }
    if (ep > 1 && t->md.moe.experts % ep) {
        fprintf(stderr, "whale-train: %s: %s has Experts=%d, not divisible by EP=%ld (each "
                "expert-parallel rank computes Experts/EP experts)\n", from, t->o.model,
                t->md.moe.experts, ep);
        return 2;
    }
    /* the expert groups are the launcher's layout (WHALE_EP beside
     * WHALE_DP): without a launcher there is one rank and nothing to split */
    if (ep > 1 && !env_ep) {
        fprintf(stderr, "whale-train: %s: expert parallelism needs the launcher's layout: run "
                "under whale-run --dp D --ep %ld or srun --whale-dp=D --whale-ep=%ld (D a "
                "multiple of %ld)\n", from, ep, ep, ep);
        return 2;
    }
    return TRAIN_GO;
}

/* Before whale_init: the plan, the WHALE_* knobs, the model. */
int train_resolve_config(struct train *t)
{
    struct train_opts *o = &t->o;
    const struct whale_plan *plan = &t->plan;
    int rc = load_plan(t);
    if (rc != TRAIN_GO)
        return rc;
    bool have_plan = t->have_plan;
    /* a batch field the plan leaves unset (the plugin without
     * --whale-microbatch) does not override this tool's defaults */
    bool plan_micro = have_plan && !(plan->unset & WHALE_PLAN_UNSET_MICRO_BATCH);
    bool plan_accum = have_plan && !(plan->unset & WHALE_PLAN_UNSET_NUM_MICRO);
    bool plan_global = have_plan && !(plan->unset & WHALE_PLAN_UNSET_GLOBAL_BATCH);
    /* a plan made for another model or batch is refused, not half-applied
     * (its degrees are compared once the step's are known) */
    struct whale_plan_job job = { .model = o->model, .model_from = "--model",
                                  .batch = o->batch_set ? o->batch : 0, .batch_from = "--batch" };
    if (have_plan && whale_plan_check_job(plan, t->plan_src, &job))
        return 2;
    t->src_zero = train_source(t, o->zero >= 0, "--zero", "WHALE_ZERO", have_plan);
    t->src_micro = o->micro ? "--micro-batch"
                   : train_source(t, false, NULL, "WHALE_MICRO_BATCH",
                                  plan_micro && o->accum == 0 && !o->batch_set);
    if (!strcmp(t->src_micro, "the default"))
        t->src_micro = "--batch / (DP x grad-accum)";
    if (!o->dp_shares) { /* checked with the layout (--dp-shares' rules) */
        const char *ev = whale_knob_getenv("WHALE_DP_SHARES");
        if (ev && *ev)
            o->dp_shares = ev;
    }
    /* strict: WHALE_ZERO=abc is an error, not ZeRO 0 (whale/envnum.h) */
    if (o->zero < 0 && whale_env_long("WHALE_ZERO", 0, 3, have_plan ? plan->zero : -1, &o->zero))
        return 2;
    if (!o->micro && whale_env_long("WHALE_MICRO_BATCH", 1, 1L << 20,
                                    plan_micro && o->accum == 0 && !o->batch_set
                                        ? plan->micro_batch : 0,
                                    &o->micro))
        return 2;
    if (!o->accum && whale_env_long("WHALE_GRAD_ACCUM", 1, 1L << 20,
                                    plan_accum ? plan->num_micro_batches : 0, &o->accum))
        return 2;
    if (!o->batch_set && plan_global && plan->global_batch > 0)
        o->batch = plan->global_batch;
    if (!o->model && have_plan && plan->model[0])
        o->model = plan->model;
    /* checkpoints: flags > WHALE_CKPT_* > the plan (the plugin puts them there) */
    t->plan_json = have_plan ? whale_plan_to_json(&t->plan, 0) : NULL;
    if (have_plan && plan->ckpt_dir[0])
        snprintf(t->plan_ckpt_dir, sizeof t->plan_ckpt_dir, "%s", plan->ckpt_dir);
    if (have_plan && plan->ckpt_every > 0)
        snprintf(t->plan_ckpt_every, sizeof t->plan_ckpt_every, "%d", plan->ckpt_every);
    if (o->init_from && o->resume) {
        fprintf(stderr, "whale-train: --init-from starts from Hugging Face weights, --resume "
                        "from a checkpoint: give one of them\n");
        return 2;
    }
    if (o->init_from && !o->model) { /* the model is the one config.json describes */
        snprintf(t->hf_config, sizeof t->hf_config, "%s/config.json", o->init_from);
        o->model = t->hf_config;
    }
    if (!o->model || !o->data) {
        fprintf(stderr, "whale-train: --model and --data are required (see --help)\n");
        return 2;
    }
    if (o->zero > 3 || o->zero < -1) {
        fprintf(stderr, "whale-train: WHALE_ZERO=%ld: expected 0..3\n", o->zero);
        return 2;
    }
    whale_log_set_level(WHALE_LOG_INFO);
    whale_log_init_from_env();

    if (t->hf_config[0] ? whale_hf_config_read(o->init_from, &t->md, NULL)
                        : whale_model_desc_load(o->model, &t->md))
        return 1;
    if (whale_engine_model_check(&t->md)) /* what the engine does not run, named by key */
        return 1;
    return check_ep(t);
}

/* The sequence length, after the batch split. */
static int resolve_seq(struct train *t)
{
    const struct train_opts *o = &t->o;
    t->seq = o->seq ? o->seq : (t->md.seq < 1024 ? t->md.seq : 1024);
    if (t->seq > t->md.seq) {
        whale_error("--seq=%ld exceeds the model's Seq=%d (%s)", t->seq, t->md.seq, t->md.name);
        return 1;
    }
    return TRAIN_GO;
}

/* Per-replica shares (train_shares.h): --dp-shares (micro-batches per
 * replica) or the plan's dp_batch (samples per replica). Sets t->share,
 * micro, accum, gbatch and the sequence length; 2: no shares given (the
 * even split by --batch, --micro-batch and --grad-accum). */
static int resolve_shares(struct train *t)
{
    const struct train_opts *o = &t->o;
    const struct whale_plan *plan = &t->plan;
    const int n = t->dp, zero = o->zero >= 0 ? (int)o->zero : 0;
    bool plan_uneven = false; /* an even dp_batch: the plan's micro-batch and count */
    for (int i = 1; t->have_plan && i < plan->n_dp_batch; i++)
        plan_uneven |= plan->dp_batch[i] != plan->dp_batch[0];
    /* auto: the plan's shares (declared speeds), else the even split, to
     * start from; the calibration of the first steps moves them
     * (train_rebalance.c) */
    const char *given = o->dp_shares && strcmp(o->dp_shares, "auto") ? o->dp_shares : NULL;
    if (!given && !plan_uneven)
        return 2;
    if (whale_grid_ep(&t->grid) > 1) { /* the expert group's all-to-alls pair micro-batches */
        whale_error("%s with expert parallelism EP=%d: the ranks of an expert group exchange "
                    "tokens at every micro-batch of a MoE block and need the same micro-batches; "
                    "drop the uneven shares or run with EP 1",
                    o->dp_shares ? "--dp-shares" : "the plan's uneven dp_batch",
                    whale_grid_ep(&t->grid));
        return 1;
    }
    long *sh = calloc((size_t)n, sizeof *sh);
    if (!sh)
        return 1;
    const char *what = given ? "--dp-shares" : "the plan's dp_batch";
    long micro = o->micro, accum = o->accum > 0 ? o->accum : 1;
    int rc = 1;
    if (given) {
        if (train_share_parse(given, n, "--dp-shares", sh))
            goto out;
        long m = 0;
        for (int i = 0; i < n; i++)
            m += sh[i];
        if (!micro) {
            if (o->batch % m) {
                whale_error("--batch=%ld does not split into the %ld micro-batches of "
                            "--dp-shares=%s", o->batch, m, given);
                goto out;
            }
            micro = o->batch / m;
        } else if (o->batch_set && micro * m != o->batch) {
            whale_error("--batch=%ld but --dp-shares=%s gives %ld micro-batches of %ld = %ld "
                        "samples", o->batch, given, m, micro, m * micro);
            goto out;
        }
        for (int i = 0; i < n; i++)
            sh[i] *= micro;
    } else {
        for (int i = 0; i < n; i++)
            sh[i] = plan->dp_batch[i];
        if (!micro)
            micro = plan->micro_batch;
    }
    if (train_share_of(sh, n, t->dp_rank, micro, accum, zero, what, &t->share))
        goto out;
    if (o->batch_set && t->share.global != o->batch) {
        whale_error("--batch=%ld but %s adds up to %ld samples", o->batch, what,
                    t->share.global);
        goto out;
    }
    t->micro = t->share.micro;
    t->accum = t->share.accum;
    t->gbatch = t->share.global;
    rc = resolve_seq(t);
out:
    free(sh);
    return rc;
}

/* The plan must describe the step that runs; then the batch split and the
 * sequence length. */
int train_resolve_layout(struct train *t)
{
    const struct train_opts *o = &t->o;
    struct whale_plan *plan = &t->plan;
    if (t->have_plan) {
        if (whale_plan_validate(plan, 0, t->md.layers, o->plan ? o->plan : "WHALE_PLAN"))
            return 1;
        struct whale_plan_job job = { .tp = t->tp, .pp = t->pp, .dp = t->dp };
        if (whale_plan_check_job(plan, t->plan_src, &job))
            return 1;
    }
    int src = resolve_shares(t);
    if (src != 2)
        return src;
    t->accum = o->accum > 0 ? o->accum : 1;
    t->micro = o->micro;
    if (t->micro && o->batch_set) {
        /* --batch with --micro-batch: the global batch is what the user
         * asked for; without --grad-accum the micro-batch count follows
         * from it (it used to stay 1 and train a smaller global batch) */
        if (o->accum <= 0 && o->batch % (t->dp * t->micro) == 0)
            t->accum = o->batch / (t->dp * t->micro);
        if (t->micro * t->accum * t->dp != o->batch) {
            whale_error("--batch=%ld does not equal DP (%d) x %s (%ld) x grad-accum (%ld); "
                        "give a --batch that DP x the micro-batch divides, or leave one of "
                        "them out",
                        o->batch, t->dp, t->src_micro, t->micro, t->accum);
            return 1;
        }
    }
    if (!t->micro) {
        if (o->batch % (t->dp * t->accum)) {
            whale_error("--batch=%ld is not divisible by DP (%d) x grad-accum (%ld)", o->batch,
                        t->dp, t->accum);
            return 1;
        }
        t->micro = o->batch / (t->dp * t->accum);
    }
    t->gbatch = t->micro * t->accum * t->dp;
    t->share = (struct train_share){ .micro = t->micro, .accum = t->accum,
                                     .offset = t->dp_rank * t->micro * t->accum,
                                     .global = t->gbatch };
    return resolve_seq(t);
}

/* Transformer blocks per virtual pipeline stage from --pp-layers, else
 * WHALE_PP_LAYERS: "3,1", one non-negative entry per stage (per virtual
 * stage in chunk order with interleave), adding up to the model's blocks.
 * Returns the number of entries (0: neither is set), -1 refused with the
 * option or variable named. */
static int resolve_pp_layers(struct train *t, int chunks)
{
    const char *env = whale_knob_getenv("WHALE_PP_LAYERS");
    const char *s = t->o.pp_layers ? t->o.pp_layers : env && *env ? env : NULL;
    const char *what = t->o.pp_layers ? "--pp-layers" : "WHALE_PP_LAYERS";
    if (!s)
        return 0;
    int k = 0;
    long sum = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > t->md.layers || (*end && *end != ',') ||
            k == TRAIN_MAX_STAGES) {
            whale_error("%s=%s: expected %d integers separated by commas (blocks per pipeline "
                        "stage, each 0..%d)", what, s, chunks, t->md.layers);
            return -1;
        }
        t->stage_layers[k++] = (int)v;
        sum += v;
        p = *end ? end + 1 : end;
    }
    if (k != chunks) {
        whale_error("%s=%s: %d entries, expected one per pipeline stage (PP %d x interleave %d "
                    "= %d)", what, s, k, t->pp, chunks / t->pp, chunks);
        return -1;
    }
    if (sum != t->md.layers) {
        whale_error("%s=%s adds up to %ld layers but model %s has %d", what, s, sum,
                    t->md.name, t->md.layers);
        return -1;
    }
    for (int i = 1; i < chunks - 1; i++)
        if (t->stage_layers[i] == 0) {
            whale_error("%s=%s: stage %d gets no layer (only the first stage, which holds the "
                        "embedding, and the last, which holds the head, may)", what, s, i);
            return -1;
        }
    return k;
}

/* t->ec from the resolved knobs, then each area's configure hook. */
int train_engine_config(struct train *t)
{
    const struct train_opts *o = &t->o;
    const struct whale_plan *plan = &t->plan;
    bool have_plan = t->have_plan;
    struct whale_engine_config *ec = &t->ec;
    whale_engine_config_defaults(ec);
    ec->model = t->md;
    ec->seq = (int)t->seq;
    ec->micro_batch = (int)t->micro;
    ec->grad_accum = (int)t->accum;
    ec->global_batch = t->share.uneven ? (int)t->share.global : 0;
    ec->seed = (uint64_t)o->seed;
    /* a spare promoted into an --init-from run takes the same defaults as
     * the ranks that started it (it skipped the fine-tuning probe) */
    const bool ft = t->finetune || o->init_from;
    const double lr = o->lr >= 0 ? o->lr : ft ? TRAIN_FINETUNE_LR : TRAIN_PRETRAIN_LR;
    ec->lr = (float)lr;
    ec->min_lr = (float)(o->min_lr >= 0 ? o->min_lr : lr / 10);
    ec->warmup_steps = o->warmup >= 0 ? o->warmup
                       : ft           ? train_finetune_warmup(o->steps)
                                      : o->steps / 20;
    ec->total_steps = o->steps;
    ec->weight_decay = (float)o->wd;
    ec->grad_clip = (float)o->clip;
    ec->zero_stage = o->zero >= 0 ? (int)o->zero : 0;
    ec->bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    ec->overlap = o->overlap != 0;
    /* precision: flag > plan > fp32; fp16 needs the loss scaler unless told not to */
    ec->precision = have_plan ? plan->precision : WHALE_PREC_FP32;
    if (o->precision)
        whale_precision_parse(o->precision, &ec->precision);
    ec->loss_scaling = o->loss_scale >= 0 ? o->loss_scale : ec->precision == WHALE_PREC_FP16;
    ec->grad_reduce_16 = o->grad_reduce_16;
    ec->threads = (int)o->threads;
    /* tensor / pipeline parallelism and recomputation: flags > plan */
    ec->tp = t->tp;
    ec->pp = t->pp;
    ec->schedule = have_plan ? plan->schedule : WHALE_SCHED_1F1B;
    ec->interleave = have_plan ? plan->interleave : 1;
    if (o->schedule)
        whale_schedule_parse(o->schedule, &ec->schedule);
    if (o->interleave > 0)
        ec->interleave = (int)o->interleave;
    if (o->schedule && ec->schedule != WHALE_SCHED_INTERLEAVED && !o->interleave)
        ec->interleave = 1;
    /* layers per stage: --pp-layers > WHALE_PP_LAYERS > the plan's stage_layers */
    int nsl = resolve_pp_layers(t, ec->pp * ec->interleave);
    if (nsl < 0)
        return 2;
    if (nsl > 0) {
        ec->stage_layers = t->stage_layers;
        ec->n_stage_layers = nsl;
    } else if (have_plan && plan->n_stage_layers > 0 && ec->interleave == plan->interleave) {
        ec->stage_layers = plan->stage_layers;
        ec->n_stage_layers = plan->n_stage_layers;
    }
    ec->recompute = have_plan ? plan->recompute : WHALE_RECOMPUTE_NONE;
    if (o->recompute)
        whale_recompute_parse(o->recompute, &ec->recompute);
    if (ec->recompute == WHALE_RECOMPUTE_LAYERS) {
        ec->recompute_layers = plan->recompute_layers;
        ec->n_recompute_layers = plan->n_recompute_layers;
    }
    ec->act_budget_bytes = (int64_t)(o->act_budget_mb * 1048576.0);
    if (!ec->act_budget_bytes && have_plan && ec->recompute == WHALE_RECOMPUTE_AUTO)
        ec->act_budget_bytes = plan_act_budget(plan);
    return train_areas_configure(t);
}
