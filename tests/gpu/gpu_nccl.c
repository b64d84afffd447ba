/* NCCL (whale_dev_*) against the host collectives (whale_*) on the same
 * inputs, with device memory and streams from the cuda backend: the
 * collective runs on its own (high-priority) stream, ordered after the
 * compute stream's upload by an event (no host wait in between).
 * Integer-valued fp32, bf16 and int32 inputs make every sum exact, so the
 * results must be bit-identical; random fp32 is compared within 1e-6
 * relative (NCCL and the host path add in different orders). Runs on the
 * world, TP and DP groups (launch with whale-run -n 4 --tp 2 for both), and
 * the vocabulary-parallel cross-entropy across the GPUs of a group.
 * Skips (77) without a GPU. */
#include <stdint.h>

#include "gpu_util.h"
#include "whale/comm.h"
#include "whale/error.h"

static whale_backend *G, *H; /* cuda; cpu for host-side casts */
static whale_stream *comm_s;
static int fails, me;

static void fill(void *h, enum whale_dtype t, size_t n, int rank, bool exact)
{
    float *f = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        f[i] = exact ? (float)((rank * 7 + (int)(i % 13)) % 9 - 4)
                     : (float)(((rank + 1) * 2654435761u * (unsigned)(i + 1)) % 100003) / 100003.0f;
    if (t == WHALE_INT32)
        for (size_t i = 0; i < n; i++)
            ((int32_t *)h)[i] = (int32_t)f[i];
    else
        gu_check(whale_k_cast(H, NULL, h, t, f, WHALE_FLOAT32, (int64_t)n), "cast");
    free(f);
}

static void compare(const char *what, const void *host, const void *dev, enum whale_dtype t,
                    size_t n, bool exact)
{
    size_t bytes = n * whale_dtype_size(t);
    void *h = malloc(bytes + 4);
    gu_down(G, h, dev, bytes);
    bool ok = true;
    if (exact || t != WHALE_FLOAT32) {
        ok = !memcmp(h, host, bytes);
    } else {
        const float *a = h, *b = host;
        for (size_t i = 0; i < n && ok; i++)
            ok = fabsf(a[i] - b[i]) <= 1e-6f * fabsf(b[i]) + 1e-7f;
    }
    if (!ok) {
        fails++;
        printf("rank %d: FAIL %s %s (%zu elements) differs from the host collective\n", me, what,
               whale_dtype_name(t), n);
    } else if (me == 0) {
        printf("ok   %s %s %s (%zu elements)\n", what, whale_dtype_name(t),
               exact ? "bit-identical" : "within 1e-6", n);
    }
    free(h);
}

