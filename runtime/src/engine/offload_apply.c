/* Offload's part of a step (ZeRO-Offload / ZeRO-Infinity style, offload.h):
 * each bucket's final gradient sent down to the host tier as backward
 * finishes it, AdamW on the host tier (local, or staged through RMA from
 * another task's memory) bucket by bucket with the updated weights moved
 * back, and the re-arming and master refresh before a step. */
#include "engine_internal.h"

#include <string.h>

#include "whale/error.h"
#include "whale/log.h"

/* Optimizer offload: bucket b's gradient is final (reduced over DP, all
 * micro-batches in): send this rank's range of it to the host tier now,
 * while backward goes on. Once per bucket per step. */
void eng_off_grad_ready(whale_engine *e, int b)
{
    struct eng_bucket *bk = &e->buckets[b];
    if (!e->off.mode || atomic_load(&bk->gdown.state) != 0)
        return;
    size_t lo, hi;
    eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
    eng_move_post(e, &bk->gdown, e->off.hG + eng_mvoff(e, bk, lo, lo), eng_gptr(e, bk, lo, lo),
                  (hi - lo) * sizeof(float));
}

/* Optimizer offload: AdamW on the host tier (vectorised, host threads),
 * bucket by bucket as each bucket's gradient has arrived; the mover brings
 * each bucket's updated weights back while the next bucket is updated (and,
 * for buckets the next forward uses later, while that forward runs). */
/* Remote tier: bucket k's master, M and V in staging set s. */
static int rem_fetch(whale_engine *e, int k, float *st, struct eng_rma_set *q)
{
    struct eng_bucket *bk = &e->buckets[k];
    size_t lo, hi;
    eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
    size_t a = eng_mvoff(e, bk, lo, lo), len = (hi - lo) * sizeof(float);
    int rc = 0;
    for (int w = 0; w < 3 && !rc; w++)
        rc = eng_rma_post(q, e->off.rem, true, eng_off_rem_at(e, w, a), st + w * e->off.stage_n,
                          len);
    return rc;
}

static int rem_waitall(whale_engine *e, struct eng_rma_set *q)
{
    return eng_rma_wait(q, &e->off.t_rma);
}

/* Optimizer state in another task's memory (RMA): per bucket, fetch master
 * and moments (the next bucket's fetch in flight while this one updates),
 * AdamW on the host, weights to the arena, state back with puts. 16-bit
 * params: the master there is fp32 too; the mixed update casts straight
 * into the arena's 16-bit params.
 *
 * Why the state travels rather than the update running on the spare: per
 * element and step this moves 24 B (12 B of master + moments each way)
 * where a remote update would move 6-8 B (the fp32 gradient there, the
 * 16/32-bit param back). But a spare sits in whale_spare_wait, which only
 * answers RMA: an update there needs a request protocol, the spare's
 * cores (often fewer than the worker's host threads) and its own copy of
 * the step's schedule (loss scale, clip factor, step count, decay mask),
 * and the worker would wait for it, exposed, since the next forward needs
 * the params. Here the update stays on the worker's host threads and the
 * transfers of bucket k+1 overlap the update of bucket k; on promotion
 * nothing about the schedule changes, the state just comes home. */
static int off_apply_remote(whale_engine *e, float grad_mul)
{
    struct eng_offload *o = &e->off;
    const int z = e->cfg.zero_stage;
    const bool lp = eng_lp(e);
    /* params mode: the shard lives there too; 16-bit: the cast goes to a
     * fourth staging slot and from there to its slot in the region */
    const bool par = eng_off_rparams(e), par16 = par && lp;
    /* per staging set, the pieces of its gets and of its puts in flight */
    struct eng_rma_set get[2] = { { 0 } }, put[2] = { { 0 } };
    int rc = rem_fetch(e, 0, o->stage, &get[0]);
    for (int k = 0; k < e->nb && !rc; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        float *st = o->stage + (size_t)(k & 1) * o->stage_set;
        uint16_t *st16 = par16 ? (uint16_t *)(st + 3 * o->stage_n) : NULL;
        size_t lo, hi;
        eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
        if ((rc = rem_waitall(e, &get[k & 1])))
            break;
        if (k + 1 < e->nb) { /* the other set: its puts must be out first */
            if ((rc = rem_waitall(e, &put[(k + 1) & 1])) ||
                (rc = rem_fetch(e, k + 1, o->stage + (size_t)((k + 1) & 1) * o->stage_set,
                                &get[(k + 1) & 1])))
                break;
        }
        eng_move_wait(e, &bk->gdown);
        const size_t base = eng_mvoff(e, bk, lo, lo);
        struct eng_pieces it;
        for (eng_pieces_init(&it, e, k, k + 1, ENG_RANGE_UPDATE); eng_pieces_next(&it);) {
            size_t so = eng_mvoff(e, bk, lo, it.a) - base, n = it.z - it.a;
            if (lp) /* fp32 master staged here; the 16-bit cast lands in the arena
                     * (params mode: in the staging set, then there) */
                whale_adamw_update_mixed_host(&e->adam, e->adam_t, st + so, o->hG + base + so,
                                              st + o->stage_n + so, st + 2 * o->stage_n + so,
                                              par16 ? st16 + so : eng_w16ptr(e, bk, lo, it.a),
                                              e->lp, n, grad_mul, it.p->decay);
            else
                whale_adamw_update_host(&e->adam, e->adam_t, st + so, o->hG + base + so,
                                        st + o->stage_n + so, st + 2 * o->stage_n + so, n,
                                        grad_mul, it.p->decay);
        }
        if (!lp && !par) { /* params: the updated master is the shard, going back there */
            float *dst = (z == 1 || z == 2) && bk->comm->size > 1 ? e->agtmp + bk->shard_off
                                                               : eng_wptr(e, bk, lo, lo);
            memcpy(dst, st, (hi - lo) * sizeof(float));
        }
        for (int w = 0; w < 3 && !rc; w++)
            rc = eng_rma_post(&put[k & 1], o->rem, false, eng_off_rem_at(e, w, base),
                              st + w * o->stage_n, (hi - lo) * sizeof(float));
        if (!rc && par16)
            rc = eng_rma_post(&put[k & 1], o->rem, false, eng_off_rem16_at(e, base), st16,
                              (hi - lo) * sizeof(uint16_t));
    }
    for (int s = 0; s < 2; s++) {
        int r2 = rem_waitall(e, &get[s]);
        int r3 = rem_waitall(e, &put[s]);
        rc = rc ? rc : r2 ? r2 : r3;
        eng_rma_free(&get[s]);
        eng_rma_free(&put[s]);
    }
    if (!rc) {
        double t0 = eng_now();
        rc = whale_remote_flush(o->rem);
        o->t_rma += eng_now() - t0;
    }
    if (rc)
        whale_error("offload: %s in task %d's memory: %s",
                    par ? "weight shard and optimizer state" : "optimizer state",
                    whale_remote_task(o->rem), whale_strerror(rc));
    return rc;
}

