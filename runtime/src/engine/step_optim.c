/* The optimizer's part of a step on this rank's range: the global gradient
 * norm's local sum and inf/NaN check, AdamW in one backend call (per
 * bucket under ZeRO 1/2), the ZeRO 1/2 allgather of the updated shards,
 * and zeroing the gradients. */
#include "step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"

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
/* The sums of squares of every counted piece in one backend call (on cpu
 * one parallel region, not one per tensor); NULL when that call cannot be
 * made (no memory): the caller sums piece by piece. */
static double *piece_sumsqs(whale_engine *e)
{
    int np = 0;
    struct eng_pieces it;
    for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_SHARD); eng_pieces_next(&it);)
        np += counts_in_norm(e, it.l, it.p);
    const float **g = malloc(((size_t)np + 1) * sizeof *g);
    int64_t *n = malloc(((size_t)np + 1) * sizeof *n);
    double *ss = malloc(((size_t)np + 1) * sizeof *ss);
    int k = 0;
    if (g && n && ss)
        for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_SHARD); eng_pieces_next(&it);)
            if (counts_in_norm(e, it.l, it.p)) {
                g[k] = eng_gptr(e, it.bk, it.lo, it.a);
                n[k++] = (int64_t)(it.z - it.a);
            }
    if (!g || !n || !ss || whale_k_sumsq_multi(e->bk, NULL, g, n, np, ss)) {
        free(ss);
        ss = NULL;
    }
    free(g);
    free(n);
    return ss;
}

void eng_grad_stats(whale_engine *e, double *sumsq, bool *bad)
{
    double s = 0;
    bool b = false;
    double *all = piece_sumsqs(e);
    int k = 0;
    struct eng_pieces it;
    for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_SHARD); eng_pieces_next(&it);) {
        const float *g = eng_gptr(e, it.bk, it.lo, it.a);
        const int64_t n = (int64_t)(it.z - it.a);
        /* the backend's reductions: whale_sumsq / whale_has_inf_nan on cpu */
        double ss = 0;
        bool bad1 = false, summed = counts_in_norm(e, it.l, it.p);
        if (summed && all)
            ss = all[k++];
        else if (summed && whale_k_sumsq(e->bk, NULL, g, n, &ss))
            ss = NAN; /* a failed reduction must not look like a clean gradient */
        s += ss;
        /* A finite sum of squares (no cancellation: every term is >= 0)
         * means no element is inf or NaN: skip the second pass over
         * the gradient (about 1 % of a gpt2-124m step on CPU). */
        if (!b && !(summed && isfinite(ss)) && whale_k_has_inf_nan(e->bk, NULL, g, n, &bad1))
            bad1 = true;
        b = b || bad1;
    }
    free(all);
    *sumsq = s;
    *bad = b;
}

/* AdamW over every (param, range) of buckets [k0, k1) this rank updates, in
 * ONE backend call: on cpu that is one parallel region over all tensors
 * (optim/adamw_multi.c) instead of one per parameter, on cuda one launch
 * per 32 pieces. The pieces are independent, so the bits are those of the
 * per-piece calls. */
static int adamw_buckets(whale_engine *e, float grad_mul, int k0, int k1)
{
    struct eng_pieces it;
    size_t cap = 1;
    for (eng_pieces_init(&it, e, k0, k1, ENG_RANGE_UPDATE); eng_pieces_next(&it);)
        cap++;
    struct whale_adamw_piece *pc = malloc(cap * sizeof *pc);
    if (!pc)
        return WHALE_ENOMEM;
    int np = 0;
    for (eng_pieces_init(&it, e, k0, k1, ENG_RANGE_UPDATE); eng_pieces_next(&it);) {
        size_t o = eng_mvoff(e, it.bk, it.lo, it.a);
        pc[np++] = (struct whale_adamw_piece){ .w = eng_wptr(e, it.bk, it.lo, it.a),
                                               .g = eng_gptr(e, it.bk, it.lo, it.a),
                                               .m = e->M + o, .v = e->V + o,
                                               .w16 = eng_w16ptr(e, it.bk, it.lo, it.a),
                                               .n = it.z - it.a, .decay = it.p->decay };
    }
    int rc = np ? whale_k_adamw(e->bk, NULL, &e->adam, e->adam_t, grad_mul, pc, np,
                                eng_lp(e) ? e->lp : WHALE_BFLOAT16)
                : 0;
    free(pc);
    return rc;
}

/* ZeRO 1/2 over DP > 1 without offload: the gather of a bucket's updated
 * weights can start as soon as that bucket is updated and finish while
 * later buckets update and the next forward runs (eng_w_settle waits for
 * it right before the bucket's first layer). */
