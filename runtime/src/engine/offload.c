/* Host offload: the mover thread and the host tier (see offload.h). The
 * step's part (gradients down, host AdamW over the tier, weights back) is
 * offload_apply.c; the remote tier's layout and shard fetch offload_rparams.c. */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "whale/backend.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/ltier.h"

/* One move through the tier's transport (the mover's copy function; ctx
 * is the engine). A UCX failure is not fatal to the step: the bytes still
 * arrive (memcpy: offload runs on host-addressable memory only) and the
 * mover stays on memcpy from then on, said once. */
static void off_copy(void *ctx, void *dst, const void *src, size_t len)
{
    struct eng_offload *o = &((whale_engine *)ctx)->off;
    whale_ltier *lt = atomic_load(&o->lt);
    if (lt && !whale_ltier_copy(lt, dst, src, len, o->lt_mem))
        return;
    if (lt && atomic_exchange(&o->lt, NULL))
        whale_warn("offload: the local tier's UCX transport failed; moving with memcpy from "
                   "now on");
    memcpy(dst, src, len);
}

void eng_move_post(whale_engine *e, struct eng_move *mv, void *dst, const void *src, size_t len)
{
    if (e->off.mv) {
        eng_mover_post(e->off.mv, mv, dst, src, len);
        return;
    }
    mv->dst = dst;
    mv->src = src;
    mv->len = len;
    if (len)
        off_copy(e, dst, src, len);
    atomic_store(&mv->state, 2);
}

void eng_move_wait(whale_engine *e, struct eng_move *mv)
{
    e->off.t_move_wait += eng_mover_wait(e->off.mv, mv);
}

void eng_off_quiesce(whale_engine *e)
{
    if (!e->off.mode)
        return;
    for (int b = 0; b < e->nb; b++) {
        eng_move_wait(e, &e->buckets[b].gdown);
        eng_move_wait(e, &e->buckets[b].wup);
        eng_move_wait(e, &e->buckets[b].wfetch);
    }
}

double eng_off_take_busy(whale_engine *e, int64_t *bytes)
{
    return eng_mover_take_busy(e->off.mv, bytes);
}

float *eng_off_host_alloc(whale_engine *e, size_t n)
{
    return whale_arena_alloc(e->off.host, WHALE_MEM_OPTIM, n * sizeof(float), 1);
}

/* A host-tier buffer the mover moves to or from: unregistered, then freed. */
static void host_free(whale_engine *e, void *p, size_t bytes)
{
    if (e->off.lt_owned)
        whale_ltier_unregister(e->off.lt_owned, p);
    whale_arena_free(e->off.host, WHALE_MEM_OPTIM, p, bytes);
}

/* The local tier's transport: a private UCX endpoint with the host tier's
 * buffers registered (whale/ltier.h), unless WHALE_OFFLOAD_MOVER=memcpy. */
static int ltier_setup(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    const char *k = whale_knob_getenv("WHALE_OFFLOAD_MOVER");
    if (k && *k && strcmp(k, "ucx") && strcmp(k, "memcpy")) {
        whale_error("WHALE_OFFLOAD_MOVER=%s: expected ucx or memcpy", k);
        return WHALE_EINVAL;
    }
    if (k && !strcmp(k, "memcpy"))
        return 0;
    whale_ltier *lt = NULL;
    int rc = whale_ltier_open(&lt);
    if (rc) {
        whale_warn("offload: no UCX endpoint for the local tier (%s); moving with memcpy",
                   whale_strerror(rc));
        return 0;
    }
    void *bufs[5] = { o->hW, o->hG, o->hM, o->hV, o->h16 };
    size_t lens[5] = { o->U * 4, o->U * 4, o->U * 4, o->U * 4, (o->U / 2 + 1) * 4 };
    for (int i = 0; i < 5 && !rc; i++)
        if (bufs[i])
            rc = whale_ltier_register(lt, bufs[i], lens[i]);
    if (rc) {
        whale_warn("offload: cannot register the host tier with UCX (%s); moving with memcpy",
                   whale_strerror(rc));
        whale_ltier_close(lt);
        return 0;
    }
    o->lt_owned = lt;
    o->lt_mem = whale_backend_device(e->bk) == WHALE_DEVICE_CUDA ? WHALE_LTIER_CUDA
                                                                 : WHALE_LTIER_HOST;
    atomic_store(&o->lt, lt);
    whale_debug("offload: local tier moves through UCX (%s)", whale_ltier_transport(lt));
    return 0;
}

