/* The membership decision (member/el_decide.c): nearest spare by link class,
 * a failed node's ranks together on one spare node, DP shrink (most failed
 * replica first, its healthy tasks reused as spares), renumbering with the
 * Megatron order, and the DP = 1 dead end. Pure function: no processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "member/el_internal.h"
#include "whale/error.h"

/* node of each task and a class matrix by node: 0 same node, 2 same leaf,
 * 4 elsewhere */
struct topo_fix {
    const int *node;
    const int *leaf;
};

static int cls(int a, int b, void *user)
{
    const struct topo_fix *f = user;
    if (f->node[a] == f->node[b])
        return 0;
    return f->leaf[f->node[a]] == f->leaf[f->node[b]] ? 2 : 4;
}

static void base(struct el_state *s, int ntasks, int tp, int pp, int dp, const int *rank_of_task)
{
    /* Axes the test does not set (ep, cp) read 0, i.e. their default of 1;
     * left uninitialised they held whatever the stack did. */
    memset(s, 0, sizeof *s);
    s->epoch = 0;
    s->ntasks = ntasks;
    s->tp = tp;
    s->pp = pp;
    s->dp = dp;
    s->world = tp * pp * dp;
    s->rank_of_task = malloc(sizeof(int) * (size_t)ntasks);
    s->member = malloc((size_t)ntasks);
    for (int t = 0; t < ntasks; t++) {
        s->rank_of_task[t] = rank_of_task[t];
        s->member[t] = 1;
    }
}

static int task_of(const struct el_state *s, int rank)
{
    for (int t = 0; t < s->ntasks; t++)
        if (s->member[t] && s->rank_of_task[t] == rank)
            return t;
    return -1;
}

static void nearest_spare(void **state)
{
    (void)state;
    /* tasks 0-3 work on nodes 0-3; spares: task 4 (node 4, other leaf),
     * task 5 (node 5, leaf of node 1). Rank 1 fails: task 5 is nearer. */
    int rot[6] = { 0, 1, 2, 3, -1, -1 };
    int node[6] = { 0, 1, 2, 3, 4, 5 }, leaf[6] = { 0, 1, 0, 0, 0, 1 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 6, 1, 1, 4, rot);
    uint8_t gone[6] = { 0, 1, 0, 0, 0, 0 }, how[6] = { 0, WHALE_DETECT_CRASH, 0, 0, 0, 0 };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_REPLACED);
    assert_int_equal(ev.nfailed, 1);
    assert_int_equal(ev.failed_rank[0], 1);
    assert_int_equal(ev.failed_task[0], 1);
    assert_int_equal(ev.replacement_task[0], 5);
    assert_int_equal(n.rank_of_task[5], 1);
    assert_int_equal(n.rank_of_task[4], -1);
    assert_int_equal(n.member[1], 0);
    assert_int_equal(n.epoch, 1);
    assert_int_equal(n.world, 4);
    el_state_free(&b);
    el_state_free(&n);
}

static void node_lands_together(void **state)
{
    (void)state;
    /* 2 tasks per node: node 0 {0,1}, node 1 {2,3} work; spare nodes 2 {4,5}
     * and 3 {6,7}, all in one leaf. Node 1 dies: ranks 2,3 -> tasks 4,5. */
    int rot[8] = { 0, 1, 2, 3, -1, -1, -1, -1 };
    int node[8] = { 0, 0, 1, 1, 2, 2, 3, 3 }, leaf[4] = { 0, 0, 0, 0 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 8, 2, 1, 2, rot);
    uint8_t gone[8] = { 0, 0, 1, 1, 0, 0, 0, 0 };
    uint8_t how[8] = { 0, 0, WHALE_DETECT_NODE, WHALE_DETECT_NODE, 0, 0, 0, 0 };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), 0);
    assert_int_equal(ev.nfailed, 2);
    assert_int_equal(ev.how, WHALE_DETECT_NODE);
    assert_int_equal(task_of(&n, 2), 4);
    assert_int_equal(task_of(&n, 3), 5);
    el_state_free(&b);
    el_state_free(&n);
}

