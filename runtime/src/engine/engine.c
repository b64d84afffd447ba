/* Engine construction: layers, flat parameter space, buckets, ZeRO buffers.
 * The training step lives in step.c and its parts (step.h). */
#define _GNU_SOURCE
#include <sched.h>

#include "engine_internal.h"
#include "moe_ep.h"
#include "moe.h"
#include "device.h"
#include "step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "whale/blascore.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

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
    int rc;
    if (c->seq < 1 || c->seq > m->seq) {
        whale_error("sequence length %d out of range 1..%d (the model's Seq=)", c->seq, m->seq);
        return WHALE_ERANGE;
    }
    if (c->micro_batch < 1 || c->grad_accum < 1) {
        whale_error("micro-batch (%d) and gradient accumulation (%d) must be >= 1", c->micro_batch,
                    c->grad_accum);
        return WHALE_ERANGE;
    }
    if (c->global_batch &&
        (c->global_batch < 0 || (int64_t)c->micro_batch * c->grad_accum > c->global_batch)) {
        whale_error("global batch %d is smaller than this rank's share (micro-batch %d x %d "
                    "micro-batches)", c->global_batch, c->micro_batch, c->grad_accum);
        return WHALE_ERANGE;
    }
    if (c->zero_stage < 0 || c->zero_stage > 3) {
        whale_error("ZeRO stage %d out of range 0..3", c->zero_stage);
        return WHALE_ERANGE;
    }
    if ((rc = eng_arch_check(m)))
        return rc;
    if (c->precision != WHALE_PREC_FP32 && c->precision != WHALE_PREC_BF16 &&
        c->precision != WHALE_PREC_FP16) {
        whale_error("precision %d out of range (fp32, bf16, fp16)", (int)c->precision);
        return WHALE_ERANGE;
    }
    if (c->offload < WHALE_OFFLOAD_NONE || c->offload > WHALE_OFFLOAD_PARAMS) {
        whale_error("offload %d out of range (none, optimizer, params)", c->offload);
        return WHALE_ERANGE;
    }
    if (c->offload == WHALE_OFFLOAD_PARAMS && c->zero_stage != 3) {
        whale_error("offload=params keeps the ZeRO-3 weight shard in host memory: it needs "
                    "ZeRO stage 3 (zero is %d); use offload=optimizer with ZeRO %d",
                    c->zero_stage, c->zero_stage);
        return WHALE_EINVAL;
    }
    if (c->offload_prefetch < 0 || c->offload_prefetch > 64) {
        whale_error("offload prefetch %d out of range 1..64 layers", c->offload_prefetch);
        return WHALE_ERANGE;
    }
    if (c->device_mem < 0) {
        whale_error("device memory budget %lld bytes is negative", (long long)c->device_mem);
        return WHALE_ERANGE;
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
    else if ((s = whale_knob_getenv("WHALE_NTASKS")) && atoi(s) > 0 && !getenv("SLURM_JOB_ID"))
        local = atoi(s); /* whale-run: every task on this machine */
    int t = (int)(ncpu / local);
    return t < 1 ? 1 : t;
}

/* Build this rank's layers and parameter tables: the chain layers of each of
 * its model chunks (virtual stages chunk*PP + pp_rank), in chunk order, and
 * on a last stage without the embedding a copy of the tied wte. */
static int build_layers(whale_engine *e, const int *blocks)
{
    const struct eng_dims *d = &e->d;
    const int p = e->grp.pp.size, r = e->grp.pp.rank, v = e->nchunks, S = p * v;
    e->chunks = calloc((size_t)v, sizeof *e->chunks);
    if (!e->chunks)
        return WHALE_ENOMEM;
    int nl = 0, np = 0;
    e->first_stage = r == 0;
    e->last_stage = r == p - 1;
    for (int c = 0; c < v; c++) {
        int s = c * p + r, cs = 0;
        for (int k = 0; k < s; k++)
            cs += blocks[k] + (k == 0);
        int ce = cs + blocks[s] + (s == 0) + (s == S - 1);
        e->chunks[c].vstage = s;
        e->chunks[c].l0 = nl;
        for (int i = cs; i < ce; i++)
            np += i == 0 ? eng_embed_params(d, i, NULL)
                : i <= d->L ? eng_block_params(d, i, NULL) : eng_head_params(d, i, NULL);
        nl += ce - cs;
        e->chunks[c].l1 = nl;
        e->chunks[c].l0 = cs; /* chain start, fixed below */
    }
    bool shadow = p > 1 && e->last_stage && !d->untied;
    e->nl = nl + (shadow ? 1 : 0);
    np += shadow ? 1 : 0;
    e->layers = calloc((size_t)e->nl, sizeof *e->layers);
    e->params = calloc((size_t)np + 1, sizeof *e->params);
    if (!e->layers || !e->params)
        return WHALE_ENOMEM;
    int k = 0, li = 0, embed = -1;
    for (int c = 0; c < v; c++) {
        int cs = e->chunks[c].l0, n = e->chunks[c].l1 - (c ? e->chunks[c - 1].l1 : 0);
        e->chunks[c].l0 = li;
        for (int i = cs; i < cs + n; i++, li++) {
            struct eng_layer *l = &e->layers[li];
            l->index = i;
            l->d = d;
            l->chunk = c;
            l->params = &e->params[k];
            if (i == 0) {
                l->ops = &eng_embed_ops;
                snprintf(l->name, sizeof l->name, "embed");
                l->nparams = eng_embed_params(d, i, l->params);
                embed = li;
            } else if (i <= d->L) {
                l->ops = &eng_block_ops;
                snprintf(l->name, sizeof l->name, "h.%d", i - 1);
                l->nparams = eng_block_params(d, i, l->params);
            } else {
                l->ops = &eng_head_ops;
                snprintf(l->name, sizeof l->name, "head");
                l->nparams = eng_head_params(d, i, l->params);
            }
            k += l->nparams;
        }
    }
    e->shadow = -1;
    if (shadow) {
        /* wte only: declared as the embedding declares it, same name, same init */
        struct eng_layer *l = &e->layers[li];
        struct eng_param tmp[2];
        eng_embed_params(d, 0, tmp);
        l->index = 0;
        l->d = d;
        l->chunk = -1;
        l->ops = &eng_embed_ops;
        snprintf(l->name, sizeof l->name, "wte (tied copy)");
        l->params = &e->params[k];
        l->params[0] = tmp[0];
        l->nparams = 1;
        k += 1;
        e->shadow = embed = li;
    }
    for (int i = 0; i < e->nl; i++)
        if (e->layers[i].ops == &eng_head_ops && !d->untied)
            e->layers[i].tied = &e->layers[embed];
    e->np = k;
    return 0;
}

