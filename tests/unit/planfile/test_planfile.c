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
#include "whale/planfile.h"

static char last[1024];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    snprintf(last, sizeof last, "%s", line);
}

static void test_roundtrip(void **st)
{
    (void)st;
    struct whale_plan p, q;
    whale_plan_init(&p);
    snprintf(p.model, sizeof p.model, "gpt-tiny");
    p.tp = 2; p.pp = 2; p.dp = 2;
    p.micro_batch = 2; p.num_micro_batches = 4; p.global_batch = 16;
    p.schedule = WHALE_SCHED_INTERLEAVED; p.interleave = 2;
    p.zero = 3; p.recompute = WHALE_RECOMPUTE_LAYERS;
    int rl[] = { 0, 3 };
    p.recompute_layers = rl; p.n_recompute_layers = 2;
    int sl[] = { 1, 1, 1, 1 };
    p.stage_layers = sl; p.n_stage_layers = 4;
    p.prediction_json = "{\"step_time_s\":1.5}";
    assert_int_equal(whale_plan_validate(&p, 8, 4, "t"), 0);
    char *js = whale_plan_to_json(&p, 0);
    assert_non_null(js);
    assert_int_equal(whale_plan_from_json(js, "rt", &q), 0);
    assert_int_equal(q.tp, 2);
    assert_int_equal(q.zero, 3);
    assert_int_equal(q.schedule, WHALE_SCHED_INTERLEAVED);
    assert_int_equal(q.n_recompute_layers, 2);
    assert_int_equal(q.recompute_layers[1], 3);
    assert_int_equal(q.n_stage_layers, 4);
    assert_string_equal(q.model, "gpt-tiny");
    assert_non_null(strstr(q.prediction_json, "1.5"));
    assert_int_equal(q.ckpt_keep, -1); /* unset: absent from the JSON */
    assert_null(strstr(js, "ckpt_keep"));
    char *js2 = whale_plan_to_json(&q, 0);
    assert_string_equal(js, js2);
    free(js);
    free(js2);
    whale_plan_free(&q);
    /* retention's site defaults travel */
    p.ckpt_keep = 7;
    p.ckpt_milestone_every = 500;
    js = whale_plan_to_json(&p, 0);
    assert_int_equal(whale_plan_from_json(js, "rt", &q), 0);
    assert_int_equal(q.ckpt_keep, 7);
    assert_int_equal(q.ckpt_milestone_every, 500);
    free(js);
    whale_plan_free(&q);
}

