/* Device collectives over NCCL, run under whale-run on a machine with GPUs
 * (one per rank, or several ranks sharing one): allreduce (every op, fp32
 * and bf16), reduce-scatter, allgather, broadcast, reduce, send/recv around
 * a ring, all-to-all(v). Exits 77 (skipped) where no GPU is present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime.h>
#pragma GCC diagnostic pop

#include "whale/comm.h"
#include "whale/error.h"

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

int main(void)
{
    if (!whale_dev_available()) {
        printf("nccl_check: no GPU here, skipped\n");
        return 77;
    }
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc)
        return 1;
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    int me = whale_rank(ctx), p = whale_world_size(ctx);
    cudaSetDevice(me % ndev);
    whale_group *w = whale_world(ctx);
    const size_t n = (1 << 20) + 3;
    float *h = malloc(n * p * sizeof(float)), *hr = malloc(n * p * sizeof(float));
    void *ds, *dr;
    cudaMalloc(&ds, n * p * sizeof(float));
    cudaMalloc(&dr, n * p * sizeof(float));
    cudaStream_t st;
    cudaStreamCreate(&st);
    for (int op = 0; op < WHALE_OP_COUNT_; op++) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)((me + (int)(i % 5)) % 4);
        cudaMemcpy(ds, h, n * sizeof(float), cudaMemcpyHostToDevice);
        rc = whale_dev_allreduce(w, ds, dr, n, WHALE_FLOAT32, (enum whale_op)op, st);
        if (!rc)
            rc = whale_dev_sync(w, st);
        cudaMemcpy(hr, dr, n * sizeof(float), cudaMemcpyDeviceToHost);
        for (size_t i = 0; !rc && i < n; i++) {
            float want = 0, v;
            for (int r = 0; r < p; r++) {
                v = (float)((r + (int)(i % 5)) % 4);
                want = r == 0 ? v : op == WHALE_MAX ? (v > want ? v : want) : op == WHALE_MIN ? (v < want ? v : want) : want + v;
            }
            if (op == WHALE_AVG)
                want /= (float)p;
            if (hr[i] != want) {
                CHECK(0, "allreduce op %d: element %zu = %g, want %g", op, i, hr[i], want);
                break;
            }
        }
        CHECK(rc == 0, "allreduce op %d: %s", op, whale_strerror(rc));
    }
    /* allgather: block r = r */
    for (size_t i = 0; i < n; i++)
        h[i] = (float)me;
    cudaMemcpy(ds, h, n * sizeof(float), cudaMemcpyHostToDevice);
    rc = whale_dev_allgather(w, ds, dr, n, WHALE_FLOAT32, st);
    if (!rc)
        rc = whale_dev_sync(w, st);
    cudaMemcpy(hr, dr, n * p * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; !rc && i < n * p; i++)
        if (hr[i] != (float)(i / n)) {
            CHECK(0, "allgather: element %zu = %g", i, hr[i]);
            break;
        }
    /* reduce-scatter of all ones: every element = p */
    for (size_t i = 0; i < n * p; i++)
        h[i] = 1.0f;
    cudaMemcpy(ds, h, n * p * sizeof(float), cudaMemcpyHostToDevice);
    rc = whale_dev_reduce_scatter(w, ds, dr, n, WHALE_FLOAT32, WHALE_SUM, st);
    if (!rc)
        rc = whale_dev_sync(w, st);
    cudaMemcpy(hr, dr, n * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(rc == 0 && hr[0] == (float)p && hr[n - 1] == (float)p, "reduce_scatter: %s %g", whale_strerror(rc), hr[0]);
    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(me * 10);
    cudaMemcpy(dr, h, n * sizeof(float), cudaMemcpyHostToDevice);
    rc = whale_dev_broadcast(w, dr, n, WHALE_FLOAT32, p - 1, st);
    if (!rc)
        rc = whale_dev_sync(w, st);
    cudaMemcpy(hr, dr, n * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(rc == 0 && hr[n - 1] == (float)((p - 1) * 10), "broadcast: %s %g", whale_strerror(rc), hr[n - 1]);
    /* send/recv around the ring, grouped */
    if (p > 1) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)me;
        cudaMemcpy(ds, h, n * sizeof(float), cudaMemcpyHostToDevice);
        whale_dev_group_start();
        whale_dev_send(w, ds, n, WHALE_FLOAT32, (me + 1) % p, st);
        whale_dev_recv(w, dr, n, WHALE_FLOAT32, (me + p - 1) % p, st);
        rc = whale_dev_group_end();
        if (!rc)
            rc = whale_dev_sync(w, st);
        cudaMemcpy(hr, dr, n * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(rc == 0 && hr[5] == (float)((me + p - 1) % p), "send/recv: %s %g", whale_strerror(rc), hr[5]);
    }
    /* all-to-all: element i of the block for rank d from rank s = s * 1000 + d */
    for (int d = 0; d < p; d++)
        for (size_t i = 0; i < n; i++)
            h[(size_t)d * n + i] = (float)(me * 1000 + d);
    cudaMemcpy(ds, h, n * p * sizeof(float), cudaMemcpyHostToDevice);
    rc = whale_dev_alltoall(w, ds, dr, n, WHALE_FLOAT32, st);
    if (!rc)
        rc = whale_dev_sync(w, st);
    cudaMemcpy(hr, dr, n * p * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; !rc && i < n * p; i++)
        if (hr[i] != (float)((int)(i / n) * 1000 + me)) {
            CHECK(0, "alltoall: element %zu = %g", i, hr[i]);
            break;
        }
    CHECK(rc == 0, "alltoall: %s", whale_strerror(rc));
    /* alltoallv: rank s sends s + 1 elements to everyone (some ranks more) */
    if (p > 1) {
        size_t *t = calloc(4 * (size_t)p, sizeof(size_t));
        for (int q = 0; q < p; q++) {
            t[q] = (size_t)me + 1;                     /* sendcounts */
            t[p + q] = (size_t)q * n;                  /* sdispls */
            t[2 * p + q] = (size_t)q + 1;              /* recvcounts */
            t[3 * p + q] = (size_t)q * n;              /* rdispls */
        }
        rc = whale_dev_alltoallv(w, ds, t, t + p, dr, t + 2 * p, t + 3 * p, WHALE_FLOAT32, st);
        if (!rc)
            rc = whale_dev_sync(w, st);
        cudaMemcpy(hr, dr, n * p * sizeof(float), cudaMemcpyDeviceToHost);
        for (int q = 0; !rc && q < p; q++)
            CHECK(hr[(size_t)q * n + (size_t)q] == (float)(q * 1000 + me), "alltoallv: block from %d = %g",
                  q, hr[(size_t)q * n + (size_t)q]);
        CHECK(rc == 0, "alltoallv: %s", whale_strerror(rc));
        free(t);
    }
    cudaFree(ds);
    cudaFree(dr);
    cudaStreamDestroy(st);
    free(h);
    free(hr);
    int32_t bad = fails, all = 0;
    whale_allreduce(w, &bad, &all, 1, WHALE_INT32, WHALE_SUM);
    if (me == 0)
        printf("nccl_check: %s (%d ranks, %d GPU(s) visible)\n", all ? "FAILED" : "OK", p, ndev);
    whale_finalize(ctx);
    return all ? 1 : 0;
}
