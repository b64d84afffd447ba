/* Params offload with the remote tier (ZeRO-Infinity over the network):
 * this rank's ZeRO-3 weight shard lives in another task's registered host
 * memory beside the fp32 master and the AdamW moments (offload.c attaches
 * one region sized for all of them). This file is the second tier behind
 * the shard fetch that eng_w_acquire / eng_w_ready (step_weights.c) use in params mode: the
 * local tier posts a mover copy out of the host shard, the remote tier an
 * RMA get out of the lender's region; the prefetch distance and the
 * release after use are the same code.
 *
 * Layout there, per rank, U = the shard's elements (S):
 *   [fp32 master U][M U][V U]                        fp32: the master is the shard
 *   [fp32 master U][M U][V U][16-bit params U (+pad)] bf16 / fp16
 * Per bucket the rank's range [shard_off, shard_off + sb) of each.
 *
 * DP 1: the get lands straight in the bucket's compute buffer (wbuf, or
 * wbuf16 before the widening), so it overlaps the layers before it.
 * DP > 1: only this rank's 1/DP of the bucket comes by RMA, into a host
 * copy the allgather sends from; the get is waited for at once, so that
 * every rank posts its gathers in the same order at the same point of the
 * schedule as with the local tier (collectives match in posting order).
 * The gather (the bigger transfer) still overlaps compute. */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "whale/comm.h"
#include "whale/error.h"
#include "whale/log.h"

bool eng_off_rparams(const whale_engine *e)
{
    return e->off.rem && e->off.mode == WHALE_OFFLOAD_PARAMS;
}

size_t eng_off_rem_at(const whale_engine *e, int which, size_t a)
{
    return e->off.rem_off + ((size_t)which * e->off.U + a) * sizeof(float);
}

size_t eng_off_rem16_at(const whale_engine *e, size_t a)
{
    return e->off.rem_off + 3 * e->off.U * sizeof(float) + a * sizeof(uint16_t);
}

int eng_off_rp_init(whale_engine *e)
{
    if (!(e->off.rp = calloc((size_t)e->nb, sizeof *e->off.rp)))
        return WHALE_ENOMEM;
    return 0;
}

/* Where bucket b's shard starts there, and its bytes. */
static size_t rp_where(const whale_engine *e, int b, size_t sb, bool is16, size_t *bytes)
{
    const struct eng_bucket *bk = &e->buckets[b];
    *bytes = sb * (is16 ? sizeof(uint16_t) : sizeof(float));
    return is16 ? eng_off_rem16_at(e, bk->shard_off) : eng_off_rem_at(e, 0, bk->shard_off);
}

/* Transfers go as pieces of at most 1 MiB, all in flight at once: with the
 * tag-emulated RMA between nodes (comm/rma/rma_tag.c) one transfer above a few
 * MiB fell off a cliff on a loaded node (whale-bench offload bw, load 27:
 * 5-10 GB/s at 1-2 MiB, 0.01-0.02 GB/s at 4-8 MiB), and a bucket's shard is
 * often larger; in pieces a 2-layer 768-wide params step went from 9.5 s
 * to 6.9 s there. */
#define RMA_PIECE ((size_t)1 << 20)

int eng_rma_post(struct eng_rma_set *set, whale_remote *r, bool get, size_t off, void *local,
                 size_t len)
{
    int need = set->n + (int)((len + RMA_PIECE - 1) / RMA_PIECE), rc = 0;
    if (need > set->cap) {
        whale_req **q = realloc(set->q, (size_t)need * sizeof *q);
        if (!q)
            return WHALE_ENOMEM;
        set->q = q;
        set->cap = need;
    }
    for (size_t at = 0; at < len && !rc; at += RMA_PIECE) {
        size_t n = len - at < RMA_PIECE ? len - at : RMA_PIECE;
        char *l = (char *)local + at;
        rc = get ? whale_iget(r, off + at, l, n, &set->q[set->n])
                 : whale_iput(r, off + at, l, n, &set->q[set->n]);
        if (!rc)
            set->n++;
    }
    return rc;
}

int eng_rma_wait(struct eng_rma_set *set, double *t)
{
    if (!set->n)
        return 0;
    double t0 = eng_now();
    int rc = 0;
    for (int i = 0; i < set->n; i++) {
        int r2 = whale_wait(set->q[i]);
        rc = rc ? rc : r2;
    }
    set->n = 0;
    if (t)
        *t += eng_now() - t0;
    return rc;
}

void eng_rma_free(struct eng_rma_set *set)
{
    eng_rma_wait(set, NULL); /* a failed step: pieces may still land */
    free(set->q);
    *set = (struct eng_rma_set){ 0 };
}

int eng_off_rp_fetch(whale_engine *e, int b, void *dst, size_t sb, bool is16)
{
    struct eng_rparam *rp = &e->off.rp[b];
    size_t len, off = rp_where(e, b, sb, is16, &len);
    int rc = eng_rma_post(&rp->get, e->off.rem, true, off, dst, len);
    if (rc) {
        eng_rma_wait(&rp->get, NULL); /* the pieces already posted land before dst is freed */
        whale_error("offload: fetching bucket %d's weights (%zu B) from task %d: %s", b, len,
                    whale_remote_task(e->off.rem), whale_strerror(rc));
    }
    return rc;
}

int eng_off_rp_wait(whale_engine *e, int b)
{
    if (!e->off.rp || !e->off.rp[b].get.n)
        return 0;
    /* exposed: compute waits for it */
    int rc = eng_rma_wait(&e->off.rp[b].get, &e->off.t_rma);
    if (rc)
        whale_error("offload: weights of bucket %d from task %d: %s", b,
                    whale_remote_task(e->off.rem), whale_strerror(rc));
    return rc;
}

int eng_off_rp_stage(whale_engine *e, int b, size_t sb, bool is16, const void **src)
{
    struct eng_rparam *rp = &e->off.rp[b];
    size_t len;
    rp_where(e, b, sb, is16, &len);
    /* a copy left by a failed step (its gather may still have read it) is
     * reused rather than freed under it */
    if (rp->send && rp->send_bytes != len)
        eng_off_rp_done(e, b);
    if (!rp->send && !(rp->send = whale_arena_alloc(e->off.host, WHALE_MEM_PARAM, len, 0)))
        return WHALE_ENOMEM;
    rp->send_bytes = len;
    int rc = eng_off_rp_fetch(e, b, rp->send, sb, is16);
    if (!rc)
        rc = eng_off_rp_wait(e, b);
    *src = rp->send;
    return rc;
}

void eng_off_rp_done(whale_engine *e, int b)
{
    struct eng_rparam *rp = e->off.rp ? &e->off.rp[b] : NULL;
    if (!rp || !rp->send)
        return;
    whale_arena_free(e->off.host, WHALE_MEM_PARAM, rp->send, rp->send_bytes);
    rp->send = NULL;
    rp->send_bytes = 0;
}

void eng_off_rp_free(whale_engine *e)
{
    if (!e->off.rp)
        return;
    for (int b = 0; b < e->nb; b++) {
        eng_rma_free(&e->off.rp[b].get);
        eng_off_rp_done(e, b);
    }
    free(e->off.rp);
    e->off.rp = NULL;
}
