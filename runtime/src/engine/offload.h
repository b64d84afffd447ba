/* Engine side of host offload (ZeRO-Offload / ZeRO-Infinity style).
 *
 * Two tiers: the arena ("device" memory: what compute touches; on the CPU
 * backend host memory accounted on its own) and the host tier (optimizer
 * state: fp32 master weights and AdamW moments of this rank's update range;
 * with parameter offload also the ZeRO-3 weight shard). A mover thread
 * copies between them asynchronously, through UCX RMA (whale/ltier.h: the
 * host tier is registered, a put into it or a get out of it; memcpy with
 * WHALE_OFFLOAD_MOVER=memcpy): each bucket's final gradient goes down
 * as soon as its reduction completes (overlapping the rest of backward), the
 * host AdamW (vectorised, host threads) updates bucket by bucket while the
 * mover brings the previous bucket's weights back, and the forward of the
 * next step waits per bucket only for what it is about to use. */
#ifndef ENG_OFFLOAD_H
#define ENG_OFFLOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/arena.h"

#include "mover.h"

struct whale_ltier;

struct eng_offload {
    int mode;             /* enum whale_offload */
    int prefetch;         /* ZeRO 3: layers whose weights are fetched ahead (>= 1) */
    size_t U;             /* elements of this rank's update range (P or S) */
    whale_arena *host;    /* host tier accounting (no budget) */
    float *hW;            /* master weights of the update range (params mode: the ZeRO-3 shard) */
    float *hG;            /* gradients of the update range */
    float *hM, *hV;       /* AdamW moments (the engine's M, V point here) */
    /* 16-bit precision: hW is the fp32 master (the engine's W or Wsh point
     * here: no master in the arena) and h16 the updated 16-bit params of
     * the update range, moved back to W16 / W16sh per bucket (params mode:
     * W16sh points here, the shard lives in the host tier) */
    uint16_t *h16;
    struct eng_mover *mv; /* mover.h */
    /* the mover's transport (whale/ltier.h): UCX RMA between the arena and
     * the registered host tier; NULL: memcpy (WHALE_OFFLOAD_MOVER=memcpy, or
     * UCX gave no local endpoint, or a copy failed: said once) */
    _Atomic(struct whale_ltier *) lt;
    struct whale_ltier *lt_owned; /* closed after the mover */
    int lt_mem;                   /* enum whale_ltier_mem: the arena's memory */
    bool resync;          /* the tensors were walked (maybe restored): refresh hW from W */
    bool last_micro;      /* the backward running now ends the step's accumulation */
    double t_move_wait;   /* engine thread blocked on moves this step */
    /* remote tier (another task's registered host memory, RMA through UCX):
     * [master U][M U][V U] floats at rem_off; buckets staged through two
     * local sets of 3 x stage_n floats so the next bucket's fetch overlaps
     * the current bucket's update */
    struct whale_remote *rem;
    size_t rem_off;
    float *stage;
    size_t stage_n;
    size_t stage_set;     /* floats of one staging set: 3 x stage_n (+ the 16-bit params) */
    double t_rma;         /* seconds in RMA transfers this step (blocking part) */
    /* params mode with the remote tier (offload_rparams.c): the ZeRO-3
     * shard lives there too (fp32: it is the master; 16-bit: a fourth
     * slot of U 16-bit values after V); per bucket, the get in flight and,
     * DP > 1, the host copy of this rank's shard the allgather sends from */
    struct eng_rparam *rp;
};

/* RMA transfers to / from the remote tier in flight, as pieces of at most
 * 1 MiB (offload_rparams.c says why). */
struct eng_rma_set {
    struct whale_req **q;
    int n, cap;
};
struct whale_remote;
/* Appends the pieces of one transfer (get: remote -> local) to set. */
int  eng_rma_post(struct eng_rma_set *set, struct whale_remote *r, bool get, size_t off,
                  void *local, size_t len);
/* Waits for every piece (the first error is returned); the time is added to *t. */
int  eng_rma_wait(struct eng_rma_set *set, double *t);
void eng_rma_free(struct eng_rma_set *set);

/* One bucket's shard on its way from the remote tier (offload_rparams.c). */
struct eng_rparam {
    struct eng_rma_set get;
    void *send;
    size_t send_bytes;
};



struct whale_engine;
/* The copy runs on the mover thread (synchronously when there is none). */
void eng_move_post(struct whale_engine *e, struct eng_move *mv, void *dst, const void *src,
                   size_t len);
/* Blocks until mv is done (no-op when idle); the time counts as exposed. */
void eng_move_wait(struct whale_engine *e, struct eng_move *mv);
/* offload_apply.c, offload's part of a step: bucket b's gradient is final
 * (send this rank's range down to the host tier, once per step); AdamW on
 * the host tier with the weights moved back; before a step (moves re-armed,
 * the host master refreshed after a tensor walk); every gradient move has
 * landed (before the gradients are zeroed). */
void eng_off_grad_ready(struct whale_engine *e, int b);
int  eng_off_apply(struct whale_engine *e, float grad_mul);
int  eng_off_step_begin(struct whale_engine *e);
void eng_off_grads_down(struct whale_engine *e);
/* Waits for every move in flight (before the tensors are walked, at the end). */
void eng_off_quiesce(struct whale_engine *e);
/* Seconds the mover spent copying (and bytes) since the last call. */
double eng_off_take_busy(struct whale_engine *e, int64_t *bytes);
int  eng_off_init(struct whale_engine *e);  /* after the buckets are laid out */
void eng_off_free(struct whale_engine *e);
int64_t eng_off_host_bytes(const struct whale_engine *e);
/* Remote tier: fetch M and V into local buffers for a tensor walk, and put
 * them back (and release the buffers) after it. */
int  eng_off_walk_begin(struct whale_engine *e);
int  eng_off_walk_end(struct whale_engine *e);
/* Is base one of the buffers eng_off_walk_begin made (freed by walk_end)? */
bool eng_off_walk_owns(const struct whale_engine *e, const void *base);
/* Bytes of the remote tier at off (master, M or V: which = 0, 1, 2) of
 * update-range element a. */
size_t eng_off_rem_at(const struct whale_engine *e, int which, size_t a);
/* Params mode, 16-bit: the byte offset of 16-bit element a's slot there. */
size_t eng_off_rem16_at(const struct whale_engine *e, size_t a);
/* Does the remote tier hold this rank's ZeRO-3 weight shard (params mode)? */
bool eng_off_rparams(const struct whale_engine *e);

/* Params mode, remote tier (offload_rparams.c). The bucket's shard of sb
 * elements (fp32, or 16-bit when is16) comes from the remote tier:
 *  - fetch: an RMA get straight into dst (DP 1: dst is the compute buffer),
 *    completed by rp_wait ahead of use (the prefetch distance applies);
 *  - stage: DP > 1: a blocking get into a host copy (*src) that the
 *    allgather sends from (only 1/DP of the bucket travels by RMA; the
 *    gather itself overlaps as in the local tier), freed by rp_done. */
struct eng_bucket;
int  eng_off_rp_fetch(struct whale_engine *e, int b, void *dst, size_t sb, bool is16);
int  eng_off_rp_stage(struct whale_engine *e, int b, size_t sb, bool is16, const void **src);
int  eng_off_rp_wait(struct whale_engine *e, int b);
void eng_off_rp_done(struct whale_engine *e, int b);
int  eng_off_rp_init(struct whale_engine *e);
void eng_off_rp_free(struct whale_engine *e);
#endif
