/* Allreduce, reduce-scatter and allgather through a one-node group's shared
 * segment (shm_internal.h), as a state machine the progress engine drives.
 *
 * The vector is cut into p blocks (allreduce: balanced partition of count;
 * reduce-scatter / allgather: block q = rank q's count elements); step s
 * moves chunk s (cb elements) of every block:
 *   1. copy in:  I copy my chunk of every other block into my input slot;
 *   2. reduce:   I combine chunk s of MY block from every member's input
 *                slot (my own from my send buffer), in rank order, into
 *                the output slot's piece `me` (reduce-scatter: into recv);
 *                allgather instead copies my chunk into the output slot;
 *   3. copy out: I copy every piece of the output slot into recv.
 * Per step and member that is one copy in, 1/p of the reduction and one
 * copy out, all of cache-sized pieces, and the reduction is done by the
 * member that owns the block: no data crosses twice, every member ends with
 * the same bits. Small allreduces (one step) skip phase 3: every member
 * copies in its whole vector and reduces all of it itself (one wait instead
 * of two), from the slots only so that the order, hence the bits, are the
 * same everywhere.
 *
 * A phase only waits for the generation flags it needs (shm_internal.h), so
 * members run up to COMM_SHM_DEPTH steps apart; a member descheduled in the
 * middle costs the others nothing until they need its data. Never blocks:
 * returns 0 and the progress engine polls again (and keeps watching peers,
 * so a dead member still fails the operation). */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm_internal.h"
#include "whale/error.h"
#include "whale/log.h"

/* Above this the allreduce splits the work by block. */
#define SMALL_BYTES 16384

static inline uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

