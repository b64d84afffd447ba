/* The offload mover (runtime/src/engine/mover.h):
 *  - copies arrive whole, in any order of waits, and are counted;
 *  - a waiter that finds its move queued runs it itself, and the move keeps
 *    a single queue entry however often it is posted again (the entries of
 *    moves run by waiters once filled the queue on a loaded machine);
 *  - more distinct moves than the queue holds are copied by the poster;
 *  - once eng_mover_wait returns, nothing writes the move's destination any
 *    more: a stress of posts, waits and held / released mover threads with a
 *    copy function that checks, before and after it copies, that its
 *    destination was not released meanwhile (the heap corruption of the
 *    train-offload test: a fetch landed in a freed weight buffer). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/mover.h"

#define NBUF 8
#define LEN 4096

struct ctx {
    _Atomic int released[NBUF]; /* the buffer's owner waited for it and moved on */
    _Atomic long late;          /* copies that overlapped a release */
    _Atomic long copies;
    unsigned char *buf[NBUF];
    _Atomic int yield;          /* widen the copy's window */
};

static struct ctx C;

static int which(const void *dst)
{
    for (int i = 0; i < NBUF; i++)
        if (C.buf[i] == dst)
            return i;
    return -1;
}

static void copy_fn(void *ctx, void *dst, const void *src, size_t len)
{
    (void)ctx;
    int i = which(dst);
    if (i >= 0 && atomic_load(&C.released[i]))
        atomic_fetch_add(&C.late, 1);
    memcpy(dst, src, len / 2);
    if (atomic_load(&C.yield))
        sched_yield();
    memcpy((char *)dst + len / 2, (const char *)src + len / 2, len - len / 2);
    if (i >= 0 && atomic_load(&C.released[i]))
        atomic_fetch_add(&C.late, 1);
    atomic_fetch_add(&C.copies, 1);
}

static void setup_bufs(void)
{
    memset(&C, 0, sizeof C);
    for (int i = 0; i < NBUF; i++) {
        C.buf[i] = malloc(LEN);
        assert_non_null(C.buf[i]);
        atomic_store(&C.released[i], 1);
    }
}

static void free_bufs(void)
{
    for (int i = 0; i < NBUF; i++)
        free(C.buf[i]);
}

static void test_copies_arrive(void **st)
{
    (void)st;
    setup_bufs();
    struct eng_mover *m = NULL;
    assert_int_equal(eng_mover_create(8, copy_fn, NULL, &m), 0);
    unsigned char src[3][LEN];
    struct eng_move mv[3];
    memset(mv, 0, sizeof mv);
    for (int k = 0; k < 3; k++) {
        memset(src[k], 'a' + k, LEN);
        atomic_store(&C.released[k], 0);
        eng_mover_post(m, &mv[k], C.buf[k], src[k], LEN - k);
    }
    for (int k = 2; k >= 0; k--) { /* waits in another order than the posts */
        eng_mover_wait(m, &mv[k]);
        assert_int_equal(atomic_load(&mv[k].state), 2);
        for (size_t j = 0; j < LEN - (size_t)k; j++)
            assert_int_equal(C.buf[k][j], 'a' + k);
    }
    int64_t bytes = 0;
    eng_mover_take_busy(m, &bytes);
    assert_int_equal(bytes, 3 * LEN - 3);
    eng_mover_take_busy(m, &bytes);
    assert_int_equal(bytes, 0);
    /* len 0: done at once, nothing queued */
    eng_mover_post(m, &mv[0], C.buf[0], src[0], 0);
    assert_int_equal(atomic_load(&mv[0].state), 2);
    eng_mover_destroy(m);
    assert_int_equal(atomic_load(&C.late), 0);
    free_bufs();
}

