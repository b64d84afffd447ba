#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/topo.h"

static void quiet(int level, const char *line, void *u)
{
    (void)level;
    (void)line;
    (void)u;
}

static void test_lookup_many(void **st)
{
    (void)st;
    struct whale_topo *t = whale_topo_new();
    int leaf = whale_topo_add_switch(t, "leaf", -1);
    char name[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "node%05d", i);
        assert_int_equal(whale_topo_add_node(t, name, 8, leaf, -1), i);
    }
    for (int i = 0; i < 20000; i += 7) {
        snprintf(name, sizeof name, "node%05d", i);
        assert_int_equal(whale_topo_find_node(t, name), i);
    }
    assert_int_equal(whale_topo_find_node(t, "nope"), -1);
    /* re-adding updates attributes, keeps the index */
    assert_int_equal(whale_topo_add_node(t, "node00005", 4, -1, -1), 5);
    assert_int_equal(t->nodes[5].gpus, 4);
    assert_int_equal(t->nodes[5].leaf, leaf);
    whale_topo_free(t);
}

static void test_link_classes(void **st)
{
    (void)st;
    struct whale_topo *t = whale_topo_new();
    int core = whale_topo_add_switch(t, "core", -1);
    int sp0 = whale_topo_add_switch(t, "sp0", core), sp1 = whale_topo_add_switch(t, "sp1", core);
    int l0 = whale_topo_add_switch(t, "l0", sp0), l1 = whale_topo_add_switch(t, "l1", sp0);
    int l2 = whale_topo_add_switch(t, "l2", sp1);
    int other = whale_topo_add_switch(t, "island", -1);
    int d = whale_topo_add_domain(t, "rack");
    int a = whale_topo_add_node(t, "a", 4, l0, d), b = whale_topo_add_node(t, "b", 4, l1, d);
    int c = whale_topo_add_node(t, "c", 4, l0, -1), e = whale_topo_add_node(t, "e", 4, l2, -1);
    int f = whale_topo_add_node(t, "f", 4, other, -1), g = whale_topo_add_node(t, "g", 4, -1, -1);
    int h = whale_topo_add_node(t, "h", 4, l1, -1);
    assert_int_equal(whale_topo_finalize(t), 0);
    assert_int_equal(t->switches[core].level, 2);
    assert_int_equal(whale_topo_link_class(t, a, b), WHALE_LINK_NVL);
    assert_int_equal(whale_topo_link_class(t, a, c), WHALE_LINK_LEAF);
    assert_int_equal(whale_topo_link_class(t, c, h), WHALE_LINK_SPINE);
    assert_int_equal(whale_topo_link_class(t, c, e), WHALE_LINK_CORE);
    assert_int_equal(whale_topo_link_class(t, c, f), WHALE_LINK_CORE);
    assert_int_equal(whale_topo_link_class(t, c, g), WHALE_LINK_CORE);
    assert_int_equal(whale_topo_domain_gpus(t, a), 8);
    assert_int_equal(whale_topo_domain_gpus(t, c), 4);
    assert_string_equal(whale_link_class_name(WHALE_LINK_SPINE), "spine");
    whale_topo_free(t);
}

static void test_cycle(void **st)
{
    (void)st;
    whale_log_set_sink(quiet, NULL);
    struct whale_topo *t = whale_topo_new();
    int x = whale_topo_add_switch(t, "x", -1), y = whale_topo_add_switch(t, "y", x);
    whale_topo_set_switch_parent(t, x, y);
    assert_int_equal(whale_topo_finalize(t), WHALE_ECONF);
    whale_topo_free(t);
    whale_log_set_sink(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_many),
        cmocka_unit_test(test_link_classes),
        cmocka_unit_test(test_cycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