static bool tied_alone(const whale_engine *e, int li)
{
    return e->grp.pp.size > 1 && e->layers[li].index == 0 && !e->d.untied;
}

/* Group layers into buckets (in forward order) and lay out the flat space. */
/* Elements of layer li in its dense bucket (expert parameters apart). */
static size_t layer_dense_numel(const whale_engine *e, int li)
{
    size_t n = 0;
    for (int p = 0; p < e->layers[li].nparams; p++)
        if (!e->layers[li].params[p].expert)
            n += e->layers[li].params[p].numel;
    return n;
}

static bool layer_has_experts(const whale_engine *e, int li)
{
    for (int p = 0; p < e->layers[li].nparams; p++)
        if (e->layers[li].params[p].expert)
            return true;
    return false;
}

/* EP > 1: after each dense bucket, one expert bucket per layer of it that
 * holds expert parameters (l0 = l1 - 1 = that layer). Those are reduced and
 * sharded over the expert-data-parallel group: the ranks holding the same
 * experts. */
static int add_expert_buckets(whale_engine *e, int *nb)
{
    int nx = 0;
    for (int li = 0; li < e->nl; li++)
        nx += layer_has_experts(e, li);
    for (int li = 0; li < e->nl; li++)
        e->layers[li].xbucket = -1;
    if (!nx)
        return 0;
    struct eng_bucket *all = calloc((size_t)(*nb + nx), sizeof *all);
    if (!all)
        return WHALE_ENOMEM;
    int k = 0;
    for (int b = 0; b < *nb; b++) {
        all[k++] = e->buckets[b];
        for (int li = e->buckets[b].l0; li < e->buckets[b].l1; li++) {
            if (!layer_has_experts(e, li))
                continue;
            all[k] = (struct eng_bucket){ .l0 = li, .l1 = li + 1, .chunk = e->layers[li].chunk,
                                          .expert = true, .comm = &e->grp.edp };
            k++;
        }
    }
    free(e->buckets);
    e->buckets = all;
    *nb = k;
    return 0;
}

static int build_buckets(whale_engine *e)
{
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
        size_t n = layer_dense_numel(e, lo);
        /* buckets never span chunks (each chunk's backward finishes its own)
         * and, with PP, the layer holding wte stays alone (its reduction waits
         * for the tied-embedding sum) */
        bool alone = tied_alone(e, lo);
        while (!alone && lo > 0 && n < cap && e->layers[lo - 1].chunk == e->layers[lo].chunk &&
               !tied_alone(e, lo - 1)) {
            size_t m = layer_dense_numel(e, lo - 1);
            if (n + m > cap && n > 0)
                break;
            n += m;
            lo--;
        }
        e->buckets[nb].l0 = lo;
        e->buckets[nb].l1 = hi;
        e->buckets[nb].chunk = e->layers[lo].chunk;
        e->buckets[nb].tied_defer = alone;
        nb++;
        hi = lo;
    }
    /* reverse into forward order */
    for (int i = 0; i < nb / 2; i++) {
        struct eng_bucket t = e->buckets[i];
        e->buckets[i] = e->buckets[nb - 1 - i];
        e->buckets[nb - 1 - i] = t;
    }
    for (int b = 0; b < nb; b++)
        e->buckets[b].comm = &e->dp;
    int rc = add_expert_buckets(e, &nb);
    if (rc)
        return rc;
    e->nb = nb;
    size_t flat = 0, shard = 0;
    for (int b = 0; b < nb; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        const size_t align = 16 * (size_t)bk->comm->size;
        bk->flat = flat;
        for (int li = bk->l0; li < bk->l1; li++) {
            struct eng_layer *l = &e->layers[li];
            if (bk->expert) {
                l->xbucket = b;
                l->flat_xbegin = flat;
            } else {
                l->bucket = b;
                l->flat_begin = flat;
            }
            for (int p = 0; p < l->nparams; p++) {
                if (l->params[p].expert != bk->expert)
                    continue;
                l->params[p].flat = flat;
                flat += l->params[p].numel;
            }
            if (bk->expert)
                l->flat_xend = flat;
            else
                l->flat_end = flat;
        }
        size_t n = flat - bk->flat;
        n = (n + align - 1) / align * align;
        bk->n = n;
        bk->shard_off = shard;
        shard += n / (size_t)bk->comm->size;
        flat = bk->flat + n;
    }
    e->P = flat;
    e->S = shard;
    for (int c = 0; c < e->nchunks; c++) {
        e->chunks[c].b0 = e->nb;
        e->chunks[c].b1 = 0;
        for (int b = 0; b < nb; b++)
            if (e->buckets[b].chunk == c) {
                e->chunks[c].b0 = b < e->chunks[c].b0 ? b : e->chunks[c].b0;
                e->chunks[c].b1 = b + 1;
            }
    }
    return 0;
}

