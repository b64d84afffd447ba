/* Pipeline schedules and the simulator: completeness, deadlock freedom,
 * bubble against (p-1)/m and (p-1)/(v m), activation stash, Megatron order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../inproc/inproc.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

static int sim(enum whale_schedule k, int p, int v, int m, double f, double b, double p2p,
               struct whale_pp_sim_result *r)
{
    struct whale_pp_schedule *s = calloc((size_t)p, sizeof *s);
    for (int i = 0; i < p; i++) {
        int rc = whale_pp_schedule_build(k, p, v, m, i, &s[i]);
        if (rc)
            return rc;
    }
    struct whale_pp_sim_cost c = { f, b, p2p };
    int rc = whale_pp_simulate(s, p, &c, NULL, r);
    for (int i = 0; i < p; i++)
        whale_pp_schedule_free(&s[i]);
    free(s);
    return rc;
}

static void fmt(enum whale_schedule k, int p, int v, int m, int rank, char *buf, size_t len)
{
    struct whale_pp_schedule s;
    assert_int_equal(whale_pp_schedule_build(k, p, v, m, rank, &s), 0);
    whale_pp_schedule_format(&s, buf, len);
    whale_pp_schedule_free(&s);
}

static void test_bubble_1f1b_gpipe(void **state)
{
    (void)state;
    int ps[] = { 1, 2, 3, 4, 8 };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (int m = 1; m <= 16; m++) {
            int p = ps[i];
            struct whale_pp_sim_result r;
            /* backward twice the forward, as for a transformer */
            assert_int_equal(sim(WHALE_SCHED_1F1B, p, 1, m, 1.0, 2.0, 0, &r), 0);
            assert_true(r.ok);
            assert_true(fabs(r.bubble - (double)(p - 1) / m) < 1e-12);
            for (int k = 0; k < p; k++)
                assert_int_equal(r.stash[k], (p - k) < m ? (p - k) : m);
            assert_int_equal(sim(WHALE_SCHED_GPIPE, p, 1, m, 1.0, 2.0, 0, &r), 0);
            assert_true(r.ok);
            assert_true(fabs(r.bubble - (double)(p - 1) / m) < 1e-12);
            assert_int_equal(r.max_stash, m);
        }
}

static void test_bubble_interleaved(void **state)
{
    (void)state;
    int ps[] = { 2, 3, 4, 8 };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (int v = 2; v <= 4; v++)
            for (int k = 1; k <= 4; k++) {
                int p = ps[i], m = k * p;
                struct whale_pp_sim_result r;
                /* per-chunk costs: a chunk is 1/v of a stage */
                assert_int_equal(sim(WHALE_SCHED_INTERLEAVED, p, v, m, 1.0 / v, 2.0 / v, 0, &r),
                                 0);
                assert_true(r.ok);
                double want = (double)(p - 1) / (v * m);
                if (fabs(r.bubble - want) > 1e-9)
                    fail_msg("p=%d v=%d m=%d: bubble %.6f, expected (p-1)/(vm) = %.6f", p, v, m,
                             r.bubble, want);
                /* stash of the first rank, Megatron: warm-up + 1 chunk passes */
                int w = m == p ? v * m : (p - 1) * 2 + (v - 1) * p;
                if (w > v * m)
                    w = v * m;
                assert_true(r.stash[0] <= w + 1);
                /* fewer bubbles than plain 1F1B with the same work */
                struct whale_pp_sim_result r1;
                assert_int_equal(sim(WHALE_SCHED_1F1B, p, 1, m, 1.0, 2.0, 0, &r1), 0);
                assert_true(r.makespan < r1.makespan);
            }
}

static void test_p2p_latency_still_deadlock_free(void **state)
{
    (void)state;
    struct whale_pp_sim_result r;
    for (int p = 2; p <= 4; p++) {
        assert_int_equal(sim(WHALE_SCHED_1F1B, p, 1, 8, 1, 2, 0.3, &r), 0);
        assert_true(r.ok);
        assert_true(r.bubble > (double)(p - 1) / 8);
        assert_int_equal(sim(WHALE_SCHED_INTERLEAVED, p, 2, 2 * p, 0.5, 1, 0.3, &r), 0);
        assert_true(r.ok);
        /* uneven costs: backward cheaper than forward */
        assert_int_equal(sim(WHALE_SCHED_1F1B, p, 1, 8, 2, 1, 0.1, &r), 0);
        assert_true(r.ok);
    }
}

