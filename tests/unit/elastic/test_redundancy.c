/* The redundancy store against the real engine (ranks = threads over the
 * in-process DP backend of tests/unit/inproc/inproc.h):
 *  - rollback + redo: a step is run, its update "half-applied" (weights
 *    scribbled), everybody rolls back to the last step completed
 *    everywhere and redoes; every loss equals the uninterrupted run's
 *    (1e-6 relative), at DP = 2 with ZeRO 0, 1, 3 and at DP = 1;
 *  - promotion: the "failed" rank's engine is destroyed and a new one (the
 *    spare) takes its state from the holder's copy (unique pieces) and the
 *    surviving replica (replicated pieces);
 *  - a refresh cut short is detected as torn and the other slot still
 *    holds the previous step;
 *  - the holder copy holds no DP-replicated bytes (ZeRO 0: only the
 *    scalars; ZeRO 1: the moments; ZeRO 3: everything). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../inproc/inproc.h"
#include "engine/engine_internal.h"
#include "whale/data.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/redundancy.h"

#define STEPS 10
#define FAIL_STEP 6 /* 1-based step during which rank 1 "fails" */
#define GB 8
#define SEQ 16

static char data_path[256];

/* cmocka's asserts must not run on other threads: record and report */
static int thread_fail;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", \
    __FILE__, __LINE__, #cond); thread_fail = 1; } } while (0)

static void make_data(void)
{
    snprintf(data_path, sizeof data_path, "/tmp/whale-test-red-%d.txt", (int)getpid());
    FILE *f = fopen(data_path, "w");
    assert_non_null(f);
    uint64_t s = 11;
    for (int i = 0; i < 20000; i++) {
        s = s * 6364136223846793005ULL + 1;
        const char *w[] = { "int ", "return ", "x", "->y", " = ", "(", ")", ";\n", "if ", "{",
                            "}", "while (n--) " };
        fputs(w[(s >> 33) % 12], f);
    }
    fclose(f);
}

static struct whale_engine_config cfg(int dp, int zero)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "t", .layers = 2, .hidden = 32, .heads = 4,
                                         .kv_heads = 4, .ffn = 128, .seq = SEQ, .vocab = 256,
                                         .tied_embeddings = true };
    c.seq = SEQ;
    c.grad_accum = 1;
    c.micro_batch = GB / dp;
    c.lr = 3e-3f;
    c.warmup_steps = 2;
    c.total_steps = STEPS;
    c.zero_stage = zero;
    c.bucket_bytes = 16 << 10;
    c.threads = 1;
    return c;
}

struct shared {
    int dp, zero;
    bool elastic;
    struct inproc_world *w;
    whale_engine *eng[2];
    unsigned char *holder[2]; /* rank r's copy lives here */
    size_t slot_bytes[2];
    int64_t local[2][2];      /* survivors' local steps at the failure */
    int64_t held[2][2];
    bool torn[2][2];
    pthread_barrier_t bar;
};

struct run {
    struct shared *sh;
    int rank;
    double loss[STEPS];
    int rc;
    uint64_t remote_bytes, local_bytes, dir_bytes;
};

static int mk_engine(struct run *r, struct whale_par_comm *comm, whale_engine **e)
{
    struct whale_engine_config c = cfg(r->sh->dp, r->sh->zero);
    if (r->sh->dp > 1)
        inproc_comm(r->sh->w, r->rank, comm);
    return eng_create(&c, NULL, r->sh->dp > 1 ? comm : NULL, e);
}

/* Copy the replicated pieces of `src` (a surviving replica) into `dst`
 * (what whale_red_sync_replicated does over a real DP group). */
