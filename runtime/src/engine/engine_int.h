/* Engine internals shared by its source files and the unit tests. */
#ifndef ENGINE_INT_H
#define ENGINE_INT_H

#include "ecomm.h"
#include "layer.h"
#include "trace.h"
#include "whale/engine.h"
#include "whale/optim.h"

/* A gradient bucket: contiguous layers [l0, l1) whose parameters occupy the
 * flat range [flat, flat + n) (n padded to a multiple of 16 * DP). Rank r
 * owns [flat + r*n/DP, flat + (r+1)*n/DP) of it under ZeRO, stored at
 * shard_off in the shard arrays. */
struct eng_bucket {
    int l0, l1;
    size_t flat, n, shard_off;
    int pending;        /* layers whose backward has not finished this micro-batch */
    bool deferred;      /* holds a tied weight: reduced after the pipeline flush */
    float *gbuf;        /* ZeRO 2/3: full-size gradient scratch while in backward */
    void *greq;         /* gradient reduction in flight */
    double g_t0;        /* when it was issued (trace) */
    float *rs_tmp;      /* ZeRO 2/3 accumulation target for micro-batches > 0 */
    float *wbuf;        /* ZeRO 3: gathered weights */
    void *wreq;
    int wref;
};

struct whale_engine {
    struct whale_engine_config cfg;
    struct eng_dims d;
    whale_ctx *ctx;
    struct eng_comm dp;      /* dp.size == 1: no communication */
    whale_group *tp_group;   /* NULL when TP == 1 */
    whale_group *world_group;/* NULL for a world of one (or the test backend) */

    /* pipeline: this stage holds model layers [first_layer, first_layer + nl) */
    int pp, pp_rank;
    whale_group *pp_group;
    whale_group *emb_group;  /* first + last stage (tied wte), NULL otherwise */
    bool has_embed, has_head;
    int tied_bucket;         /* bucket holding the wte the head reads, -1: head has a copy */
    const struct eng_param *tied_param; /* wte here when PP > 1 (first or last stage) */
    int nslots;              /* micro-batches in flight on this stage */
    int nbnd;                /* local layers with an output buffer */
    size_t saved_per_slot;
    float *xin;              /* received stage inputs, one (N,C) per slot */
    whale_req **fsend;       /* per slot: forward activation send in flight */
    whale_req *bsend;        /* backward gradient send in flight */
    bool own_comm;

    int nl;                  /* layers of this stage */
    struct eng_layer *layers;
    struct eng_param *params;
    int np;
    int nb;
    struct eng_bucket *buckets;
    size_t P;                /* padded flat size */
    size_t S;                /* shard size = P / DP */

    float *W;                /* ZeRO 0-2: full weights (P); ZeRO 3: NULL */
    float *Wsh;              /* ZeRO 3: weight shard (S) */
    float *G;                /* ZeRO 0-1: full gradients (P) */
    float *Gsh;              /* ZeRO 2-3: gradient shard (S) */
    float *M, *V;            /* ZeRO 0: (P); ZeRO 1-3: (S) */
    float *agtmp;            /* ZeRO 1-2: own shard copy for the allgather (S) */

    /* activations of one micro-batch */
    float *xb;               /* layer outputs: nl-1 boundaries of (N,C) */
    float *saved;            /* per-layer saved areas */
    size_t *saved_off;
    float *scratch;
    float *dstream;          /* (N,C) */
    float *att_shared;       /* selective recomputation: (B,NH,T,T) */
    size_t act_floats;

    /* state */
    int64_t step, adam_t, samples;
    uint64_t rng_counter;
    struct whale_loss_scaler scaler;
    struct whale_lr_schedule sched;
    struct whale_adamw adam;
    bool inject_overflow;

    struct eng_trace trace; /* WHALE_TRACE: trace.f != NULL */

    /* accounting */
    int64_t scratch_now, scratch_peak;
    int inflight;
    double busy_since, t_comm, t_wait;
};

/* Create over an explicit DP backend (NULL: single rank). Tests use it with
 * an in-process backend. */
int eng_create(const struct whale_engine_config *c, whale_ctx *ctx, struct eng_comm *dp,
               whale_engine **out);

double eng_now(void);

#endif
