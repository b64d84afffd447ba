/* The plugin's option table, site limits and plan building, run outside
 * Slurm: the few Slurm functions they call are stubbed in slurm_stubs.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin.h"
#include "slurm_stubs.h"
#include "submit_check.h"
#include "whale/log.h"

static int opt(const char *name, const char *arg)
{
    return stub_opt(name, arg, 0);
}

static char dir[64];

static void write_file(const char *name, const char *text, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **st)
{
    (void)st;
    whale_site_free();
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", WHALE_CONF_DEFAULT_PATH);
    stub_options_reset();
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    whale_site_free();
    return 0;
}

static void test_register(void **st)
{
    (void)st;
    assert_int_equal(nreg, OPT_COUNT_ - 1);
    const char *want[] = { "whale", "whale-tp", "whale-pp", "whale-dp", "whale-spares", "whale-map",
                           "whale-plan", "whale-zero", "whale-microbatch", "whale-recompute",
                           "whale-offload", "whale-ckpt-dir", "whale-ckpt-every", "whale-verbose",
                           "whale-conf" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int found = 0;
        for (int k = 0; k < nreg; k++)
            found |= !strcmp(reg[k].name, want[i]);
        assert_true(found);
    }
    assert_false(whale_opts.enabled);
}

static void test_values(void **st)
{
    (void)st;
    assert_int_equal(opt("whale-tp", "abc"), -1);
    assert_string_equal(last_err, "whale: --whale-tp=abc: not an integer (allowed 1..65536)");
    assert_int_equal(opt("whale-tp", "0"), -1);
    assert_string_equal(last_err, "whale: --whale-tp=0: out of range (allowed 1..65536)");
    assert_int_equal(opt("whale-zero", "4"), -1);
    assert_int_equal(opt("whale-tp", "8x"), -1);
    assert_int_equal(opt("whale-map", "foo"), -1);
    assert_string_equal(last_err, "whale: --whale-map=foo: must be one of topo, block");
    assert_int_equal(opt("whale-recompute", "layers"), -1);
    assert_int_equal(opt("whale-offload", "disk"), -1);
    assert_int_equal(opt("whale-conf", "relative.conf"), -1);
    assert_string_equal(last_err, "whale: --whale-conf=relative.conf: give an absolute path");
    assert_false(whale_opts.enabled);
    assert_int_equal(opt("whale-tp", "8"), 0);
    assert_int_equal(opt("whale-tp", "8"), 0); /* replayed: idempotent */
    assert_int_equal(opt("whale-map", "block"), 0);
    assert_int_equal(opt("whale-recompute", "selective"), 0);
    assert_int_equal(opt("whale-verbose", NULL), 0);
    assert_true(whale_opts.enabled);
    assert_int_equal(whale_opts.tp, 8);
    assert_int_equal(whale_opts.map, WHALE_MAP_BLOCK);
    assert_int_equal(whale_opts.recompute, WHALE_RECOMPUTE_SELECTIVE);
    assert_true(whale_opts.verbose);
    assert_true(whale_opts.given[OPT_TP]);
    assert_false(whale_opts.given[OPT_PP]);
}

static void test_site_limits(void **st)
{
    (void)st;
    char path[256];
    write_file("site.conf", "MaxTP=4 MaxSpares=0 AllowedOffload=none MinCkptEvery=100\n", path,
               sizeof path);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", path);
    assert_int_equal(whale_site_load(), 0);
    assert_int_equal(opt("whale-tp", "8"), 0);
    assert_int_equal(whale_options_check_site(whale_site.conf), -1);
    assert_non_null(strstr(last_err, "--whale-tp=8 exceeds the site limit MaxTP=4"));
    whale_opts.tp = 2;
    assert_int_equal(opt("whale-spares", "1"), 0);
    assert_int_equal(whale_options_check_site(whale_site.conf), -1);
    assert_non_null(strstr(last_err, "spare nodes are disabled"));
    whale_opts.spares = 0;
    whale_opts.given[OPT_SPARES] = false;
    assert_int_equal(opt("whale-offload", "params"), 0);
    assert_int_equal(whale_options_check_site(whale_site.conf), -1);
    assert_non_null(strstr(last_err, "--whale-offload=params is not allowed"));
    whale_opts.given[OPT_OFFLOAD] = false;
    assert_int_equal(opt("whale-ckpt-every", "10"), 0);
    assert_int_equal(whale_options_check_site(whale_site.conf), -1);
    assert_non_null(strstr(last_err, "below the site minimum MinCkptEvery=100"));
    unlink(path);
}

