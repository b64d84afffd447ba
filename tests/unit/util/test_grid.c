/* The parallel layout type (whale/grid.h): rank <-> coordinates, groups
 * against the arithmetic the modules used to write by hand, validation and
 * the environment form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/grid.h"

static struct whale_grid grid(int tp, int pp, int dp)
{
    struct whale_grid g;
    whale_grid_init(&g);
    g.tp = tp;
    g.pp = pp;
    g.dp = dp;
    return g;
}

/* Many shapes, every rank: coordinates in range, back to the same rank,
 * and the formula of the contract (rank = ((pp * DP) + dp) * TP + tp). */
static void test_round_trip(void **state)
{
    (void)state;
    for (int tp = 1; tp <= 8; tp++)
        for (int pp = 1; pp <= 6; pp++)
            for (int dp = 1; dp <= 7; dp++) {
                struct whale_grid g = grid(tp, pp, dp);
                int world = whale_grid_world(&g);
                assert_int_equal(world, tp * pp * dp);
                for (int r = 0; r < world; r++) {
                    struct whale_coords c;
                    whale_grid_coords(&g, r, &c);
                    assert_true(c.tp >= 0 && c.tp < tp);
                    assert_true(c.pp >= 0 && c.pp < pp);
                    assert_true(c.dp >= 0 && c.dp < dp);
                    assert_int_equal(whale_grid_rank(&g, &c), r);
                    assert_int_equal(((c.pp * dp) + c.dp) * tp + c.tp, r);
                    /* the old hand-written inverse */
                    assert_int_equal(c.tp, r % tp);
                    assert_int_equal(c.dp, (r / tp) % dp);
                    assert_int_equal(c.pp, r / (tp * dp));
                }
            }
}

/* Group members equal what comm's group construction computed before. */
static void test_groups_match_old_arithmetic(void **state)
{
    (void)state;
    int ranks[64];
    for (int tp = 1; tp <= 4; tp++)
        for (int pp = 1; pp <= 4; pp++)
            for (int dp = 1; dp <= 4; dp++) {
                struct whale_grid g = grid(tp, pp, dp);
#define RANK(p, d, t) ((((p) * dp) + (d)) * tp + (t))
                for (int r = 0; r < tp * pp * dp; r++) {
                    int t = r % tp, d = (r / tp) % dp, p = r / (tp * dp);
                    assert_int_equal(whale_grid_group(&g, WHALE_AXIS_TP, r, ranks), tp);
                    for (int i = 0; i < tp; i++)
                        assert_int_equal(ranks[i], RANK(p, d, i));
                    assert_int_equal(whale_grid_group(&g, WHALE_AXIS_PP, r, ranks), pp);
                    for (int i = 0; i < pp; i++)
                        assert_int_equal(ranks[i], RANK(i, d, t));
                    assert_int_equal(whale_grid_group(&g, WHALE_AXIS_DP, r, ranks), dp);
                    for (int i = 0; i < dp; i++)
                        assert_int_equal(ranks[i], RANK(p, i, t));
                    assert_int_equal(whale_grid_group_index(&g, WHALE_AXIS_TP, r), t);
                    assert_int_equal(whale_grid_group_index(&g, WHALE_AXIS_PP, r), p);
                    assert_int_equal(whale_grid_group_index(&g, WHALE_AXIS_DP, r), d);
                    assert_int_equal(whale_grid_group(&g, WHALE_AXIS_DP, r, NULL), dp);
                }
#undef RANK
            }
}

/* EP groups: EP consecutive DP ranks at the same (pp, tp); expert-data-
 * parallel groups: the DP ranks EP apart. Together they tile the DP group. */
