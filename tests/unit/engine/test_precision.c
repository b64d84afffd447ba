/* Mixed precision in the engine (single rank; layouts are test_engine3d_bf16):
 *  - gradient check: the bf16 gradient of one step against the fp32
 *    gradient of the same (bf16-representable) weights: relative L2 error
 *    below 3 %, cosine above 0.999 (bf16 keeps 8 bits: each stored
 *    activation carries up to 2^-9 relative error; fp32's own gradient is
 *    checked against finite differences in test_gradcheck);
 *  - a real fp16 overflow (loss scale 2^30: the gradient stream exceeds
 *    65504) is skipped and the scale backs off until steps apply; bf16 needs
 *    no scaler and fp16's scaler grows after growth_interval clean steps;
 *  - tensor enumeration in bf16 and fp16 for ZeRO 0-3: PARAM pieces 16-bit,
 *    MASTER pieces fp32, PARAM == round(MASTER) element by element;
 *  - memory: 2-byte params and saved activations; the activation bytes are
 *    the boundary buffers (fp32) plus half the fp32 saved areas. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "whale/dtype.h"
#include "whale/engine.h"

#define B 4
#define T 16
#define V 96

static struct whale_engine_config cfg(enum whale_precision p, int zero)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "p", .layers = 2, .hidden = 32, .heads = 4,
                                         .kv_heads = 4, .ffn = 128, .seq = T, .vocab = V,
                                         .tied_embeddings = true };
    c.seq = T;
    c.micro_batch = B;
    c.lr = 3e-3f;
    c.warmup_steps = 0;
    c.total_steps = 50;
    c.zero_stage = zero;
    c.bucket_bytes = 8 << 10;
    c.threads = 1;
    c.precision = p;
    c.loss_scaling = p == WHALE_PREC_FP16;
    return c;
}

static void batch(int step, int32_t *in, int32_t *tg)
{
    uint64_t x = 88172645463325252ull + (uint64_t)step * 7919;
    int32_t tok[B * (T + 1)];
    for (int i = 0; i < B * (T + 1); i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = i % 3 || i == 0 ? (int32_t)(x % V) : (tok[i - 1] * 5 + 1) % V;
    }
    for (int b = 0; b < B; b++) {
        memcpy(in + b * T, tok + b * (T + 1), T * sizeof(int32_t));
        memcpy(tg + b * T, tok + b * (T + 1) + 1, T * sizeof(int32_t));
    }
}

/* One forward/backward without the update: the engine's gradient G (P). */
static void grads_of(whale_engine *e, const int32_t *in, const int32_t *tg)
{
    double loss = 0, tc = 0;
    struct whale_pp_stats pst = { 0 };
    assert_int_equal(eng_pipe_step(e, in, tg, 1.0f / (B * T), &loss, &tc, &pst), 0);
    assert_int_equal(eng_grads_finish(e), 0);
}

static void test_gradcheck_bf16(void **st)
{
    (void)st;
    struct whale_engine_config c16 = cfg(WHALE_PREC_BF16, 0), c32 = cfg(WHALE_PREC_FP32, 0);
    whale_engine *e16, *e32;
    assert_int_equal(eng_create(&c16, NULL, NULL, &e16), 0);
    assert_int_equal(eng_create(&c32, NULL, NULL, &e32), 0);
    assert_int_equal(e16->P, e32->P);
    /* the fp32 model gets exactly the bf16 model's weights */
    eng_lp_load(e16, e32->W, e16->W16, e16->P);
    int32_t in[B * T], tg[B * T];
    batch(0, in, tg);
    grads_of(e16, in, tg);
    grads_of(e32, in, tg);
    double dd = 0, nn = 0, dot = 0, n16 = 0;
    for (size_t i = 0; i < e32->P; i++) {
        double a = e16->G[i], b = e32->G[i];
        dd += (a - b) * (a - b);
        nn += b * b;
        n16 += a * a;
        dot += a * b;
    }
    double rel = sqrt(dd / nn), cosv = dot / sqrt(nn * n16);
    print_message("bf16 vs fp32 gradient: relative L2 error %.2e, cosine %.6f\n", rel, cosv);
    assert_true(nn > 0 && rel < 3e-2 && cosv > 0.999);
    /* and it is not the fp32 gradient itself (the 16-bit path ran) */
    assert_true(rel > 1e-6);
    whale_engine_destroy(e16);
    whale_engine_destroy(e32);
}

