/* Engine construction: layers, flat parameter space, buckets, ZeRO buffers.
 * The training step lives in step.c. */
#define _GNU_SOURCE
#include <sched.h>

#include "engine_int.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"

double eng_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void whale_engine_config_defaults(struct whale_engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->micro_batch = 4;
    c->grad_accum = 1;
    c->seed = 1337;
    c->lr = 6e-4f;
    c->min_lr = 6e-5f;
    c->warmup_steps = 0;
    c->total_steps = 0;
    c->weight_decay = 0.1f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->grad_clip = 1.0f;
    c->zero_stage = 0;
    c->bucket_bytes = 4u << 20;
    c->overlap = true;
    c->precision = WHALE_PREC_FP32;
    c->init_scale = 65536.0f;
    c->scale_growth_interval = 2000;
}

const char *whale_tensor_kind_name(enum whale_tensor_kind k)
{
    static const char *n[] = { "param", "adam_m", "adam_v", "master" };
    return k >= 0 && k < WHALE_TENSOR_KIND_COUNT_ ? n[k] : "unknown";
}

static int cfg_check(const struct whale_engine_config *c, int dp)
{
    const struct whale_model_desc *m = &c->model;
    if (c->seq < 1 || c->seq > m->seq) {
        whale_error("sequence length %d out of range 1..%d (the model's Seq=)", c->seq, m->seq);
        return WHALE_ERANGE;
    }
    if (c->micro_batch < 1 || c->grad_accum < 1) {
        whale_error("micro-batch (%d) and gradient accumulation (%d) must be >= 1", c->micro_batch,
                    c->grad_accum);
        return WHALE_ERANGE;
    }
    if (c->zero_stage < 0 || c->zero_stage > 3) {
        whale_error("ZeRO stage %d out of range 0..3", c->zero_stage);
        return WHALE_ERANGE;
    }
    if (m->kv_heads != m->heads) {
        whale_error("model %s: grouped-query attention (KVHeads=%d != Heads=%d) is not supported "
                    "by the CPU engine", m->name, m->kv_heads, m->heads);
        return WHALE_ENOTSUP;
    }
    if (!m->tied_embeddings) {
        whale_error("model %s: untied output embeddings are not supported (TiedEmbeddings=yes)",
                    m->name);
        return WHALE_ENOTSUP;
    }
    if (c->recompute == WHALE_RECOMPUTE_AUTO) {
        whale_error("recompute=auto needs the planner's per-layer choice: give the layers "
                    "(plan \"recompute\": \"layers\" with \"recompute_layers\")");
        return WHALE_EINVAL;
    }
    for (int k = 0; k < c->n_recompute_layers; k++)
        if (c->recompute_layers[k] < 0 || c->recompute_layers[k] >= m->layers) {
            whale_error("recompute layer %d out of range 0..%d (model %s has %d blocks)",
                        c->recompute_layers[k], m->layers - 1, m->name, m->layers);
            return WHALE_ERANGE;
        }
    if (c->precision == WHALE_PREC_FP16 || c->precision == WHALE_PREC_BF16) {
        whale_error("16-bit storage is not implemented in the CPU kernels; train in fp32 "
                    "(loss scaling can still be enabled)");
        return WHALE_ENOTSUP;
    }
    (void)dp;
    return 0;
}

static int count_threads_default(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        ncpu = CPU_COUNT(&set);
    int local = 1;
    const char *s = getenv("SLURM_TASKS_PER_NODE"); /* "2(x3),1" */
    if (s && atoi(s) > 0)
        local = atoi(s);
    else if ((s = getenv("WHALE_NTASKS")) && atoi(s) > 0 && !getenv("SLURM_JOB_ID"))
        local = atoi(s); /* whale-run: every task on this machine */
    int t = (int)(ncpu / local);
    return t < 1 ? 1 : t;
}

