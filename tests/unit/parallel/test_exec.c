/* Pipeline executor on in-process ranks: a chain of scalar-affine virtual
 * stages trained by every schedule must give exactly the serial loss and
 * gradients; passes run in the schedule's order; hooks fire as documented. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../inproc/inproc.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

#define D 16 /* activation width */

/* Virtual stage s: y = w_s * x + b_s (elementwise); loss = 0.5 sum y^2 at the end. */
struct toy {
    enum whale_schedule kind;
    int p, v, m, lookahead;
    struct inproc_world *w;
    double loss[8];                 /* per pipeline rank (only the last stage's counts) */
    float gw[64], gb[64];           /* per virtual stage, accumulated over micro-batches */
    char order[8][1024];            /* executed passes per rank */
    bool no_done;                   /* the comm table offers no `done` poll */
    int tests[8], tests_pending[8]; /* test calls per rank; of them on unfinished requests */
    int chunk_done[8][8];
    int bad_flags;
};

struct rankctx {
    struct toy *t;
    int rank;
    float *x, *y, *gin, *gout;      /* [chunk][mb][D] */
    int norder;
};

static float wval(int s) { return 0.9f + 0.01f * (float)s; }
static float bval(int s) { return 0.05f * (float)(s % 3); }
static float input(int mb, int i) { return sinf(0.3f * (float)(mb * D + i)) + 0.1f; }

#define AT(a, c, mb) ((a) + (((size_t)(c) * (size_t)t->m) + (size_t)(mb)) * D)

static void note(struct rankctx *r, char k, int c, int mb)
{
    char *o = r->t->order[r->rank];
    size_t n = strlen(o);
    snprintf(o + n, sizeof r->t->order[0] - n, "%s%c%d.%d", n ? " " : "", k, c, mb);
}

static int fwd(void *u, int c, int mb, int flags)
{
    struct rankctx *r = u;
    struct toy *t = r->t;
    int s = whale_pp_vstage(t->p, r->rank, c), S = t->p * t->v;
    float *x = AT(r->x, c, mb), *y = AT(r->y, c, mb);
    if (s == 0)
        for (int i = 0; i < D; i++)
            x[i] = input(mb, i);
    /* x arrived in place through recv_buf */
    for (int i = 0; i < D; i++)
        y[i] = wval(s) * x[i] + bval(s);
    if (s == S - 1)
        for (int i = 0; i < D; i++)
            t->loss[r->rank] += 0.5 * (double)y[i] * y[i];
    if (((flags & WHALE_PP_FIRST_MB) != 0) != (mb == 0))
        __atomic_add_fetch(&t->bad_flags, 1, __ATOMIC_RELAXED);
    note(r, 'F', c, mb);
    return 0;
}

static int bwd(void *u, int c, int mb, int flags)
{
    struct rankctx *r = u;
    struct toy *t = r->t;
    int s = whale_pp_vstage(t->p, r->rank, c), S = t->p * t->v;
    float *x = AT(r->x, c, mb), *y = AT(r->y, c, mb);
    float *gy = AT(r->gin, c, mb), *gx = AT(r->gout, c, mb);
    if (s == S - 1)
        for (int i = 0; i < D; i++)
            gy[i] = y[i];
    for (int i = 0; i < D; i++) {
        t->gw[s] += gy[i] * x[i];
        t->gb[s] += gy[i];
        gx[i] = gy[i] * wval(s);
    }
    /* the send buffer stays valid until `sent`: poison it afterwards */
    int last = (flags & WHALE_PP_LAST_MB) != 0;
    if (last != (mb == t->m - 1))
        __atomic_add_fetch(&t->bad_flags, 1, __ATOMIC_RELAXED);
    note(r, 'B', c, mb);
    return 0;
}

static void *rbuf(void *u, enum whale_pp_kind k, int c, int mb)
{
    struct rankctx *r = u;
    struct toy *t = r->t;
    return k == WHALE_PP_FORWARD ? AT(r->x, c, mb) : AT(r->gin, c, mb);
}

