/* Engine equivalence under tensor x pipeline x data parallelism inside one
 * process (ranks = threads; every group -- TP, PP, DP, the embedding pair --
 * over the in-process fake of tests/unit/inproc/): for a covering
 * set of layouts, schedules, ZeRO stages and recompute policies, the loss of
 * every step of a 10-step run equals the single-rank run within 1e-5
 * relative (T3D_TOL; the bf16 build compares with the single-rank bf16 run). Also: recomputation lowers the activation peak as predicted
 * without changing the loss, and bad layouts are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../inproc/inproc.h"
#include "engine/engine_internal.h"
#include "engine/moe.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"

/* test_engine3d_bf16.c builds this file again for mixed precision */
#ifndef T3D_PRECISION
#define T3D_PRECISION WHALE_PREC_FP32
#define T3D_TOL 1e-5
#endif

/* 10 steps: warm-up (3) and the whole LR schedule, every schedule, ZeRO
 * stage and recompute path taken 10 times; steps 11-20 ran the same code
 * paths again and doubled the suite's longest tests (the four engine_3d*
 * took 130 s of an ASan run). The reference still has to learn (0.12 nats
 * here, 0.1 asked; Llama 0.25). */
#ifndef T3D_STEPS
#define STEPS 10
#else
#define STEPS T3D_STEPS
#endif
#define GB 8     /* global batch (sequences) */
#define SEQ 16
#define VOCAB 64
static int vocab = VOCAB; /* the model's; uneven TP splits use 61 */

struct layout {
    const char *name;
    int tp, pp, dp, zero, micro;      /* micro: sequences per micro-batch */
    enum whale_schedule sched;
    int v;
    enum whale_recompute rc;
    int stage[8], nstage;
    int rclayers[4], nrc;
};
static bool seqpar; /* sequence parallelism for every layout run (test_seqpar) */

struct world3 {
    const struct layout *L;
    struct inproc_world *tpw[8], *ppw[8], *embw[8], *dpw[8];
    double loss[8][STEPS];
    double eval[8];
    int64_t act_peak[8];
    int rc[8];
    long tp_elems[3]; /* elements moved by the TP groups' collectives, by enum inproc_coll */
};

static struct whale_engine_config cfg_for(const struct layout *L)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "t3d", .layers = 6, .hidden = 32, .heads = 4,
                                         .kv_heads = 4, .ffn = 128, .seq = SEQ, .vocab = vocab,
                                         .tied_embeddings = true };
#ifdef T3D_MODEL_SETUP
    T3D_MODEL_SETUP(&c.model); /* test_engine3d_llama.c: Llama-style blocks */
#endif
    c.seq = SEQ;
    c.micro_batch = L->micro;
    c.grad_accum = GB / L->dp / L->micro;
    c.lr = 3e-3f;
    c.warmup_steps = 3;
    c.total_steps = STEPS;
    c.zero_stage = L->zero;
    c.bucket_bytes = 8 << 10;
    c.threads = 1;
    c.tp = L->tp;
    c.pp = L->pp;
    c.schedule = L->sched;
    c.interleave = L->v;
    c.recompute = L->rc;
    c.seqpar = seqpar;
    c.precision = T3D_PRECISION;
    if (L->nstage) {
        c.stage_layers = L->stage;
        c.n_stage_layers = L->nstage;
    }
    if (L->nrc) {
        c.recompute_layers = L->rclayers;
        c.n_recompute_layers = L->nrc;
    }
    return c;
}

/* Sample i of step s: a deterministic token stream with some structure. */
static void sample(int step, int i, int32_t *in, int32_t *tg)
{
    uint64_t x = (uint64_t)(step * GB + i) * 0x9E3779B97F4A7C15ULL + 12345;
    int32_t tok[SEQ + 1];
    for (int t = 0; t <= SEQ; t++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[t] = t > 0 && (x >> 60) < 8 ? (tok[t - 1] * 7 + 3) % vocab : (int32_t)((x >> 33) % vocab);
    }
    memcpy(in, tok, SEQ * sizeof(int32_t));
    memcpy(tg, tok + 1, SEQ * sizeof(int32_t));
}