/* Build this stage's layers and their parameter tables. */
static int build_layers(whale_engine *e, int g0, int g1)
{
    const struct eng_dims *d = &e->d;
    e->nl = g1 - g0;
    e->has_embed = g0 == 0;
    e->has_head = g1 == d->L + 2;
    e->layers = calloc(e->nl, sizeof *e->layers);
    int np = 0;
    for (int g = g0; g < g1; g++)
        np += g == 0 ? eng_embed_params(d, g, NULL)
            : g <= d->L ? eng_block_params(d, g, NULL) : eng_head_params(d, g, NULL) + 1;
    e->params = calloc(np, sizeof *e->params);
    if (!e->layers || !e->params)
        return WHALE_ENOMEM;
    int k = 0;
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        int g = g0 + i;
        l->index = g;
        l->d = d;
        l->params = &e->params[k];
        if (g == 0) {
            l->ops = &eng_embed_ops;
            snprintf(l->name, sizeof l->name, "embed");
            l->nparams = eng_embed_params(d, g, l->params);
        } else if (g <= d->L) {
            l->ops = &eng_block_ops;
            snprintf(l->name, sizeof l->name, "h.%d", g - 1);
            l->nparams = eng_block_params(d, g, l->params);
        } else {
            l->ops = &eng_head_ops;
            snprintf(l->name, sizeof l->name, "head");
            l->nparams = eng_head_params(d, g, l->params);
            if (e->has_embed) {
                l->tied = &e->layers[0];
            } else {
                /* the last stage keeps its own copy of wte, kept equal to the
                 * first stage's by summing their gradients every step */
                struct eng_param tmp[2];
                eng_embed_params(d, 0, tmp);
                l->params[l->nparams] = tmp[0];
                l->params[l->nparams].tied_copy = true;
                l->nparams++;
            }
        }
        k += l->nparams;
    }
    e->np = k;
    return 0;
}

/* Blocks per stage: the plan's split, else even (earlier stages take the
 * remainder: the last one also runs the head). Returns the global layer
 * range [g0, g1) of stage s (embedding = 0, blocks 1..L, head L+1). */
static int stage_range(const struct whale_engine_config *c, int P, int s, int *g0, int *g1)
{
    const int L = c->model.layers;
    int before = 0, mine = 0;
    if (c->n_stage_layers) {
        int sum = 0;
        for (int i = 0; i < c->n_stage_layers; i++) {
            if (c->stage_layers[i] < 1) {
                whale_error("plan stage_layers: stage %d has %d layers (at least 1)", i,
                            c->stage_layers[i]);
                return WHALE_EINVAL;
            }
            sum += c->stage_layers[i];
        }
        if (c->n_stage_layers != P || sum != L) {
            whale_error("plan stage_layers: %d stages summing to %d layers, but PP=%d and model "
                        "%s has %d layers", c->n_stage_layers, sum, P, c->model.name, L);
            return WHALE_EINVAL;
        }
        for (int i = 0; i < s; i++)
            before += c->stage_layers[i];
        mine = c->stage_layers[s];
    } else {
        if (L < P) {
            whale_error("PP=%d stages but model %s has only %d layers", P, c->model.name, L);
            return WHALE_EINVAL;
        }
        int q = L / P, r = L % P;
        before = s * q + (s < r ? s : r);
        mine = q + (s < r);
    }
    *g0 = s == 0 ? 0 : 1 + before;
    *g1 = s == P - 1 ? L + 2 : 1 + before + mine;
    return 0;
}