static const void *sbuf(void *u, enum whale_pp_kind k, int c, int mb)
{
    struct rankctx *r = u;
    struct toy *t = r->t;
    return k == WHALE_PP_FORWARD ? AT(r->y, c, mb) : AT(r->gout, c, mb);
}

static void sent(void *u, enum whale_pp_kind k, int c, int mb)
{
    struct rankctx *r = u;
    struct toy *t = r->t;
    if (k == WHALE_PP_BACKWARD) /* gradient sent: nothing reads it again */
        memset(AT(r->gout, c, mb), 0xff, D * sizeof(float));
}

static int done(void *u, int c)
{
    struct rankctx *r = u;
    r->t->chunk_done[r->rank][c]++;
    /* every backward of the chunk must have run */
    const char *o = r->t->order[r->rank];
    int cnt = 0;
    char pat[16];
    snprintf(pat, sizeof pat, "B%d.", c);
    for (const char *q = o; (q = strstr(q, pat)); q++)
        cnt++;
    return cnt == r->t->m ? 0 : WHALE_ESTATE;
}

/* The table's test, counted per rank: with a `done` poll offered the
 * executor must test only requests that have finished (a test of an
 * unfinished send costs a lock and a progress call between two passes). */
static struct toy *cur_toy;
static int (*inner_test)(struct whale_par_comm *, void *, bool *);

static int counting_test(struct whale_par_comm *c, void *req, bool *done)
{
    int rc = inner_test(c, req, done);
    cur_toy->tests[c->rank]++;
    if (!*done)
        cur_toy->tests_pending[c->rank]++;
    return rc;
}

static int rank_main(int rank, void *arg)
{
    struct toy *t = arg;
    size_t n = (size_t)t->v * t->m * D;
    struct rankctx r = { .t = t, .rank = rank };
    r.x = calloc(n, sizeof(float));
    r.y = calloc(n, sizeof(float));
    r.gin = calloc(n, sizeof(float));
    r.gout = calloc(n, sizeof(float));
    struct whale_par_comm c;
    inproc_comm(t->w, rank, &c);
    inner_test = c.test;
    c.test = counting_test;
    if (t->no_done)
        c.done = NULL;
    struct whale_pp_schedule s;
    int rc = whale_pp_schedule_build(t->kind, t->p, t->v, t->m, rank, &s);
    if (!rc) {
        struct whale_pp_hooks h = { .user = &r, .forward = fwd, .backward = bwd,
                                    .recv_buf = rbuf, .send_buf = sbuf, .sent = sent,
                                    .chunk_done = done, .msg_bytes = D * sizeof(float),
                                    .lookahead = t->lookahead };
        struct whale_pp_stats st;
        rc = whale_pp_run(&c, &s, &h, &st);
        if (!rc && t->p > 1 && st.bytes_sent == 0 && t->v * t->p > 1)
            rc = WHALE_ESTATE;
        char want[1024];
        whale_pp_schedule_format(&s, want, sizeof want);
        if (!rc && strcmp(want, t->order[rank]) != 0)
            rc = WHALE_ESTATE;
        whale_pp_schedule_free(&s);
    }
    free(r.x);
    free(r.y);
    free(r.gin);
    free(r.gout);
    return rc;
}

static void serial(int S, int m, double *loss, float *gw, float *gb)
{
    *loss = 0;
    memset(gw, 0, 64 * sizeof *gw);
    memset(gb, 0, 64 * sizeof *gb);
    float *xs = calloc((size_t)(S + 1) * D, sizeof(float));
    for (int mb = 0; mb < m; mb++) {
        for (int i = 0; i < D; i++)
            xs[i] = input(mb, i);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < D; i++)
                xs[(s + 1) * D + i] = wval(s) * xs[s * D + i] + bval(s);
        float g[D];
        for (int i = 0; i < D; i++) {
            g[i] = xs[S * D + i];
            *loss += 0.5 * (double)g[i] * g[i];
        }
        for (int s = S - 1; s >= 0; s--)
            for (int i = 0; i < D; i++) {
                gw[s] += g[i] * xs[s * D + i];
                gb[s] += g[i];
                g[i] *= wval(s);
            }
    }
    free(xs);
}

