/* Planner v2: the extended model description, flash attention,
 * uneven interleaving, precision in the time model, ZeRO-3 latency, the
 * model / hardware FLOP labels and the four defects the issue lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "whale/planfile.h"
#include "plan/plan_internal.h"
#include "plan_fixture.h"

static void test_modeldesc_keys(void **state)
{
    (void)state;
    struct whale_model_desc m;
    /* a wave-1 file keeps its meaning: GPT-2 block */
    assert_int_equal(whale_model_desc_parse_string("Name=g Layers=2 Hidden=64 Heads=4 Seq=32 Vocab=100",
                                                   "g.conf", &m), 0);
    assert_int_equal(m.mlp, WHALE_MLP_GELU);
    assert_int_equal(m.norm, WHALE_NORM_LAYERNORM);
    assert_int_equal(m.position, WHALE_POS_LEARNED);
    assert_true(!m.no_bias && m.tied_embeddings);
    assert_int_equal(m.attention, WHALE_ATTN_PLAIN);
    assert_false(m.precision_set);
    assert_int_equal(m.kv_heads, 4);
    assert_int_equal(m.ffn, 256);
    char why[512];
    assert_int_equal(whale_model_desc_gpt2_check(&m, why, sizeof why), 0);
    /* a Llama-style block */
    assert_int_equal(whale_model_desc_parse_string(
        "Name=l Layers=2 Hidden=64 Heads=8 KVHeads=2 FFN=160 Seq=32 Vocab=100 MLP=swiglu "
        "Norm=rmsnorm Position=rotary Bias=no TiedEmbeddings=no Attention=flash Precision=bf16",
        "llama.conf", &m), 0);
    assert_int_equal(m.mlp, WHALE_MLP_SWIGLU);
    assert_int_equal(m.norm, WHALE_NORM_RMSNORM);
    assert_int_equal(m.position, WHALE_POS_ROTARY);
    assert_true(m.no_bias);
    assert_int_equal(m.attention, WHALE_ATTN_FLASH);
    assert_true(m.precision_set);
    assert_int_equal(m.precision, WHALE_PREC_BF16);
    /* a zeroed description (the engine tests build them) is a GPT-2 block */
    struct whale_model_desc z = { .name = "z", .layers = 1, .hidden = 64, .heads = 4, .kv_heads = 4,
                                  .ffn = 256, .seq = 8, .vocab = 10 };
    assert_int_equal(whale_model_desc_gpt2_check(&z, why, sizeof why), 0);
    assert_int_equal(whale_model_desc_block_params(&z), 12 * 64 * 64 + 13 * 64);
    /* block: q 64x64, kv 64x32, o 64x64, gate+up+down 3x64x160, two rmsnorm scales */
    assert_int_equal(whale_model_desc_block_params(&m), 64 * 64 + 64 * 32 + 64 * 64 + 3 * 64 * 160 + 2 * 64);
    /* embeddings untied, no position table, final rmsnorm */
    assert_int_equal(whale_model_desc_params(&m),
                     2 * whale_model_desc_block_params(&m) + 100 * 64 + 64 + 100 * 64);
    /* the engine refuses it, naming the file and the field */
    assert_int_equal(whale_model_desc_gpt2_check(&m, why, sizeof why), WHALE_ENOTSUP);
    assert_non_null(strstr(why, "llama.conf"));
    assert_non_null(strstr(why, "MLP=swiglu"));
    m.mlp = WHALE_MLP_GELU;
    assert_int_equal(whale_model_desc_gpt2_check(&m, why, sizeof why), WHALE_ENOTSUP);
    assert_non_null(strstr(why, "Norm=rmsnorm"));
    /* bad values name the allowed ones */
    assert_int_equal(whale_model_desc_parse_string("Name=x Layers=2 Hidden=64 Heads=4 Seq=32 Vocab=100 MLP=relu",
                                                   "x.conf", &m), WHALE_ECONF);
    assert_int_equal(whale_model_desc_parse_string("Name=x Layers=2 Hidden=64 Heads=4 Seq=32 Vocab=100 Bias=maybe",
                                                   "x.conf", &m), WHALE_ECONF);
    assert_int_equal(whale_model_desc_parse_string("Name=x Layers=2 Hidden=64 Heads=4 Seq=32 Vocab=100 Precision=fp8",
                                                   "x.conf", &m), WHALE_ECONF);
}

