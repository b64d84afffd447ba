#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

/* capture log lines */
static char last_line[1024];
static int last_level = -1;
static void sink(int level, const char *line, void *u)
{
    (void)u;
    last_level = level;
    snprintf(last_line, sizeof last_line, "%s", line);
}

static void test_strerror(void **st)
{
    (void)st;
    assert_string_equal(whale_strerror(WHALE_OK), "success");
    assert_string_equal(whale_strerror(WHALE_EPEER), "peer rank failed or unreachable");
    for (int e = 0; e > WHALE_ERR_MIN_; e--)
        assert_string_not_equal(whale_strerror(e), "unknown error");
    assert_string_equal(whale_strerror(-999), "unknown error");
}

static void test_log_levels(void **st)
{
    (void)st;
    assert_int_equal(whale_log_level_parse("debug"), WHALE_LOG_DEBUG);
    assert_int_equal(whale_log_level_parse("WARN"), WHALE_LOG_WARN);
    assert_int_equal(whale_log_level_parse("3"), 3);
    assert_int_equal(whale_log_level_parse("loud"), -1);
    setenv("WHALE_LOG", "info", 1);
    assert_int_equal(whale_log_init_from_env(), WHALE_LOG_INFO);
    whale_log_set_sink(sink, NULL);
    last_level = -1;
    whale_debug("hidden %d", 1);
    assert_int_equal(last_level, -1);
    whale_info("shown %d", 2);
    assert_int_equal(last_level, WHALE_LOG_INFO);
    assert_string_equal(last_line, "shown 2");
    whale_log_set_sink(NULL, NULL);
    whale_log_set_level(WHALE_LOG_WARN);
}

struct collect { int lines; char keys[16][32]; char vals[16][64]; int n; int lineno[16]; };
static int collect_cb(const struct whale_kv_line *l, void *u)
{
    struct collect *c = u;
    c->lines++;
    for (int i = 0; i < l->n && c->n < 16; i++, c->n++) {
        snprintf(c->keys[c->n], 32, "%s", l->kv[i].key);
        snprintf(c->vals[c->n], 64, "%s", l->kv[i].value);
        c->lineno[c->n] = l->line;
    }
    return 0;
}

static void test_kv_parse(void **st)
{
    (void)st;
    struct collect c = { 0 };
    const char *text = "# comment\n"
                       "NodeName=n[1-4] GPUs=8   # trailing\n"
                       "\n"
                       "Name=\"a b\" \\\n"
                       "  More=yes\r\n";
    assert_int_equal(whale_kv_parse_string(text, "t.conf", collect_cb, &c), 0);
    assert_int_equal(c.lines, 2);
    assert_int_equal(c.n, 4);
    assert_string_equal(c.keys[0], "NodeName");
    assert_string_equal(c.vals[0], "n[1-4]");
    assert_int_equal(c.lineno[0], 2);
    assert_string_equal(c.vals[2], "a b");
    assert_string_equal(c.keys[3], "More");
    assert_int_equal(c.lineno[3], 4);
}

static void test_kv_errors(void **st)
{
    (void)st;
    struct collect c = { 0 };
    whale_log_set_sink(sink, NULL);
    assert_int_equal(whale_kv_parse_string("A=1\nB\n", "x.conf", collect_cb, &c), WHALE_ECONF);
    assert_non_null(strstr(last_line, "x.conf:2"));
    assert_int_equal(whale_kv_parse_string("A=\"open\n", "y.conf", collect_cb, &c), WHALE_ECONF);
    assert_non_null(strstr(last_line, "y.conf:1"));
    assert_int_equal(whale_kv_parse_file("/nonexistent/whale.conf", collect_cb, &c), WHALE_ENOENT);
    whale_log_set_sink(NULL, NULL);
}

static int conv_cb(const struct whale_kv_line *l, void *u)
{
    long *v = u;
    const struct whale_kv *kv = whale_kv_find(l, "mem");
    assert_non_null(kv);
    return whale_kv_to_long(l, kv, 0, 1L << 50, true, v);
}

static void test_kv_convert(void **st)
{
    (void)st;
    long v = 0;
    assert_int_equal(whale_kv_parse_string("Mem=80G", "c", conv_cb, &v), 0);
    assert_int_equal(v, 80L << 30);
    assert_int_equal(whale_kv_parse_string("Mem=12KiB", "c", conv_cb, &v), 0);
    assert_int_equal(v, 12L << 10);
    whale_log_set_sink(sink, NULL);
    assert_int_equal(whale_kv_parse_string("Mem=12X", "c", conv_cb, &v), WHALE_ECONF);
    assert_non_null(strstr(last_line, "not an integer"));
    assert_int_equal(whale_kv_parse_string("Mem=-1", "c", conv_cb, &v), WHALE_ECONF);
    assert_non_null(strstr(last_line, "out of range"));
    whale_log_set_sink(NULL, NULL);
}

static void test_modeldesc(void **st)
{
    (void)st;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("gpt2-124m", &m), 0);
    assert_int_equal(m.layers, 12);
    assert_int_equal(m.ffn, 4 * 768);
    assert_int_equal(m.kv_heads, 12);
    /* GPT-2 small: 124,439,808 parameters with tied embeddings */
    assert_int_equal(whale_model_desc_params(&m), 124439808);
    whale_log_set_sink(sink, NULL);
    assert_int_equal(whale_model_desc_parse_string("Layers=2 Hidden=65 Heads=4 Seq=8 Vocab=10", "bad",
                                                   &m), WHALE_ECONF);
    assert_non_null(strstr(last_line, "not divisible"));
    assert_int_equal(whale_model_desc_parse_string("Layers=2 Hiden=64", "typo", &m), WHALE_ECONF);
    assert_non_null(strstr(last_line, "unknown key 'Hiden'"));
    assert_int_equal(whale_model_desc_load("no-such-model", &m), WHALE_ENOENT);
    whale_log_set_sink(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),   cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_kv_parse),   cmocka_unit_test(test_kv_errors),
        cmocka_unit_test(test_kv_convert), cmocka_unit_test(test_modeldesc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
