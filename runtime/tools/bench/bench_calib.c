/* whale-bench calib: measures what the planner's time model needs on the
 * machine the job actually runs on and writes a calibration profile
 * (whale/plan.h, Key=Value) for `whale-plan --calib FILE`:
 *   - the GEMM rate of one rank at a small and a large square size, fitted
 *     to the planner's d/(d+half) efficiency curve (PeakTFLOPS, GemmHalfDim);
 *   - with several ranks, an all-reduce over the world at 8 B and at a large
 *     size, fitted to the ring model (alpha, per-rank bus bandwidth) of the
 *     link class the ranks span (same node: nvlink class; else leaf).
 * Every rank measures its GEMM at once (as in training, where all ranks
 * compute together); the slowest rank's rate is kept. Rank 0 writes. */
#include "bench_calib.h"

#include <cblas.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "whale/comm.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/plan.h"
#include "whale/clock.h"
#include "whale_config.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: whale-bench calib -o FILE [options]\n"
               "\n"
               "Measure GEMM rate and collective latency/bandwidth where the job runs and\n"
               "write a calibration profile for whale-plan --calib FILE. Run it like the\n"
               "training job: srun --whale-... whale-bench calib, or whale-run -n N.\n"
               "\n"
               "  -o, --output FILE   profile to write (rank 0)\n"
               "  -s, --size BYTES    large all-reduce message (default 16M; K/M suffixes)\n"
               "  -n, --iters N       timed repetitions per measurement (default 5)\n"
               "  -h, --help          this help\n");
}

/* C[d x d] = A[d x d] * B[d x d], best of `iters` (FLOP/s). */
static double gemm_rate(int d, int iters)
{
    size_t n = (size_t)d * d;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)((i * 7 % 13) - 6) / 13.0f;
        b[i] = (float)((i * 5 % 11) - 5) / 11.0f;
    }
    double best = 1e30;
    for (int it = 0; it < iters + 1; it++) {
        double t = whale_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0f, a, d, b, d, 0.0f, c, d);
        t = whale_now_s() - t;
        if (it > 0 && t < best) /* the first call warms up */
            best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * d * (double)d * d / best;
}

