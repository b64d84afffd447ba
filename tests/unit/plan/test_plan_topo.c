/* The planner's cluster built from the plugin's topology model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/plan.h"
#include "whale/topo.h"

static void test_from_topo(void **state)
{
    (void)state;
    struct whale_topo *t = whale_topo_new();
    assert_non_null(t);
    int a100 = whale_topo_add_gpu_type(t, "A100", 312, 80, 300);
    int h100 = whale_topo_add_gpu_type(t, "H100-80GB", 0, 0, 0);
    assert_true(a100 >= 0 && h100 >= 0);
    int spine = whale_topo_add_switch(t, "spine", -1);
    int l0 = whale_topo_add_switch(t, "leaf0", spine);
    int l1 = whale_topo_add_switch(t, "leaf1", spine);
    int idx[10];
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "n%d", i);
        idx[i] = whale_topo_add_node(t, name, i < 8 ? 8 : 0, i < 4 ? l0 : l1, -1);
        assert_true(idx[i] >= 0);
        t->nodes[idx[i]].gpu_type = i < 6 ? a100 : i < 8 ? h100 : -1;
    }
    assert_int_equal(whale_topo_finalize(t), 0);

    struct whale_cluster c;
    /* six A100 nodes, four under leaf0 */
    assert_int_equal(whale_cluster_from_topo(t, idx, 6, 0, &c), 0);
    assert_int_equal(c.ngroups, 1);
    assert_int_equal(whale_cluster_gpus(&c), 48);
    assert_string_equal(c.group[0].gpu.name, "A100-80GB");
    assert_true(c.group[0].gpu.peak_flops == 312e12);
    assert_int_equal(c.nvlink_domain, 8);
    assert_int_equal(c.nodes_per_leaf, 4);
    assert_false(whale_cluster_is_mixed(&c));

    /* A100 + H100 nodes: two groups, a mixed cluster the search balances */
    assert_int_equal(whale_cluster_from_topo(t, idx, 8, 0, &c), 0);
    assert_int_equal(c.ngroups, 2);
    assert_int_equal(c.group[1].nodes, 2);
    assert_string_equal(c.group[1].gpu.name, "H100-80GB");
    assert_true(whale_cluster_is_mixed(&c));

    /* CPU-only nodes (the minicluster): ranks on cores */
    assert_int_equal(whale_cluster_from_topo(t, idx + 8, 2, 2, &c), 0);
    assert_string_equal(c.group[0].gpu.name, "cpu");
    assert_int_equal(whale_cluster_gpus(&c), 4);

    /* plan on the A100 part */
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt-1.7b", &m), 0);
    assert_int_equal(whale_cluster_from_topo(t, idx, 4, 0, &c), 0);
    struct whale_plan p;
    char why[512];
    assert_int_equal(whale_plan_auto(&m, 512, &c, NULL, NULL, &p, why, sizeof why), 0);
    assert_int_equal(p.tp * p.pp * p.dp, 32);
    whale_plan_free(&p);

    assert_int_equal(whale_cluster_from_topo(t, idx, 0, 0, &c), WHALE_EINVAL);
    whale_topo_free(t);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_topo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