/* Group layers into buckets (in forward order) and lay out the flat space. */
static int build_buckets(whale_engine *e)
{
    const int dp = e->dp.size;
    const size_t align = 16 * (size_t)dp;
    e->buckets = calloc(e->nl, sizeof *e->buckets);
    if (!e->buckets)
        return WHALE_ENOMEM;
    /* Fill buckets from the last layer backwards: that is the order in which
     * backward finishes them, so the first bucket can go out early. */
    size_t cap = e->cfg.zero_stage == 3 ? 0 : e->cfg.bucket_bytes / sizeof(float);
    int nb = 0;
    int hi = e->nl;
    while (hi > 0) {
        int lo = hi - 1;
        size_t n = 0;
        for (int p = 0; p < e->layers[lo].nparams; p++)
            n += e->layers[lo].params[p].numel;
        while (lo > 0 && n < cap) {
            size_t m = 0;
            for (int p = 0; p < e->layers[lo - 1].nparams; p++)
                m += e->layers[lo - 1].params[p].numel;
            if (n + m > cap && n > 0)
                break;
            n += m;
            lo--;
        }
        e->buckets[nb].l0 = lo;
        e->buckets[nb].l1 = hi;
        nb++;
        hi = lo;
    }
    /* reverse into forward order */
    for (int i = 0; i < nb / 2; i++) {
        struct eng_bucket t = e->buckets[i];
        e->buckets[i] = e->buckets[nb - 1 - i];
        e->buckets[nb - 1 - i] = t;
    }
    e->nb = nb;
    size_t flat = 0;
    for (int b = 0; b < nb; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        bk->flat = flat;
        for (int li = bk->l0; li < bk->l1; li++) {
            struct eng_layer *l = &e->layers[li];
            l->bucket = b;
            l->flat_begin = flat;
            for (int p = 0; p < l->nparams; p++) {
                l->params[p].flat = flat;
                flat += l->params[p].numel;
            }
            l->flat_end = flat;
        }
        size_t n = flat - bk->flat;
        n = (n + align - 1) / align * align;
        bk->n = n;
        bk->shard_off = bk->flat / dp;
        flat = bk->flat + n;
    }
    e->P = flat;
    e->S = flat / dp;
    e->tied_bucket = e->has_head && e->has_embed ? e->layers[0].bucket : -1;
    if (e->pp > 1) {
        if (e->has_embed) {
            e->buckets[e->layers[0].bucket].deferred = true;
            e->tied_param = &e->layers[0].params[0];
        }
        if (e->has_head) {
            struct eng_layer *h = &e->layers[e->nl - 1];
            e->buckets[h->bucket].deferred = true;
            e->tied_param = &h->params[h->nparams - 1];
        }
    }
    return 0;
}

static float *zalloc(size_t n)
{
    /* 64-byte aligned, zeroed */
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float) + 64))
        return NULL;
    memset(p, 0, n * sizeof(float));
    return p;
}

static void bind_layers(whale_engine *e)
{
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        l->w = e->W ? e->W + l->flat_begin : NULL;
        l->g = e->G ? e->G + l->flat_begin : NULL;
    }
}

/* Block index (0-based) named in the per-layer recompute set? */
static bool layer_listed(const struct whale_engine_config *c, int block)
{
    for (int k = 0; k < c->n_recompute_layers; k++)
        if (c->recompute_layers[k] == block)
            return true;
    return false;
}