/* Presets against the published parameter counts (Hugging Face configs). */
static void test_presets(void **state)
{
    (void)state;
    struct { const char *name; int64_t params; } want[] = {
        { "gpt2-124m", 124439808 },      /* GPT-2 small, tied */
        { "llama2-7b", 6738415616 },
        { "llama2-70b", 68976648192 },
        { "llama3-8b", 8030261248 },
        { "llama3-70b", 70553706496 },
        { "llama2-13b", 13015864320 },
        { "llama3-405b", 405853388800 },
        { "gpt-neox-20b", 20554567680 },   /* rotary, untied */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct whale_model_desc m;
        assert_int_equal(whale_model_desc_load(want[i].name, &m), 0);
        printf("%-10s %lld parameters (published %lld)\n", want[i].name,
               (long long)whale_model_desc_params(&m), (long long)want[i].params);
        assert_true(whale_model_desc_params(&m) == want[i].params);
    }
}

/* Flash attention keeps nothing of size s^2 and makes selective recompute
 * a no-op; plain attention keeps 5 a s^2 b bytes per layer (Korthikanti). */
static void test_flash_attention(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 1, 8, "A100-80GB");
    struct plan_ctx x;
    plan_ctx_init(&x, &m, 8, &c);
    struct plan_layer_cost plain, flash;
    plan_layer_cost(&x, &c.group[0].gpu, 1, false, 1, &plain);
    m.attention = WHALE_ATTN_FLASH;
    plan_ctx_init(&x, &m, 8, &c);
    plan_layer_cost(&x, &c.group[0].gpu, 1, false, 1, &flash);
    double s = m.seq, a = m.heads;
    /* plain - flash = the score term minus the softmax statistics */
    assert_true(fabs((plain.act[0] - flash.act[0]) - (5 * a * s * s - 4 * a * s)) < 1);
    assert_true(flash.act[WHALE_RECOMPUTE_SELECTIVE] == flash.act[WHALE_RECOMPUTE_NONE]);
    assert_true(flash.rc_cost[WHALE_RECOMPUTE_SELECTIVE] == 0);
    assert_true(plain.rc_cost[WHALE_RECOMPUTE_SELECTIVE] > 0);
    /* and it is faster: no score traffic, causal half skipped */
    assert_true(flash.fwd + flash.bwd < plain.fwd + plain.bwd);
}

/* Interleaving with L not a multiple of pp*v (Llama 3 405B: 126 layers). */
static void test_uneven_interleave(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 4, 8, "A100-80GB");   /* 24 layers */
    struct whale_plan_config cfg = cfg_of(1, 2, 16, 1, 0, WHALE_RECOMPUTE_FULL);
    cfg.interleave = 5;                                         /* 10 chunks of 24 layers */
    struct whale_plan_prediction p;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &cfg, &p), 0);
    assert_int_equal(cfg.stage_layers[0] + cfg.stage_layers[1], 24);
    assert_true(cfg.stage_layers[0] >= 10 && cfg.stage_layers[1] >= 10);
    struct whale_plan_candidate cd = { .cfg = cfg, .pred = p };
    struct whale_plan pf;
    assert_int_equal(whale_plan_to_planfile(&m, 512, &c, &cd, &pf), 0);
    assert_int_equal(pf.n_stage_layers, 10);
    int sum = 0;
    for (int i = 0; i < pf.n_stage_layers; i++) {
        assert_true(pf.stage_layers[i] >= 2 && pf.stage_layers[i] <= 3);
        sum += pf.stage_layers[i];
    }
    assert_int_equal(sum, 24);
    /* and the plan file predicts the same step */
    struct whale_plan_candidate back;
    char why[256];
    assert_int_equal(whale_plan_predict(&m, &c, &pf, &back, why, sizeof why), 0);
    assert_true(fabs(back.pred.t_step / p.t_step - 1) < 1e-9);
    whale_plan_free(&pf);
}

