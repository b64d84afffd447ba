/* Shared by the conf tests: the last error line logged (setup installs
 * the sink) and expect_error, a parse that must fail naming needle. */
#ifndef CONF_TEST_H
#define CONF_TEST_H

#include <stdio.h>
#include <string.h>

#include "whale/conf.h"
#include "whale/log.h"

static char last_err[1024];

static void sink(int level, const char *line, void *u)
{
    (void)u;
    if (level == WHALE_LOG_ERROR)
        snprintf(last_err, sizeof last_err, "%s", line);
}

static int setup(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    last_err[0] = '\0';
    return 0;
}

static inline void expect_error(const char *text, const char *needle)
{
    struct whale_conf *c = (struct whale_conf *)1;
    last_err[0] = '\0';
    assert_int_not_equal(whale_conf_parse_string(text, "/etc/slurm/whale.conf", &c), 0);
    assert_null(c);
    if (!strstr(last_err, needle)) {
        fprintf(stderr, "expected '%s' in '%s'\n", needle, last_err);
        fail();
    }
}

#endif