static int rank_main(int rank, void *arg)
{
    struct world3 *w = arg;
    const struct layout *L = w->L;
    const int T = L->tp, D = L->dp, P = L->pp;
    const int tr = rank % T, dr = (rank / T) % D, pr = rank / (T * D);
    struct eng_groups g;
    memset(&g, 0, sizeof g);
    if (D > 1)
        inproc_comm(w->dpw[pr * T + tr], dr, &g.dp);
    else
        whale_par_comm_from_group(&g.dp, NULL);
    if (T > 1)
        inproc_comm(w->tpw[pr * D + dr], tr, &g.tp);
    else
        whale_par_comm_from_group(&g.tp, NULL);
    if (P > 1)
        inproc_comm(w->ppw[dr * T + tr], pr, &g.pp);
    else
        whale_par_comm_from_group(&g.pp, NULL);
    if (P > 1 && (pr == 0 || pr == P - 1))
        inproc_comm(w->embw[dr * T + tr], pr == 0 ? 0 : 1, &g.emb);
    else
        whale_par_comm_from_group(&g.emb, NULL);

    struct whale_engine_config c = cfg_for(L);
    whale_engine *e = NULL;
    int rc = eng_create_groups(&c, NULL, &g, &e);
    if (rc)
        return rc;
    const int local = GB / D;
    int32_t *in = malloc(sizeof(int32_t) * local * SEQ), *tg = malloc(sizeof(int32_t) * local * SEQ);
    for (int s = 0; s < STEPS && !rc; s++) {
        for (int i = 0; i < local; i++)
            sample(s, dr * local + i, in + i * SEQ, tg + i * SEQ);
        struct whale_step_stats st;
        rc = whale_engine_step(e, in, tg, &st);
        w->loss[rank][s] = st.loss;
        if (st.act_peak_bytes > w->act_peak[rank])
            w->act_peak[rank] = st.act_peak_bytes;
    }
    /* forward-only over a held-out batch (the pipeline's eval path) */
    for (int i = 0; i < local && !rc; i++)
        sample(STEPS + 7, dr * local + i, in + i * SEQ, tg + i * SEQ);
    if (!rc)
        rc = whale_engine_eval(e, in, tg, &w->eval[rank]);
    free(in);
    free(tg);
    whale_engine_destroy(e);
    return rc;
}

static void run_layout(const struct layout *L, struct world3 *w)
{
    memset(w, 0, sizeof *w);
    w->L = L;
    const int T = L->tp, D = L->dp, P = L->pp;
    for (int i = 0; i < P * D; i++)
        w->tpw[i] = inproc_create(T);
    for (int i = 0; i < D * T; i++) {
        w->ppw[i] = inproc_create(P);
        w->embw[i] = inproc_create(2);
    }
    for (int i = 0; i < P * T; i++)
        w->dpw[i] = inproc_create(D);
    int rc = inproc_run(T * P * D, rank_main, w);
    for (int i = 0; i < P * D; i++) {
        for (int k = 0; k < 3; k++)
            w->tp_elems[k] += inproc_coll_elems(w->tpw[i], (enum inproc_coll)k);
        inproc_destroy(w->tpw[i]);
    }
    for (int i = 0; i < D * T; i++) {
        inproc_destroy(w->ppw[i]);
        inproc_destroy(w->embw[i]);
    }
    for (int i = 0; i < P * T; i++)
        inproc_destroy(w->dpw[i]);
    if (rc)
        fail_msg("layout %s: a rank failed (%d)", L->name, rc);
}

static double ref_loss[STEPS], ref_eval;

