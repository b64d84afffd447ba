/* Host offload, in one process (DP ranks are threads, see
 * ../inproc/inproc.h):
 *  - the arena refuses what exceeds its budget and accounts per category;
 *  - host AdamW (scalar / AVX2 / AVX-512, whatever this CPU runs) is
 *    bit-identical to the engine's AdamW;
 *  - offload none / optimizer / params x ZeRO 0..3 x DP 1, 2 give the same
 *    losses over 20 steps (1e-6 relative; in practice identical);
 *  - the arena peak drops by the offloaded bytes (5 % of the formula);
 *  - a model whose state exceeds a device budget (half of what ZeRO alone
 *    needs) is refused without offload and trains with it;
 *  - the tensor walk (checkpoints, elastic redundancy) sees and restores the
 *    offloaded state: a run restored mid-way continues exactly;
 *  - bf16 / fp16 (fp32 master and moments in the host tier, the mixed host
 *    AdamW, 16-bit params moved back): the same bits as without offload at
 *    the same precision, DP 1 and 2, ZeRO 0..3, restore included; the arena
 *    peak drops by master + moments (12 B x U) and, params, the 16-bit
 *    shard (2 B x S);
 *  - the remote tier (RMA, here to one's own region) in fp32, bf16 and
 *    fp16: the losses of the local run at that precision, restore included;
 *    params mode there too (the ZeRO-3 shard fetched per bucket by RMA get,
 *    the prefetch distance ahead), DP 1 and 2, fp32 / bf16 / fp16;
 *  - the local tier moves through UCX (`self`) or, on request, memcpy. */
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

#include "../inproc/inproc.h"
#include "../inproc/toy_run.h"
#include "engine/engine_internal.h"
#include "whale/arena.h"
#include "whale/comm.h"
#include "whale/data.h"
#include "whale/engine.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/optim.h"

#define STEPS 20
#define GB 8
#define SEQ 16

/* ---- arena ------------------------------------------------------------------ */

static void test_arena(void **st)
{
    (void)st;
    whale_arena *a;
    assert_int_equal(whale_arena_create(1000, NULL, &a), 0);
    void *p = whale_arena_alloc(a, WHALE_MEM_PARAM, 600, 1);
    assert_non_null(p);
    assert_null(whale_arena_alloc(a, WHALE_MEM_GRAD, 500, 0)); /* 1100 > 1000 */
    void *q = whale_arena_alloc(a, WHALE_MEM_GRAD, 400, 0);
    assert_non_null(q);
    struct whale_arena_stats s;
    whale_arena_stats(a, &s);
    assert_int_equal(s.in_use, 1000);
    assert_int_equal(s.peak, 1000);
    assert_int_equal(s.cat_in_use[WHALE_MEM_PARAM], 600);
    assert_int_equal(s.cat_in_use[WHALE_MEM_GRAD], 400);
    assert_int_equal(s.failed, 1);
    whale_arena_free(a, WHALE_MEM_PARAM, p, 600);
    whale_arena_reset_peak(a);
    whale_arena_stats(a, &s);
    assert_int_equal(s.in_use, 400);
    assert_int_equal(s.peak, 400);
    assert_int_equal(s.cat_peak[WHALE_MEM_GRAD], 400);
    /* memory from elsewhere (the MoE EP window) counts against the budget
     * and in its category, and comes back */
    assert_int_equal(whale_arena_charge(a, WHALE_MEM_COMM, 700, 1), WHALE_ENOMEM);
    assert_int_equal(whale_arena_charge(a, WHALE_MEM_COMM, 500, 1), 0);
    whale_arena_stats(a, &s);
    assert_int_equal(s.in_use, 900);
    assert_int_equal(s.cat_peak[WHALE_MEM_COMM], 500);
    assert_null(whale_arena_alloc(a, WHALE_MEM_ACT, 200, 0));
    assert_int_equal(whale_arena_charge(a, WHALE_MEM_COMM, -500, 1), 0);
    whale_arena_stats(a, &s);
    assert_int_equal(s.in_use, 400);
    assert_int_equal(s.cat_in_use[WHALE_MEM_COMM], 0);
    whale_arena_free(a, WHALE_MEM_GRAD, q, 400);
    whale_arena_destroy(a);
    assert_int_equal(whale_parse_size("4096"), 4096);
    assert_int_equal(whale_parse_size("1.5K"), 1536);
    assert_int_equal(whale_parse_size("2GiB"), 2LL << 30);
    assert_int_equal(whale_parse_size("512m"), 512LL << 20);
    assert_true(whale_parse_size("12X") < 0);
    assert_true(whale_parse_size("") < 0);
    assert_true(whale_parse_size("-1G") < 0);
    assert_int_equal(whale_parse_size("100B"), 100); /* whale-bench comm's sizes */
    assert_int_equal(whale_parse_size("64kb"), 64 << 10);
    assert_true(whale_parse_size("1B2") < 0);
}

