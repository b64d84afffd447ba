/* The model description (runtime/src/model): presets, the GPT-2 defaults,
 * Llama-style keys, parameter counts against the published figures, and
 * bad files named with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

static void gpt2_defaults(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_parse_string(
                         "Name=t Layers=2 Hidden=64 Heads=4 Seq=64 Vocab=256", "t.conf", &m), 0);
    assert_string_equal(m.name, "t");
    assert_int_equal(m.kv_heads, 4);     /* no GQA unless asked */
    assert_int_equal(m.ffn, 4 * 64);     /* 4h */
    assert_int_equal(m.mlp, WHALE_MLP_GELU);
    assert_int_equal(m.norm, WHALE_NORM_LAYERNORM);
    assert_int_equal(m.position, WHALE_POS_LEARNED);
    assert_false(m.no_bias);
    char why[256];
    assert_int_equal(whale_model_desc_gpt2_check(&m, why, sizeof why), 0);
}

/* GPT-2 small with tied embeddings: 124,439,808 parameters (the figure
 * Hugging Face reports for "gpt2"). */
static void gpt2_124m_params(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt2-124m", &m), 0);
    assert_int_equal(m.layers, 12);
    assert_int_equal(whale_model_desc_params(&m), 124439808);
}

/* Llama-style blocks: Llama-2-7B has 6,738,415,616 and Llama-3-8B
 * 8,030,261,248 parameters (Meta's model cards, untied heads, GQA for 3). */
static void llama_params(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("llama2-7b", &m), 0);
    assert_int_equal(m.mlp, WHALE_MLP_SWIGLU);
    assert_int_equal(m.norm, WHALE_NORM_RMSNORM);
    assert_int_equal(m.position, WHALE_POS_ROTARY);
    assert_true(m.no_bias);
    assert_false(m.tied_embeddings);
    assert_int_equal(whale_model_desc_params(&m), 6738415616LL);
    assert_int_equal(whale_model_desc_load("llama3-8b", &m), 0);
    assert_int_equal(m.kv_heads, 8);
    assert_int_equal(whale_model_desc_params(&m), 8030261248LL);
    char why[256];
    assert_int_not_equal(whale_model_desc_gpt2_check(&m, why, sizeof why), 0);
    assert_non_null(strstr(why, "MLP=swiglu"));
}

static void bad_files_refused(void **state)
{
    (void)state;
    struct whale_model_desc m;
    /* heads must divide hidden */
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Name=b Layers=2 Hidden=65 Heads=4 Seq=64 Vocab=256", "b.conf", &m), 0);
    /* a value that is not a number */
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Name=b Layers=two Hidden=64 Heads=4 Seq=64 Vocab=256", "b.conf", &m), 0);
    /* an unknown architecture value */
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Name=b Layers=2 Hidden=64 Heads=4 Seq=64 Vocab=256 MLP=relu6", "b.conf",
                             &m), 0);
    /* KV heads must divide the heads */
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Name=b Layers=2 Hidden=64 Heads=4 KVHeads=3 Seq=64 Vocab=256", "b.conf",
                             &m), 0);
    assert_int_not_equal(whale_model_desc_load("no-such-model-preset", &m), 0);
}

/* Rotary scaling and the norm epsilon: parsed, and incomplete or
 * misplaced ones refused. */
