/* The site limits record (whale/sitelimits.h): whale.conf -> record ->
 * the runtime's check, for a value from each source; the record's trust
 * checks (owner, mode, links, FIFOs); the environment that selects it. */
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
#include <sys/stat.h>
#include <unistd.h>

#include "whale/error.h"
#include "whale/sitelimits.h"

#include "conf_test.h"

static const char *site =
    "# limits\n"
    "TopologyFile=none\n"
    "MaxZero=1 MaxTP=4\n"
    "AllowedOffload=none\n"
    "MinCkptEvery=50 MaxMicrobatch=8\n"
    "MaxSpares=0 AllowedRecompute=none,selective\n"
    "MaxPP=2 MaxDP=16\n";

static void limits_of(const char *text, struct whale_site_limits *l)
{
    struct whale_conf *c;
    assert_int_equal(whale_conf_parse_string(text, "/etc/slurm/whale.conf", &c), 0);
    char *rec = whale_site_limits_to_json(c);
    assert_non_null(rec);
    assert_int_equal(whale_site_limits_from_json(rec, "record", l), 0);
    free(rec);
    whale_conf_free(c);
}

static void test_roundtrip_lines(void **st)
{
    (void)st;
    struct whale_site_limits l;
    limits_of(site, &l);
    assert_true(l.present);
    assert_string_equal(l.conf, "/etc/slurm/whale.conf");
    assert_int_equal(l.value[WHALE_LIMIT_MAX_ZERO], 1);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_ZERO], 3);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_TP], 3);
    assert_int_equal(l.line[WHALE_LIMIT_ALLOWED_OFFLOAD], 4);
    assert_int_equal(l.value[WHALE_LIMIT_ALLOWED_OFFLOAD], 1 << WHALE_OFFLOAD_NONE);
    assert_int_equal(l.value[WHALE_LIMIT_MIN_CKPT_EVERY], 50);
    assert_int_equal(l.line[WHALE_LIMIT_MIN_CKPT_EVERY], 5);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_MICROBATCH], 5);
    assert_int_equal(l.value[WHALE_LIMIT_MAX_SPARES], 0);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_SPARES], 6);
    assert_int_equal(l.line[WHALE_LIMIT_ALLOWED_RECOMPUTE], 6);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_PP], 7);
    assert_int_equal(l.line[WHALE_LIMIT_MAX_DP], 7);
    /* every limit whale.conf defines is in the record */
    for (int i = 0; i < WHALE_LIMIT_N; i++)
        assert_true(l.line[i] > 0);
}

/* a whale.conf without limits: nothing is refused */
static void test_no_limits_set(void **st)
{
    (void)st;
    struct whale_site_limits l;
    limits_of("TopologyFile=none\n", &l);
    assert_true(l.present);
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MAX_ZERO, 3, "--zero"), 0);
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_ALLOWED_OFFLOAD,
                                             WHALE_OFFLOAD_PARAMS, "--offload"), 0);
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MIN_CKPT_EVERY, 1, "--x"), 0);
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MAX_SPARES, 9, "tasks"), 0);
}

static void refused(const struct whale_site_limits *l, enum whale_conf_limit w, long v,
                    const char *src, const char *n1, const char *n2)
{
    last_err[0] = '\0';
    assert_int_equal(whale_site_limits_check(l, w, v, src), WHALE_EINVAL);
    if (!strstr(last_err, src) || !strstr(last_err, n1) || !strstr(last_err, n2))
        fail_msg("message '%s' lacks '%s', '%s' or '%s'", last_err, src, n1, n2);
}

/* the same value refused from a flag, a variable and a plan, each named */
static void test_each_source(void **st)
{
    (void)st;
    struct whale_site_limits l;
    limits_of(site, &l);
    const char *srcs[] = { "--zero", "WHALE_ZERO", "the plan --plan p.json" };
    for (int i = 0; i < 3; i++) {
        refused(&l, WHALE_LIMIT_MAX_ZERO, 3, srcs[i], "zero=3", "MaxZero=1 (/etc/slurm/whale.conf:3)");
        assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MAX_ZERO, 1, srcs[i]), 0);
    }
    const char *osrc[] = { "--offload", "WHALE_OFFLOAD", "WHALE_PLAN" };
    for (int i = 0; i < 3; i++)
        refused(&l, WHALE_LIMIT_ALLOWED_OFFLOAD, WHALE_OFFLOAD_OPTIMIZER, osrc[i],
                "offload=optimizer", "AllowedOffload=none (/etc/slurm/whale.conf:4)");
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_ALLOWED_OFFLOAD, WHALE_OFFLOAD_NONE,
                                             "--offload"), 0);
    const char *csrc[] = { "--whale-ckpt-every", "WHALE_CKPT_EVERY", "WHALE_PLAN" };
    for (int i = 0; i < 3; i++)
        refused(&l, WHALE_LIMIT_MIN_CKPT_EVERY, 1, csrc[i], "ckpt_every=1",
                "MinCkptEvery=50 (/etc/slurm/whale.conf:5)");
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MIN_CKPT_EVERY, 50, "x"), 0);
    assert_int_equal(whale_site_limits_check(&l, WHALE_LIMIT_MIN_CKPT_EVERY, 0, "x"), 0);
    last_err[0] = '\0';
    assert_int_equal(whale_site_limits_check_seconds(&l, 1.0, "WHALE_CKPT_EVERY"), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "MinCkptEvery=50"));
    assert_int_equal(whale_site_limits_check_seconds(&l, 0, "x"), 0);
    refused(&l, WHALE_LIMIT_MAX_MICROBATCH, 9, "WHALE_MICRO_BATCH", "micro_batch=9",
            "MaxMicrobatch=8 (/etc/slurm/whale.conf:5)");
    refused(&l, WHALE_LIMIT_ALLOWED_RECOMPUTE, WHALE_RECOMPUTE_FULL, "--recompute",
            "recompute=full", "AllowedRecompute=none,selective (/etc/slurm/whale.conf:6)");
    refused(&l, WHALE_LIMIT_MAX_SPARES, 1, "tasks", "spares=1", "MaxSpares=0");
    refused(&l, WHALE_LIMIT_MAX_TP, 8, "layout", "tp=8", "MaxTP=4 (/etc/slurm/whale.conf:3)");
    refused(&l, WHALE_LIMIT_MAX_PP, 4, "layout", "pp=4", "MaxPP=2 (/etc/slurm/whale.conf:7)");
    refused(&l, WHALE_LIMIT_MAX_DP, 32, "layout", "dp=32", "MaxDP=16 (/etc/slurm/whale.conf:7)");
}