static void bind_layers(whale_engine *e)
{
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        /* 16-bit params: w is bound per bucket to its widened copy (eng_w_acquire) */
        l->w = e->W && !eng_lp(e) ? e->W + l->flat_begin : NULL;
        l->g = e->G ? e->G + l->flat_begin : NULL;
        l->wx = e->W && !eng_lp(e) ? e->W + l->flat_xbegin : NULL;
        l->gx = e->G ? e->G + l->flat_xbegin : NULL;
    }
}

/* Copies the part of parameter p (values v, p->numel) of bucket bk that
 * falls in this rank's shard into sh (S, bucket-shard layout) and, when
 * sh16, its 16-bit rounding into sh16. */
static void put_shard(whale_engine *e, const struct eng_bucket *bk, const struct eng_param *p,
                      const float *v, float *sh, uint16_t *sh16)
{
    size_t lo, hi, a, z2;
    eng_bucket_range(e, bk, ENG_RANGE_SHARD, &lo, &hi);
    if (!eng_param_clip(p, lo, hi, &a, &z2))
        return;
    if (sh)
        memcpy(sh + bk->shard_off + (a - lo), v + (a - p->flat), (z2 - a) * sizeof(float));
    if (sh16)
        eng_lp_store(e, sh16 + bk->shard_off + (a - lo), v + (a - p->flat), z2 - a);
}

static float *aalloc(whale_engine *e, enum whale_mem_cat cat, size_t n)
{
    return whale_arena_alloc(e->arena, cat, n * sizeof(float), 1);
}

static void afree(whale_engine *e, enum whale_mem_cat cat, float *p, size_t n)
{
    whale_arena_free(e->arena, cat, p, n * sizeof(float));
}

/* 16-bit params (n elements), zeroed */
static uint16_t *aalloc16(whale_engine *e, size_t n)
{
    return whale_arena_alloc(e->arena, WHALE_MEM_PARAM, n * sizeof(uint16_t), 1);
}

/* Persistent buffers: weights, gradients, moments in the arena, or (offload)
 * moments and master weights in the host tier, laid out alike. */
