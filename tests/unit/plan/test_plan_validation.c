/* The planner against published training runs (tests/data/plan-validation.txt:
 * papers, model cards and framework performance tables, sources cited per
 * row). For every row the published layout (TP, PP, DP, ZeRO, recompute,
 * sequence parallelism, micro-batch where published) is planned on a
 * hypothetical cluster of the published GPUs, and the predicted TFLOP/s
 * per GPU, in the metric the source uses (model FLOPs for MFU-style
 * figures, hardware FLOPs with recompute for Megatron-style ones), is
 * compared with the published figure.
 *
 * The GPU model has three free constants (struct whale_eff_model):
 * gemm_scale (the stack's share of the best-shape GEMM rate), coll_eff
 * (NCCL bus bandwidth / link rate) and lat_scale (x every link's latency).
 * Everything else is a data sheet or a public kernel measurement
 * (runtime/src/plan/gpu.c, cluster.c). The test fits the three on a grid:
 *   - in-sample: on all rows; the library's defaults must be that fit;
 *   - leave-one-source-out: for every source (one paper or page: the part
 *     of the source column before ':'), fitted on all the other sources'
 *     rows, then used to predict the held-out source's rows.
 * The held-out figures are the ones that count. It asserts:
 *   - every published configuration fits in memory;
 *   - held out: median |error| and the share within 15 % (the targets are
 *     10 % and 80 %; the assertions pin what the model reaches, see below);
 *   - of two rows of one job done two ways (same "pair" tag), the faster
 *     is named correctly, held out, whenever they were measured > 10 % apart;
 *   - the library's prediction ranges (range.c) are the 10th-90th
 *     percentile of the held-out errors of each kind (generation x
 *     parallelism family). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"

#define MAXROWS 128

/* what the held-out validation must reach (the issue: 0.10 and 0.80) */
#define HELD_OUT_MEDIAN 0.10
#define HELD_OUT_WITHIN 0.80

/* The grid of the free constants (struct whale_eff_model). */
static const double G_GEMM[] = { 0.75, 0.775, 0.80, 0.825, 0.85, 0.875, 0.90, 0.925, 0.95, 0.975, 1.0 };
static const double G_COLL[] = { 0.6, 0.7, 0.8, 0.9 };
static const double G_LAT[] = { 1 };   /* fixed: NCCL's own latency model (cluster.c) */
static const double G_Z3[] = { 0, 0.2, 0.4, 0.6, 0.8, 1.0 };
#define NG (int)(sizeof G_GEMM / sizeof G_GEMM[0])
#define NC (int)(sizeof G_COLL / sizeof G_COLL[0])
#define NL (int)(sizeof G_LAT / sizeof G_LAT[0])
#define NZ (int)(sizeof G_Z3 / sizeof G_Z3[0])
#define NTHETA (NG * NC * NL * NZ)
#define MISS 1.0   /* |log error| charged for a row that does not fit */

struct theta {
    double gemm, coll, lat, z3;   /* 0 = the library's defaults */
};

static struct theta theta_of(int k)
{
    struct theta t = { G_GEMM[k / (NC * NL * NZ)], G_COLL[(k / (NL * NZ)) % NC], G_LAT[(k / NZ) % NL],
                       G_Z3[k % NZ] };
    return t;
}

struct vrow {
    char id[32], gpu[32], model[64], rc[16], sp[8], z3[8], dpov[8], gred[8], metric[16], pair[16], source[64];
    char mb[8], v[8], seq[8], nic[16], zs[8], eps[8];
    char group[64];   /* the source up to ':' (one paper or page) */
    char kind[32];    /* whale_plan_kind of the published layout */
    int gpn, gpus, tp, pp, zero;   /* zero -1: free */
    int ep;                        /* expert-parallel degree; 0: free */
    bool moe;                      /* the model has experts */
    int pzero;                    /* the ZeRO stage of the planned configuration */
    int pep;                      /* the EP degree of the planned configuration */
    long batch;
    double pub;
    /* results at one theta */
    bool ok;
    double pred, err, mem;
    double t_pred, t_pub;   /* step seconds: predicted, and published (same FLOP count) */
    char cfg[160];
    /* over the grid */
    double lerr[NTHETA];    /* log(pred / pub); NAN = does not fit */
    double tstep[NTHETA];
    /* held out */
    int k_loso;
    double loso_err;
};