/* ---- host AdamW ----------------------------------------------------------------- */

/* Two equal AdamW states in BUF, laid out w0 g m0 v0 w1 m1 v1 (N floats
 * each; g shared): weights, gradients and first moments uniform in [-1, 1],
 * second moments in [0, 1e-3], drawn from the generator state *R. */
static void adamw_twins(float *buf, size_t n, uint64_t *r)
{
    for (size_t i = 0; i < 4 * n; i++) {
        *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
        buf[i] = (float)((int64_t)(*r >> 11) % 2000001 - 1000000) * 1e-6f;
    }
    float *v0 = buf + 3 * n;
    for (size_t i = 0; i < n; i++)
        v0[i] = fabsf(v0[i]) * 1e-3f;
    memcpy(buf + 4 * n, buf, n * 4);
    memcpy(buf + 5 * n, buf + 2 * n, n * 4);
    memcpy(buf + 6 * n, v0, n * 4);
}

static void test_host_adamw_bitexact(void **st)
{
    (void)st;
    const size_t ns[] = { 1, 15, 16, 17, 1000, 70001 };
    struct whale_adamw o = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    uint64_t r = 99;
    for (int s = WHALE_SIMD_SCALAR; s <= (int)whale_adamw_best_simd(); s++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            size_t n = ns[k];
            float *buf = malloc(n * 4 * 8);
            float *w0 = buf, *g = buf + n, *m0 = buf + 2 * n, *v0 = buf + 3 * n;
            float *w1 = buf + 4 * n, *m1 = buf + 5 * n, *v1 = buf + 6 * n;
            adamw_twins(buf, n, &r);
            for (int t = 1; t <= 3; t++) {
                whale_adamw_update(&o, t, w0, g, m0, v0, n, 0.5f, t != 2);
                whale_adamw_update_simd((enum whale_simd)s, &o, t, w1, g, m1, v1, n, 0.5f, t != 2);
            }
            assert_memory_equal(w0, w1, n * 4);
            assert_memory_equal(m0, m1, n * 4);
            assert_memory_equal(v0, v1, n * 4);
            free(buf);
        }
        printf("host AdamW %s: bit-identical to the engine's update\n",
               whale_simd_name((enum whale_simd)s));
    }
}

/* ---- engine runs ------------------------------------------------------------------ */

static char data_path[256];

static enum whale_precision run_precision; /* fp32 unless a 16-bit test sets it */

static struct whale_engine_config base_cfg(int dp, int zero, int offload)
{
    struct whale_engine_config c = toy_engine_cfg(3, SEQ, STEPS);
    c.micro_batch = GB / dp;
    c.zero_stage = zero;
    c.offload = offload;
    c.precision = run_precision;
    c.loss_scaling = run_precision == WHALE_PREC_FP16;
    return c;
}

struct run {
    int dp, rank, zero, offload, prefetch, steps;
    bool big; /* state-heavy model: 4 x 256 wide, micro-batch 2 x 4 */
    int64_t budget;
    struct inproc_world *w;
    double loss[STEPS];
    struct whale_engine_memory mem;
    double hidden_sum;
    int rc;
};

/* Non-NULL: every rank attaches the remote tier there (an in-process
 * region shared by the DP threads), rank r at r * REM_SLOT. */
static whale_remote *run_rem;
#define REM_SLOT (8u << 20)

static void *run_rank(void *arg)
{
    struct run *r = arg;
    struct whale_engine_config c = base_cfg(r->dp, r->zero, r->offload);
    c.offload_prefetch = r->prefetch;
    if (r->big) {
        c.model.layers = 4;
        c.model.hidden = 256;
        c.model.ffn = 1024;
        c.micro_batch = 2;
        c.grad_accum = GB / 2 / r->dp;
    }
    c.device_mem = r->budget;
    whale_engine *e = NULL;
    r->rc = toy_engine(&c, r->w, r->rank, &e);
    if (r->rc)
        return NULL;
    if (run_rem && (whale_engine_offload_bytes(e) > REM_SLOT ||
                    (r->rc = whale_engine_offload_attach(e, run_rem, (size_t)r->rank * REM_SLOT)))) {
        r->rc = r->rc ? r->rc : WHALE_ERANGE;
        whale_engine_destroy(e);
        return NULL;
    }
    struct whale_data_config dc = { .paths = data_path, .vocab = 256, .seq = SEQ,
                                    .local_batch = GB / r->dp, .dp_rank = r->rank,
                                    .dp_size = r->dp, .prefetch = false };
    r->rc = toy_train(e, &dc, r->steps ? r->steps : STEPS, r->loss, &r->hidden_sum);
    whale_engine_memory(e, &r->mem);
    whale_engine_destroy(e);
    return NULL;
}

