/* The model description (runtime/src/model): presets, the GPT-2 defaults,
 * Llama-style keys, parameter counts against the published figures, and
 * bad files named with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
    /* the refusals above log their reasons on purpose */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt2_defaults),
        cmocka_unit_test(gpt2_124m_params),
        cmocka_unit_test(llama_params),
        cmocka_unit_test(bad_files_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
