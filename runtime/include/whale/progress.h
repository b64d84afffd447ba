/* How the progress engine waited (comm/progress/progress_sleep.c).
 *
 * While operations are posted and nothing moves, a waiting thread
 * (whale_wait, or the progress thread when nobody waits) spins briefly,
 * yields WHALE_PROGRESS_SLEEP times, then sleeps in the kernel on the UCX
 * worker's event fd until a message arrives, another thread has work for
 * it, or a deadline (heartbeat, peer check) is due. These counters say how
 * often and how each sleep ended; benchmarks read the progress thread's CPU
 * time from here. */
#ifndef WHALE_PROGRESS_H
#define WHALE_PROGRESS_H

#include <stdint.h>

#include "whale/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct whale_progress_stats {
    uint64_t sleeps;       /* kernel sleeps entered (all threads) */
    uint64_t woke_event;   /* ended by the UCX event fd (a message, a completion) */
    uint64_t woke_wake;    /* ended by another thread (new work, its op completed) */
    uint64_t woke_timeout; /* ended by the deadline (heartbeat, watchdog, cap) */
    uint64_t busy;         /* arming found pending events: progressed instead */
    /* of the above, the sleeps of threads blocked in whale_wait (the rest
     * are the progress thread's) */
    uint64_t waiter_sleeps, waiter_woke_event, waiter_woke_wake, waiter_woke_timeout;
    double thread_cpu_s;   /* CPU time of the progress thread so far (0 without one) */
};

/* 0, or WHALE_EINVAL for a NULL argument. Thread-safe. */
int whale_progress_stats(whale_ctx *ctx, struct whale_progress_stats *out);

#ifdef __cplusplus
}
#endif
#endif