static int run_steps; /* 0: STEPS */

static void run_dp(int dp, int zero, int offload, int prefetch, struct run *runs)
{
    struct inproc_world *w = dp > 1 ? inproc_create(dp) : NULL;
    for (int r = 0; r < dp; r++)
        runs[r] = (struct run){ .dp = dp, .rank = r, .zero = zero, .offload = offload,
                                .prefetch = prefetch, .w = w,
                                .steps = run_steps };
    toy_threads(dp, run_rank, runs, sizeof *runs);
    for (int r = 0; r < dp; r++)
        assert_int_equal(runs[r].rc, 0);
    inproc_destroy(w);
}

static struct run ref;

static int setup(void **st)
{
    (void)st;
    toy_text_make(data_path, sizeof data_path, "offload");
    run_dp(1, 0, WHALE_OFFLOAD_NONE, 0, &ref);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    unlink(data_path);
    return 0;
}

static void check_equiv(int dp, int zero, int offload, int prefetch)
{
    struct run runs[2];
    run_dp(dp, zero, offload, prefetch, runs);
    double worst = toy_worst_rel(runs[0].loss, ref.loss, STEPS);
    for (int s = 0; s < STEPS; s++)
        for (int r = 1; r < dp; r++)
            assert_true(runs[r].loss[s] == runs[0].loss[s]);
    printf("offload=%-9s ZeRO %d DP %d prefetch %d: loss %.6f -> %.6f (reference %.6f -> "
           "%.6f), worst rel diff %.2e, host %.1f KiB, arena peak %.1f KiB, hidden %.2f\n",
           whale_offload_name(offload), zero, dp, prefetch, runs[0].loss[0],
           runs[0].loss[STEPS - 1], ref.loss[0], ref.loss[STEPS - 1], worst,
           runs[0].mem.host_bytes / 1024.0, runs[0].mem.arena_peak / 1024.0,
           runs[0].hidden_sum / STEPS);
    assert_true(worst <= 1e-6);
    assert_true(ref.loss[STEPS - 1] < ref.loss[0] - 0.5); /* it trains */
    if (offload)
        assert_true(runs[0].mem.host_bytes > 0);
    else
        assert_int_equal(runs[0].mem.host_bytes, 0);
}

static void test_equiv_dp1(void **st)
{
    (void)st;
    for (int z = 0; z <= 3; z++) {
        check_equiv(1, z, WHALE_OFFLOAD_NONE, 0);
        check_equiv(1, z, WHALE_OFFLOAD_OPTIMIZER, 0);
    }
    check_equiv(1, 3, WHALE_OFFLOAD_PARAMS, 1);
    check_equiv(1, 3, WHALE_OFFLOAD_PARAMS, 3);
}

static void test_equiv_dp2(void **st)
{
    (void)st;
    for (int z = 0; z <= 3; z++) {
        check_equiv(2, z, WHALE_OFFLOAD_NONE, 0);
        check_equiv(2, z, WHALE_OFFLOAD_OPTIMIZER, 0);
    }
    check_equiv(2, 3, WHALE_OFFLOAD_PARAMS, 1);
    check_equiv(2, 3, WHALE_OFFLOAD_PARAMS, 2);
}

/* From the engine's own layout at DP, ZeRO Z: the update range U (all P
 * parameters for ZeRO 0, else the shard) and the shard S, in elements. */
static void layout_sizes(int dp, int z, double *U, double *S)
{
    struct whale_engine_config c = base_cfg(dp, z, 0);
    whale_engine *e;
    struct inproc_world *w = inproc_create(dp);
    struct whale_par_comm comm;
    inproc_comm(w, 0, &comm);
    assert_int_equal(eng_create(&c, NULL, dp > 1 ? &comm : NULL, &e), 0);
    *U = (double)(z == 0 ? e->P : e->S);
    *S = (double)e->S;
    whale_engine_destroy(e);
    inproc_destroy(w);
}