static void check_equal(const struct layout *L, struct world3 *w)
{
    double worst = 0;
    for (int r = 0; r < L->tp * L->pp * L->dp; r++)
        for (int s = 0; s < STEPS; s++) {
            double rel = fabs(w->loss[r][s] - ref_loss[s]) / fabs(ref_loss[s]);
            if (rel > worst)
                worst = rel;
            if (rel > T3D_TOL)
                fail_msg("layout %s: rank %d step %d loss %.8f vs single-rank %.8f (rel %.2e)",
                         L->name, r, s + 1, w->loss[r][s], ref_loss[s], rel);
        }
    for (int r = 0; r < L->tp * L->pp * L->dp; r++)
        if (fabs(w->eval[r] - ref_eval) > T3D_TOL * ref_eval)
            fail_msg("layout %s: rank %d eval loss %.8f vs single-rank %.8f", L->name, r,
                     w->eval[r], ref_eval);
    printf("  %-40s loss %.5f -> %.5f, worst rel diff %.1e, eval %.5f\n", L->name,
           w->loss[0][0], w->loss[0][STEPS - 1], worst, w->eval[0]);
}

/* Runs ONE (a single rank) and makes its losses the ones to match. */
static void take_reference(const struct layout *one)
{
    struct world3 *w = malloc(sizeof *w);
    run_layout(one, w);
    memcpy(ref_loss, w->loss[0], sizeof ref_loss);
    ref_eval = w->eval[0];
    free(w);
}

static int setup(void **state)
{
    (void)state;
    static const struct layout one = { "single", 1, 1, 1, 0, 2, WHALE_SCHED_1F1B, 1,
                                       WHALE_RECOMPUTE_NONE, { 0 }, 0, { 0 }, 0 };
    take_reference(&one);
    if (!(ref_loss[STEPS - 1] < ref_loss[0] - 0.1)) {
        fprintf(stderr, "reference run does not learn: %f -> %f\n", ref_loss[0],
                ref_loss[STEPS - 1]);
        return -1;
    }
    return 0;
}