static void test_fp16_overflow_backoff(void **st)
{
    (void)st;
    struct whale_engine_config c = cfg(WHALE_PREC_FP16, 0);
    c.init_scale = 1073741824.0f; /* 2^30: dloss * probs exceeds fp16's 65504 */
    c.scale_growth_interval = 4;
    whale_engine *e;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    uint16_t *w0 = malloc(e->P * 2);
    memcpy(w0, e->W16, e->P * 2);
    int32_t in[B * T], tg[B * T];
    struct whale_step_stats s;
    batch(0, in, tg);
    assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
    assert_true(s.skipped);
    assert_true(s.loss_scale == 536870912.0f); /* backed off by 2 */
    assert_memory_equal(w0, e->W16, e->P * 2); /* nothing applied */
    int skipped = 1, first_ok = -1;
    double first_loss = s.loss, last = 0;
    for (int i = 1; i < 40; i++) {
        batch(i, in, tg);
        assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
        skipped += s.skipped;
        if (!s.skipped && first_ok < 0)
            first_ok = i;
        last = s.loss;
    }
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    print_message("fp16: %d skipped steps, first applied step %d, scale now %g, loss %.3f -> "
                  "%.3f\n", skipped, first_ok + 1, (double)s.loss_scale, first_loss, last);
    assert_true(first_ok > 0 && first_ok < 20);
    assert_int_equal(ts.scaler_skipped, skipped);
    assert_int_equal(ts.adam_t, 40 - skipped);
    assert_true(last < first_loss);
    /* after the back-off, 4 clean steps in a row grow it again */
    assert_true(ts.loss_scale > 0 && isfinite(ts.loss_scale));
    whale_engine_destroy(e);
    free(w0);

    /* bf16: no scaler, nothing skipped */
    struct whale_engine_config cb = cfg(WHALE_PREC_BF16, 0);
    assert_int_equal(eng_create(&cb, NULL, NULL, &e), 0);
    for (int i = 0; i < 5; i++) {
        batch(i, in, tg);
        assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
        assert_false(s.skipped);
        assert_true(s.loss_scale == 1.0f);
    }
    whale_engine_destroy(e);
}

static void test_fp16_scale_grows(void **st)
{
    (void)st;
    struct whale_engine_config c = cfg(WHALE_PREC_FP16, 0);
    c.init_scale = 1024.0f;
    c.scale_growth_interval = 3;
    whale_engine *e;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    int32_t in[B * T], tg[B * T];
    struct whale_step_stats s;
    for (int i = 0; i < 3; i++) {
        batch(i, in, tg);
        assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
        assert_false(s.skipped);
    }
    assert_true(s.loss_scale == 2048.0f);
    whale_engine_inject_overflow(e);
    batch(3, in, tg);
    assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
    assert_true(s.skipped && s.loss_scale == 1024.0f);
    whale_engine_destroy(e);
}

struct tcheck {
    enum whale_dtype lp;
    size_t param, master, other;
    int bad;
    const void *param_data[4096];
    char names[4096][96];
    int np;
};