static void test_one_entry_per_move(void **st)
{
    (void)st;
    setup_bufs();
    struct eng_mover *m = NULL;
    assert_int_equal(eng_mover_create(4, copy_fn, NULL, &m), 0);
    eng_mover_hold(m, true); /* the thread never runs: every copy is a waiter's */
    unsigned char src[LEN];
    struct eng_move mv[2];
    memset(mv, 0, sizeof mv);
    for (int cyc = 0; cyc < 200; cyc++) {
        for (int k = 0; k < 2; k++) {
            int b = (cyc + k) % NBUF;
            memset(src, cyc & 0xff, LEN);
            atomic_store(&C.released[b], 0);
            eng_mover_post(m, &mv[k], C.buf[b], src, LEN);
            eng_mover_wait(m, &mv[k]);
            atomic_store(&C.released[b], 1);
            assert_int_equal(C.buf[b][LEN - 1], cyc & 0xff);
        }
        /* one entry per move, never the queue full of stale ones */
        assert_int_equal(eng_mover_queued(m), 2);
    }
    assert_int_equal(atomic_load(&C.copies), 400);
    eng_mover_hold(m, false);
    /* draining the queue: its two entries belong to moves the waiters ran,
     * so the thread copies nothing more (the count stays 400) */
    eng_mover_destroy(m);
    assert_int_equal(atomic_load(&C.copies), 400);
    assert_int_equal(atomic_load(&C.late), 0);
    free_bufs();
}

static void test_more_moves_than_queue(void **st)
{
    (void)st;
    setup_bufs();
    struct eng_mover *m = NULL;
    assert_int_equal(eng_mover_create(2, copy_fn, NULL, &m), 0);
    eng_mover_hold(m, true);
    unsigned char src[LEN];
    memset(src, 7, LEN);
    struct eng_move mv[5];
    memset(mv, 0, sizeof mv);
    for (int k = 0; k < 5; k++) {
        atomic_store(&C.released[k], 0);
        eng_mover_post(m, &mv[k], C.buf[k], src, LEN);
    }
    assert_int_equal(eng_mover_queued(m), 2);
    for (int k = 2; k < 5; k++) /* no room: copied by the poster */
        assert_int_equal(atomic_load(&mv[k].state), 2);
    eng_mover_hold(m, false);
    for (int k = 0; k < 5; k++) {
        eng_mover_wait(m, &mv[k]);
        atomic_store(&C.released[k], 1);
        assert_int_equal(C.buf[k][LEN / 2], 7);
    }
    eng_mover_destroy(m);
    assert_int_equal(atomic_load(&C.copies), 5);
    assert_int_equal(atomic_load(&C.late), 0);
    free_bufs();
}

static void test_no_write_after_wait(void **st)
{
    (void)st;
    setup_bufs();
    atomic_store(&C.yield, 1);
    struct eng_mover *m = NULL;
    /* a small queue: the old fallback path is reached quickly */
    assert_int_equal(eng_mover_create(3, copy_fn, NULL, &m), 0);
    unsigned char src[LEN];
    memset(src, 1, LEN);
    struct eng_move mv[3];
    memset(mv, 0, sizeof mv);
    int owner[3] = { -1, -1, -1 };
    unsigned seed = 12345;
    bool held = false;
    for (int it = 0; it < 20000; it++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 16) % 3);
        if (owner[k] >= 0) { /* the buffer's user waits, then frees it */
            eng_mover_wait(m, &mv[k]);
            assert_int_equal(atomic_load(&mv[k].state), 2);
            atomic_store(&C.released[owner[k]], 1);
            owner[k] = -1;
        }
        int b = -1;
        for (int i = 0; i < NBUF && b < 0; i++)
            if (atomic_load(&C.released[i]) && i != owner[0] && i != owner[1] && i != owner[2])
                b = i;
        assert_true(b >= 0);
        atomic_store(&C.released[b], 0);
        owner[k] = b;
        eng_mover_post(m, &mv[k], C.buf[b], src, LEN);
        if ((seed >> 8) % 7 == 0) { /* a descheduled thread, then a running one */
            held = !held;
            eng_mover_hold(m, held);
        }
        if ((seed >> 12) % 5 == 0)
            sched_yield();
    }
    for (int k = 0; k < 3; k++)
        if (owner[k] >= 0) {
            eng_mover_wait(m, &mv[k]);
            atomic_store(&C.released[owner[k]], 1);
        }
    eng_mover_destroy(m);
    assert_int_equal(atomic_load(&C.late), 0);
    free_bufs();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_arrive),
        cmocka_unit_test(test_one_entry_per_move),
        cmocka_unit_test(test_more_moves_than_queue),
        cmocka_unit_test(test_no_write_after_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
