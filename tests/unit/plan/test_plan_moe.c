/* The planner on mixture-of-experts models: expert parallelism in the
 * search and the cost model (expert memory sharded over EP and its
 * optimizer states over the expert-data-parallel group, the tokens'
 * all-to-all over the EP group's links, the capacity factor's imbalance),
 * and rates counted on active parameters. */
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
#include "plan_fixture.h"

/* The shared layout with full recompute, over EP groups of EP ranks. */
static struct whale_plan_config cfg_ep(int tp, int pp, int dp, int ep, int mb, int zero)
{
    struct whale_plan_config c = cfg_of(tp, pp, dp, mb, zero, WHALE_RECOMPUTE_FULL);
    c.ep = ep;
    return c;
}

static struct whale_plan_prediction eval(const struct whale_model_desc *m, long batch, int nodes,
                                         struct whale_plan_config cfg)
{
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, nodes, 8, "H100-80GB"), 0);
    struct whale_plan_prediction p;
    assert_int_equal(whale_plan_eval(m, batch, &c, &cfg, &p), 0);
    return p;
}

/* Mixtral 8x7B on 2 x 8 H100, dp 16: EP 8 holds one expert per rank
 * instead of eight, and shards the experts' optimizer states over the 2
 * ranks that hold the same experts (ZeRO-1 over EDP); the all-to-all is
 * zero without EP, on NVLink with the group inside a node and slower once
 * the group spans two nodes (tp 2 spaces its ranks 2 apart). */
static void test_expert_memory_and_alltoall(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("mixtral-8x7b", &m), 0);
    struct whale_plan_prediction p1 = eval(&m, 64, 2, cfg_ep(1, 1, 16, 1, 1, 1));
    struct whale_plan_prediction p8 = eval(&m, 64, 2, cfg_ep(1, 1, 16, 8, 1, 1));
    /* tp 2: the 8 EP ranks are 2 apart and span both nodes */
    struct whale_plan_prediction p16 = eval(&m, 64, 2, cfg_ep(2, 1, 8, 8, 1, 1));
    double tot = (double)whale_model_desc_params(&m);
    double routed = 32.0 * 8 * 3 * 4096.0 * 14336;   /* 32 blocks x 8 experts x 3 h f */
    printf("weights GiB: ep1 %.1f ep8 %.1f; optimizer GiB: ep1 %.2f ep8 %.2f; a2a s: ep8 in a node %.4f, over two nodes %.4f\n",
           p1.mem_weights / 1073741824.0, p8.mem_weights / 1073741824.0, p1.mem_optim / 1073741824.0,
           p8.mem_optim / 1073741824.0, p8.t_ep, p16.t_ep);
    /* weights: all of them at EP 1, the replicated part + 1/8 of the experts at EP 8 */
    assert_true(fabs(p1.mem_weights / (2 * tot) - 1) < 1e-6);
    assert_true(fabs(p8.mem_weights / (2 * (tot - routed + routed / 8)) - 1) < 1e-6);
    /* optimizer (12 B/param, ZeRO-1): replicated part over DP 16, experts over EDP 2 */
    assert_true(fabs(p8.mem_optim / (12 * ((tot - routed) / 16 + routed / 8 / 2)) - 1) < 1e-6);
    assert_true(p1.t_ep == 0);
    assert_true(p8.t_ep > 0);
    assert_true(p16.t_ep > 2 * p8.t_ep);   /* across the network, not NVLink */
    /* EP must divide DP and the experts; dense models have none */
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 2, 8, "H100-80GB"), 0);
    struct whale_plan_config bad = cfg_ep(1, 1, 16, 3, 1, 1);
    assert_int_equal(whale_plan_check(&m, 64, &c, &bad, NULL, 0), WHALE_EINVAL);
    struct whale_model_desc d;
    assert_int_equal(whale_model_desc_load("llama3-8b", &d), 0);
    bad = cfg_ep(1, 1, 16, 2, 1, 1);
    assert_int_equal(whale_plan_check(&d, 64, &c, &bad, NULL, 0), WHALE_EINVAL);
}

/* The engine's receive window for the MoE exchanges (engine/moe_ep.c,
 * shared memory, fp32 rows: EP x micro-batch x seq tokens, each at most
 * min(top-k, experts per rank) times) is per-rank memory where the EP group
 * lies in one node: in the buffers on CPU ranks, absent when the group
 * spans nodes or without EP, and not device memory beside a GPU. */
static void test_ep_window_memory(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("mixtral-8x7b", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 2, 4, "cpu"), 0);
    struct whale_plan_prediction p1, p4, p8;
    struct whale_plan_config k1 = cfg_ep(1, 1, 8, 1, 2, 1), k4 = cfg_ep(1, 1, 8, 4, 2, 1),
                             k8 = cfg_ep(1, 1, 8, 8, 2, 1);
    assert_int_equal(whale_plan_eval(&m, 64, &c, &k1, &p1), 0);
    assert_int_equal(whale_plan_eval(&m, 64, &c, &k4, &p4), 0);
    assert_int_equal(whale_plan_eval(&m, 64, &c, &k8, &p8), 0);
    /* EP 4 on a 4-rank node: 8 experts, 2 per rank, top-2 */
    double win = 4.0 * 4 * 2 * m.seq * 2 * m.hidden;
    printf("buffers MiB: ep1 %.1f, ep4 in a node %.1f (window %.1f), ep8 over two nodes %.1f\n",
           p1.mem_buffers / 1048576.0, p4.mem_buffers / 1048576.0, win / 1048576.0,
           p8.mem_buffers / 1048576.0);
    assert_true(fabs(p4.mem_buffers - p1.mem_buffers - win) < 1);
    assert_true(fabs(p8.mem_buffers - p1.mem_buffers) < 1);
    /* beside a GPU the window is host memory: the device's buffers do not grow */
    struct whale_plan_prediction g1 = eval(&m, 64, 2, cfg_ep(1, 1, 16, 1, 1, 1));
    struct whale_plan_prediction g8 = eval(&m, 64, 2, cfg_ep(1, 1, 16, 8, 1, 1));
    assert_true(fabs(g8.mem_buffers - g1.mem_buffers) < 1);
}