static void rope_scaling_and_eps(void **state)
{
    (void)state;
    struct whale_model_desc m;
    const char *base = "Name=r Layers=2 Hidden=64 Heads=4 Seq=64 Vocab=256 MLP=swiglu "
                       "Norm=rmsnorm Position=rotary Bias=no ";
    char t[512];
    snprintf(t, sizeof t, "%sRopeScaling=llama3 RopeFactor=8 RopeLowFreq=1 RopeHighFreq=4 "
                          "RopeOrigSeq=8192 NormEps=1e-6", base);
    assert_int_equal(whale_model_desc_parse_string(t, "r.conf", &m), 0);
    assert_int_equal(m.rope_scaling.kind, WHALE_ROPE_LLAMA3);
    assert_true(m.rope_scaling.factor == 8.0f && m.rope_scaling.low_freq == 1.0f &&
                m.rope_scaling.high_freq == 4.0f && m.rope_scaling.orig_seq == 8192);
    assert_true(m.norm_eps == 1e-6f);
    snprintf(t, sizeof t, "%sRopeScaling=linear RopeFactor=2", base);
    assert_int_equal(whale_model_desc_parse_string(t, "r.conf", &m), 0);
    assert_int_equal(m.rope_scaling.kind, WHALE_ROPE_LINEAR);
    /* llama3 without its band keys, linear without a factor, an unknown kind */
    snprintf(t, sizeof t, "%sRopeScaling=llama3 RopeFactor=8", base);
    assert_int_not_equal(whale_model_desc_parse_string(t, "r.conf", &m), 0);
    snprintf(t, sizeof t, "%sRopeScaling=linear", base);
    assert_int_not_equal(whale_model_desc_parse_string(t, "r.conf", &m), 0);
    snprintf(t, sizeof t, "%sRopeScaling=yarn RopeFactor=2", base);
    assert_int_not_equal(whale_model_desc_parse_string(t, "r.conf", &m), 0);
    /* scaling without rotary positions */
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Name=r Layers=2 Hidden=64 Heads=4 Seq=64 Vocab=256 "
                             "RopeScaling=linear RopeFactor=2", "r.conf", &m), 0);
    /* the llama3 frequencies: kept above, divided below, blended between */
    struct whale_rope_scaling sc = {WHALE_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    double f0 = whale_rope_inv_freq(500000.0, NULL, 0, 16);
    double f1 = whale_rope_inv_freq(500000.0, NULL, 1, 16);
    double f3 = whale_rope_inv_freq(500000.0, NULL, 3, 16);
    assert_true(whale_rope_inv_freq(500000.0, &sc, 0, 16) == f0); /* wavelength 6.3 < 16 */
    assert_true(whale_rope_inv_freq(500000.0, &sc, 3, 16) == f3 / 8); /* > 64 */
    double b = whale_rope_inv_freq(500000.0, &sc, 1, 16);         /* 32.3: between */
    assert_true(b < f1 && b > f1 / 8);
}

/* Mixture-of-experts keys: defaults, the preset shapes' published
 * parameter counts, and every nonsense refused with file:line. */
static char last_err[512];
static void grab(int level, const char *line, void *user)
{
    (void)level;
    (void)user;
    snprintf(last_err, sizeof last_err, "%s", line);
}

