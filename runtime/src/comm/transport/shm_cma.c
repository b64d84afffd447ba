/* The single-copy path of the shared-memory collectives: large vectors are
 * not staged through the segment's slots (shm_coll.c: about 1.5 n copied
 * per member) but read straight out of the peers' own buffers with
 * process_vm_readv (cross-memory attach, one kernel copy).
 *
 * The vector is cut into p blocks as on the slot path; block b belongs to
 * member b. Each member publishes its send and receive addresses in its
 * flag line (xsend, xrecv, then xgen = the job's first generation), then:
 *   reduce (allreduce, reduce-scatter): for each step s of cma_step bytes of
 *     MY block, read every peer's piece of it into an L2-resident scratch
 *     and combine all p pieces in rank order into my receive buffer, then
 *     publish red = gen0 + s. No wait: the peers' inputs are there from the
 *     start.
 *   gather (allreduce: from the owner's receive buffer once its red says
 *     the step is reduced; allgather: from the owner's send buffer at once):
 *     read peer q's block q straight into my receive buffer, as many steps
 *     at a time as are ready.
 *   end: fin = last generation; wait until every peer's fin says it reads
 *     nothing of mine any more (my buffers go back to the caller).
 * Per member that is (p-1)/p n read for the reduction (into cache), one
 * reduction pass over its block, and (p-1)/p n read for the gather: the
 * copy bound of a direct ring, without its p-1 rendezvous.
 *
 * Every element is reduced by exactly one member, in rank order, so all
 * members end with the same bits. The generation flags move as on the slot
 * path (every job reserves its generations at build time on every member),
 * so both paths mix freely in one group. A dead member never publishes the
 * flags the others wait for; the progress engine keeps watching peers and
 * fails the operation with WHALE_EPEER (a read from a process that is gone
 * fails at once with ESRCH: the same error, sooner).
 *
 * Off by default (WHALE_SHM_CMA=1 turns it on): on the VMs it was measured
 * on, process_vm_readv pins every 4 KiB page of the peer and copied at about
 * half of memcpy's rate (4.3 against 9 GB/s into an L2-sized buffer), so
 * this path ran at 0.8-0.96x the slot path, whose extra copies stay in
 * cache. Where pinning is cheap (bare metal, huge pages) it saves them.
 *
 * In place (send == recv) is safe: the owner of block b writes b only after
 * reading its pieces (its own included), and copies any other block q over
 * its input only after q's owner published that it has read it (red). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm_internal.h"
#include "whale/error.h"
#include "whale/log.h"

_Static_assert(sizeof(((struct comm_shm_job *)0)->got) / sizeof(uint32_t) >= WHALE_SHM_MAX_RANKS,
               "a read counter per member");

static inline uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* What a peer reads to check that it may read us: its own address mixed
 * with our pid, so a read that lands in another process (another pid
 * namespace, a recycled pid) cannot pass. */
static uint64_t probe_word;
#define PROBE_MIX 0x9e3779b97f4a7c15ull

/* Yama's ptrace_scope 1 lets a process read only its descendants' memory:
 * the members are siblings, so each declares that any process of the same
 * user may (what it may anyway without Yama). Scopes 2 and 3 cannot be
 * opted out of: the probe fails and the slot path stays. */
static void permit_readers(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (!f)
        return;
    if (fscanf(f, "%d", &scope) != 1)
        scope = 0;
    fclose(f);
    if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        whale_debug("single-copy collectives: PR_SET_PTRACER: %s", strerror(errno));
}

