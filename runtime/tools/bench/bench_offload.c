/* whale-bench offload adamw|bw (see bench_offload.h).
 *
 * adamw: one AdamW step over the parameter tensors of a model preset (the
 * shapes whale-train builds: wte, wpe, per block ln/qkv/proj/fc, final ln),
 * with the host path (whale_adamw_update_host: threads + AVX-512/AVX2) and
 * the engine's plain loop, best and median of R repetitions. The same shapes
 * go to PyTorch in contrib/bench/offload-bench.py.
 *
 * bw: bytes/s of moving S bytes: memcpy, a put/get through the local
 * tier's private UCX endpoint (whale/ltier.h, the engine's mover path; the
 * header names the transports UCX chose), and, with two or more tasks, a
 * put/get from task 0 into task 1's registered memory (shared memory between
 * tasks on one node, the network between nodes: UCX_TLS=tcp,self). */
#define _GNU_SOURCE
#include "bench_offload.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "whale/arena.h"
#include "whale/comm.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/ltier.h"
#include "whale/modeldesc.h"
#include "whale/optim.h"
#include "whale/clock.h"
#include "bench_roofline.h"
#include <math.h>

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: whale-bench offload adamw [-m MODEL] [-r REPS] [--simd scalar|avx2|avx512]\n"
"       whale-bench offload bw [-b MIN] [-e MAX] [-r REPS]\n"
"  adamw  one AdamW step over MODEL's parameter tensors (default gpt2-124m):\n"
"         the host path (one parallel region over all tensors, SIMD chosen at\n"
"         run time), one call per tensor, the engine's plain loop, the bounds\n"
"         (bound-stream28: the same 28 B/param of traffic without arithmetic;\n"
"         bound-compute-l2: the arithmetic on L2-resident data), and as in a\n"
"         training step: with the gradient-norm clip, and mixed (bf16 copy\n"
"         written in the same pass); best/median seconds, params/s, GB/s\n"
"  bw     bandwidth of memcpy, the local tier (RMA through a private UCX\n"
"         endpoint: ltier_put/get), and (2+ tasks,\n"
"         under whale-run or srun) RMA from task 0 into task 1's memory,\n"
"         sizes MIN..MAX doubling (default 1M..64M)\n");
}

/* The parameter tensors of a GPT-2-style model, as numel. */
static int model_sizes(const struct whale_model_desc *m, size_t **out)
{
    int L = m->layers, n = 0;
    size_t C = (size_t)m->hidden, F = (size_t)m->ffn;
    size_t *s = calloc((size_t)(4 + 12 * L), sizeof *s);
    if (!s)
        return -1;
    s[n++] = (size_t)m->vocab * C; /* wte (tied head) */
    s[n++] = (size_t)m->seq * C;   /* wpe */
    for (int l = 0; l < L; l++) {
        size_t t[] = { C, C, 3 * C * C, 3 * C, C * C, C, C, C, F * C, F, C * F, C };
        for (int k = 0; k < 12; k++)
            s[n++] = t[k];
    }
    s[n++] = C;
    s[n++] = C;
    *out = s;
    return n;
}