static void one_group(whale_group *g, const char *gname)
{
    int p = whale_group_size(g), r = whale_group_rank(g);
    if (p < 2)
        return;
    const size_t n = (1 << 18) + 5;
    enum whale_dtype ts[3] = { WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_INT32 };
    for (int k = 0; k < 4; k++) {
        enum whale_dtype t = ts[k < 3 ? k : 0];
        bool exact = k < 3;
        size_t es = whale_dtype_size(t);
        void *in = malloc(n * p * es), *out = malloc(n * p * es);
        fill(in, t, n * p, whale_group_world_rank(g, r), exact);
        void *din = gu_up(G, in, n * p * es), *dout = NULL;
        gu_check(whale_mem_alloc(G, WHALE_MEM_COMMS, n * p * es, &dout), "alloc");
        char what[96];

        /* the collective waits for the compute stream's upload through an event */
        whale_event *ready = NULL;
        gu_check(whale_event_create(G, &ready), "event");
        gu_check(whale_event_record(ready, NULL), "record");
        gu_check(whale_stream_wait_event(comm_s, ready), "wait event");
        void *st = whale_stream_native(comm_s);

        gu_check(whale_allreduce(g, in, out, n, t, WHALE_SUM), "host allreduce");
        gu_check(whale_dev_allreduce(g, din, dout, n, t, WHALE_SUM, st), "dev allreduce");
        gu_check(whale_dev_sync(g, st), "dev sync");
        snprintf(what, sizeof what, "%s allreduce sum", gname);
        compare(what, out, dout, t, n, exact);

        gu_check(whale_allreduce(g, in, out, n, t, WHALE_MAX), "host allreduce max");
        gu_check(whale_dev_allreduce(g, din, dout, n, t, WHALE_MAX, st), "dev allreduce max");
        gu_check(whale_dev_sync(g, st), "dev sync");
        snprintf(what, sizeof what, "%s allreduce max", gname);
        compare(what, out, dout, t, n, true);

        gu_check(whale_reduce_scatter(g, in, out, n, t, WHALE_SUM), "host reduce_scatter");
        gu_check(whale_dev_reduce_scatter(g, din, dout, n, t, WHALE_SUM, st), "dev reduce_scatter");
        gu_check(whale_dev_sync(g, st), "dev sync");
        snprintf(what, sizeof what, "%s reduce_scatter", gname);
        compare(what, out, dout, t, n, exact);

        gu_check(whale_allgather(g, in, out, n, t), "host allgather");
        gu_check(whale_dev_allgather(g, din, dout, n, t, st), "dev allgather");
        gu_check(whale_dev_sync(g, st), "dev sync");
        snprintf(what, sizeof what, "%s allgather", gname);
        compare(what, out, dout, t, n * p, true);

        memcpy(out, in, n * es);
        gu_check(whale_broadcast(g, out, n, t, p - 1), "host broadcast");
        gu_check(whale_dev_broadcast(g, din, n, t, p - 1, st), "dev broadcast");
        gu_check(whale_dev_sync(g, st), "dev sync");
        snprintf(what, sizeof what, "%s broadcast", gname);
        compare(what, out, din, t, n, true);

        whale_event_destroy(ready);
        whale_mem_free(G, din);
        whale_mem_free(G, dout);
        free(in);
        free(out);
    }
}

/* Vocabulary-parallel cross-entropy across the GPUs of a group (the TP
 * layout of the head): rows_max, NCCL max, rows_exp_sum, NCCL sum of
 * sum|tl, rows_normalize; the losses and each rank's probability columns
 * must match the single-GPU softmax cross-entropy of the whole row. */