struct pc { const struct whale_tensor_piece *p; int n; struct whale_tensor_piece v[256]; };
static int collect(const struct whale_tensor_piece *p, void *u)
{
    struct pc *c = u;
    if (c->n < 256)
        c->v[c->n++] = *p;
    return 0;
}
static void copy_replicated(whale_engine *dst, whale_engine *src, int dp, int zero)
{
    static struct pc a, b;
    a.n = b.n = 0;
    whale_engine_tensors(src, collect, &a);
    whale_engine_tensors(dst, collect, &b);
    for (int i = 0; i < b.n; i++) {
        if (!whale_red_piece_replicated(&b.v[i], dp, zero))
            continue;
        int k = -1;
        for (int j = 0; j < a.n && k < 0; j++)
            if (!strcmp(a.v[j].name, b.v[i].name) && a.v[j].kind == b.v[i].kind)
                k = j;
        CHECK(k >= 0 && a.v[k].flat_begin == b.v[i].flat_begin &&
              a.v[k].flat_end == b.v[i].flat_end);
        if (k >= 0)
            memcpy(b.v[i].data, a.v[k].data,
                   (size_t)(a.v[k].flat_end - a.v[k].flat_begin) * whale_dtype_size(a.v[k].dtype));
    }
}

static int scribble(const struct whale_tensor_piece *p, void *u)
{
    (void)u;
    if (p->kind == WHALE_TENSOR_PARAM && p->flat_end > p->flat_begin)
        ((float *)p->data)[0] += 1.0f; /* an update half-applied */
    return 0;
}

static void *run_rank(void *arg)
{
    struct run *r = arg;
    struct shared *sh = r->sh;
    struct whale_par_comm comm;
    whale_engine *e = NULL;
    whale_red *red = NULL;
    if ((r->rc = mk_engine(r, &comm, &e)))
        return NULL;
    struct whale_data_config dc = { .paths = data_path, .vocab = 256, .seq = SEQ,
                                    .local_batch = GB / sh->dp, .dp_rank = r->rank,
                                    .dp_size = sh->dp, .prefetch = false };
    whale_data *d = NULL;
    if ((r->rc = whale_data_open(&dc, &d)))
        return NULL;
    size_t n = (size_t)(GB / sh->dp) * SEQ;
    int32_t *in = malloc(n * 4), *tg = malloc(n * 4);
    if (sh->elastic) {
        struct whale_red_config rc = { .dp = sh->dp, .zero = sh->zero, .every = 1 };
        if ((r->rc = whale_red_create(e, &rc, &red)))
            goto out;
        sh->slot_bytes[r->rank] = whale_red_remote_slot_bytes(red);
        sh->holder[r->rank] = calloc(2, sh->slot_bytes[r->rank]);
        struct whale_red_target t;
        CHECK(whale_red_target_mem(sh->holder[r->rank], 2 * sh->slot_bytes[r->rank], &t) == 0);
        whale_red_set_target(red, &t);
        r->rc = whale_red_snapshot(red, e); /* step 0 */
        struct whale_red_stats s;
        whale_red_get_stats(red, &s);
        r->remote_bytes = s.remote_bytes;
        r->local_bytes = s.local_bytes;
        r->dir_bytes = s.dir_bytes;
    }
    bool failed = false;
    for (int s = 0; s < STEPS && !r->rc; s++) {
        struct whale_train_state ts;
        whale_engine_get_state(e, &ts);
        struct whale_step_stats st;
        if ((r->rc = whale_data_next(d, ts.samples, in, tg)) ||
            (r->rc = whale_engine_step(e, in, tg, &st)))
            break;
        r->loss[s] = st.loss;
        if (!sh->elastic)
            continue;
        if (s + 1 != FAIL_STEP || failed) {
            r->rc = whale_red_snapshot(red, e);
            continue;
        }
        /* Step FAIL_STEP ran, but rank 1 "dies" before everybody completed
         * it: rank 1 got as far as starting the refresh of FAIL_STEP (torn
         * at the holder), rank 0 half-applied its update. */
        if (r->rank == 1 || sh->dp == 1) {
            r->rc = whale_red_snapshot(red, e);
            unsigned char *h = sh->holder[r->rank];
            int slot = FAIL_STEP & 1;
            h[(size_t)slot * sh->slot_bytes[r->rank] + sh->slot_bytes[r->rank] - 1] ^= 0x5a;
        }
        failed = true;
        whale_engine_tensors(e, scribble, NULL);
        whale_red_local_steps(red, sh->local[r->rank]);
        whale_red_scan(sh->holder[r->rank], sh->slot_bytes[r->rank], sh->held[r->rank],
                       sh->torn[r->rank]);
        if (sh->dp > 1)
            pthread_barrier_wait(&sh->bar);
        /* everybody agrees: the last step in every survivor's local images
         * and in the failed rank's held copy */
        const int64_t agreed = FAIL_STEP - 1;
        if (r->rank == 1 && sh->dp > 1) {
            /* the spare: a new engine, state from the holder's copy */
            whale_engine_destroy(e);
            e = NULL;
            if ((r->rc = mk_engine(r, &comm, &e)))
                break;
            bool complete = false;
            r->rc = whale_red_restore_slot(e, sh->holder[1], sh->slot_bytes[1], agreed,
                                           &complete);
            if (r->rc)
                break;
            CHECK(complete == (sh->zero == 3));
            /* its own rollback images are gone with it: start over */
            whale_red_destroy(red);
            struct whale_red_config rc = { .dp = sh->dp, .zero = sh->zero, .every = 1 };
            if ((r->rc = whale_red_create(e, &rc, &red)))
                break;
            pthread_barrier_wait(&sh->bar); /* survivor rolled back */
            if (!complete)
                copy_replicated(e, sh->eng[0], sh->dp, sh->zero);
        } else {
            r->rc = whale_red_rollback(red, e, agreed);
            if (sh->dp > 1) {
                sh->eng[0] = e;
                pthread_barrier_wait(&sh->bar);
            }
        }
        if (sh->dp > 1)
            pthread_barrier_wait(&sh->bar); /* replicated pieces copied */
        whale_engine_get_state(e, &ts);
        CHECK(ts.step == agreed);
        s = (int)agreed - 1; /* redo from step agreed + 1 */
    }
out:
    free(in);
    free(tg);
    whale_data_close(d);
    whale_red_destroy(red);
    whale_engine_destroy(e);
    return NULL;
}