static void test_site_config_errors(void **st)
{
    (void)st;
    char path[256];
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s/missing.conf", dir);
    assert_int_equal(whale_site_load(), -1);
    assert_non_null(strstr(last_err, "cannot read the site config"));
    write_file("bad.conf", "# site\nGPUsPerNod=8\n", path, sizeof path);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", path);
    assert_int_equal(whale_site_load(), -1);
    assert_non_null(strstr(last_err, "bad.conf:2: unknown key 'GPUsPerNod'"));
    /* --whale-conf only where the site allows it */
    char other[256];
    write_file("other.conf", "MaxTP=2\n", other, sizeof other);
    write_file("site.conf", "MaxTP=8\n", path, sizeof path);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", path);
    assert_int_equal(opt("whale-conf", other), 0);
    assert_int_equal(whale_site_load(), -1);
    assert_non_null(strstr(last_err, "--whale-conf is not allowed on this site"));
    write_file("site.conf", "AllowUserConfig=yes\n", path, sizeof path);
    assert_int_equal(whale_site_load(), 0);
    assert_string_equal(whale_site.used_path, other);
    assert_int_equal(whale_site.conf->max_tp, 2);
    char *args1[] = { "conf=/x/whale.conf" }, *args2[] = { "cofn=/x" };
    assert_int_equal(whale_site_parse_args(1, args1), 0);
    assert_string_equal(whale_site.conf_path, "/x/whale.conf");
    assert_int_equal(whale_site_parse_args(1, args2), -1);
    assert_non_null(strstr(last_err, "unknown argument 'cofn=/x'"));
    char *args3[] = { "rankmap_inline_max=100" }, *args4[] = { "rankmap_inline_max=200000" };
    assert_int_equal(whale_site_parse_args(1, args3), 0);
    assert_int_equal(whale_site.rankmap_inline_max, 100);
    assert_int_equal(whale_site_parse_args(1, args4), -1);
    assert_non_null(strstr(last_err, "expected 0..122880"));
    unlink(path);
    unlink(other);
    snprintf(path, sizeof path, "%s/bad.conf", dir);
    unlink(path);
}

static void test_plan_from_flags(void **st)
{
    (void)st;
    char path[256];
    write_file("site.conf",
               "DefaultMap=block CheckpointRoot=/ckpt/%u/%j CkptKeep=4 CkptMilestoneEvery=100\n",
               path, sizeof path);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", path);
    assert_int_equal(whale_site_load(), 0);
    assert_int_equal(opt("whale-tp", "2"), 0);
    assert_int_equal(opt("whale-zero", "2"), 0);
    assert_int_equal(opt("whale-microbatch", "4"), 0);
    assert_int_equal(opt("whale-ckpt-every", "50"), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "bob", "77", &p), 0);
    assert_int_equal(p.tp, 2);
    assert_int_equal(p.pp, 1);
    assert_int_equal(p.dp, 0);
    assert_int_equal(p.zero, 2);
    assert_int_equal(p.micro_batch, 4);
    assert_int_equal(p.map, WHALE_MAP_BLOCK);     /* site default */
    assert_string_equal(p.ckpt_dir, "/ckpt/bob/77");
    assert_int_equal(p.ckpt_every, 50);
    assert_int_equal(p.ckpt_keep, 4);               /* retention's site defaults */
    assert_int_equal(p.ckpt_milestone_every, 100);
    whale_plan_free(&p);
    unlink(path);
    /* no CheckpointRoot: --whale-ckpt-every alone is refused */
    write_file("site.conf", "\n", path, sizeof path);
    whale_site_free();
    assert_int_equal(whale_site_load(), 0);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "bob", "77", &p), -1);
    assert_non_null(strstr(last_err, "--whale-ckpt-every needs --whale-ckpt-dir"));
    whale_plan_free(&p);
    unlink(path);
}

