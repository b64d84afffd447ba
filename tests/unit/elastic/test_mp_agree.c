/* The tree agreement (member/mp_node.c) as the runtime binds it
 * (member/el_mp.c: one agent per task, tasks_per_node 1, the runtime's
 * detector feeding it): a few agents on an in-memory network with a
 * stepped clock. Checks what the runtime needs beyond the simulator's
 * scenarios: survivors of a crash are a majority however few they are
 * (a task known crashed does not count), an exact half decides only
 * with the lowest member, reports skip a root known crashed, and a decision that removes nobody (MP_NOOP)
 * is reached for a recovery whose members all came back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "member/mp.h"

enum { MAXN = 8, MAXQ = 4096 };

struct qmsg {
    int to;
    struct mp_msg m;
    struct mp_item items[4 * MAXN + 4];
};

struct net {
    int n;
    struct mp_node a[MAXN];
    bool down[MAXN];
    int side[MAXN];      /* messages pass only within a side */
    struct qmsg *q;
    int nq;
    double now;
};

static void send_cb(void *user, int to, const struct mp_msg *m)
{
    struct net *net = user;
    if (net->nq >= MAXQ || m->nitems > 4 * MAXN + 4)
        return;
    struct qmsg *x = &net->q[net->nq++];
    x->to = to;
    x->m = *m;
    if (m->nitems)
        memcpy(x->items, m->items, m->nitems * sizeof *m->items);
    x->m.items = x->items;
}

static void net_init(struct net *net, int n)
{
    memset(net, 0, sizeof *net);
    net->n = n;
    net->q = calloc(MAXQ, sizeof *net->q);
    assert_non_null(net->q);
    struct mp_timing tm;
    mp_timing_default(&tm);
    tm.floor = 1e9; /* the runtime's detector decides, as in el_mp.c */
    tm.stop = 5;
    struct mp_io io = { .send = send_cb, .user = net };
    for (int i = 0; i < n; i++)
        assert_int_equal(mp_node_init(&net->a[i], i, n, 1, &tm, &io, 3, 0), 0);
}

static void net_free(struct net *net)
{
    for (int i = 0; i < net->n; i++)
        mp_node_free(&net->a[i]);
    free(net->q);
}

/* Run the clock until t, delivering every message at once. */
static void run_until(struct net *net, double t)
{
    for (; net->now < t; net->now += 0.005) {
        for (int guard = 0; net->nq && guard < 64; guard++) {
            int k = net->nq;
            struct qmsg *batch = malloc((size_t)k * sizeof *batch);
            assert_non_null(batch);
            memcpy(batch, net->q, (size_t)k * sizeof *batch);
            net->nq = 0;
            for (int i = 0; i < k; i++) {
                struct qmsg *x = &batch[i];
                x->m.items = x->items;
                int from = x->m.from;
                if (net->down[x->to] || net->side[x->to] != net->side[from])
                    continue;
                mp_recv(&net->a[x->to], &x->m, net->now);
            }
            free(batch);
        }
        for (int i = 0; i < net->n; i++)
            if (!net->down[i] && mp_next(&net->a[i]) <= net->now)
                mp_tick(&net->a[i], net->now);
    }
}

/* Two tasks, one crashes (pid watchdog): the other one alone decides. */
static void crash_of_one_of_two(void **state)
{
    (void)state;
    struct net net;
    net_init(&net, 2);
    run_until(&net, 0.5);
    net.down[1] = true;
    mp_local_dead(&net.a[0], 1, net.now);
    run_until(&net, 3);
    assert_int_equal(net.a[0].epoch, 1);
    assert_true(mp_task_gone(&net.a[0], 1));
    assert_false(mp_is_alive(&net.a[0], 1)); /* its only task gone: out of the tree */
    assert_false(net.a[0].stopped);
    net_free(&net);
}

/* The lowest task (the root of the next ballot) crashes: the others
 * report to the next lowest at once, not after the silence that makes a
 * reporter propose itself (6 resends + confirm = 1.2 s here). */
static void crash_of_the_root(void **state)
{
    (void)state;
    struct net net;
    net_init(&net, 3);
    run_until(&net, 0.5);
    net.down[0] = true;
    mp_local_dead(&net.a[2], 0, net.now);
    run_until(&net, 1.0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(net.a[i].epoch, 1);
        assert_true(mp_task_gone(&net.a[i], 0));
    }
    net_free(&net);
}

/* Four tasks, cut in two halves that each see the other silent: the half
 * with task 0 decides, the other stops. */
static void half_with_the_lowest_decides(void **state)
{
    (void)state;
    struct net net;
    net_init(&net, 4);
    run_until(&net, 0.5);
    net.side[2] = net.side[3] = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            if (net.side[i] != net.side[j])
                mp_suspect(&net.a[i], j, net.now);
    run_until(&net, 8);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(net.a[i].epoch, 1);
        assert_false(mp_is_alive(&net.a[i], 2));
        assert_false(mp_is_alive(&net.a[i], 3));
        assert_true(mp_is_alive(&net.a[i], 1 - i));
    }
    for (int i = 2; i < 4; i++) {
        assert_int_equal(net.a[i].epoch, 0);
        assert_true(net.a[i].stopped);
    }
    net_free(&net);
}

/* Silent tasks alone are no majority: 1 of 3 left with the others cut off
 * decides nothing and stops, though it is the lowest. */
static void one_of_three_stops(void **state)
{
    (void)state;
    struct net net;
    net_init(&net, 3);
    run_until(&net, 0.5);
    net.side[1] = net.side[2] = 1;
    mp_suspect(&net.a[0], 1, net.now);
    mp_suspect(&net.a[0], 2, net.now);
    run_until(&net, 8);
    assert_int_equal(net.a[0].epoch, 0);
    assert_true(net.a[0].stopped);
    net_free(&net);
}

/* Everyone asks for a decision with nothing to remove: one epoch, nobody
 * removed, and the request is not news any more. */
static void noop_decides_nobody_removed(void **state)
{
    (void)state;
    struct net net;
    net_init(&net, 3);
    run_until(&net, 0.5);
    for (int i = 0; i < 3; i++)
        mp_request(&net.a[i], net.now);
    run_until(&net, 4);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(net.a[i].epoch, 1);
        assert_int_equal(net.a[i].nnews, 0);
        assert_false(net.a[i].stopped);
        for (int j = 0; j < 3; j++)
            assert_true(mp_is_alive(&net.a[i], j));
    }
    net_free(&net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crash_of_one_of_two),
        cmocka_unit_test(crash_of_the_root),
        cmocka_unit_test(half_with_the_lowest_decides),
        cmocka_unit_test(one_of_three_stops),
        cmocka_unit_test(noop_decides_nobody_removed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