const char *whale_engine_offload_transport(const whale_engine *e)
{
    if (!e->off.mode)
        return "none";
    if (e->off.rem)
        return "ucx-rma (remote)";
    whale_ltier *lt = atomic_load(&((whale_engine *)e)->off.lt);
    return lt ? whale_ltier_transport(lt) : "memcpy";
}

int eng_off_init(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    if (!o->mode)
        return 0;
    int rc = whale_arena_create(0, NULL, &o->host);
    if (rc)
        return rc;
    o->U = e->cfg.zero_stage == 0 ? e->P : e->S;
    if (!(o->hW = eng_off_host_alloc(e, o->U)) || !(o->hG = eng_off_host_alloc(e, o->U)) ||
        !(o->hM = eng_off_host_alloc(e, o->U)) || !(o->hV = eng_off_host_alloc(e, o->U)))
        return WHALE_ENOMEM;
    if (eng_lp(e) && !(o->h16 = (uint16_t *)eng_off_host_alloc(e, o->U / 2 + 1)))
        return WHALE_ENOMEM;
    /* three moves per bucket (gdown, wup, wfetch), each queued at most once */
    if ((rc = eng_mover_create((size_t)e->nb * 3 + 8, off_copy, e, &o->mv)))
        return rc;
    return ltier_setup(e);
}

void eng_off_free(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    if (!o->mode)
        return;
    eng_mover_destroy(o->mv);
    o->mv = NULL;
    atomic_store(&o->lt, NULL);
    whale_ltier_close(o->lt_owned);
    o->lt_owned = NULL;
    if (o->host) {
        size_t n = o->U * sizeof(float);
        eng_off_rp_free(e);
        /* the mover (and its UCX registrations) is gone: plain frees */
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->stage, 2 * o->stage_set * sizeof(float));
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->hW, n);
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->hG, n);
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->hM, n);
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->hV, n);
        whale_arena_free(o->host, WHALE_MEM_OPTIM, o->h16, (o->U / 2 + 1) * sizeof(float));
        whale_arena_destroy(o->host);
    }
    o->host = NULL;
}

/* ---- remote tier ---------------------------------------------------------------- */

/* Params mode with 16-bit params: the 16-bit shard (rounded up to whole
 * fp32 words) after master and moments */
static size_t rem16_bytes(const whale_engine *e)
{
    return e->off.mode == WHALE_OFFLOAD_PARAMS && eng_lp(e) ? (e->off.U / 2 + 1) * sizeof(float)
                                                            : 0;
}

size_t whale_engine_offload_bytes(const whale_engine *e)
{
    return e->off.mode ? 3 * e->off.U * sizeof(float) + rem16_bytes(e) : 0;
}

int whale_engine_offload_remote_task(const whale_engine *e)
{
    return e && e->off.rem ? whale_remote_task(e->off.rem) : -1;
}

/* Blocking transfer of len bytes (get: remote -> local), in pieces of at
 * most 8 MiB: a whole shard or moment array is hundreds of MiB on a real
 * model, and one transfer that size keeps the progress engine (and the
 * heartbeats behind it) busy long enough on a loaded node for the peer
 * timeout to call this task dead. */
static int rma(whale_remote *r, bool get, size_t off, void *local, size_t len)
{
    const size_t piece = (size_t)8 << 20;
    int rc = 0;
    for (size_t at = 0; at < len && !rc; at += piece) {
        size_t n = len - at < piece ? len - at : piece;
        whale_req *q = NULL;
        char *l = (char *)local + at;
        rc = get ? whale_iget(r, off + at, l, n, &q) : whale_iput(r, off + at, l, n, &q);
        if (!rc)
            rc = whale_wait(q);
    }
    return rc;
}