static int bench_adamw(int argc, char **argv)
{
    const char *model = "gpt2-124m", *simd = NULL;
    int reps = 10, c;
    static const struct option lo[] = { { "model", 1, 0, 'm' }, { "reps", 1, 0, 'r' },
                                        { "simd", 1, 0, 's' }, { "help", 0, 0, 'h' },
                                        { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "m:r:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'r': reps = atoi(optarg); break;
        case 's': simd = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "whale-bench offload adamw: -r %d: expected 1..1000\n", reps);
        return 2;
    }
    enum whale_simd path = whale_adamw_simd();
    if (simd) {
        if (!strcmp(simd, "scalar")) path = WHALE_SIMD_SCALAR;
        else if (!strcmp(simd, "avx2")) path = WHALE_SIMD_AVX2;
        else if (!strcmp(simd, "avx512")) path = WHALE_SIMD_AVX512;
        else {
            fprintf(stderr, "whale-bench offload adamw: --simd=%s: expected scalar, avx2 or "
                    "avx512\n", simd);
            return 2;
        }
        if (path > whale_adamw_best_simd()) {
            fprintf(stderr, "whale-bench offload adamw: --simd=%s: this CPU runs at most %s\n",
                    simd, whale_simd_name(whale_adamw_best_simd()));
            return 2;
        }
    }
    struct whale_model_desc md;
    if (whale_model_desc_load(model, &md))
        return 1;
    size_t *sz = NULL;
    int nt = model_sizes(&md, &sz);
    if (nt < 0)
        return 1;
    size_t N = 0;
    for (int i = 0; i < nt; i++)
        N += sz[i];
    float *buf = malloc(N * 4 * sizeof(float));
    if (!buf) {
        fprintf(stderr, "whale-bench offload adamw: out of memory for %zu parameters\n", N);
        free(sz);
        return 1;
    }
    for (size_t i = 0; i < 4 * N; i++)
        buf[i] = (float)((i * 2654435761u) % 1000) * 1e-4f;
    float *w = buf, *g = buf + N, *m = buf + 2 * N, *v = buf + 3 * N;
    struct whale_adamw o = { .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    uint16_t *p16 = malloc(N * sizeof(uint16_t));
    struct whale_adamw_tensor *ts = calloc((size_t)nt, sizeof *ts);
    double *t = calloc((size_t)reps, sizeof *t);
    if (!p16 || !ts || !t) {
        fprintf(stderr, "whale-bench offload adamw: out of memory for %zu parameters\n", N);
        free(p16), free(ts), free(t), free(buf), free(sz);
        return 1;
    }
    size_t at = 0;
    for (int k = 0; k < nt; at += sz[k], k++)
        ts[k] = (struct whale_adamw_tensor){ w + at, g + at, m + at, v + at, p16 + at,
                                             sz[k], true /* as torch's AdamW, one group */ };
    printf("# model %s: %d tensors, %zu parameters, host AdamW path %s\n", md.name, nt, N,
           whale_simd_name(path));
    printf("# bytes/param: AdamW fp32 28 (read w g m v, write w m v); +clip 32 (the norm "
           "reads g once more); mixed 30 (+ the bf16 copy written)\n");
    printf("%-18s %12s %12s %14s %8s\n", "impl", "best_s", "median_s", "params_per_s",
           "GB/s");
    static const struct {
        const char *name;
        int bytes; /* per parameter, for the GB/s column */
    } impls[] = {
        { "whale-host", 28 },      /* multi-tensor: one parallel region, the offload path */
        { "whale-pertensor", 28 }, /* one call (one parallel region) per tensor */
        { "whale-loop", 28 },      /* the engine's plain loop (whale_adamw_update) */
        { "bound-stream28", 28 },  /* the same traffic, no arithmetic */
        { "bound-compute-l2", 28 },/* the arithmetic, data in L2 (bytes not from DRAM) */
        { "whale-clip", 32 },      /* norm pass + AdamW with the clip coefficient folded */
        { "whale-mixed-bf16", 30 },/* AdamW on the fp32 master + bf16 copy, one pass */
    };
    for (size_t impl = 0; impl < sizeof impls / sizeof impls[0]; impl++) {
        for (int r = 0; r < reps + 1; r++) { /* the first run warms up */
            double t0 = whale_now_s();
            size_t off = 0;
            int rc = 0;
            switch (impl) {
            case 0: rc = whale_adamw_multi_simd(path, &o, r + 1, ts, nt, WHALE_FLOAT32, 1.0f); break;
            case 1:
                for (int k = 0; k < nt; off += sz[k], k++)
                    whale_adamw_update_simd(path, &o, r + 1, w + off, g + off, m + off, v + off,
                                            sz[k], 1.0f, true);
                break;
            case 2:
                for (int k = 0; k < nt; off += sz[k], k++)
                    whale_adamw_update(&o, r + 1, w + off, g + off, m + off, v + off, sz[k], 1.0f,
                                       true);
                break;
            case 3: bench_stream28(w, g, m, v, N); break;
            case 4: rc = bench_adamw_in_l2(path, &o, N); break;
            case 5: { /* as a training step: global norm, then the folded clip */
                double ss = 0;
                for (int k = 0; k < nt; off += sz[k], k++)
                    ss += whale_sumsq(g + off, sz[k]);
                float cm = whale_clip_coef(sqrt(ss), 1e-3f); /* small: the clip is active */
                rc = whale_adamw_multi_simd(path, &o, r + 1, ts, nt, WHALE_FLOAT32, cm);
                break;
            }
            default: rc = whale_adamw_multi_simd(path, &o, r + 1, ts, nt, WHALE_BFLOAT16, 1.0f);
            }
            if (rc) {
                fprintf(stderr, "whale-bench offload adamw: %s failed (%d)\n", impls[impl].name,
                        rc);
                free(p16), free(ts), free(t), free(buf), free(sz);
                return 1;
            }
            if (r > 0)
                t[r - 1] = whale_now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmpd);
        printf("%-18s %12.5f %12.5f %14.4g %8.2f\n", impls[impl].name, t[0], t[reps / 2],
               (double)N / t[reps / 2], (double)N * impls[impl].bytes / t[reps / 2] / 1e9);
        fflush(stdout);
    }
    free(p16);
    free(ts);
    free(t);
    free(buf);
    free(sz);
    return 0;
}

static int xfer(whale_remote *r, bool get, void *local, size_t n)
{
    whale_req *q = NULL;
    int rc = get ? whale_iget(r, 0, local, n, &q) : whale_iput(r, 0, local, n, &q);
    if (!rc)
        rc = whale_wait(q);
    if (!rc && !get)
        rc = whale_remote_flush(r);
    return rc;
}

static int bench_bw(int argc, char **argv)
{
    int64_t lo = 1 << 20, hi = 64 << 20;
    int reps = 5, c;
    static const struct option opts[] = { { "min", 1, 0, 'b' }, { "max", 1, 0, 'e' },
                                          { "reps", 1, 0, 'r' }, { "help", 0, 0, 'h' },
                                          { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "b:e:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': lo = whale_parse_size(optarg); break;
        case 'e': hi = whale_parse_size(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (lo <= 0 || hi < lo || reps < 1 || reps > 1000) {
        fprintf(stderr, "whale-bench offload bw: expected 0 < -b <= -e sizes and -r 1..1000\n");
        return 2;
    }
    whale_ctx *ctx = NULL;
    if (whale_init(&ctx))
        return 1;
    whale_group *all = whale_all_tasks(ctx);
    int me = whale_group_rank(all), nt = whale_group_size(all), rc = 0;
    char *src = malloc((size_t)hi), *dst = malloc((size_t)hi);
    if (!src || !dst) {
        fprintf(stderr, "whale-bench offload bw: out of memory\n");
        whale_finalize(ctx);
        return 1;
    }
    memset(src, 1, (size_t)hi);
    memset(dst, 2, (size_t)hi);
    whale_region *reg = NULL;
    whale_remote **rem = NULL;
    /* every task registers its dst; task 0 moves data into its own and task 1's */
    if ((rc = whale_region_register(ctx, dst, (size_t)hi, &reg)) ||
        (rc = whale_region_exchange(all, reg, &rem))) {
        fprintf(stderr, "whale-bench offload bw: region setup: %s\n", whale_strerror(rc));
        whale_finalize(ctx);
        return 1;
    }
    /* the local tier: dst registered with its private endpoint */
    whale_ltier *lt = NULL;
    if (me == 0 && ((rc = whale_ltier_open(&lt)) ||
                    (rc = whale_ltier_register(lt, dst, (size_t)hi))))
        fprintf(stderr, "whale-bench offload bw: local tier setup: %s (its columns stay "
                "empty)\n", whale_strerror(rc));
    if (rc) { /* the other tasks still take part: the remote columns go on */
        whale_ltier_close(lt);
        lt = NULL;
        rc = 0;
    }
    if (me == 0)
        printf("# %d task(s); GB/s = bytes / time, best/median of %d; local tier through UCX "
               "%s\n%12s %12s %12s %12s %12s %12s\n", nt, reps, lt ? whale_ltier_transport(lt) : "(none)",
               "bytes", "memcpy", "ltier_put", "ltier_get", nt > 1 ? "remote_put" : "-",
               nt > 1 ? "remote_get" : "-");
    for (int64_t n = lo; n <= hi && !rc; n *= 2) {
        double *tm = calloc((size_t)reps * 5, sizeof *tm); /* [path][rep] */
        if (!tm) {
            rc = WHALE_ENOMEM;
            break;
        }
        for (int r = 0; r < reps && !rc; r++) {
            if (me == 0) {
                double t0 = whale_now_s();
                memcpy(dst, src, (size_t)n);
                double t1 = whale_now_s();
                tm[r] = t1 - t0;
                for (int k = 0; k < 4 && !rc; k++) {
                    if (k >= 2 && nt < 2)
                        break;
                    if (k < 2 && !lt)
                        continue;
                    t0 = whale_now_s();
                    if (k < 2) /* put src -> dst, get dst -> src */
                        rc = k ? whale_ltier_copy(lt, src, dst, (size_t)n, WHALE_LTIER_HOST)
                               : whale_ltier_copy(lt, dst, src, (size_t)n, WHALE_LTIER_HOST);
                    else
                        rc = xfer(rem[1], k & 1, src, (size_t)n);
                    tm[(size_t)(1 + k) * reps + r] = whale_now_s() - t0;
                }
            }
            /* the target progresses RMA (tcp) while it waits here */
            int r2 = whale_barrier(all);
            rc = rc ? rc : r2;
        }
        if (me == 0 && !rc) {
            printf("%12lld", (long long)n);
            for (int k = 0; k < 5; k++) {
                if ((k >= 3 && nt < 2) || (k >= 1 && k < 3 && !lt)) {
                    printf(" %12s", "-");
                    continue;
                }
                double *v = tm + (size_t)k * reps;
                qsort(v, (size_t)reps, sizeof *v, cmpd);
                char cell[40];
                snprintf(cell, sizeof cell, "%.2f/%.2f", (double)n / v[0] / 1e9,
                         (double)n / v[reps / 2] / 1e9);
                printf(" %12s", cell);
            }
            printf("\n");
        }
        free(tm);
    }
    if (rc)
        fprintf(stderr, "whale-bench offload bw: %s\n", whale_strerror(rc));
    whale_ltier_close(lt);
    for (int i = 0; i < nt; i++)
        whale_remote_free(rem[i]);
    free(rem);
    whale_region_free(reg);
    free(src);
    free(dst);
    whale_finalize(ctx);
    return rc ? 1 : 0;
}

int bench_offload_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "adamw"))
        return bench_adamw(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bw"))
        return bench_bw(argc - 1, argv + 1);
    fprintf(stderr, "whale-bench offload: unknown mode '%s' (adamw, bw)\n", argv[1]);
    return 2;
}
