/* A data file truncated while it is memory-mapped:
 * the copy is guarded against SIGBUS, and the loader names the file. */
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
#include <sys/mman.h>
#include <unistd.h>

#include "data/guard.h"
#include "whale/data.h"
#include "whale/error.h"
#include "whale/log.h"

static char logbuf[4096];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", line);
}

static volatile unsigned char sum;
static const unsigned char *g_map;
static void touch_page1(void *arg)
{
    (void)arg;
    sum += g_map[4096];
}

static void test_guard_catches_sigbus(void **st)
{
    (void)st;
    char p[] = "/tmp/whale-guard-XXXXXX";
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 8192), 0);
    g_map = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(g_map != MAP_FAILED);
    assert_int_equal(data_guard_run(touch_page1, NULL), 0);
    assert_int_equal(ftruncate(fd, 100), 0);
    assert_int_equal(data_guard_run(touch_page1, NULL), 1); /* was: killed by SIGBUS */
    assert_int_equal(data_guard_run(touch_page1, NULL), 1); /* and again */
    munmap((void *)g_map, 8192);
    close(fd);
    unlink(p);
}

static void test_loader_names_truncated_file(void **st)
{
    (void)st;
    char p[] = "/tmp/whale-guard-data-XXXXXX";
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    char buf[65536];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)('a' + i % 26);
    assert_int_equal(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    struct whale_data_config c = {.paths = p, .format = WHALE_DATA_BYTES, .vocab = 256, .seq = 64,
                                  .local_batch = 4, .dp_rank = 0, .dp_size = 1, .prefetch = true};
    whale_data *d;
    assert_int_equal(whale_data_open(&c, &d), 0);
    int32_t in[256], tg[256];
    assert_int_equal(whale_data_next(d, 0, in, tg), 0);
    /* capture first: the prefetch thread may report the truncation */
    logbuf[0] = 0;
    whale_log_set_sink(sink, NULL);
    assert_int_equal(ftruncate(fd, 10), 0);
    int rc = whale_data_next(d, 4, in, tg);
    if (rc == 0) /* the prefetched batch may predate the truncation */
        rc = whale_data_next(d, 8, in, tg);
    whale_log_set_sink(NULL, NULL);
    assert_int_equal(rc, WHALE_ECORRUPT);
    assert_non_null(strstr(logbuf, p));
    whale_data_close(d);
    close(fd);
    unlink(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_catches_sigbus),
        cmocka_unit_test(test_loader_names_truncated_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