static bool gather_early(const whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    return (z == 1 || z == 2) && !e->off.mode;
}

/* Bucket k's allgather of the updated shards, left in flight in bk->agreq.
 * With offload the mover brings the updated shard back first. */
static int ag_issue(whale_engine *e, struct eng_bucket *bk)
{
    size_t sb = bk->n / bk->comm->size;
    int rc;
    if (eng_lp(e)) {
        /* the 16-bit params travel (as sb/2 fp32 words: a gather only copies) */
        uint16_t *own = (uint16_t *)e->agtmp + bk->shard_off;
        if (e->off.mode) /* offload: the mover brings the updated shard back */
            eng_move_wait(e, &bk->wup);
        memcpy(own, e->W16 + bk->flat + (size_t)bk->comm->rank * sb, sb * sizeof(uint16_t));
        rc = bk->comm->iallgather(bk->comm, (const float *)own, (float *)(e->W16 + bk->flat),
                                  sb / 2, &bk->agreq);
    } else {
        if (e->off.mode) /* offload: the mover put the updated shard there */
            eng_move_wait(e, &bk->wup);
        else
            memcpy(e->agtmp + bk->shard_off, e->W + bk->flat + (size_t)bk->comm->rank * sb,
                   sb * sizeof(float));
        rc = bk->comm->iallgather(bk->comm, e->agtmp + bk->shard_off, e->W + bk->flat, sb,
                                  &bk->agreq);
    }
    if (!rc)
        eng_comm_started(e);
    return rc;
}

/* Testing (WHALE_ZERO_LATE_GATHER): the other ranks' blocks of the bucket
 * become NaN and the gather is issued only by eng_w_settle, so any read of
 * the weights that does not wait for the gather first sees NaN. */
static void ag_poison(whale_engine *e, struct eng_bucket *bk)
{
    const size_t sb = bk->n / bk->comm->size, esz = eng_lp(e) ? 2 : 4;
    char *w = eng_lp(e) ? (char *)(e->W16 + bk->flat) : (char *)(e->W + bk->flat);
    for (int r = 0; r < bk->comm->size; r++)
        if (r != bk->comm->rank) /* all ones: NaN in fp32, bf16 and fp16 */
            memset(w + (size_t)r * sb * esz, 0xff, sb * esz);
    bk->ag_late = true;
}

static int ag_start(whale_engine *e, struct eng_bucket *bk)
{
    if (bk->comm->size == 1)
        return 0;
    if (e->late_gather) {
        ag_poison(e, bk);
        return 0;
    }
    return ag_issue(e, bk);
}

/* The update of this rank's range; under ZeRO 1/2 the gather of each
 * bucket starts right after the bucket's update, in bucket order (the
 * order the next forward needs them). */
int eng_apply_adamw(whale_engine *e, float grad_mul)
{
    if (!gather_early(e))
        return adamw_buckets(e, grad_mul, 0, e->nb);
    int rc = 0;
    for (int k = 0; k < e->nb && !rc; k++)
        if (!(rc = adamw_buckets(e, grad_mul, k, k + 1)))
            rc = ag_start(e, &e->buckets[k]);
    return rc;
}

/* ZeRO 1/2 with offload (eng_off_apply updated the shards): every rank
 * gets everybody's updated shard before the step returns. Without offload
 * eng_apply_adamw has started the gathers already. */
int eng_allgather_weights(whale_engine *e)
{
    const int z = e->cfg.zero_stage;
    if ((z != 1 && z != 2) || gather_early(e))
        return 0;
    int rc = 0;
    for (int k = 0; k < e->nb && !rc; k++)
        if (e->buckets[k].comm->size > 1)
            rc = ag_issue(e, &e->buckets[k]);
    int r2 = eng_w_settle_all(e);
    return rc ? rc : r2;
}

/* Bucket b's weights as updated by the last step: waits for its gather
 * (issues it first under WHALE_ZERO_LATE_GATHER). */
int eng_w_settle(whale_engine *e, int b)
{
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->ag_late) {
        bk->ag_late = false;
        int rc = ag_issue(e, bk);
        if (rc)
            return rc;
    }
    return eng_req_wait(e, &bk->agreq);
}

int eng_w_settle_all(whale_engine *e)
{
    int rc = 0;
    for (int b = 0; b < e->nb; b++) {
        int r2 = eng_w_settle(e, b);
        rc = rc ? rc : r2;
    }
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

void eng_zero_grads(whale_engine *e)
{
    if (e->G)
        zero_floats(e->G, e->P);
    if (e->Gsh)
        zero_floats(e->Gsh, e->S);
}
