/* This rank's part of each gradient bucket, and the one walk over it:
 * bucket -> layer -> parameter, each parameter clipped to the range. The
 * optimizer, the gradient norm, offload's host AdamW, the initial weight
 * shards and the checkpoint's tensor enumeration all go through it, so the
 * flat layout (engine.c: build_buckets) is read in one place. */
#include "engine_internal.h"

#include <string.h>

void eng_bucket_range(const whale_engine *e, const struct eng_bucket *bk, enum eng_range r,
                      size_t *lo, size_t *hi)
{
    const struct whale_par_comm *g = bk->comm;
    const bool whole = r == ENG_RANGE_ALL || g->size == 1 ||
                       (r == ENG_RANGE_UPDATE && e->cfg.zero_stage == 0);
    if (whole) {
        *lo = bk->flat;
        *hi = bk->flat + bk->n;
    } else {
        size_t sb = bk->n / g->size;
        *lo = bk->flat + (size_t)g->rank * sb;
        *hi = *lo + sb;
    }
}

bool eng_param_clip(const struct eng_param *p, size_t lo, size_t hi, size_t *a, size_t *z)
{
    *a = p->flat > lo ? p->flat : lo;
    *z = p->flat + p->numel < hi ? p->flat + p->numel : hi;
    return *a < *z;
}

void eng_pieces_init(struct eng_pieces *it, whale_engine *e, int k0, int k1, enum eng_range r)
{
    memset(it, 0, sizeof *it);
    it->e = e;
    it->range = r;
    it->k = k0 - 1;
    it->k1 = k1;
}

bool eng_pieces_next(struct eng_pieces *it)
{
    whale_engine *e = it->e;
    for (;;) {
        if (it->bk && it->li < it->bk->l1) {
            struct eng_layer *l = &e->layers[it->li];
            if (it->pi >= l->nparams) { /* the bucket's next layer */
                it->li++;
                it->pi = 0;
                continue;
            }
            it->l = l;
            it->p = &l->params[it->pi++];
            if (eng_param_clip(it->p, it->lo, it->hi, &it->a, &it->z))
                return true;
            continue;
        }
        if (++it->k >= it->k1)
            return false;
        it->bk = &e->buckets[it->k];
        eng_bucket_range(e, it->bk, it->range, &it->lo, &it->hi);
        it->li = it->bk->l0;
        it->pi = 0;
    }
}

float *eng_gptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    return e->cfg.zero_stage < 2 ? e->G + a : e->Gsh + bk->shard_off + (a - lo);
}

float *eng_wptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    if (eng_lp(e))
        return e->cfg.zero_stage == 0 ? e->W + a : e->Wsh + bk->shard_off + (a - lo);
    return e->cfg.zero_stage < 3 ? e->W + a : e->Wsh + bk->shard_off + (a - lo);
}

uint16_t *eng_w16ptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    if (!eng_lp(e))
        return NULL;
    return e->cfg.zero_stage < 3 ? e->W16 + a : e->W16sh + bk->shard_off + (a - lo);
}

size_t eng_mvoff(const whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a)
{
    return e->cfg.zero_stage == 0 ? a : bk->shard_off + (a - lo);
}