static int check_piece(const struct whale_tensor_piece *p, void *u)
{
    struct tcheck *t = u;
    size_t n = (size_t)(p->flat_end - p->flat_begin);
    if (p->kind == WHALE_TENSOR_PARAM) {
        t->param += n;
        if (p->dtype != t->lp)
            t->bad++;
        if (t->np < 4096) {
            t->param_data[t->np] = p->data;
            snprintf(t->names[t->np], 96, "%s", p->name);
            t->np++;
        }
    } else if (p->kind == WHALE_TENSOR_MASTER) {
        t->master += n;
        if (p->dtype != WHALE_FLOAT32)
            t->bad++;
        /* the matching param piece (same name, same range, enumerated before) */
        for (int i = 0; i < t->np; i++)
            if (!strcmp(t->names[i], p->name)) {
                const uint16_t *h = t->param_data[i];
                const float *m = p->data;
                for (size_t k = 0; k < n; k++) {
                    uint16_t want = t->lp == WHALE_BFLOAT16 ? whale_float_to_bf16(m[k])
                                                            : whale_float_to_fp16(m[k]);
                    if (h[k] != want)
                        t->bad++;
                }
            }
    } else {
        t->other += n;
        if (p->dtype != WHALE_FLOAT32)
            t->bad++;
    }
    return 0;
}

static void test_tensors_and_memory(void **st)
{
    (void)st;
    for (int prec = WHALE_PREC_BF16; prec <= WHALE_PREC_FP16; prec++)
        for (int z = 0; z <= 3; z++) {
            struct whale_engine_config c = cfg((enum whale_precision)prec, z);
            whale_engine *e;
            assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
            int32_t in[B * T], tg[B * T];
            struct whale_step_stats s;
            for (int i = 0; i < 3; i++) {
                batch(i, in, tg);
                assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
            }
            struct tcheck *t = calloc(1, sizeof *t);
            t->lp = e->lp;
            assert_int_equal(whale_engine_tensors(e, check_piece, t), 0);
            int64_t np = whale_model_desc_params(&c.model);
            /* one rank: every parameter once as param, once as master, twice as moments */
            assert_int_equal(t->param, (size_t)np);
            assert_int_equal(t->master, (size_t)np);
            assert_int_equal(t->other, 2 * (size_t)np);
            assert_int_equal(t->bad, 0);
            free(t);

            struct whale_engine_memory m16, m32;
            whale_engine_memory(e, &m16);
            struct whale_engine_config c32 = cfg(WHALE_PREC_FP32, z);
            whale_engine *f;
            assert_int_equal(eng_create(&c32, NULL, NULL, &f), 0);
            whale_engine_memory(f, &m32);
            assert_int_equal(m16.param_bytes * 2, m32.param_bytes);
            assert_int_equal(m16.grad_bytes, m32.grad_bytes);
            assert_int_equal(m16.optim_bytes * 2, m32.optim_bytes * 3); /* + the master */
            /* activations: boundaries stay fp32, saved areas halve */
            size_t nc = (size_t)B * T * c.model.hidden, saved = e->chunks[0].saved_floats;
            size_t nl = (size_t)(e->chunks[0].l1 - e->chunks[0].l0);
            assert_int_equal(m32.act_bytes, (int64_t)(((nl + 2) * nc + saved) * 4));
            assert_int_equal(m16.act_bytes, (int64_t)((nl + 2) * nc * 4 + saved * 2));
            if (prec == WHALE_PREC_BF16 && z == 0)
                print_message("activations of one micro-batch: fp32 %lld B, bf16 %lld B "
                              "(%.1f %% less); params %lld -> %lld B\n",
                              (long long)m32.act_bytes, (long long)m16.act_bytes,
                              100.0 * (1.0 - (double)m16.act_bytes / (double)m32.act_bytes),
                              (long long)m32.param_bytes, (long long)m16.param_bytes);
            whale_engine_destroy(f);
            whale_engine_destroy(e);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_bf16),
        cmocka_unit_test(test_fp16_overflow_backoff),
        cmocka_unit_test(test_fp16_scale_grows),
        cmocka_unit_test(test_tensors_and_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
