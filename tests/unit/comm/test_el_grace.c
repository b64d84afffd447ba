/* The recovery window's rules (member/el_grace.c): when the survivors wait
 * for a member gone silent, for how long, and who may come back. Pure
 * functions: no processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "member/el_internal.h"
#include "whale/error.h"

/* Only a decision that costs something is worth a wait: no quorum, the
 * step stopping (ENOFIT), a DP replica dropped. A spare replacing the
 * member, or members that all came back, are decided at once. */
static void wanted_only_when_it_costs(void **state)
{
    (void)state;
    struct whale_membership_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = WHALE_RECOVERY_REPLACED;
    assert_false(el_grace_wanted(true, 0, &ev));
    ev.kind = WHALE_RECOVERY_SHRUNK;
    assert_true(el_grace_wanted(true, 0, &ev));
    ev.kind = WHALE_RECOVERY_RESUMED;
    assert_false(el_grace_wanted(true, 0, &ev));
    assert_true(el_grace_wanted(true, WHALE_ENOFIT, &ev));
    assert_true(el_grace_wanted(false, 0, NULL)); /* a minority side waits too */
    assert_false(el_grace_wanted(true, WHALE_ENOMEM, &ev));
}

/* How long to wait: the latest deadline of the silent members (detected at
 * different times); crashed members, members gone from an earlier epoch,
 * and a grace of 0 never make anyone wait. */
static void left_is_the_latest_silent_deadline(void **state)
{
    (void)state;
    enum { N = 6 };
    uint8_t member[N] = { 1, 1, 1, 1, 1, 0 };
    uint8_t gone[N] = { 0, 1, 1, 1, 0, 1 };
    bool hard[N] = { false, false, false, true, false, false };
    double at[N] = { 0, 100.0, 103.0, 104.0, 0, 90.0 };
    /* 2 silent members: deadlines 110 and 113 with a grace of 10 */
    assert_true(el_grace_left(N, member, gone, hard, at, 10.0, 105.0) > 7.99);
    assert_true(el_grace_left(N, member, gone, hard, at, 10.0, 105.0) < 8.01);
    /* past the first deadline the later one still holds */
    assert_true(el_grace_left(N, member, gone, hard, at, 10.0, 111.0) > 1.99);
    /* past both: decide */
    assert_true(el_grace_left(N, member, gone, hard, at, 10.0, 113.5) == 0.0);
    /* no grace configured */
    assert_true(el_grace_left(N, member, gone, hard, at, 0.0, 105.0) == 0.0);
    /* only a crashed member gone: nothing to wait for */
    uint8_t gone2[N] = { 0, 0, 0, 1, 0, 0 };
    assert_true(el_grace_left(N, member, gone2, hard, at, 10.0, 105.0) == 0.0);
    /* a non-member (left at an earlier epoch) is never waited for */
    uint8_t gone3[N] = { 0, 0, 0, 0, 0, 1 };
    assert_true(el_grace_left(N, member, gone3, hard, at, 1000.0, 105.0) == 0.0);
}

/* Who may take its place back: a member declared failed for silence, heard
 * again within the grace; never a crashed one, a live one, one no longer a
 * member, or one heard after the grace ran out. */
static void who_may_come_back(void **state)
{
    (void)state;
    assert_true(el_grace_may_revive(true, true, false, 100.0, 10.0, 109.0));
    assert_true(el_grace_may_revive(true, true, false, 100.0, 10.0, 110.0));
    assert_false(el_grace_may_revive(true, true, false, 100.0, 10.0, 110.5));
    assert_false(el_grace_may_revive(true, true, true, 100.0, 10.0, 101.0));   /* crashed */
    assert_false(el_grace_may_revive(true, false, false, 100.0, 10.0, 101.0)); /* alive */
    assert_false(el_grace_may_revive(false, true, false, 100.0, 10.0, 101.0)); /* left out */
    assert_false(el_grace_may_revive(true, true, false, 100.0, 0.0, 100.0));   /* no grace */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wanted_only_when_it_costs),
        cmocka_unit_test(left_is_the_latest_silent_deadline),
        cmocka_unit_test(who_may_come_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
