/* spank/step.c's step description on a long node list: 25,000 nodes with
 * one task and one with 25,000, cyclic distribution. The task ids are
 * checked in full; the round robin used to walk every node once per round
 * (O(tasks x nodes)). No timing is asserted. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "step.h"
#include "whale/conf.h"

static void test_cyclic_long(void **st)
{
    (void)st;
    const int n1 = 25000, big = 25000;
    struct whale_conf *c = NULL;
    assert_int_equal(whale_conf_parse_string("TopologyFile=none\n", "whale.conf", &c), 0);
    struct whale_step_desc d = { .nodelist = "n[0-24999],big", .tasks_per_node = "1(x25000),25000",
                                 .distribution = "cyclic" };
    struct whale_step s;
    assert_int_equal(whale_step_describe(&s, &d, c), 0);
    assert_int_equal(s.nnodes, n1 + 1);
    /* round 1 gives every node one task in node order; the rest is big's */
    for (int i = 0; i < n1; i++)
        assert_int_equal(s.task_ids[i], i);
    for (int k = 0; k < big; k++)
        assert_int_equal(s.task_ids[n1 + k], n1 + k);
    assert_int_equal(s.topo->nnodes, n1 + 1);
    whale_step_free(&s);

    /* 3 nodes of 2, 1, 3 tasks: 0 1 2 | 3 . 4 | . . 5 */
    d.nodelist = "a,b,c";
    d.tasks_per_node = "2,1,3";
    assert_int_equal(whale_step_describe(&s, &d, c), 0);
    static const int want[] = { 0, 3, 1, 2, 4, 5 };
    for (int i = 0; i < 6; i++)
        assert_int_equal(s.task_ids[i], want[i]);
    whale_step_free(&s);
    whale_conf_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cyclic_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