static int alloc_state(whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    const bool lp = eng_lp(e);
    size_t P = e->P, S = e->S;
    const bool off_opt = e->off.mode >= WHALE_OFFLOAD_OPTIMIZER;
    const bool off_par = e->off.mode == WHALE_OFFLOAD_PARAMS;
    /* fp32: W (P) or Wsh (S) are the weights. 16-bit: W16 (P) or W16sh (S)
     * are, and the fp32 master is W (ZeRO 0: P) or Wsh (ZeRO 1-3: the shard),
     * accounted as optimizer state */
    if (!lp && z < 3 && !(e->W = aalloc(e, WHALE_MEM_PARAM, P)))
        return WHALE_ENOMEM;
    if (!lp && z == 3)
        e->Wsh = off_par ? e->off.hW : aalloc(e, WHALE_MEM_PARAM, S);
    if (!lp && z == 3 && !e->Wsh)
        return WHALE_ENOMEM;
    /* 16-bit with offload: the master lives in the host tier (same layout) */
    if (lp && z == 0 && !(e->W = off_opt ? e->off.hW : aalloc(e, WHALE_MEM_OPTIM, P)))
        return WHALE_ENOMEM;
    if (lp && z >= 1 && !(e->Wsh = off_opt ? e->off.hW : aalloc(e, WHALE_MEM_OPTIM, S)))
        return WHALE_ENOMEM;
    if (lp && z < 3 && !(e->W16 = aalloc16(e, P)))
        return WHALE_ENOMEM;
    if (lp && z == 3 && !(e->W16sh = off_par ? e->off.h16 : aalloc16(e, S)))
        return WHALE_ENOMEM;
    if (z < 2 && !(e->G = aalloc(e, WHALE_MEM_GRAD, P)))
        return WHALE_ENOMEM;
    if (z >= 2 && !(e->Gsh = aalloc(e, WHALE_MEM_GRAD, S)))
        return WHALE_ENOMEM;
    size_t mv = z == 0 ? P : S;
    if (off_opt) {
        e->M = e->off.hM;
        e->V = e->off.hV;
    } else if (!(e->M = aalloc(e, WHALE_MEM_OPTIM, mv)) || !(e->V = aalloc(e, WHALE_MEM_OPTIM, mv)))
        return WHALE_ENOMEM;
    /* the allgather's own-shard copy: 16-bit params need half of it */
    e->agtmp_floats = lp ? S / 2 + 1 : S;
    if ((z == 1 || z == 2) && (e->dp.size > 1 || e->grp.edp.size > 1) &&
        !(e->agtmp = aalloc(e, WHALE_MEM_COMM, e->agtmp_floats)))
        return WHALE_ENOMEM;

    /* initial weights: every rank computes exactly its own elements (none
     * when the caller loads them all: the arena's memory is zeroed) */
    struct eng_pieces it;
    for (eng_pieces_init(&it, e, 0, e->cfg.skip_init ? 0 : e->nb, ENG_RANGE_ALL);
         eng_pieces_next(&it);) {
        const struct eng_param *p = it.p;
        float *tmp = malloc(p->numel * sizeof(float));
        if (!tmp)
            return WHALE_ENOMEM;
        eng_param_init(p, e->cfg.seed, tmp);
        if (e->W)
            memcpy(e->W + p->flat, tmp, p->numel * sizeof(float));
        if (e->W16)
            eng_lp_store(e, e->W16 + p->flat, tmp, p->numel);
        if (e->Wsh || e->W16sh)
            put_shard(e, it.bk, p, tmp, e->Wsh, e->W16sh);
        free(tmp);
    }
    bind_layers(e);
    e->off.resync = true; /* the host master starts as a copy of the initial weights */

    /* scratch shared by every layer pass; activations live in slots (pipe.c) */
    size_t sc = 0;
    for (int i = 0; i < e->nl; i++) {
        size_t n = e->layers[i].ops->scratch_floats(&e->layers[i]);
        sc = n > sc ? n : sc;
    }
    e->scratch_floats = sc;
    if (!(e->scratch = aalloc(e, WHALE_MEM_ACT, sc)))
        return WHALE_ENOMEM;
    return 0;
}

static void free_state(whale_engine *e)
{
    if (!e->arena)
        return;
    const int z = e->cfg.zero_stage;
    const enum whale_mem_cat wcat = eng_lp(e) ? WHALE_MEM_OPTIM : WHALE_MEM_PARAM;
    size_t P = e->P, S = e->S, mv = z == 0 ? P : S;
    if (e->W != e->off.hW)
        afree(e, wcat, e->W, P);
    if (e->Wsh != e->off.hW)
        afree(e, wcat, e->Wsh, S);
    whale_arena_free(e->arena, WHALE_MEM_PARAM, e->W16, P * sizeof(uint16_t));
    if (e->W16sh != e->off.h16)
        whale_arena_free(e->arena, WHALE_MEM_PARAM, e->W16sh, S * sizeof(uint16_t));
    afree(e, WHALE_MEM_GRAD, e->G, P);
    afree(e, WHALE_MEM_GRAD, e->Gsh, S);
    if (e->M != e->off.hM) {
        afree(e, WHALE_MEM_OPTIM, e->M, mv);
        afree(e, WHALE_MEM_OPTIM, e->V, mv);
    }
    afree(e, WHALE_MEM_COMM, e->agtmp, e->agtmp_floats);
    afree(e, WHALE_MEM_ACT, e->scratch, e->scratch_floats);
    e->W = e->Wsh = e->G = e->Gsh = e->M = e->V = e->agtmp = e->scratch = NULL;
    e->W16 = e->W16sh = NULL;
}

/* Degrees must divide what they split; logged with the reason. */
static int parallel_check(const struct whale_engine_config *c, int tp, int pp)
{
    const struct whale_model_desc *m = &c->model;
    if (c->tp > 0 && c->tp != tp) {
        whale_error("the configuration asks for TP=%d but the tensor-parallel group has %d ranks",
                    c->tp, tp);
        return WHALE_EINVAL;
    }
    if (c->pp > 0 && c->pp != pp) {
        whale_error("the configuration asks for PP=%d but the pipeline group has %d ranks", c->pp,
                    pp);
        return WHALE_EINVAL;
    }
    if (m->heads % tp || m->ffn % tp) {
        whale_error("model %s: Heads=%d and FFN=%d must be divisible by the tensor-parallel "
                    "degree TP=%d", m->name, m->heads, m->ffn, tp);
        return WHALE_EINVAL;
    }
    if (c->seqpar && tp > 1 && (c->micro_batch * c->seq) % tp) {
        whale_error("sequence parallelism splits micro-batch x sequence = %d x %d rows over "
                    "TP=%d ranks: not a multiple; change --micro-batch or --seq, or drop --seqpar",
                    c->micro_batch, c->seq, tp);
        return WHALE_EINVAL;
    }
    int mrc = eng_moe_check(c, tp);
    if (mrc)
        return mrc;
    if (m->vocab < tp) {
        whale_error("model %s: Vocab=%d too small for TP=%d", m->name, m->vocab, tp);
        return WHALE_EINVAL;
    }
    int v = c->interleave > 0 ? c->interleave : 1;
    if (c->schedule != WHALE_SCHED_INTERLEAVED && v != 1) {
        whale_error("interleave=%d needs the interleaved schedule (schedule is %s)", v,
                    whale_schedule_name(c->schedule));
        return WHALE_EINVAL;
    }
    if (c->schedule == WHALE_SCHED_INTERLEAVED && c->grad_accum % pp) {
        whale_error("the interleaved schedule needs micro-batches per step (%d) to be a multiple "
                    "of PP (%d)", c->grad_accum, pp);
        return WHALE_EINVAL;
    }
    return 0;
}