/* Median time of an all-reduce of `bytes` over the world. */
static int allreduce_time(whale_group *w, size_t bytes, int iters, double *out)
{
    size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    float *buf = calloc(count, sizeof *buf);
    double *t = calloc((size_t)iters, sizeof *t);
    if (!buf || !t) {
        free(buf);
        free(t);
        return WHALE_ENOMEM;
    }
    int rc = whale_allreduce(w, buf, buf, count, WHALE_FLOAT32, WHALE_SUM); /* warm-up */
    for (int i = 0; !rc && i < iters; i++) {
        rc = whale_barrier(w);
        double s = whale_now_s();
        if (!rc)
            rc = whale_allreduce(w, buf, buf, count, WHALE_FLOAT32, WHALE_SUM);
        double e = whale_now_s() - s;
        /* the slowest rank decides when the collective is done (fp32 is
         * ample for a time: the API has no fp64) */
        float ef = (float)e, emax = 0;
        if (!rc)
            rc = whale_allreduce(w, &ef, &emax, 1, WHALE_FLOAT32, WHALE_MAX);
        t[i] = emax;
    }
    free(buf);
    if (rc) {
        free(t);
        return rc;
    }
    /* sort (iters is small) and take the median */
    for (int i = 1; i < iters; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *out = t[iters / 2];
    free(t);
    return 0;
}

int bench_calib_main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "output", required_argument, 0, 'o' }, { "size", required_argument, 0, 's' },
        { "iters", required_argument, 0, 'n' },  { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *out = NULL;
    long size = 16L << 20, iters = 5;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:s:n:h", lo, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o': out = optarg; break;
        case 's':
            size = (long)whale_parse_size(optarg);
            if (size < 4096 || size > (1L << 30)) {
                fprintf(stderr, "whale-bench calib: --size=%s: expected 4K..1024M\n", optarg);
                return 2;
            }
            break;
        case 'n':
            iters = strtol(optarg, &end, 10);
            if (*end || iters < 1 || iters > 1000) {
                fprintf(stderr, "whale-bench calib: --iters=%s: expected 1..1000\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || optind != argc) {
        fprintf(stderr, "whale-bench calib: %s\n", out ? "unexpected argument" : "-o FILE is required");
        usage(stderr);
        return 2;
    }
    whale_log_init_from_env();
    whale_ctx *ctx;
    if (whale_init(&ctx))
        return 1;
    int rc = 1;
    whale_group *w = whale_world(ctx);
    int p = whale_world_size(ctx), me = whale_rank(ctx);
    struct whale_calib cal;
    memset(&cal, 0, sizeof cal);
    snprintf(cal.source, sizeof cal.source, "whale-bench");
    snprintf(cal.device, sizeof cal.device, "cpu");
    gethostname(cal.host, sizeof cal.host - 1);
    time_t now = time(NULL);
    strftime(cal.date, sizeof cal.date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

    /* GEMM on every rank at once; the slowest rank's rate counts */
    float r[2] = { (float)gemm_rate(128, (int)iters), (float)gemm_rate(1024, (int)iters) }, rmin[2];
    if (whale_allreduce(w, r, rmin, 2, WHALE_FLOAT32, WHALE_MIN))
        goto done;
    if (whale_calib_fit_gemm(128, rmin[0], 1024, rmin[1], &cal))
        goto done;
    int cls = -1;
    double t_tiny = 0, t_large = 0;
    if (p > 1) {
        cls = whale_nnodes(ctx) > 1 ? WHALE_PLAN_LINK_LEAF : WHALE_PLAN_LINK_NVLINK;
        /* On a loaded machine one round can see the tiny message slower
         * than the large one (a rank descheduled mid-measurement). Such a
         * round says nothing about the link: measure again, and after a few
         * inconsistent rounds leave the link uncalibrated (the planner then
         * keeps its site figures) instead of failing the whole profile. */
        bool link_ok = false;
        for (int round = 0; round < 3 && !link_ok; round++) {
            if (allreduce_time(w, 8, (int)iters, &t_tiny) ||
                allreduce_time(w, (size_t)size, (int)iters, &t_large))
                goto done;
            link_ok = t_large > t_tiny;
        }
        if (link_ok && whale_calib_fit_link(p, t_tiny, (double)size, t_large, cls, &cal))
            goto done;
        if (!link_ok) {
            if (me == 0)
                fprintf(stderr, "whale-bench calib: warning: all-reduce timings inconsistent "
                        "(%.1f us at 8 B, %.1f us at %ld B) in 3 rounds: machine too busy; "
                        "link left uncalibrated\n", t_tiny * 1e6, t_large * 1e6, size);
            cls = -1;
        }
    }
    if (me == 0) {
        if (whale_calib_save(out, &cal))
            goto done;
        printf("whale-bench calib: GEMM %.1f GFLOP/s at d=128, %.1f at d=1024 (slowest of %d rank(s))"
               " -> peak %.1f GFLOP/s, half-efficiency dimension %.0f\n",
               rmin[0] / 1e9, rmin[1] / 1e9, p, cal.peak_flops / 1e9, cal.gemm_half_dim);
        if (cls >= 0)
            printf("whale-bench calib: all-reduce over %d ranks (%s): %.1f us at 8 B, %.2f ms at %ld B"
                   " -> alpha %.1f us, bus bandwidth %.2f GB/s\n", p, whale_plan_link_name(cls),
                   t_tiny * 1e6, t_large * 1e3, size, cal.link[cls].alpha * 1e6,
                   cal.link[cls].bw / 1e9);
        printf("whale-bench calib: wrote %s (use: whale-plan --calib %s ...)\n", out, out);
    }
    rc = 0;
done:
    if (whale_finalize(ctx))
        rc = 1;
    return rc;
}
