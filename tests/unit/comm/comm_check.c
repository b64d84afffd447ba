/* Multi-process correctness check of the collectives, run under whale-run
 * or srun: every collective x algorithm x dtype x reduction x size, with
 * exact expected results; point to point; many requests in flight;
 * concurrent sub-groups (created groups and TP/DP groups).
 *
 *   comm_check [--sizes quick|full|LIST] [--algos LIST] [--colls LIST]
 *
 * LIST sizes are element counts ("0,1,7,16777216"). Prints one line per
 * failure and "comm_check: OK ..." on rank 0; exit 1 on any failure. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_values.h"
#include "whale/comm.h"
#include "whale/error.h"

static int g_rank, g_fail, g_cases;

#define FAIL(...)                                          \
    do {                                                   \
        if (g_fail++ < 20) {                               \
            fprintf(stderr, "comm_check[%d]: ", g_rank);   \
            fprintf(stderr, __VA_ARGS__);                  \
            fputc('\n', stderr);                           \
        }                                                  \
    } while (0)

static const char *const coll_names[] = { "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce" };

static bool has_algo(int coll, const char *a)
{
    static const char *const per[5][5] = { { "ring", "rd", "raben", "hier", "shm" },
                                           { "ring", "rd", "hier", "shm" },
                                           { "ring", "rd", "hier", "shm" }, { "tree", "ring" },
                                           { "tree", "ring" } };
    for (int i = 0; i < 5; i++)
        if (per[coll][i] && !strcmp(per[coll][i], a))
            return true;
    return false;
}

/* One collective on group g with members' world ranks in wr[]. */
/* inplace: allreduce with send == recv; allgather with my block already at
 * its place in recv; reduce-scatter with recv = my block of send. */
static void one(whale_ctx *ctx, whale_group *g, const int *wr, int coll, enum whale_dtype t, int op,
                size_t count, bool nonblocking, bool inplace, const char *algo)
{
    int p = whale_group_size(g), me = whale_group_rank(g);
    size_t esz = whale_dtype_size(t);
    size_t in_n = coll == 1 ? count * (size_t)p : count;
    size_t out_n = coll == 2 ? count * (size_t)p : count;
    char *send = malloc(in_n * esz + 8), *recv = malloc(out_n * esz + 8);
    if (!send || !recv) {
        FAIL("out of memory for %zu elements", count);
        free(send);
        free(recv);
        return;
    }
    int root = p > 2 ? p - 2 : 0;
    for (size_t i = 0; i < in_n; i++)
        cv_put(send, i, t, cv_val(wr[me], i, op));
    memset(recv, 0xAB, out_n * esz + 8);
    if (coll == 3)
        memcpy(recv, send, count * esz);
    inplace = inplace && coll <= 2;
    const void *src = send;
    if (inplace && coll == 0) {
        memcpy(recv, send, count * esz);
        src = recv;
    } else if (inplace && coll == 2) {
        memcpy(recv + (size_t)me * count * esz, send, count * esz);
        src = recv + (size_t)me * count * esz;
    }
    void *dst1 = inplace && coll == 1 ? send + (size_t)me * count * esz : recv;
    whale_req *req = NULL;
    int rc;
    switch (coll) {
    case 0:
        rc = nonblocking ? whale_iallreduce(g, src, recv, count, t, op, &req)
                         : whale_allreduce(g, src, recv, count, t, op);
        break;
    case 1:
        rc = nonblocking ? whale_ireduce_scatter(g, send, dst1, count, t, op, &req)
                         : whale_reduce_scatter(g, send, dst1, count, t, op);
        if (dst1 != recv)
            memcpy(recv, dst1, count * esz);
        break;
    case 2:
        rc = nonblocking ? whale_iallgather(g, src, recv, count, t, &req)
                         : whale_allgather(g, src, recv, count, t);
        break;
    case 3:
        rc = nonblocking ? whale_ibroadcast(g, recv, count, t, root, &req)
                         : whale_broadcast(g, recv, count, t, root);
        break;
    default:
        rc = whale_reduce(g, send, me == root ? recv : NULL, count, t, op, root);
        break;
    }
    if (!rc && req) {
        rc = whale_wait(req);
        if (coll == 1 && dst1 != recv)
            memcpy(recv, dst1, count * esz);
    }
    g_cases++;
    const char *an = whale_coll_algorithm(g, (enum whale_coll)coll, count, t);
    if (rc) {
        FAIL("%s %s count=%zu %s op=%d p=%d%s: %s", coll_names[coll], an, count, whale_dtype_name(t),
             op, p, inplace ? " (in place)" : "", whale_strerror(rc));
        goto out;
    }
    (void)algo; /* an inapplicable forced algorithm falls back to the model */
    for (size_t i = 0; i < out_n; i++) {
        double want, got = cv_get(recv, i, t);
        switch (coll) {
        case 1: want = cv_expect_ranks(wr, p, (size_t)me * count + i, t, op); break;
        case 2: want = cv_val(wr[i / (count ? count : 1)], i % (count ? count : 1), op); break;
        case 3: want = cv_val(wr[root], i, op); break;
        case 4:
            if (me != root)
                goto out;
            want = cv_expect_ranks(wr, p, i, t, op);
            break;
        default: want = cv_expect_ranks(wr, p, i, t, op); break;
        }
        if (coll == 2 || coll == 3) {
            /* moved, not reduced: compare in the dtype */
            char tmp[8];
            cv_put(tmp, 0, t, want);
            want = cv_get(tmp, 0, t);
        }
        if (got != want) {
            FAIL("%s %s count=%zu %s op=%d p=%d%s%s: element %zu = %g, want %g", coll_names[coll], an,
                 count, whale_dtype_name(t), op, p, nonblocking ? " (non-blocking)" : "",
                 inplace ? " (in place)" : "", i, got, want);
            break;
        }
    }
    if (((unsigned char *)recv)[out_n * esz] != 0xAB && !(coll == 4 && me != root))
        FAIL("%s count=%zu: wrote past the end of the receive buffer", coll_names[coll], count);
out:
    free(send);
    free(recv);
    (void)ctx;
}