static void test_ep_groups(void **state)
{
    (void)state;
    int ep_ranks[64], edp_ranks[64], dp_ranks[64];
    for (int tp = 1; tp <= 3; tp++)
        for (int pp = 1; pp <= 3; pp++)
            for (int dp = 1; dp <= 8; dp++)
                for (int ep = 1; ep <= dp; ep++) {
                    if (dp % ep)
                        continue;
                    struct whale_grid g = grid(tp, pp, dp);
                    g.ep = ep;
                    for (int r = 0; r < tp * pp * dp; r++) {
                        struct whale_coords c;
                        whale_grid_coords(&g, r, &c);
                        assert_int_equal(whale_grid_group(&g, WHALE_AXIS_EP, r, ep_ranks), ep);
                        assert_int_equal(whale_grid_group(&g, WHALE_AXIS_EDP, r, edp_ranks), dp / ep);
                        whale_grid_group(&g, WHALE_AXIS_DP, r, dp_ranks);
                        for (int i = 0; i < ep; i++) /* consecutive DP ranks */
                            assert_int_equal(ep_ranks[i], dp_ranks[(c.dp / ep) * ep + i]);
                        for (int i = 0; i < dp / ep; i++) /* EP apart */
                            assert_int_equal(edp_ranks[i], dp_ranks[i * ep + c.dp % ep]);
                        int ei = whale_grid_group_index(&g, WHALE_AXIS_EP, r);
                        int di = whale_grid_group_index(&g, WHALE_AXIS_EDP, r);
                        assert_int_equal(ep_ranks[ei], r);
                        assert_int_equal(edp_ranks[di], r);
                        assert_int_equal(di * ep + ei, c.dp);
                    }
                }
    /* zero-initialised EP: dense, the EP group is the rank alone */
    struct whale_grid z = { .tp = 2, .pp = 1, .dp = 4 };
    assert_int_equal(whale_grid_ep(&z), 1);
    assert_int_equal(whale_grid_group(&z, WHALE_AXIS_EP, 5, ep_ranks), 1);
    assert_int_equal(ep_ranks[0], 5);
    assert_int_equal(whale_grid_group(&z, WHALE_AXIS_EDP, 5, NULL), 4);
}

static void test_ep_check(void **state)
{
    (void)state;
    char msg[256];
    struct whale_grid g = grid(1, 1, 12);
    g.ep = 4;
    assert_int_equal(whale_grid_check(&g, 12, "", msg, sizeof msg), 0);
    g.ep = 5;
    assert_int_equal(whale_grid_check(&g, 12, "--whale-", msg, sizeof msg), WHALE_EINVAL);
    assert_string_equal(msg, "--whale-ep=5 must divide --whale-dp=12: expert groups are carved "
                             "out of the data-parallel ranks (allowed: 1, 2, 3, 4, 6, 12)");
    g.ep = -1;
    assert_int_equal(whale_grid_check(&g, 0, "", msg, sizeof msg), WHALE_EINVAL);
    assert_non_null(strstr(msg, "ep=-1 is out of range"));
    char ok[64];
    whale_grid_ep_choices(16, ok, sizeof ok);
    assert_string_equal(ok, "1, 2, 4, 8, 16");
    whale_grid_ep_choices(7, ok, sizeof ok);
    assert_string_equal(ok, "1, 7");
    whale_grid_ep_choices(1, ok, sizeof ok);
    assert_string_equal(ok, "1");
}

static void test_check(void **state)
{
    (void)state;
    char msg[256];
    struct whale_grid g = grid(2, 2, 2);
    assert_int_equal(whale_grid_check(&g, 8, "", msg, sizeof msg), 0);
    assert_int_equal(whale_grid_check(&g, 0, "", msg, sizeof msg), 0);
    assert_int_equal(whale_grid_check(&g, 6, "", msg, sizeof msg), WHALE_EINVAL);
    assert_string_equal(msg, "tp*pp*dp = 2*2*2 = 8 does not match the 6 working ranks");

    g = grid(0, 1, 1);
    assert_int_equal(whale_grid_check(&g, 0, "--whale-", msg, sizeof msg), WHALE_EINVAL);
    assert_string_equal(msg, "--whale-tp=0 is out of range: allowed 1..1048576");
    g = grid(1, 1, -3);
    assert_int_equal(whale_grid_check(&g, 0, "", msg, sizeof msg), WHALE_EINVAL);
    assert_non_null(strstr(msg, "dp=-3 is out of range: allowed 1..16777216"));

    /* each degree in range, the product not (and not overflowing) */
    g = grid(1 << 20, 1 << 20, 1 << 24);
    assert_int_equal(whale_grid_check(&g, 0, "", msg, sizeof msg), WHALE_EINVAL);
    assert_string_equal(msg, "tp*pp*dp = 1048576*1048576*16777216 is more than 16777216 ranks");

    /* context parallelism has a place, no use yet */
    g = grid(1, 1, 1);
    g.cp = 2;
    assert_int_equal(whale_grid_check(&g, 0, "", msg, sizeof msg), WHALE_EINVAL);
    assert_non_null(strstr(msg, "cp=2"));
    g.cp = 0; /* a zero-initialised struct: reads as 1 */
    assert_int_equal(whale_grid_check(&g, 1, "", msg, sizeof msg), 0);
}

