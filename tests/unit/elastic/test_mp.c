/* The runtime's side of the scalable membership protocol (member/mp.h):
 * the heartbeat map (mp_ring_targets) and the adaptive suspicion bound
 * (mp_arrival). The protocol itself is checked by the simulator
 * (tests/sim/el_sim.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "member/mp.h"

static bool alive_ok(int t, void *user)
{
    return ((const uint8_t *)user)[t];
}

/* senders[r * n + s] = 1 when s heartbeats r */
static void senders(const struct mp_ring *r, const uint8_t *alive, uint8_t *out)
{
    int n = r->ntasks;
    memset(out, 0, (size_t)n * (size_t)n);
    for (int s = 0; s < n; s++) {
        if (!alive[s])
            continue;
        int to[MP_WATCH];
        int k = mp_ring_targets(r, s, alive_ok, (void *)alive, to);
        for (int i = 0; i < k; i++)
            out[to[i] * n + s] = 1;
    }
}

static void ring_watches_from_other_nodes(void **state)
{
    (void)state;
    enum { NODES = 8, PER = 4, N = NODES * PER };
    int node_of[N];
    for (int t = 0; t < N; t++)
        node_of[t] = t / PER;
    struct mp_ring r;
    assert_int_equal(mp_ring_init(&r, N, node_of, NODES), 0);
    uint8_t alive[N], s[N * N];
    memset(alive, 1, sizeof alive);
    senders(&r, alive, s);
    for (int t = 0; t < N; t++) {
        int in = 0;
        for (int x = 0; x < N; x++)
            if (s[t * N + x]) {
                in++;
                assert_int_not_equal(node_of[x], node_of[t]); /* same node: the watchdog's */
            }
        assert_int_equal(in, MP_WATCH); /* constant in N */
    }
    mp_ring_free(&r);
}

/* As tasks die, whoever heartbeats a live task keeps doing so: the
 * receiver may count the silence of any sender it has heard as failure.
 * whole_nodes: nodes die (a lost node), and then every live task stays
 * watched while more than MP_WATCH nodes are left; else single tasks die
 * (seen by the pid watchdog of their node), and only the growth holds. */
static void senders_only_grow(bool whole_nodes)
{
    enum { NODES = 7, PER = 3, N = NODES * PER };
    int node_of[N];
    for (int t = 0; t < N; t++)
        node_of[t] = t % NODES; /* tasks of a node not contiguous */
    struct mp_ring r;
    assert_int_equal(mp_ring_init(&r, N, node_of, NODES), 0);
    uint8_t alive[N], before[N * N], after[N * N];
    memset(alive, 1, sizeof alive);
    srand(7);
    senders(&r, alive, before);
    for (int round = 0; round < N - 3; round++) {
        int left = 0;
        for (int t = 0; t < N; t++)
            left += alive[t];
        if (left <= PER)
            break;
        int v;
        do
            v = rand() % N;
        while (!alive[v]);
        alive[v] = 0;
        for (int t = 0; whole_nodes && t < N; t++)
            if (node_of[t] == node_of[v])
                alive[t] = 0;
        senders(&r, alive, after);
        int watched = 0;
        for (int t = 0; t < N; t++) {
            if (!alive[t])
                continue;
            int in = 0;
            for (int x = 0; x < N; x++) {
                if (alive[x] && before[t * N + x])
                    assert_true(after[t * N + x]);
                in += after[t * N + x];
            }
            watched += in > 0;
        }
        /* while two nodes or more hold live tasks, every one is watched */
        int nodes_alive = 0;
        for (int nd = 0; nd < NODES; nd++) {
            bool any = false;
            for (int t = 0; t < N; t++)
                any |= alive[t] && node_of[t] == nd;
            nodes_alive += any;
        }
        if (whole_nodes && nodes_alive > MP_WATCH) {
            int live = 0;
            for (int t = 0; t < N; t++)
                live += alive[t];
            assert_int_equal(watched, live);
        }
        memcpy(before, after, sizeof before);
    }
    mp_ring_free(&r);
}

