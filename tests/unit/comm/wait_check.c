/* The kernel-sleep wait path of the progress engine (comm/progress/progress_sleep.c),
 * observed through whale_progress_stats. No timing asserts: each check
 * counts how a sleep ended, and a lost wake-up shows as a hang (the test's
 * timeout) or a missing count, never as a slow figure.
 *
 *   wait_check event      (2 ranks) rank 1 sends late, small and large
 *                         (rendezvous) messages: rank 0's waiter and, with
 *                         nobody waiting, its progress thread must sleep and
 *                         be woken by the UCX event fd; data checked.
 *   wait_check wake       (2 ranks) a sleeper is woken by another thread:
 *                         the progress thread by new work (an isend queued
 *                         while it sleeps with a receive posted), a waiter by
 *                         an isend queued by a second thread.
 *   wait_check heartbeat  (3 ranks, WHALE_ELASTIC=1) rank 2 stops itself
 *                         (SIGSTOP: alive, silent); ranks 0 and 1 wait on a
 *                         receive from it and must get WHALE_EPEER: only a
 *                         sleep that ends at the heartbeat deadline lets the
 *                         detector see the silence. Rank 0 SIGKILLs rank 2.
 *
 * Prints "wait_check: rank R SCENARIO OK" per rank that passes. */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "whale/comm.h"
#include "whale/elastic.h"
#include "whale/error.h"
#include "whale/progress.h"

#define BIG (4u << 20) /* bytes: past UCX's eager limit, a rendezvous */

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static struct whale_progress_stats stats(whale_ctx *ctx)
{
    struct whale_progress_stats s;
    whale_progress_stats(ctx, &s);
    return s;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31u + seed);
}

static int same(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31u + seed))
            return 0;
    return 1;
}

/* The progress thread's own counts (the totals less the waiters'). */
enum { T_SLEEPS, T_EVENT, T_WAKE };
static uint64_t thread_count(whale_ctx *ctx, int which)
{
    struct whale_progress_stats s = stats(ctx);
    return which == T_SLEEPS  ? s.sleeps - s.waiter_sleeps
           : which == T_EVENT ? s.woke_event - s.waiter_woke_event
                              : s.woke_wake - s.waiter_woke_wake;
}

/* Waits for a count of the progress thread to pass `from` without touching
 * the engine (10 ms naps): 0 when it did not within `guard` naps (a guard
 * against a hang, minutes long, not a time limit). */
static int await_thread(whale_ctx *ctx, int which, uint64_t from, int guard)
{
    for (int i = 0; i < guard; i++) {
        if (thread_count(ctx, which) > from)
            return 1;
        nap_ms(10);
    }
    return 0;
}

/* Rank 1 naps before each send, so rank 0 is asleep when it comes (under
 * extreme load it may not be yet: any one round of several suffices). */
