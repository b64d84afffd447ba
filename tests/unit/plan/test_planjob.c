/* A plan against the job that uses it (whale/planjob.h): model, global
 * batch and degrees must agree, and a refusal names both values. */
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
#include "whale/planjob.h"

static char last_err[2048];

static void sink(int level, const char *line, void *u)
{
    (void)u;
    if (level == WHALE_LOG_ERROR)
        snprintf(last_err, sizeof last_err, "%s", line);
}

static int setup(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    last_err[0] = '\0';
    return 0;
}

/* what --whale-plan=auto --whale-model=gpt-tiny --whale-batch=8 hands the tasks */
static void tiny_plan(struct whale_plan *p)
{
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"tp\":1,\"pp\":1,\"dp\":2,"
                                          "\"micro_batch\":4,\"num_micro_batches\":1,"
                                          "\"global_batch\":8,\"model\":\"gpt-tiny\"}",
                                          "WHALE_PLAN", p), 0);
}

static void expect_refused(const struct whale_plan *p, const struct whale_plan_job *j,
                           const char *a, const char *b)
{
    last_err[0] = '\0';
    assert_int_equal(whale_plan_check_job(p, "WHALE_PLAN", j), WHALE_EINVAL);
    if (!strstr(last_err, a) || !strstr(last_err, b) || !strstr(last_err, "WHALE_PLAN"))
        fail_msg("message '%s' lacks '%s' or '%s'", last_err, a, b);
}

static void test_model(void **st)
{
    (void)st;
    struct whale_plan p;
    tiny_plan(&p);
    struct whale_plan_job j = { .model = "gpt-small", .model_from = "--model" };
    expect_refused(&p, &j, "model gpt-tiny", "--model gives gpt-small");
    j.model = "gpt-tiny";
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    j.model = NULL; /* not given: the plan's model is trained */
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    /* the preset's own file describes the same model */
    char path[1024];
    snprintf(path, sizeof path, "%s/gpt-tiny.conf", getenv("WHALE_MODEL_PATH"));
    j.model = path;
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    j.model = "no-such-model";
    expect_refused(&p, &j, "gpt-tiny", "no-such-model");
    whale_plan_free(&p);
}

static void test_batch(void **st)
{
    (void)st;
    struct whale_plan p;
    tiny_plan(&p);
    struct whale_plan_job j = { .batch = 16, .batch_from = "--batch" };
    expect_refused(&p, &j, "global batch 8", "--batch gives 16");
    j.batch = 8;
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    whale_plan_free(&p);
    /* a plan that leaves the batch to the tool (the plugin without batch options) */
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"dp\":2}", "WHALE_PLAN", &p), 0);
    j.batch = 16;
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    whale_plan_free(&p);
}

static void test_degrees(void **st)
{
    (void)st;
    struct whale_plan p;
    tiny_plan(&p);
    struct whale_plan_job j = { .tp = 1, .pp = 1, .dp = 4 };
    expect_refused(&p, &j, "TP=1 PP=1 DP=2", "runs TP=1 PP=1 DP=4");
    j.dp = 2;
    assert_int_equal(whale_plan_check_job(&p, "WHALE_PLAN", &j), 0);
    whale_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_model, setup),
        cmocka_unit_test_setup(test_batch, setup),
        cmocka_unit_test_setup(test_degrees, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