static void test_bad_records(void **st)
{
    (void)st;
    struct whale_site_limits l;
    const char *bad[] = {
        "not json",
        "{\"version\":2,\"conf\":\"c\",\"limits\":{}}",
        "{\"version\":1,\"conf\":\"c\",\"limits\":{\"MaxWhat\":{\"value\":1,\"line\":1}}}",
        "{\"version\":1,\"conf\":\"c\",\"limits\":{\"MaxZero\":{\"value\":-1,\"line\":1}}}",
        "{\"version\":1,\"conf\":\"c\",\"limits\":{\"MaxZero\":{\"value\":1}}}",
        "{\"version\":1,\"conf\":\"c\",\"limits\":{\"AllowedOffload\":{\"value\":[\"all\"],\"line\":1}}}",
        "{\"version\":1,\"conf\":\"c\",\"limits\":{},\"extra\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(whale_site_limits_from_json(bad[i], "r", &l), WHALE_EINVAL);
        assert_false(l.present);
    }
}

static char dir[64];

static void write_record(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(path, mode), 0);
}

/* Only a root-owned record writable by root alone is the site's word. */
static void test_load_trust(void **st)
{
    (void)st;
    struct whale_conf *c;
    assert_int_equal(whale_conf_parse_string(site, "/etc/slurm/whale.conf", &c), 0);
    char *rec = whale_site_limits_to_json(c);
    whale_conf_free(c);
    snprintf(dir, sizeof dir, "/tmp/whale-sitelimits-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char p[128], q[128];
    struct whale_site_limits l;
    snprintf(p, sizeof p, "%s/limits", dir);
    write_record(p, rec, 0666);
    last_err[0] = '\0';
    assert_int_equal(whale_site_limits_load(p, &l), WHALE_EINVAL); /* writable by others */
    assert_non_null(strstr(last_err, "owned by root and writable by root alone"));
    assert_false(l.present);
    write_record(p, rec, 0464);
    assert_int_equal(whale_site_limits_load(p, &l), WHALE_EINVAL); /* writable by the group */
    write_record(p, rec, 0444);
    if (geteuid() == 0) {
        assert_int_equal(whale_site_limits_load(p, &l), 0);
        assert_true(l.present);
        assert_int_equal(l.value[WHALE_LIMIT_MAX_ZERO], 1);
        assert_int_equal(chown(p, 65534, 65534), 0); /* a user's own file */
    }
    last_err[0] = '\0';
    assert_int_equal(whale_site_limits_load(p, &l), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "owner uid"));
    /* a link to it, a FIFO, a missing file: refused, never blocking */
    snprintf(q, sizeof q, "%s/link", dir);
    assert_int_equal(symlink(p, q), 0);
    assert_int_equal(whale_site_limits_load(q, &l), WHALE_EINVAL);
    unlink(q);
    snprintf(q, sizeof q, "%s/fifo", dir);
    assert_int_equal(mkfifo(q, 0644), 0);
    assert_int_equal(whale_site_limits_load(q, &l), WHALE_EINVAL);
    unlink(q);
    snprintf(q, sizeof q, "%s/none", dir);
    assert_int_equal(whale_site_limits_load(q, &l), WHALE_EINVAL);

    /* the environment: a plugin step (WHALE_CONF) must carry a record */
    unsetenv(WHALE_ENV_SITE_LIMITS);
    unsetenv("WHALE_CONF");
    assert_int_equal(whale_site_limits_from_env(&l), 0);
    assert_false(l.present);
    setenv("WHALE_CONF", "/etc/slurm/whale.conf", 1);
    last_err[0] = '\0';
    assert_int_equal(whale_site_limits_from_env(&l), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "WHALE_SITE_LIMITS is missing"));
    setenv(WHALE_ENV_SITE_LIMITS, p, 1); /* not root's (or, as a user, the user's own) */
    assert_int_equal(whale_site_limits_from_env(&l), WHALE_EINVAL);
    unsetenv("WHALE_CONF");
    assert_int_equal(whale_site_limits_from_env(&l), WHALE_EINVAL);
    unsetenv(WHALE_ENV_SITE_LIMITS);
    unlink(p);
    rmdir(dir);
    free(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_roundtrip_lines, setup),
        cmocka_unit_test_setup(test_no_limits_set, setup),
        cmocka_unit_test_setup(test_each_source, setup),
        cmocka_unit_test_setup(test_bad_records, setup),
        cmocka_unit_test_setup(test_load_trust, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
