/* All-to-all through a one-node group's shared segment (shm_internal.h),
 * run in the caller's thread.
 *
 * Step s moves piece s (`pb` bytes) of every block: I copy piece s of my
 * block for each peer q into part q of my input slot (and, in step 0, the
 * byte length of each of those blocks into the slot's header), publish cin,
 * then copy part `me` of every peer's input slot into my receive buffer and
 * publish red and fin. Two copies per byte, both of cache-sized pieces,
 * and one flag hand-off per step; members run up to COMM_SHM_DEPTH steps
 * apart, as on the other segment paths, and the generation flags move as
 * theirs do (nsteps generations reserved on every member), so all-to-all
 * mixes with the other collectives on the group.
 *
 * Where every member can read the others' memory (process_vm_readv, the
 * probe of shm_cma.c, agreed on the group's first all-to-all) the exchange
 * takes one generation instead: each member writes the address and length
 * of its block for every peer into its slot's header, and every member
 * reads its blocks straight out of the peers' send buffers (one copy per
 * byte instead of two, no slots in the cache), then waits until no peer
 * reads its buffer any more. On by default for all-to-all, unlike the
 * reducing collectives (whose slot path overlaps its copies with the
 * reduction): measured on 2 ranks of a 2-core VM, 4.0 against 6.3 us at
 * 64 KiB, 10.5 against 18-21 us at 256 KiB, 55 against 580-830 us at
 * 1 MiB, where the slots and both buffers no longer fit the cache.
 * WHALE_SHM_CMA=0 keeps the slot path; with WHALE_SHM_CMA=1 the
 * single-copy path starts at WHALE_SHM_CMA_MIN bytes as for the others,
 * else at A2A_CMA_MIN.
 *
 * A member whose receive blocks all lie in one receive window
 * (whale_shm_alloc, shm_win.c) says so in its header (push mode): its
 * peers then map the window and copy their blocks for it straight into
 * its receive buffer with memcpy (streaming stores for large exchanges),
 * where process_vm_readv would pin every page and copy at about half of
 * memcpy's rate; a peer that cannot map it writes with process_vm_writev.
 * Members in push and pull mode mix in one exchange: a block moves by its
 * receiver's mode. Why not UCX's shared-memory transport: one
 * rendezvous per peer and per call, where these paths wait on one flag
 * line per step.
 *
 * A receive buffer larger than the cache (WHALE_SHM_STREAM_MIN, as on the
 * other segment paths) is written with streaming stores: it is not read
 * again here, and ordinary stores would first read each line of it from
 * memory and evict the slots the peers are filling.
 *
 * The header lets a receiver check that its sender agrees on the block
 * length; a mismatch still runs every step (the peers keep their flags
 * moving) and returns WHALE_EINVAL naming both ranks. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/uio.h>

#include "comm/collectives/a2a.h"
#include "comm/transport/shm_internal.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"

/* Exchanges (largest block x p) from which the single-copy path is taken
 * when WHALE_SHM_CMA is unset: below, p - 1 system calls cost more than
 * the second copy of a few cache lines. */
#define A2A_CMA_MIN (16u << 10)
/* The same with more ranks on the node than cores: the single-copy path
 * has two rendezvous per call (the headers are out; no peer reads my
 * buffer any more), the slots one, and each rendezvous may wait for a
 * peer to be scheduled. Measured on 4 ranks of a 2-core VM at load 15-25
 * (a2a-vs-openmpi.sh, medians of 3-5 rounds): 64 KiB exchanges 25-34 us
 * through the slots against 42-127 us single copy; from 256 KiB the
 * slots' second copy costs more than the rendezvous it saves. */
#define A2A_CMA_MIN_OVER (128u << 10)

static inline uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline char *in_slot(const struct comm_shm *sh, int q, uint64_t gen)
{
    return sh->in + ((size_t)q * COMM_SHM_DEPTH + gen % COMM_SHM_DEPTH) * sh->slot;
}

/* Every peer's flag at byte offset `field` of its line has reached want. */
static bool peers_reached(const struct comm_shm *sh, size_t field, uint64_t want)
{
    if (want == 0 || (int64_t)want < 0)
        return true;
    for (int q = 0; q < sh->p; q++) {
        if (q == sh->r)
            continue;
        if (ld((const uint64_t *)((const char *)&sh->flags[q] + field)) < want)
            return false;
    }
    return true;
}