static void tp_xent(whale_group *g, const char *gname)
{
    int p = whale_group_size(g), r = whale_group_rank(g);
    if (p < 2)
        return;
    const int N = 96, Vl = 1000, V = Vl * p, v0 = r * Vl;
    float *full = malloc((size_t)N * V * 4), *loc = malloc((size_t)N * Vl * 4);
    int32_t tg[96];
    for (int n = 0; n < N; n++) {
        tg[n] = (int32_t)((n * 7919) % V);
        for (int v = 0; v < V; v++)
            full[(size_t)n * V + v] = (float)(((n + 3) * 40503u * (unsigned)(v + 11)) % 65521) /
                                      65521.0f * 12.0f - 6.0f;
        memcpy(loc + (size_t)n * Vl, full + (size_t)n * V + v0, Vl * 4);
    }
    float *dfull = gu_up(G, full, (size_t)N * V * 4), *dloc = gu_up(G, loc, (size_t)N * Vl * 4);
    int32_t *dtg = gu_up(G, tg, sizeof tg);
    float *st = NULL;
    gu_check(whale_mem_alloc(G, WHALE_MEM_ACTS, 5 * N * 4, (void **)&st), "alloc");
    float *mx = st, *sum = st + N, *tl = st + 2 * N, *loss_tp = st + 3 * N, *loss1 = st + 4 * N;
    void *s = whale_stream_native(whale_stream_compute(G));
    gu_check(whale_k_softmax_xent_fwd(G, NULL, WHALE_FLOAT32, dfull, loss1, dtg, N, V), "xent");
    gu_check(whale_k_rows_max(G, NULL, WHALE_FLOAT32, mx, dloc, N, Vl), "rows_max");
    gu_check(whale_dev_allreduce(g, mx, mx, N, WHALE_FLOAT32, WHALE_MAX, s), "allreduce max");
    gu_check(whale_k_rows_exp_sum(G, NULL, WHALE_FLOAT32, dloc, sum, tl, mx, dtg, v0, N, Vl),
             "rows_exp_sum");
    gu_check(whale_dev_allreduce(g, sum, sum, 2 * N, WHALE_FLOAT32, WHALE_SUM, s), "allreduce sum");
    gu_check(whale_k_rows_normalize(G, NULL, WHALE_FLOAT32, dloc, loss_tp, sum, tl, N, Vl),
             "rows_normalize");
    gu_check(whale_dev_sync(g, s), "sync");
    float l1[96], l2[96];
    gu_down(G, l1, loss1, sizeof l1);
    gu_down(G, l2, loss_tp, sizeof l2);
    gu_down(G, full, dfull, (size_t)N * V * 4);
    gu_down(G, loc, dloc, (size_t)N * Vl * 4);
    double worst = 0, wp = 0;
    for (int n = 0; n < N; n++) {
        worst = fmax(worst, fabs(l1[n] - l2[n]) / fabs(l1[n]));
        for (int j = 0; j < Vl; j++)
            wp = fmax(wp, fabs(full[(size_t)n * V + v0 + j] - loc[(size_t)n * Vl + j]) /
                              (fabs(full[(size_t)n * V + v0 + j]) + 1e-9));
    }
    bool ok = worst <= 1e-5 && wp <= 1e-5;
    if (!ok)
        fails++;
    if (!ok || me == 0)
        printf("%s rank %d: %s vocabulary-parallel cross-entropy over %d GPUs vs one GPU: losses "
               "%.1e, probabilities %.1e (tol 1e-5)\n", ok ? "ok  " : "FAIL", me, gname, p,
               worst, wp);
    whale_mem_free(G, dfull);
    whale_mem_free(G, dloc);
    whale_mem_free(G, dtg);
    whale_mem_free(G, st);
    free(full);
    free(loc);
}

int main(void)
{
    if (!whale_device_available(WHALE_DEVICE_CUDA)) {
        printf("SKIP: no GPU visible (or no CUDA backend in this build): NCCL was not tested\n");
        return GPU_SKIP;
    }
    whale_ctx *ctx;
    if (whale_init(&ctx))
        return 1;
    me = whale_rank(ctx);
    /* NCCL refuses two ranks of one communicator on one GPU */
    int nn = whale_nnodes(ctx), per_node = (whale_ntasks(ctx) + nn - 1) / nn;
    if (per_node > whale_device_count(WHALE_DEVICE_CUDA)) {
        if (me == 0)
            printf("SKIP: %d ranks per node but %d GPUs: NCCL needs one GPU per rank\n", per_node,
                   whale_device_count(WHALE_DEVICE_CUDA));
        whale_finalize(ctx);
        return GPU_SKIP;
    }
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CUDA;
    gu_check(whale_backend_open(&o, &G), "open cuda backend");
    o.device = WHALE_DEVICE_CPU;
    gu_check(whale_backend_open(&o, &H), "open cpu backend");
    gu_check(whale_stream_create(G, true, &comm_s), "comm stream");
    if (me == 0)
        printf("rank 0: %s, world %d\n", whale_backend_describe(G), whale_world_size(ctx));
    one_group(whale_world(ctx), "world");
    one_group(whale_tp_group(ctx), "tp");
    one_group(whale_dp_group(ctx), "dp");
    tp_xent(whale_tp_group(ctx), "tp");
    tp_xent(whale_world(ctx), "world");
    whale_stream_destroy(comm_s);
    whale_backend_close(G);
    whale_backend_close(H);
    int all = fails;
    whale_allreduce(whale_world(ctx), &fails, &all, 1, WHALE_INT32, WHALE_SUM);
    whale_finalize(ctx);
    if (me == 0)
        printf("%s: %d failure%s over all ranks\n", all ? "FAIL" : "PASS", all, all == 1 ? "" : "s");
    return all ? 1 : 0;
}