/* Rank 0's arena peak in run A minus that in run B is WANT bytes (5 %). */
static void drop_is(const char *what, const struct run *a, const struct run *b, double want)
{
    double got = (double)(a[0].mem.arena_peak - b[0].mem.arena_peak);
    printf("%s: arena peak %lld -> %lld B, drop %.0f B, formula %.0f B (%.2f %%), host tier "
           "%lld B\n", what, (long long)a[0].mem.arena_peak, (long long)b[0].mem.arena_peak, got,
           want, 100 * fabs(got - want) / want, (long long)b[0].mem.host_bytes);
    assert_true(fabs(got - want) / want < 0.05);
}

/* Arena peak without offload minus with it = the offloaded bytes:
 * optimizer: 2 moments x 4 B x U (U = update range: P for ZeRO 0, else the
 * shard S); params: also the ZeRO-3 weight shard (4 B x S). */
static void test_memory_drop(void **st)
{
    (void)st;
    run_steps = 2; /* the peak is reached in the first step */
    for (int dp = 1; dp <= 2; dp++) {
        for (int z = 0; z <= 3; z++) {
            for (int off = 1; off <= 2; off++) {
                if (off == WHALE_OFFLOAD_PARAMS && z != 3)
                    continue;
                struct run a[2], b[2];
                run_dp(dp, z, WHALE_OFFLOAD_NONE, 1, a);
                run_dp(dp, z, off, 1, b);
                double U, S;
                layout_sizes(dp, z, &U, &S);
                char what[64];
                snprintf(what, sizeof what, "DP %d ZeRO %d offload=%s", dp, z,
                         whale_offload_name(off));
                drop_is(what, a, b, 8 * U + (off == WHALE_OFFLOAD_PARAMS ? 4 * S : 0));
            }
        }
    }
    run_steps = 0;
}

/* Half of what ZeRO 3 alone needs at DP 1 (weights + gradients + moments +
 * activations) for a model whose state dominates: refused without offload
 * with the numbers, trains with offload=params (the same losses). */
#define BSTEPS 4
static void test_budget(void **st)
{
    (void)st;
    struct run a = { .dp = 1, .zero = 3, .offload = WHALE_OFFLOAD_NONE, .prefetch = 1,
                     .steps = BSTEPS, .big = true };
    run_rank(&a);
    assert_int_equal(a.rc, 0);
    int64_t need = a.mem.arena_peak;
    struct run r = { .dp = 1, .zero = 3, .offload = WHALE_OFFLOAD_NONE, .prefetch = 1,
                     .budget = need / 2, .steps = BSTEPS, .big = true };
    run_rank(&r);
    printf("ZeRO 3 alone peaks at %lld B; with a budget of %lld B: %s\n", (long long)need,
           (long long)need / 2, whale_strerror(r.rc));
    assert_int_equal(r.rc, WHALE_ENOFIT);
    /* the persistent state alone exceeds the budget */
    assert_true(a.mem.param_bytes + a.mem.grad_bytes + a.mem.optim_bytes > need / 2);
    r = (struct run){ .dp = 1, .zero = 3, .offload = WHALE_OFFLOAD_PARAMS, .prefetch = 1,
                      .budget = need / 2, .steps = BSTEPS, .big = true };
    run_rank(&r);
    assert_int_equal(r.rc, 0);
    printf("offload=params in %lld B: arena peak %lld B, host %lld B, loss %.4f -> %.4f "
           "(without a budget and offload %.4f -> %.4f)\n", (long long)need / 2,
           (long long)r.mem.arena_peak, (long long)r.mem.host_bytes, r.loss[0],
           r.loss[BSTEPS - 1], a.loss[0], a.loss[BSTEPS - 1]);
    assert_true(r.mem.arena_peak <= need / 2);
    for (int s = 0; s < BSTEPS; s++)
        assert_true(r.loss[s] == a.loss[s]);
}

/* Checkpoint-style round trip through whale_engine_tensors with the state
 * offloaded: copy every piece of a run stopped at step 10 into a fresh
 * engine, which must then continue exactly like the uninterrupted run. */
struct snap {
    float *buf[64 * 4];
    size_t len[64 * 4];
    int n, i;
    bool restore;
};

static int snap_piece(const struct whale_tensor_piece *p, void *user)
{
    struct snap *s = user;
    size_t b = (size_t)(p->flat_end - p->flat_begin) * (p->dtype == WHALE_FLOAT32 ? 4 : 2);
    if (!s->restore) {
        assert_true(s->n < 64 * 4);
        s->buf[s->n] = malloc(b);
        memcpy(s->buf[s->n], p->data, b);
        s->len[s->n++] = b;
    } else {
        assert_true(s->i < s->n && s->len[s->i] == b);
        memcpy(p->data, s->buf[s->i++], b);
    }
    return 0;
}

