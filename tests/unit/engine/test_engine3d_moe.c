/* The layout equivalence of test_engine3d.c with mixture-of-experts blocks:
 * every layout that needs no expert parallelism (TP, PP, DP, ZeRO 1-3,
 * recompute) equals the single-rank run over 20 steps within 1e-5 relative
 * (T3D_TOL), for two MoE models: GPT blocks with top-2 routing, capacity
 * factor 1.0 (tokens dropped), a shared expert, MoE in blocks 0, 2, 4; and
 * Llama blocks with sigmoid gates renormalised over top-3 of 6 experts,
 * dropless, MoE in every block.
 *
 * Routing, capacity and the auxiliary losses are per micro-batch, so each
 * layout is compared with the single-rank run of the same micro-batch size
 * (the same sequences fall in the same micro-batches under DP: rank r's
 * micro-batches are the single rank's in order). The reported loss holds
 * every stage's auxiliary losses: PP layouts would differ from one rank
 * without them. Ties in routing: the lower expert index wins (moe.c); with
 * these random weights no two logits are equal, and TP / DP only move the
 * last bits of the router's input, which flips no top-k choice here. */
#include <string.h>

#include "whale/modeldesc.h"

static int moe_variant; /* 0: GPT capacity mode, 1: Llama dropless sigmoid */

static void t3d_moe(struct whale_model_desc *m)
{
    struct whale_moe_desc *d = &m->moe;
    memset(d, 0, sizeof *d);
    if (moe_variant == 0) {
        *d = (struct whale_moe_desc){ .experts = 4, .topk = 2, .ffn = 32, .shared = 1,
                                      .every = 2, .first = 0, .gate = WHALE_GATE_SOFTMAX,
                                      .capacity = 1.0, .aux = 0.05, .zloss = 0.01 };
        return;
    }
    m->kv_heads = 2;
    m->mlp = WHALE_MLP_SWIGLU;
    m->norm = WHALE_NORM_RMSNORM;
    m->position = WHALE_POS_ROTARY;
    m->rope_theta = 10000.0f;
    m->no_bias = true;
    m->tied_embeddings = false;
    m->attention = WHALE_ATTN_FLASH;
    *d = (struct whale_moe_desc){ .experts = 6, .topk = 3, .ffn = 24, .shared = 0, .every = 1,
                                  .first = 0, .gate = WHALE_GATE_SIGMOID, .renorm = true,
                                  .capacity = 0, .aux = 0.02, .zloss = 0.001 };
}
#define T3D_MODEL_SETUP t3d_moe
#define T3D_STEPS 20
#define T3D_CUSTOM_MAIN
#ifndef T3D_MOE_PRECISION
#define T3D_SELECTIVE_SAVES 1
#else
#define T3D_PRECISION T3D_MOE_PRECISION
#endif
#include "test_engine3d.c"

/* test_engine3d.c's own set runs in engine_3d / engine_3d_llama */
__attribute__((unused)) static void (*const t3d_dense_tests[])(void **) = {
    test_env_layout, test_uneven_vocabulary, test_refusals, test_seqpar_collectives,
    test_seqpar, test_recompute, test_3d_zero, test_pipeline, test_tensor_parallel,
};
__attribute__((unused)) static int (*const t3d_dense_setup)(void **) = setup;

static int ref_micro;

/* the single-rank reference of micro-batch size `micro` */
static void moe_ref(int micro)
{
    if (ref_micro == micro)
        return;
    struct layout one = LAY("single", 1, 1, 1, 0, 2, 1F1B, 1, NONE);
    one.micro = micro;
    take_reference(&one);
    ref_micro = micro;
    printf("  reference (micro-batch %d): loss %.5f -> %.5f\n", micro, ref_loss[0],
           ref_loss[STEPS - 1]);
    assert_true(ref_loss[STEPS - 1] < ref_loss[0] - 0.1);
}