static void run_all(struct shared *sh, struct run *runs)
{
    pthread_t th[2];
    if (sh->dp > 1) {
        sh->w = inproc_create(sh->dp);
        pthread_barrier_init(&sh->bar, NULL, sh->dp);
    }
    for (int i = 0; i < sh->dp; i++) {
        runs[i].sh = sh;
        runs[i].rank = i;
        pthread_create(&th[i], NULL, run_rank, &runs[i]);
    }
    for (int i = 0; i < sh->dp; i++)
        pthread_join(th[i], NULL);
    if (sh->dp > 1) {
        inproc_destroy(sh->w);
        sh->w = NULL;
        pthread_barrier_destroy(&sh->bar);
    }
}

static void check_equivalence(int dp, int zero)
{
    struct shared ref = { .dp = dp, .zero = zero }, el = { .dp = dp, .zero = zero, .elastic = true };
    struct run a[2] = { 0 }, b[2] = { 0 };
    run_all(&ref, a);
    run_all(&el, b);
    assert_int_equal(thread_fail, 0);
    for (int i = 0; i < dp; i++) {
        assert_int_equal(a[i].rc, 0);
        assert_int_equal(b[i].rc, 0);
    }
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(b[0].loss[s] - a[0].loss[s]) / fabs(a[0].loss[s]);
        if (rel > 1e-6)
            fail_msg("dp %d zero %d step %d: loss %.9g after recovery vs %.9g uninterrupted", dp,
                     zero, s + 1, b[0].loss[s], a[0].loss[s]);
    }
    /* the failed rank's refresh of FAIL_STEP is torn; FAIL_STEP-1 intact */
    int f = dp > 1 ? 1 : 0;
    int slot = FAIL_STEP & 1;
    assert_true(el.torn[f][slot]);
    assert_int_equal(el.held[f][slot], -1);
    assert_int_equal(el.held[f][1 - slot], FAIL_STEP - 1);
    /* survivors hold the agreed step locally */
    assert_true(el.local[0][0] == FAIL_STEP - 1 || el.local[0][1] == FAIL_STEP - 1);
    /* the holder gets no DP-replicated bytes (the directory names them) */
    size_t state = sizeof(struct whale_train_state) + 64 + b[0].dir_bytes;
    assert_true(b[0].dir_bytes > 8 && b[0].dir_bytes < b[0].local_bytes / 10);
    if (dp > 1 && zero == 0)
        assert_int_equal(b[0].remote_bytes, state);
    else if (dp > 1 && zero < 3) /* weights stay out: about half of weights + moments */
        assert_true(b[0].remote_bytes > state && b[0].remote_bytes < b[0].local_bytes * 6 / 10);
    else
        assert_int_equal(b[0].remote_bytes, b[0].local_bytes);
    for (int i = 0; i < dp; i++)
        free(el.holder[i]);
}

