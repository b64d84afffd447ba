/* WHALE_TRACE writer: valid Chrome trace JSON, per-rank file names,
 * thread-safe recording, and a 1F1B run whose trace shows each stage's
 * forward/backward spans in the schedule's order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../inproc/inproc.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/whale-trace-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("%s: invalid JSON at line %d: %s", path, e.line, e.text);
    return j;
}

static void *spanner(void *arg)
{
    const char *name = arg;
    whale_trace_thread_name(name);
    for (int i = 0; i < 1000; i++) {
        uint64_t t0 = whale_trace_now();
        whale_trace_span("allreduce", "bucket", t0, -1, i);
    }
    return NULL;
}

static void test_file_and_threads(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/t.json", dir);
    assert_int_equal(whale_trace_open(path, 0, 1), 0);
    assert_string_equal(whale_trace_path(), path);
    pthread_t t[3];
    const char *names[3] = { "comm 1", "comm 2", "comm 3" };
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, spanner, (void *)names[i]);
    uint64_t t0 = whale_trace_now();
    whale_trace_span("optimizer", "adamw", t0, -1, -1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(whale_trace_close(), 0);
    assert_false(whale_trace_on());
    /* off: recording is a no-op */
    whale_trace_span("forward", "forward", whale_trace_now(), 0, 0);

    json_t *j = load(path);
    json_t *ev = json_object_get(j, "traceEvents");
    assert_true(json_is_array(ev));
    int spans = 0, opt = 0, threads = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!strcmp(ph, "X")) {
            spans++;
            assert_true(json_real_value(json_object_get(e, "dur")) >= 0);
            if (!strcmp(json_string_value(json_object_get(e, "cat")), "optimizer"))
                opt++;
        } else if (!strcmp(json_string_value(json_object_get(e, "name")), "thread_name")) {
            threads++;
        }
    }
    assert_int_equal(spans, 3001);
    assert_int_equal(opt, 1);
    assert_int_equal(threads, 4);
    json_decref(j);
}

static void test_rank_names(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/run.json", dir);
    assert_int_equal(whale_trace_open(path, 2, 4), 0);
    char want[300];
    snprintf(want, sizeof want, "%s/run-rank2.json", dir);
    assert_string_equal(whale_trace_path(), want);
    assert_int_equal(whale_trace_close(), 0);
    snprintf(path, sizeof path, "%s/r%%r.trace", dir);
    assert_int_equal(whale_trace_open(path, 3, 4), 0);
    snprintf(want, sizeof want, "%s/r3.trace", dir);
    assert_string_equal(whale_trace_path(), want);
    assert_int_equal(whale_trace_close(), 0);
    assert_int_equal(access(want, R_OK), 0);
    /* WHALE_TRACE unset: nothing */
    unsetenv("WHALE_TRACE");
    assert_int_equal(whale_trace_init(0, 1), 0);
    assert_false(whale_trace_on());
    /* unwritable */
    test_log_capture(true);
    assert_int_equal(whale_trace_open("/nonexistent-dir/x.json", 0, 1), WHALE_EIO);
    assert_non_null(strstr(test_log_last(), "/nonexistent-dir/x.json"));
    test_log_capture(false);
}

/* ---- 1F1B trace ---------------------------------------------------------- */

enum { P = 4, M = 8, W = 64 };
struct pipe {
    struct inproc_world *w;
    float buf[P][4][M][W]; /* x, y, gin, gout */
};

static int busy(void *u, int c, int mb, int flags)
{
    (void)u; (void)c; (void)mb; (void)flags;
    usleep(200);
    return 0;
}

struct rk {
    struct pipe *p;
    int r;
};

static void *rb(void *u, enum whale_pp_kind k, int c, int mb)
{
    struct rk *x = u;
    (void)c;
    return x->p->buf[x->r][k == WHALE_PP_FORWARD ? 0 : 2][mb];
}

static const void *sb(void *u, enum whale_pp_kind k, int c, int mb)
{
    struct rk *x = u;
    (void)c;
    return x->p->buf[x->r][k == WHALE_PP_FORWARD ? 1 : 3][mb];
}