/* Defect: a fully fixed configuration with micro-batch > 1 that does not
 * fit says how much memory it needs, not "no valid layout". */
static void test_fixed_config_reason(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-39.1b", &c, 2, 8, "A100-80GB");
    struct whale_plan_request rq;
    struct whale_plan_result *res = plan_request(&rq, &m, 1536, &c);
    rq.tp = 8;
    rq.pp = 2;
    rq.microbatch = 4;
    rq.interleave = 1;
    rq.zero = 0;
    rq.recompute = WHALE_RECOMPUTE_NONE;
    rq.offload = WHALE_OFFLOAD_NONE;
    rq.seqpar = 0;
    assert_int_equal(whale_plan_search(&rq, res), WHALE_ENOFIT);
    printf("why: %s\n", res->why_none);
    assert_null(strstr(res->why_none, "no valid layout"));
    assert_non_null(strstr(res->why_none, "GiB"));
    assert_non_null(strstr(res->why_none, "micro-batch 4"));
    /* the exhaustive search keeps the closest candidate for --evaluate */
    rq.exhaustive = true;
    assert_int_equal(whale_plan_search(&rq, res), WHALE_ENOFIT);
    assert_int_equal(res->nrejected, 1);
    assert_false(res->rejected[0].pred.fits);
    assert_true(res->rejected[0].pred.mem_total > res->rejected[0].pred.mem_capacity);
    assert_int_equal(res->rejected[0].cfg.microbatch, 4);
    free(res);
}

/* Defect: sequence parallelism with tp 1 is refused, and "yes" with a free
 * tp only considers tp >= 2. */
static void test_seqpar_needs_tp(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 4, 8, "A100-80GB");
    struct whale_plan_request rq;
    struct whale_plan_result *res = plan_request(&rq, &m, 512, &c);
    rq.tp = 1;
    rq.seqpar = 1;
    assert_int_equal(whale_plan_search(&rq, res), WHALE_EINVAL);
    rq.tp = 0;
    assert_int_equal(whale_plan_search(&rq, res), 0);
    assert_true(res->best.cfg.tp >= 2 && res->best.cfg.seqpar);
    struct whale_plan_config cfg = cfg_of(1, 1, 32, 1, 0, 0);
    cfg.seqpar = true;
    char why[256];
    assert_int_equal(whale_plan_check(&m, 512, &c, &cfg, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "tp >= 2"));
    free(res);
}

/* Model FLOPs (MFU) and hardware FLOPs (HFU) are both reported, equal
 * without recompute, 4/3-ish apart with full recompute. */
static void test_mfu_hfu(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 4, 8, "A100-80GB");
    struct whale_plan_config a = cfg_of(1, 1, 32, 1, 0, WHALE_RECOMPUTE_NONE), b = a;
    b.recompute = WHALE_RECOMPUTE_FULL;
    struct whale_plan_prediction pa, pb;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &a, &pa), 0);
    assert_int_equal(whale_plan_eval(&m, 512, &c, &b, &pb), 0);
    assert_true(fabs(pa.tflops_per_gpu - pa.model_tflops_per_gpu) < 1e-9 && fabs(pa.mfu - pa.hfu) < 1e-12);
    double r = pb.tflops_per_gpu / pb.model_tflops_per_gpu;
    assert_true(r > 1.25 && r < 1.34);
    assert_true(fabs(pb.hfu / pb.mfu - r) < 1e-9);
    assert_true(pb.model_flops_step == pa.model_flops_step);
    /* labelled in the plan's prediction JSON */
    struct whale_plan_candidate cd = { .cfg = b, .pred = pb };
    struct whale_plan pf;
    assert_int_equal(whale_plan_to_planfile(&m, 512, &c, &cd, &pf), 0);
    assert_non_null(pf.prediction_json);
    assert_non_null(strstr(pf.prediction_json, "\"model_tflops_per_gpu\""));
    assert_non_null(strstr(pf.prediction_json, "\"hardware_tflops_per_gpu\""));
    assert_non_null(strstr(pf.prediction_json, "\"hfu\""));
    assert_int_equal(pf.precision, WHALE_PREC_BF16);
    whale_plan_free(&pf);
    /* and in the table row */
    char hdr[256];
    whale_plan_format_header(hdr, sizeof hdr);
    assert_non_null(strstr(hdr, "hw TF/s"));
    assert_non_null(strstr(hdr, "modelTF/s"));
}