/* The tensor walk of E into SN and its training state into TS; E is gone. */
static void snap_take(whale_engine *e, struct snap *sn, struct whale_train_state *ts)
{
    *sn = (struct snap){ .n = 0 };
    assert_int_equal(whale_engine_tensors(e, snap_piece, sn), 0);
    whale_engine_get_state(e, ts);
    whale_engine_destroy(e);
}

/* Everything snap_take kept, into the fresh engine F. */
static void snap_give(whale_engine *f, struct snap *sn, const struct whale_train_state *ts)
{
    sn->restore = true;
    assert_int_equal(whale_engine_tensors(f, snap_piece, sn), 0);
    assert_int_equal(whale_engine_set_state(f, ts), 0);
}

static void snap_free(struct snap *sn)
{
    for (int i = 0; i < sn->n; i++)
        free(sn->buf[i]);
}

/* The single-rank reader of the test data. */
static whale_data *open_data(void)
{
    struct whale_data_config dc = { .paths = data_path, .vocab = 256, .seq = SEQ,
                                    .local_batch = GB, .dp_rank = 0, .dp_size = 1 };
    whale_data *d = NULL;
    assert_int_equal(whale_data_open(&dc, &d), 0);
    return d;
}

/* Steps FROM to TO - 1 of E on D; with WANT, each loss must equal WANT[step]. */
static void steps_on(whale_engine *e, whale_data *d, int from, int to, const double *want)
{
    int32_t in[GB * SEQ], tg[GB * SEQ];
    struct whale_train_state ts;
    struct whale_step_stats sst;
    for (int s = from; s < to; s++) {
        whale_engine_get_state(e, &ts);
        assert_int_equal(whale_data_next(d, ts.samples, in, tg), 0);
        assert_int_equal(whale_engine_step(e, in, tg, &sst), 0);
        if (want)
            assert_true(sst.loss == want[s]);
    }
}

/* Stop at step 10, restore into a fresh engine: the later losses are WANT's
 * (those of the uninterrupted run at this precision). */
static void resume_case(int zero, int offload, const double *want)
{
    struct whale_engine_config c = base_cfg(1, zero, offload);
    whale_data *d = open_data();
    whale_engine *e, *f;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    steps_on(e, d, 0, STEPS / 2, NULL);
    struct snap sn;
    struct whale_train_state ts;
    snap_take(e, &sn, &ts);
    assert_int_equal(eng_create(&c, NULL, NULL, &f), 0);
    snap_give(f, &sn, &ts);
    steps_on(f, d, STEPS / 2, STEPS, want);
    printf("%s restore at step %d with offload=%s ZeRO %d: steps %d..%d equal the "
           "uninterrupted run\n", whale_precision_name(run_precision), STEPS / 2,
           whale_offload_name(offload), zero, STEPS / 2 + 1, STEPS);
    snap_free(&sn);
    whale_engine_destroy(f);
    whale_data_close(d);
}

static void test_tensors_resume(void **st)
{
    (void)st;
    resume_case(0, WHALE_OFFLOAD_OPTIMIZER, ref.loss);
    resume_case(2, WHALE_OFFLOAD_OPTIMIZER, ref.loss);
    resume_case(3, WHALE_OFFLOAD_OPTIMIZER, ref.loss);
    resume_case(3, WHALE_OFFLOAD_PARAMS, ref.loss);
}

/* A remote tier in a world of one: LEN zeroed bytes of this process
 * registered with CTX and the handle that reaches them (rem[0]). */
struct tier {
    void *mem;
    size_t len;
    whale_region *reg;
    whale_remote **rem;
};

static void tier_open(whale_ctx *ctx, size_t len, struct tier *t)
{
    t->len = len;
    t->mem = calloc(1, len);
    assert_non_null(t->mem);
    assert_int_equal(whale_region_register(ctx, t->mem, len, &t->reg), 0);
    assert_int_equal(whale_region_exchange(whale_all_tasks(ctx), t->reg, &t->rem), 0);
}

static void tier_close(struct tier *t)
{
    whale_remote_free(t->rem[0]);
    free(t->rem);
    whale_region_free(t->reg);
    free(t->mem);
}

/* The remote tier through the RMA API, in a world of one (the handle on
 * one's own region copies locally; the cluster test runs it across nodes):
 * same losses, the moments are found by the tensor walk, and a restore
 * through the walk continues exactly. */
