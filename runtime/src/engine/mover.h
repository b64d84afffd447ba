/* The mover: one thread that runs asynchronous copies in the order they were
 * posted (offload.h says what host offload moves with it).
 *
 * A waiter that finds its copy still queued (the thread is behind, or not
 * scheduled on a busy machine) runs the copy itself instead of waiting for
 * a wake-up; the queue entry stays and the thread skips it. A move is in
 * the queue at most once: posting a move whose old entry is still queued
 * reuses that entry. Without that rule, on a loaded machine the stale
 * entries filled the queue, and the poster's fallback copy then raced the
 * thread copying the same move from a stale entry: the buffer was released
 * (and reused by malloc) while the thread still wrote into it. */
#ifndef ENG_MOVER_H
#define ENG_MOVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One asynchronous copy of len bytes. state: 0 idle, 1 queued, 3 copying, 2 done.
 * The fields belong to the mover between eng_mover_post and the end of
 * eng_mover_wait; a zeroed struct is an idle move. */
struct eng_move {
    void *dst;
    const void *src;
    size_t len;
    _Atomic int state;
    bool queued; /* an entry for it is in the queue (under the mover's lock) */
};

/* Does the copy (UCX or memcpy: the caller's choice, offload.c). */
typedef void (*eng_copy_fn)(void *ctx, void *dst, const void *src, size_t len);

struct eng_mover;

/* A mover thread with room for cap distinct moves in flight. */
int  eng_mover_create(size_t cap, eng_copy_fn copy, void *ctx, struct eng_mover **out);
/* Runs what is queued, then stops and joins the thread (NULL: nothing). */
void eng_mover_destroy(struct eng_mover *m);
/* Queues the copy of len bytes from src to dst (len 0: done at once). The
 * move must be idle or done (waited for). */
void eng_mover_post(struct eng_mover *m, struct eng_move *mv, void *dst, const void *src,
                    size_t len);
/* Returns once mv is done (at once when idle or done): dst is complete and
 * nothing writes it any more. Returns the seconds it blocked or copied. */
double eng_mover_wait(struct eng_mover *m, struct eng_move *mv);
/* Seconds spent copying (thread and waiters) and bytes since the last call. */
double eng_mover_take_busy(struct eng_mover *m, int64_t *bytes);

/* For tests: hold stops the thread from taking queue entries (copies run
 * only in waiters) until released; queued counts the entries. */
void   eng_mover_hold(struct eng_mover *m, bool hold);
size_t eng_mover_queued(struct eng_mover *m);

#endif
