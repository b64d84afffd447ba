/* Checkpoint retention and the save and load threads: milestones that
 * `keep` never removes (every M steps, or marked), the persist thread at a
 * lower CPU priority than the caller, whale_ckpt_in_flight, reads by
 * several threads (WHALE_CKPT_READERS), and the settings. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt_fixture.h"
#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"
#include "whale/log.h"

static int count_steps(const char *root)
{
    DIR *d = opendir(root);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, "step-", 5);
    if (d)
        closedir(d);
    return n;
}

static whale_ckpt_config cfg_for(const char *root)
{
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    c.root = root;
    c.run_id = "test";
    return c;
}

static void save_x(whale_ckpt *ck, int64_t step, float v)
{
    float x[3] = {v, 2, 3};
    int64_t s[1] = {3};
    whale_ckpt_piece p;
    whale_ckpt_piece_full(&p, "x", WHALE_FLOAT32, 1, s, x);
    whale_ckpt_meta m = {.step = step};
    assert_int_equal(whale_ckpt_save(ck, &m, &p, 1, NULL), 0);
    assert_int_equal(whale_ckpt_wait(ck), 0); /* x is on this stack */
}

/* keep = 2 plus milestones every 200 steps and one marked (step 300): the
 * newest two stay (700, and 600, a milestone anyway), every milestone
 * stays, nothing else does. */
static void test_milestones_survive_keep(void **st)
{
    (void)st;
    char *root = ckpt_test_root("retain");
    whale_ckpt_config c = cfg_for(root);
    c.keep = 2;
    c.milestone_every = 200;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    for (int k = 1; k <= 7; k++) {
        if (k == 3)
            whale_ckpt_mark_milestone(ck);
        save_x(ck, k * 100, (float)k);
    }
    assert_int_equal(whale_ckpt_close(ck), 0);
    const char *kept[] = {"step-00000200", "step-00000300", "step-00000400", "step-00000600",
                          "step-00000700"};
    for (size_t i = 0; i < 5; i++)
        assert_true(ckpt_test_exists(root, kept[i]));
    assert_int_equal(count_steps(root), 5);
    assert_true(ckpt_test_exists(root, "step-00000300/" CKPT_MILESTONE));
    assert_false(ckpt_test_exists(root, "step-00000700/" CKPT_MILESTONE));
    /* a milestone loads like any checkpoint */
    whale_ckpt_reader *r;
    char p[4096];
    snprintf(p, sizeof p, "%s/step-00000200", root);
    assert_int_equal(whale_ckpt_reader_open(p, &r), 0);
    int bad = -1;
    assert_int_equal(whale_ckpt_verify(r, &bad), 0);
    assert_int_equal(bad, 0);
    whale_ckpt_reader_close(r);
    ckpt_rm_rf(root);
    free(root);
}

/* The nice value of every thread of this process but the caller's. */
static int max_thread_nice(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    struct dirent *e;
    int best = -100;
    pid_t me = gettid();
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == me)
            continue;
        char p[512], buf[1024];
        snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        /* fields after the command's closing parenthesis: state is 3,
         * nice is 19 */
        char *q = strrchr(buf, ')');
        int field = 2, nice = 0;
        for (char *tok = q ? strtok(q + 1, " ") : NULL; tok; tok = strtok(NULL, " "))
            if (++field == 19) {
                nice = atoi(tok);
                break;
            }
        if (field == 19 && nice > best)
            best = nice;
    }
    closedir(d);
    return best;
}

/* While a save is written (slowed by the fault hook), some thread of the
 * process runs at the caller's nice + 10; with priority=normal none does. */
static void test_persist_runs_below_the_caller(void **st)
{
    (void)st;
    char *root = ckpt_test_root("retain");
    errno = 0;
    int mine = getpriority(PRIO_PROCESS, 0);
    if (mine > 9) { /* no room to go lower: nothing to check */
        free(root);
        skip();
    }
    setenv("WHALE_CKPT_FAULT", "slow_ms=400", 1);
    for (int normal = 0; normal < 2; normal++) {
        whale_ckpt_config c = cfg_for(root);
        c.priority = normal ? WHALE_CKPT_PRIO_NORMAL : WHALE_CKPT_PRIO_LOW;
        whale_ckpt *ck;
        assert_int_equal(whale_ckpt_open(&c, &ck), 0);
        assert_false(whale_ckpt_in_flight(ck));
        static float x[1024];
        int64_t s[1] = {1024};
        whale_ckpt_piece p;
        whale_ckpt_piece_full(&p, "x", WHALE_FLOAT32, 1, s, x);
        whale_ckpt_meta m = {.step = 1 + normal};
        assert_int_equal(whale_ckpt_save(ck, &m, &p, 1, NULL), 0);
        assert_true(whale_ckpt_in_flight(ck)); /* the write sleeps 400 ms */
        /* the persist thread starts, lowers itself, then writes: look for
         * it while the write sleeps (the save's end is the deadline) */
        int seen = -100;
        while (whale_ckpt_in_flight(ck) && seen < mine + 10) {
            int n = max_thread_nice();
            seen = n > seen ? n : seen;
            usleep(5000);
        }
        if (normal)
            assert_true(seen <= mine);
        else
            assert_int_equal(seen, mine + 10);
        assert_int_equal(whale_ckpt_wait(ck), 0);
        assert_false(whale_ckpt_in_flight(ck));
        assert_int_equal(whale_ckpt_close(ck), 0);
    }
    unsetenv("WHALE_CKPT_FAULT");
    assert_true(ckpt_test_exists(root, "step-00000001") && ckpt_test_exists(root, "step-00000002"));
    ckpt_rm_rf(root);
    free(root);
}