static void test_orders(void **state)
{
    (void)state;
    char b[512];
    fmt(WHALE_SCHED_1F1B, 4, 1, 8, 0, b, sizeof b);
    assert_string_equal(b, "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 F0.6 B0.3 F0.7 B0.4 "
                           "B0.5 B0.6 B0.7");
    fmt(WHALE_SCHED_1F1B, 4, 1, 8, 3, b, sizeof b);
    assert_string_equal(b, "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5 F0.6 "
                           "B0.6 F0.7 B0.7");
    fmt(WHALE_SCHED_1F1B, 4, 1, 2, 0, b, sizeof b);
    assert_string_equal(b, "F0.0 F0.1 B0.0 B0.1");
    fmt(WHALE_SCHED_GPIPE, 2, 1, 3, 1, b, sizeof b);
    assert_string_equal(b, "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2");
    /* Megatron interleaved, p=2 v=2 m=4, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 */
    fmt(WHALE_SCHED_INTERLEAVED, 2, 2, 4, 0, b, sizeof b);
    assert_string_equal(b, "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 "
                           "B1.3 B0.2 B0.3");
    fmt(WHALE_SCHED_INTERLEAVED, 2, 2, 4, 1, b, sizeof b);
    assert_string_equal(b, "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 "
                           "B1.3 B0.2 B0.3");

    /* peers: chunk 0 of the last rank sends to chunk 1 of rank 0 */
    struct whale_pp_schedule s;
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_INTERLEAVED, 2, 2, 4, 1, &s), 0);
    assert_int_equal(s.ops[0].recv_peer, 0);
    assert_int_equal(s.ops[0].send_peer, 0);
    assert_int_equal(s.ops[2].chunk, 1);
    assert_int_equal(s.ops[2].send_peer, -1); /* last virtual stage */
    whale_pp_schedule_free(&s);
}

static void test_invalid(void **state)
{
    (void)state;
    struct whale_pp_schedule s;
    test_log_capture(true);
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_INTERLEAVED, 4, 2, 6, 0, &s),
                     WHALE_EINVAL);
    assert_non_null(strstr(test_log_last(), "multiple of the pipeline degree"));
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_1F1B, 4, 2, 8, 0, &s), WHALE_EINVAL);
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_1F1B, 4, 1, 8, 4, &s), WHALE_EINVAL);
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_1F1B, 0, 1, 8, 0, &s), WHALE_EINVAL);
    test_log_capture(false);
}

static void test_deadlock_detected(void **state)
{
    (void)state;
    /* rank 0 keeps one micro-batch in flight, rank 1 runs GPipe: rank 1's
     * B0 waits behind its F1, which needs rank 0's F1, which waits behind
     * rank 0's B0, which needs rank 1's B0. */
    struct whale_pp_schedule s[2];
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_1F1B, 2, 1, 2, 0, &s[0]), 0);
    assert_int_equal(whale_pp_schedule_build(WHALE_SCHED_GPIPE, 2, 1, 2, 1, &s[1]), 0);
    /* force rank 0 into F0 B0 F1 B1 */
    struct whale_pp_op t = s[0].ops[1];
    s[0].ops[1] = s[0].ops[2];
    s[0].ops[2] = t;
    struct whale_pp_sim_cost c = { 1, 2, 0 };
    struct whale_pp_sim_result r;
    assert_int_equal(whale_pp_simulate(s, 2, &c, NULL, &r), 0);
    assert_false(r.ok);
    assert_non_null(strstr(r.why, "deadlock"));

    /* a backward before its forward is malformed */
    t = s[1].ops[0];
    s[1].ops[0] = s[1].ops[3];
    s[1].ops[3] = t;
    assert_int_equal(whale_pp_simulate(s, 2, &c, NULL, &r), 0);
    assert_false(r.ok);
    whale_pp_schedule_free(&s[0]);
    whale_pp_schedule_free(&s[1]);
}

static void test_balance(void **state)
{
    (void)state;
    int out[8];
    double even[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    assert_int_equal(whale_pp_balance(even, 8, 4, out), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(out[i], 2);
    /* embedding on the first layer is cheap, the head on the last is heavy */
    double gpt[6] = { 0.1, 1, 1, 1, 1, 2.5 };
    assert_int_equal(whale_pp_balance(gpt, 6, 2, out), 0);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 2);
    /* uneven: the bottleneck is optimal and earlier stages are lighter */
    double c3[7] = { 1, 1, 1, 1, 1, 1, 1 };
    assert_int_equal(whale_pp_balance(c3, 7, 3, out), 0);
    assert_int_equal(out[0] + out[1] + out[2], 7);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[2], 3);
    test_log_capture(true);
    assert_int_equal(whale_pp_balance(c3, 2, 3, out), WHALE_EINVAL);
    assert_non_null(strstr(test_log_last(), "2 layers cannot fill 3 stages"));
    test_log_capture(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bubble_1f1b_gpipe),
        cmocka_unit_test(test_bubble_interleaved),
        cmocka_unit_test(test_p2p_latency_still_deadlock_free),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_deadlock_detected),
        cmocka_unit_test(test_balance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