static void test_plan_file(void **st)
{
    (void)st;
    char site[256], plan[256];
    write_file("site.conf", "MaxTP=8\n", site, sizeof site);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", site);
    assert_int_equal(whale_site_load(), 0);
    write_file("plan.json",
               "{\"version\":1,\"tp\":2,\"pp\":2,\"dp\":2,\"zero\":1,\"micro_batch\":2,"
               "\"num_micro_batches\":4,\"ckpt_dir\":\"/c/%j\",\"ckpt_every\":5}",
               plan, sizeof plan);
    assert_int_equal(opt("whale-plan", plan), 0);
    assert_int_equal(opt("whale-tp", "2"), 0); /* agrees */
    struct whale_plan p;
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "9", &p), 0);
    assert_int_equal(p.dp, 2);
    assert_string_equal(p.ckpt_dir, "/c/9");
    whale_plan_free(&p);
    assert_int_equal(opt("whale-pp", "4"), 0); /* contradicts */
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "9", &p), -1);
    assert_non_null(strstr(last_err, "--whale-pp=4 contradicts the plan file"));
    assert_non_null(strstr(last_err, "(2)"));
    whale_plan_free(&p);
    whale_opts.given[OPT_PP] = false;
    whale_opts.given[OPT_TP] = false;
    write_file("plan.json", "{\"version\":1,\"tp\":16}", plan, sizeof plan);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "9", &p), -1);
    assert_non_null(strstr(last_err, "asks for more than this site allows"));
    whale_plan_free(&p);
    write_file("plan.json", "{\"version\":1,\"tp\":", plan, sizeof plan);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "9", &p), -1);
    assert_non_null(strstr(last_err, "cannot use this plan file"));
    whale_plan_free(&p);
    assert_int_equal(opt("whale-plan", "auto"), 0);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "9", &p), -1);
    whale_plan_free(&p);
    unlink(plan);
    unlink(site);
}

static void test_pmix_plugin_lookup(void **st)
{
    (void)st;
    char d1[128], d2[128], f[160], both[300];
    snprintf(d1, sizeof d1, "%s/plugins-a", dir);
    snprintf(d2, sizeof d2, "%s/plugins-b", dir);
    assert_int_equal(mkdir(d1, 0755), 0);
    assert_int_equal(mkdir(d2, 0755), 0);
    assert_int_equal(whale_mpi_pmix_installed(d1), 0);
    assert_int_equal(whale_mpi_pmix_installed(""), -1);
    snprintf(f, sizeof f, "%s/mpi_pmix_v4.so", d2);
    FILE *fp = fopen(f, "w");
    fclose(fp);
    snprintf(both, sizeof both, "%s:%s", d1, d2);
    assert_int_equal(whale_mpi_pmix_installed(both), 1);
    assert_int_equal(whale_mpi_pmix_installed(d1), 0);
    unlink(f);
    rmdir(d1);
    rmdir(d2);
}

/* sbatch/salloc: degrees that cannot fit the job's task count are refused at
 * submission. */
static void test_submit_check(void **st)
{
    (void)st;
    struct whale_submit s;
    char *a1[] = { "/usr/bin/sbatch", "-N4", "-n8", "--wrap", "true", NULL };
    whale_submit_parse(a1, &s);
    assert_int_equal(s.nodes, 4);
    assert_int_equal(s.ntasks, 8);
    char *a2[] = { "salloc", "--ntasks", "6", "--nodes=3", "-t", "5", NULL };
    whale_submit_parse(a2, &s);
    assert_int_equal(s.ntasks, 6);
    assert_int_equal(s.nodes, 3);
    char *a3[] = { "sbatch", "-N", "2-4", "-n8", NULL }; /* a range is not a number */
    whale_submit_parse(a3, &s);
    assert_int_equal(s.nodes, 0);
    assert_int_equal(s.ntasks, 8);
    /* #SBATCH lines of the script; the command line wins */
    char path[256];
    write_file("job.sh", "#!/bin/sh\n#SBATCH -n 8\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=2\n"
                         "srun true\n#SBATCH -n 99\n", path, sizeof path);
    char *a4[] = { "sbatch", "-N2", path, NULL };
    whale_submit_parse(a4, &s);
    assert_int_equal(s.ntasks, 8);
    assert_int_equal(s.nodes, 2);
    assert_int_equal(s.per_node, 2);
    unlink(path);

    struct whale_submit job = { .ntasks = 8, .nodes = 4 };
    assert_int_equal(opt("whale-tp", "2"), 0);
    assert_int_equal(whale_submit_check(&job, false), 0); /* DP follows: 4 */
    assert_int_equal(opt("whale-dp", "3"), 0);
    assert_int_equal(whale_submit_check(&job, false), -1);
    assert_non_null(strstr(last_err, "TP*PP*DP = 2*1*3 = 6 working ranks, but the job's sruns "
                                     "have 8 working tasks"));
    assert_non_null(strstr(last_err, "give -n6, or put"));
    struct whale_submit unknown = { 0 };
    assert_int_equal(whale_submit_check(&unknown, false), 0); /* nothing known: nothing refused */
    /* one spare node of 2 tasks leaves 6 working tasks: TP2 x DP3 fits */
    assert_int_equal(opt("whale-spares", "1"), 0);
    assert_int_equal(whale_submit_check(&job, false), 0);
}