static int parse_sizes(const char *s, size_t *out, int max)
{
    int n = 0;
    if (!strcmp(s, "quick")) {
        size_t q[] = { 0, 1, 7, 1001, 65537, (1 << 20) + 3 };
        for (size_t i = 0; i < sizeof q / sizeof *q; i++)
            out[n++] = q[i];
        return n;
    }
    if (!strcmp(s, "full")) {
        size_t q[] = { 0, 1, 2, 3, 7, 64, 1001, 4099, 65537, (1 << 20) + 3, 4 << 20, 16 << 20 };
        for (size_t i = 0; i < sizeof q / sizeof *q; i++)
            out[n++] = q[i];
        return n;
    }
    char *dup = strdup(s), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save))
        out[n++] = strtoull(tok, NULL, 10);
    free(dup);
    return n;
}

int main(int argc, char **argv)
{
    const char *sizes_s = "quick", *algos_s = "auto,ring,rd,raben,hier,tree", *colls_s = NULL;
    static const struct option lo[] = { { "sizes", required_argument, NULL, 's' },
                                        { "algos", required_argument, NULL, 'a' },
                                        { "colls", required_argument, NULL, 'c' },
                                        { NULL, 0, NULL, 0 } };
    int c;
    while ((c = getopt_long(argc, argv, "s:a:c:", lo, NULL)) != -1) {
        if (c == 's')
            sizes_s = optarg;
        else if (c == 'a')
            algos_s = optarg;
        else if (c == 'c')
            colls_s = optarg;
        else
            return 2;
    }
    size_t sizes[64];
    int nsizes = parse_sizes(sizes_s, sizes, 64);
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "comm_check: whale_init: %s\n", whale_strerror(rc));
        return 1;
    }
    g_rank = whale_rank(ctx);
    if (whale_is_spare(ctx)) {
        /* A spare belongs to no working group; it only joins finalize. */
        int bad = whale_world(ctx) || whale_tp_group(ctx) || whale_rank(ctx) != -1;
        if (bad)
            fprintf(stderr, "comm_check: spare task %d sees a working group\n", whale_task_id(ctx));
        rc = whale_finalize(ctx);
        return bad || rc ? 1 : 0;
    }
    whale_group *w = whale_world(ctx);
    int p = whale_world_size(ctx);
    int *wr = malloc(sizeof(int) * (size_t)p);
    for (int i = 0; i < p; i++)
        wr[i] = i;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    /* 1. the matrix on the world group */
    char *algos = strdup(algos_s), *save = NULL;
    for (char *a = strtok_r(algos, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        for (int coll = 0; coll < 5; coll++) {
            if (colls_s && !strstr(colls_s, coll_names[coll]))
                continue;
            if (strcmp(a, "auto") && !has_algo(coll, a))
                continue;
            whale_coll_set_algorithm(ctx, (enum whale_coll)coll, a);
            for (int si = 0; si < nsizes; si++)
                for (int t = 0; t < WHALE_DTYPE_COUNT_; t++)
                    for (int op = 0; op < WHALE_OP_COUNT_; op++) {
                        bool reduces = coll == 0 || coll == 1 || coll == 4;
                        if (!reduces && op)
                            continue;
                        /* large sizes: every dtype with SUM, every op with fp32 */
                        if (sizes[si] > 70000 && op && t != WHALE_FLOAT32)
                            continue;
                        if (sizes[si] > (4u << 20) && t != WHALE_FLOAT32)
                            continue;
                        one(ctx, w, wr, coll, (enum whale_dtype)t, op, sizes[si],
                            (si + t + op) % 2 == 1 && coll != 4, (si + t + op) % 3 == 0, a);
                    }
            whale_coll_set_algorithm(ctx, (enum whale_coll)coll, "auto");
        }
    }
    free(algos);

    /* 2. barrier, and point to point around a ring with two tags at once */
    if ((rc = whale_barrier(w)))
        FAIL("barrier: %s", whale_strerror(rc));
    if (p > 1) {
        int me = whale_rank(ctx), next = (me + 1) % p, prev = (me + p - 1) % p;
        enum { N = 100003 };
        int32_t *a = malloc(N * 4), *b = malloc(N * 4), *ra = malloc(N * 4), *rb = malloc(N * 4);
        for (int i = 0; i < N; i++) {
            a[i] = me * 1000 + i;
            b[i] = -me - i;
        }
        whale_req *rq[4];
        whale_irecv(w, ra, N, WHALE_INT32, prev, 7, &rq[0]);
        whale_irecv(w, rb, N, WHALE_INT32, prev, 8, &rq[1]);
        whale_isend(w, b, N, WHALE_INT32, next, 8, &rq[2]);
        whale_isend(w, a, N, WHALE_INT32, next, 7, &rq[3]);
        if ((rc = whale_waitall(rq, 4)))
            FAIL("point to point: %s", whale_strerror(rc));
        for (int i = 0; i < N; i++)
            if (ra[i] != prev * 1000 + i || rb[i] != -prev - i) {
                FAIL("point to point: element %d wrong", i);
                break;
            }
        free(a);
        free(b);
        free(ra);
        free(rb);
        g_cases++;
    }

    /* 3. many requests in flight on one group, completing in issue order */
    {
        enum { K = 16, M = 5003 };
        float *bufs = malloc(sizeof(float) * K * M);
        whale_req *rq[K];
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < M; i++)
                bufs[k * M + i] = (float)(whale_rank(ctx) + k);
            if ((rc = whale_iallreduce(w, bufs + k * M, bufs + k * M, M, WHALE_FLOAT32, WHALE_SUM, &rq[k])))
                FAIL("iallreduce %d: %s", k, whale_strerror(rc));
        }
        if ((rc = whale_waitall(rq, K)))
            FAIL("waitall: %s", whale_strerror(rc));
        for (int k = 0; k < K; k++)
            if (bufs[k * M + M - 1] != (float)(p * (p - 1) / 2 + p * k))
                FAIL("in-flight request %d: %g, want %d", k, bufs[k * M + M - 1], p * (p - 1) / 2 + p * k);
        free(bufs);
        g_cases += K;
    }

    /* 3b. the progress engine completes a request while the caller computes
     * and never calls into the library (what gradient overlap relies on) */
    if (p > 1) {
        enum { M = 1 << 20 };
        float *x = malloc(M * 4);
        for (int i = 0; i < M; i++)
            x[i] = 1.0f;
        whale_req *r;
        if ((rc = whale_iallreduce(w, x, x, M, WHALE_FLOAT32, WHALE_SUM, &r)))
            FAIL("iallreduce: %s", whale_strerror(rc));
        /* "compute" without touching the library, checking only the result
         * memory. The bound is against a hang, not a speed check: on a
         * loaded 2-core machine 4 ASan ranks all computing left the
         * progress threads starved for more than the old 20 s. */
        volatile float *vx = x;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        double el = 0;
        /* data moving at all proves background progress: wait until a
         * sample across every block holds the final sum */
        for (;;) {
            bool fin = true;
            for (int k = 0; k < 64; k++)
                fin = fin && vx[(size_t)k * (M / 64)] == (float)p;
            if (fin || el > 200.0)
                break;
            volatile double acc = 0;
            for (int i = 0; i < 100000; i++)
                acc += i * 0.5;
            clock_gettime(CLOCK_MONOTONIC, &b);
            el = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        }
        if (el > 200.0)
            FAIL("background progress: no data moved in %.1f s of compute", el);
        if ((rc = whale_wait(r)) || x[0] != (float)p)
            FAIL("background progress: %s, x[0]=%g", whale_strerror(rc), x[0]);
        free(x);
        g_cases++;
    }

    /* 4. concurrent sub-groups: evens and odds (created), plus TP and DP */
    if (p > 2) {
        int ne = (p + 1) / 2, no = p / 2, me = whale_rank(ctx);
        int *ev = malloc(sizeof(int) * (size_t)ne), *od = malloc(sizeof(int) * (size_t)no);
        for (int i = 0; i < ne; i++)
            ev[i] = 2 * i;
        for (int i = 0; i < no; i++)
            od[i] = 2 * i + 1;
        whale_group *ge = NULL, *go = NULL;
        if ((rc = whale_group_create(w, ev, ne, &ge)) || (rc = whale_group_create(w, od, no, &go)))
            FAIL("group_create: %s", whale_strerror(rc));
        whale_group *mine = me % 2 ? go : ge;
        const int *mwr = me % 2 ? od : ev;
        if (!mine || (ge && go))
            FAIL("group_create: membership wrong (even %p odd %p)", (void *)ge, (void *)go);
        else {
            enum { M = 300007 };
            float *x = malloc(M * 4), *y = malloc(M * 4), *z = malloc(M * 4), *zz = malloc(M * 4);
            for (int i = 0; i < M; i++) {
                x[i] = (float)cv_val(me, (size_t)i, WHALE_SUM);
                z[i] = 1.0f;
            }
            whale_req *r1, *r2;
            /* sub-group and world operations in flight together */
            whale_iallreduce(mine, x, y, M, WHALE_FLOAT32, WHALE_SUM, &r1);
            whale_iallreduce(w, z, zz, M, WHALE_FLOAT32, WHALE_SUM, &r2);
            if ((rc = whale_wait(r1)) || (rc = whale_wait(r2)))
                FAIL("concurrent sub-groups: %s", whale_strerror(rc));
            int gs = whale_group_size(mine);
            for (int i = 0; i < M; i++)
                if (y[i] != (float)cv_expect_ranks(mwr, gs, (size_t)i, WHALE_FLOAT32, WHALE_SUM) ||
                    zz[i] != (float)p) {
                    FAIL("concurrent sub-groups: element %d = %g / %g", i, y[i], zz[i]);
                    break;
                }
            free(x);
            free(y);
            free(z);
            free(zz);
            g_cases += 2;
        }
        whale_group_free(ge);
        whale_group_free(go);
        free(ev);
        free(od);
    }
    int tp, pp, dp;
    whale_degrees(ctx, &tp, &pp, &dp);
    if (tp > 1 || dp > 1 || pp > 1) {
        whale_group *gs[3] = { whale_tp_group(ctx), whale_dp_group(ctx), whale_pp_group(ctx) };
        enum { M = 200003 };
        float *x[3], *y[3];
        whale_req *rq[3];
        for (int k = 0; k < 3; k++) {
            x[k] = malloc(M * 4);
            y[k] = malloc(M * 4);
            for (int i = 0; i < M; i++)
                x[k][i] = (float)(whale_rank(ctx) + k);
            if ((rc = whale_iallreduce(gs[k], x[k], y[k], M, WHALE_FLOAT32, WHALE_SUM, &rq[k])))
                FAIL("TP/DP/PP iallreduce: %s", whale_strerror(rc));
        }
        if ((rc = whale_waitall(rq, 3)))
            FAIL("TP/DP/PP wait: %s", whale_strerror(rc));
        for (int k = 0; k < 3; k++) {
            double want = 0;
            for (int i = 0; i < whale_group_size(gs[k]); i++)
                want += whale_group_world_rank(gs[k], i) + k;
            if (y[k][M - 1] != (float)want)
                FAIL("%s group allreduce: %g, want %g", k == 0 ? "TP" : k == 1 ? "DP" : "PP", y[k][M - 1], want);
            free(x[k]);
            free(y[k]);
        }
        g_cases += 3;
    }

    /* agree on the verdict */
    int32_t bad = g_fail, allbad = 0;
    if ((rc = whale_allreduce(w, &bad, &allbad, 1, WHALE_INT32, WHALE_SUM)))
        allbad = 1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (g_rank == 0)
        printf("comm_check: %s: %d ranks, %d cases, %d failure(s), %.1f s\n", allbad ? "FAILED" : "OK",
               p, g_cases, allbad, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    free(wr);
    rc = whale_finalize(ctx);
    return allbad || rc ? 1 : 0;
}
