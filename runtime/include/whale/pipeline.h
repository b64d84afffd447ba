/* Pipeline parallelism, independent of the model:
 *
 *  - pipeline schedules (GPipe, 1F1B, interleaved 1F1B) as pure functions
 *    producing each pipeline rank's ordered list of forward / backward
 *    passes with the sends and receives around them, and a deterministic
 *    simulator that proves a set of per-rank lists deadlock-free and measures
 *    its bubble and activation stash;
 *  - a pipeline executor that runs one rank's list with non-blocking
 *    point-to-point transfers over a whale_par_comm (whale/par_comm.h),
 *    calling back into the model;
 *  - layer balancing over stages.
 *
 * Pipeline vocabulary (Megatron): p pipeline ranks, v model chunks per rank
 * (virtual stages; v = 1 unless interleaved), m micro-batches per step. Chunk
 * c of pipeline rank r is virtual stage s = c*p + r of the S = p*v stage
 * chain: the activation of s goes to s+1, the gradient of s to s-1.
 */
#ifndef WHALE_PIPELINE_H
#define WHALE_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/par_comm.h"
#include "whale/planfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pipeline schedules ----------------------------------------------------- */

enum whale_pp_kind { WHALE_PP_FORWARD = 0, WHALE_PP_BACKWARD = 1 };

/* One compute pass of one pipeline rank. A forward receives the activation
 * of (chunk, mb) from recv_peer (-1: first virtual stage, it reads the
 * tokens) and sends its output to send_peer (-1: last virtual stage, it
 * computes the loss). A backward receives the output gradient from
 * recv_peer (-1: last stage, gradient of the loss) and sends the input
 * gradient to send_peer (-1: first stage). Peers are pipeline ranks. */
struct whale_pp_op {
    int8_t kind;      /* enum whale_pp_kind */
    int16_t chunk;    /* 0..v-1 */
    int32_t mb;       /* 0..m-1 */
    int32_t recv_peer, send_peer;
};

struct whale_pp_schedule {
    enum whale_schedule kind;
    int p, v, m, rank;
    int warmup;              /* forwards before the first backward */
    int n;                   /* 2*v*m */
    struct whale_pp_op *ops;
};

/* Builds rank's list. GPipe: all forwards, then all backwards. 1F1B:
 * min(p-rank-1, m) warm-up forwards, then one forward / one backward, then
 * the cool-down backwards. Interleaved (v >= 2, m a multiple of p):
 * Megatron's order of virtual micro-batches over the chunks. v must be 1
 * for the other two. Errors (logged): WHALE_EINVAL. */
int  whale_pp_schedule_build(enum whale_schedule kind, int p, int v, int m, int rank,
                             struct whale_pp_schedule *out);
void whale_pp_schedule_free(struct whale_pp_schedule *s);
/* "F0.0 F0.1 B0.0 ..." (F/B chunk.mb), truncated to len. Returns chars needed. */
int  whale_pp_schedule_format(const struct whale_pp_schedule *s, char *buf, size_t len);

static inline int whale_pp_vstage(int p, int rank, int chunk) { return chunk * p + rank; }

/* Tag of the message carrying `kind`'s input of (dst_vstage, mb): unique
 * within a step for every (sender, receiver) pair. */
int whale_pp_tag(enum whale_pp_kind kind, int dst_vstage, int mb, int S, int m);

/* ---- simulator ---------------------------------------------------------------- */

struct whale_pp_sim_cost {
    double fwd, bwd;   /* seconds per micro-batch per chunk (uniform over ranks) */
    double p2p;        /* latency of one activation/gradient transfer */
};

struct whale_pp_sim_result {
    bool ok;           /* false: malformed lists or a deadlock; `why` says which */
    char why[256];
    double makespan;   /* end of the last pass */
    double busy;       /* compute time of one rank: v*m*(fwd+bwd) */
    double bubble;     /* (makespan - busy) / busy: Megatron's bubble fraction */
    int max_stash;     /* max over ranks of chunk-activations held (forward done, backward not) */
    int stash[64];     /* per rank (first 64) */
};