static int load_rows(const char *path, struct vrow *rows, int max)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || strspn(line, " \t\r\n") == strlen(line))
            continue;
        assert_true(n < max);
        struct vrow *r = &rows[n];
        memset(r, 0, sizeof *r);
        int k = sscanf(line, "%31s %31s %d %15s %d %63s %7s %ld %d %d %7s %7s %7s %7s %15s %7s %7s %7s %7s %15s %lf %15s %63s",
                       r->id, r->gpu, &r->gpn, r->nic, &r->gpus, r->model, r->seq, &r->batch, &r->tp,
                       &r->pp, r->eps, r->mb, r->v, r->zs, r->rc, r->sp, r->z3, r->dpov, r->gred, r->metric,
                       &r->pub, r->pair, r->source);
        if (k != 23) {
            fprintf(stderr, "%s: bad row (%d fields): %s", path, k, line);
            fail();
        }
        r->zero = strcmp(r->zs, "-") ? atoi(r->zs) : -1;
        /* ep: '-' or a degree that divides the data-parallel ranks and,
         * for a MoE model, its experts (checked when the model loads) */
        r->ep = strcmp(r->eps, "-") ? atoi(r->eps) : 0;
        int dp = r->tp * r->pp > 0 ? r->gpus / (r->tp * r->pp) : 0;
        if (strcmp(r->eps, "-") && (r->ep < 1 || dp % r->ep)) {
            fprintf(stderr, "%s: row %s: ep '%s' must be '-' or a divisor of dp = %d\n", path, r->id, r->eps, dp);
            fail();
        }
        struct whale_model_desc m;
        assert_int_equal(whale_model_desc_load(r->model, &m), 0);
        r->moe = m.moe.experts > 0;
        if (r->ep > 1 && (!r->moe || m.moe.experts % r->ep)) {
            fprintf(stderr, "%s: row %s: ep %d needs a model whose experts it divides (%s: %d experts)\n", path,
                    r->id, r->ep, r->model, m.moe.experts);
            fail();
        }
        snprintf(r->group, sizeof r->group, "%.*s", (int)strcspn(r->source, ":"), r->source);
        n++;
    }
    fclose(f);
    return n;
}

static int rc_of(const char *s)
{
    if (!strcmp(s, "none")) return WHALE_RECOMPUTE_NONE;
    if (!strcmp(s, "selective")) return WHALE_RECOMPUTE_SELECTIVE;
    if (!strcmp(s, "full")) return WHALE_RECOMPUTE_FULL;
    fprintf(stderr, "unknown recompute '%s'\n", s);
    fail();
    return -1;
}

/* Plans the published configuration of row r with the free constants th
 * (NULL: the library's defaults); fills r->ok, pred, err, mem, cfg, t_pred. */
static void run_row(struct vrow *r, const struct theta *th)
{
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load(r->model, &m), 0);
    if (strcmp(r->seq, "-"))
        m.seq = atoi(r->seq);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, r->gpus < r->gpn ? 1 : r->gpus / r->gpn,
                                        r->gpus < r->gpn ? r->gpus : r->gpn, r->gpu), 0);
    if (strcmp(r->nic, "-"))
        c.group[0].gpu.nic_bw = atof(r->nic) * 1e9;
    if (!strcmp(r->z3, "flat"))
        c.eff.zero3_msgs = 1;   /* FSDP: one flat buffer per layer */
    if (!strcmp(r->dpov, "none"))
        c.eff.dp_overlap = 0;   /* DP collectives after the last backward */
    if (!strcmp(r->gred, "fp32"))
        c.eff.grad_reduce_bytes = 4;   /* Megatron-LM's bf16 gradients reduced in fp32 */
    if (th) {
        c.eff.gemm_scale = th->gemm;
        c.eff.coll_eff = th->coll;
        c.eff.lat_scale = th->lat;
        c.eff.zero3_overlap = th->z3;
    }
    struct whale_plan_request rq;
    whale_plan_request_init(&rq);
    rq.model = &m;
    rq.global_batch = r->batch;
    rq.cluster = &c;
    rq.tp = r->tp;
    rq.pp = r->pp;
    rq.dp = r->gpus / (r->tp * r->pp);
    rq.ep = r->ep;
    rq.zero = r->zero;
    rq.offload = WHALE_OFFLOAD_NONE;
    rq.recompute = strcmp(r->rc, "-") ? rc_of(r->rc) : -1;
    rq.seqpar = !strcmp(r->sp, "-") ? -1 : !strcmp(r->sp, "yes");
    if (strcmp(r->mb, "-"))
        rq.microbatch = atoi(r->mb);
    if (strcmp(r->v, "-"))
        rq.interleave = atoi(r->v);
    rq.max_microbatch = 16;
    rq.topk = 1;
    struct whale_plan_result *res = malloc(sizeof *res);
    assert_non_null(res);
    int rc = whale_plan_search(&rq, res);
    r->ok = false;
    if (rc == 0) {
        r->ok = true;
        const struct whale_plan_prediction *p = &res->best.pred;
        r->pred = !strcmp(r->metric, "model") ? p->model_tflops_per_gpu : p->tflops_per_gpu;
        r->err = r->pred / r->pub - 1;
        r->t_pred = p->t_step;
        r->t_pub = p->t_step * r->pred / r->pub;   /* rate = FLOPs / step, one FLOP count */
        r->mem = p->mem_total / 1073741824.0;
        r->pzero = res->best.cfg.zero;
        r->pep = whale_grid_ep(&res->best.cfg.grid);
        whale_plan_format_config(&res->best.cfg, r->cfg, sizeof r->cfg);
        assert_int_equal(whale_plan_kind(&c, &res->best.cfg, r->kind, sizeof r->kind), 0);
    } else {
        snprintf(r->cfg, sizeof r->cfg, "DOES NOT FIT: %.120s", res->why_none);
    }
    free(res);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* q-quantile of sorted v (linear interpolation) */
