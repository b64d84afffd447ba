/* Planner v3: the GPU model's shape physics (SM tile fill), the free
 * constants applying to GPU types only (the CPU model is untouched),
 * in-network reduction, TP communication overlap and the prediction
 * ranges. The accuracy on published runs is test_plan_validation's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "plan/plan_internal.h"
#include "plan_fixture.h"

/* FLOP rate of one layer's forward on one H100 */
static double layer_rate(const char *model, int tp, int mb)
{
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load(model, &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 8, "H100-80GB"), 0);
    struct plan_ctx x;
    plan_ctx_init(&x, &m, 64, &c);
    struct plan_layer_cost lc;
    plan_layer_cost(&x, &c.group[0].gpu, tp, false, mb, &lc);
    return lc.flops_fwd / lc.fwd;
}

/* Small and skinny GEMMs fill the SMs worse: GPT-2 124M at micro-batch 1
 * runs its layers well below Llama 3 70B's, and a thin TP shard below the
 * full width. */
static void test_gemm_shapes(void **state)
{
    (void)state;
    double small = layer_rate("gpt2-124m", 1, 1), big = layer_rate("llama3-70b", 1, 1);
    double shard = layer_rate("llama3-70b", 8, 1);
    printf("H100 layer forward: gpt2-124m %.0f, llama3-70b %.0f (tp 8: %.0f) TFLOP/s\n", small / 1e12,
           big / 1e12, shard / 1e12);
    assert_true(small < 0.9 * big);
    assert_true(shard < big);
    assert_true(big < 989e12 * 0.80);   /* never above the best-shape rate */
}

/* The fitted constants are the GPU model's: a CPU cluster predicts the
 * same with any gemm_scale / lat_scale / tp_overlap / innet_reduce. */
static void test_cpu_untouched(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt-small", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 2, 2, "cpu"), 0);
    struct whale_plan_config cfg = cfg_of(2, 1, 2, 2, 0, WHALE_RECOMPUTE_FULL);
    struct whale_plan_prediction a, b;
    assert_int_equal(whale_plan_eval(&m, 16, &c, &cfg, &a), 0);
    c.eff.gemm_scale = 0.5;
    c.eff.lat_scale = 3;
    c.eff.tp_overlap = 1;
    c.eff.innet_reduce = 1;
    c.eff.dp_bucket = 1e3;
    assert_int_equal(whale_plan_eval(&m, 16, &c, &cfg, &b), 0);
    assert_true(a.t_step == b.t_step);
    assert_true(a.t_tp == b.t_tp && a.t_dp == b.t_dp);
    /* and the CPU's collective efficiency is its own, not the GPU fit's */
    struct whale_cluster g;
    assert_int_equal(whale_cluster_init(&g, 1, 8, "A100-80GB"), 0);
    assert_true(c.eff.coll_eff == 0.80);
    assert_true(g.eff.coll_eff == PLAN_FIT_COLL_EFF);
}

/* NVLS / SHARP: each GPU sends and receives its bytes once instead of
 * 2 (p-1)/p times; TP all-reduces and the DP all-reduce get faster. TP
 * comm overlap hides the TP collectives behind the GEMMs. */
static void test_innet_and_tp_overlap(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt3-175b", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 64, 8, "H100-80GB"), 0);
    struct whale_plan_config cfg = cfg_of(8, 8, 8, 1, 0, WHALE_RECOMPUTE_FULL);
    struct whale_plan_prediction a, b, o;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &cfg, &a), 0);
    c.eff.innet_reduce = 1;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &cfg, &b), 0);
    printf("TP comm %.4g -> %.4g s with in-network reduction\n", a.t_tp, b.t_tp);
    assert_true(b.t_tp < 0.8 * a.t_tp);
    assert_true(b.t_step < a.t_step);
    c.eff.innet_reduce = 0;
    c.eff.tp_overlap = 0.9;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &cfg, &o), 0);
    assert_true(o.t_tp < 0.5 * a.t_tp);
    assert_true(o.t_step < a.t_step);
}

/* Gradient buckets pay the collective's latency each: more, smaller
 * buckets cost more at large DP. */