/* Rates on active parameters: Mixtral's model FLOPs per token are those
 * of its 12.9B active parameters (6 N + attention), not of its 46.7B. */
static void test_active_rates(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("mixtral-8x7b", &m), 0);
    struct whale_plan_prediction p = eval(&m, 64, 2, cfg_ep(1, 1, 16, 8, 1, 1));
    double tokens = 64.0 * m.seq;
    double active = (double)whale_model_desc_active_params(&m);
    double per_token = p.model_flops_step / tokens;
    printf("model FLOPs per token %.3g, 6 x active %.3g (active %.3g of %.3g)\n", per_token, 6 * active,
           active, (double)whale_model_desc_params(&m));
    assert_true(per_token > 6 * active * 0.95 && per_token < 6 * active * 1.25);
}

/* The capacity factor: the busiest expert computes CapacityFactor x the
 * mean share of the tokens, so a capacity-bound model runs slower than the
 * same model dropless, at the same active FLOPs. */
static void test_capacity_imbalance(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("mixtral-8x7b", &m), 0);
    struct whale_plan_prediction a = eval(&m, 64, 2, cfg_ep(1, 1, 16, 8, 1, 1));
    m.moe.capacity = 1.5;
    struct whale_plan_prediction b = eval(&m, 64, 2, cfg_ep(1, 1, 16, 8, 1, 1));
    printf("dropless %.4g s, capacity 1.5 %.4g s\n", a.t_step, b.t_step);
    assert_true(b.t_compute > 1.2 * a.t_compute);
    assert_true(fabs(a.model_flops_step / b.model_flops_step - 1) < 1e-9);
}

/* EP is a search dimension for MoE models only: the search puts
 * Mixtral's experts over 8 ranks of an NVLink node (its memory does not
 * fit otherwise at this batch), a dense model keeps ep 1. */
static void test_search(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "mixtral-8x7b", &c, 8, 8, "H100-80GB");
    struct whale_plan_request rq;
    whale_plan_request_init(&rq);
    rq.model = &m;
    rq.global_batch = 128;
    rq.cluster = &c;
    rq.pp = 1;
    rq.tp = 1;
    struct whale_plan_result res;
    assert_int_equal(whale_plan_search(&rq, &res), 0);
    char cfg[160];
    whale_plan_format_config(&res.best.cfg, cfg, sizeof cfg);
    printf("mixtral-8x7b on 64 H100, batch 128: %s, %.0f model TFLOP/s per GPU\n", cfg,
           res.best.pred.model_tflops_per_gpu);
    assert_true(res.best.cfg.ep > 1 && res.best.cfg.ep <= 8);
    rq.ep = 1;   /* a constraint holds */
    int rc = whale_plan_search(&rq, &res);
    assert_true(rc == WHALE_ENOFIT || (rc == 0 && res.best.cfg.ep <= 1));
    struct whale_model_desc d;
    assert_int_equal(whale_model_desc_load("llama3-8b", &d), 0);
    rq.model = &d;
    rq.ep = 0;
    assert_int_equal(whale_plan_search(&rq, &res), 0);
    assert_true(res.best.cfg.ep <= 1);
    rq.ep = 2;   /* a dense model has nothing to shard */
    assert_int_equal(whale_plan_search(&rq, &res), WHALE_EINVAL);
}

/* The plan a step runs (whale_plan_auto, the plugin's --whale-plan=auto)
 * keeps EP 1 unless the step asks for expert parallelism: whale-train
 * refuses EP > 1 until the engine runs it. */
static void test_auto_keeps_ep(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "deepseek-moe-16b", &c, 2, 8, "H100-80GB");
    struct whale_plan p;
    char explain[4096];
    assert_int_equal(whale_plan_auto(&m, 64, &c, NULL, NULL, &p, explain, sizeof explain), 0);
    assert_int_equal(whale_grid_ep(&p.grid), 1);
    whale_plan_free(&p);
    struct whale_plan_request lim;
    whale_plan_request_init(&lim);
    lim.ep = 2;
    assert_int_equal(whale_plan_auto(&m, 64, &c, NULL, &lim, &p, explain, sizeof explain), 0);
    assert_int_equal(whale_grid_ep(&p.grid), 2);
    whale_plan_free(&p);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expert_memory_and_alltoall),
        cmocka_unit_test(test_ep_window_memory),
        cmocka_unit_test(test_active_rates),
        cmocka_unit_test(test_capacity_imbalance),
        cmocka_unit_test(test_search),
        cmocka_unit_test(test_auto_keeps_ep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
