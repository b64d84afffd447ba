/* Data loader: llm.c shards and raw bytes, the DP split (disjoint, and the
 * union is the global batch), prefetch == synchronous, resume by global
 * sample counter, and bad files (missing, empty, wrong magic, truncated,
 * token >= vocab) rejected with a message naming the file. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/data.h"
#include "whale/error.h"
#include "whale/log.h"

static char dir[64];
static char last[1024];

static void sink(int level, const char *line, void *u)
{
    (void)u;
    if (level == WHALE_LOG_ERROR)
        snprintf(last, sizeof last, "%s", line);
}

static void path(char *buf, const char *name)
{
    snprintf(buf, 256, "%s/%s", dir, name);
}

/* llm.c shard with n tokens t[i] = f(i); optionally corrupt. */
static void write_shard(const char *name, int n, int magic, int claim, int vocab_max)
{
    char p[256];
    path(p, name);
    FILE *f = fopen(p, "wb");
    int32_t hdr[256] = { 0 };
    hdr[0] = magic;
    hdr[1] = 1;
    hdr[2] = claim;
    fwrite(hdr, sizeof hdr, 1, f);
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)((i * 7 + 3) % vocab_max);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/whale-test-data-XXXXXX");
    assert_non_null(mkdtemp(dir));
    whale_log_set_sink(sink, NULL);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    whale_log_set_sink(NULL, NULL);
    return 0;
}

static void open_expect_error(const char *paths, int vocab, const char *needle)
{
    struct whale_data_config c = { .paths = paths, .vocab = vocab, .seq = 8, .local_batch = 2,
                                   .dp_rank = 0, .dp_size = 1 };
    whale_data *d = NULL;
    last[0] = 0;
    int rc = whale_data_open(&c, &d);
    assert_true(rc < 0);
    assert_null(d);
    printf("  error: %s\n", last);
    assert_non_null(strstr(last, paths));
    assert_non_null(strstr(last, needle));
}

static void test_bad_files(void **st)
{
    (void)st;
    char p[256];
    write_shard("magic.bin", 100, 12345, 100, 50);
    path(p, "magic.bin");
    open_expect_error(p, 50257, "wrong magic");
    write_shard("trunc.bin", 100, WHALE_LLMC_MAGIC, 1000, 50);
    path(p, "trunc.bin");
    open_expect_error(p, 50257, "truncated");
    write_shard("vocab.bin", 100, WHALE_LLMC_MAGIC, 100, 300);
    path(p, "vocab.bin");
    open_expect_error(p, 256, ">= the model's vocabulary");
    path(p, "empty.bin");
    fclose(fopen(p, "w"));
    open_expect_error(p, 256, "empty file");
    path(p, "missing.bin");
    open_expect_error(p, 256, "No such file");
    path(p, "bytes.txt");
    FILE *f = fopen(p, "w");
    fputs("hello \xff world, a bit of text long enough", f);
    fclose(f);
    open_expect_error(p, 128, ">= the model's vocabulary");
    path(p, "short.txt");
    f = fopen(p, "w");
    fputs("abc", f);
    fclose(f);
    open_expect_error(p, 256, "fewer than one sample");
}

