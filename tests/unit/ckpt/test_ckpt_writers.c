/* Parallel bundle writers (WHALE_CKPT_WRITERS): the setting and its range,
 * files byte-identical whatever the number of writers (O_DIRECT bundles
 * and small buffered ones), exact restore, and a write error in one writer
 * failing the save while the previous checkpoint stays. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
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

/* ~7 MiB with the moments: 1 MiB bundles, most past the O_DIRECT size */
static const struct synth_model model = {.layers = 2, .hidden = 192, .vocab = 1024, .seq = 16};

static void test_setting(void **st)
{
    (void)st;
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    assert_int_equal(c.writers, 2);
    setenv("WHALE_CKPT_WRITERS", "5", 1);
    assert_int_equal(whale_ckpt_config_from_env(&c), 0);
    assert_int_equal(c.writers, 5);
    setenv("WHALE_CKPT_WRITERS", "17", 1);
    assert_true(whale_ckpt_config_from_env(&c) < 0);
    setenv("WHALE_CKPT_WRITERS", "0", 1);
    assert_true(whale_ckpt_config_from_env(&c) < 0);
    unsetenv("WHALE_CKPT_WRITERS");
    char *root = ckpt_test_root("writers");
    whale_ckpt_config_default(&c);
    c.root = root;
    c.writers = CKPT_MAX_WRITERS + 1;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), WHALE_ERANGE);
    ckpt_rm_rf(root);
    free(root);
}

/* Saves step 1 of the model with `writers` writers under root. */
static int save_with(const char *root, int writers, size_t chunk)
{
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    c.root = root;
    c.run_id = "test";
    c.chunk_bytes = chunk;
    c.writers = writers;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    assert_int_equal(synth_pieces(&model, &l, true, true, 1, &p, &n), 0);
    whale_ckpt_meta m = {.step = 1};
    int rc = whale_ckpt_save(ck, &m, p, n, NULL);
    if (!rc)
        rc = whale_ckpt_wait(ck);
    synth_free(p, n);
    int rc2 = whale_ckpt_close(ck);
    return rc ? rc : rc2;
}

static void load_check(const char *dir)
{
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    assert_int_equal(synth_pieces(&model, &l, false, true, 1, &p, &n), 0);
    whale_ckpt_reader *r;
    assert_int_equal(whale_ckpt_reader_open(dir, &r), 0);
    int bad = -1;
    assert_int_equal(whale_ckpt_verify(r, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(whale_ckpt_read(r, p, n), 0);
    long nb = -1;
    assert_true(synth_check(p, n, 1, 0, 0, 1e-30, &nb) == 0); /* bit-exact */
    assert_int_equal(nb, 0);
    whale_ckpt_reader_close(r);
    synth_free(p, n);
}

/* Compares every bundle file of two saves; returns how many. */
static int same_bundles(const char *a, const char *b)
{
    char da[4096], db[4096];
    snprintf(da, sizeof da, "%s/step-00000001/rank-00000", a);
    snprintf(db, sizeof db, "%s/step-00000001/rank-00000", b);
    DIR *d = opendir(da);
    assert_non_null(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".safetensors"))
            continue;
        char pa[8192], pb[8192];
        snprintf(pa, sizeof pa, "%s/%s", da, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", db, e->d_name);
        char *x, *y;
        size_t lx, ly;
        assert_int_equal(ckpt_read_file(pa, &x, &lx), 0);
        assert_int_equal(ckpt_read_file(pb, &y, &ly), 0);
        assert_int_equal(lx, ly);
        assert_memory_equal(x, y, lx);
        free(x);
        free(y);
        files++;
    }
    closedir(d);
    return files;
}

static void test_same_bytes_any_writers(void **st)
{
    (void)st;
    /* 1 MiB bundles (O_DIRECT on a disk), then 128 KiB ones (page cache) */
    size_t chunks[2] = {1u << 20, 128u << 10};
    for (int k = 0; k < 2; k++) {
        char *one = ckpt_test_root("writers"), *many = ckpt_test_root("writers");
        assert_int_equal(save_with(one, 1, chunks[k]), 0);
        assert_int_equal(save_with(many, 8, chunks[k]), 0);
        int files = same_bundles(one, many);
        assert_true(files >= 6);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/step-00000001", many);
        load_check(dir);
        ckpt_rm_rf(one);
        ckpt_rm_rf(many);
        free(one);
        free(many);
    }
}

/* The disk fills up while 4 writers write: the save fails with ENOSPC, no
 * step directory appears and the earlier checkpoint still loads. */
static void test_write_error_fails_save(void **st)
{
    (void)st;
    char *root = ckpt_test_root("writers");
    assert_int_equal(save_with(root, 4, 1u << 20), 0);
    char first[4096];
    snprintf(first, sizeof first, "%s/step-00000001", root);
    char moved[4096];
    snprintf(moved, sizeof moved, "%s/kept", root);
    assert_int_equal(rename(first, moved), 0);
    whale_log_set_level(-1); /* the expected errors */
    setenv("WHALE_CKPT_FAULT", "enospc_after=3000000", 1);
    assert_int_equal(save_with(root, 4, 1u << 20), WHALE_ENOSPC);
    unsetenv("WHALE_CKPT_FAULT");
    whale_log_set_level(WHALE_LOG_WARN);
    assert_int_not_equal(access(first, F_OK), 0);
    load_check(moved);
    ckpt_rm_rf(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setting),
        cmocka_unit_test(test_same_bytes_any_writers),
        cmocka_unit_test(test_write_error_fails_save),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
