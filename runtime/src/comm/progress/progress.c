/* Progress engine: runs the schedules of queued operations.
 *
 * Whoever holds ctx->lock may progress: a thread blocked in whale_wait (it
 * spins, so a blocking collective costs no thread hand-off) or the progress
 * thread, which only works while non-blocking requests are pending and no
 * caller is waiting. When nothing moves, either backs off: a short spin, a
 * few yields, then a sleep in the kernel on the UCX event fd
 * (progress_sleep.c), so a posted receive costs no CPU the compute threads
 * need. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm_internal.h"
#include "whale/error.h"
#include "whale/log.h"

comm_op_t *comm_op_new(whale_ctx *ctx, whale_group *g, int coll)
{
    comm_op_t *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->ctx = ctx;
    op->g = g;
    op->coll = coll;
    op->refs = 2; /* the caller's handle + the engine */
    return op;
}

void comm_op_unref(comm_op_t *op)
{
    if (--op->refs > 0)
        return;
    for (int i = 0; i < op->nstages; i++)
        sched_free(&op->stages[i].sched);
    free(op->chains);
    free(op->ucx_reqs);
    free(op);
}

static void cancel_recvs(comm_op_t *op)
{
    /* Work on a copy: UCX may complete a cancelled receive at once, and its
     * callback removes it from op->ucx_reqs. A reference keeps op alive. */
    int n = op->nucx;
    if (!n)
        return;
    void **copy = malloc(sizeof(void *) * (size_t)n);
    if (!copy)
        return;
    memcpy(copy, op->ucx_reqs, sizeof(void *) * (size_t)n);
    op->refs++;
    for (int i = 0; i < n; i++) {
        bool still = false;
        for (int k = 0; k < op->nucx && !still; k++)
            still = op->ucx_reqs[k] == copy[i];
        if (still)
            ucp_request_cancel(op->ctx->worker, copy[i]);
    }
    free(copy);
    comm_op_unref(op);
}

static int stage_start(comm_op_t *op)
{
    struct comm_stage *st = &op->stages[op->cur_stage];
    int n = (int)st->sched.nchains;
    if (n > op->nchains) {
        free(op->chains);
        op->chains = calloc((size_t)n, sizeof *op->chains);
        if (!op->chains) {
            op->nchains = 0;
            return WHALE_ENOMEM;
        }
    } else if (n) {
        memset(op->chains, 0, (size_t)n * sizeof *op->chains);
    }
    op->nchains = n > op->nchains ? n : op->nchains;
    for (int i = 0; i < n; i++)
        op->chains[i].op = op;
    op->first_open = 0;
    op->next_chain = 0;
    return 0;
}

/* Drive one chain as far as it goes without waiting. */
static int chain_advance(comm_op_t *op, struct comm_stage *st, struct comm_chain_state *cs,
                         int *events)
{
    const struct sched *s = &st->sched;
    const struct sched_chain *ch = &s->chains[cs - op->chains];
    for (;;) {
        if (cs->outstanding > 0)
            return 0;
        if (cs->posted) {
            sched_run_actions(s, &s->rounds[ch->r0 + cs->round]);
            cs->round++;
            cs->posted = false;
            (*events)++;
        }
        if (cs->round == ch->nr) {
            cs->done = true;
            return 0;
        }
        const struct sched_round *rd = &s->rounds[ch->r0 + cs->round];
        /* Receives first so that an eager send from the peer finds them. */
        for (int pass = 0; pass < 2; pass++)
            for (uint32_t i = 0; i < rd->nx; i++) {
                const struct sched_xfer *x = &s->xfers[rd->x0 + i];
                if (x->send != (pass == 1))
                    continue;
                int rc = comm_post(op->ctx, op, cs, st->g, x,
                                   op->kind == COMM_OP_COLL ? st->seq : (uint32_t)st->seq);
                if (rc < 0)
                    return rc;
            }
        cs->posted = true;
    }
}

static void fail_op(comm_op_t *op, int status)
{
    if (op->status == 0 || op->status == WHALE_ECANCELED)
        op->status = status;
    cancel_recvs(op);
}