#define LAY(n, tp, pp, dp, z, mb, sc, v, rc) \
    { n, tp, pp, dp, z, mb, WHALE_SCHED_##sc, v, WHALE_RECOMPUTE_##rc, { 0 }, 0, { 0 }, 0 }

static void run_set(const struct layout *set, int n)
{
    struct world3 *w = malloc(sizeof *w);
    for (int i = 0; i < n; i++) {
        run_layout(&set[i], w);
        check_equal(&set[i], w);
    }
    free(w);
}

static void test_tensor_parallel(void **state)
{
    (void)state;
    static const struct layout set[] = {
        LAY("tp2", 2, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp4", 4, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp2 dp2 zero0", 2, 1, 2, 0, 2, 1F1B, 1, NONE),
        LAY("tp4 dp2 zero3", 4, 1, 2, 3, 1, 1F1B, 1, NONE),
    };
    run_set(set, sizeof set / sizeof *set);
}

static void test_pipeline(void **state)
{
    (void)state;
    static const struct layout set[] = {
        LAY("pp2 1f1b", 1, 2, 1, 0, 2, 1F1B, 1, NONE),
        LAY("pp4 1f1b m8", 1, 4, 1, 0, 1, 1F1B, 1, NONE),
        LAY("pp2 gpipe", 1, 2, 1, 0, 1, GPIPE, 1, NONE),
        LAY("pp2 interleaved v2", 1, 2, 1, 0, 1, INTERLEAVED, 2, NONE),
        LAY("pp4 interleaved v2", 1, 4, 1, 0, 1, INTERLEAVED, 2, NONE),
        LAY("pp1 interleaved v3", 1, 1, 1, 0, 2, INTERLEAVED, 3, NONE),
        { "pp2 uneven [5,1]", 1, 2, 1, 0, 2, WHALE_SCHED_1F1B, 1, WHALE_RECOMPUTE_NONE,
          { 5, 1 }, 2, { 0 }, 0 },
    };
    run_set(set, sizeof set / sizeof *set);
}

static void test_3d_zero(void **state)
{
    (void)state;
    static const struct layout set[] = {
        LAY("tp2 pp2 dp2 zero1", 2, 2, 2, 1, 1, 1F1B, 1, NONE),
        LAY("tp2 pp2 dp2 zero2", 2, 2, 2, 2, 1, 1F1B, 1, NONE),
        LAY("tp2 pp2 dp2 zero3 interleaved", 2, 2, 2, 3, 1, INTERLEAVED, 2, NONE),
        LAY("pp4 dp2 zero1", 1, 4, 2, 1, 1, 1F1B, 1, NONE),
        LAY("tp4 pp2", 4, 2, 1, 0, 2, 1F1B, 1, NONE),
        LAY("pp2 dp2 zero3", 1, 2, 2, 3, 2, 1F1B, 1, NONE),
    };
    run_set(set, sizeof set / sizeof *set);
}

static void test_recompute(void **state)
{
    (void)state;
    static const struct layout set[] = {
        LAY("none", 1, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("selective", 1, 1, 1, 0, 2, 1F1B, 1, SELECTIVE),
        LAY("full", 1, 1, 1, 0, 2, 1F1B, 1, FULL),
        LAY("auto", 1, 1, 1, 0, 2, 1F1B, 1, AUTO),
        LAY("tp2 pp2 full", 2, 2, 1, 0, 2, 1F1B, 1, FULL),
        LAY("pp2 dp2 zero2 selective", 1, 2, 2, 2, 1, 1F1B, 1, SELECTIVE),
        { "layers {0,2,4}", 1, 1, 1, 0, 2, WHALE_SCHED_1F1B, 1, WHALE_RECOMPUTE_LAYERS,
          { 0 }, 0, { 0, 2, 4 }, 3 },
    };
    struct world3 *w = malloc(sizeof *w);
    int64_t peak[4];
    for (size_t i = 0; i < sizeof set / sizeof *set; i++) {
        run_layout(&set[i], w);
        check_equal(&set[i], w);
        if (i < 4)
            peak[i] = w->act_peak[0];
    }
    free(w);
    printf("  activation peak: none %lld, selective %lld, full %lld, auto %lld bytes\n",
           (long long)peak[0], (long long)peak[1], (long long)peak[2], (long long)peak[3]);
#ifndef T3D_SELECTIVE_SAVES
#define T3D_SELECTIVE_SAVES 1
#endif
    /* blocked attention keeps no probabilities: selective saves nothing there */
    assert_true(T3D_SELECTIVE_SAVES ? peak[1] < peak[0] : peak[1] == peak[0]);
    assert_true(peak[2] < peak[1]);
    /* auto's default budget is half of what no recomputation keeps */
    assert_true(peak[3] < peak[0] && peak[3] >= peak[2]);
}

/* Megatron sequence parallelism: the same losses as TP without it (the
 * norm weight gradients are summed over the TP group in another order) */
static void test_seqpar(void **state)
{
    (void)state;
    static const struct layout set[] = {
        LAY("tp2 sp", 2, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp4 sp", 4, 1, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp2 pp2 dp2 zero1 sp", 2, 2, 2, 1, 1, 1F1B, 1, NONE),
        LAY("tp4 dp2 zero3 sp", 4, 1, 2, 3, 1, 1F1B, 1, NONE),
        LAY("tp2 pp2 interleaved full sp", 2, 2, 1, 0, 1, INTERLEAVED, 2, FULL),
        LAY("tp2 pp2 selective sp", 2, 2, 1, 0, 2, 1F1B, 1, SELECTIVE),
    };
    seqpar = true;
    run_set(set, sizeof set / sizeof *set);
    seqpar = false;
}

/* Sequence parallelism communicates through all-gather / reduce-scatter:
 * the TP all-reduces left are the small ones (norm weight gradients, the
 * vocabulary softmax's row statistics). Counted by the in-process fake. */
static void test_seqpar_collectives(void **state)
{
    (void)state;
    static const struct layout tp2 = LAY("tp2", 2, 1, 1, 0, 2, 1F1B, 1, NONE);
    struct world3 *w = calloc(1, sizeof *w);
    long without[3], with[3];
    run_layout(&tp2, w);
    memcpy(without, w->tp_elems, sizeof without);
    seqpar = true;
    run_layout(&tp2, w);
    seqpar = false;
    memcpy(with, w->tp_elems, sizeof with);
    free(w);
    printf("  TP=2 elements per rank: without SP allreduce %ld; with SP allreduce %ld, "
           "reduce-scatter %ld, all-gather %ld\n", without[0], with[0], with[1], with[2]);
    assert_int_equal(without[1] + without[2], 0);
    assert_true(with[1] > 0 && with[2] > 0);
    assert_true(with[0] * 8 < without[0]);
}

static int refuse_rank(int rank, void *arg)
{
    (void)rank;
    struct layout *L = arg;
    struct whale_engine_config c = cfg_for(L);
    whale_engine *e = NULL;
    int rc = eng_create(&c, NULL, NULL, &e);
    whale_engine_destroy(e);
    return rc;
}

static void test_refusals(void **state)
{
    (void)state;
    test_log_capture(true);
    /* TP=3 does not divide the heads; the groups say TP=1 anyway */
    struct layout bad = LAY("bad", 3, 1, 1, 0, 2, 1F1B, 1, NONE);
    assert_int_not_equal(inproc_run(1, refuse_rank, &bad), 0);
    assert_non_null(strstr(test_log_last(), "TP=3"));
    /* interleave without the interleaved schedule */
    struct layout bad2 = LAY("bad2", 1, 1, 1, 0, 2, 1F1B, 2, NONE);
    assert_int_not_equal(inproc_run(1, refuse_rank, &bad2), 0);
    assert_non_null(strstr(test_log_last(), "interleaved"));
    /* stage_layers that do not add up */
    struct layout bad3 = { "bad3", 1, 1, 1, 0, 2, WHALE_SCHED_1F1B, 1, WHALE_RECOMPUTE_NONE,
                           { 5 }, 1, { 0 }, 0 };
    assert_int_not_equal(inproc_run(1, refuse_rank, &bad3), 0);
    assert_non_null(strstr(test_log_last(), "stage_layers"));
    test_log_capture(false);
}

/* A vocabulary TP does not divide (61 over 4: 16,16,16,13 rows) with the
 * tied embedding split across pipeline stages. */
static void test_uneven_vocabulary(void **state)
{
    (void)state;
    static const struct layout one = LAY("single v61", 1, 1, 1, 0, 2, 1F1B, 1, NONE);
    static const struct layout set[] = {
        LAY("tp4 pp2 vocab 61", 4, 2, 1, 0, 2, 1F1B, 1, NONE),
        LAY("tp2 pp2 dp2 zero2 vocab 61", 2, 2, 2, 2, 1, 1F1B, 1, NONE),
    };
    double keep[STEPS], keep_eval = ref_eval;
    memcpy(keep, ref_loss, sizeof keep);
    vocab = 61;
    take_reference(&one);
    run_set(set, sizeof set / sizeof *set);
    vocab = VOCAB;
    memcpy(ref_loss, keep, sizeof keep);
    ref_eval = keep_eval;
}

/* T3D="tp pp dp zero micro sched v rc [stage...]" runs one layout (debugging). */
static void test_env_layout(void **state)
{
    (void)state;
    const char *spec = getenv("T3D");
    if (!spec)
        skip();
    static struct layout L;
    char sc[16], rc[16];
    int n = 0, k = 0;
    memset(&L, 0, sizeof L);
    L.name = spec;
    assert_true(sscanf(spec, "%d %d %d %d %d %15s %d %15s%n", &L.tp, &L.pp, &L.dp, &L.zero,
                       &L.micro, sc, &L.v, rc, &n) == 8);
    assert_int_equal(whale_schedule_parse(sc, &L.sched), 0);
    assert_int_equal(whale_recompute_parse(rc, &L.rc), 0);
    const char *p = spec + n;
    while (sscanf(p, "%d%n", &L.stage[k], &n) == 1 && k < 8) {
        k++;
        p += n;
    }
    L.nstage = k;
    run_set(&L, 1);
}

#ifndef T3D_CUSTOM_MAIN /* test_engine3d_moe.c runs its own set */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_layout),
        cmocka_unit_test(test_tensor_parallel),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_3d_zero),
        cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_uneven_vocabulary),
        cmocka_unit_test(test_seqpar),
        cmocka_unit_test(test_seqpar_collectives),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
#endif