static int scenario_event(whale_ctx *ctx, whale_group *w, int me)
{
    unsigned char *buf = malloc(BIG);
    if (!buf)
        return 1;
    const size_t sizes[2] = { 64, BIG };
    int rounds = 3, bad = 0;
    int waiter_event = 0, thread_event = 0;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            size_t n = sizes[k];
            unsigned seed = (unsigned)(r * 2 + k + 1);
            if (me == 1) {
                fill(buf, n, seed);
                nap_ms(500);
                if (whale_send(w, buf, n, WHALE_UINT8, 0, 10 + k))
                    bad++;
                /* second half: rank 0's caller does not wait, its thread does */
                nap_ms(500);
                if (whale_send(w, buf, n, WHALE_UINT8, 0, 20 + k))
                    bad++;
                continue;
            }
            /* (a) a blocked waiter sleeps and the event fd wakes it */
            struct whale_progress_stats s0 = stats(ctx);
            memset(buf, 0, n);
            whale_req *q;
            if (whale_irecv(w, buf, n, WHALE_UINT8, 1, 10 + k, &q) || whale_wait(q) ||
                !same(buf, n, seed))
                bad++;
            struct whale_progress_stats s1 = stats(ctx);
            waiter_event += s1.waiter_woke_event > s0.waiter_woke_event;
            uint64_t t1 = thread_count(ctx, T_EVENT);
            /* (b) nobody waits: the progress thread sleeps with the receive
             * posted and completes it when the event fd fires */
            memset(buf, 0, n);
            if (whale_irecv(w, buf, n, WHALE_UINT8, 1, 20 + k, &q)) {
                bad++;
                continue;
            }
            /* 3 s: a round whose message came before the thread slept
             * never counts an event, and moves on (one round suffices) */
            thread_event += await_thread(ctx, T_EVENT, t1, 300);
            if (whale_wait(q) || !same(buf, n, seed))
                bad++;
        }
    free(buf);
    if (me == 0) {
        struct whale_progress_stats s = stats(ctx);
        printf("wait_check: rank 0 event: %d/%d waits and %d/%d thread waits woken by the event fd; "
               "sleeps %llu (event %llu, wake %llu, deadline %llu, busy %llu), thread CPU %.3f s\n",
               waiter_event, 2 * rounds, thread_event, 2 * rounds, (unsigned long long)s.sleeps,
               (unsigned long long)s.woke_event, (unsigned long long)s.woke_wake,
               (unsigned long long)s.woke_timeout, (unsigned long long)s.busy, s.thread_cpu_s);
        if (!waiter_event || !thread_event)
            bad++;
    }
    return bad;
}

struct sender {
    whale_ctx *ctx;
    whale_group *w;
    uint64_t sleeps0; /* the waiters' sleeps before the wait */
    int val;
    int rc;
};

static void *send_later(void *arg)
{
    struct sender *s = arg;
    whale_req *q;
    /* queue the ping once the main thread sleeps in whale_wait (a bound
     * rank spins ~100000 polls first); the guard only ends a hang */
    for (int i = 0; i < 6000; i++) {
        struct whale_progress_stats st = stats(s->ctx);
        if (st.waiter_sleeps > s->sleeps0)
            break;
        nap_ms(10);
    }
    s->rc = whale_isend(s->w, &s->val, 1, WHALE_INT32, 1, 31, &q);
    if (!s->rc)
        s->rc = whale_wait(q);
    return NULL;
}

/* Rank 1 answers each "ping" (tag 30 or 31) with a value on tag 40: rank
 * 0's receive of the answer can only complete after rank 0's ping went
 * out, and the ping is queued while a thread sleeps. */
static int scenario_wake(whale_ctx *ctx, whale_group *w, int me)
{
    int bad = 0;
    if (me == 1) {
        for (int i = 0; i < 2; i++) {
            int v = 0;
            if (whale_recv(w, &v, 1, WHALE_INT32, 0, 30 + i) ||
                whale_send(w, (int[]){ v + 1 }, 1, WHALE_INT32, 0, 40 + i))
                bad++;
        }
        return bad;
    }
    /* (a) the progress thread sleeps with the answer's receive posted; an
     * isend from this thread must wake it (wake eventfd) */
    int ans = 0, ping = 7;
    whale_req *r, *s;
    uint64_t sl0 = thread_count(ctx, T_SLEEPS);
    if (whale_irecv(w, &ans, 1, WHALE_INT32, 1, 40, &r))
        return 1;
    if (!await_thread(ctx, T_SLEEPS, sl0, 6000)) {
        printf("wait_check: rank 0 wake: the progress thread never slept\n");
        bad++;
    }
    uint64_t wk1 = thread_count(ctx, T_WAKE);
    if (whale_isend(w, &ping, 1, WHALE_INT32, 1, 30, &s))
        return 1;
    int woke_thread = await_thread(ctx, T_WAKE, wk1, 6000);
    if (whale_wait(s) || whale_wait(r) || ans != 8)
        bad++;
    /* (b) this thread waits (and sleeps) on the answer; a second thread
     * queues the ping: the sleeping waiter must be kicked to post it */
    ans = 0;
    if (whale_irecv(w, &ans, 1, WHALE_INT32, 1, 41, &r))
        return 1;
    struct whale_progress_stats s2 = stats(ctx);
    struct sender sd = { .ctx = ctx, .w = w, .val = 9, .sleeps0 = s2.waiter_sleeps };
    pthread_t th;
    if (pthread_create(&th, NULL, send_later, &sd))
        return 1;
    /* the sender thread naps first so that this waiter is asleep by then */
    int rc = whale_wait(r);
    pthread_join(th, NULL);
    struct whale_progress_stats s3 = stats(ctx);
    if (rc || sd.rc || ans != 10)
        bad++;
    printf("wait_check: rank 0 wake: progress thread woken by new work: %s; "
           "the waiter slept %llu times, woken by the other thread %llu, by events %llu, "
           "by the deadline %llu\n",
           woke_thread ? "yes" : "NO", (unsigned long long)(s3.waiter_sleeps - s2.waiter_sleeps),
           (unsigned long long)(s3.waiter_woke_wake - s2.waiter_woke_wake),
           (unsigned long long)(s3.waiter_woke_event - s2.waiter_woke_event),
           (unsigned long long)(s3.waiter_woke_timeout - s2.waiter_woke_timeout));
    if (!woke_thread || s3.waiter_woke_wake == s2.waiter_woke_wake)
        bad++;
    return bad;
}