static int alloc_state(whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    size_t P = e->P, S = e->S;
    if (z < 3 && !(e->W = zalloc(P)))
        return WHALE_ENOMEM;
    if (z == 3 && !(e->Wsh = zalloc(S)))
        return WHALE_ENOMEM;
    if (z < 2 && !(e->G = zalloc(P)))
        return WHALE_ENOMEM;
    if (z >= 2 && !(e->Gsh = zalloc(S)))
        return WHALE_ENOMEM;
    size_t mv = z == 0 ? P : S;
    if (!(e->M = zalloc(mv)) || !(e->V = zalloc(mv)))
        return WHALE_ENOMEM;
    if ((z == 1 || z == 2) && e->dp.size > 1 && !(e->agtmp = zalloc(S)))
        return WHALE_ENOMEM;

    /* initial weights: every rank computes exactly its own elements */
    const int r = e->dp.size > 1 ? e->dp.rank : 0;
    for (int i = 0; i < e->np; i++) {
        struct eng_param *p = &e->params[i];
        float *tmp = malloc(p->numel * sizeof(float));
        if (!tmp)
            return WHALE_ENOMEM;
        eng_param_init(p, e->cfg.seed, tmp);
        if (z < 3) {
            memcpy(e->W + p->flat, tmp, p->numel * sizeof(float));
        } else {
            const struct eng_bucket *b = &e->buckets[e->layers[0].bucket];
            for (int k = 0; k < e->nb; k++)
                if (p->flat >= e->buckets[k].flat && p->flat < e->buckets[k].flat + e->buckets[k].n)
                    b = &e->buckets[k];
            size_t sb = b->n / e->dp.size, lo = b->flat + r * sb, hi = lo + sb;
            size_t a = p->flat > lo ? p->flat : lo, z2 = p->flat + p->numel < hi ? p->flat + p->numel : hi;
            if (a < z2)
                memcpy(e->Wsh + b->shard_off + (a - lo), tmp + (a - p->flat), (z2 - a) * sizeof(float));
        }
        free(tmp);
    }
    bind_layers(e);

    /* activations of one micro-batch */
    const size_t N = (size_t)e->d.B * e->d.T, C = e->d.C;
    e->saved_off = calloc(e->nl + 1, sizeof *e->saved_off);
    if (!e->saved_off)
        return WHALE_ENOMEM;
    /* Recomputation: selective keeps one shared attention-probability buffer
     * for all blocks; a fully recomputed block keeps only its input (the
     * previous boundary) and borrows one shared saved area. */
    const int rp = e->cfg.recompute;
    if (rp == WHALE_RECOMPUTE_SELECTIVE &&
        !(e->att_shared = zalloc((size_t)e->d.B * e->d.NH * e->d.T * e->d.T)))
        return WHALE_ENOMEM;
    size_t so = 0, sc = 0, shared = 0;
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        bool block = l->ops == &eng_block_ops;
        l->att_shared = block ? e->att_shared : NULL;
        l->recompute = block && (rp == WHALE_RECOMPUTE_FULL ||
                                 (rp == WHALE_RECOMPUTE_LAYERS && layer_listed(&e->cfg, i - 1)));
        size_t a = (l->ops->act_floats(l) + 15) / 16 * 16;
        if (l->recompute) {
            shared = a > shared ? a : shared;
        } else {
            e->saved_off[i] = so;
            so += a;
        }
        size_t s2 = l->ops->scratch_floats(l);
        sc = s2 > sc ? s2 : sc;
    }
    for (int i = 0; i < e->nl; i++)
        if (e->layers[i].recompute)
            e->saved_off[i] = so;
    e->saved_off[e->nl] = so + shared;
    /* 1F1B keeps up to PP - stage micro-batches in flight on a stage */
    e->nslots = e->pp - e->pp_rank < e->cfg.grad_accum ? e->pp - e->pp_rank : e->cfg.grad_accum;
    if (e->nslots < 1)
        e->nslots = 1;
    e->saved_per_slot = so;
    e->nbnd = e->nl - (e->has_head ? 1 : 0);
    size_t NS = (size_t)e->nslots;
    e->act_floats = NS * so + shared +
                    (e->att_shared ? (size_t)e->d.B * e->d.NH * e->d.T * e->d.T : 0) +
                    NS * (size_t)(e->nbnd + !e->has_embed) * N * C;
    if (!(e->saved = zalloc(NS * so + shared)) || !(e->scratch = zalloc(sc)) ||
        !(e->xb = zalloc(NS * (size_t)(e->nbnd ? e->nbnd : 1) * N * C)) ||
        !(e->dstream = zalloc(N * C)) || !(e->fsend = calloc(NS, sizeof *e->fsend)))
        return WHALE_ENOMEM;
    if (!e->has_embed && !(e->xin = zalloc(NS * N * C)))
        return WHALE_ENOMEM;
    return 0;
}