static void test_dp_buckets(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt-1.7b", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 128, 8, "A100-80GB"), 0);
    c.eff.dp_overlap = 0;   /* expose all of it */
    struct whale_plan_config cfg = cfg_of(1, 1, 1024, 1, 0, WHALE_RECOMPUTE_FULL);
    struct whale_plan_prediction a, b;
    assert_int_equal(whale_plan_eval(&m, 1024, &c, &cfg, &a), 0);
    c.eff.dp_bucket = 1e6;
    assert_int_equal(whale_plan_eval(&m, 1024, &c, &cfg, &b), 0);
    printf("DP all-reduce at dp 1024: 40M buckets %.4g s, 1M buckets %.4g s\n", a.t_dp, b.t_dp);
    assert_true(b.t_dp > a.t_dp);
}

/* Gradients reduced in fp32 (Megatron-LM's default for bf16 training) move
 * twice the bytes of bf16 ones over DP with ZeRO 0-2; ZeRO-3's per-layer
 * reduce-scatters keep the computed gradients' precision. */
static void test_grad_reduce_bytes(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt-1.7b", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 16, 8, "H100-80GB"), 0);
    c.eff.dp_overlap = 0;   /* expose all of it */
    struct whale_plan_config z1 = cfg_of(1, 1, 128, 1, 1, WHALE_RECOMPUTE_FULL), z3 = cfg_of(1, 1, 128, 1, 3, WHALE_RECOMPUTE_FULL);
    struct whale_plan_prediction a, b, a3, b3;
    assert_int_equal(whale_plan_eval(&m, 128, &c, &z1, &a), 0);
    assert_int_equal(whale_plan_eval(&m, 128, &c, &z3, &a3), 0);
    c.eff.grad_reduce_bytes = 4;
    assert_int_equal(whale_plan_eval(&m, 128, &c, &z1, &b), 0);
    assert_int_equal(whale_plan_eval(&m, 128, &c, &z3, &b3), 0);
    printf("ZeRO-1 DP at dp 128: bf16 gradients %.4g s, fp32 %.4g s\n", a.t_dp, b.t_dp);
    assert_true(b.t_dp > a.t_dp && b.t_step > a.t_step);
    assert_true(fabs(b3.t_dp - a3.t_dp) < 1e-12);
    c.eff.grad_reduce_bytes = 9;   /* out of range */
    assert_int_not_equal(whale_plan_eval(&m, 128, &c, &z1, &b), 0);
}

/* Ranges: GPU kinds have one, CPU clusters none; the kind names the
 * generation and the parallelism family. */
static void test_ranges(void **state)
{
    (void)state;
    struct whale_cluster c;
    char kind[32];
    double lo, hi;
    assert_int_equal(whale_cluster_init(&c, 4, 8, "A100-80GB"), 0);
    struct whale_plan_config cfg = cfg_of(8, 4, 1, 1, 0, WHALE_RECOMPUTE_FULL);
    assert_int_equal(whale_plan_kind(&c, &cfg, kind, sizeof kind), 0);
    assert_string_equal(kind, "ampere/3d");
    assert_int_equal(whale_plan_range(&c, &cfg, &lo, &hi), 0);
    assert_true(lo < 0 && hi > 0 && hi - lo < 0.6);
    cfg = cfg_of(1, 1, 32, 1, 3, WHALE_RECOMPUTE_FULL);
    assert_int_equal(whale_plan_kind(&c, &cfg, kind, sizeof kind), 0);
    assert_string_equal(kind, "ampere/sharded");
    assert_int_equal(whale_cluster_init(&c, 4, 8, "B200"), 0);
    assert_int_equal(whale_plan_kind(&c, &cfg, kind, sizeof kind), 0);
    assert_string_equal(kind, "blackwell/sharded");
    assert_int_equal(whale_plan_range(&c, &cfg, &lo, &hi), 0);   /* no rows: all rows' spread */
    assert_true(lo < hi);
    assert_int_equal(whale_cluster_init(&c, 2, 2, "cpu"), 0);
    assert_int_equal(whale_plan_range(&c, &cfg, &lo, &hi), WHALE_ENOENT);
    assert_int_equal(whale_cluster_init(&c, 1, 8, "H100-80GB"), 0);
    assert_int_equal(whale_cluster_add_group(&c, 1, 8, "A100-80GB"), 0);
    assert_int_equal(whale_plan_kind(&c, &cfg, kind, sizeof kind), WHALE_ENOENT);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_cpu_untouched),
        cmocka_unit_test(test_innet_and_tp_overlap),
        cmocka_unit_test(test_dp_buckets),
        cmocka_unit_test(test_grad_reduce_bytes),
        cmocka_unit_test(test_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