int whale_engine_offload_attach(whale_engine *e, whale_remote *r, size_t off)
{
    struct eng_offload *o = &e->off;
    if (o->mode == WHALE_OFFLOAD_NONE) {
        whale_error("offload to another task's memory needs offload=optimizer or params; this "
                    "run has offload=none");
        return WHALE_EINVAL;
    }
    const bool par = o->mode == WHALE_OFFLOAD_PARAMS, lp = eng_lp(e);
    if (o->rem || e->step > 0) {
        whale_error("the remote offload tier must be attached once, before the first step");
        return WHALE_ESTATE;
    }
    size_t need = whale_engine_offload_bytes(e);
    if (whale_remote_size(r) < off + need) {
        whale_error("remote offload region of task %d holds %zu bytes, this rank needs %zu at "
                    "offset %zu", whale_remote_task(r), whale_remote_size(r), need, off);
        return WHALE_ERANGE;
    }
    o->rem = r;
    o->rem_off = off;
    /* moments as they are now (zero, or restored) go to their new home;
     * 16-bit or params: the fp32 master too (hW is the master itself, there
     * is no other copy to refresh it from later); params with 16-bit: the
     * 16-bit shard as well */
    int rc = lp || par ? rma(r, false, eng_off_rem_at(e, 0, 0), o->hW, o->U * sizeof(float)) : 0;
    if (!rc && par && lp)
        rc = rma(r, false, eng_off_rem16_at(e, 0), o->h16, o->U * sizeof(uint16_t));
    if (!rc && par)
        rc = eng_off_rp_init(e);
    if (!rc)
        rc = rma(r, false, eng_off_rem_at(e, 1, 0), o->hM, o->U * sizeof(float));
    if (!rc)
        rc = rma(r, false, eng_off_rem_at(e, 2, 0), o->hV, o->U * sizeof(float));
    if (!rc)
        rc = whale_remote_flush(r);
    if (rc) {
        o->rem = NULL;
        return rc;
    }
    size_t mx = 0;
    for (int b = 0; b < e->nb; b++) {
        size_t n = e->cfg.zero_stage == 0 || e->buckets[b].comm->size == 1 ? e->buckets[b].n
                                                             : e->buckets[b].n / e->buckets[b].comm->size;
        mx = n > mx ? n : mx;
    }
    o->stage_n = mx;
    /* two sets of master, M, V (and, params with 16-bit, the updated 16-bit
     * params on their way there) */
    o->stage_set = 3 * mx + (par && lp ? mx / 2 + 1 : 0);
    if (!(o->stage = eng_off_host_alloc(e, 2 * o->stage_set))) {
        o->rem = NULL;
        return WHALE_ENOMEM;
    }
    size_t n = o->U * sizeof(float);
    eng_off_quiesce(e);
    host_free(e, o->hW, n);
    host_free(e, o->hM, n);
    host_free(e, o->hV, n);
    o->hW = o->hM = o->hV = NULL;
    e->M = e->V = NULL;
    if (lp) {
        /* the 16-bit params are written straight into the arena by the
         * update (params: into a staging set, then there): no host copy of
         * them either */
        host_free(e, o->h16, (o->U / 2 + 1) * sizeof(float));
        o->h16 = NULL;
        e->W = e->Wsh = NULL; /* the master: only inside a tensor walk */
        if (par)
            e->W16sh = NULL;  /* the shard: fetched per bucket, or inside a walk */
        o->resync = false;
    } else if (par) {
        e->Wsh = NULL;        /* the shard is the master: there only */
        o->resync = false;
    } else {
        o->resync = true; /* the master goes there before the first update */
    }
    whale_info("offload: %s (%.2f MiB) in the host memory of task %d",
               par ? "ZeRO-3 weight shard and optimizer state" : "optimizer state",
               (double)need / (1 << 20), whale_remote_task(r));
    return 0;
}