static void run_case_done(enum whale_schedule kind, int p, int v, int m, int la, bool no_done)
{
    struct toy *t = calloc(1, sizeof *t);
    cur_toy = t;
    t->no_done = no_done;
    t->kind = kind;
    t->p = p;
    t->v = v;
    t->m = m;
    t->lookahead = la;
    t->w = inproc_create(p);
    int rc = inproc_run(p, rank_main, t);
    if (rc)
        fail_msg("%s p=%d v=%d m=%d: rank failed (%d); order of rank 0: %s",
                 whale_schedule_name(kind), p, v, m, rc, t->order[0]);
    assert_int_equal(t->bad_flags, 0);
    for (int r = 0; r < p; r++)
        for (int c = 0; c < v; c++)
            assert_int_equal(t->chunk_done[r][c], 1);
    double loss;
    float gw[64], gb[64];
    int S = p * v;
    serial(S, m, &loss, gw, gb);
    /* identical arithmetic in the same order: exact */
    assert_true(t->loss[(S - 1) % p] == loss);
    for (int s = 0; s < S; s++) {
        assert_true(gw[s] == t->gw[s]);
        assert_true(gb[s] == t->gb[s]);
    }
    long msgs = inproc_messages(t->w);
    assert_int_equal(msgs, p == 1 ? 0 : 2L * (S - 1) * m);
    for (int r = 0; r < p; r++) {
        /* a send is tested at most once per pass after it; never an
         * unfinished one when the table can say so for free */
        assert_true(t->tests[r] <= 2 * v * m * 2 * v * m);
        if (!no_done && t->tests_pending[r])
            fail_msg("%s p=%d v=%d m=%d rank %d: %d tests of unfinished sends (of %d) "
                     "although the table offers `done`", whale_schedule_name(kind), p, v, m,
                     r, t->tests_pending[r], t->tests[r]);
    }
    inproc_destroy(t->w);
    free(t);
}

static void run_case(enum whale_schedule kind, int p, int v, int m, int la)
{
    run_case_done(kind, p, v, m, la, false);
}

static void test_without_done(void **state)
{
    (void)state;
    /* a table without the poll: sends are tested between passes as before,
     * some before they finish (the receiver posts late), results exact */
    for (int p = 2; p <= 4; p++) {
        run_case_done(WHALE_SCHED_1F1B, p, 1, 6, 1, true);
        run_case_done(WHALE_SCHED_INTERLEAVED, p, 2, 2 * p, 1, true);
    }
}

static void test_all_schedules(void **state)
{
    (void)state;
    for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 6; m++) {
            run_case(WHALE_SCHED_1F1B, p, 1, m, 1);
            run_case(WHALE_SCHED_GPIPE, p, 1, m, 1);
            run_case(WHALE_SCHED_1F1B, p, 1, m, 3);
        }
    for (int p = 1; p <= 4; p++)
        for (int v = 2; v <= 3; v++)
            for (int k = 1; k <= 2; k++) {
                run_case(WHALE_SCHED_INTERLEAVED, p, v, k * p, 1);
                run_case(WHALE_SCHED_INTERLEAVED, p, v, k * p, 2);
            }
}

static int wrong_group(int rank, void *arg)
{
    (void)rank;
    struct inproc_world *w = arg;
    struct whale_par_comm c;
    inproc_comm(w, 0, &c);
    struct whale_pp_schedule s;
    whale_pp_schedule_build(WHALE_SCHED_1F1B, 2, 1, 2, 1, &s);
    struct whale_pp_hooks h = { .forward = fwd, .backward = bwd, .recv_buf = rbuf,
                                .send_buf = sbuf, .msg_bytes = 4 };
    int rc = whale_pp_run(&c, &s, &h, NULL);
    whale_pp_schedule_free(&s);
    return rc;
}

static void test_rank_mismatch(void **state)
{
    (void)state;
    struct inproc_world *w = inproc_create(2);
    test_log_capture(true);
    assert_int_equal(inproc_run(1, wrong_group, w), WHALE_EINVAL);
    test_log_capture(false);
    inproc_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_schedules),
        cmocka_unit_test(test_rank_mismatch),
        cmocka_unit_test(test_without_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