/* Returns 1 when the operation finished (op->status says how). */
static int op_advance(comm_op_t *op, int *events)
{
    whale_group *g = op->g;
    if (op->status < 0) {
        cancel_recvs(op);
        return 1;
    }
    if (g->failed) {
        /* during finalize a peer that leaves is no failure (debug only) */
        whale_log(g->ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                  "%s on a group of %d ranks: %s is dead (%s)",
                  op->kind == COMM_OP_COLL ? comm_coll_name(op->coll) : "send/recv", g->size,
                  comm_blame(g), whale_strerror(WHALE_EPEER));
        fail_op(op, WHALE_EPEER);
        return 1;
    }
    if (!op->started) {
        op->started = true;
        op->cur_stage = 0;
        if (op->nstages == 0)
            return 1;
        int rc = stage_start(op);
        if (rc) {
            op->status = rc;
            return 1;
        }
    }
    for (;;) {
        struct comm_stage *st = &op->stages[op->cur_stage];
        if (st->shm.kind != SHM_NONE) {
            int rc = comm_shm_advance(op, st, events);
            if (rc < 0) {
                fail_op(op, rc);
                return 1;
            }
            if (rc == 0)
                return 0;
            if (++op->cur_stage == op->nstages)
                return 1;
            if ((rc = stage_start(op))) {
                op->status = rc;
                return 1;
            }
            continue;
        }
        int n = (int)st->sched.nchains;
        int window = op->window > 0 ? op->window : 1;
        while (op->next_chain < n && op->next_chain < op->first_open + window)
            op->next_chain++;
        for (int i = op->first_open; i < op->next_chain; i++) {
            if (op->chains[i].done)
                continue;
            int rc = chain_advance(op, st, &op->chains[i], events);
            if (rc < 0 || op->status < 0) {
                fail_op(op, rc < 0 ? rc : op->status);
                return 1;
            }
        }
        int before = op->first_open;
        while (op->first_open < n && op->chains[op->first_open].done)
            op->first_open++;
        if (op->first_open < n) {
            if (op->first_open != before)
                continue; /* the window moved: start the next chains now */
            return 0;
        }
        if (++op->cur_stage == op->nstages)
            return 1;
        int rc = stage_start(op);
        if (rc) {
            op->status = rc;
            return 1;
        }
    }
}

static void complete(whale_ctx *ctx, comm_op_t *op)
{
    atomic_store_explicit(&op->done, 1, memory_order_release);
    comm_sleep_kick(ctx); /* a waiter asleep on its event fd may want this one */
    comm_op_unref(op); /* the engine's reference */
}

int comm_progress(whale_ctx *ctx)
{
    int events = 0;
    if (ctx->worker)
        for (int i = 0; i < 64 && ucp_worker_progress(ctx->worker); i++)
            events++;
    if (ctx->nactive)
        comm_watchdog(ctx);
    if (ctx->rma)
        events += comm_rma_progress(ctx);
    if (ctx->rmat)
        events += comm_rmat_progress(ctx);
    if (ctx->el)
        events += comm_member->poll(ctx);
    for (comm_op_t **po = &ctx->p2p; *po;) {
        comm_op_t *op = *po;
        if (op_advance(op, &events) ||
            (!op->status && ctx->dead[op->g->tasks[op->p2p_peer]] && (fail_op(op, WHALE_EPEER), 1))) {
            *po = op->next;
            ctx->nactive--;
            events++;
            complete(ctx, op);
        } else {
            po = &op->next;
        }
    }
    whale_group **pg = &ctx->active;
    while (*pg) {
        whale_group *g = *pg;
        while (g->head) {
            comm_op_t *op = g->head;
            if (!op_advance(op, &events))
                break;
            g->head = op->next;
            if (!g->head)
                g->tail = NULL;
            ctx->nactive--;
            events++;
            complete(ctx, op);
        }
        if (!g->head) {
            g->active = false;
            *pg = g->next_active;
        } else {
            pg = &g->next_active;
        }
    }
    return events;
}

static void enqueue(whale_ctx *ctx, whale_group *q, comm_op_t *op)
{
    op->next = NULL;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    ctx->nactive++;
    if (!q->active) {
        q->active = true;
        q->next_active = ctx->active;
        ctx->active = q;
    }
}