int eng_create_groups(const struct whale_engine_config *c, whale_ctx *ctx,
                      const struct eng_groups *g, whale_engine **out)
{
    *out = NULL;
    struct eng_groups one;
    memset(&one, 0, sizeof one);
    whale_par_comm_from_group(&one.tp, NULL);
    whale_par_comm_from_group(&one.pp, NULL);
    whale_par_comm_from_group(&one.emb, NULL);
    if (!g)
        g = &one;
    int dps = g->dp.size > 1 ? g->dp.size : 1;
    int rc = cfg_check(c, dps);
    if (rc || (rc = parallel_check(c, g->tp.size, g->pp.size)) ||
        (rc = eng_moe_ep_check(c, g->ep)))
        return rc;
    bool flush = true;   /* subnormals: kernels.h, k_flush_denormals */
    if ((rc = whale_env_bool("WHALE_FLUSH_DENORMALS", true, &flush)))
        return rc;
    whale_engine *e = calloc(1, sizeof *e);
    if (!e)
        return WHALE_ENOMEM;
    e->cfg = *c;
    e->ctx = ctx;
    e->grp = *g;
    if (g->dp.size > 1)
        e->dp = g->dp;
    else
        e->dp.size = 1;
    if (e->grp.edp.size < 1) /* no expert-data-parallel group: the rank alone */
        whale_par_comm_from_group(&e->grp.edp, NULL);
    e->nchunks = c->interleave > 0 ? c->interleave : 1;
    e->shadow = -1;
    e->lp = c->precision == WHALE_PREC_BF16 ? WHALE_BFLOAT16
          : c->precision == WHALE_PREC_FP16 ? WHALE_FLOAT16 : WHALE_FLOAT32;
    const struct whale_model_desc *m = &c->model;
    const int tp = g->tp.size;
    /* the vocabulary split rounds up (GPT-2's 50257 over any TP): the last
     * TP rank may hold fewer rows, global shapes stay the model's */
    int64_t v0, vl;
    eng_split(m->vocab, tp, g->tp.rank, true, &v0, &vl);
    e->d = (struct eng_dims){
        .B = c->micro_batch, .T = c->seq, .C = m->hidden, .NH = m->heads / tp,
        .hd = m->hidden / m->heads, .F = m->ffn / tp, .V = (int)vl, .Vg = m->vocab,
        .v0 = (int)v0, .Ctp = m->hidden / tp, .L = m->layers, .tp = tp, .tp_rank = g->tp.rank,
    };
    eng_arch_dims(m, &e->d);
    e->d.ep = g->ep > 1 ? g->ep : 1;
    e->d.ep_rank = g->ep > 1 ? g->ep_rank : 0;
    e->d.ep_group = g->ep > 1 ? g->ep_group : NULL;
    e->d.sp = c->seqpar && tp > 1;
    e->d.Ns = e->d.sp ? c->micro_batch * c->seq / tp : c->micro_batch * c->seq;
    e->d.r0 = e->d.sp ? g->tp.rank * e->d.Ns : 0;
    e->d.xblock |= e->d.sp; /* block_x.c runs the GPT-2 block with SP too */
    int share = count_threads_default();
    whale_host_set_threads(c->threads > 0 ? c->threads : share);
    whale_host_flush_denormals(flush);
    /* measured on 2 cores, DP 2: 2 threads per rank 0.28-0.40 s a step, 1
     * thread 0.23-0.28 s (contrib/bench/plan-calibration.sh dp2t2, dp2) */
    if (c->threads > share && (!ctx || whale_rank(ctx) <= 0))
        whale_warn("%d threads per rank exceed a rank's share of the cores here (%d): the "
                   "ranks' threads time-share cores and wait for each other at every kernel; "
                   "steps are usually slower than with --threads %d", c->threads, share, share);
    int *blocks = calloc((size_t)(g->pp.size * e->nchunks), sizeof *blocks);
    if (!blocks)
        rc = WHALE_ENOMEM;
    e->off.mode = c->offload;
    e->off.prefetch = c->offload_prefetch > 0 ? c->offload_prefetch : 1;
    if (!rc)
        rc = whale_env_bool("WHALE_ZERO_LATE_GATHER", false, &e->late_gather);
    if (!rc)
        rc = eng_dev_open(e, c);
    if (!rc) {
        struct whale_arena_backend ab;
        eng_dev_arena_backend(e, &ab);
        rc = whale_arena_create(c->device_mem, &ab, &e->arena);
    }
    /* the EP window counts in the arena's communication category: it is
     * opened once the arena exists */
    if (rc || (rc = eng_moe_ep_win_open(&e->d, e->arena)) || (rc = eng_layout(e, blocks)) ||
        (rc = build_layers(e, blocks)) ||
        (rc = build_buckets(e)) || (rc = eng_off_init(e)) || (rc = alloc_state(e)) ||
        (rc = eng_pipe_init(e))) {
        struct whale_arena_stats as = { 0 };
        if (e->arena)
            whale_arena_stats(e->arena, &as);
        if (rc == WHALE_ENOMEM && as.failed) {
            whale_error("model %s (%lld parameters) does not fit the device memory budget of "
                        "%.2f MiB per rank with ZeRO %d, DP %d, offload %s: %.2f MiB were "
                        "already placed (weights %.2f, gradients %.2f, optimizer %.2f, "
                        "activations %.2f MiB)%s", m->name,
                        (long long)whale_model_desc_params(m), (double)as.budget / (1 << 20),
                        c->zero_stage, e->dp.size, whale_offload_name(c->offload),
                        (double)as.in_use / (1 << 20),
                        (double)as.cat_in_use[WHALE_MEM_PARAM] / (1 << 20),
                        (double)as.cat_in_use[WHALE_MEM_GRAD] / (1 << 20),
                        (double)as.cat_in_use[WHALE_MEM_OPTIM] / (1 << 20),
                        (double)as.cat_in_use[WHALE_MEM_ACT] / (1 << 20),
                        c->offload == WHALE_OFFLOAD_NONE
                            ? "; --offload optimizer (or params with ZeRO 3) moves state to host memory"
                            : "");
            rc = WHALE_ENOFIT;
        } else if (rc == WHALE_ENOMEM)
            whale_error("out of memory building model %s (%lld parameters)", m->name,
                        (long long)whale_model_desc_params(m));
        free(blocks);
        e->grp.emb_group = NULL; /* the caller still owns its groups */
        e->grp.edp_group = NULL;
        e->grp.ep_group = NULL;
        whale_engine_destroy(e);
        return rc;
    }
    if (g->pp.size > 1 || g->tp.size > 1) {
        char lay[256] = "";
        size_t u = 0;
        for (int s = 0; s < g->pp.size * e->nchunks && u < sizeof lay - 8; s++)
            u += (size_t)snprintf(lay + u, sizeof lay - u, "%s%d", s ? "," : "", blocks[s]);
        whale_debug("engine: TP %d (rank %d), PP %d (rank %d) x %d chunks, blocks per virtual "
                    "stage [%s], schedule %s", tp, g->tp.rank, g->pp.size, g->pp.rank,
                    e->nchunks, lay, whale_schedule_name(c->schedule));
    }
    free(blocks);
    whale_loss_scaler_init(&e->scaler, c->loss_scaling, c->init_scale, c->scale_growth_interval);
    e->sched = (struct whale_lr_schedule){ .lr_max = c->lr, .lr_min = c->min_lr,
                                           .warmup = c->warmup_steps, .total = c->total_steps };
    e->adam = (struct whale_adamw){ .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2,
                                    .eps = c->eps, .weight_decay = c->weight_decay };
    whale_debug("engine: %d layers, %d buckets, %zu flat params (padded), shard %zu, ZeRO %d, "
                "DP %d, %d threads, offload %s", e->nl, e->nb, e->P, e->S, c->zero_stage,
                e->dp.size, whale_host_threads(), whale_offload_name(c->offload));
    *out = e;
    return 0;
}

