/* Delta checkpoints: a full save every K deltas, exact restore through
 * the base, verify covering the chain, retention keeping the full saves
 * that kept deltas need, and the bytes a delta saves when values move a
 * little (as weights do between saves). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt_fixture.h"
#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"
#include "whale/log.h"

static const struct synth_model tiny = {.layers = 2, .hidden = 16, .vocab = 64, .seq = 8};

static whale_ckpt_config cfg_for(const char *root)
{
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    c.root = root;
    c.run_id = "test";
    c.chunk_bytes = 8192;
    return c;
}

/* Is step directory `name` a delta (its manifest names a base)? */
static const char *base_of(const char *root, const char *name)
{
    static char b[64];
    char p[4096];
    snprintf(p, sizeof p, "%s/%s/manifest.json", root, name);
    json_t *m = json_load_file(p, 0, NULL);
    assert_non_null(m);
    json_t *a = json_object_get(m, "delta_bases");
    const char *s = json_string_value(json_array_get(a, 0));
    snprintf(b, sizeof b, "%s", s ? s : "");
    json_decref(m);
    return b;
}

static void load_check(const char *dir, int64_t step)
{
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    assert_int_equal(synth_pieces(&tiny, &l, false, false, step, &p, &n), 0);
    whale_ckpt_reader *r;
    assert_int_equal(whale_ckpt_reader_open(dir, &r), 0);
    int bad = -1;
    assert_int_equal(whale_ckpt_verify(r, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(whale_ckpt_read(r, p, n), 0);
    long nb = -1;
    assert_true(synth_check(p, n, step, 0, 0, 1e-30, &nb) == 0); /* bit-exact */
    assert_int_equal(nb, 0);
    whale_ckpt_reader_close(r);
    synth_free(p, n);
}

/* K = 3 deltas between full saves, keep = 1: steps 2-4 are deltas against
 * step 1, which retention keeps while they are kept; step 5 is full and
 * frees them. Every one restores bit-exactly and verifies. */
static void test_chain_restore_verify_retention(void **st)
{
    (void)st;
    char *root = ckpt_test_root("delta");
    whale_ckpt_config c = cfg_for(root);
    c.delta_every = 3;
    c.keep = 1;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    char dir[4096];
    for (int s = 1; s <= 5; s++) {
        whale_ckpt_piece *p;
        size_t n;
        assert_int_equal(synth_pieces(&tiny, &l, true, true, s, &p, &n), 0);
        whale_ckpt_meta m = {.step = s};
        assert_int_equal(whale_ckpt_save(ck, &m, p, n, NULL), 0);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        synth_free(p, n);
        char name[32];
        snprintf(name, sizeof name, "step-%08d", s);
        assert_string_equal(base_of(root, name), s >= 2 && s <= 4 ? "step-00000001" : "");
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        load_check(dir, s);
        /* keep = 1, but the base of the kept delta stays */
        assert_int_equal(ckpt_test_exists(root, "step-00000001"), s <= 4);
        if (s >= 3)
            assert_false(ckpt_test_exists(root, "step-00000002"));
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
    assert_false(ckpt_test_exists(root, "step-00000004"));
    ckpt_rm_rf(root);
    free(root);
}

/* A delta whose base is gone or damaged: refused, naming the base. */
static char logbuf[8192];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", line);
}

static void test_missing_or_damaged_base(void **st)
{
    (void)st;
    char *root = ckpt_test_root("delta");
    whale_ckpt_config c = cfg_for(root);
    c.delta_every = 5;
    c.keep = 0;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    for (int s = 1; s <= 2; s++) {
        whale_ckpt_piece *p;
        size_t n;
        assert_int_equal(synth_pieces(&tiny, &l, true, true, s, &p, &n), 0);
        whale_ckpt_meta m = {.step = s};
        assert_int_equal(whale_ckpt_save(ck, &m, p, n, NULL), 0);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        synth_free(p, n);
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
    assert_string_equal(base_of(root, "step-00000002"), "step-00000001");
    char d2[4096], f[4096];
    snprintf(d2, sizeof d2, "%s/step-00000002", root);
    /* damage one byte of the base's first bundle: verify of the delta fails */
    snprintf(f, sizeof f, "%s/step-00000001/rank-00000/000000.safetensors", root);
    FILE *fp = fopen(f, "r+b");
    assert_non_null(fp);
    fseek(fp, -3, SEEK_END);
    int ch = fgetc(fp);
    fseek(fp, -3, SEEK_END);
    fputc(ch ^ 0x40, fp);
    fclose(fp);
    whale_log_set_sink(sink, NULL);
    logbuf[0] = 0;
    whale_ckpt_reader *r;
    assert_int_equal(whale_ckpt_reader_open(d2, &r), 0);
    int bad = 0;
    assert_int_equal(whale_ckpt_verify(r, &bad), WHALE_ECORRUPT);
    assert_true(bad > 0);
    assert_non_null(strstr(logbuf, "step-00000001"));
    whale_ckpt_reader_close(r);
    /* gone: the message says which full checkpoint the delta needs */
    char d1[4096];
    snprintf(d1, sizeof d1, "%s/step-00000001", root);
    ckpt_rm_rf(d1);
    logbuf[0] = 0;
    assert_int_equal(whale_ckpt_reader_open(d2, &r), 0);
    assert_int_not_equal(whale_ckpt_verify(r, &bad), 0);
    assert_non_null(strstr(logbuf, "it needs the full checkpoint"));
    whale_ckpt_reader_close(r);
    whale_log_set_sink(NULL, NULL);
    ckpt_rm_rf(root);
    free(root);
}

/* Values that move by ~1e-4 relative (an optimizer step or ten): the
 * delta writes well under half the bytes of a full save, and restores
 * exactly; stored as int8 (weights mode `w`), the codes mostly stay, so
 * the delta of the codes is small too, and restores the codes exactly. */
static void small_moves(enum whale_ckpt_wstore wm)
{
    char *root = ckpt_test_root("delta");
    whale_ckpt_config c = cfg_for(root);
    c.weights = wm;
    c.delta_every = 2;
    c.chunk_bytes = 1 << 20;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 0.04f; /* weights ~ N(0, 0.02) */
    }
    int64_t sh[1] = {N};
    whale_ckpt_piece p;
    whale_ckpt_piece_full(&p, "w", WHALE_FLOAT32, 1, sh, x);
    uint64_t wr[2];
    for (int s = 1; s <= 2; s++) {
        if (s == 2)
            for (int i = 0; i < N; i++)
                x[i] *= 1.0f + 1e-4f * (float)((i % 7) - 3);
        whale_ckpt_meta m = {.step = s};
        assert_int_equal(whale_ckpt_save(ck, &m, &p, 1, NULL), 0);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        whale_ckpt_stats sts;
        whale_ckpt_last_stats(ck, &sts);
        wr[s - 1] = sts.bytes_written;
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
    assert_true(wr[1] * 2 < wr[0]);
    float *y = calloc(N, sizeof *y);
    whale_ckpt_piece q;
    whale_ckpt_piece_full(&q, "w", WHALE_FLOAT32, 1, sh, y);
    char d[4096];
    snprintf(d, sizeof d, "%s/step-00000002", root);
    whale_ckpt_reader *r;
    assert_int_equal(whale_ckpt_reader_open(d, &r), 0);
    assert_int_equal(whale_ckpt_read(r, &q, 1), 0);
    if (wm == WHALE_CKPT_WEIGHTS_INT8) { /* what a full int8 save restores */
        void *e = malloc(ckpt_enc_size(CKPT_ENC_Q8, WHALE_FLOAT32, N, c.quant_block));
        assert_non_null(e);
        ckpt_encode(CKPT_ENC_Q8, WHALE_FLOAT32, x, N, c.quant_block, e);
        ckpt_decode(CKPT_ENC_Q8, WHALE_FLOAT32, e, N, c.quant_block, x);
        free(e);
    }
    assert_memory_equal(x, y, N * sizeof *x);
    whale_ckpt_reader_close(r);
    free(x);
    free(y);
    ckpt_rm_rf(root);
    free(root);
}

static void test_small_moves_compress(void **st)
{
    (void)st;
    small_moves(WHALE_CKPT_WEIGHTS_EXACT);
    small_moves(WHALE_CKPT_WEIGHTS_INT8);
}

/* Saves steps first..last of the tiny model under c (one rank). */
static void save_steps(whale_ckpt_config *c, int first, int last)
{
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(c, &ck), 0);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    for (int s = first; s <= last; s++) {
        whale_ckpt_piece *p;
        size_t n;
        assert_int_equal(synth_pieces(&tiny, &l, true, true, s, &p, &n), 0);
        whale_ckpt_meta m = {.step = s};
        assert_int_equal(whale_ckpt_save(ck, &m, p, n, NULL), 0);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        synth_free(p, n);
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
}

/* How many chunks of a manifest are deltas stored in encoding `enc`. */
static int delta_chunks_in(const char *dir, const char *enc)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/rank-00000.json", dir);
    json_t *m = json_load_file(p, 0, NULL);
    if (!m) { /* the index may live only in the manifest */
        snprintf(p, sizeof p, "%s/manifest.json", dir);
        m = json_load_file(p, 0, NULL);
    }
    assert_non_null(m);
    int k = 0;
    const char *key;
    json_t *v;
    /* chunk records are objects with "enc" and "delta_base", wherever they sit */
    json_t *stack[64];
    int sp = 0;
    stack[sp++] = m;
    while (sp) {
        json_t *o = stack[--sp];
        if (json_is_object(o)) {
            const char *e = json_string_value(json_object_get(o, "enc"));
            if (e && !strcmp(e, enc) && json_object_get(o, "delta_base"))
                k++;
            json_object_foreach(o, key, v) if ((json_is_object(v) || json_is_array(v)) && sp < 63)
                stack[sp++] = v;
        } else if (json_is_array(o)) {
            size_t i;
            json_array_foreach(o, i, v) if ((json_is_object(v) || json_is_array(v)) && sp < 63)
                stack[sp++] = v;
        }
    }
    json_decref(m);
    return k;
}

/* Lossy storage modes chain too: a delta of the int8 (bf16) codes against
 * the base's codes. Step 3 restored through its chain (a full save at 1,
 * deltas at 2 and 3) equals, bit for bit, a full save of step 3 in the same
 * mode, and verify checks the chain. */
static void test_lossy_chain_equals_full(void **st)
{
    (void)st;
    static const struct {
        bool qm;
        enum whale_ckpt_wstore w;
        const char *enc; /* an encoding whose chunks must be deltas */
    } modes[] = {
        {true, WHALE_CKPT_WEIGHTS_EXACT, "q8"},
        {true, WHALE_CKPT_WEIGHTS_INT8, "q8"},
        {false, WHALE_CKPT_WEIGHTS_BF16, "bf16"},
    };
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        char *ra = ckpt_test_root("delta-lossy"), *rb = ckpt_test_root("delta-lossy-full");
        whale_ckpt_config ca = cfg_for(ra), cb = cfg_for(rb);
        ca.quantize_moments = cb.quantize_moments = modes[mi].qm;
        ca.weights = cb.weights = modes[mi].w;
        ca.delta_every = 3;
        save_steps(&ca, 1, 3);
        save_steps(&cb, 3, 3);
        char da[4096], db[4096];
        snprintf(da, sizeof da, "%s/step-00000003", ra);
        snprintf(db, sizeof db, "%s/step-00000003", rb);
        assert_string_equal(base_of(ra, "step-00000003"), "step-00000001");
        assert_true(delta_chunks_in(da, modes[mi].enc) > 0);

        struct synth_layout l;
        synth_layout_of(1, 1, 1, 0, 0, &l);
        whale_ckpt_piece *pa, *pb;
        size_t na, nb;
        assert_int_equal(synth_pieces(&tiny, &l, false, false, 3, &pa, &na), 0);
        assert_int_equal(synth_pieces(&tiny, &l, false, false, 3, &pb, &nb), 0);
        whale_ckpt_reader *r;
        assert_int_equal(whale_ckpt_reader_open(da, &r), 0);
        int bad = -1;
        assert_int_equal(whale_ckpt_verify(r, &bad), 0);
        assert_int_equal(bad, 0);
        assert_int_equal(whale_ckpt_read(r, pa, na), 0);
        whale_ckpt_reader_close(r);
        assert_int_equal(whale_ckpt_reader_open(db, &r), 0);
        assert_int_equal(whale_ckpt_read(r, pb, nb), 0);
        whale_ckpt_reader_close(r);
        assert_int_equal(na, nb);
        for (size_t i = 0; i < na; i++) {
            int64_t ne = 1;
            for (int d = 0; d < pa[i].ndim; d++)
                ne *= pa[i].count[d];
            if (pa[i].flat)
                ne = pa[i].flat_end - pa[i].flat_begin;
            assert_memory_equal(pa[i].data, pb[i].data, (size_t)ne * ckpt_dtype_size(pa[i].dtype));
        }
        synth_free(pa, na);
        synth_free(pb, nb);
        ckpt_rm_rf(ra);
        ckpt_rm_rf(rb);
        free(ra);
        free(rb);
    }
}

static void test_codec_roundtrip(void **st)
{
    (void)st;
    for (size_t w = 1; w <= 8; w *= 2) {
        unsigned char b[64], c[64], d[64];
        for (int i = 0; i < 64; i++) {
            b[i] = (unsigned char)(i * 37 + 11);
            c[i] = (unsigned char)(i * 91 + 3);
        }
        ckpt_delta_encode(w, b, c, 64 / w, d);
        ckpt_delta_apply(w, b, d, 64 / w);
        assert_memory_equal(c, d, 64);
    }
    /* equal values: all zero; a step of one ulp up or down: 2 or 1 */
    uint32_t b4[2] = {0x3f800000u, 0x3f800000u}, c4[2] = {0x3f800001u, 0x3f7fffffu}, d4[2];
    ckpt_delta_encode(4, b4, c4, 2, d4);
    assert_int_equal(d4[0], 2);
    assert_int_equal(d4[1], 1);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_chain_restore_verify_retention),
        cmocka_unit_test(test_missing_or_damaged_base),
        cmocka_unit_test(test_small_moves_compress),
        cmocka_unit_test(test_lossy_chain_equals_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
