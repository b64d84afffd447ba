/* Load's reads (readio.c): a range read with O_DIRECT (widened to the
 * block, into an aligned buffer) returns exactly the bytes a plain pread
 * does, for ranges that start and end off the block, that end at or run
 * past the end of the file; and whole checkpoints (odd tensor sizes,
 * zstd, a delta chain) restore bit-exactly with O_DIRECT and parallel
 * readers as without. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt_fixture.h"
#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"

#include <jansson.h>

/* 3 x 256 KiB + 777: ends off the block */
#define FILE_BYTES ((size_t)(3u << 18) + 777)

static unsigned char *pattern(void)
{
    unsigned char *b = malloc(FILE_BYTES);
    assert_non_null(b);
    uint32_t x = 12345;
    for (size_t i = 0; i < FILE_BYTES; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (unsigned char)(x >> 23);
    }
    return b;
}

static void test_range(void **st)
{
    (void)st;
    char *root = ckpt_test_root("readio");
    char path[4096];
    snprintf(path, sizeof path, "%s/f", root);
    unsigned char *want = pattern();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, want, FILE_BYTES), (ssize_t)FILE_BYTES);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    int dfd = open(path, O_RDONLY | O_DIRECT);
    bool has_direct = dfd >= 0;
    if (dfd >= 0)
        close(dfd);
    const uint64_t N = FILE_BYTES;
    struct { uint64_t begin, len; } cases[] = {
        {0, N},                       /* the whole file, ending off the block */
        {1, 300001},                  /* both ends off the block */
        {4095, 262145},
        {4096, 262144},               /* both ends on it */
        {N - 262150, 262150},         /* up to the end */
        {N - 262144 + 5, 262144 + 100}, /* past the end: short */
        {10, 100},                    /* small: through the page cache */
        {N - 3, 3},
        {N, 0},
    };
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int direct = 0; direct <= 1; direct++) {
            void *alloc;
            unsigned char *data;
            uint64_t got = 99;
            uint64_t b = cases[k].begin, len = cases[k].len;
            assert_int_equal(ckpt_read_range(fd, b, len, direct, &alloc, &data, &got), 0);
            uint64_t exp = b + len <= N ? len : N - b;
            assert_int_equal(got, exp);
            assert_memory_equal(data, want + b, exp);
            /* the O_DIRECT path did run: its buffer starts at the block */
            if (direct && has_direct && len >= (256u << 10) && b % 4096)
                assert_ptr_equal(data, (unsigned char *)alloc + b % 4096);
            free(alloc);
        }
    }
    /* the flags of the caller's descriptor are as they were */
    assert_int_equal(fcntl(fd, F_GETFL) & O_DIRECT, 0);
    close(fd);
    free(want);
    ckpt_rm_rf(root);
    free(root);
}

/* odd sizes: 160 x 480 floats per qkv (307200 bytes, not a multiple of
 * 4096), a vocabulary of 1000 */
static const struct synth_model odd = {.layers = 2, .hidden = 160, .vocab = 1000, .seq = 16};
/* compressed chunks of 1 MiB + 7 stay past the O_DIRECT size (256 KiB) */
static const struct synth_model wide = {.layers = 2, .hidden = 160, .vocab = 4000, .seq = 16};

static void restore_check(const struct synth_model *md, const char *dir, int64_t step,
                          const char *direct)
{
    setenv("WHALE_CKPT_READ_DIRECT", direct, 1);
    setenv("WHALE_CKPT_READERS", "4", 1);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    assert_int_equal(synth_pieces(md, &l, false, true, step, &p, &n), 0);
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
    unsetenv("WHALE_CKPT_READ_DIRECT");
    unsetenv("WHALE_CKPT_READERS");
}

/* How many chunks of step directory dir are past the O_DIRECT size and
 * zstd-compressed (zstd) or deltas (!zstd). */
static int big_chunks(const char *dir, bool zstd)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    json_t *m = json_load_file(p, 0, NULL);
    assert_non_null(m);
    int k = 0;
    const char *name;
    json_t *t, *c;
    size_t i;
    json_object_foreach(json_object_get(m, "tensors"), name, t) {
        json_array_foreach(json_object_get(t, "chunks"), i, c) {
            bool big = json_integer_value(json_object_get(c, "nbytes")) >= (256 << 10);
            bool z = json_integer_value(json_object_get(c, "zstd")) > 0;
            bool d = json_object_get(c, "delta_base") != NULL;
            k += big && (zstd ? z : d);
        }
    }
    json_decref(m);
    return k;
}

/* Steps 1-3 with `zstd` and up to 2 deltas after each full save (step 1
 * full, 2 and 3 deltas against it), each restored with O_DIRECT. */
static void save_and_restore(const struct synth_model *md, int zstd, size_t chunk)
{
    char *root = ckpt_test_root("readio");
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    c.root = root;
    c.run_id = "test";
    c.chunk_bytes = chunk;
    c.zstd_level = zstd;
    c.delta_every = 2;
    c.keep = 0;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    for (int s = 1; s <= 3; s++) {
        whale_ckpt_piece *p;
        size_t n;
        assert_int_equal(synth_pieces(md, &l, true, true, s, &p, &n), 0);
        whale_ckpt_meta m = {.step = s};
        assert_int_equal(whale_ckpt_save(ck, &m, p, n, NULL), 0);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        synth_free(p, n);
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
    for (int s = 1; s <= 3; s++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/step-%08d", root, s);
        /* the O_DIRECT path reads compressed and delta chunks too */
        if (zstd)
            assert_true(big_chunks(dir, true) > 0);
        if (s == 2)
            assert_true(big_chunks(dir, false) > 0);
        restore_check(md, dir, s, "1");
        if (s == 2) /* through the page cache too (the chunks are the same either way) */
            restore_check(md, dir, s, "0");
    }
    ckpt_rm_rf(root);
    free(root);
}

static void test_restore_exact(void **st)
{
    (void)st;
    save_and_restore(&odd, 0, 1u << 20);
}

static void test_restore_zstd_odd_chunks(void **st)
{
    (void)st;
    save_and_restore(&wide, 1, (1u << 20) + 7); /* chunks cut off the block */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_restore_exact),
        cmocka_unit_test(test_restore_zstd_odd_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