static void test_rollback_dp1(void **st) { (void)st; check_equivalence(1, 0); }
static void test_replace_dp2_zero0(void **st) { (void)st; check_equivalence(2, 0); }
static void test_replace_dp2_zero1(void **st) { (void)st; check_equivalence(2, 1); }
static void test_replace_dp2_zero3(void **st) { (void)st; check_equivalence(2, 3); }

/* The layout is checked: an image never lands in an engine of another shape. */
static void test_layout_mismatch(void **st)
{
    (void)st;
    struct whale_engine_config c = cfg(1, 0);
    whale_engine *e = NULL, *e2 = NULL;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    c.model.hidden = 64;
    c.model.ffn = 256;
    assert_int_equal(eng_create(&c, NULL, NULL, &e2), 0);
    whale_red *r = NULL;
    struct whale_red_config rc = { .dp = 1, .every = 1 };
    assert_int_equal(whale_red_create(e, &rc, &r), 0);
    assert_int_equal(whale_red_snapshot(r, e), 0);
    assert_int_equal(whale_red_rollback(r, e2, 0), WHALE_EDATA);
    assert_int_equal(whale_red_rollback(r, e, 5), WHALE_ENOENT);
    assert_int_equal(whale_red_rollback(r, e, 0), 0);
    /* a held copy: never-written slots read as absent, not torn */
    size_t sb = whale_red_remote_slot_bytes(r);
    unsigned char *h = calloc(2, sb);
    int64_t steps[2];
    bool torn[2];
    whale_red_scan(h, sb, steps, torn);
    assert_int_equal(steps[0], -1);
    assert_false(torn[0]);
    struct whale_red_target t;
    assert_int_equal(whale_red_target_mem(h, 2 * sb, &t), 0);
    whale_red_set_target(r, &t);
    assert_int_equal(whale_red_snapshot(r, e), 0);
    assert_int_equal(whale_red_flush(r), 0);
    whale_red_scan(h, sb, steps, torn);
    /* the older slot is written (here the second: the first holds step 0
     * locally already) */
    assert_true((steps[0] == 0) != (steps[1] == 0));
    assert_int_equal(whale_red_restore_slot(e2, h, sb, 0, NULL), WHALE_EDATA);
    assert_int_equal(whale_red_restore_slot(e, h, sb, 3, NULL), WHALE_ENOENT);
    assert_int_equal(whale_red_restore_slot(e, h, sb, 0, NULL), 0);
    whale_red_destroy(r);
    free(h);
    whale_engine_destroy(e);
    whale_engine_destroy(e2);
}

static void test_every_env(void **st)
{
    (void)st;
    int k;
    unsetenv("WHALE_REDUNDANCY_EVERY");
    assert_int_equal(whale_red_every_from_env(1, &k), 0);
    assert_int_equal(k, 1);
    setenv("WHALE_REDUNDANCY_EVERY", "4", 1);
    assert_int_equal(whale_red_every_from_env(1, &k), 0);
    assert_int_equal(k, 4);
    setenv("WHALE_REDUNDANCY_EVERY", "four", 1);
    assert_int_equal(whale_red_every_from_env(1, &k), WHALE_EINVAL);
    setenv("WHALE_REDUNDANCY_EVERY", "-2", 1);
    assert_int_equal(whale_red_every_from_env(1, &k), WHALE_EINVAL);
    setenv("WHALE_REDUNDANCY_EVERY", "auto", 1);
    assert_int_equal(whale_red_every_from_env(1, &k), 0);
    assert_int_equal(k, 1);
    unsetenv("WHALE_REDUNDANCY_EVERY");
}

/* adaptive K: the smallest K with refresh / K <= 5 % of a step, up at
 * once, down one at a time with hysteresis, capped, unchanged without data */