/* Bytes of a block of `len` in step s of pb-byte pieces. */
static inline size_t piece(size_t len, size_t pb, uint32_t s)
{
    size_t lo = (size_t)s * pb;
    return len <= lo ? 0 : len - lo < pb ? len - lo : pb;
}

/* Nothing moved: spin a little, then yield or sleep on the doorbell; now
 * and then run the progress engine (heartbeats, the watchdog that fails
 * the group when a member dies).
 *
 * With more members than cores the member we wait for may need this very
 * core: no pause loop, a few yields, then sleep until a member rings. The
 * progress engine then runs every 64th round only (a dead member is still
 * seen within 64 sleeps of 1 ms): it takes the context's lock, which the
 * progress thread contends for, and running it at every yield spent the
 * time slices the peers we wait for needed (contrib/bench/a2a-vs-openmpi.sh,
 * 4 ranks on 2 cores). */
static int idle(whale_group *g, struct comm_shm *sh, uint32_t seen, unsigned *n)
{
    whale_ctx *ctx = g->ctx;
    const bool over = ctx->oversubscribed;
    const unsigned spin = over ? 0 : 4096, yields = over ? 64 : 0;
    ++*n;
    if (*n % (over ? 64 : 256) == 0 || (!over && *n > spin)) {
        pthread_mutex_lock(&ctx->lock);
        comm_progress(ctx);
        bool failed = g->failed;
        pthread_mutex_unlock(&ctx->lock);
        if (failed)
            return WHALE_EPEER;
    }
    if (*n <= spin) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    } else if (*n <= spin + yields) {
        sched_yield();
    } else {
        comm_shm_sleep(sh->door, seen, 1000);
    }
    return 0;
}

