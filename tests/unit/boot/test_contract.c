/* The WHALE_* contract as read by a task: defaults without a launcher,
 * degrees and coordinates, rank maps, and clear refusals of inconsistent
 * environments (wrong product, PMIx disagreeing, a map that repeats a task). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "boot/boot.h"
#include "whale/error.h"

struct kv { const char *k, *v; };

static const char *get(const char *name, void *user)
{
    for (const struct kv *e = user; e->k; e++)
        if (!strcmp(e->k, name))
            return e->v;
    return NULL;
}

static void release(struct boot *b)
{
    free(b->rank_of_task);
    free(b->task_of_rank);
}

static void t_no_env_is_world_of_one(void **st)
{
    (void)st;
    struct kv env[] = { { NULL, NULL } };
    struct boot b = { 0 };
    assert_int_equal(boot_read_contract(&b, get, env, -1, -1), 0);
    assert_int_equal(b.world, 1);
    assert_int_equal(b.ntasks, 1);
    assert_int_equal(b.rank, 0);
    assert_int_equal(b.tp * b.pp * b.dp, 1);
    assert_false(b.spare);
    release(&b);
}

static void t_pmix_only_is_data_parallel(void **st)
{
    (void)st;
    struct kv env[] = { { NULL, NULL } };
    struct boot b = { 0 };
    assert_int_equal(boot_read_contract(&b, get, env, 4, 2), 0);
    assert_int_equal(b.world, 4);
    assert_int_equal(b.dp, 4);
    assert_int_equal(b.rank, 2);
    assert_int_equal(b.dp_rank, 2);
    release(&b);
}

static void t_full_contract(void **st)
{
    (void)st;
    /* 8 working ranks + 2 spares; TP=2 PP=2 DP=2; task 5 holds rank 7 */
    struct kv env[] = { { "WHALE_TP", "2" }, { "WHALE_PP", "2" }, { "WHALE_DP", "2" },
                        { "WHALE_WORLD", "8" }, { "WHALE_NTASKS", "10" },
                        { "WHALE_TASK_ID", "5" }, { "WHALE_RANK", "7" }, { "WHALE_SPARE", "0" },
                        { "WHALE_RANKMAP", "0-3,6,7,4,5" }, { NULL, NULL } };
    struct boot b = { 0 };
    assert_int_equal(boot_read_contract(&b, get, env, 10, 5), 0);
    assert_int_equal(b.rank, 7);
    assert_int_equal(b.tp_rank, 1);
    assert_int_equal(b.dp_rank, 1);
    assert_int_equal(b.pp_rank, 1);
    assert_int_equal(b.task_of_rank[4], 6);
    assert_int_equal(b.rank_of_task[8], -1);
    assert_int_equal(b.rank_of_task[9], -1);
    release(&b);
}

static void t_spare(void **st)
{
    (void)st;
    struct kv env[] = { { "WHALE_TP", "1" }, { "WHALE_PP", "1" }, { "WHALE_DP", "2" },
                        { "WHALE_WORLD", "2" }, { "WHALE_NTASKS", "3" }, { "WHALE_TASK_ID", "2" },
                        { "WHALE_RANK", "-1" }, { "WHALE_SPARE", "1" }, { "WHALE_RANKMAP", "0-1" },
                        { NULL, NULL } };
    struct boot b = { 0 };
    assert_int_equal(boot_read_contract(&b, get, env, 3, 2), 0);
    assert_true(b.spare);
    assert_int_equal(b.rank, -1);
    assert_int_equal(b.tp_rank, -1);
    release(&b);
}

static void expect_refused(struct kv *env, int psize, int prank)
{
    struct boot b = { 0 };
    assert_int_equal(boot_read_contract(&b, get, env, psize, prank), WHALE_EINVAL);
}

static void t_refusals(void **st)
{
    (void)st;
    struct kv bad_product[] = { { "WHALE_TP", "2" }, { "WHALE_DP", "3" }, { "WHALE_WORLD", "4" }, { NULL, NULL } };
    expect_refused(bad_product, 4, 0);
    struct kv pmix_size[] = { { "WHALE_NTASKS", "4" }, { NULL, NULL } };
    expect_refused(pmix_size, 3, 0);
    struct kv pmix_rank[] = { { "WHALE_TASK_ID", "1" }, { NULL, NULL } };
    expect_refused(pmix_rank, 2, 0);
    struct kv dup_map[] = { { "WHALE_WORLD", "2" }, { "WHALE_RANKMAP", "1,1" }, { NULL, NULL } };
    expect_refused(dup_map, 2, 0);
    struct kv short_map[] = { { "WHALE_WORLD", "2" }, { "WHALE_RANKMAP", "0" }, { NULL, NULL } };
    expect_refused(short_map, 2, 0);
    struct kv wrong_rank[] = { { "WHALE_RANK", "1" }, { NULL, NULL } };
    expect_refused(wrong_rank, 2, 0);
    struct kv not_int[] = { { "WHALE_TP", "two" }, { NULL, NULL } };
    expect_refused(not_int, 2, 0);
    struct kv zero[] = { { "WHALE_PP", "0" }, { NULL, NULL } };
    expect_refused(zero, 2, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_no_env_is_world_of_one),
        cmocka_unit_test(t_pmix_only_is_data_parallel),
        cmocka_unit_test(t_full_contract),
        cmocka_unit_test(t_spare),
        cmocka_unit_test(t_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