static void test_errors(void **st)
{
    (void)st;
    struct whale_plan p;
    whale_log_set_sink(sink, NULL);
    assert_int_equal(whale_plan_from_json("{\"tp\": 2, \"zeroo\": 1}", "f.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "unknown plan key \"zeroo\""));
    assert_int_equal(whale_plan_from_json("{\"zero\": 4}", "f.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "out of range [0, 3]"));
    assert_int_equal(whale_plan_from_json("{\"recompute\": \"most\"}", "f.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "none|selective|full|auto|layers"));
    assert_int_equal(whale_plan_from_json("{\"tp\": 2,}", "f.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "f.json:1:"));
    assert_int_equal(whale_plan_from_env_value("/nonexistent/plan.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "/nonexistent/plan.json"));

    whale_plan_init(&p);
    p.tp = 2; p.dp = 3;
    assert_int_equal(whale_plan_validate(&p, 8, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "2*1*3 = 6 does not match the 8"));
    p.dp = 4; p.interleave = 2;
    assert_int_equal(whale_plan_validate(&p, 8, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "interleaved"));
    p.interleave = 1; p.global_batch = 5;
    assert_int_equal(whale_plan_validate(&p, 8, 0, "v"), WHALE_EINVAL);
    p.global_batch = 4; p.pp = 1;
    assert_int_equal(whale_plan_validate(&p, 8, 0, "v"), 0);
    int sl[] = { 3 };
    p.stage_layers = sl; p.n_stage_layers = 1;
    assert_int_equal(whale_plan_validate(&p, 8, 4, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "sum to 3"));
    whale_log_set_sink(NULL, NULL);
}

/* Per-replica shares (dp_batch): one per replica, each >= 1, adding up to
 * global_batch, each a multiple of micro_batch (ZeRO 0/1) or splitting into
 * num_micro_batches micro-batches (ZeRO 2/3); every error names the field. */
static void test_dp_shares(void **st)
{
    (void)st;
    struct whale_plan p;
    whale_log_set_sink(sink, NULL);
    assert_int_equal(whale_plan_from_json("{\"dp\": 2, \"dp_batch\": [3, 0]}", "f.json", &p),
                     WHALE_EDATA);
    assert_non_null(strstr(last, "dp_batch"));
    assert_int_equal(whale_plan_from_json("{\"dp\": 2, \"micro_batch\": 2, \"global_batch\": 8, "
                                          "\"dp_batch\": [6, 2]}", "f.json", &p), 0);
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), 0);
    p.dp_batch[1] = 4;
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "global_batch=8 but micro_batch*num_micro_batches*dp (or sum of dp_batch) = 10"));
    p.dp_batch[0] = 5; p.dp_batch[1] = 3;
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "v: dp_batch[0] = 5 is not a multiple of micro_batch = 2"));
    p.zero = 3; p.num_micro_batches = 1;
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), 0); /* micro-batches of 5 and 3 */
    p.num_micro_batches = 2;
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "dp_batch[0] = 5 does not split into num_micro_batches = 2"));
    p.n_dp_batch = 1;
    assert_int_equal(whale_plan_validate(&p, 2, 0, "v"), WHALE_EINVAL);
    assert_non_null(strstr(last, "dp_batch has 1 entries, expected dp = 2"));
    p.n_dp_batch = 2;
    whale_plan_free(&p);
    whale_log_set_sink(NULL, NULL);
}

/* "ep": optional (1), range-checked, must divide dp, written only when > 1. */
static void test_ep(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    struct whale_plan p;
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"dp\":4}", "x", &p), 0);
    assert_int_equal(p.ep, 1);
    char *s = whale_plan_to_json(&p, 0);
    assert_null(strstr(s, "\"ep\"")); /* dense plans stay as they were */
    free(s);
    whale_plan_free(&p);
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"dp\":4,\"ep\":2}", "x", &p), 0);
    assert_int_equal(p.ep, 2);
    assert_int_equal(whale_plan_validate(&p, 4, 0, "x"), 0);
    s = whale_plan_to_json(&p, 0);
    assert_non_null(strstr(s, "\"ep\":2"));
    struct whale_plan q;
    assert_int_equal(whale_plan_from_json(s, "y", &q), 0);
    assert_int_equal(q.ep, 2);
    free(s);
    whale_plan_free(&q);
    p.ep = 3;
    assert_int_equal(whale_plan_validate(&p, 4, 0, "x"), WHALE_EINVAL);
    assert_non_null(strstr(last, "x: ep=3 must divide dp=4"));
    whale_plan_free(&p);
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"dp\":4,\"ep\":3}", "f.json", &p),
                     WHALE_EDATA);
    assert_non_null(strstr(last, "f.json: ep=3 must divide dp=4"));
    assert_int_equal(whale_plan_from_json("{\"version\":1,\"ep\":0}", "f.json", &p), WHALE_EDATA);
    assert_non_null(strstr(last, "plan key \"ep\" = 0 out of range"));
    whale_log_set_sink(NULL, NULL);
}

static void test_env_inline(void **st)
{
    (void)st;
    struct whale_plan p;
    assert_int_equal(whale_plan_from_env_value("  {\"dp\": 4, \"zero\": 2}", &p), 0);
    assert_int_equal(p.dp, 4);
    assert_int_equal(p.zero, 2);
    assert_int_equal(p.tp, 1);
    whale_plan_free(&p);
    assert_int_equal(whale_plan_from_env_value(NULL, &p), 0);
    assert_int_equal(p.dp, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_env_inline),
        cmocka_unit_test(test_ep),
        cmocka_unit_test(test_dp_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