static void shrink_reuses_dropped_replica(void **state)
{
    (void)state;
    /* TP=2 DP=2, no spare: rank 0 (dp 0) and rank 3 (dp 1) fail. Tie on
     * failures: drop the highest dp (1); its healthy task 2 takes rank 0. */
    int rot[4] = { 0, 1, 2, 3 };
    int node[4] = { 0, 0, 1, 1 }, leaf[2] = { 0, 0 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 4, 2, 1, 2, rot);
    uint8_t gone[4] = { 1, 0, 0, 1 }, how[4] = { WHALE_DETECT_CRASH, 0, 0, WHALE_DETECT_CRASH };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_SHRUNK);
    assert_int_equal(ev.dp, 1);
    assert_int_equal(ev.old_grid.dp, 2);
    assert_int_equal(ev.dropped_dp, 1);
    assert_int_equal(ev.ndropped, 1);
    assert_int_equal(n.world, 2);
    assert_int_equal(task_of(&n, 0), 2);
    assert_int_equal(task_of(&n, 1), 1);
    /* failed rank 3 was in the dropped replica: no replacement */
    assert_int_equal(ev.nfailed, 2);
    assert_int_equal(ev.failed_rank[1], 3);
    assert_int_equal(ev.replacement_task[1], -1);
    assert_int_equal(ev.replacement_task[0], 2);
    el_state_free(&b);
    el_state_free(&n);
}

static void shrink_renumbers_megatron(void **state)
{
    (void)state;
    /* TP=1 PP=2 DP=3: rank = pp*3 + dp. Rank 4 (pp 1, dp 1) fails, no
     * spare: dp 1 dropped; new DP=2: (pp,dp') -> pp*2 + dp', dp 2 -> dp' 1. */
    int rot[6] = { 0, 1, 2, 3, 4, 5 };
    int node[6] = { 0, 1, 2, 3, 4, 5 }, leaf[6] = { 0 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 6, 1, 2, 3, rot);
    uint8_t gone[6] = { 0, 0, 0, 0, 1, 0 }, how[6] = { 0, 0, 0, 0, WHALE_DETECT_HANG, 0 };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_SHRUNK);
    assert_int_equal(ev.how, WHALE_DETECT_HANG);
    assert_int_equal(n.dp, 2);
    assert_int_equal(n.world, 4);
    assert_int_equal(n.rank_of_task[0], 0); /* pp0 dp0 */
    assert_int_equal(n.rank_of_task[2], 1); /* pp0 dp2 -> dp'1 */
    assert_int_equal(n.rank_of_task[3], 2); /* pp1 dp0 */
    assert_int_equal(n.rank_of_task[5], 3); /* pp1 dp2 -> dp'1 */
    assert_int_equal(n.rank_of_task[1], -1); /* healthy, dropped: a spare now */
    assert_int_equal(n.member[1], 1);
    el_state_free(&b);
    el_state_free(&n);
}

static void dp1_without_spare_is_fatal(void **state)
{
    (void)state;
    int rot[2] = { 0, 1 };
    int node[2] = { 0, 1 }, leaf[2] = { 0, 0 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 2, 2, 1, 1, rot);
    uint8_t gone[2] = { 0, 1 }, how[2] = { 0, WHALE_DETECT_CRASH };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), WHALE_ENOFIT);
    assert_int_equal(ev.nfailed, 1);
    assert_null(n.rank_of_task);
    el_state_free(&b);
}

static void spare_failure_only(void **state)
{
    (void)state;
    int rot[3] = { 0, 1, -1 };
    int node[3] = { 0, 1, 2 }, leaf[3] = { 0, 0, 0 };
    struct topo_fix f = { node, leaf };
    struct el_state b, n;
    base(&b, 3, 1, 1, 2, rot);
    uint8_t gone[3] = { 0, 0, 1 }, how[3] = { 0, 0, WHALE_DETECT_LINK };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, &f, &n, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_REPLACED);
    assert_int_equal(ev.nfailed, 0);
    assert_int_equal(ev.nfailed_spares, 1);
    assert_int_equal(ev.how, WHALE_DETECT_LINK);
    assert_int_equal(n.member[2], 0);
    assert_int_equal(n.rank_of_task[0], 0);
    assert_int_equal(n.rank_of_task[1], 1);
    el_state_free(&b);
    el_state_free(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nearest_spare),
        cmocka_unit_test(node_lands_together),
        cmocka_unit_test(shrink_reuses_dropped_replica),
        cmocka_unit_test(shrink_renumbers_megatron),
        cmocka_unit_test(dp1_without_spare_is_fatal),
        cmocka_unit_test(spare_failure_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