/* The precision drives the time model too: fp32 on A100 runs at the TF32
 * rate (half the bf16 peak) with twice the activation bytes. */
static void test_precision_time(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 4, 8, "A100-80GB");
    struct whale_plan_config a = cfg_of(1, 1, 32, 1, 1, WHALE_RECOMPUTE_FULL), b = a;
    struct whale_plan_prediction p16, p32;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &a, &p16), 0);
    m.precision = WHALE_PREC_FP32;
    m.precision_set = true;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &b, &p32), 0);
    assert_int_equal(b.precision, WHALE_PREC_FP32);
    printf("gpt-1.7b on A100: bf16 %.3f s, fp32 %.3f s per step\n", p16.t_step, p32.t_step);
    assert_true(p32.t_compute > 1.8 * p16.t_compute);
    assert_true(p32.mem_act > 1.9 * p16.mem_act);
    /* MFU is against the fp32 peak, so it stays comparable */
    assert_true(fabs(p32.mfu / p16.mfu - 2 * p16.t_step / p32.t_step) < 1e-9);
}

/* ZeRO-3: the exposed per-layer gather latency grows with DP (SC'21
 * table 2: 144 -> 88 -> 44 TFLOP/s from 384 to 1536 GPUs). */
static void test_zero3_latency(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt3-175b", &m), 0);
    double tf[3];
    int gpus[3] = { 384, 768, 1536 };
    for (int i = 0; i < 3; i++) {
        struct whale_cluster c;
        assert_int_equal(whale_cluster_init(&c, gpus[i] / 8, 8, "A100-80GB"), 0);
        /* the defaults: per-tensor gathers, not hidden */
        struct whale_plan_config cfg = cfg_of(1, 1, gpus[i], 1536 / gpus[i], 3, WHALE_RECOMPUTE_FULL);
        struct whale_plan_prediction p;
        assert_int_equal(whale_plan_eval(&m, 1536, &c, &cfg, &p), 0);
        tf[i] = p.tflops_per_gpu;
    }
    printf("ZeRO-3 175B: %.0f %.0f %.0f TFLOP/s per GPU on 384 / 768 / 1536 GPUs\n", tf[0], tf[1], tf[2]);
    assert_true(tf[0] / tf[2] > 2.5);
    assert_true(tf[0] > tf[1] && tf[1] > tf[2]);
    assert_int_equal(whale_plan_block_tensors(&m), 12);
}

/* One GEMM efficiency per generation: newer GPUs are faster on the same
 * configuration, by less than their peak ratio. */
static void test_generations(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("llama2-7b", &m), 0);
    const char *gpu[] = { "A100-80GB", "H100-80GB", "B200" };
    double t[3], peak[3];
    for (int i = 0; i < 3; i++) {
        struct whale_cluster c;
        assert_int_equal(whale_cluster_init(&c, 1, 8, gpu[i]), 0);
        struct whale_plan_config cfg = cfg_of(1, 1, 8, 1, 3, WHALE_RECOMPUTE_FULL);
        struct whale_plan_prediction p;
        assert_int_equal(whale_plan_eval(&m, 64, &c, &cfg, &p), 0);
        t[i] = p.t_step;
        peak[i] = c.group[0].gpu.peak_flops;
    }
    assert_true(t[0] > t[1] && t[1] > t[2]);
    assert_true(t[0] / t[1] < peak[1] / peak[0]);
    assert_true(t[1] / t[2] < peak[2] / peak[1]);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modeldesc_keys),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_flash_attention),
        cmocka_unit_test(test_uneven_interleave),
        cmocka_unit_test(test_fixed_config_reason),
        cmocka_unit_test(test_seqpar_needs_tp),
        cmocka_unit_test(test_mfu_hfu),
        cmocka_unit_test(test_precision_time),
        cmocka_unit_test(test_zero3_latency),
        cmocka_unit_test(test_generations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
