/* The pairwise all-to-all schedule (comm/collectives/a2a.c), simulated in one process:
 * the schedules of all p ranks are built, every receive is matched with the
 * send of the same (sender, receiver, tag), sizes must agree, each rank
 * sends and receives exactly once per peer and per step, and at most one
 * transfer per direction and step; then the bytes are moved and checked
 * against (source, destination, index). Group sizes 1..7, uneven and
 * zero counts, displacements out of rank order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/collectives/a2a.h"

#define PMAX 7

/* Bytes rank s sends to rank d (some 0, some large). */
static size_t len_of(int s, int d, int variant)
{
    if (variant == 0)
        return 5;
    if ((s + 2 * d) % 4 == 1)
        return 0;
    return (size_t)(1 + (s * 7 + d * 13) % 29) * (variant == 2 ? 1000 : 1);
}

static uint8_t byte_of(int s, int d, size_t i) { return (uint8_t)(s * 31 + d * 17 + i * 7 + 1); }

static void run(int p, int variant)
{
    struct sched s[PMAX];
    struct comm_a2a a[PMAX];
    size_t tab[PMAX][4][PMAX];
    char *sendb[PMAX], *recvb[PMAX];
    for (int r = 0; r < p; r++) {
        /* blocks in reverse rank order, with a gap of 3 bytes after each */
        size_t so = 0, ro = 0;
        for (int q = p - 1; q >= 0; q--) {
            tab[r][0][q] = so;
            tab[r][1][q] = len_of(r, q, variant);
            tab[r][2][q] = ro;
            tab[r][3][q] = len_of(q, r, variant);
            so += tab[r][1][q] + 3;
            ro += tab[r][3][q] + 3;
        }
        sendb[r] = malloc(so + 1);
        recvb[r] = malloc(ro + 1);
        assert_non_null(sendb[r]);
        assert_non_null(recvb[r]);
        memset(recvb[r], 0xEE, ro + 1);
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < tab[r][1][q]; i++)
                sendb[r][tab[r][0][q] + i] = (char)byte_of(r, q, i);
        a[r] = (struct comm_a2a){ .send = sendb[r], .recv = recvb[r], .soff = tab[r][0],
                                  .slen = tab[r][1], .roff = tab[r][2], .rlen = tab[r][3],
                                  .what = "alltoallv" };
        sched_init(&s[r], p, r, WHALE_UINT8, WHALE_SUM);
        build_alltoall_pairwise(&s[r], &a[r]);
        assert_int_equal(s[r].err, 0);
        /* one chain per step (bounded in flight by the engine's window) */
        assert_int_equal((int)s[r].nchains, p);
    }
    for (int r = 0; r < p; r++) {
        int sends[PMAX] = { 0 }, recvs[PMAX] = { 0 };
        for (uint32_t x = 0; x < s[r].nxfers; x++) {
            const struct sched_xfer *t = &s[r].xfers[x];
            assert_true(t->peer >= 0 && t->peer < p && t->peer != r);
            if (t->send) {
                /* step k goes to (r + k) % p */
                assert_int_equal(t->peer, (r + (int)t->tag) % p);
                sends[t->peer]++;
                continue;
            }
            assert_int_equal(t->peer, (r - (int)t->tag + p) % p);
            recvs[t->peer]++;
            /* the matching send */
            const struct sched *o = &s[t->peer];
            int found = 0;
            for (uint32_t y = 0; y < o->nxfers; y++) {
                const struct sched_xfer *u = &o->xfers[y];
                if (u->send && u->peer == r && u->tag == t->tag) {
                    found++;
                    assert_int_equal(u->bytes, t->bytes);
                    if (t->bytes)
                        memcpy(t->buf, u->buf, t->bytes);
                }
            }
            assert_int_equal(found, 1);
        }
        for (int q = 0; q < p; q++) {
            assert_int_equal(sends[q], q == r ? 0 : 1);
            assert_int_equal(recvs[q], q == r ? 0 : 1);
        }
    }
    for (int r = 0; r < p; r++) {
        for (uint32_t k = 0; k < s[r].nrounds; k++)
            sched_run_actions(&s[r], &s[r].rounds[k]);
        for (int q = 0; q < p; q++) {
            for (size_t i = 0; i < tab[r][3][q]; i++)
                assert_int_equal((uint8_t)recvb[r][tab[r][2][q] + i], byte_of(q, r, i));
            /* the gap after each block is untouched */
            assert_int_equal((uint8_t)recvb[r][tab[r][2][q] + tab[r][3][q]], 0xEE);
        }
        sched_free(&s[r]);
        free(sendb[r]);
        free(recvb[r]);
    }
}

static void test_pairwise(void **state)
{
    (void)state;
    for (int p = 1; p <= PMAX; p++)
        for (int v = 0; v < 3; v++)
            run(p, v);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_pairwise) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
