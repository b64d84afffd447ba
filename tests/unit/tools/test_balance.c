/* Shares that follow the replicas' speeds (runtime/tools/train/train_balance.c)
 * on synthetic times: the split, the drift detector's decisions, and that
 * every input gives one answer (ranks agree without a vote). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "train_balance.h"

static void test_split(void **state)
{
    (void)state;
    long s[4];
    /* speeds 1,1,0.5,0.5 and 12 micro-batches: 4,4,2,2 (step 4 units of time,
     * against 6 for the even split 3,3,3,3) */
    const double sp[4] = { 1, 1, 0.5, 0.5 };
    assert_int_equal(train_balance_split(sp, 4, 12, s), 0);
    assert_int_equal(s[0], 4);
    assert_int_equal(s[1], 4);
    assert_int_equal(s[2], 2);
    assert_int_equal(s[3], 2);
    assert_true(train_balance_step_s(s, sp, 4) == 4.0);
    const long even[4] = { 3, 3, 3, 3 };
    assert_true(train_balance_step_s(even, sp, 4) == 6.0);
    /* 8 units over 3:1: 6, 2 */
    const double sp2[2] = { 3, 1 };
    assert_int_equal(train_balance_split(sp2, 2, 8, s), 0);
    assert_int_equal(s[0], 6);
    assert_int_equal(s[1], 2);
    /* every replica keeps one unit, however slow */
    const double sp3[3] = { 100, 100, 0.001 };
    assert_int_equal(train_balance_split(sp3, 3, 10, s), 0);
    assert_int_equal(s[2], 1);
    assert_int_equal(s[0] + s[1] + s[2], 10);
    /* equal speeds: the even split, remainders to the lower indices */
    const double sp4[3] = { 2, 2, 2 };
    assert_int_equal(train_balance_split(sp4, 3, 8, s), 0);
    assert_int_equal(s[0], 3);
    assert_int_equal(s[1], 3);
    assert_int_equal(s[2], 2);
    /* refused: fewer units than replicas, a speed that is not positive */
    assert_int_equal(train_balance_split(sp, 4, 3, s), -1);
    const double bad[2] = { 1, 0 };
    assert_int_equal(train_balance_split(bad, 2, 4, s), -1);
}

/* compute seconds of replica r for share[r] units at speed v[r] */
static void times(const long *share, const double *v, int n, double *t)
{
    for (int i = 0; i < n; i++)
        t[i] = share[i] / v[i];
}

static void test_drift_throttle(void **state)
{
    (void)state;
    struct train_drift d;
    assert_int_equal(train_drift_init(&d, 4, 0.15, 3, 0.5), 0);
    long share[4] = { 3, 3, 3, 3 }, next[4] = { 0 };
    double t[4];
    /* equal speeds: never a rebalance */
    const double eq[4] = { 10, 10, 10, 10 };
    for (int k = 0; k < 20; k++) {
        times(share, eq, 4, t);
        assert_int_equal(train_drift_step(&d, share, t, next), 0);
    }
    /* replica 3 at half speed: due on the third step in a row (patience),
     * not before */
    const double slow[4] = { 10, 10, 10, 5 };
    int due_at = -1;
    for (int k = 0; k < 10 && due_at < 0; k++) {
        times(share, slow, 4, t);
        if (train_drift_step(&d, share, t, next))
            due_at = k;
    }
    assert_true(due_at >= 2 && due_at <= 5);
    assert_int_equal(next[0] + next[1] + next[2] + next[3], 12);
    assert_true(next[3] < 3);
    memcpy(share, next, sizeof share);
    train_drift_applied(&d);
    /* balanced now: nothing more to gain, no further rebalance */
    for (int k = 0; k < 20; k++) {
        times(share, slow, 4, t);
        assert_int_equal(train_drift_step(&d, share, t, next), 0);
    }
    train_drift_free(&d);
}

static void test_drift_noise(void **state)
{
    (void)state;
    struct train_drift d;
    assert_int_equal(train_drift_init(&d, 2, 0.2, 3, 0.3), 0);
    long share[2] = { 4, 4 }, next[2];
    /* one slow step in every other: the smoothed speeds stay close and a
     * single outlier never reaches the patience */
    for (int k = 0; k < 40; k++) {
        double t[2] = { 0.4, k % 5 == 0 ? 0.8 : 0.4 };
        assert_int_equal(train_drift_step(&d, share, t, next), 0);
    }
    /* a replica with no time measured keeps its estimate (no division by 0) */
    double t0[2] = { 0.4, 0 };
    assert_int_equal(train_drift_step(&d, share, t0, next), 0);
    train_drift_free(&d);
}

static void test_drift_deterministic(void **state)
{
    (void)state;
    /* two detectors (two ranks) fed the same agreed times decide the same
     * step and the same shares */
    struct train_drift a, b;
    assert_int_equal(train_drift_init(&a, 3, 0.1, 2, 0.4), 0);
    assert_int_equal(train_drift_init(&b, 3, 0.1, 2, 0.4), 0);
    long sa[3] = { 4, 4, 4 }, sb[3] = { 4, 4, 4 }, na[3], nb[3];
    for (int k = 0; k < 30; k++) {
        double t[3] = { 0.4 + 0.01 * (k % 3), 0.5, 0.4 + 0.3 * (k > 10) };
        int da = train_drift_step(&a, sa, t, na), db = train_drift_step(&b, sb, t, nb);
        assert_int_equal(da, db);
        if (da) {
            assert_memory_equal(na, nb, sizeof na);
            memcpy(sa, na, sizeof sa);
            memcpy(sb, nb, sizeof sb);
            train_drift_applied(&a);
            train_drift_applied(&b);
        }
    }
    train_drift_free(&a);
    train_drift_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_drift_throttle),
        cmocka_unit_test(test_drift_noise),
        cmocka_unit_test(test_drift_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