int comm_submit(whale_ctx *ctx, comm_op_t *op)
{
    pthread_mutex_lock(&ctx->lock);
    if (op->g->failed) {
        whale_log(ctx->closing ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                  "%s on a group of %d ranks: %s is dead",
                  op->kind == COMM_OP_COLL ? comm_coll_name(op->coll) : "send/recv",
                  op->g->size, comm_blame(op->g));
        op->status = WHALE_EPEER;
        complete(ctx, op);
        pthread_mutex_unlock(&ctx->lock);
        return 0;
    }
    /* Collectives queue on their group (issue order, one at a time).
     * Point-to-point operations all run at once (a pipeline stage posts a
     * receive and a send to the same peer); UCX tag matching orders
     * messages of one stream. */
    if (op->kind == COMM_OP_COLL) {
        enqueue(ctx, op->g, op);
    } else {
        op->next = ctx->p2p;
        ctx->p2p = op;
        ctx->nactive++;
    }
    if (atomic_load(&ctx->nwaiters) == 0 && ctx->thread_running)
        comm_wake(ctx);
    else
        comm_sleep_kick(ctx); /* a sleeping waiter progresses for everyone */
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

/* Back-off while nothing moves. With at most one rank per core, spin
 * (yielding the core would hand it to another process for a whole time
 * slice and every rendezvous step would wait for it); with more ranks than
 * cores, yield soon so that the peer we wait for can run. After a few
 * yields the caller sleeps on the event fd (try_sleep); where it cannot
 * (WHALE_PROGRESS_SLEEP=0, no event fd) a long quiet spell (a straggling
 * peer) ends in short sleeps. */
static void relax(const whale_ctx *ctx, int idle, void *bell, uint32_t seen)
{
    int spin = ctx->oversubscribed ? 16 : ctx->spin;
    if (bell && idle >= (ctx->oversubscribed ? 16 + 64 : spin > 2048 ? spin : 2048)) {
        /* a shared-memory stage waits for a peer's flag: after a spin
         * (the peer runs on another core and is a step behind at most),
         * sleep until a member rings (1 ms at most: the watchdog and UCX
         * still get polled). Sleeping beats sched_yield on a busy machine:
         * the woken member is scheduled at once, a yield gives the core
         * away for a whole time slice. With more members than cores a few
         * yields come first (below): the member we wait for may be
         * runnable on this very core. */
        comm_shm_sleep(bell, seen, 1000);
        return;
    }
    if (idle < spin) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    } else if (idle < spin + 20000) {
        sched_yield();
    } else {
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);
    }
}

/* After spin polls and ctx->sleep_after yields without an event: sleep in
 * the kernel until the worker signals, another thread kicks, or a deadline.
 * lock held. 1: slept (progress again at once). */
static int try_sleep(whale_ctx *ctx, int idle, int spin, bool waiter)
{
    if (ctx->sleep_after <= 0 || idle < spin + ctx->sleep_after || !ctx->nactive || ctx->stop)
        return 0;
    if (ctx->sleeping) {
        /* the progress thread sleeps: a waiter progresses itself, so the
         * thread would only wake to park; wake it now and sleep next */
        if (waiter)
            comm_sleep_kick(ctx);
        return 0;
    }
    return comm_sleep_armed(ctx, comm_sleep_bound(ctx), waiter);
}

static int wait_counted(whale_req *req);

int whale_wait(whale_req *req)
{
    if (!req)
        return WHALE_EINVAL;
    atomic_fetch_add(&req->ctx->nwaiters, 1);
    return wait_counted(req);
}