int eng_create(const struct whale_engine_config *c, whale_ctx *ctx, struct whale_par_comm *dp,
               whale_engine **out)
{
    struct eng_groups g;
    memset(&g, 0, sizeof g);
    if (dp)
        g.dp = *dp;
    whale_par_comm_from_group(&g.tp, NULL);
    whale_par_comm_from_group(&g.pp, NULL);
    whale_par_comm_from_group(&g.emb, NULL);
    return eng_create_groups(c, ctx, &g, out);
}

int whale_engine_create(const struct whale_engine_config *c, whale_ctx *ctx, whale_engine **out)
{
    struct eng_groups g;
    *out = NULL;
    memset(&g, 0, sizeof g);
    whale_par_comm_from_group(&g.tp, NULL);
    whale_par_comm_from_group(&g.pp, NULL);
    whale_par_comm_from_group(&g.emb, NULL);
    if (ctx) {
        int rc = eng_groups_from_ctx(ctx, &g);
        if (rc)
            return rc;
    }
    int rc = eng_create_groups(c, ctx, &g, out);
    if (rc)
        eng_groups_free(&g);
    return rc;
}

void whale_engine_destroy(whale_engine *e)
{
    if (!e)
        return;
    /* a step that failed may leave collectives in flight into the buckets'
     * buffers: they complete (with the failure) before the buffers go (an
     * elastic run destroys the engine and goes on) */
    for (int b = 0; b < e->nb; b++) {
        if (e->buckets[b].greq)
            e->buckets[b].comm->wait(e->buckets[b].comm, e->buckets[b].greq);
        if (e->buckets[b].wreq)
            e->buckets[b].comm->wait(e->buckets[b].comm, e->buckets[b].wreq);
        if (e->buckets[b].agreq)
            e->buckets[b].comm->wait(e->buckets[b].comm, e->buckets[b].agreq);
    }
    eng_off_quiesce(e);
    for (int b = 0; b < e->nb && e->arena; b++) {
        struct eng_bucket *bk = &e->buckets[b];
        whale_arena_free(e->arena, WHALE_MEM_GRAD, bk->gbuf, bk->n * sizeof(float));
        whale_arena_free(e->arena, WHALE_MEM_PARAM, bk->wbuf, bk->n * sizeof(float));
        whale_arena_free(e->arena, WHALE_MEM_GRAD, bk->rs_tmp, bk->n / bk->comm->size * sizeof(float));
        whale_arena_free(e->arena, WHALE_MEM_PARAM, bk->wbuf16, bk->n / 2 * sizeof(float));
    }
    eng_pipe_free(e);
    free_state(e);
    eng_off_free(e);
    free(e->buckets);
    free(e->chunks);
    eng_moe_ep_win_close(&e->d, e->arena);
    eng_groups_free(&e->grp);
    free(e->layers);
    free(e->params);
    whale_arena_destroy(e->arena);
    eng_dev_close(e);
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
    o->act_bytes = (int64_t)l->ops->act_floats(l) * (eng_lp(e) ? 2 : 4);
    o->boundary_bytes = l->ops == &eng_head_ops ? 0 : (int64_t)e->d.Ns * e->d.C * 4;
    return 0;
}

