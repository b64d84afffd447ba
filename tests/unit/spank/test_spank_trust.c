/* What slurmstepd accepts from srun, run
 * outside Slurm with stubs of the few Slurm functions involved. The
 * cluster tests (tests/cluster/hardening.bats) show the same on a real
 * slurmstepd. */
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

#include "plugin.h"
#include "slurm_stubs.h"
#include "trust.h"
#include "whale/log.h"

static int opt(const char *name, const char *arg)
{
    return stub_opt(name, arg, 1); /* replayed in slurmstepd */
}

static char dir[64];
static struct whale_conf *site;

static int setup(void **st)
{
    (void)st;
    stub_options_reset();
    snprintf(dir, sizeof dir, "/tmp/whale-trust-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(whale_conf_parse_string("MaxZero=1 AllowedOffload=none MinCkptEvery=100 "
                                             "MaxTP=4\n", "site.conf", &site),
                     0);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    whale_conf_free(site);
    site = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static void want(const char *s)
{
    if (!strstr(last_err, s))
        fprintf(stderr, "last error: %s\nwanted: %s\n", last_err, s);
    assert_non_null(strstr(last_err, s));
}

/* case 2: a path (a FIFO) in the plan variable is never opened */
static void test_path_refused(void **st)
{
    (void)st;
    char f[128];
    snprintf(f, sizeof f, "%s/f", dir);
    assert_int_equal(mkfifo(f, 0600), 0);
    assert_int_equal(opt("whale", NULL), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_accept_remote(f, site, &p), -1); /* returns: did not block */
    want("must hold the plan as inline JSON");
    assert_int_equal(whale_plan_accept_remote(NULL, site, &p), -1);
    want("SLURM_WHALE_PLAN is missing from the step: srun ran without the Whale plugin");
}

/* case 3: site limits hold in slurmstepd whatever srun sent */
static void test_site_limits_enforced(void **st)
{
    (void)st;
    assert_int_equal(opt("whale", NULL), 0);
    assert_int_equal(opt("whale-plan", "/tmp/evil.json"), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_accept_remote("{\"zero\":3}", site, &p), -1);
    want("zero=3 exceeds the site limit MaxZero=1");
    assert_int_equal(whale_plan_accept_remote("{\"offload\":\"optimizer\"}", site, &p), -1);
    want("offload=optimizer is not allowed on this site");
    assert_int_equal(whale_plan_accept_remote("{\"ckpt_every\":1,\"ckpt_dir\":\"/x\"}", site, &p),
                     -1);
    want("MinCkptEvery=100");
    assert_int_equal(whale_plan_accept_remote("{\"tp\":8}", site, &p), -1);
    want("tp=8 exceeds the site limit MaxTP=4");
    /* within the limits: accepted */
    assert_int_equal(whale_plan_accept_remote("{\"zero\":1,\"ckpt_every\":100,\"tp\":2}", site, &p),
                     0);
    assert_int_equal(p.zero, 1);
    whale_plan_free(&p);
}

/* case 3: a plan that the replayed options contradict was not made by srun */
static void test_plan_matches_options(void **st)
{
    (void)st;
    assert_int_equal(opt("whale-tp", "2"), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_accept_remote("{\"tp\":4}", site, &p), -1);
    want("the step's plan says whale-tp=4 but --whale-tp=2 was given");
    /* no plan file: knobs no option asked for keep their defaults */
    assert_int_equal(whale_plan_accept_remote("{\"tp\":2,\"zero\":1}", site, &p), -1);
    want("that no --whale-* option asked for");
    assert_int_equal(whale_plan_accept_remote("{\"tp\":2}", site, &p), 0);
    whale_plan_free(&p);
}

/* case 7: size bounded before parsing */
static void test_oversized_refused(void **st)
{
    (void)st;
    assert_int_equal(opt("whale", NULL), 0);
    size_t n = WHALE_PLAN_MAX_ENV + 10;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = 0;
    struct whale_plan p;
    assert_int_equal(whale_plan_accept_remote(big, site, &p), -1);
    want("SLURM_WHALE_PLAN is longer than 100000 bytes");
    free(big);
}

/* case 5: the rank-map file: private directory, exclusive 0600 file, no
 * link followed, removed with its directory */
static void test_private_file(void **st)
{
    (void)st;
    mode_t old = umask(0);
    struct whale_private_file f;
    assert_int_equal(whale_private_file_write(dir, "rankmap", "0-7", getuid(), getgid(), &f), 0);
    umask(old);
    struct stat sf, sd;
    assert_int_equal(lstat(f.path, &sf), 0);
    assert_int_equal(lstat(f.dir, &sd), 0);
    assert_true(S_ISREG(sf.st_mode));
    assert_true(S_ISDIR(sd.st_mode));
    assert_int_equal(sf.st_mode & 07777, 0600);
    assert_int_equal(sd.st_mode & 07777, 0700);
    assert_int_equal(strncmp(f.path, dir, strlen(dir)), 0);
    assert_non_null(strstr(f.path, "/whale."));
    char buf[16] = "";
    FILE *in = fopen(f.path, "r");
    assert_non_null(fgets(buf, sizeof buf, in));
    fclose(in);
    assert_string_equal(buf, "0-7");
    /* two steps never share (or truncate) one file */
    struct whale_private_file g;
    assert_int_equal(whale_private_file_write(dir, "rankmap", "x", getuid(), getgid(), &g), 0);
    assert_string_not_equal(f.path, g.path);
    char keep[1100];
    snprintf(keep, sizeof keep, "%s", f.dir);
    whale_private_file_remove(&f);
    assert_int_equal(access(keep, F_OK), -1);
    whale_private_file_remove(&g);
    /* a base that does not exist: a clear error */
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(whale_private_file_write(missing, "rankmap", "x", 0, 0, &f), -1);
    want("cannot use");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_path_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_site_limits_enforced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_matches_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_private_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