/* --whale-ep: a degree like the others, and EP must divide DP as soon as
 * DP is known (given, or derived from the task count). */
static void test_ep_option(void **st)
{
    (void)st;
    assert_int_equal(opt("whale-ep", "0"), -1);
    assert_string_equal(last_err, "whale: --whale-ep=0: out of range (allowed 1..16777216)");
    assert_int_equal(opt("whale-ep", "two"), -1);
    assert_non_null(strstr(last_err, "--whale-ep=two: not an integer"));
    assert_int_equal(opt("whale-ep", "2"), 0);
    assert_true(whale_opts.given[OPT_EP]);
    assert_int_equal(whale_opts.ep, 2);
    /* DP given: checked even before the task count is known */
    struct whale_submit unknown = { 0 };
    assert_int_equal(opt("whale-dp", "2"), 0);
    assert_int_equal(whale_submit_check(&unknown, true), 0);
    assert_int_equal(opt("whale-dp", "3"), 0);
    assert_int_equal(whale_submit_check(&unknown, true), -1);
    assert_string_equal(last_err, "whale: --whale-ep=2 must divide the data-parallel degree "
                                  "--whale-dp=3: expert groups are carved out of the "
                                  "data-parallel ranks (allowed --whale-ep: 1, 3)");
    /* DP derived: -n6 with TP=2 gives DP=3 */
    whale_opts.given[OPT_DP] = false;
    assert_int_equal(opt("whale-tp", "2"), 0);
    struct whale_submit six = { .ntasks = 6 };
    assert_int_equal(whale_submit_check(&six, true), -1);
    assert_non_null(strstr(last_err, "--whale-ep=2 must divide the data-parallel degree DP = 3"));
    struct whale_submit eight = { .ntasks = 8 };
    assert_int_equal(whale_submit_check(&eight, true), 0);
    /* the plan carries it */
    char cpath[256];
    write_file("site.conf", "\n", cpath, sizeof cpath);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", cpath);
    assert_int_equal(whale_site_load(), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "1", &p), 0);
    assert_int_equal(p.ep, 2);
    whale_plan_free(&p);
    /* a plan file that says otherwise is contradicted by name */
    whale_opts.given[OPT_TP] = false;
    char plan[256];
    write_file("plan.json", "{\"version\":1,\"dp\":4,\"ep\":4}", plan, sizeof plan);
    assert_int_equal(opt("whale-plan", plan), 0);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, "u", "1", &p), -1);
    assert_non_null(strstr(last_err, "--whale-ep=2 contradicts the plan file"));
    whale_plan_free(&p);
    unlink(plan);
    unlink(cpath);
}

/* The plugin's plan leaves batch fields the user did not set out of the
 * JSON, so whale-train's own defaults hold. */
static void test_plan_batch_unset(void **st)
{
    (void)st;
    char cpath[256];
    write_file("site.conf", "MaxTP=8\n", cpath, sizeof cpath);
    snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", cpath);
    assert_int_equal(whale_site_load(), 0);
    assert_int_equal(opt("whale-dp", "2"), 0);
    struct whale_plan p;
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, NULL, "1", &p), 0);
    char *js = whale_plan_to_json(&p, 0);
    assert_non_null(js);
    assert_null(strstr(js, "micro_batch"));
    assert_null(strstr(js, "global_batch"));
    free(js);
    whale_plan_free(&p);
    assert_int_equal(opt("whale-microbatch", "3"), 0);
    assert_int_equal(whale_plan_from_options(whale_site.conf, NULL, NULL, "1", &p), 0);
    js = whale_plan_to_json(&p, 0);
    assert_non_null(strstr(js, "\"micro_batch\":3"));
    assert_null(strstr(js, "num_micro_batches"));
    struct whale_plan back;
    assert_int_equal(whale_plan_from_json(js, "t", &back), 0);
    assert_int_equal(back.micro_batch, 3);
    assert_int_equal(back.unset, WHALE_PLAN_UNSET_NUM_MICRO | WHALE_PLAN_UNSET_GLOBAL_BATCH);
    whale_plan_free(&back);
    free(js);
    whale_plan_free(&p);
    unlink(cpath);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/whale-spank-test-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register, setup, teardown),
        cmocka_unit_test_setup_teardown(test_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_site_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_site_config_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_from_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_file, setup, teardown),
        cmocka_unit_test(test_pmix_plugin_lookup),
        cmocka_unit_test_setup_teardown(test_submit_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_batch_unset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ep_option, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return rc;
}