void whale_engine_memory(const whale_engine *e, struct whale_engine_memory *m)
{
    const int z = e->cfg.zero_stage;
    memset(m, 0, sizeof *m);
    const bool lp = eng_lp(e);
    /* 16-bit params: the weights take 2 bytes, the fp32 master joins the
     * optimizer state (sharded like the moments from ZeRO 1 on); gradients
     * accumulate in fp32. Offloaded state is not in the arena (host_bytes). */
    m->param_bytes = e->off.mode == WHALE_OFFLOAD_PARAMS
                         ? 0 : (int64_t)(z < 3 ? e->P : e->S) * (lp ? 2 : 4);
    m->grad_bytes = (int64_t)(z < 2 ? e->P : e->S) * 4;
    m->optim_bytes = e->off.mode ? 0 : (lp ? 3 : 2) * (int64_t)(z == 0 ? e->P : e->S) * 4;
    struct whale_arena_stats as;
    whale_arena_stats(e->arena, &as);
    m->arena_in_use = as.in_use;
    m->arena_peak = as.peak;
    m->arena_budget = as.budget;
    for (int c = 0; c < WHALE_MEM_CAT_COUNT_ && c < 5; c++)
        m->arena_cat_peak[c] = as.cat_peak[c];
    m->host_bytes = eng_off_host_bytes(e);
    m->scratch_bytes = e->scratch_peak + (e->agtmp ? (int64_t)e->S * (lp ? 2 : 4) : 0) +
                       (int64_t)e->sv32_floats * 4;
    m->act_bytes = e->act_bytes;
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

int whale_engine_set_batch(whale_engine *e, int grad_accum, int global_batch)
{
    /* ZeRO 2/3 reduce at every micro-batch (the count must stay equal over
     * the replicas) and a pipeline's schedule spans its stages: there the
     * engine is built again instead (whale_engine_reshape) */
    if (e->grp.pp.size > 1 || e->cfg.zero_stage >= 2) {
        whale_error("the micro-batches per step change between steps only at PP = 1 and "
                    "ZeRO 0/1 (here PP = %d, ZeRO %d)", e->grp.pp.size, e->cfg.zero_stage);
        return WHALE_EINVAL;
    }
    if (grad_accum < 1 ||
        (global_batch && (int64_t)e->cfg.micro_batch * grad_accum > global_batch)) {
        whale_error("%d micro-batches of %d out of range for a global batch of %d", grad_accum,
                    e->cfg.micro_batch, global_batch);
        return WHALE_ERANGE;
    }
    if (grad_accum != e->cfg.grad_accum) {
        int rc = eng_pipe_set_accum(e, grad_accum);
        if (rc)
            return rc;
        /* the tokens' backend copy is sized by the count: allocated again */
        if (e->bk)
            whale_mem_free(e->bk, e->tok_dev);
        e->tok_dev = NULL;
    }
    e->cfg.global_batch = global_batch;
    return 0;
}

void whale_engine_set_phase_hook(whale_engine *e, whale_engine_phase_fn fn, void *user)
{
    e->phase_fn = fn;
    e->phase_user = user;
}

void whale_engine_inject_overflow(whale_engine *e)
{
    e->inject_overflow = true;
}

/* ---- tensor enumeration for checkpoints -------------------------------------- */


/* Where the pieces of one kind live: fp32 base or 16-bit base, full (P)
 * or sharded (S) layout. 16-bit params: PARAM is W16 / W16sh (16-bit),
 * MASTER is W (ZeRO 0) or the shard Wsh (fp32). */
static void kind_base(const whale_engine *e, int kind, float **f32, uint16_t **b16,
                      bool *sharded)
{
    const int z = e->cfg.zero_stage;
    const bool lp = eng_lp(e);
    *f32 = NULL;
    *b16 = NULL;
    switch (kind) {
    case WHALE_TENSOR_PARAM:
        *sharded = z == 3;
        if (lp)
            *b16 = z == 3 ? e->W16sh : e->W16;
        else
            *f32 = z == 3 ? e->Wsh : e->W;
        break;
    case WHALE_TENSOR_MASTER:
        *sharded = z >= 1;
        *f32 = z == 0 ? e->W : e->Wsh;
        break;
    default:
        *sharded = z >= 1;
        *f32 = kind == WHALE_TENSOR_ADAM_M ? e->M : e->V;
        break;
    }
}

static int walk(whale_engine *e, whale_tensor_fn fn, void *user);

int whale_engine_tensors(whale_engine *e, whale_tensor_fn fn, void *user)
{
    return whale_engine_tensors_then(e, fn, NULL, user);
}

int whale_engine_tensors_then(whale_engine *e, whale_tensor_fn fn, whale_tensor_done_fn done,
                              void *user)
{
    /* ZeRO 1/2: the last step's gathers of the updated weights have landed
     * (a save reads them, a restore overwrites them) */
    int grc = eng_w_settle_all(e);
    if (grc)
        return grc;
    /* offload: moves finished, and the caller may write the pieces (restore):
     * the host master is refreshed from the weights before the next update */
    eng_off_quiesce(e);
    e->off.resync = true;
    int wrc = eng_off_walk_begin(e); /* remote tier: the moments, here for the walk */
    if (wrc) {
        eng_off_walk_end(e);
        return wrc;
    }
    int rc = walk(e, fn, user);
    if (!rc && done)
        rc = done(user); /* transient pieces are still live: the walk has not ended */
    wrc = eng_off_walk_end(e);
    return rc ? rc : wrc;
}

static int walk(whale_engine *e, whale_tensor_fn fn, void *user)
{
    /* fixed order: param, adam_m, adam_v, then (16-bit params only) master */
    const int nkinds = eng_lp(e) ? 4 : 3;
    static const int order[4] = { WHALE_TENSOR_PARAM, WHALE_TENSOR_ADAM_M, WHALE_TENSOR_ADAM_V,
                                  WHALE_TENSOR_MASTER };
    for (int ki = 0; ki < nkinds; ki++) {
        const int kind = order[ki];
        float *f32;
        uint16_t *b16;
        bool sharded;
        kind_base(e, kind, &f32, &b16, &sharded);
        /* sharded kinds: this rank's 1/DP of each bucket (DP 1: all of it,
         * laid out by bucket); full kinds: every parameter whole */
        struct eng_pieces it;
        for (eng_pieces_init(&it, e, 0, e->nb, sharded ? ENG_RANGE_SHARD : ENG_RANGE_ALL);
             eng_pieces_next(&it);) {
            const struct eng_param *p = it.p;
            struct whale_tensor_piece t;
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "%s", p->name);
            t.kind = kind;
            t.dtype = b16 ? e->lp : WHALE_FLOAT32;
            t.ndim = p->ndim;
            for (int k = 0; k < p->ndim; k++) {
                t.global_shape[k] = p->gshape[k];
                t.tp_offset[k] = p->off[k];
                t.tp_shape[k] = p->shape[k];
            }
            bool tp_writer = p->split != WHALE_SPLIT_NONE || e->d.tp_rank == 0;
            /* the last stage's wte copy mirrors the first stage's */
            if (e->shadow >= 0 && it.l == &e->layers[e->shadow])
                tp_writer = false;
            size_t off = sharded ? it.bk->shard_off + (it.a - it.lo) : it.a;
            t.flat_begin = (int64_t)(it.a - p->flat);
            t.flat_end = (int64_t)(it.z - p->flat);
            /* one writer per element: rank 0 of the bucket's group (DP, or
             * for experts the ranks holding the same experts), or each
             * rank for its shard */
            const struct whale_par_comm *gc = it.bk->comm;
            t.writer = tp_writer && (gc->size <= 1 || gc->rank == 0 || (sharded && gc->size > 1));
            t.data = b16 ? (void *)(b16 + off) : (void *)(f32 + off);
            t.expert = p->expert;
            t.transient = eng_off_walk_owns(e, b16 ? (const void *)b16 : (const void *)f32);
            int rc = fn(&t, user);
            if (rc)
                return rc;
        }
    }
    return 0;
}

enum whale_precision whale_engine_precision(const whale_engine *e)
{
    return e->cfg.precision;
}

double whale_sgemm_peak_gflops(const whale_engine *e)
{
    (void)e;
    return whale_blas_sgemm_peak_gflops();
}