/* 16-bit with a remote tier: where the fp32 master is bound during a walk */
static float **master_slot(whale_engine *e)
{
    return e->cfg.zero_stage == 0 ? &e->W : &e->Wsh;
}

/* Is the fp32 master bound only inside a walk (16-bit, or params: it is
 * the shard), and the 16-bit shard too (params with 16-bit)? */
static bool walk_master(const whale_engine *e)
{
    return eng_lp(e) || e->off.mode == WHALE_OFFLOAD_PARAMS;
}
static bool walk_16(const whale_engine *e)
{
    return eng_lp(e) && e->off.mode == WHALE_OFFLOAD_PARAMS;
}

int eng_off_walk_begin(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    if (!o->rem)
        return 0;
    size_t n = o->U * sizeof(float), n16 = rem16_bytes(e);
    if (!(e->M = whale_arena_alloc(o->host, WHALE_MEM_OPTIM, n, 0)) ||
        !(e->V = whale_arena_alloc(o->host, WHALE_MEM_OPTIM, n, 0)))
        return WHALE_ENOMEM;
    if (walk_master(e) && !(*master_slot(e) = whale_arena_alloc(o->host, WHALE_MEM_OPTIM, n, 0)))
        return WHALE_ENOMEM;
    if (walk_16(e) && !(e->W16sh = whale_arena_alloc(o->host, WHALE_MEM_PARAM, n16, 0)))
        return WHALE_ENOMEM;
    int rc = rma(o->rem, true, eng_off_rem_at(e, 1, 0), e->M, n);
    if (!rc && walk_master(e))
        rc = rma(o->rem, true, eng_off_rem_at(e, 0, 0), *master_slot(e), n);
    if (!rc && walk_16(e))
        rc = rma(o->rem, true, eng_off_rem16_at(e, 0), e->W16sh, o->U * sizeof(uint16_t));
    return rc ? rc : rma(o->rem, true, eng_off_rem_at(e, 2, 0), e->V, n);
}

int eng_off_walk_end(whale_engine *e)
{
    struct eng_offload *o = &e->off;
    if (!o->rem)
        return 0;
    size_t n = o->U * sizeof(float);
    int rc = 0;
    const bool wm = walk_master(e), w16 = walk_16(e);
    float *master = wm ? *master_slot(e) : NULL;
    uint16_t *p16 = w16 ? e->W16sh : NULL;
    /* the walk may have restored them */
    if (e->M && e->V && (!wm || master) && (!w16 || p16)) {
        rc = rma(o->rem, false, eng_off_rem_at(e, 1, 0), e->M, n);
        if (!rc)
            rc = rma(o->rem, false, eng_off_rem_at(e, 2, 0), e->V, n);
        if (!rc && wm)
            rc = rma(o->rem, false, eng_off_rem_at(e, 0, 0), master, n);
        if (!rc && w16)
            rc = rma(o->rem, false, eng_off_rem16_at(e, 0), p16, o->U * sizeof(uint16_t));
        if (!rc)
            rc = whale_remote_flush(o->rem);
    }
    whale_arena_free(o->host, WHALE_MEM_OPTIM, e->M, n);
    whale_arena_free(o->host, WHALE_MEM_OPTIM, e->V, n);
    whale_arena_free(o->host, WHALE_MEM_OPTIM, master, n);
    whale_arena_free(o->host, WHALE_MEM_PARAM, p16, rem16_bytes(e));
    e->M = e->V = NULL;
    if (wm)
        *master_slot(e) = NULL;
    if (w16)
        e->W16sh = NULL;
    return rc;
}

bool eng_off_walk_owns(const whale_engine *e, const void *base)
{
    if (!e->off.rem || !base)
        return false;
    whale_engine *m = (whale_engine *)e; /* master_slot only reads here */
    return base == e->M || base == e->V || (walk_master(e) && base == *master_slot(m)) ||
           (walk_16(e) && base == e->W16sh);
}

int64_t eng_off_host_bytes(const whale_engine *e)
{
    if (!e->off.host)
        return 0;
    struct whale_arena_stats s;
    whale_arena_stats(e->off.host, &s);
    return s.in_use;
}