static void remote_case(whale_ctx *ctx, int z, int offload, const double *want)
{
    {
        struct whale_engine_config c = base_cfg(1, z, offload);
        c.offload_prefetch = offload == WHALE_OFFLOAD_PARAMS ? 2 : 0;
        whale_engine *e, *f;
        assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
        size_t need = whale_engine_offload_bytes(e), pad = 4096;
        assert_true(need > 0);
        struct tier t;
        tier_open(ctx, need + pad, &t);
        assert_int_equal(whale_engine_offload_attach(e, t.rem[0], pad), 0);
        struct whale_engine_memory m;
        whale_engine_memory(e, &m);
        assert_true(m.host_bytes < (int64_t)need); /* grads + staging stay local */
        whale_data *d = open_data();
        steps_on(e, d, 0, STEPS / 2, want);
        struct snap sn;
        struct whale_train_state ts;
        snap_take(e, &sn, &ts);
        memset(t.mem, 0, t.len); /* the new engine must get everything from the walk */
        assert_int_equal(eng_create(&c, NULL, NULL, &f), 0);
        assert_int_equal(whale_engine_offload_attach(f, t.rem[0], pad), 0);
        snap_give(f, &sn, &ts);
        steps_on(f, d, STEPS / 2, STEPS, want);
        printf("remote tier (RMA, world of one) %s ZeRO %d offload=%s: %zu B there, %lld B "
               "local host, 20 steps equal, restore through the walk continues exactly\n",
               whale_precision_name(run_precision), z, whale_offload_name(offload), need,
               (long long)m.host_bytes);
        snap_free(&sn);
        whale_engine_destroy(f);
        whale_data_close(d);
        tier_close(&t);
    }
}

static void test_remote_tier(void **st)
{
    (void)st;
    whale_ctx *ctx = NULL;
    assert_int_equal(whale_init(&ctx), 0);
    for (int z = 0; z <= 3; z += 3)
        remote_case(ctx, z, WHALE_OFFLOAD_OPTIMIZER, ref.loss);
    remote_case(ctx, 3, WHALE_OFFLOAD_PARAMS, ref.loss);
    /* 16-bit: the fp32 master lives there too, the mixed update casts into
     * the arena; every loss equals the local run at the same precision */
    const enum whale_precision ps[2] = { WHALE_PREC_BF16, WHALE_PREC_FP16 };
    for (int pi = 0; pi < 2; pi++) {
        run_precision = ps[pi];
        struct run base[1];
        run_dp(1, 0, WHALE_OFFLOAD_NONE, 0, base);
        /* the master in W (ZeRO 0) or Wsh (1..3), the 16-bit params in W16
         * or W16sh (3): bf16 covers both, fp16 the sharded master */
        for (int z = 0; z <= 3; z++)
            if ((pi == 0 && (z == 0 || z == 3)) || (pi == 1 && z == 1))
                remote_case(ctx, z, WHALE_OFFLOAD_OPTIMIZER, base[0].loss);
        /* params: the 16-bit shard lives there too (its own slot) */
        remote_case(ctx, 3, WHALE_OFFLOAD_PARAMS, base[0].loss);
    }
    run_precision = WHALE_PREC_FP32;
    /* without offload there is nothing to attach; a region too small is refused */
    struct whale_engine_config c = base_cfg(1, 3, WHALE_OFFLOAD_NONE);
    whale_engine *e;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    size_t need = 4096;
    struct tier t;
    tier_open(ctx, need, &t);
    assert_int_equal(whale_engine_offload_attach(e, t.rem[0], 0), WHALE_EINVAL);
    whale_engine_destroy(e);
    c = base_cfg(1, 3, WHALE_OFFLOAD_PARAMS);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    assert_true(whale_engine_offload_bytes(e) > need);
    assert_int_equal(whale_engine_offload_attach(e, t.rem[0], 0), WHALE_ERANGE);
    whale_engine_destroy(e);
    tier_close(&t);
    whale_finalize(ctx);
}

/* Params offload to the remote tier with DP 1 and 2 (the DP ranks are
 * threads sharing one in-process region at their own offsets): DP 1 gets
 * each bucket's shard straight into the compute buffer (prefetch 3 and 1),
 * DP 2 fetches its half into a host copy and gathers from it. fp32 gives
 * the no-offload reference; bf16 / fp16 give the bits of the same
 * precision without offload (the 16-bit shard there, the cast staged). */