static void moe_set(void)
{
    static const struct layout set[] = {
        LAY("dp2", 1, 1, 2, 0, 2, 1F1B, 1, NONE),
        LAY("dp2 zero1", 1, 1, 2, 1, 2, 1F1B, 1, NONE),
        LAY("dp2 zero2", 1, 1, 2, 2, 2, 1F1B, 1, NONE),
        LAY("dp2 zero3", 1, 1, 2, 3, 2, 1F1B, 1, NONE),
        LAY("tp2", 2, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp2 dp2 zero3", 2, 1, 2, 3, 2, 1F1B, 1, NONE),
        LAY("pp2 1f1b", 1, 2, 1, 0, 2, 1F1B, 1, NONE),
        LAY("pp2 dp2 zero1", 1, 2, 2, 1, 2, 1F1B, 1, NONE),
        LAY("full recompute", 1, 1, 1, 0, 2, 1F1B, 1, FULL),
        LAY("selective recompute", 1, 1, 1, 0, 2, 1F1B, 1, SELECTIVE),
        LAY("tp2 pp2 dp2 zero1", 2, 2, 2, 1, 1, 1F1B, 1, NONE),
        LAY("tp2 pp2 zero0 full", 2, 2, 1, 0, 1, 1F1B, 1, FULL),
        LAY("pp2 interleaved v2", 1, 2, 1, 0, 1, INTERLEAVED, 2, NONE),
        LAY("tp2 pp2 dp2 zero3", 2, 2, 2, 3, 1, 1F1B, 1, NONE),
    };
    struct world3 *w = malloc(sizeof *w);
    for (size_t i = 0; i < sizeof set / sizeof *set; i++) {
        moe_ref(set[i].micro);
        run_layout(&set[i], w);
        check_equal(&set[i], w);
    }
    free(w);
}

static void test_moe_gpt_capacity(void **state)
{
    (void)state;
    moe_variant = 0;
    ref_micro = 0;
    moe_set();
}

static void test_moe_llama_dropless(void **state)
{
    (void)state;
    moe_variant = 1;
    ref_micro = 0;
    moe_set();
}

/* ExpertFFN that TP does not divide, MoE with sequence parallelism: refused */
static void test_moe_refusals(void **state)
{
    (void)state;
    moe_variant = 0;
    test_log_capture(true);
    struct layout bad = LAY("tp3", 3, 1, 1, 0, 2, 1F1B, 1, NONE);
    struct whale_engine_config c = cfg_for(&bad);
    c.model.heads = 3;
    c.model.hidden = 30;
    c.model.ffn = 30;
    struct eng_groups g;
    memset(&g, 0, sizeof g);
    g.tp.size = 3;
    whale_engine *e = NULL;
    assert_int_not_equal(eng_moe_check(&c, 3), 0);
    assert_non_null(strstr(test_log_last(), "ExpertFFN=32"));
    c = cfg_for(&bad);
    c.seqpar = true;
    assert_int_not_equal(eng_moe_check(&c, 2), 0);
    assert_non_null(strstr(test_log_last(), "sequence parallelism"));
    (void)e;
    test_log_capture(false);
}

/* FLOPs count the active experts (what MFU and the planner's rates read):
 * a MoE block's forward is a dense block's with FFN = (TopK + shared) x
 * ExpertFFN plus the router's 2 N C E; its parameters are every expert's,
 * as the description counts them. */
static void test_moe_flops(void **state)
{
    (void)state;
    moe_variant = 0;
    struct layout one = LAY("single", 1, 1, 1, 0, 2, 1F1B, 1, NONE);
    struct whale_engine_config c = cfg_for(&one), cd = c;
    const struct whale_moe_desc *md = &c.model.moe;
    cd.model.moe.experts = 0;
    cd.model.ffn = (md->topk + md->shared) * md->ffn;
    whale_engine *e = NULL, *ed = NULL;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    assert_int_equal(eng_create(&cd, NULL, NULL, &ed), 0);
    struct whale_layer_cost moe, dense, dense_blk;
    assert_int_equal(whale_engine_layer_cost(e, 1, &moe), 0);  /* block 0: MoE */
    assert_int_equal(whale_engine_layer_cost(ed, 1, &dense), 0);
    assert_int_equal(whale_engine_layer_cost(e, 2, &dense_blk), 0); /* block 1: dense */
    const double N = (double)c.micro_batch * c.seq, C = c.model.hidden;
    const double router = 2.0 * N * C * md->experts;
    printf("  MoE block fwd %.0f, dense of the active width %.0f, router %.0f FLOPs\n",
           moe.fwd_flops, dense.fwd_flops, router);
    assert_true(fabs(moe.fwd_flops - (dense.fwd_flops + router)) < 1e-6 * moe.fwd_flops);
    assert_true(fabs(moe.bwd_flops - (dense.bwd_flops + 2 * router)) < 1e-6 * moe.bwd_flops);
    assert_int_equal(moe.params, whale_model_desc_moe_block_params(&c.model, false));
    assert_int_equal(dense_blk.params, whale_model_desc_block_params(&c.model));
    whale_engine_destroy(e);
    whale_engine_destroy(ed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_flops),
        cmocka_unit_test(test_moe_refusals),
        cmocka_unit_test(test_moe_gpt_capacity),
        cmocka_unit_test(test_moe_llama_dropless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
