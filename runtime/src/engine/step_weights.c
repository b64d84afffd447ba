/* The weights of a bucket while its layers run: under ZeRO 3 gathered from
 * every rank's shard (or fetched from the offload tier) ahead of use and
 * freed after; with 16-bit params widened to the fp32 compute copy one
 * bucket at a time. Reference counted: a bucket spans several layers and
 * the head also reads the tied embedding's bucket. */
#include "step.h"

#include <string.h>

#include "whale/error.h"

static void rebind_w(whale_engine *e, int b, float *base)
{
    struct eng_bucket *bk = &e->buckets[b];
    for (int li = bk->l0; li < bk->l1; li++) {
        struct eng_layer *l = &e->layers[li];
        if (bk->expert)
            l->wx = base ? base + (l->flat_xbegin - bk->flat) : NULL;
        else
            l->w = base ? base + (l->flat_begin - bk->flat) : NULL;
    }
}

/* Start gathering bucket b's weights (ZeRO 3) and take a reference. With
 * 16-bit params (any ZeRO stage) the bucket's fp32 compute weights are
 * widened from them here (ZeRO 0-2) or once the 16-bit gather lands
 * (ZeRO 3, eng_w_ready): one bucket at a time, never the whole model. */
int eng_w_acquire(whale_engine *e, int b)
{
    const bool lp = eng_lp(e);
    if (e->cfg.zero_stage != 3 && !lp)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    if (bk->wref++ > 0)
        return 0;
    /* ZeRO 1/2: the 16-bit weights are widened below, so the last step's
     * gather of them must have landed */
    if (lp && e->cfg.zero_stage < 3) {
        int rc = eng_w_settle(e, b);
        if (rc) {
            bk->wref--;
            return rc;
        }
    }
    if (!(bk->wbuf = eng_scratch_alloc(e, WHALE_MEM_PARAM, bk->n, false)))
        return WHALE_ENOMEM;
    size_t sb = bk->n / bk->comm->size;
    eng_move_wait(e, &bk->wup); /* optimizer offload: the shard's update is back */
    if (lp && e->cfg.zero_stage < 3) {
        eng_lp_load(e, bk->wbuf, e->W16 + bk->flat, bk->n);
    } else if (lp) {
        /* 16-bit gather: the shard is a multiple of 16 elements, moved as
         * sb/2 fp32 words (an allgather only copies) */
        if (!(bk->wbuf16 = (uint16_t *)eng_scratch_alloc(e, WHALE_MEM_PARAM, bk->n / 2, false)))
            return WHALE_ENOMEM;
        const void *src = e->W16sh ? e->W16sh + bk->shard_off : NULL;
        int rc = 0;
        if (eng_off_rparams(e)) /* the shard lives in another task (offload_rparams.c) */
            rc = bk->comm->size == 1 ? eng_off_rp_fetch(e, b, bk->wbuf16, sb, true)
                                 : eng_off_rp_stage(e, b, sb, true, &src);
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
        if (bk->comm->size == 1) {
            if (!eng_off_rparams(e))
                memcpy(bk->wbuf16, src, sb * sizeof(uint16_t));
        } else {
            rc = bk->comm->iallgather(bk->comm, (const float *)src, (float *)bk->wbuf16, sb / 2,
                                  &bk->wreq);
            if (rc)
                return rc;
            eng_comm_started(e);
        }
    } else if (bk->comm->size == 1 && eng_off_rparams(e)) {
        /* the shard lives in another task: an RMA get, waited for in eng_w_ready */
        int rc = eng_off_rp_fetch(e, b, bk->wbuf, sb, false);
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
    } else if (bk->comm->size == 1 && e->off.mode == WHALE_OFFLOAD_PARAMS) {
        /* the shard lives in the host tier: fetched ahead by the mover */
        eng_move_post(e, &bk->wfetch, bk->wbuf, e->Wsh + bk->shard_off, sb * sizeof(float));
    } else if (bk->comm->size == 1) {
        memcpy(bk->wbuf, e->Wsh + bk->shard_off, sb * sizeof(float));
    } else {
        /* with params offload the gather reads the host-tier shard directly
         * (remote tier: a host copy of it, fetched first) */
        const void *src = e->Wsh ? e->Wsh + bk->shard_off : NULL;
        int rc = eng_off_rparams(e) ? eng_off_rp_stage(e, b, sb, false, &src) : 0;
        if (rc) {
            rebind_w(e, b, bk->wbuf);
            return rc;
        }
        rc = bk->comm->iallgather(bk->comm, src, bk->wbuf, sb, &bk->wreq);
        if (rc)
            return rc;
        eng_comm_started(e);
    }
    rebind_w(e, b, bk->wbuf);
    return 0;
}

int eng_w_ready(whale_engine *e, int b)
{
    if (e->cfg.zero_stage == 1 || e->cfg.zero_stage == 2)
        return eng_w_settle(e, b); /* the last step's gather of the updated weights */
    if (e->cfg.zero_stage != 3)
        return 0;
    struct eng_bucket *bk = &e->buckets[b];
    eng_move_wait(e, &bk->wfetch);
    int rc = eng_off_rp_wait(e, b); /* remote tier, DP 1: the get into wbuf / wbuf16 */
    int r2 = eng_req_wait(e, &bk->wreq);
    rc = rc ? rc : r2;
    eng_off_rp_done(e, b); /* DP > 1: the gather has read the host copy */
    if (!rc && bk->wbuf16) {
        eng_lp_load(e, bk->wbuf, bk->wbuf16, bk->n);
        float *w16 = (float *)bk->wbuf16;
        eng_scratch_free(e, WHALE_MEM_PARAM, &w16, bk->n / 2);
        bk->wbuf16 = NULL;
    }
    return rc;
}

void eng_w_release(whale_engine *e, int b)
{
    if (e->cfg.zero_stage != 3 && !eng_lp(e))
        return;
    struct eng_bucket *bk = &e->buckets[b];
    if (--bk->wref > 0)
        return;
    /* released before use (a failed step): a get into the buffers freed
     * here must have landed (a gather still in flight keeps its host copy:
     * offload_rparams.c reuses or frees it), and so must the local tier's
     * fetch the mover thread may still be copying into wbuf */
    eng_move_wait(e, &bk->wfetch);
    eng_off_rp_wait(e, b);
    if (!bk->wreq)
        eng_off_rp_done(e, b);
    if (bk->wbuf16) { /* released before use (a failed step) */
        float *w16 = (float *)bk->wbuf16;
        eng_scratch_free(e, WHALE_MEM_PARAM, &w16, bk->n / 2);
        bk->wbuf16 = NULL;
    }
    eng_scratch_free(e, WHALE_MEM_PARAM, &bk->wbuf, bk->n);
    rebind_w(e, b, NULL);
}
