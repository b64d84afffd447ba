/* Multi-process check of whale_alltoall / whale_alltoallv, run under
 * whale-run or srun: every dtype class, counts 0..large (crossing the
 * shared segment's step), uneven and empty blocks with displacements out
 * of rank order, the world and a sub-group in another rank order, a group
 * of one, mixing with other collectives (and a non-blocking allreduce
 * still in flight) on the same group, and the argument errors.
 *
 *   a2a_check [--algo auto|ring|shm] [--sizes LIST] [--expect ALGO] [--win all|odd]
 *
 * --algo forces the transport (ring: the pairwise exchange over UCX; shm:
 * the segment where the group has one); --expect fails unless the library
 * reports that algorithm for the world. --win: the buffers of every rank
 * (all) or of the odd ranks only (odd: senders write into some receivers'
 * windows and the others read out of the senders' buffers, in one
 * exchange) come from whale_shm_alloc. Prints one line per failure and
 * "a2a_check: OK ..." on rank 0; exit 1 on any failure. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/comm.h"
#include "whale/error.h"

static int g_rank, g_fail, g_cases;
static int g_win; /* 0 malloc, 1 whale_shm_alloc on every rank, 2 on odd ranks */

static bool win_here(void)
{
    return g_win == 1 || (g_win == 2 && g_rank % 2 == 1);
}
static void *buf_alloc(size_t n)
{
    return win_here() ? whale_shm_alloc(n) : malloc(n);
}
static void buf_free(void *p)
{
    if (win_here())
        whale_shm_free(p);
    else
        free(p);
}

#define FAIL(...)                                        \
    do {                                                 \
        if (g_fail++ < 20) {                             \
            fprintf(stderr, "a2a_check[%d]: ", g_rank);  \
            fprintf(stderr, __VA_ARGS__);                \
            fputc('\n', stderr);                         \
        }                                                \
    } while (0)

/* Byte i of the block group rank s sends to group rank d. */
static unsigned char byte_of(int s, int d, size_t i, int salt)
{
    return (unsigned char)(s * 37 + d * 11 + (int)(i % 251) + salt * 5 + 1);
}

/* Elements s sends to d in the uneven case: some empty, up to 2x base. */
static size_t ucount(int p, int s, int d, size_t base)
{
    if (p > 1 && (s + 2 * d) % 3 == 1)
        return 0;
    return base * (size_t)(1 + (s * 3 + d) % 4) / 2;
}

/* One exchange on g. uneven: alltoallv with ucount blocks in reverse rank
 * order and 1-element gaps; else alltoall (through alltoallv when via_v). */
static void one(whale_group *g, enum whale_dtype t, size_t base, bool uneven, bool via_v, int salt)
{
    int p = whale_group_size(g), me = whale_group_rank(g);
    size_t esz = whale_dtype_size(t);
    size_t *sc = calloc((size_t)p * 4, sizeof(size_t)), *sd = sc + p, *rc = sc + 2 * p, *rd = sc + 3 * p;
    size_t so = 0, ro = 0;
    for (int k = 0; k < p; k++) {
        int q = uneven ? p - 1 - k : k;
        sc[q] = uneven ? ucount(p, me, q, base) : base;
        rc[q] = uneven ? ucount(p, q, me, base) : base;
        sd[q] = so;
        rd[q] = ro;
        so += sc[q] + (uneven ? 1 : 0);
        ro += rc[q] + (uneven ? 1 : 0);
    }
    unsigned char *send = buf_alloc(so * esz + 1), *recv = buf_alloc(ro * esz + 1);
    if (!send || !recv) {
        FAIL("out of memory");
        goto out;
    }
    for (int q = 0; q < p; q++)
        for (size_t i = 0; i < sc[q] * esz; i++)
            send[sd[q] * esz + i] = byte_of(me, q, i, salt);
    memset(recv, 0xEE, ro * esz + 1);
    g_cases++;
    int r = uneven || via_v ? whale_alltoallv(g, send, sc, sd, recv, rc, rd, t)
                            : whale_alltoall(g, send, recv, base, t);
    if (r) {
        FAIL("%s of %zu x %s on %d ranks: %s", uneven || via_v ? "alltoallv" : "alltoall", base,
             whale_dtype_name(t), p, whale_strerror(r));
        goto out;
    }
    int bad = 0;
    for (int q = 0; q < p && !bad; q++) {
        for (size_t i = 0; i < rc[q] * esz && !bad; i++)
            if (recv[rd[q] * esz + i] != byte_of(q, me, i, salt)) {
                FAIL("%s %zu x %s on %d ranks: byte %zu from rank %d is %u, want %u",
                     uneven ? "alltoallv" : "alltoall", base, whale_dtype_name(t), p, i, q,
                     recv[rd[q] * esz + i], byte_of(q, me, i, salt));
                bad = 1;
            }
        if (uneven && !bad && recv[(rd[q] + rc[q]) * esz] != 0xEE) {
            FAIL("alltoallv %zu x %s: the gap after the block from %d was written", base,
                 whale_dtype_name(t), q);
            bad = 1;
        }
    }
out:
    if (send)
        buf_free(send);
    if (recv)
        buf_free(recv);
    free(sc);
}