static void test_split_and_resume(void **st)
{
    (void)st;
    char a[256], b[256], both[600];
    write_shard("s1.bin", 500, WHALE_LLMC_MAGIC, 500, 1000);
    write_shard("s2.bin", 300, WHALE_LLMC_MAGIC, 300, 1000);
    path(a, "s1.bin");
    path(b, "s2.bin");
    snprintf(both, sizeof both, "%s,%s", a, b);
    const int T = 8, GBATCH = 8;
    /* reference: one rank reads the whole global batch */
    struct whale_data_config c1 = { .paths = both, .vocab = 1000, .seq = T, .local_batch = GBATCH,
                                    .dp_rank = 0, .dp_size = 1, .prefetch = false };
    whale_data *d1;
    assert_int_equal(whale_data_open(&c1, &d1), 0);
    assert_int_equal(whale_data_tokens(d1), 800);
    assert_int_equal(whale_data_epoch_samples(d1), 799 / T);
    int32_t in1[GBATCH * 8], tg1[GBATCH * 8];
    for (int step = 0; step < 30; step++) { /* crosses the file boundary and wraps */
        int64_t gs = (int64_t)step * GBATCH;
        assert_int_equal(whale_data_next(d1, gs, in1, tg1), 0);
        for (int i = 0; i < GBATCH * T; i++) {
            if (i % T < T - 1)
                assert_int_equal(tg1[i], in1[i + 1]); /* targets are inputs shifted */
        }
        /* DP = 4 with prefetch: rank r's rows are rows [2r, 2r+2) of the global batch */
        for (int r = 0; r < 4; r++) {
            struct whale_data_config c4 = c1;
            c4.local_batch = 2;
            c4.dp_rank = r;
            c4.dp_size = 4;
            c4.prefetch = true;
            whale_data *d4;
            assert_int_equal(whale_data_open(&c4, &d4), 0);
            int32_t in4[2 * 8], tg4[2 * 8];
            /* two calls: the second is served from the prefetch thread */
            assert_int_equal(whale_data_next(d4, gs - GBATCH >= 0 ? gs - GBATCH : gs, in4, tg4), 0);
            assert_int_equal(whale_data_next(d4, gs, in4, tg4), 0);
            assert_memory_equal(in4, in1 + r * 2 * T, sizeof in4);
            assert_memory_equal(tg4, tg1 + r * 2 * T, sizeof tg4);
            whale_data_close(d4);
        }
    }
    /* the first token of shard 1 follows the last of shard 0 in the stream */
    assert_int_equal(whale_data_next(d1, 62, in1, tg1), 0); /* sample 62 starts at token 496 */
    assert_int_equal(in1[3], (499 * 7 + 3) % 1000);
    assert_int_equal(in1[4], (0 * 7 + 3) % 1000);
    whale_data_close(d1);
}

/* Uneven shares 5,3 of a global batch of 8: replica r reads the contiguous
 * slice after the shares before it, with prefetch (the next step starts a
 * global batch later, not local_batch x dp_size); a slice past the end of
 * the global batch is refused. */
static void test_uneven_shares(void **st)
{
    (void)st;
    char a[256];
    write_shard("u1.bin", 900, WHALE_LLMC_MAGIC, 900, 1000);
    path(a, "u1.bin");
    const int T = 8, GBATCH = 8;
    struct whale_data_config c1 = { .paths = a, .vocab = 1000, .seq = T, .local_batch = GBATCH,
                                    .dp_rank = 0, .dp_size = 1, .prefetch = false };
    whale_data *d1;
    assert_int_equal(whale_data_open(&c1, &d1), 0);
    const int share[2] = { 5, 3 }, off[2] = { 0, 5 };
    for (int r = 0; r < 2; r++) {
        struct whale_data_config c = c1;
        c.local_batch = share[r];
        c.dp_rank = r;
        c.dp_size = 2;
        c.global_batch = GBATCH;
        c.offset = off[r];
        c.prefetch = true;
        whale_data *d;
        assert_int_equal(whale_data_open(&c, &d), 0);
        int32_t in[5 * 8], tg[5 * 8], in1[GBATCH * 8], tg1[GBATCH * 8];
        for (int step = 0; step < 12; step++) { /* steps 1.. served by the prefetch */
            int64_t gs = (int64_t)step * GBATCH;
            assert_int_equal(whale_data_next(d1, gs, in1, tg1), 0);
            assert_int_equal(whale_data_next(d, gs, in, tg), 0);
            assert_memory_equal(in, in1 + off[r] * T, sizeof(int32_t) * share[r] * T);
            assert_memory_equal(tg, tg1 + off[r] * T, sizeof(int32_t) * share[r] * T);
        }
        whale_data_close(d);
    }
    whale_data_close(d1);
    struct whale_data_config bad = c1;
    bad.local_batch = 3;
    bad.dp_rank = 1;
    bad.dp_size = 2;
    bad.global_batch = GBATCH;
    bad.offset = 6;
    whale_data *d;
    assert_int_equal(whale_data_open(&bad, &d), WHALE_EINVAL);
}