int eng_create(const struct whale_engine_config *c, whale_ctx *ctx, struct eng_comm *dp,
               whale_engine **out)
{
    *out = NULL;
    int dps = dp ? dp->size : 1;
    int rc = cfg_check(c, dps);
    if (rc)
        return rc;
    whale_engine *e = calloc(1, sizeof *e);
    if (!e)
        return WHALE_ENOMEM;
    e->cfg = *c;
    e->ctx = ctx;
    if (dp)
        e->dp = *dp;
    else
        e->dp.size = 1;
    const struct whale_model_desc *m = &c->model;
    int tp = 1, tp_rank = 0;
    e->pp = 1;
    if (ctx) {
        int dpd, dpr;
        whale_degrees(ctx, &tp, &e->pp, &dpd);
        whale_coords(ctx, &tp_rank, &e->pp_rank, &dpr);
        if (tp > 1)
            e->tp_group = whale_tp_group(ctx);
        if (whale_world_size(ctx) > 1)
            e->world_group = whale_world(ctx);
        if (e->pp > 1) {
            e->pp_group = whale_pp_group(ctx);
            if (c->zero_stage >= 2) {
                whale_error("ZeRO stage %d does not compose with pipeline parallelism (PP=%d): "
                            "gradients and weights are needed across micro-batches; use ZeRO 0 "
                            "or 1 with PP", c->zero_stage, e->pp);
                whale_engine_destroy(e);
                return WHALE_ENOTSUP;
            }
            /* the first and last stage share wte: a group of the two */
            int ends[2] = { whale_group_world_rank(e->pp_group, 0),
                            whale_group_world_rank(e->pp_group, e->pp - 1) };
            whale_group *g = NULL;
            int rc2 = whale_group_create(e->pp_group, ends, 2, &g);
            if (rc2) {
                whale_engine_destroy(e);
                return rc2;
            }
            if (e->pp_rank == 0 || e->pp_rank == e->pp - 1)
                e->emb_group = g;
            else
                whale_group_free(g);
        }
    }
    if (m->heads % tp || m->ffn % tp) {
        whale_error("model %s: Heads=%d and FFN=%d must be divisible by the tensor-parallel degree "
                    "TP=%d", m->name, m->heads, m->ffn, tp);
        whale_engine_destroy(e);
        return WHALE_EINVAL;
    }
    int64_t v0, vl;
    eng_split(m->vocab, tp, tp_rank, true, &v0, &vl);
    if (vl < 1) {
        whale_error("model %s: Vocab=%d too small for TP=%d", m->name, m->vocab, tp);
        whale_engine_destroy(e);
        return WHALE_EINVAL;
    }
    e->d = (struct eng_dims){
        .B = c->micro_batch, .T = c->seq, .C = m->hidden, .NH = m->heads / tp,
        .hd = m->hidden / m->heads, .F = m->ffn / tp, .V = (int)vl, .Vg = m->vocab, .v0 = (int)v0,
        .Ctp = m->hidden / tp, .L = m->layers, .tp = tp, .tp_rank = tp_rank,
    };
    k_set_threads(c->threads > 0 ? c->threads : count_threads_default());
    int g0, g1;
    if ((rc = stage_range(c, e->pp, e->pp_rank, &g0, &g1))) {
        whale_engine_destroy(e);
        return rc;
    }
    if ((rc = build_layers(e, g0, g1)) || (rc = build_buckets(e)) || (rc = alloc_state(e))) {
        if (rc == WHALE_ENOMEM)
            whale_error("out of memory building model %s (%lld parameters)", m->name,
                        (long long)whale_model_desc_params(m));
        whale_engine_destroy(e);
        return rc;
    }
    whale_loss_scaler_init(&e->scaler, c->loss_scaling, c->init_scale, c->scale_growth_interval);
    e->sched = (struct whale_lr_schedule){ .lr_max = c->lr, .lr_min = c->min_lr,
                                           .warmup = c->warmup_steps, .total = c->total_steps };
    e->adam = (struct whale_adamw){ .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2,
                                    .eps = c->eps, .weight_decay = c->weight_decay };
    const char *tp_path = getenv(WHALE_ENV_TRACE);
    if (tp_path && *tp_path &&
        (rc = eng_trace_open(&e->trace, tp_path, ctx ? whale_rank(ctx) : 0,
                             ctx ? whale_world_size(ctx) : 1))) {
        whale_engine_destroy(e);
        return rc;
    }
    whale_debug("engine: %d layers, %d buckets, %zu flat params (padded), shard %zu, ZeRO %d, "
                "DP %d, %d threads", e->nl, e->nb, e->P, e->S, c->zero_stage, e->dp.size,
                k_threads());
    *out = e;
    return 0;
}