static void moe_keys(void **state)
{
    (void)state;
    struct whale_model_desc m;
    const char *base = "Name=m Layers=4 Hidden=64 Heads=4 Seq=64 Vocab=256\n";
    char text[512];
    snprintf(text, sizeof text, "%sExperts=8 TopK=2 SharedExperts=1 MoEEvery=2 MoEFirst=1 "
             "Gate=sigmoid GateRenorm=yes CapacityFactor=1.5 AuxLoss=0.02 ZLoss=0\n", base);
    assert_int_equal(whale_model_desc_parse_string(text, "m.conf", &m), 0);
    assert_int_equal(m.moe.experts, 8);
    assert_int_equal(m.moe.topk, 2);
    assert_int_equal(m.moe.ffn, 256); /* ExpertFFN defaults to FFN */
    assert_int_equal(m.moe.gate, WHALE_GATE_SIGMOID);
    assert_true(m.moe.renorm);
    assert_true(m.moe.capacity == 1.5);
    assert_false(whale_model_desc_is_moe(&m, 0));
    assert_true(whale_model_desc_is_moe(&m, 1));
    assert_false(whale_model_desc_is_moe(&m, 2));
    assert_true(whale_model_desc_is_moe(&m, 3));
    assert_int_equal(whale_model_desc_moe_blocks(&m), 2);
    /* Mixtral 8x7B: 46.7B parameters, 12.9B active (Mistral AI) */
    assert_int_equal(whale_model_desc_load("mixtral-8x7b", &m), 0);
    assert_true(whale_model_desc_params(&m) > 46.6e9 && whale_model_desc_params(&m) < 46.8e9);
    assert_true(whale_model_desc_active_params(&m) > 12.8e9 &&
                whale_model_desc_active_params(&m) < 13.0e9);
    /* DeepSeek-MoE 16B: 16.4B, 2.8B active (DeepSeek's paper) */
    assert_int_equal(whale_model_desc_load("deepseek-moe-16b", &m), 0);
    assert_true(whale_model_desc_params(&m) > 16.3e9 && whale_model_desc_params(&m) < 16.5e9);
    assert_true(whale_model_desc_active_params(&m) > 2.7e9 &&
                whale_model_desc_active_params(&m) < 2.9e9);
    assert_int_equal(whale_model_desc_load("m6-t-1t", &m), 0);
    assert_true(whale_model_desc_params(&m) > 1.0e12);
    assert_int_equal(whale_model_desc_load("gpt-moe-tiny", &m), 0);
    assert_int_equal(whale_model_desc_load("llama-moe-tiny", &m), 0);

    static const struct { const char *moe, *want; } bad[] = {
        { "Experts=4 TopK=5", "m.conf:3: TopK=5 is more than Experts=4" },
        { "TopK=2", "m.conf:2: TopK= given but the model has no experts" },
        { "Experts=1", "m.conf:2: Experts=1: a MoE block needs at least 2 experts" },
        { "Experts=4 MoEFirst=4", "m.conf:3: MoEFirst=4: the model has blocks 0..3" },
        { "Experts=4 MoEEvery=9", "m.conf:3: MoEEvery=9 is more than Layers=4" },
        { "Experts=4 Gate=relu", "m.conf:3: Gate=relu: expected one of softmax, sigmoid" },
        { "Experts=4 CapacityFactor=0", "m.conf:3: CapacityFactor=0: must be > 0" },
        { "Experts=4 CapacityFactor=lots", "m.conf:3: CapacityFactor=lots: not a number" },
        { "Experts=4 AuxLoss=-1", "m.conf:3: AuxLoss=-1: out of range" },
        { "Experts=4 ZLoss=x", "m.conf:3: ZLoss=x: not a number" },
        { "Experts=4 TopK=0", "m.conf:3: TopK=0" },
        { "Experts=4 ExpertFFN=0", "m.conf:3: ExpertFFN=0" },
        { "Experts=4 SharedExperts=-1", "m.conf:3: SharedExperts=-1" },
        { "Experts=4 GateRenorm=maybe", "m.conf:3: GateRenorm=maybe" },
        { "Experts=5000", "m.conf:2: Experts=5000" },
    };
    whale_log_set_sink(grab, NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* line 1: the base; line 2: a comment or the first MoE key; line 3: the rest */
        const char *sp = strchr(bad[i].moe, ' ');
        if (sp)
            snprintf(text, sizeof text, "%s%.*s\n%s\n", base, (int)(sp - bad[i].moe), bad[i].moe,
                     sp + 1);
        else
            snprintf(text, sizeof text, "%s%s\n", base, bad[i].moe);
        last_err[0] = 0;
        int rc = whale_model_desc_parse_string(text, "m.conf", &m);
        if (rc == 0 || !strstr(last_err, bad[i].want))
            fail_msg("'%s': rc %d, message '%s', expected '%s'", bad[i].moe, rc, last_err,
                     bad[i].want);
    }
    whale_log_set_sink(NULL, NULL);
}

int main(void)
{
    /* the refusals above log their reasons on purpose */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_defaults),
        cmocka_unit_test(gpt2_124m_params),
        cmocka_unit_test(llama_params),
        cmocka_unit_test(bad_files_refused),
        cmocka_unit_test(rope_scaling_and_eps),
        cmocka_unit_test(moe_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