static void sweep(whale_group *g, const size_t *sizes, int nsizes)
{
    static const enum whale_dtype types[] = { WHALE_UINT8, WHALE_BFLOAT16, WHALE_FLOAT32, WHALE_INT64 };
    int salt = 0;
    for (int k = 0; k < nsizes; k++)
        for (int ti = 0; ti < 4; ti++) {
            enum whale_dtype t = types[ti];
            /* the largest sizes once, in fp32 */
            if (sizes[k] > 100000 && t != WHALE_FLOAT32)
                continue;
            one(g, t, sizes[k], false, false, salt++);
            one(g, t, sizes[k], true, false, salt++);
            if (ti == 1)
                one(g, t, sizes[k], false, true, salt++);
        }
}

/* Other collectives between all-to-alls on the same group (the shared
 * segment's generations interleave), and one still in flight when the
 * all-to-all starts (issue order). */
static void mixed(whale_group *g)
{
    int p = whale_group_size(g);
    float x[300], y[300];
    for (int i = 0; i < 300; i++)
        x[i] = 1.0f;
    whale_req *req = NULL;
    int r = whale_iallreduce(g, x, y, 300, WHALE_FLOAT32, WHALE_SUM, &req);
    if (r)
        FAIL("iallreduce: %s", whale_strerror(r));
    one(g, WHALE_FLOAT32, 1001, true, false, 90);
    if (req && (r = whale_wait(req)))
        FAIL("iallreduce wait: %s", whale_strerror(r));
    if (!r && y[299] != (float)p)
        FAIL("iallreduce before alltoallv: %g, want %d", (double)y[299], p);
    one(g, WHALE_UINT8, 7, false, false, 91);
    if ((r = whale_allreduce(g, x, y, 300, WHALE_FLOAT32, WHALE_SUM)) || y[0] != (float)p)
        FAIL("allreduce after alltoall: %s %g", whale_strerror(r), (double)y[0]);
    one(g, WHALE_INT32, 65537, false, false, 92);
}

/* Argument errors: returned at once, on every rank, before any transfer. */
static void errors(whale_group *g)
{
    int p = whale_group_size(g);
    char buf[64];
    size_t *z = calloc((size_t)p, sizeof(size_t));
    g_cases += 4;
    if (whale_alltoall(g, buf, buf, 1, WHALE_UINT8) != WHALE_EINVAL)
        FAIL("alltoall in place was accepted");
    if (whale_alltoall(g, buf, buf + 32, 1, (enum whale_dtype)99) != WHALE_EINVAL)
        FAIL("alltoall with dtype 99 was accepted");
    if (whale_alltoallv(g, buf, NULL, z, buf + 32, z, z, WHALE_UINT8) != WHALE_EINVAL)
        FAIL("alltoallv with NULL sendcounts was accepted");
    if (whale_alltoall(NULL, buf, buf + 32, 1, WHALE_UINT8) != WHALE_EINVAL)
        FAIL("alltoall on a NULL group was accepted");
    free(z);
}

/* Rank 0 expects one element more from rank 1 than rank 1 sends: the
 * segment path reports it on rank 0 (and completes everywhere). */