static int pipe_rank(int r, void *arg)
{
    struct rk me = { arg, r };
    char name[16];
    snprintf(name, sizeof name, "stage %d", r);
    whale_trace_thread_name(name);
    struct whale_par_comm c;
    inproc_comm(me.p->w, r, &c);
    struct whale_pp_schedule s;
    int rc = whale_pp_schedule_build(WHALE_SCHED_1F1B, P, 1, M, r, &s);
    struct whale_pp_hooks h = { .user = &me, .forward = busy, .backward = busy, .recv_buf = rb,
                                .send_buf = sb, .msg_bytes = W * sizeof(float) };
    if (!rc)
        rc = whale_pp_run(&c, &s, &h, NULL);
    whale_pp_schedule_free(&s);
    return rc;
}

struct span {
    double ts;
    char k;
    int mb;
};

static int by_ts(const void *a, const void *b)
{
    double x = ((const struct span *)a)->ts, y = ((const struct span *)b)->ts;
    return x < y ? -1 : x > y;
}

static void test_1f1b_trace(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/pipe.json", dir);
    assert_int_equal(whale_trace_open(path, 0, 1), 0);
    struct pipe *p = calloc(1, sizeof *p);
    p->w = inproc_create(P);
    assert_int_equal(inproc_run(P, pipe_rank, p), 0);
    assert_int_equal(whale_trace_close(), 0);
    inproc_destroy(p->w);
    free(p);

    json_t *j = load(path);
    json_t *ev = json_object_get(j, "traceEvents");
    /* thread id -> stage */
    int stage_of[64];
    for (int i = 0; i < 64; i++)
        stage_of[i] = -1;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), "thread_name"))
            continue;
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        int st;
        if (sscanf(json_string_value(json_object_get(json_object_get(e, "args"), "name")),
                   "stage %d", &st) == 1)
            stage_of[tid] = st;
    }
    struct span sp[P][2 * M];
    int n[P] = { 0 }, recvs[P] = { 0 };
    json_array_foreach(ev, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!cat)
            continue;
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        assert_true(tid >= 0 && tid < 64 && stage_of[tid] >= 0);
        int st = stage_of[tid];
        if (!strcmp(cat, "recv"))
            recvs[st]++;
        if (strcmp(cat, "forward") && strcmp(cat, "backward"))
            continue;
        assert_true(n[st] < 2 * M);
        sp[st][n[st]].ts = json_real_value(json_object_get(e, "ts"));
        sp[st][n[st]].k = cat[0] == 'f' ? 'F' : 'B';
        sp[st][n[st]].mb = (int)json_integer_value(json_object_get(json_object_get(e, "args"), "mb"));
        n[st]++;
    }
    for (int st = 0; st < P; st++) {
        assert_int_equal(n[st], 2 * M);
        /* every stage receives M activations (not the first) and M gradients (not the last) */
        assert_int_equal(recvs[st], (st > 0 ? M : 0) + (st < P - 1 ? M : 0));
        qsort(sp[st], (size_t)n[st], sizeof sp[st][0], by_ts);
        char got[256] = "", want[256];
        for (int k = 0; k < n[st]; k++) {
            size_t l = strlen(got);
            snprintf(got + l, sizeof got - l, "%s%c0.%d", k ? " " : "", sp[st][k].k, sp[st][k].mb);
        }
        struct whale_pp_schedule s;
        whale_pp_schedule_build(WHALE_SCHED_1F1B, P, 1, M, st, &s);
        whale_pp_schedule_format(&s, want, sizeof want);
        whale_pp_schedule_free(&s);
        assert_string_equal(got, want);
        /* warm-up: stage st runs P-st-1 forwards before its first backward */
        int w = 0;
        while (sp[st][w].k == 'F')
            w++;
        assert_int_equal(w, P - st);
    }
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_and_threads),
        cmocka_unit_test(test_rank_names),
        cmocka_unit_test(test_1f1b_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
