/* Sleeping in the kernel while nothing moves.
 *
 * A thread that waits for the network (the progress thread with a pipeline
 * receive posted, or a rank blocked in whale_wait) used to spin and
 * sched_yield() until the message came: on a 2-core machine with 2 ranks
 * that took 44-329 ms of CPU per step from the compute threads. After a
 * short spin it now arms the UCX worker and sleeps in poll() on the
 * worker's event fd (a message, a remote completion, a TCP peer that went
 * away) and the wake eventfd (another thread queued work or completed the
 * operation the sleeper waits for). The sleep is bounded by what must run
 * without an event: the next heartbeat (el_next_deadline), the pid check of
 * same-node peers (comm_watchdog) and a fraction of the peer timeout, so a
 * dead peer still fails an operation within WHALE_PEER_TIMEOUT.
 *
 * One thread sleeps at a time (ctx->sleeping): the eventfd wakes one
 * reader, and a second sleeper could miss a kick meant for it. */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "whale/error.h"
#include "whale/progress.h"
#include "whale/clock.h"

/* Upper bound of one sleep with operations posted: events the worker does
 * not signal (a UCX protocol that only advances when polled) cost at most
 * this much latency. */
#define SLEEP_CAP_S 0.05

double comm_sleep_bound(whale_ctx *ctx)
{
    double d = -1;
    if (ctx->nactive) {
        d = ctx->peer_timeout / 5 < SLEEP_CAP_S ? ctx->peer_timeout / 5 : SLEEP_CAP_S;
        if (ctx->watch) {
            double w = ctx->next_watch - whale_now_s();
            if (w < d)
                d = w < 0 ? 0 : w;
        }
    }
    double e = ctx->el ? comm_member->next_deadline(ctx) : -1;
    if (e >= 0 && (d < 0 || e < d))
        d = e;
    return d;
}

int comm_sleep_armed(whale_ctx *ctx, double max_s, bool waiter)
{
    struct comm_sleep_stats *ss = &ctx->sleep_stats[waiter];
    if (ctx->efd < 0 || ctx->wakefd < 0 || ctx->sleeping)
        return 0;
    /* Arming fails with UCS_ERR_BUSY while the worker has unprocessed
     * events: the caller progresses them and comes back. */
    ucs_status_t st = ucp_worker_arm(ctx->worker);
    if (st != UCS_OK) {
        ss->busy++;
        return 0;
    }
    ctx->sleeping = true;
    ss->sleeps++;
    struct pollfd pf[2] = { { .fd = ctx->efd, .events = POLLIN },
                            { .fd = ctx->wakefd, .events = POLLIN } };
    struct timespec ts, *tsp = NULL;
    if (max_s >= 0) {
        ts.tv_sec = (time_t)max_s;
        ts.tv_nsec = (long)((max_s - (double)ts.tv_sec) * 1e9);
        tsp = &ts;
    }
    pthread_mutex_unlock(&ctx->lock);
    int n;
    do
        n = ppoll(pf, 2, tsp, NULL);
    while (n < 0 && errno == EINTR && !tsp);
    bool woke_wake = n > 0 && (pf[1].revents & POLLIN);
    if (woke_wake) {
        uint64_t v;
        ssize_t r = read(ctx->wakefd, &v, sizeof v);
        (void)r; /* another thread may have read it: nonblocking */
    }
    pthread_mutex_lock(&ctx->lock);
    ctx->sleeping = false;
    if (woke_wake)
        ss->woke_wake++;
    else if (n > 0)
        ss->woke_event++;
    else
        ss->woke_timeout++;
    return 1;
}

void comm_sleep_kick(whale_ctx *ctx)
{
    if (!ctx->sleeping || ctx->wakefd < 0)
        return;
    uint64_t one = 1;
    ssize_t w = write(ctx->wakefd, &one, sizeof one);
    (void)w; /* a full counter wakes the sleeper as well */
}

int whale_progress_stats(whale_ctx *ctx, struct whale_progress_stats *out)
{
    if (!ctx || !out)
        return WHALE_EINVAL;
    *out = (struct whale_progress_stats){ 0 };
    pthread_mutex_lock(&ctx->lock);
    const struct comm_sleep_stats *t = &ctx->sleep_stats[0], *w = &ctx->sleep_stats[1];
    out->sleeps = t->sleeps + w->sleeps;
    out->woke_event = t->woke_event + w->woke_event;
    out->woke_wake = t->woke_wake + w->woke_wake;
    out->woke_timeout = t->woke_timeout + w->woke_timeout;
    out->busy = t->busy + w->busy;
    out->waiter_sleeps = w->sleeps;
    out->waiter_woke_event = w->woke_event;
    out->waiter_woke_wake = w->woke_wake;
    out->waiter_woke_timeout = w->woke_timeout;
    bool thr = ctx->thread_running;
    pthread_mutex_unlock(&ctx->lock);
    clockid_t cid;
    struct timespec ts;
    if (thr && pthread_getcpuclockid(ctx->thread, &cid) == 0 && clock_gettime(cid, &ts) == 0)
        out->thread_cpu_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return 0;
}