static void ring_senders_only_grow_node_loss(void **state)
{
    (void)state;
    senders_only_grow(true);
}

static void ring_senders_only_grow_task_loss(void **state)
{
    (void)state;
    senders_only_grow(false);
}

static void ring_one_node(void **state)
{
    (void)state;
    struct mp_ring r;
    assert_int_equal(mp_ring_init(&r, 3, NULL, 1), 0);
    uint8_t alive[3] = { 1, 1, 1 };
    int to[MP_WATCH];
    assert_int_equal(mp_ring_targets(&r, 0, alive_ok, alive, to), 2);
    assert_int_equal(to[0], 1);
    assert_int_equal(to[1], 2);
    alive[1] = 0;
    assert_int_equal(mp_ring_targets(&r, 0, alive_ok, alive, to), 1);
    assert_int_equal(to[0], 2);
    mp_ring_free(&r);
}

/* A starved node's heartbeats come late and irregularly (up to 6 s apart
 * here): a fixed 5 s timeout removes it, the adaptive bound follows it;
 * a steady peer keeps the floor, so a crash is still seen at the floor. */
static void arrival_follows_a_starved_peer(void **state)
{
    (void)state;
    struct mp_arrival steady, starved;
    mp_arrival_init(&steady, 0, 0.5);
    mp_arrival_init(&starved, 0, 0.5);
    double t = 0;
    for (int i = 0; i < 200; i++) {
        t += 0.5;
        mp_arrival_note(&steady, t);
    }
    assert_true(mp_arrival_bound(&steady, 5.0) == 5.0);
    double u = 0;
    static const double gaps[] = { 0.5, 3.0, 0.4, 6.0, 1.0, 4.5, 0.5, 2.0 };
    for (int i = 0; i < 200; i++) {
        u += gaps[i % 8];
        mp_arrival_note(&starved, u);
    }
    assert_true(mp_arrival_bound(&starved, 5.0) > 6.0);
}

/* The observer's side of el_poll: forgive its own stall, take what
 * arrived (the sender's heartbeat, if it ran), judge the silence. */
static bool poll_finds_silent(double *last_poll, double *heard, double now, bool arrived)
{
    *heard += mp_own_stall(last_poll, now, 0.5);
    if (arrived)
        *heard = now;
    return now - *heard > 8.0;
}

/* Every task frozen for 9 s at once (a machine-wide stall): on the thaw the
 * observer polls before its sender could send again, and must not fail
 * it; a sender that dies while the observer runs is failed after the
 * timeout as before; an observer polled late but within twice the
 * interval forgives nothing. */
static void own_stall_is_not_peer_silence(void **state)
{
    (void)state;
    double last = 0, heard = 0, t = 0;
    for (; t < 10.0; t += 0.5)
        assert_false(poll_finds_silent(&last, &heard, t, true));
    t += 9.0; /* frozen: neither polls nor sends */
    assert_false(poll_finds_silent(&last, &heard, t, false));
    t += 0.5; /* the sender runs again */
    assert_false(poll_finds_silent(&last, &heard, t, true));
    /* now the sender dies; the observer keeps polling */
    double died = t;
    bool failed = false;
    while (!failed && t < died + 20) {
        t += 0.5;
        failed = poll_finds_silent(&last, &heard, t, false);
    }
    assert_true(failed);
    assert_true(t - died > 8.0 && t - died <= 8.5);
    /* a starved observer polling every 0.9 s still fails a dead sender
     * after the timeout */
    double d2 = t;
    heard = t;
    failed = false;
    while (!failed && t < d2 + 20) {
        t += 0.9;
        failed = poll_finds_silent(&last, &heard, t, false);
    }
    assert_true(failed);
    assert_true(t - d2 <= 9.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ring_watches_from_other_nodes),
        cmocka_unit_test(ring_senders_only_grow_node_loss),
        cmocka_unit_test(ring_senders_only_grow_task_loss),
        cmocka_unit_test(ring_one_node),
        cmocka_unit_test(arrival_follows_a_starved_peer),
        cmocka_unit_test(own_stall_is_not_peer_silence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