/* Executes the p lists (scheds[r] for pipeline rank r) under the executor's
 * semantics: a rank runs its passes in order, a pass starts when its input
 * has arrived (producer's end + p2p), sends never block. Checks that every
 * (chunk, mb) is run forward then backward exactly once per rank and that
 * every send has its receive. start (optional, p*n doubles) receives each
 * pass's start time. Returns 0 (r->ok says whether the lists are valid and
 * deadlock-free) or WHALE_EINVAL/ENOMEM. */
int whale_pp_simulate(const struct whale_pp_schedule *scheds, int p,
                      const struct whale_pp_sim_cost *cost, double *start,
                      struct whale_pp_sim_result *r);

/* ---- executor ----------------------------------------------------------------- */

enum {
    WHALE_PP_FIRST_MB = 1 << 0, /* first pass of this kind on this chunk in the step */
    WHALE_PP_LAST_MB  = 1 << 1, /* last one: after this backward the chunk's gradients are
                                   final for the step (DP reduction may be issued in it) */
};

struct whale_pp_hooks {
    void *user;
    /* Compute one pass. The input of a non-first-stage forward is in
     * recv_buf(FORWARD, chunk, mb); a forward of a non-last stage leaves its
     * output in send_buf(FORWARD, chunk, mb). A backward of a non-last stage
     * finds its output gradient in recv_buf(BACKWARD, ...) and leaves the
     * input gradient in send_buf(BACKWARD, ...) unless it is the first. */
    int (*forward)(void *user, int chunk, int mb, int flags);
    int (*backward)(void *user, int chunk, int mb, int flags);
    /* recv_buf is called when the receive is posted (up to `lookahead`
     * passes early), send_buf right after the producing pass returns; a
     * buffer must stay untouched until the transfer completes: for a send,
     * until `sent` is called (or the step returns when `sent` is NULL). */
    void *(*recv_buf)(void *user, enum whale_pp_kind kind, int chunk, int mb);
    const void *(*send_buf)(void *user, enum whale_pp_kind kind, int chunk, int mb);
    /* Optional: a send of (kind, chunk, mb) has completed (its buffer is free). */
    void (*sent)(void *user, enum whale_pp_kind kind, int chunk, int mb);
    /* Optional: every backward of `chunk` in this step is done (grad-accumulation end;
     * the DP reduction of the chunk may start here if not issued inside backward). */
    int (*chunk_done)(void *user, int chunk);
    size_t msg_bytes;   /* bytes of one activation (= one gradient) message */
    int lookahead;      /* receives posted this many passes ahead (0 -> 1) */
};

struct whale_pp_stats {
    double t_compute;   /* seconds inside forward/backward callbacks */
    double t_wait;      /* seconds blocked on receives and final sends */
    int64_t bytes_sent, bytes_recv;
};

/* Runs one step of `s` on this pipeline rank over the pipeline group
 * `pp` (pp->rank == s->rank, pp->size == s->p). Sends and receives are
 * non-blocking; every send is complete on return. Spans go to the trace
 * when WHALE_TRACE is on. A callback's or a transfer's error stops the step
 * and is returned (logged with the rank and pass); transfers still posted
 * are abandoned, so their buffers must stay allocated: the caller aborts
 * the run (peers see the failure through the comm layer's detector). */
int whale_pp_run(struct whale_par_comm *pp, const struct whale_pp_schedule *s,
                 const struct whale_pp_hooks *h, struct whale_pp_stats *st);

/* Layers per stage for a pipeline of nstages (= p*v) virtual stages over a
 * chain of n layers with costs cost[0..n-1]: contiguous ranges minimising
 * the most expensive stage (ties: earlier stages lighter). out[i] = layers
 * of stage i, each >= 1. WHALE_EINVAL when n < nstages. */
int whale_pp_balance(const double *cost, int n, int nstages, int *out);

#ifdef __cplusplus
}
#endif
#endif