int eng_off_apply(whale_engine *e, float grad_mul)
{
    struct eng_offload *o = &e->off;
    const int z = e->cfg.zero_stage;
    if (o->rem)
        return off_apply_remote(e, grad_mul);
    for (int k = 0; k < e->nb; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t lo, hi;
        eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
        eng_move_wait(e, &bk->gdown);
        struct eng_pieces it;
        for (eng_pieces_init(&it, e, k, k + 1, ENG_RANGE_UPDATE); eng_pieces_next(&it);) {
            size_t off = eng_mvoff(e, bk, lo, it.a), n = it.z - it.a;
            if (o->h16) /* 16-bit: fp32 master update, then the cast into h16 */
                whale_adamw_update_mixed_host(&e->adam, e->adam_t, o->hW + off, o->hG + off,
                                              o->hM + off, o->hV + off, o->h16 + off, e->lp, n,
                                              grad_mul, it.p->decay);
            else
                whale_adamw_update_host(&e->adam, e->adam_t, o->hW + off, o->hG + off,
                                        o->hM + off, o->hV + off, n, grad_mul, it.p->decay);
        }
        if (o->mode == WHALE_OFFLOAD_PARAMS)
            continue; /* the shard lives in the host tier: nothing to bring back */
        if (o->h16) { /* the 16-bit params go back; the master stays in the host tier */
            eng_move_post(e, &bk->wup, eng_w16ptr(e, bk, lo, lo), o->h16 + eng_mvoff(e, bk, lo, lo),
                          (hi - lo) * sizeof(uint16_t));
            continue;
        }
        /* ZeRO 1/2 with DP: straight into the allgather's send buffer */
        float *dst = (z == 1 || z == 2) && bk->comm->size > 1 ? e->agtmp + bk->shard_off
                                                           : eng_wptr(e, bk, lo, lo);
        eng_move_post(e, &bk->wup, dst, o->hW + eng_mvoff(e, bk, lo, lo), (hi - lo) * sizeof(float));
    }
    return 0;
}

/* Before a step: gradient moves re-armed; after a tensor walk (which may have
 * restored weights) the host master is refreshed from the arena's weights. */
int eng_off_step_begin(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    if (!o->mode)
        return 0;
    o->t_move_wait = 0;
    o->t_rma = 0;
    for (int k = 0; k < e->nb; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        eng_move_wait(e, &bk->gdown);
        atomic_store(&bk->gdown.state, 0);
    }
    if (!o->resync)
        return 0;
    o->resync = false;
    if (o->mode == WHALE_OFFLOAD_PARAMS)
        return 0; /* the host shard is the only copy */
    if (o->rem && eng_lp(e))
        return 0; /* 16-bit: the remote master is the only copy (a walk puts it back) */
    eng_off_quiesce(e);
    int rc = 0;
    for (int k = 0; k < e->nb && !rc; k++) {
        struct eng_bucket *bk = &e->buckets[k];
        size_t lo, hi;
        eng_bucket_range(e, bk, ENG_RANGE_UPDATE, &lo, &hi);
        size_t a = eng_mvoff(e, bk, lo, lo), len = (hi - lo) * sizeof(float);
        if (!o->rem) {
            if (o->hW + a != eng_wptr(e, bk, lo, lo)) /* 16-bit: the master is there already */
                memcpy(o->hW + a, eng_wptr(e, bk, lo, lo), len);
            continue;
        }
        whale_req *q = NULL;
        rc = whale_iput(o->rem, eng_off_rem_at(e, 0, a), eng_wptr(e, bk, lo, lo), len, &q);
        if (!rc)
            rc = whale_wait(q);
    }
    if (!rc && o->rem)
        rc = whale_remote_flush(o->rem);
    if (rc)
        whale_error("offload: refreshing the master weights in task %d's memory: %s",
                    whale_remote_task(o->rem), whale_strerror(rc));
    return rc;
}

void eng_off_grads_down(whale_engine *e)
{
    for (int k = 0; k < e->nb && e->off.mode; k++)
        eng_move_wait(e, &e->buckets[k].gdown);
}
