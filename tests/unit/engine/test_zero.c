/* Data parallelism and ZeRO inside one process (ranks = threads, see
 * tests/unit/inproc): DP = 2 and 4 with ZeRO 0-3 give the single-rank loss at
 * every step of a 20-step run (1e-5 relative); per-rank parameter, gradient
 * and optimizer bytes follow the ZeRO formulas (5 %); tensor enumeration
 * covers every element exactly once across ranks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "../inproc/inproc.h"
#include "../inproc/toy_run.h"
#include "whale/data.h"
#include "whale/engine.h"

#define STEPS 20
#define GB 8   /* global batch */
#define SEQ 16

static char data_path[256];

static struct whale_engine_config base_cfg(int dp, int zero, int accum)
{
    struct whale_engine_config c = toy_engine_cfg(2, SEQ, STEPS);
    c.grad_accum = accum;
    c.micro_batch = GB / dp / accum;
    c.zero_stage = zero;
    return c;
}

struct run {
    int dp, rank, zero, accum;
    struct inproc_world *w;
    double loss[STEPS];
    struct whale_engine_memory mem;
    double covered; /* elements of kind PARAM enumerated by this rank as writer */
    int rc;
};

static int count_piece(const struct whale_tensor_piece *p, void *user)
{
    struct run *r = user;
    if (p->kind == WHALE_TENSOR_PARAM && p->writer)
        r->covered += (double)(p->flat_end - p->flat_begin);
    return 0;
}

static void *run_rank(void *arg)
{
    struct run *r = arg;
    struct whale_engine_config c = base_cfg(r->dp, r->zero, r->accum);
    whale_engine *e = NULL;
    r->rc = toy_engine(&c, r->w, r->rank, &e);
    if (r->rc)
        return NULL;
    struct whale_data_config dc = { .paths = data_path, .vocab = 256, .seq = SEQ,
                                    .local_batch = GB / r->dp, .dp_rank = r->rank,
                                    .dp_size = r->dp, .prefetch = true };
    r->rc = toy_train(e, &dc, STEPS, r->loss, NULL);
    whale_engine_memory(e, &r->mem);
    whale_engine_tensors(e, count_piece, r);
    whale_engine_destroy(e);
    return NULL;
}

static void run_dp(int dp, int zero, int accum, struct run *runs)
{
    struct inproc_world *w = dp > 1 ? inproc_create(dp) : NULL;
    for (int r = 0; r < dp; r++)
        runs[r] = (struct run){ .dp = dp, .rank = r, .zero = zero, .accum = accum,
                                .w = w };
    toy_threads(dp, run_rank, runs, sizeof *runs);
    for (int r = 0; r < dp; r++)
        assert_int_equal(runs[r].rc, 0);
    inproc_destroy(w);
}

static struct run ref;

static int setup(void **st)
{
    (void)st;
    toy_text_make(data_path, sizeof data_path, "zero");
    run_dp(1, 0, 1, &ref);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    unlink(data_path);
    return 0;
}

static void check_equiv(int dp, int zero, int accum)
{
    struct run runs[4];
    run_dp(dp, zero, accum, runs);
    double worst = toy_worst_rel(runs[0].loss, ref.loss, STEPS);
    for (int s = 0; s < STEPS; s++)
        for (int r = 1; r < dp; r++)
            assert_true(runs[r].loss[s] == runs[0].loss[s]);
    printf("DP=%d ZeRO=%d accum=%d: loss %.5f -> %.5f (single rank %.5f -> %.5f), worst rel "
           "diff %.2e\n", dp, zero, accum, runs[0].loss[0], runs[0].loss[STEPS - 1], ref.loss[0],
           ref.loss[STEPS - 1], worst);
    assert_true(worst < 1e-5);
    assert_true(ref.loss[STEPS - 1] < ref.loss[0] - 0.5); /* it trains */
    /* every parameter element has exactly one writer */
    double cov = 0;
    for (int r = 0; r < dp; r++)
        cov += runs[r].covered;
    assert_true(cov == (double)runs[0].mem.num_params);
}

static void test_dp2_z0(void **st) { (void)st; check_equiv(2, 0, 1); }
static void test_dp2_z1(void **st) { (void)st; check_equiv(2, 1, 1); }
static void test_dp2_z2(void **st) { (void)st; check_equiv(2, 2, 1); }
static void test_dp2_z3(void **st) { (void)st; check_equiv(2, 3, 1); }
static void test_dp4_z0(void **st) { (void)st; check_equiv(4, 0, 1); }
static void test_dp4_z1(void **st) { (void)st; check_equiv(4, 1, 1); }
static void test_dp4_z2(void **st) { (void)st; check_equiv(4, 2, 1); }
static void test_dp4_z3(void **st) { (void)st; check_equiv(4, 3, 1); }
static void test_dp2_z2_accum(void **st) { (void)st; check_equiv(2, 2, 2); }
static void test_dp2_z0_accum(void **st) { (void)st; check_equiv(2, 0, 2); }

/* ZeRO memory formulas (fp32 training: 4 B weights + 4 B grads + 8 B Adam
 * moments per parameter, N = DP): stage 0: 16; 1: 4 + 4 + 8/N; 2: 4 + 12/N;
 * 3: 16/N bytes per parameter. */
static void test_memory(void **st)
{
    (void)st;
    const int N = 4;
    for (int z = 0; z <= 3; z++) {
        struct whale_engine_config c = base_cfg(N, z, 1);
        c.model.layers = 4;
        c.model.hidden = 128;
        c.model.ffn = 512;
        struct inproc_world *w = inproc_create(N);
        struct whale_par_comm comm;
        inproc_comm(w, 1, &comm);
        whale_engine *e = NULL;
        assert_int_equal(eng_create(&c, NULL, &comm, &e), 0);
        struct whale_engine_memory m;
        whale_engine_memory(e, &m);
        double psi = (double)m.num_params;
        double want[4] = { 16 * psi, (8 + 8.0 / N) * psi, (4 + 12.0 / N) * psi, 16.0 / N * psi };
        double got = (double)(m.param_bytes + m.grad_bytes + m.optim_bytes);
        printf("ZeRO %d, DP %d: %.0f bytes/rank for %.0f params = %.3f B/param (formula %.3f), "
               "diff %.2f %%\n", z, N, got, psi, got / psi, want[z] / psi,
               100 * fabs(got - want[z]) / want[z]);
        whale_engine_destroy(e);
        inproc_destroy(w);
        assert_true(fabs(got - want[z]) / want[z] < 0.05);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp2_z0), cmocka_unit_test(test_dp2_z1),
        cmocka_unit_test(test_dp2_z2), cmocka_unit_test(test_dp2_z3),
        cmocka_unit_test(test_dp4_z0), cmocka_unit_test(test_dp4_z1),
        cmocka_unit_test(test_dp4_z2), cmocka_unit_test(test_dp4_z3),
        cmocka_unit_test(test_dp2_z2_accum), cmocka_unit_test(test_dp2_z0_accum),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