static void mismatch(whale_group *g)
{
    int p = whale_group_size(g), me = whale_group_rank(g);
    size_t *sc = calloc((size_t)p * 4, sizeof(size_t)), *sd = sc + p, *rc = sc + 2 * p, *rd = sc + 3 * p;
    char send[64] = { 0 }, recv[64];
    for (int q = 0; q < p; q++) {
        sc[q] = rc[q] = 4;
        sd[q] = rd[q] = (size_t)q * 8;
    }
    if (me == 0)
        rc[1] = 5;
    g_cases++;
    int r = whale_alltoallv(g, send, sc, sd, recv, rc, rd, WHALE_UINT8);
    if (me == 0 && r != WHALE_EINVAL)
        FAIL("a count mismatch with rank 1 was not reported (%s)", whale_strerror(r));
    if (me != 0 && r)
        FAIL("a count mismatch between ranks 0 and 1 failed rank %d: %s", me, whale_strerror(r));
    free(sc);
}

int main(int argc, char **argv)
{
    const char *algo = "auto", *expect = NULL, *list = "0,1,7,1001,65537,300001";
    static const struct option lo[] = { { "algo", required_argument, NULL, 'a' },
                                        { "sizes", required_argument, NULL, 's' },
                                        { "expect", required_argument, NULL, 'x' },
                                        { "win", required_argument, NULL, 'W' },
                                        { NULL, 0, NULL, 0 } };
    int o;
    while ((o = getopt_long(argc, argv, "a:s:x:W:", lo, NULL)) != -1) {
        if (o == 'a')
            algo = optarg;
        else if (o == 's')
            list = optarg;
        else if (o == 'x')
            expect = optarg;
        else if (o == 'W')
            g_win = !strcmp(optarg, "odd") ? 2 : 1;
        else
            return 2;
    }
    size_t sizes[32];
    int nsizes = 0;
    char *dup = strdup(list), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok && nsizes < 32; tok = strtok_r(NULL, ",", &save))
        sizes[nsizes++] = strtoull(tok, NULL, 10);
    free(dup);
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "a2a_check: init: %s\n", whale_strerror(rc));
        return 1;
    }
    if (whale_is_spare(ctx))
        return whale_finalize(ctx) ? 1 : 0;
    g_rank = whale_rank(ctx);
    if (whale_coll_set_algorithm(ctx, WHALE_COLL_ALLTOALL, algo))
        return 2;
    whale_group *w = whale_world(ctx);
    int n = whale_group_size(w);
    sweep(w, sizes, nsizes);
    /* after the first call: the shared segment is set up by then */
    if (expect) {
        const char *got = whale_coll_algorithm(w, WHALE_COLL_ALLTOALL, 1024, WHALE_FLOAT32);
        if (strcmp(got, expect))
            FAIL("alltoall on the world runs %s, want %s", got, expect);
    }
    mixed(w);
    errors(w);
    /* the segment path checks the block lengths it is sent */
    if (n >= 2 && !strcmp(whale_coll_algorithm(w, WHALE_COLL_ALLTOALL, 1024, WHALE_FLOAT32), "shm"))
        mismatch(w);
    /* a sub-group in reverse rank order without world rank 0 (n >= 3), and
     * a group of one */
    if (n >= 3) {
        int *ranks = malloc(sizeof(int) * (size_t)(n - 1));
        for (int k = 0; k < n - 1; k++)
            ranks[k] = n - 1 - k;
        whale_group *sub = NULL;
        rc = whale_group_create(w, ranks, n - 1, &sub);
        if (rc)
            FAIL("group_create: %s", whale_strerror(rc));
        else if (sub) {
            size_t few[] = { 0, 3, 4099 };
            sweep(sub, few, 3);
        }
        whale_group_free(sub);
        free(ranks);
    }
    int solo = g_rank;
    whale_group *one_g = NULL;
    /* each rank its own singleton (one id agreement over the world) */
    rc = whale_group_create(w, &solo, 1, &one_g);
    if (rc)
        FAIL("group_create of one: %s", whale_strerror(rc));
    else if (one_g) {
        size_t few[] = { 0, 5, 1001 };
        sweep(one_g, few, 3);
    }
    whale_group_free(one_g);
    int64_t f = g_fail, all = 0;
    rc = whale_allreduce(w, &f, &all, 1, WHALE_INT64, WHALE_SUM);
    if (rc || all)
        g_fail += rc ? 1 : 0;
    if (g_rank == 0 && !rc && !all)
        printf("a2a_check: OK %d cases per rank on %d ranks (alltoall %s)\n", g_cases, n,
               whale_coll_algorithm(w, WHALE_COLL_ALLTOALL, 1024, WHALE_FLOAT32));
    rc = whale_finalize(ctx) || rc || all;
    return rc ? 1 : 0;
}
