/* Outside input that used to hang, flood or overflow: files that are FIFOs
 * or devices, unit suffixes on negative numbers, plans and model files
 * whose products overflow. Each case names
 * the problem in its message and fails without undefined behaviour. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "whale/checked.h"
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale/map.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "whale/planfile.h"
#include "whale/readfile.h"

static char logbuf[8192];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", line);
}
static int setup(void **st)
{
    (void)st;
    logbuf[0] = 0;
    whale_log_set_sink(sink, NULL);
    return 0;
}
static int teardown(void **st)
{
    (void)st;
    whale_log_set_sink(NULL, NULL);
    return 0;
}
static void want(const char *s)
{
    if (!strstr(logbuf, s))
        fprintf(stderr, "log:\n%s\nwanted: %s\n", logbuf, s);
    assert_non_null(strstr(logbuf, s));
}

static char tmpd[64];
static const char *fifo_path(void)
{
    static char p[128];
    snprintf(tmpd, sizeof tmpd, "/tmp/whale-hostile-XXXXXX");
    assert_non_null(mkdtemp(tmpd));
    snprintf(p, sizeof p, "%s/fifo", tmpd);
    assert_int_equal(mkfifo(p, 0600), 0);
    return p;
}
static void fifo_done(const char *p)
{
    unlink(p);
    rmdir(tmpd);
}

static int noop_line(const struct whale_kv_line *l, void *u)
{
    (void)l;
    (void)u;
    return 0;
}

/* case 4: /dev/zero as a config, model, calibration profile or rank map */
static void test_dev_zero_refused(void **st)
{
    (void)st;
    assert_int_equal(whale_kv_parse_file("/dev/zero", noop_line, NULL), WHALE_EINVAL);
    want("/dev/zero: is a character device; expected a regular file");
    logbuf[0] = 0;
    struct whale_model_desc m;
    assert_int_not_equal(whale_model_desc_load("/dev/zero", &m), 0);
    want("/dev/zero: is a character device");
    logbuf[0] = 0;
    struct whale_calib cal;
    assert_int_not_equal(whale_calib_load("/dev/zero", &cal), 0);
    want("/dev/zero: is a character device");
    logbuf[0] = 0;
    int *v = NULL, n = 0;
    assert_int_not_equal(whale_rankmap_load("@/dev/zero", &v, &n), 0);
    want("/dev/zero: is a character device");
    logbuf[0] = 0;
    struct whale_conf *c = NULL;
    assert_int_not_equal(whale_conf_load("/dev/zero", &c), 0);
    assert_null(c);
    want("/dev/zero: is a character device");
    logbuf[0] = 0;
    struct whale_topo *t = whale_topo_new();
    assert_int_not_equal(whale_topology_conf_parse("/dev/zero", t), 0);
    whale_topo_free(t);
    want("/dev/zero: is a character device");
}

/* case 2 (library side): opening a FIFO never waits for a writer */
static void test_fifo_refused(void **st)
{
    (void)st;
    const char *p = fifo_path();
    char *b = NULL;
    assert_int_equal(whale_read_file(p, 100, 0, &b, NULL), WHALE_EINVAL);
    want("is a FIFO; expected a regular file");
    logbuf[0] = 0;
    struct whale_plan pl;
    assert_int_not_equal(whale_plan_load_file(p, &pl), 0);
    want("is a FIFO");
    logbuf[0] = 0;
    assert_int_not_equal(whale_plan_from_env_value(p, &pl), 0);
    want("is a FIFO");
    fifo_done(p);
}

static void test_size_cap(void **st)
{
    (void)st;
    char p[] = "/tmp/whale-cap-XXXXXX";
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0123456789", 10), 10);
    close(fd);
    char *b = NULL;
    size_t n = 0;
    assert_int_equal(whale_read_file(p, 10, 0, &b, &n), 0);
    assert_int_equal(n, 10);
    assert_string_equal(b, "0123456789");
    free(b);
    assert_int_equal(whale_read_file(p, 9, 0, &b, &n), WHALE_ERANGE);
    want("10 bytes, more than the 9 allowed");
    char l[64];
    snprintf(l, sizeof l, "%s.link", p);
    assert_int_equal(symlink(p, l), 0);
    assert_int_equal(whale_read_file(l, 100, WHALE_READ_NOFOLLOW, &b, &n), WHALE_EINVAL);
    want("is a symbolic link");
    unlink(l);
    unlink(p);
}

/* case 8: negative values with a unit suffix wrapped around */
static int long_line(const struct whale_kv_line *l, void *u)
{
    return whale_kv_to_long(l, &l->kv[0], LONG_MIN / 2, 1L << 40, true, u);
}
static void test_kv_negative_units(void **st)
{
    (void)st;
    long v = 0;
    assert_int_equal(whale_kv_parse_string("X=-2K\n", "t", long_line, &v), 0);
    assert_int_equal(v, -2048);
    assert_int_not_equal(whale_kv_parse_string("X=-9000000000000T\n", "t", long_line, &v), 0);
    want("t:1: X=-9000000000000T: out of range");
    assert_int_not_equal(whale_kv_parse_string("X=9000000000000T\n", "t", long_line, &v), 0);
}