static int scenario_heartbeat(whale_ctx *ctx, whale_group *w, int me)
{
    int nt = whale_ntasks(ctx);
    int32_t pid = (int32_t)getpid();
    int32_t *pids = calloc((size_t)nt, sizeof *pids);
    if (!pids || whale_allgather(whale_all_tasks(ctx), &pid, pids, 1, WHALE_INT32))
        return 1;
    int victim = whale_world_size(ctx) - 1;
    if (me == victim) {
        raise(SIGSTOP); /* silent and alive: only the heartbeats tell */
        return 0;        /* not reached: rank 0 SIGKILLs it */
    }
    int v = 0;
    struct whale_progress_stats s0 = stats(ctx);
    int rc = whale_recv(w, &v, 1, WHALE_INT32, victim, 50);
    struct whale_progress_stats s1 = stats(ctx);
    int bad = rc != WHALE_EPEER;
    printf("wait_check: rank %d heartbeat: receive from the stopped rank %d returned %s; "
           "slept %llu times, %llu ended by a deadline\n",
           me, victim, rc ? whale_strerror(rc) : "success",
           (unsigned long long)(s1.waiter_sleeps - s0.waiter_sleeps),
           (unsigned long long)(s1.waiter_woke_timeout - s0.waiter_woke_timeout));
    if (s1.waiter_sleeps == s0.waiter_sleeps)
        bad++;
    if (me == 0)
        kill((pid_t)pids[whale_rankmap_task(ctx, victim)], SIGKILL);
    free(pids);
    return bad;
}

int main(int argc, char **argv)
{
    const char *sc = argc > 1 ? argv[1] : "";
    if (strcmp(sc, "event") && strcmp(sc, "wake") && strcmp(sc, "heartbeat")) {
        fprintf(stderr, "usage: wait_check event|wake|heartbeat\n");
        return 2;
    }
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "wait_check: init: %s\n", whale_strerror(rc));
        return 1;
    }
    whale_group *w = whale_world(ctx);
    int me = whale_rank(ctx), p = whale_world_size(ctx);
    int need = !strcmp(sc, "heartbeat") ? 3 : 2;
    if (p != need) {
        fprintf(stderr, "wait_check %s: needs %d ranks, got %d\n", sc, need, p);
        return 1;
    }
    int bad = !strcmp(sc, "event")  ? scenario_event(ctx, w, me)
              : !strcmp(sc, "wake") ? scenario_wake(ctx, w, me)
                                    : scenario_heartbeat(ctx, w, me);
    printf("wait_check: rank %d %s %s\n", me, sc, bad ? "FAILED" : "OK");
    fflush(stdout);
    if (!strcmp(sc, "heartbeat"))
        _exit(bad ? 1 : 0); /* the group is broken: no collective finalize */
    whale_finalize(ctx);
    return bad ? 1 : 0;
}