int whale_engine_create(const struct whale_engine_config *c, whale_ctx *ctx, whale_engine **out)
{
    struct eng_comm dp;
    bool have_dp = false;
    *out = NULL;
    if (ctx) {
        int rc = eng_comm_from_ctx(ctx, &dp, &have_dp);
        if (rc)
            return rc;
    }
    return eng_create(c, ctx, have_dp ? &dp : NULL, out);
}

void whale_engine_destroy(whale_engine *e)
{
    if (!e)
        return;
    for (int b = 0; b < e->nb; b++) {
        free(e->buckets[b].gbuf);
        free(e->buckets[b].wbuf);
        free(e->buckets[b].rs_tmp);
    }
    eng_trace_close(&e->trace);
    free(e->buckets);
    free(e->layers);
    free(e->params);
    free(e->W);
    free(e->Wsh);
    free(e->G);
    free(e->Gsh);
    free(e->M);
    free(e->V);
    free(e->agtmp);
    free(e->xb);
    free(e->saved);
    free(e->saved_off);
    free(e->att_shared);
    free(e->xin);
    free(e->fsend);
    if (e->emb_group)
        whale_group_free(e->emb_group);
    free(e->scratch);
    free(e->dstream);
    free(e);
}

/* ---- introspection ---------------------------------------------------------- */

int whale_engine_num_layers(const whale_engine *e)
{
    return e->nl;
}

int whale_engine_layer_cost(const whale_engine *e, int i, struct whale_layer_cost *o)
{
    if (i < 0 || i >= e->nl)
        return WHALE_ERANGE;
    const struct eng_layer *l = &e->layers[i];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", l->name);
    for (int p = 0; p < l->nparams; p++) {
        int64_t n = 1;
        for (int k = 0; k < l->params[p].ndim; k++)
            n *= l->params[p].gshape[k];
        o->params += n;
    }
    l->ops->flops(l, &o->fwd_flops, &o->bwd_flops);
    o->act_bytes = (int64_t)l->ops->act_floats(l) * 4;
    o->boundary_bytes = l->ops == &eng_head_ops ? 0 : (int64_t)e->d.B * e->d.T * e->d.C * 4;
    return 0;
}

void whale_engine_memory(const whale_engine *e, struct whale_engine_memory *m)
{
    const int z = e->cfg.zero_stage;
    memset(m, 0, sizeof *m);
    m->param_bytes = (int64_t)(z < 3 ? e->P : e->S) * 4;
    m->grad_bytes = (int64_t)(z < 2 ? e->P : e->S) * 4;
    m->optim_bytes = 2 * (int64_t)(z == 0 ? e->P : e->S) * 4;
    m->scratch_bytes = e->scratch_peak + (e->agtmp ? (int64_t)e->S * 4 : 0);
    m->act_bytes = (int64_t)e->act_floats * 4;
    m->num_params = whale_model_desc_params(&e->cfg.model);
}

void whale_engine_get_state(const whale_engine *e, struct whale_train_state *s)
{
    memset(s, 0, sizeof *s);
    s->step = e->step;
    s->adam_t = e->adam_t;
    s->samples = e->samples;
    s->seed = e->cfg.seed;
    s->rng_counter = e->rng_counter;
    s->loss_scale = e->scaler.scale;
    s->scaler_good_steps = e->scaler.good_steps;
    s->scaler_skipped = e->scaler.skipped;
}