/* case 8: tp=pp=2^20, dp=2^24 overflowed tp*pp*dp */
static void test_plan_degree_overflow(void **st)
{
    (void)st;
    struct whale_plan p;
    assert_int_not_equal(
        whale_plan_from_json("{\"tp\":1048576,\"pp\":1048576,\"dp\":16777216}", "x", &p), 0);
    want("x: tp*pp*dp = 1048576*1048576*16777216 is more than 16777216 ranks");
    whale_plan_init(&p);
    p.micro_batch = 1 << 24;
    p.num_micro_batches = 1 << 24;
    p.dp = 1 << 20;
    logbuf[0] = 0;
    assert_int_not_equal(whale_plan_validate(&p, 0, 0, "y"), 0);
    want("micro_batch*num_micro_batches*dp");
}

/* case 7: oversized plans are refused by size, naming the key */
static void test_plan_oversized(void **st)
{
    (void)st;
    size_t n = 1000000;
    char *js = malloc(n * 2 + 64);
    size_t o = (size_t)sprintf(js, "{\"recompute\":\"layers\",\"recompute_layers\":[");
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(js + o, i ? ",0" : "0");
    sprintf(js + o, "]}");
    struct whale_plan p;
    assert_int_not_equal(whale_plan_from_json(js, "big", &p), 0);
    want("big: plan key \"recompute_layers\" has 1000000 entries (at most 65536)");
    o = (size_t)sprintf(js, "{\"prediction\":{\"note\":\"");
    memset(js + o, 'x', 200000);
    sprintf(js + o + 200000, "\"}}");
    logbuf[0] = 0;
    assert_int_not_equal(whale_plan_from_json(js, "pred", &p), 0);
    want("pred: plan key \"prediction\" is 200011 bytes (at most 16384)");
    free(js);
}

/* case 8: Hidden=1000000000 overflowed the parameter count */
static void test_model_overflow(void **st)
{
    (void)st;
    struct whale_model_desc m;
    assert_int_not_equal(whale_model_desc_parse_string(
                             "Layers=2 Hidden=1000000000 Heads=8 Seq=16 Vocab=64\n", "m", &m),
                         0);
    want("m:1: Hidden=1000000000: out of range [1, 1048576]");
    /* the largest accepted model still counts its parameters exactly */
    assert_int_equal(whale_model_desc_parse_string("Layers=65536 Hidden=1048576 Heads=8 "
                                                   "FFN=4194304 Seq=16777216 Vocab=16777216\n",
                                                   "big", &m),
                     0);
    assert_true(whale_model_desc_params(&m) > 0);
}

/* found by tests/fuzz: libslurm 22.05 leaks on every bracket it cannot
 * parse; such expressions are refused before they reach it (the ASan
 * run of this test fails on the leak otherwise) */
static void test_hostlist_brackets(void **st)
{
    (void)st;
    const char *bad[] = {"NodeName=gpu[] GPUs=1\n", "NodeName=gpu[1x9] GPUs=1\n",
                         "NodeName=gb[038-027] GPUs=1\n", "NodeName=g[001-072072] GPUs=1\n",
                         "NodeName=g[1-2 GPUs=1\n", "NodeName=g[[1]] GPUs=1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct whale_conf *c = NULL;
        assert_int_not_equal(whale_conf_parse_string(bad[i], "h.conf", &c), 0);
        assert_null(c);
    }
    struct whale_topo *t = whale_topo_new();
    assert_int_not_equal(whale_topology_conf_parse_string("SwitchName=s Nodes=gpu[03,1x9]\n",
                                                          "t.conf", t), 0);
    whale_topo_free(t);
    struct whale_conf *c = NULL;
    assert_int_equal(whale_conf_parse_string("NodeName=gpu[001-004,7] GPUs=1\n", "ok.conf", &c), 0);
    whale_conf_free(c);
}

static void test_checked_helpers(void **st)
{
    (void)st;
    int64_t r;
    assert_false(whale_mul_i64(INT64_MAX, 2, &r));
    assert_true(whale_mul_i64(1LL << 31, 1LL << 31, &r));
    assert_int_equal(r, 1LL << 62);
    int64_t dims[2] = {1LL << 62, 1LL << 62};
    assert_false(whale_numel_i64(2, dims, &r));
    dims[0] = -1;
    dims[1] = 1;
    assert_false(whale_numel_i64(2, dims, &r));
    size_t z;
    assert_false(whale_add_size(SIZE_MAX, 1, &z));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dev_zero_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kv_negative_units, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_degree_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_oversized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostlist_brackets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checked_helpers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