/* The caller already counted itself in ctx->nwaiters. */
static int wait_counted(whale_req *req)
{
    whale_ctx *ctx = req->ctx;
    int idle = 0;
    while (!atomic_load_explicit(&req->done, memory_order_acquire)) {
        pthread_mutex_lock(&ctx->lock);
        ctx->shm_wait = NULL;
        int ev = comm_progress(ctx);
        void *bell = ctx->shm_wait;
        uint32_t seen = ctx->shm_wait_seen;
        idle = ev ? 0 : idle + 1;
        bool slept = !ev && !bell && !atomic_load_explicit(&req->done, memory_order_acquire) &&
                     try_sleep(ctx, idle, ctx->oversubscribed ? 16 : ctx->spin, true);
        pthread_mutex_unlock(&ctx->lock);
        if (!slept)
            relax(ctx, idle, ev ? NULL : bell, seen);
    }
    pthread_mutex_lock(&ctx->lock);
    int st = req->status;
    comm_op_unref(req);
    if (atomic_fetch_sub(&ctx->nwaiters, 1) == 1 && comm_needs_thread(ctx))
        comm_wake(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

int whale_test(whale_req *req, bool *done)
{
    if (!req || !done)
        return WHALE_EINVAL;
    whale_ctx *ctx = req->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (!atomic_load(&req->done))
        comm_progress(ctx);
    *done = atomic_load(&req->done);
    int st = 0;
    if (*done) {
        st = req->status;
        comm_op_unref(req);
    }
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

bool whale_req_done(const whale_req *req)
{
    return req && atomic_load_explicit(&req->done, memory_order_acquire);
}

int whale_waitall(whale_req **reqs, int n)
{
    int first = 0;
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        int rc = whale_wait(reqs[i]);
        reqs[i] = NULL;
        if (rc && !first)
            first = rc;
    }
    return first;
}

int comm_run_blocking(whale_ctx *ctx, comm_op_t *op)
{
    /* Count as a waiter before queueing so the progress thread is not woken
     * for an operation this thread will drive itself. */
    atomic_fetch_add(&ctx->nwaiters, 1);
    comm_submit(ctx, op);
    return wait_counted(op);
}

bool comm_needs_thread(const whale_ctx *ctx)
{
    return ctx->nactive > 0 || ctx->nregions > 0 ||
           (ctx->el && comm_member->needs_thread(ctx));
}

void comm_wake(whale_ctx *ctx)
{
    pthread_cond_signal(&ctx->cond);
    if (ctx->wakefd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(ctx->wakefd, &one, sizeof one);
        (void)w; /* a full counter already wakes the thread */
    }
}

/* Idle: sleep in the kernel until UCX has an event (a message, an RMA
 * request of a peer over TCP, a heartbeat), comm_wake, or the next
 * heartbeat is due. ctx->lock held on entry and exit. */
static void idle_sleep(whale_ctx *ctx)
{
    double d = comm_sleep_bound(ctx);
    if (ctx->efd < 0 || ctx->wakefd < 0) {
        if (d < 0) {
            pthread_cond_wait(&ctx->cond, &ctx->lock);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long ns = ts.tv_nsec + (long)(d * 1e9);
            ts.tv_sec += ns / 1000000000L;
            ts.tv_nsec = ns % 1000000000L;
            pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts);
        }
        return;
    }
    /* busy (events left to progress): the caller loops */
    comm_sleep_armed(ctx, d, false);
}

static void *progress_main(void *arg)
{
    whale_ctx *ctx = arg;
    /* Short sleeps should be short: the default 50 us slack would add
     * latency to every rendezvous step of a non-blocking transfer. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    /* named, so that benchmarks can read its CPU time in /proc */
    prctl(PR_SET_NAME, "whale-progress", 0, 0, 0);
    int idle = 0;
    pthread_mutex_lock(&ctx->lock);
    while (!ctx->stop) {
        if (atomic_load(&ctx->nwaiters) > 0) {
            /* the waiter progresses (and sends heartbeats) itself */
            pthread_cond_wait(&ctx->cond, &ctx->lock);
            idle = 0;
            continue;
        }
        if (ctx->nactive == 0 && !comm_needs_thread(ctx)) {
            pthread_cond_wait(&ctx->cond, &ctx->lock);
            idle = 0;
            continue;
        }
        if (ctx->nactive == 0) {
            /* Nothing queued: serve what arrives (heartbeats, one-sided
             * transfers of peers, control messages), then sleep. */
            if (comm_progress(ctx) == 0 && ctx->nactive == 0 && !ctx->stop &&
                atomic_load(&ctx->nwaiters) == 0) {
                idle_sleep(ctx);
            } else {
                /* events keep coming (e.g. transfers to a peer that died):
                 * let a thread waiting for the lock in, or it may never get it */
                pthread_mutex_unlock(&ctx->lock);
                sched_yield();
                pthread_mutex_lock(&ctx->lock);
            }
            idle = 0;
            continue;
        }
        ctx->shm_wait = NULL;
        int ev = comm_progress(ctx);
        void *bell = ctx->shm_wait;
        uint32_t seen = ctx->shm_wait_seen;
        idle = ev ? 0 : idle + 1;
        /* the thread shares cores with compute: after 16 polls and a few
         * yields, sleep until the worker signals (a pipeline receive posted
         * for a whole pass costs no CPU) */
        if (!ev && !bell && atomic_load(&ctx->nwaiters) == 0 && try_sleep(ctx, idle, 16, false))
            continue;
        pthread_mutex_unlock(&ctx->lock);
        /* always the polite policy */
        relax(&(whale_ctx){ .oversubscribed = true }, idle, ev ? NULL : bell, seen);
        pthread_mutex_lock(&ctx->lock);
    }
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

int comm_thread_start(whale_ctx *ctx)
{
    ctx->stop = false;
    int rc = pthread_create(&ctx->thread, NULL, progress_main, ctx);
    if (rc) {
        whale_error("cannot start the progress thread: %s", strerror(rc));
        return WHALE_EIO;
    }
    ctx->thread_running = true;
    return 0;
}

void comm_thread_stop(whale_ctx *ctx)
{
    if (!ctx->thread_running)
        return;
    pthread_mutex_lock(&ctx->lock);
    ctx->stop = true;
    pthread_cond_broadcast(&ctx->cond);
    comm_wake(ctx);
    pthread_mutex_unlock(&ctx->lock);
    pthread_join(ctx->thread, NULL);
    ctx->thread_running = false;
}