static void test_remote_params(void **st)
{
    (void)st;
    whale_ctx *ctx = NULL;
    assert_int_equal(whale_init(&ctx), 0);
    struct tier t;
    tier_open(ctx, 2 * (size_t)REM_SLOT, &t);
    const enum whale_precision ps[3] = { WHALE_PREC_FP32, WHALE_PREC_BF16, WHALE_PREC_FP16 };
    for (int pi = 0; pi < 3; pi++) {
        run_precision = ps[pi];
        for (int dp = pi == 2 ? 2 : 1; dp <= 2; dp++) { /* fp16: DP 2 (the loss scaler) */
            struct run base[2], runs[2];
            run_rem = NULL;
            run_dp(dp, 0, WHALE_OFFLOAD_NONE, 0, base);
            run_rem = t.rem[0];
            /* prefetch 1 and deeper in fp32; one distance for the 16-bit runs */
            const int pfs[2] = { dp == 1 ? 3 : 2, 1 };
            for (int i = 0; i < (pi == 0 ? 2 : 1); i++) {
                const int pf = pfs[i];
                memset(t.mem, 0, t.len); /* everything there comes from this run's attach */
                run_dp(dp, 3, WHALE_OFFLOAD_PARAMS, pf, runs);
                double worst = toy_worst_rel(runs[0].loss, base[0].loss, STEPS);
                for (int s = 0; s < STEPS && dp == 2; s++)
                    assert_true(runs[1].loss[s] == runs[0].loss[s]);
                printf("remote params %s DP %d prefetch %d: loss %.6f -> %.6f, worst rel diff "
                       "%.2e against no offload\n", whale_precision_name(ps[pi]), dp, pf,
                       runs[0].loss[0], runs[0].loss[STEPS - 1], worst);
                assert_true(worst <= 1e-6);
                assert_true(runs[0].loss[STEPS - 1] < runs[0].loss[0] - 0.5);
            }
            run_rem = NULL;
        }
    }
    run_precision = WHALE_PREC_FP32;
    tier_close(&t);
    whale_finalize(ctx);
}

/* ---- 16-bit precision ------------------------------------------------------------ */

static void test_mixed_host_bitexact(void **st)
{
    (void)st;
    const size_t n = 300001; /* > one block of the mixed update */
    struct whale_adamw o = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    float *buf = malloc(n * 4 * 7);
    uint16_t *p0 = malloc(n * 2), *p1 = malloc(n * 2);
    assert_non_null(buf);
    assert_non_null(p0);
    assert_non_null(p1);
    float *w0 = buf, *g = buf + n, *m0 = buf + 2 * n, *v0 = buf + 3 * n;
    float *w1 = buf + 4 * n, *m1 = buf + 5 * n, *v1 = buf + 6 * n;
    const enum whale_dtype dts[2] = { WHALE_BFLOAT16, WHALE_FLOAT16 };
    for (int d = 0; d < 2; d++) {
        uint64_t r = 5;
        adamw_twins(buf, n, &r);
        for (int t = 1; t <= 3; t++) {
            whale_adamw_update_mixed(&o, t, w0, g, m0, v0, p0, dts[d], n, 0.5f, t != 2);
            whale_adamw_update_mixed_host(&o, t, w1, g, m1, v1, p1, dts[d], n, 0.5f, t != 2);
        }
        assert_memory_equal(w0, w1, n * 4);
        assert_memory_equal(m0, m1, n * 4);
        assert_memory_equal(v0, v1, n * 4);
        assert_memory_equal(p0, p1, n * 2);
    }
    printf("mixed host AdamW (%s): bit-identical master, moments, bf16 and fp16 params\n",
           whale_simd_name(whale_adamw_simd()));
    free(buf);
    free(p0);
    free(p1);
}

static void test_equiv_lp(void **st)
{
    (void)st;
    const enum whale_precision ps[2] = { WHALE_PREC_BF16, WHALE_PREC_FP16 };
    for (int pi = 0; pi < 2; pi++) {
        run_precision = ps[pi];
        for (int dp = 1; dp <= 2; dp++) {
            struct run base[2];
            run_dp(dp, 0, WHALE_OFFLOAD_NONE, 0, base);
            for (int z = 0; z <= 3; z++) {
                for (int off = 0; off <= 2; off++) {
                    if (off == WHALE_OFFLOAD_PARAMS && z != 3)
                        continue;
                    struct run runs[2];
                    run_dp(dp, z, off, off == WHALE_OFFLOAD_PARAMS ? 2 : 0, runs);
                    for (int s = 0; s < STEPS; s++)
                        assert_true(runs[0].loss[s] == base[0].loss[s]);
                    printf("%s DP %d ZeRO %d offload=%-9s: loss %.6f -> %.6f, every step "
                           "equal to ZeRO 0 without offload\n",
                           ps[pi] == WHALE_PREC_BF16 ? "bf16" : "fp16", dp, z,
                           whale_offload_name(off), runs[0].loss[0], runs[0].loss[STEPS - 1]);
                    assert_true(runs[0].loss[STEPS - 1] < runs[0].loss[0] - 0.5);
                }
            }
        }
    }
    run_precision = WHALE_PREC_FP32;
}