/* len bytes at the peer's address src into dst; 0 or an errno. */
static int cma_read(uint64_t pid, void *dst, uint64_t src, size_t len)
{
    char *d = dst;
    while (len) {
        struct iovec l = { d, len }, r = { (void *)(uintptr_t)src, len };
        ssize_t n = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EFAULT;
        d += n;
        src += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* len bytes at dst into the peer's address dst_remote; 0 or an errno. */
static int cma_write(uint64_t pid, uint64_t dst, const void *src, size_t len)
{
    const char *s = src;
    while (len) {
        struct iovec l = { (void *)s, len }, r = { (void *)(uintptr_t)dst, len };
        ssize_t n = process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EFAULT;
        s += n;
        dst += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* Words of a member's header in the single-copy exchange: per peer q the
 * address and length of my block for q, then the address and length of my
 * receive block from q (push mode), then my receive window (id, fd,
 * length, base; id 0: pull mode). */
#define HDR_WORDS(p) (4 * (size_t)(p) + 4)

/* Whether every block I receive from a peer lies in one receive window
 * (whale_shm_alloc): then the peers write them (push mode). */
static bool recv_window(const struct comm_a2a *a, int p, int r, struct comm_win_ref *w,
                        uint64_t *base)
{
    size_t lo = SIZE_MAX, hi = 0;
    for (int q = 0; q < p; q++)
        if (q != r && a->rlen[q]) {
            lo = a->roff[q] < lo ? a->roff[q] : lo;
            hi = a->roff[q] + a->rlen[q] > hi ? a->roff[q] + a->rlen[q] : hi;
        }
    if (lo >= hi || !comm_win_find(a->recv + lo, hi - lo, w))
        return false;
    *base = (uint64_t)(uintptr_t)(a->recv + lo) - w->off;
    return true;
}

/* Operations queued on the group come first (issue order): drive them to
 * completion before reserving generations after theirs. */
static int drain(whale_group *g)
{
    whale_ctx *ctx = g->ctx;
    for (;;) {
        pthread_mutex_lock(&ctx->lock);
        bool busy = g->head != NULL && !g->failed;
        if (busy)
            comm_progress(ctx);
        bool failed = g->failed;
        pthread_mutex_unlock(&ctx->lock);
        if (failed)
            return WHALE_EPEER;
        if (!busy)
            return 0;
        sched_yield();
    }
}

static int wait_peers(whale_group *g, struct comm_shm *sh, size_t field, uint64_t want,
                      const char *what)
{
    unsigned n = 0;
    for (;;) {
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        if (peers_reached(sh, field, want))
            return 0;
        int rc = idle(g, sh, seen, &n);
        if (rc) {
            whale_log(g->ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                      "%s on a group of %d ranks: %s is dead (%s)", what, sh->p, comm_blame(g),
                      whale_strerror(rc));
            return rc;
        }
    }
}

/* My share of the single-copy exchange with peer q, whose header for
 * generation gen is out: read its block for me (pull), write mine into its
 * window (push). 0 or an errno; a length mismatch is noted in bad. */
static int peer_job(whale_group *g, struct comm_shm *sh, const struct comm_a2a *a, uint64_t gen,
                    int q, bool push, bool stream, int *bad, size_t *bad_len)
{
    const int p = sh->p, r = sh->r;
    const uint64_t *qh = (const uint64_t *)in_slot(sh, q, gen), *qw = qh + 4 * (size_t)p;
    const uint64_t qpid = ld(&sh->flags[q].pid);
    uint64_t addr = qh[2 * r], len = qh[2 * r + 1];
    int err = 0;
    if (len != a->rlen[q] && *bad < 0) {
        *bad = q;
        *bad_len = (size_t)len;
    }
    size_t n = len < a->rlen[q] ? (size_t)len : a->rlen[q];
    if (n && !push)
        err = cma_read(qpid, a->recv + a->roff[q], addr, n);
    /* q's receive blocks lie in its window: I write my block for q */
    uint64_t qaddr = qh[2 * (size_t)p + 2 * r], qlen = qh[2 * (size_t)p + 2 * r + 1];
    n = qlen < a->slen[q] ? (size_t)qlen : a->slen[q];
    if (!err && qw[0] && n) {
        char *m = comm_win_map(sh, q, qpid, qw[0], qw[1], qw[2]);
        const char *src = a->send + a->soff[q];
        if (!m)
            err = cma_write(qpid, qaddr, src, n);
        else if (stream)
            comm_copy_stream(m + (qaddr - qw[3]), src, n);
        else
            memcpy(m + (qaddr - qw[3]), src, n);
    }
    if (err)
        whale_log(g->ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                  "%s on a group of %d: %s member %d's buffer failed: %s", a->what, p,
                  push ? "writing" : "reading", q, strerror(err));
    return err;
}

/* The single-copy exchange in generation gen (see the top). */
static int cma_job(whale_group *g, struct comm_shm *sh, const struct comm_a2a *a, uint64_t gen)
{
    const int p = sh->p, r = sh->r;
    struct comm_shm_flags *me = &sh->flags[r];
    int rc = wait_peers(g, sh, offsetof(struct comm_shm_flags, red), gen - COMM_SHM_DEPTH, a->what);
    if (rc)
        return rc;
    uint64_t *hd = (uint64_t *)in_slot(sh, r, gen), *wh = hd + 4 * (size_t)p;
    struct comm_win_ref w;
    uint64_t wbase = 0;
    const bool push = recv_window(a, p, r, &w, &wbase);
    for (int q = 0; q < p; q++) {
        hd[2 * q] = (uint64_t)(uintptr_t)(a->send + a->soff[q]);
        hd[2 * q + 1] = a->slen[q];
        hd[2 * (size_t)p + 2 * q] = (uint64_t)(uintptr_t)(a->recv + a->roff[q]);
        hd[2 * (size_t)p + 2 * q + 1] = a->rlen[q];
    }
    wh[0] = push ? w.id : 0;
    wh[1] = push ? w.fd : 0;
    wh[2] = push ? w.len : 0;
    wh[3] = wbase;
    st(&me->cin, gen);
    comm_shm_ring(sh->door);
    /* my own block moves while the peers read my header and start on
     * theirs (it was copied before the header was out, so a large one
     * delayed every peer's writes into my window by its copy), with
     * streaming stores when it is large: glibc's memcpy switches to them
     * only past a threshold scaled to the whole shared cache (99 MiB on
     * this project's VM), and below it reads every line of the receive
     * buffer before writing it */
    if (a->rlen[r] >= sh->stream_min)
        comm_copy_stream(a->recv + a->roff[r], a->send + a->soff[r], a->rlen[r]);
    else if (a->rlen[r])
        memcpy(a->recv + a->roff[r], a->send + a->soff[r], a->rlen[r]);
    int bad = -1, err = 0;
    size_t bad_len = 0, sent = 0;
    for (int q = 0; q < p; q++)
        sent += q == r ? 0 : a->slen[q];
    const bool stream = sent >= sh->stream_min;
    /* Each peer's blocks move as soon as its header is out, instead of
     * after every header is: with more members than cores a member then
     * copies while the peers it still waits for are scheduled, and the
     * only rendezvous left is the final one (no peer reads my buffer any
     * more). Peers are visited from the next rank on, so that the members
     * do not all start on one peer. */
    /* peers still to visit, one bit each (a node may hold more than 64) */
    uint64_t pending[(p + 63) / 64];
    memset(pending, 0, sizeof pending);
    for (int k = 1; k < p; k++)
        pending[k / 64] |= 1ull << (k % 64);
    int left = p - 1;
    unsigned idle_n = 0;
    while (left > 0 && !err) {
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        bool moved = false;
        for (int k = 1; k < p && !err; k++) {
            int q = (r + k) % p;
            if (!((pending[k / 64] >> (k % 64)) & 1) || ld(&sh->flags[q].cin) < gen)
                continue;
            pending[k / 64] &= ~(1ull << (k % 64));
            left--;
            moved = true;
            err = peer_job(g, sh, a, gen, q, push, stream, &bad, &bad_len);
        }
        if (moved || err) {
            idle_n = 0;
            continue;
        }
        if ((rc = idle(g, sh, seen, &idle_n))) {
            whale_log(g->ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                      "%s on a group of %d ranks: %s is dead (%s)", a->what, p, comm_blame(g),
                      whale_strerror(rc));
            return rc;
        }
    }
    /* the headers are read and nothing of the peers' is read any more */
    st(&me->red, gen);
    st(&me->fin, gen);
    comm_shm_ring(sh->door);
    if (err)
        return err == ESRCH || err == EFAULT ? WHALE_EPEER : WHALE_EIO;
    /* my send buffer goes back to the caller once no peer reads it */
    if ((rc = wait_peers(g, sh, offsetof(struct comm_shm_flags, fin), gen, a->what)))
        return rc;
    if (bad >= 0) {
        whale_error("%s (rank %d of %d): expects %zu bytes from rank %d, which sends %zu", a->what, r,
                    p, a->rlen[bad], bad, bad_len);
        return WHALE_EINVAL;
    }
    return 0;
}

/* Whether every member can read every other's memory: agreed once per
 * group (a collective on g, on its first all-to-all through the segment). */
static int agree_cma(whale_group *g, struct comm_shm *sh)
{
    bool want = true;
    if (whale_env_bool("WHALE_SHM_CMA", true, &want))
        want = false;
    int32_t ok = sh->cma || (want && comm_shm_cma_probe(sh)), all = 0;
    int rc = whale_allreduce(g, &ok, &all, 1, WHALE_INT32, WHALE_MIN);
    if (rc)
        return rc;
    sh->a2a_cma = all ? 1 : -1;
    whale_debug("all-to-all on a group of %d: single copy %s", sh->p, all ? "on" : "off");
    return 0;
}

bool comm_a2a_shm_single(const whale_group *g)
{
    return g->shm_state == COMM_SHM_READY && g->shm && g->shm->a2a_cma > 0 &&
           HDR_WORDS(g->shm->p) * sizeof(uint64_t) <= g->shm->slot;
}

int comm_a2a_shm(whale_group *g, const struct comm_a2a *a)
{
    whale_ctx *ctx = g->ctx;
    struct comm_shm *sh = g->shm;
    const int p = sh->p, r = sh->r;
    const size_t hdr = ((size_t)p * sizeof(uint64_t) + COMM_SHM_LINE - 1) & ~(size_t)(COMM_SHM_LINE - 1);
    const size_t pb = ((sh->slot - hdr) / (size_t)p) & ~(size_t)(COMM_SHM_LINE - 1);
    if (!pb) {
        whale_error("%s on a group of %d: shared-memory steps of %zu bytes are too small", a->what, p,
                    sh->slot);
        return WHALE_EINVAL;
    }
    int rc = sh->a2a_cma ? 0 : agree_cma(g, sh);
    if (!rc)
        rc = drain(g);
    if (rc)
        return rc;
    const size_t cma_min = ctx->shm_cma         ? sh->cma_min
                           : ctx->oversubscribed ? A2A_CMA_MIN_OVER
                                                 : A2A_CMA_MIN;
    const bool cma = sh->a2a_cma > 0 && HDR_WORDS(p) * sizeof(uint64_t) <= sh->slot &&
                     (a->any_size || (a->maxlen && a->maxlen * (size_t)p >= cma_min));
    const uint32_t nsteps = cma ? 1 : (uint32_t)((a->maxlen + pb - 1) / pb);
    /* my own block does not go through the segment (the single-copy
     * exchange copies it once its header is out) */
    if (a->rlen[r] && !cma)
        memcpy(a->recv + a->roff[r], a->send + a->soff[r], a->rlen[r]);
    if (!nsteps)
        return 0;
    pthread_mutex_lock(&ctx->lock);
    uint64_t gen0 = sh->next_gen;
    sh->next_gen += nsteps;
    g->seq++;
    pthread_mutex_unlock(&ctx->lock);
    if (cma)
        return cma_job(g, sh, a, gen0);
    size_t total = 0;
    for (int q = 0; q < p; q++)
        total += q == r ? 0 : a->rlen[q];
    const bool stream = total >= sh->stream_min;
    struct comm_shm_flags *me = &sh->flags[r];
    const size_t F_CIN = offsetof(struct comm_shm_flags, cin);
    const size_t F_RED = offsetof(struct comm_shm_flags, red);
    uint32_t s1 = 0, s2 = 0;
    unsigned n = 0;
    int bad = -1;
    size_t bad_len = 0;
    while (s2 < nsteps) {
        bool moved = false;
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        /* copy in: my slot of gen is free once every peer read gen - depth */
        while (s1 < nsteps && s1 < s2 + COMM_SHM_DEPTH &&
               peers_reached(sh, F_RED, gen0 + s1 - COMM_SHM_DEPTH)) {
            char *slot = in_slot(sh, r, gen0 + s1);
            for (int q = 0; q < p; q++) {
                if (q == r)
                    continue;
                size_t b = piece(a->slen[q], pb, s1);
                if (b)
                    memcpy(slot + hdr + (size_t)q * pb, a->send + a->soff[q] + (size_t)s1 * pb, b);
                if (s1 == 0)
                    ((uint64_t *)slot)[q] = a->slen[q];
            }
            st(&me->cin, gen0 + s1);
            s1++;
            moved = true;
        }
        /* copy out: every peer's slot of gen is filled */
        while (s2 < s1 && peers_reached(sh, F_CIN, gen0 + s2)) {
            for (int q = 0; q < p; q++) {
                if (q == r)
                    continue;
                const char *slot = in_slot(sh, q, gen0 + s2);
                size_t want = a->rlen[q];
                if (s2 == 0) {
                    uint64_t sent = ((const uint64_t *)slot)[r];
                    if (sent != want && bad < 0) {
                        bad = q;
                        bad_len = (size_t)sent;
                    }
                }
                size_t b = piece(want, pb, s2);
                char *dst = a->recv + a->roff[q] + (size_t)s2 * pb;
                if (b && stream)
                    comm_copy_stream(dst, slot + hdr + (size_t)r * pb, b);
                else if (b)
                    memcpy(dst, slot + hdr + (size_t)r * pb, b);
            }
            st(&me->red, gen0 + s2);
            st(&me->fin, gen0 + s2);
            s2++;
            moved = true;
        }
        if (moved) {
            comm_shm_ring(sh->door);
            n = 0;
            continue;
        }
        rc = idle(g, sh, seen, &n);
        if (rc) {
            whale_log(ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                      "%s on a group of %d ranks: %s is dead (%s)", a->what, p, comm_blame(g),
                      whale_strerror(rc));
            return rc;
        }
    }
    if (bad >= 0) {
        whale_error("%s (rank %d of %d): expects %zu bytes from rank %d, which sends %zu", a->what, r,
                    p, a->rlen[bad], bad, bad_len);
        return WHALE_EINVAL;
    }
    return 0;
}