int whale_engine_set_state(whale_engine *e, const struct whale_train_state *s)
{
    if (s->seed != e->cfg.seed)
        whale_warn("restored state has seed %llu, this run was started with %llu",
                   (unsigned long long)s->seed, (unsigned long long)e->cfg.seed);
    if (s->step < 0 || s->samples < 0 || s->adam_t < 0 || s->adam_t > s->step) {
        whale_error("restored train state is inconsistent (step %lld, adam_t %lld, samples %lld)",
                    (long long)s->step, (long long)s->adam_t, (long long)s->samples);
        return WHALE_EDATA;
    }
    e->step = s->step;
    e->adam_t = s->adam_t;
    e->samples = s->samples;
    e->rng_counter = s->rng_counter;
    if (s->loss_scale > 0)
        e->scaler.scale = s->loss_scale;
    e->scaler.good_steps = s->scaler_good_steps;
    e->scaler.skipped = s->scaler_skipped;
    return 0;
}

void whale_engine_inject_overflow(whale_engine *e)
{
    e->inject_overflow = true;
}

/* ---- tensor enumeration for checkpoints -------------------------------------- */

static const struct eng_bucket *bucket_of(const whale_engine *e, const struct eng_param *p)
{
    for (int b = 0; b < e->nb; b++)
        if (p->flat >= e->buckets[b].flat && p->flat < e->buckets[b].flat + e->buckets[b].n)
            return &e->buckets[b];
    return NULL;
}

int whale_engine_tensors(whale_engine *e, whale_tensor_fn fn, void *user)
{
    const int z = e->cfg.zero_stage;
    const int r = e->dp.size > 1 ? e->dp.rank : 0;
    for (int kind = 0; kind <= WHALE_TENSOR_ADAM_V; kind++) {
        for (int i = 0; i < e->np; i++) {
            const struct eng_param *p = &e->params[i];
            struct whale_tensor_piece t;
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "%s", p->name);
            t.kind = kind;
            t.dtype = WHALE_FLOAT32;
            t.ndim = p->ndim;
            for (int k = 0; k < p->ndim; k++) {
                t.global_shape[k] = p->gshape[k];
                t.tp_offset[k] = p->off[k];
                t.tp_shape[k] = p->shape[k];
            }
            bool tp_writer = (p->split != WHALE_SPLIT_NONE || e->d.tp_rank == 0) && !p->tied_copy;
            bool sharded = kind == WHALE_TENSOR_PARAM ? z == 3 : z >= 1;
            if (!sharded || e->dp.size == 1) {
                float *base = kind == WHALE_TENSOR_PARAM ? (z == 3 ? e->Wsh : e->W)
                            : kind == WHALE_TENSOR_ADAM_M ? e->M : e->V;
                size_t off = p->flat;
                if (sharded) { /* dp == 1: shard == everything, but laid out by bucket */
                    const struct eng_bucket *b = bucket_of(e, p);
                    off = b->shard_off + (p->flat - b->flat);
                }
                t.flat_begin = 0;
                t.flat_end = (int64_t)p->numel;
                t.data = base + off;
                t.writer = tp_writer && r == 0;
            } else {
                const struct eng_bucket *b = bucket_of(e, p);
                size_t sb = b->n / e->dp.size, lo = b->flat + r * sb, hi = lo + sb;
                size_t a = p->flat > lo ? p->flat : lo;
                size_t zz = p->flat + p->numel < hi ? p->flat + p->numel : hi;
                if (a >= zz)
                    continue;
                float *base = kind == WHALE_TENSOR_PARAM ? e->Wsh
                            : kind == WHALE_TENSOR_ADAM_M ? e->M : e->V;
                t.flat_begin = (int64_t)(a - p->flat);
                t.flat_end = (int64_t)(zz - p->flat);
                t.data = base + b->shard_off + (a - lo);
                t.writer = tp_writer;
            }
            int rc = fn(&t, user);
            if (rc)
                return rc;
        }
    }
    return 0;
}

double whale_sgemm_peak_gflops(const whale_engine *e)
{
    (void)e;
    const int n = 1536;
    float *a = zalloc((size_t)n * n), *b = zalloc((size_t)n * n), *c = zalloc((size_t)n * n);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        for (int r = 0; r < 5; r++) {
            double t0 = eng_now();
            k_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double dt = eng_now() - t0;
            double g = 2.0 * n * n * (double)n / dt / 1e9;
            best = g > best ? g : best;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}