/* The embedded form: members by name and the whole set share storage. */
struct holder {
    int before;
    WHALE_GRID(grid);
    int after;
};

static void test_embedded(void **state)
{
    (void)state;
    struct holder h = { .before = 7, .tp = 2, .pp = 3, .dp = 4, .after = 9 };
    assert_int_equal(h.grid.tp, 2);
    assert_int_equal(h.grid.pp, 3);
    assert_int_equal(h.grid.dp, 4);
    h.grid = grid(5, 6, 7);
    assert_int_equal(h.tp, 5);
    assert_int_equal(h.pp, 6);
    assert_int_equal(h.dp, 7);
    assert_int_equal(h.before, 7);
    assert_int_equal(h.after, 9);
}

/* ---- environment form ---- */
struct kv { const char *k[8], *v[8]; char buf[8][24]; int n; };

static int put(const char *name, const char *value, void *user)
{
    struct kv *e = user;
    e->k[e->n] = name;
    snprintf(e->buf[e->n], sizeof e->buf[e->n], "%s", value);
    e->v[e->n] = e->buf[e->n];
    e->n++;
    return 0;
}

static const char *get(const char *name, void *user)
{
    struct kv *e = user;
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->k[i], name))
            return e->v[i];
    return NULL;
}

static void test_env(void **state)
{
    (void)state;
    struct kv e = { .n = 0 };
    struct whale_grid g = grid(2, 3, 4), back;
    char msg[256];
    assert_int_equal(whale_grid_to_env(&g, put, &e), 0);
    assert_int_equal(e.n, 4);
    assert_string_equal(e.k[0], WHALE_ENV_TP);
    assert_string_equal(e.v[0], "2");
    assert_string_equal(e.k[1], WHALE_ENV_PP);
    assert_string_equal(e.v[1], "3");
    assert_string_equal(e.k[2], WHALE_ENV_DP);
    assert_string_equal(e.v[2], "4");
    assert_string_equal(e.k[3], WHALE_ENV_EP);
    assert_string_equal(e.v[3], "1");
    assert_int_equal(whale_grid_from_env(&back, get, &e, msg, sizeof msg), 0);
    assert_int_equal(back.tp, 2);
    assert_int_equal(back.pp, 3);
    assert_int_equal(back.dp, 4);
    assert_int_equal(back.ep, 1);
    assert_int_equal(back.cp, 1);
    struct kv ep2 = { .n = 2, .k = { WHALE_ENV_DP, WHALE_ENV_EP }, .v = { "4", "2" } };
    assert_int_equal(whale_grid_from_env(&back, get, &ep2, msg, sizeof msg), 0);
    assert_int_equal(back.ep, 2);

    /* unset: 1, DP 0 (derived by the caller) */
    struct kv none = { .n = 0 };
    assert_int_equal(whale_grid_from_env(&back, get, &none, msg, sizeof msg), 0);
    assert_int_equal(back.tp, 1);
    assert_int_equal(back.pp, 1);
    assert_int_equal(back.dp, 0);

    struct kv bad = { .n = 1, .k = { WHALE_ENV_PP }, .v = { "2x" } };
    assert_int_equal(whale_grid_from_env(&back, get, &bad, msg, sizeof msg), WHALE_EINVAL);
    assert_string_equal(msg, "WHALE_PP='2x' is not an integer in [1, 1048576]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_groups_match_old_arithmetic),
        cmocka_unit_test(test_ep_groups),
        cmocka_unit_test(test_ep_check),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_embedded),
        cmocka_unit_test(test_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