static void test_adapt_every(void **st)
{
    (void)st;
    assert_int_equal(whale_red_adapt_every(0.01, 1.0, 0.05, 1, 16), 1);   /* 1 % */
    assert_int_equal(whale_red_adapt_every(0.05, 1.0, 0.05, 1, 16), 1);   /* exactly 5 % */
    assert_int_equal(whale_red_adapt_every(0.06, 1.0, 0.05, 1, 16), 2);
    assert_int_equal(whale_red_adapt_every(0.26, 1.0, 0.05, 1, 16), 6);
    assert_int_equal(whale_red_adapt_every(5.0, 1.0, 0.05, 1, 16), 16);   /* capped */
    /* down: from 3, K = 2 would cost 0.03 / 2 = 1.5 % <= 2.5 %: one step down */
    assert_int_equal(whale_red_adapt_every(0.03, 1.0, 0.05, 3, 16), 2);
    /* from 2, K = 1 would cost 4 % > 2.5 %: stays (no flip-flop) */
    assert_int_equal(whale_red_adapt_every(0.04, 1.0, 0.05, 2, 16), 2);
    /* nothing measured: unchanged (capped) */
    assert_int_equal(whale_red_adapt_every(0.1, 0.0, 0.05, 3, 16), 3);
    assert_int_equal(whale_red_adapt_every(0.0 / 0.0, 1.0, 0.05, 3, 2), 2);
    assert_int_equal(whale_red_adapt_every(0.01, 1.0, 0.05, 0, 16), 1);
}

static int setup(void **st)
{
    (void)st;
    make_data();
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    unlink(data_path);
    return 0;
}

/* whale_red_fill: an image fills an engine by its directory (here the same
 * layout: every element back); a cut image, or one that covers a piece only
 * in part (another shape), is refused naming what is missing. */
static int first_param_fn(const struct whale_tensor_piece *p, void *u)
{
    if (p->kind == WHALE_TENSOR_PARAM && p->flat_end > p->flat_begin && !*(float **)u)
        *(float **)u = p->data;
    return 0;
}
static float first_param(whale_engine *e)
{
    float *f = NULL;
    whale_engine_tensors(e, first_param_fn, &f);
    return f ? *f : NAN;
}

static void test_fill(void **st)
{
    (void)st;
    struct whale_engine_config c = cfg(1, 1);
    whale_engine *e = NULL, *e2 = NULL;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    c.model.hidden = 64;
    c.model.ffn = 256;
    assert_int_equal(eng_create(&c, NULL, NULL, &e2), 0);
    whale_red *r = NULL;
    struct whale_red_config rc = { .dp = 1, .zero = 1, .every = 1 };
    assert_int_equal(whale_red_create(e, &rc, &r), 0);
    assert_int_equal(whale_red_snapshot(r, e), 0);
    struct whale_red_image img;
    size_t ulen = 0;
    assert_int_equal(whale_red_local_image(r, 3, &img, &ulen), WHALE_ENOENT);
    assert_int_equal(whale_red_local_image(r, 0, &img, &ulen), 0);
    assert_true(ulen > sizeof(struct whale_train_state) && ulen <= img.len);
    float before = first_param(e);
    whale_engine_tensors(e, scribble, NULL);
    assert_true(first_param(e) != before);
    assert_int_equal(whale_red_fill(e, &img, 1), 0);
    assert_true(first_param(e) == before);
    struct whale_red_image cut = { img.data, ulen / 2 };
    test_log_capture(true);
    assert_int_equal(whale_red_fill(e, &cut, 1), WHALE_EDATA);
    assert_int_equal(whale_red_fill(e2, &img, 1), WHALE_ENOENT);
    assert_non_null(strstr(test_log_last(), "found in the 1 images"));
    test_log_capture(false);
    whale_red_destroy(r);
    whale_engine_destroy(e);
    whale_engine_destroy(e2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_dp1),      cmocka_unit_test(test_replace_dp2_zero0),
        cmocka_unit_test(test_replace_dp2_zero1), cmocka_unit_test(test_replace_dp2_zero3),
        cmocka_unit_test(test_layout_mismatch),   cmocka_unit_test(test_every_env),
        cmocka_unit_test(test_adapt_every),       cmocka_unit_test(test_fill),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