static void test_memory_drop_lp(void **st)
{
    (void)st;
    run_steps = 2;
    run_precision = WHALE_PREC_BF16;
    for (int z = 0; z <= 3; z++) {
        for (int off = 1; off <= 2; off++) {
            if (off == WHALE_OFFLOAD_PARAMS && z != 3)
                continue;
            struct run a[1], b[1];
            run_dp(1, z, WHALE_OFFLOAD_NONE, 1, a);
            run_dp(1, z, off, 1, b);
            double U, S;
            layout_sizes(1, z, &U, &S);
            char what[64];
            snprintf(what, sizeof what, "bf16 ZeRO %d offload=%s", z, whale_offload_name(off));
            drop_is(what, a, b, 12 * U + (off == WHALE_OFFLOAD_PARAMS ? 2 * S : 0));
        }
    }
    run_precision = WHALE_PREC_FP32;
    run_steps = 0;
}

/* bf16 with offload: the walk sees master (host tier), moments and the 16-bit
 * params; a run restored mid-way continues with the uninterrupted losses. */
static void test_resume_lp(void **st)
{
    (void)st;
    run_precision = WHALE_PREC_BF16;
    for (int k = 0; k < 3; k++) {
        const int zero = k == 0 ? 1 : 3, offload = k == 2 ? WHALE_OFFLOAD_PARAMS
                                                          : WHALE_OFFLOAD_OPTIMIZER;
        struct run full[1];
        run_dp(1, zero, offload, 1, full);
        resume_case(zero, offload, full[0].loss);
    }
    run_precision = WHALE_PREC_FP32;
}

/* The local tier moves through UCX (the private endpoint picks `self`) by
 * default and with memcpy on request; both give the reference losses. A
 * bad WHALE_OFFLOAD_MOVER is refused by name. */
static void test_mover(void **st)
{
    (void)st;
    whale_engine *e = NULL;
    struct whale_engine_config c = base_cfg(1, 1, WHALE_OFFLOAD_OPTIMIZER);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    const char *tr = whale_engine_offload_transport(e);
    printf("offload mover (default): %s\n", tr);
    if (!getenv("UCX_TLS"))
        assert_non_null(strstr(tr, "self"));
    assert_string_not_equal(tr, "memcpy");
    whale_engine_destroy(e);
    setenv("WHALE_OFFLOAD_MOVER", "memcpy", 1);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    assert_string_equal(whale_engine_offload_transport(e), "memcpy");
    whale_engine_destroy(e);
    check_equiv(1, 1, WHALE_OFFLOAD_OPTIMIZER, 0);
    check_equiv(1, 3, WHALE_OFFLOAD_PARAMS, 1);
    setenv("WHALE_OFFLOAD_MOVER", "dma", 1);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), WHALE_EINVAL);
    unsetenv("WHALE_OFFLOAD_MOVER");
    c = base_cfg(1, 1, WHALE_OFFLOAD_NONE);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    assert_string_equal(whale_engine_offload_transport(e), "none");
    whale_engine_destroy(e);
}

static void test_refusals(void **st)
{
    (void)st;
    whale_engine *e = NULL;
    struct whale_engine_config c = base_cfg(1, 2, WHALE_OFFLOAD_PARAMS);
    assert_int_equal(eng_create(&c, NULL, NULL, &e), WHALE_EINVAL); /* params needs ZeRO 3 */
    c = base_cfg(1, 3, WHALE_OFFLOAD_PARAMS);
    c.offload_prefetch = 65;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), WHALE_ERANGE);
    assert_null(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena),          cmocka_unit_test(test_host_adamw_bitexact),
        cmocka_unit_test(test_refusals),       cmocka_unit_test(test_equiv_dp1),
        cmocka_unit_test(test_equiv_dp2),      cmocka_unit_test(test_memory_drop),
        cmocka_unit_test(test_budget),         cmocka_unit_test(test_tensors_resume),
        cmocka_unit_test(test_remote_tier),    cmocka_unit_test(test_remote_params),
        cmocka_unit_test(test_mixed_host_bitexact),
        cmocka_unit_test(test_equiv_lp),       cmocka_unit_test(test_memory_drop_lp),
        cmocka_unit_test(test_resume_lp),      cmocka_unit_test(test_mover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