static void test_bytes(void **st)
{
    (void)st;
    char p[256];
    path(p, "corpus.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 100; i++)
        fprintf(f, "line %d\n", i);
    fclose(f);
    struct whale_data_config c = { .paths = p, .vocab = 256, .seq = 16, .local_batch = 3,
                                   .dp_rank = 0, .dp_size = 1, .prefetch = true };
    whale_data *d;
    assert_int_equal(whale_data_open(&c, &d), 0);
    int32_t in[48], tg[48];
    assert_int_equal(whale_data_next(d, 0, in, tg), 0);
    assert_int_equal(in[0], 'l');
    assert_int_equal(tg[0], 'i');
    assert_int_equal(in[16], 'n'); /* sample 1 starts at byte 16: "line 0\nline 1\nli|ne 2" */
    whale_data_close(d);
}

/* version 2 shards (whale-data's for vocabularies over 65536, Llama 3 and
 * Qwen2): uint32 ids, read as they are and checked against the vocabulary */
static void test_wide_tokens(void **st)
{
    (void)st;
    char p[256];
    path(p, "wide.bin");
    FILE *f = fopen(p, "wb");
    int32_t hdr[256] = { WHALE_LLMC_MAGIC, 2, 100 };
    fwrite(hdr, sizeof hdr, 1, f);
    for (uint32_t i = 0; i < 100; i++) {
        uint32_t t = 151000 + i * 7;
        fwrite(&t, 4, 1, f);
    }
    fclose(f);
    struct whale_data_config c = { .paths = p, .vocab = 151936, .seq = 8, .local_batch = 2,
                                   .dp_rank = 0, .dp_size = 1 };
    whale_data *d;
    assert_int_equal(whale_data_open(&c, &d), 0);
    int32_t in[16], tg[16];
    assert_int_equal(whale_data_next(d, 0, in, tg), 0);
    assert_int_equal(in[0], 151000);
    assert_int_equal(tg[0], 151007);
    assert_int_equal(in[8], 151000 + 8 * 7); /* sample 1 starts at token 8 */
    whale_data_close(d);
    open_expect_error(p, 151500, ">= the model's vocabulary");
    hdr[1] = 3;
    path(p, "v3.bin");
    f = fopen(p, "wb");
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(in, sizeof in, 1, f);
    fclose(f);
    open_expect_error(p, 151936, "version 3 not supported");
}

static void write_mask(const char *name, int n, int bad_at)
{
    char p[256];
    path(p, name);
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < n; i++)
        fputc(i == bad_at ? 7 : i % 3 != 0, f);
    fclose(f);
}

/* PATH.mask beside a shard (or --loss-mask): masked targets become -1,
 * inputs stay; a mask of the wrong size or with a byte other than 0/1 is
 * refused, naming the mask file. */
static void test_loss_mask(void **st)
{
    (void)st;
    char p[256], m[300];
    write_shard("sft.bin", 100, WHALE_LLMC_MAGIC, 100, 50);
    path(p, "sft.bin");
    assert_false(whale_data_mask_beside(p));
    write_mask("sft.bin.mask", 100, -1);
    assert_true(whale_data_mask_beside(p));
    struct whale_data_config c = { .paths = p, .vocab = 256, .seq = 8, .local_batch = 2,
                                   .dp_rank = 0, .dp_size = 1 };
    whale_data *d;
    assert_int_equal(whale_data_open(&c, &d), 0);
    int32_t in[16], tg[16];
    assert_int_equal(whale_data_next(d, 0, in, tg), 0);
    for (int i = 0; i < 16; i++) { /* sample b, position t: token b*8+t, target b*8+t+1 */
        int tok = i + 1;
        assert_int_equal(in[i], (i * 7 + 3) % 50);
        assert_int_equal(tg[i], tok % 3 != 0 ? (tok * 7 + 3) % 50 : -1);
    }
    whale_data_close(d);
    snprintf(m, sizeof m, "%s/sft.bin.mask", dir);
    write_mask("sft.bin.mask", 99, -1);
    open_expect_error(p, 256, "one byte per token");
    write_mask("sft.bin.mask", 100, 5);
    open_expect_error(p, 256, "expected 0 or 1");
    /* an explicit list needs one mask per data file */
    write_mask("sft.bin.mask", 100, -1);
    char two[600];
    snprintf(two, sizeof two, "%s,%s", p, p);
    c.paths = two;
    c.masks = m;
    last[0] = 0;
    assert_true(whale_data_open(&c, &d) < 0);
    assert_non_null(strstr(last, "give one per data file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_split_and_resume),
        cmocka_unit_test(test_uneven_shares),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_wide_tokens),
        cmocka_unit_test(test_loss_mask),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