static char logbuf[4096];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", line);
}

static void test_settings(void **st)
{
    (void)st;
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    assert_int_equal(c.priority, WHALE_CKPT_PRIO_LOW);
    assert_int_equal(c.milestone_every, 0);
    setenv("WHALE_CKPT_BUSY", "defer", 1);
    setenv("WHALE_CKPT_PRIORITY", "idle", 1);
    setenv("WHALE_CKPT_MILESTONE_EVERY", "500", 1);
    assert_int_equal(whale_ckpt_config_from_env(&c), 0);
    assert_int_equal(c.busy, WHALE_CKPT_BUSY_DEFER);
    assert_int_equal(c.priority, WHALE_CKPT_PRIO_IDLE);
    assert_int_equal(c.milestone_every, 500);
    whale_log_set_sink(sink, NULL);
    setenv("WHALE_CKPT_PRIORITY", "high", 1);
    assert_int_equal(whale_ckpt_config_from_env(&c), WHALE_EINVAL);
    assert_non_null(strstr(logbuf, "WHALE_CKPT_PRIORITY=high: expected low, normal or idle"));
    setenv("WHALE_CKPT_PRIORITY", "normal", 1);
    setenv("WHALE_CKPT_MILESTONE_EVERY", "-1", 1);
    assert_int_equal(whale_ckpt_config_from_env(&c), WHALE_ERANGE);
    assert_non_null(strstr(logbuf, "WHALE_CKPT_MILESTONE_EVERY=-1"));
    setenv("WHALE_CKPT_BUSY", "later", 1);
    unsetenv("WHALE_CKPT_MILESTONE_EVERY");
    assert_int_equal(whale_ckpt_config_from_env(&c), WHALE_EINVAL);
    assert_non_null(strstr(logbuf, "expected wait, skip or defer"));
    whale_log_set_sink(NULL, NULL);
    unsetenv("WHALE_CKPT_BUSY");
    unsetenv("WHALE_CKPT_PRIORITY");
}

/* Every reader count restores the same bytes; an error of one piece (a
 * tensor the checkpoint lacks) comes back from the parallel read. */
static void test_parallel_read(void **st)
{
    (void)st;
    char *root = ckpt_test_root("retain");
    const struct synth_model m = {.layers = 4, .hidden = 16, .vocab = 64, .seq = 8};
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    assert_int_equal(synth_pieces(&m, &l, true, true, 3, &p, &n), 0);
    whale_ckpt_config c = cfg_for(root);
    c.async = false;
    c.chunk_bytes = 8192;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    whale_ckpt_meta meta = {.step = 3};
    assert_int_equal(whale_ckpt_save(ck, &meta, p, n, NULL), 0);
    assert_int_equal(whale_ckpt_close(ck), 0);
    synth_free(p, n);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step-00000003", root);
    const char *counts[] = {"1", "3", "64"};
    for (int k = 0; k < 3; k++) {
        setenv("WHALE_CKPT_READERS", counts[k], 1);
        assert_int_equal(synth_pieces(&m, &l, false, false, 3, &p, &n), 0);
        whale_ckpt_reader *r;
        assert_int_equal(whale_ckpt_reader_open(dir, &r), 0);
        assert_int_equal(whale_ckpt_read(r, p, n), 0);
        long bad = -1;
        assert_true(synth_check(p, n, 3, 0, 0, 1e-30, &bad) == 0);
        assert_int_equal(bad, 0);
        const char *keep = p[n / 2].name;
        p[n / 2].name = "no.such.tensor";
        logbuf[0] = 0;
        whale_log_set_sink(sink, NULL); /* the refusal is expected */
        assert_int_equal(whale_ckpt_read(r, p, n), WHALE_ENOENT);
        whale_log_set_sink(NULL, NULL);
        assert_non_null(strstr(logbuf, "no.such.tensor"));
        p[n / 2].name = keep;
        whale_ckpt_reader_close(r);
        synth_free(p, n);
    }
    unsetenv("WHALE_CKPT_READERS");
    ckpt_rm_rf(root);
    free(root);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_milestones_survive_keep),
        cmocka_unit_test(test_persist_runs_below_the_caller),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_parallel_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
