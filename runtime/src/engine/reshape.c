/* A new micro-batch size or count for this replica between two steps where
 * the engine's buffers are sized by them: at ZeRO 2/3 the replicas' shares
 * are micro-batch sizes (activations, scratch and transfer buffers follow
 * the size), with a pipeline the schedule's activation slots follow the
 * count. The engine is built again on the same groups and the state moves
 * over through host memory: parameters, optimizer state and the scalar
 * state. The shards do not depend on the batch, so every piece comes back
 * where it was; the old engine goes first, so the device holds one engine
 * at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "whale/error.h"
#include "whale/log.h"

/* One piece as saved, to check that the new engine holds the same. */
struct saved_piece {
    char name[96];
    int kind, dtype;
    int64_t begin, end;
    size_t off, bytes;
};

struct saved {
    struct saved_piece *p;
    size_t n, cap;
    unsigned char *blob;
    size_t used, blob_cap;
    bool restore; /* the walk writes the saved bytes back */
    size_t next;
};

static size_t piece_bytes(const struct whale_tensor_piece *p)
{
    return (size_t)(p->flat_end - p->flat_begin) * whale_dtype_size(p->dtype);
}

static int save_fn(const struct whale_tensor_piece *p, void *user)
{
    struct saved *s = user;
    const size_t b = piece_bytes(p);
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 64;
        struct saved_piece *np = realloc(s->p, c * sizeof *np);
        if (!np)
            return WHALE_ENOMEM;
        s->p = np;
        s->cap = c;
    }
    if (s->used + b > s->blob_cap) {
        size_t c = s->blob_cap ? 2 * s->blob_cap : (size_t)1 << 20;
        while (c < s->used + b)
            c *= 2;
        unsigned char *nb = realloc(s->blob, c);
        if (!nb)
            return WHALE_ENOMEM;
        s->blob = nb;
        s->blob_cap = c;
    }
    struct saved_piece *sp = &s->p[s->n++];
    snprintf(sp->name, sizeof sp->name, "%s", p->name);
    sp->kind = (int)p->kind;
    sp->dtype = (int)p->dtype;
    sp->begin = p->flat_begin;
    sp->end = p->flat_end;
    sp->off = s->used;
    sp->bytes = b;
    memcpy(s->blob + s->used, p->data, b);
    s->used += b;
    return 0;
}

static int restore_fn(const struct whale_tensor_piece *p, void *user)
{
    struct saved *s = user;
    const struct saved_piece *sp = s->next < s->n ? &s->p[s->next] : NULL;
    if (!sp || strcmp(sp->name, p->name) || sp->kind != (int)p->kind ||
        sp->dtype != (int)p->dtype || sp->begin != p->flat_begin || sp->end != p->flat_end) {
        whale_error("rebuilding the engine for a new batch shape: piece %zu (%s %s) is not "
                    "the one saved (%s)", s->next, p->name, whale_tensor_kind_name(p->kind),
                    sp ? sp->name : "none left");
        return WHALE_EINVAL;
    }
    memcpy(p->data, s->blob + sp->off, sp->bytes);
    s->next++;
    return 0;
}

/* A new engine of configuration c with the saved state. */
static int rebuild(const struct whale_engine_config *c, whale_ctx *ctx, struct saved *s,
                   const struct whale_train_state *st, whale_engine_phase_fn fn, void *user,
                   whale_engine **out)
{
    whale_engine *ne = NULL;
    int rc = whale_engine_create(c, ctx, &ne);
    if (rc)
        return rc;
    s->next = 0;
    if ((rc = whale_engine_tensors(ne, restore_fn, s)) ||
        (s->next != s->n && (rc = WHALE_EINVAL)) || (rc = whale_engine_set_state(ne, st))) {
        if (s->next != s->n && rc == WHALE_EINVAL)
            whale_error("rebuilding the engine for a new batch shape: %zu pieces saved, %zu "
                        "restored", s->n, s->next);
        whale_engine_destroy(ne);
        return rc;
    }
    whale_engine_set_phase_hook(ne, fn, user);
    *out = ne;
    return 0;
}

int whale_engine_reshape(whale_engine **pe, int micro_batch, int grad_accum, int global_batch)
{
    whale_engine *e = *pe;
    if (!e->ctx) {
        whale_error("rebuilding the engine for a new batch shape needs the engine built on "
                    "a context (whale_engine_create)");
        return WHALE_EINVAL;
    }
    if (e->cfg.offload != WHALE_OFFLOAD_NONE) {
        whale_error("the batch shape changes between steps without --offload only (the "
                    "offload tier is bound to the engine's buffers)");
        return WHALE_EINVAL;
    }
    if (micro_batch < 1 || grad_accum < 1 ||
        (global_batch && (int64_t)micro_batch * grad_accum > global_batch)) {
        whale_error("%d micro-batches of %d out of range for a global batch of %d", grad_accum,
                    micro_batch, global_batch);
        return WHALE_ERANGE;
    }
    struct whale_engine_config c = e->cfg, old = e->cfg;
    c.micro_batch = micro_batch;
    c.grad_accum = grad_accum;
    c.global_batch = global_batch;
    /* built again even where this rank's shape stays: building may be
     * collective over the groups (device communicators), and the other
     * replicas' shapes change */
    struct saved s = { 0 };
    struct whale_train_state st;
    whale_engine_get_state(e, &st);
    whale_engine_phase_fn fn = e->phase_fn;
    void *user = e->phase_user;
    whale_ctx *ctx = e->ctx;
    int rc = whale_engine_tensors(e, save_fn, &s);
    if (rc) {
        free(s.p);
        free(s.blob);
        return rc;
    }
    whale_engine_destroy(e);
    *pe = NULL;
    rc = rebuild(&c, ctx, &s, &st, fn, user, pe);
    if (rc) {
        /* the run stops, but its summary still reads an engine: the old
         * shape again, with the same state */
        whale_error("the engine could not be built for %d micro-batches of %d: %s",
                    grad_accum, micro_batch, whale_strerror(rc));
        if (rebuild(&old, ctx, &s, &st, fn, user, pe))
            *pe = NULL;
    }
    free(s.p);
    free(s.blob);
    return rc;
}