static double quantile(const double *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1)
        return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* Grid point minimising the mean |log error| over the rows whose group is
 * not `skip` (NULL: all rows); ties go to the lower index. */
static int fit(const struct vrow *rows, int n, const char *skip)
{
    int best = -1;
    double bl = INFINITY;
    for (int k = 0; k < NTHETA; k++) {
        double sum = 0;
        int cnt = 0;
        for (int i = 0; i < n; i++) {
            if (skip && !strcmp(rows[i].group, skip))
                continue;
            sum += isnan(rows[i].lerr[k]) ? MISS : fabs(rows[i].lerr[k]);
            cnt++;
        }
        if (cnt && sum / cnt < bl - 1e-12) {
            bl = sum / cnt;
            best = k;
        }
    }
    return best;
}

/* median |error| and count within 15 % of errors e[] (NAN = no fit) */
static void score(const double *e, int n, double *median, int *within)
{
    double a[MAXROWS];
    *within = 0;
    for (int i = 0; i < n; i++) {
        a[i] = isnan(e[i]) ? INFINITY : fabs(e[i]);
        *within += a[i] <= 0.15;
    }
    *median = median_of(a, n);
}

static void test_validation(void **state)
{
    (void)state;
    static struct vrow rows[MAXROWS];
    int n = load_rows(WHALE_TEST_DATA_DIR "/plan-validation.txt", rows, MAXROWS);
    assert_true(n >= 50);

    /* every row over the grid */
    for (int k = 0; k < NTHETA; k++) {
        struct theta th = theta_of(k);
        for (int i = 0; i < n; i++) {
            run_row(&rows[i], &th);
            rows[i].lerr[k] = rows[i].ok ? log(rows[i].pred / rows[i].pub) : NAN;
            rows[i].tstep[k] = rows[i].ok ? rows[i].t_pred : NAN;
        }
    }
    int kin = fit(rows, n, NULL);
    struct theta tin = theta_of(kin);
    printf("in-sample fit: gemm_scale %.3f, coll_eff %.2f, lat_scale %.2f, zero3_overlap %.2f\n", tin.gemm,
           tin.coll, tin.lat, tin.z3);
    /* held out: one fit per source */
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++)
            first = first && strcmp(rows[j].group, rows[i].group);
        if (!first)
            continue;
        int k = fit(rows, n, rows[i].group);
        struct theta t = theta_of(k);
        int cnt = 0;
        for (int j = 0; j < n; j++)
            if (!strcmp(rows[j].group, rows[i].group)) {
                rows[j].k_loso = k;
                rows[j].loso_err = isnan(rows[j].lerr[k]) ? NAN : exp(rows[j].lerr[k]) - 1;
                cnt++;
            }
        printf("without %-22s (%2d rows): gemm_scale %.3f, coll_eff %.2f, lat_scale %.2f, zero3_overlap %.2f\n",
               rows[i].group, cnt, t.gemm, t.coll, t.lat, t.z3);
    }

    /* the library's defaults are the in-sample fit */
    printf("%-11s %-10s %6s %-12s %5s %-8s %9s %9s %7s %9s %7s %7s  %-16s %s\n", "row", "gpu", "gpus", "model",
           "seq", "metric", "published", "predicted", "error", "held-out", "error", "mem GiB", "kind",
           "planned configuration");
    double ein[MAXROWS], eout[MAXROWS];
    int fits = 0, defaults_off = 0;
    for (int i = 0; i < n; i++) {
        struct vrow *r = &rows[i];
        run_row(r, NULL);
        if (r->ok && !(fabs(log(r->pred / r->pub) - r->lerr[kin]) < 1e-9))
            defaults_off++;
        struct whale_model_desc m;
        assert_int_equal(whale_model_desc_load(r->model, &m), 0);
        int seq = strcmp(r->seq, "-") ? atoi(r->seq) : m.seq;
        ein[i] = r->ok ? r->err : NAN;
        eout[i] = r->loso_err;
        if (r->ok)
            printf("%-11s %-10s %6d %-12s %5d %-8s %9.1f %9.1f %+6.1f%% %9.1f %+6.1f%% %7.1f  %-16s %s\n", r->id,
                   r->gpu, r->gpus, r->model, seq, r->metric, r->pub, r->pred, 100 * r->err,
                   r->pub * (1 + r->loso_err), 100 * r->loso_err, r->mem, r->kind, r->cfg);
        else
            printf("%-11s %-10s %6d %-12s %5d %-8s %9.1f %9s %7s %9s %7s %7s  %-16s %s\n", r->id, r->gpu,
                   r->gpus, r->model, seq, r->metric, r->pub, "-", "-", "-", "-", "-", "-", r->cfg);
        fits += r->ok;
    }

    /* pairs: the same job two ways, held-out step times */
    int pairs = 0, right = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (!strcmp(rows[i].pair, "-") || strcmp(rows[i].pair, rows[j].pair))
                continue;
            const struct vrow *a = &rows[i], *b = &rows[j];
            /* compare steps, not rates: the two may be reported in different
             * metrics (MFU-style and hardware FLOPs) */
            double gap = fmax(a->t_pub, b->t_pub) / fmin(a->t_pub, b->t_pub) - 1;
            double ta = a->tstep[a->k_loso], tb = b->tstep[b->k_loso];
            bool named = !isnan(ta) && !isnan(tb) && (a->t_pub < b->t_pub) == (ta < tb);
            printf("pair %-6s %s %.4g s vs %s %.4g s (measured gap %.0f%%): held out %.4g vs %.4g s, faster %s%s\n",
                   a->pair, a->id, a->t_pub, b->id, b->t_pub, 100 * gap, ta, tb,
                   named ? "named correctly" : "NAMED WRONG", gap > 0.10 ? "" : " (gap <= 10 %: not scored)");
            if (gap > 0.10) {
                pairs++;
                right += named;
            }
        }

    /* by device type and by kind: a bias of a generation or family shows here */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const char *key = pass ? rows[i].kind : rows[i].gpu;
            bool first = true;
            for (int j = 0; j < i; j++)
                first = first && strcmp(pass ? rows[j].kind : rows[j].gpu, key);
            if (!first)
                continue;
            double sum = 0, sabs = 0;
            int k = 0;
            for (int j = 0; j < n; j++)
                if (!strcmp(pass ? rows[j].kind : rows[j].gpu, key) && !isnan(eout[j])) {
                    sum += eout[j];
                    sabs += fabs(eout[j]);
                    k++;
                }
            if (k)
                printf("%-16s %2d rows: held-out mean error %+.1f%%, mean |error| %.1f%%\n", key, k,
                       100 * sum / k, 100 * sabs / k);
        }

    double med_in, med_out;
    int win_in, win_out;
    score(ein, n, &med_in, &win_in);
    score(eout, n, &med_out, &win_out);
    /* the categories the set must cover (GPU generation, scale, sharding) */
    int c_hopper = 0, c_big = 0, c_z3big = 0, c_small = 0, c_moe = 0;
    for (int i = 0; i < n; i++) {
        c_hopper += !strncmp(rows[i].gpu, "H100", 4) || !strncmp(rows[i].gpu, "H200", 4);
        c_big += rows[i].gpus > 4096;
        c_z3big += rows[i].zero == 3 && rows[i].gpus >= 512;
        c_small += rows[i].gpus <= 16;
        c_moe += rows[i].moe;
    }
    printf("rows %d, fitting %d: %d on H100/H200, %d above 4k GPUs, %d ZeRO-3/FSDP at >= 512 GPUs, "
           "%d on <= 16 GPUs, %d mixture-of-experts\n", n, fits, c_hopper, c_big, c_z3big, c_small, c_moe);
    assert_true(c_hopper >= 15);
    assert_true(c_big >= 5);
    assert_true(c_z3big >= 5);
    assert_true(c_small >= 3);
    assert_true(c_moe >= 2);
    /* MoE rows: planned with the published expert parallelism */
    for (int i = 0; i < n; i++)
        if (rows[i].moe) {
            printf("MoE row %-10s ep %d (planned ep %d): in-sample %+.1f%%, held out %+.1f%%\n", rows[i].id,
                   rows[i].ep, rows[i].pep, 100 * ein[i], 100 * eout[i]);
            if (rows[i].ep > 0 && rows[i].ok)
                assert_int_equal(rows[i].pep, rows[i].ep);
        }
    printf("in-sample:             median |error| %.1f%%, within 15%%: %d (%.0f%%)\n", 100 * med_in, win_in,
           100.0 * win_in / n);
    printf("leave-one-source-out:  median |error| %.1f%%, within 15%%: %d (%.0f%%), pairs named correctly %d of %d\n",
           100 * med_out, win_out, 100.0 * win_out / n, right, pairs);
    if (defaults_off)
        printf("the library's defaults (plan_internal.h PLAN_FIT_*) are not the in-sample fit: "
               "%d rows differ\n", defaults_off);
    assert_int_equal(defaults_off, 0);
    /* prediction ranges: published / predicted - 1 = 1 / (1 + e) - 1 over the
     * held-out errors e of a kind; kinds with < 4 rows use all rows */
    printf("range table (runtime/src/plan/range.c):\n");
    int nk = 0, range_off = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? n : 1); i++) {
            const char *key = pass ? rows[i].kind : "all";
            if (pass) {
                bool first = true;
                for (int j = 0; j < i; j++)
                    first = first && strcmp(rows[j].kind, key);
                if (!first)
                    continue;
            }
            double v[MAXROWS];
            int k = 0;
            for (int j = 0; j < n; j++)
                if ((!pass || !strcmp(rows[j].kind, key)) && !isnan(eout[j]))
                    v[k++] = 1 / (1 + eout[j]) - 1;
            if (k < 4)
                continue;
            qsort(v, (size_t)k, sizeof v[0], cmp_dbl);
            double lo = floor(100 * quantile(v, k, 0.1)) / 100, hi = ceil(100 * quantile(v, k, 0.9)) / 100;
            printf("    { \"%s\",%*s %+.2f, %+.2f },   /* %d rows */\n", key, (int)(16 - strlen(key)), "", lo, hi, k);
            /* the library serves this kind's range */
            for (int j = 0; j < n && pass; j++)
                if (!strcmp(rows[j].kind, key)) {
                    struct whale_cluster c;
                    assert_int_equal(whale_cluster_init(&c, 1, 8, rows[j].gpu), 0);
                    struct whale_plan_config cfg = { .tp = rows[j].tp, .pp = rows[j].pp, .zero = rows[j].pzero };
                    double llo, lhi;
                    assert_int_equal(whale_plan_range(&c, &cfg, &llo, &lhi), 0);
                    if (fabs(llo - lo) > 1e-9 || fabs(lhi - hi) > 1e-9) {
                        printf("    ^ range.c has %+.2f, %+.2f: regenerate it\n", llo, lhi);
                        range_off++;
                    }
                    break;
                }
            nk++;
        }
    assert_true(nk >= 2);
    assert_int_equal(range_off, 0);

    assert_int_equal(fits, n);
    /* The targets are held-out median <= 10 % and >= 80 % within
     * 15 %; these pin what the model reaches (docs/planning.md), so that a
     * change that makes it worse fails. */
    assert_true(med_out <= HELD_OUT_MEDIAN);
    assert_true(win_out >= HELD_OUT_WITHIN * n);
    assert_int_equal(right, pairs);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