void comm_shm_cma_publish(struct comm_shm *sh, bool permit)
{
    if (permit)
        permit_readers();
    uint64_t pid = (uint64_t)getpid();
    __atomic_store_n(&probe_word, (uint64_t)(uintptr_t)&probe_word ^ pid ^ PROBE_MIX, __ATOMIC_RELAXED);
    struct comm_shm_flags *me = &sh->flags[sh->r];
    st(&me->pid, pid);
    st(&me->probe, (uint64_t)(uintptr_t)&probe_word);
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

bool comm_shm_cma_probe(const struct comm_shm *sh)
{
    for (int q = 0; q < sh->p; q++) {
        if (q == sh->r)
            continue;
        uint64_t pid = ld(&sh->flags[q].pid), addr = ld(&sh->flags[q].probe), v = 0;
        int e = pid && addr ? cma_read(pid, &v, addr, sizeof v) : EINVAL;
        if (e || v != (addr ^ pid ^ PROBE_MIX)) {
            whale_debug("single-copy collectives: cannot read member %d (pid %llu): %s", q,
                        (unsigned long long)pid, e ? strerror(e) : "another process answered");
            return false;
        }
    }
    return true;
}

static inline size_t blk_off(const struct comm_shm_job *j, int p, int b)
{
    return j->balanced ? part_off(j->count, p, b) : (size_t)b * j->count;
}
static inline size_t blk_len(const struct comm_shm_job *j, int p, int b)
{
    return j->balanced ? part_len(j->count, p, b) : j->count;
}
/* Steps of block b (cb elements each). */
static inline uint32_t blk_steps(const struct comm_shm_job *j, int p, int b)
{
    return (uint32_t)((blk_len(j, p, b) + j->cb - 1) / j->cb);
}

int comm_shm_cma_build(struct comm_shm *sh, struct comm_shm_job *j, int coll, size_t esz)
{
    size_t total = (j->balanced ? j->count : j->count * (size_t)sh->p) * esz;
    if (!sh->cma || !sh->scratch || total < sh->cma_min || total == 0 ||
        (coll != COMM_ALLREDUCE && coll != COMM_REDUCE_SCATTER && coll != COMM_ALLGATHER))
        return 1;
    j->cb = sh->cma_step / esz;
    if (!j->cb)
        return 1;
    j->kind = coll == COMM_ALLREDUCE ? SHM_ALLREDUCE : coll == COMM_REDUCE_SCATTER ? SHM_REDUCE_SCATTER
                                                                                   : SHM_ALLGATHER;
    j->cma = true;
    j->phase = 0;
    memset(j->got, 0, sizeof j->got);
    size_t maxblock = j->balanced ? part_len(j->count, sh->p, 0) : j->count;
    j->nsteps = (uint32_t)((maxblock + j->cb - 1) / j->cb);
    if (!j->nsteps)
        j->nsteps = 1; /* one generation at least: the end flags need one */
    return 0;
}

static int read_failed(whale_group *g, int q, int e)
{
    /* ESRCH: the process is gone; EFAULT: its buffer is (it left the
     * operation, which only a failure makes it do): either way a peer
     * failure, which the watchdog reports for everyone */
    whale_log(g->ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
              "shared-memory collective on a group of %d: reading member %d's buffer failed: %s",
              g->size, q, strerror(e));
    return e == ESRCH || e == EFAULT ? WHALE_EPEER : WHALE_EIO;
}

/* Step s of my block: every member's piece, combined in rank order into my
 * receive buffer (2 scratch pieces: the peer's piece just read, the running
 * combination). dst may be my own send piece (in place): it is written only
 * by the last combination, after it was read. */
static int reduce_step(whale_group *g, struct comm_shm *sh, struct comm_shm_job *j,
                       enum whale_dtype t, enum whale_op op, size_t esz, uint32_t s)
{
    const int p = sh->p, r = sh->r;
    size_t len = blk_len(j, p, r), lo = (size_t)s * j->cb;
    if (len <= lo)
        return 0;
    size_t n = len - lo < j->cb ? len - lo : j->cb, bytes = n * esz;
    size_t off = (blk_off(j, p, r) + lo) * esz;
    char *dst = j->kind == SHM_REDUCE_SCATTER ? j->recv + lo * esz : j->recv + off;
    char *acc = sh->scratch, *in = sh->scratch + sh->cma_step;
    const void *prev = NULL; /* the combination so far (rank order) */
    for (int q = 0; q < p; q++) {
        const void *src;
        char *buf = q == 0 ? acc : in; /* piece 0 may stay where it is read */
        if (q == r) {
            src = j->send + off;
        } else {
            int e = cma_read(ld(&sh->flags[q].pid), buf, ld(&sh->flags[q].xsend) + off, bytes);
            if (e)
                return read_failed(g, q, e);
            src = buf;
        }
        if (!prev) {
            prev = src;
            continue;
        }
        void *out = q == p - 1 ? (void *)dst : (void *)acc;
        comm_reduce(out, prev, src, n, t, op);
        prev = out;
    }
    if (j->avg_div)
        comm_avg(dst, n, t, j->avg_div);
    return 0;
}

int comm_shm_cma_advance(struct comm_stage *stg, enum whale_dtype t, enum whale_op rop, size_t esz,
                         int *events)
{
    whale_group *g = stg->g;
    struct comm_shm *sh = g->shm;
    struct comm_shm_job *j = &stg->shm;
    struct comm_shm_flags *me = &sh->flags[sh->r];
    const int p = sh->p, r = sh->r;
    const bool reduce = j->kind != SHM_ALLGATHER;
    const bool gather = j->kind != SHM_REDUCE_SCATTER;
    const uint64_t last = j->gen0 + j->nsteps - 1;
    for (;;) {
        bool moved = false;
        uint32_t seen = __atomic_load_n(&sh->door->bell, __ATOMIC_SEQ_CST);
        if (j->phase == 0) {
            __atomic_store_n(&me->xsend, (uint64_t)(uintptr_t)j->send, __ATOMIC_RELAXED);
            __atomic_store_n(&me->xrecv, (uint64_t)(uintptr_t)j->recv, __ATOMIC_RELAXED);
            st(&me->xgen, j->gen0);
            j->phase = 1;
            moved = true;
        }
        if (j->phase == 1) {
            bool all = true;
            for (int q = 0; q < p && all; q++)
                all = ld(&sh->flags[q].xgen) >= j->gen0;
            if (all) {
                j->phase = 2;
                if (j->kind == SHM_ALLGATHER && j->send != j->recv + blk_off(j, p, r) * esz)
                    memcpy(j->recv + blk_off(j, p, r) * esz, j->send, blk_len(j, p, r) * esz);
            }
        }
        if (j->phase == 2) {
            /* one step of my block, then whatever the peers have ready: the
             * reads of their blocks overlap their reductions */
            if (reduce && j->s2 < j->nsteps) {
                int rc = reduce_step(g, sh, j, t, rop, esz, j->s2);
                if (rc)
                    return rc;
                st(&me->red, j->gen0 + j->s2);
                j->s2++;
                moved = true;
            }
            bool done = !reduce || j->s2 == j->nsteps;
            for (int q = 0; gather && q < p; q++) {
                if (q == r)
                    continue;
                uint32_t want = blk_steps(j, p, q), ready = want;
                if (reduce) {
                    uint64_t red = ld(&sh->flags[q].red);
                    ready = red < j->gen0 ? 0 : (uint32_t)(red - j->gen0 + 1);
                    if (ready > want)
                        ready = want;
                }
                if (ready > j->got[q]) {
                    size_t lo = (size_t)j->got[q] * j->cb, len = blk_len(j, p, q);
                    size_t hi = (size_t)ready * j->cb < len ? (size_t)ready * j->cb : len;
                    size_t off = (blk_off(j, p, q) + lo) * esz;
                    uint64_t src = reduce ? ld(&sh->flags[q].xrecv) + off
                                          : ld(&sh->flags[q].xsend) + lo * esz;
                    int e = cma_read(ld(&sh->flags[q].pid), j->recv + off, src, (hi - lo) * esz);
                    if (e)
                        return read_failed(g, q, e);
                    j->got[q] = ready;
                    moved = true;
                }
                if (j->got[q] < want)
                    done = false;
            }
            if (done) {
                /* the slot path's flags move past this job too */
                st(&me->cin, last);
                st(&me->red, last);
                st(&me->fin, last);
                j->phase = 3;
                moved = true;
            }
        }
        if (moved) {
            (*events)++;
            comm_shm_ring(sh->door);
        }
        if (j->phase == 3) {
            bool all = true;
            for (int q = 0; q < p && all; q++)
                all = ld(&sh->flags[q].fin) >= last;
            if (all)
                return 1;
        }
        if (!moved) {
            g->ctx->shm_wait = sh->door;
            g->ctx->shm_wait_seen = seen;
            return 0;
        }
    }
}