void comm_shm_ring(struct comm_shm_bell *d)
{
    __atomic_fetch_add(&d->bell, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&d->sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &d->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void comm_shm_sleep(struct comm_shm_bell *d, uint32_t seen, long timeout_us)
{
    struct timespec ts = { timeout_us / 1000000, (timeout_us % 1000000) * 1000 };
    __atomic_fetch_add(&d->sleepers, 1, __ATOMIC_SEQ_CST);
    /* returns at once when the bell moved since `seen` (a store we have not
     * looked at yet); EFAULT if the segment went away meanwhile: harmless */
    if (__atomic_load_n(&d->bell, __ATOMIC_SEQ_CST) == seen)
        syscall(SYS_futex, &d->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
    __atomic_fetch_sub(&d->sleepers, 1, __ATOMIC_SEQ_CST);
}

int comm_shm_build(comm_op_t *op, struct comm_stage *stg, int coll, const void *send, void *recv,
                   size_t count, int avg_div, bool balanced)
{
    struct comm_shm *sh = stg->g->shm;
    struct comm_shm_job *j = &stg->shm;
    size_t esz = whale_dtype_size(op->dtype);
    int p = sh->p;
    memset(j, 0, sizeof *j);
    j->send = send;
    j->recv = recv;
    j->count = count;
    j->avg_div = avg_div;
    j->balanced = balanced || coll == COMM_ALLREDUCE;
    j->cb = sh->slot / ((size_t)p * esz);
    if (!j->cb)
        return WHALE_EINVAL;
    /* large vectors: straight from the peers' buffers (shm_cma.c) */
    if (comm_shm_cma_build(sh, j, coll, esz) == 0)
        goto gen;
    switch (coll) {
    case COMM_ALLREDUCE:
        if (count * esz <= SMALL_BYTES && count * esz <= sh->slot) {
            j->kind = SHM_ALLREDUCE_SMALL;
            j->nsteps = count ? 1 : 0;
            goto gen;
        }
        j->kind = SHM_ALLREDUCE;
        break;
    case COMM_REDUCE_SCATTER:
        j->kind = SHM_REDUCE_SCATTER;
        break;
    case COMM_ALLGATHER:
        j->kind = SHM_ALLGATHER;
        break;
    default:
        return WHALE_EINVAL;
    }
    size_t maxblock = j->balanced ? part_len(count, p, 0) : count;
    /* Vectors of a few slots: smaller steps, so that the members' phases
     * still overlap (copy in, reduce and copy out of neighbouring steps run
     * at once on different cores); whole lines, so pieces stay aligned.
     * Every member computes the same cb (count, p and min_steps agree). */
    size_t line = COMM_SHM_LINE / esz;
    size_t want = (maxblock + sh->min_steps - 1) / sh->min_steps;
    want = (want + line - 1) / line * line;
    if (want && want < j->cb)
        j->cb = want;
    j->nsteps = (uint32_t)((maxblock + j->cb - 1) / j->cb);
gen:
    j->gen0 = sh->next_gen;
    sh->next_gen += j->nsteps;
    return 0;
}

/* Block b of the job: offset and length in elements. */
static inline size_t blk_off(const struct comm_shm_job *j, int p, int b)
{
    return j->balanced ? part_off(j->count, p, b) : (size_t)b * j->count;
}
static inline size_t blk_len(const struct comm_shm_job *j, int p, int b)
{
    return j->balanced ? part_len(j->count, p, b) : j->count;
}
/* Elements of block b in step s. */
static inline size_t piece_len(const struct comm_shm_job *j, int p, int b, uint32_t s)
{
    size_t len = blk_len(j, p, b), lo = (size_t)s * j->cb;
    if (len <= lo)
        return 0;
    return len - lo < j->cb ? len - lo : j->cb;
}

static inline char *in_slot(const struct comm_shm *sh, int q, uint64_t gen)
{
    return sh->in + ((size_t)q * COMM_SHM_DEPTH + gen % COMM_SHM_DEPTH) * sh->slot;
}
static inline char *out_slot(const struct comm_shm *sh, uint64_t gen)
{
    return sh->out + (gen % COMM_SHM_DEPTH) * sh->slot;
}

/* Every peer (and me when self) has flag >= want. */
static bool all_reached(const struct comm_shm *sh, size_t field, uint64_t want, bool self)
{
    if (want == 0 || (int64_t)want < 0)
        return true;
    for (int q = 0; q < sh->p; q++) {
        if (q == sh->r && !self)
            continue;
        const uint64_t *f = (const uint64_t *)((const char *)&sh->flags[q] + field);
        if (ld(f) < want)
            return false;
    }
    return true;
}

#define F_CIN offsetof(struct comm_shm_flags, cin)
#define F_RED offsetof(struct comm_shm_flags, red)
#define F_FIN offsetof(struct comm_shm_flags, fin)

/* dst = srcs[0] op srcs[1] op ... in rank order; when dst is one of the
 * sources (in-place reduce-scatter: my own block) fold into it instead. */
static void reduce_n(void *dst, const void *const *srcs, int p, int self, size_t n,
                     enum whale_dtype t, enum whale_op op)
{
    if (srcs[self] == dst) {
        for (int q = 0; q < p; q++)
            if (q != self)
                comm_reduce(dst, dst, srcs[q], n, t, op);
        return;
    }
    comm_reduce(dst, srcs[0], srcs[1], n, t, op);
    for (int q = 2; q < p; q++)
        comm_reduce(dst, dst, srcs[q], n, t, op);
}

static void copy_in(const struct comm_shm *sh, const struct comm_shm_job *j, size_t esz, uint32_t s)
{
    char *slot = in_slot(sh, sh->r, j->gen0 + s);
    if (j->kind == SHM_ALLREDUCE_SMALL) {
        memcpy(slot, j->send, j->count * esz);
        return;
    }
    for (int b = 0; b < sh->p; b++) {
        if (b == sh->r)
            continue;
        size_t n = piece_len(j, sh->p, b, s);
        if (n)
            memcpy(slot + (size_t)b * j->cb * esz,
                   j->send + (blk_off(j, sh->p, b) + (size_t)s * j->cb) * esz, n * esz);
    }
}

static void reduce_step(const struct comm_shm *sh, const struct comm_shm_job *j, enum whale_dtype t,
                        enum whale_op op, size_t esz, uint32_t s)
{
    const int p = sh->p, r = sh->r;
    uint64_t gen = j->gen0 + s;
    const void *srcs[WHALE_SHM_MAX_RANKS];
    if (j->kind == SHM_ALLGATHER) {
        size_t n = piece_len(j, p, r, s);
        if (n)
            memcpy(out_slot(sh, gen) + (size_t)r * j->cb * esz, j->send + (size_t)s * j->cb * esz,
                   n * esz);
        return;
    }
    if (j->kind == SHM_ALLREDUCE_SMALL) {
        for (int q = 0; q < p; q++)
            srcs[q] = in_slot(sh, q, gen);
        reduce_n(j->recv, srcs, p, r, j->count, t, op);
        if (j->avg_div)
            comm_avg(j->recv, j->count, t, j->avg_div);
        return;
    }
    size_t n = piece_len(j, p, r, s);
    if (!n)
        return;
    size_t mine = blk_off(j, p, r) + (size_t)s * j->cb;
    for (int q = 0; q < p; q++)
        srcs[q] = q == r ? (const void *)(j->send + mine * esz)
                         : (const void *)(in_slot(sh, q, gen) + (size_t)r * j->cb * esz);
    char *dst = j->kind == SHM_REDUCE_SCATTER ? j->recv + (size_t)s * j->cb * esz
                                              : out_slot(sh, gen) + (size_t)r * j->cb * esz;
    reduce_n(dst, srcs, p, r, n, t, op);
    if (j->avg_div)
        comm_avg(dst, n, t, j->avg_div);
}

/* A receive vector larger than the cache takes streaming stores
 * (shm_copy.c): it is not read again during the collective, and ordinary
 * stores would read each line of it from memory first and evict the slots. */
static void copy_out(const struct comm_shm *sh, const struct comm_shm_job *j, size_t esz, uint32_t s)
{
    const char *slot = out_slot(sh, j->gen0 + s);
    const int p = sh->p;
    const bool stream = (blk_off(j, p, p - 1) + blk_len(j, p, p - 1)) * esz >= sh->stream_min;
    for (int q = 0; q < p; q++) {
        size_t n = piece_len(j, p, q, s);
        if (!n)
            continue;
        char *dst = j->recv + (blk_off(j, p, q) + (size_t)s * j->cb) * esz;
        if (stream)
            comm_copy_stream(dst, slot + (size_t)q * j->cb * esz, n * esz);
        else
            memcpy(dst, slot + (size_t)q * j->cb * esz, n * esz);
    }
}

int comm_shm_advance(comm_op_t *op, struct comm_stage *stg, int *events)
{
    struct comm_shm *sh = stg->g->shm;
    struct comm_shm_job *j = &stg->shm;
    if (!sh)
        return WHALE_ESTATE;
    const size_t esz = whale_dtype_size(op->dtype);
    const enum whale_op rop = op->rop == WHALE_AVG ? WHALE_SUM : op->rop;
    const bool has_in = j->kind != SHM_ALLGATHER;
    const bool has_out = j->kind == SHM_ALLREDUCE || j->kind == SHM_ALLGATHER;
    if (j->cma)
        return comm_shm_cma_advance(stg, op->dtype, rop, esz, events);
    struct comm_shm_flags *me = &sh->flags[sh->r];
    const uint64_t D = COMM_SHM_DEPTH;
    for (;;) {
        bool moved = false;
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        /* 1: my input slot of generation gen is free once every peer has
         * reduced generation gen - D (they read it there) */
        while (has_in && j->s1 < j->nsteps && j->s1 < j->s2 + D) {
            uint64_t gen = j->gen0 + j->s1;
            if (!all_reached(sh, F_RED, gen - D, false))
                break;
            copy_in(sh, j, esz, j->s1);
            st(&me->cin, gen);
            j->s1++;
            moved = true;
        }
        /* 2: every peer's input of gen is there; the output slot of gen is
         * free once everyone (me too) copied generation gen - D out */
        while (j->s2 < (has_in ? j->s1 : j->nsteps) && (!has_out || j->s2 < j->s3 + D)) {
            uint64_t gen = j->gen0 + j->s2;
            if ((has_in && !all_reached(sh, F_CIN, gen, false)) ||
                (has_out && !all_reached(sh, F_FIN, gen - D, true)))
                break;
            reduce_step(sh, j, op->dtype, rop, esz, j->s2);
            st(&me->red, gen);
            if (!has_out)
                st(&me->fin, gen);
            j->s2++;
            moved = true;
        }
        /* 3: every piece of gen is reduced */
        while (has_out && j->s3 < j->s2) {
            uint64_t gen = j->gen0 + j->s3;
            if (!all_reached(sh, F_RED, gen, false))
                break;
            copy_out(sh, j, esz, j->s3);
            st(&me->fin, gen);
            j->s3++;
            moved = true;
        }
        if (moved) {
            (*events)++;
            comm_shm_ring(sh->door);
        }
        if ((has_out ? j->s3 : j->s2) == j->nsteps)
            return 1;
        if (!moved) {
            /* the engine's back-off may sleep on the bell (progress.c) */
            stg->g->ctx->shm_wait = sh->door;
            stg->g->ctx->shm_wait_seen = seen;
            return 0;
        }
    }
}

/* Wait until every peer's flag reaches want. Spins (the peer is usually on
 * another core and about to write it), yields when cores are shared, and
 * every few hundred polls runs the progress engine under ctx->lock: that
 * keeps heartbeats going and lets the watchdog declare a dead peer, which
 * ends the wait with WHALE_EPEER. */
static int wait_flags(whale_group *g, const struct comm_shm *sh, size_t field, uint64_t want)
{
    whale_ctx *ctx = g->ctx;
    unsigned spin = ctx->oversubscribed ? 64 : 4096;
    for (unsigned n = 1;; n++) {
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        if (all_reached(sh, field, want, false))
            return 0;
        if (n % 256 == 0 || n > spin) {
            pthread_mutex_lock(&ctx->lock);
            comm_progress(ctx);
            bool failed = g->failed;
            pthread_mutex_unlock(&ctx->lock);
            if (failed)
                return WHALE_EPEER;
        }
        if (n <= spin) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        } else if (ctx->oversubscribed && n <= spin + 64) {
            /* more members than cores: the one we wait for may be
             * runnable on this very core */
            sched_yield();
        } else {
            comm_shm_sleep(sh->door, seen, 1000);
        }
    }
}

int comm_shm_allreduce_now(whale_group *g, const void *send, void *recv, size_t count,
                           enum whale_dtype t, enum whale_op op)
{
    whale_ctx *ctx = g->ctx;
    struct comm_shm *sh = g->shm;
    size_t esz = whale_dtype_size(t);
    if (g->shm_state != COMM_SHM_READY || !sh || !count || count * esz > SMALL_BYTES ||
        count * esz > sh->slot || g->internal ||
        comm_select(g, COMM_ALLREDUCE, count * esz, ctx->forced_algo[COMM_ALLREDUCE]) != COMM_ALGO_SHM)
        return 1;
    pthread_mutex_lock(&ctx->lock);
    if (g->head || g->failed) {
        /* queued operations come first; a failure is reported by the engine */
        pthread_mutex_unlock(&ctx->lock);
        return 1;
    }
    /* what comm_build would have reserved: the same on every member */
    uint64_t gen = sh->next_gen++;
    g->seq++;
    pthread_mutex_unlock(&ctx->lock);
    struct comm_shm_job j = { .kind = SHM_ALLREDUCE_SMALL, .send = send, .recv = recv,
                              .count = count, .gen0 = gen, .nsteps = 1,
                              .avg_div = op == WHALE_AVG ? g->size : 0 };
    struct comm_shm_flags *me = &sh->flags[sh->r];
    int rc = wait_flags(g, sh, F_RED, gen - COMM_SHM_DEPTH);
    if (!rc) {
        copy_in(sh, &j, esz, 0);
        st(&me->cin, gen);
        comm_shm_ring(sh->door);
        rc = wait_flags(g, sh, F_CIN, gen);
    }
    if (rc) {
        whale_log(ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                  "allreduce on a group of %d ranks: %s is dead (%s)", g->size, comm_blame(g),
                  whale_strerror(rc));
        return rc;
    }
    reduce_step(sh, &j, t, op == WHALE_AVG ? WHALE_SUM : op, esz, 0);
    st(&me->red, gen);
    st(&me->fin, gen);
    comm_shm_ring(sh->door);
    return 0;
}
