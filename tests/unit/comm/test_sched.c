/* Every collective algorithm, simulated in one process: the schedules of
 * all p ranks run against a matcher with rendezvous semantics (a send
 * completes only when its receive is posted, so a schedule that would
 * deadlock on large messages deadlocks here), checking message sizes and
 * results for group sizes 1..9, odd counts, tiny pipelining chunks and
 * every dtype x reduction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/collectives/sched.h"

struct xf {
    int owner, peer, chain;
    uint32_t tag;
    void *buf;
    size_t bytes;
    bool send, done;
};

struct rank_state {
    struct sched s;
    int *round, *outstanding;
    bool *posted, *cdone;
    int first_open, next_chain;
};

static struct xf *g_x;
static size_t g_nx, g_capx;

static void post(struct rank_state *rs, int owner, int chain, const struct sched_xfer *x)
{
    if (g_nx == g_capx) {
        g_capx = g_capx ? 2 * g_capx : 256;
        g_x = realloc(g_x, g_capx * sizeof *g_x);
        assert_non_null(g_x);
    }
    g_x[g_nx++] = (struct xf){ owner, x->peer, chain, x->tag, x->buf, x->bytes, x->send, false };
    rs->outstanding[chain]++;
}

/* Run all ranks' schedules to completion; fails the test on deadlock or a
 * size mismatch. */
static void simulate(struct rank_state *rs, int p, int window)
{
    g_nx = 0;
    for (int r = 0; r < p; r++) {
        uint32_t n = rs[r].s.nchains;
        rs[r].round = calloc(n + 1, sizeof(int));
        rs[r].outstanding = calloc(n + 1, sizeof(int));
        rs[r].posted = calloc(n + 1, sizeof(bool));
        rs[r].cdone = calloc(n + 1, sizeof(bool));
        rs[r].first_open = rs[r].next_chain = 0;
    }
    for (;;) {
        bool progress = false, all_done = true;
        for (int r = 0; r < p; r++) {
            struct rank_state *st = &rs[r];
            struct sched *s = &st->s;
            int n = (int)s->nchains;
            while (st->next_chain < n && st->next_chain < st->first_open + window)
                st->next_chain++;
            for (int c = st->first_open; c < st->next_chain; c++) {
                const struct sched_chain *ch = &s->chains[c];
                while (!st->cdone[c] && st->outstanding[c] == 0) {
                    if (st->posted[c]) {
                        sched_run_actions(s, &s->rounds[ch->r0 + (uint32_t)st->round[c]]);
                        st->round[c]++;
                        st->posted[c] = false;
                        progress = true;
                    }
                    if ((uint32_t)st->round[c] == ch->nr) {
                        st->cdone[c] = true;
                        break;
                    }
                    const struct sched_round *rd = &s->rounds[ch->r0 + (uint32_t)st->round[c]];
                    for (uint32_t i = 0; i < rd->nx; i++) {
                        const struct sched_xfer *x = &s->xfers[rd->x0 + i];
                        assert_true(x->peer >= 0 && x->peer < p && x->peer != r);
                        post(st, r, c, x);
                    }
                    st->posted[c] = true;
                    progress = true;
                }
            }
            while (st->first_open < n && st->cdone[st->first_open])
                st->first_open++;
            if (st->first_open < n)
                all_done = false;
        }
        /* Match sends with receives, FIFO per (src, dst, tag). */
        for (size_t i = 0; i < g_nx; i++) {
            struct xf *a = &g_x[i];
            if (!a->send || a->done)
                continue;
            for (size_t j = 0; j < g_nx; j++) {
                struct xf *b = &g_x[j];
                if (b->send || b->done || b->owner != a->peer || b->peer != a->owner || b->tag != a->tag)
                    continue;
                if (a->bytes != b->bytes)
                    fail_msg("rank %d sends %zu bytes (tag %u) to %d which expects %zu", a->owner,
                             a->bytes, a->tag, a->peer, b->bytes);
                if (a->bytes)
                    memcpy(b->buf, a->buf, a->bytes);
                a->done = b->done = true;
                rs[a->owner].outstanding[a->chain]--;
                rs[b->owner].outstanding[b->chain]--;
                progress = true;
                break;
            }
        }
        /* Drop matched transfers (keeps the matcher linear-ish). */
        size_t w = 0;
        for (size_t i = 0; i < g_nx; i++)
            if (!g_x[i].done)
                g_x[w++] = g_x[i];
        g_nx = w;
        if (all_done)
            break;
        if (!progress)
            fail_msg("deadlock: p=%d, schedules cannot progress", p);
    }
    for (size_t i = 0; i < g_nx; i++)
        if (!g_x[i].done)
            fail_msg("unmatched %s from rank %d to %d (tag %u)", g_x[i].send ? "send" : "recv",
                     g_x[i].owner, g_x[i].peer, g_x[i].tag);
    for (int r = 0; r < p; r++) {
        free(rs[r].round);
        free(rs[r].outstanding);
        free(rs[r].posted);
        free(rs[r].cdone);
    }
}

/* ---- values and reference ------------------------------------------------- */

static double val(int rank, size_t i, int op)
{
    double v = (double)((rank * 3 + (int)(i % 11)) % 5);
    if (op == WHALE_MAX || op == WHALE_MIN)
        v += (double)((rank * 7 + (int)i) % 9);
    return v;
}

static void put(void *buf, size_t i, enum whale_dtype t, double v)
{
    switch (t) {
    case WHALE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case WHALE_BFLOAT16: ((uint16_t *)buf)[i] = comm_f32_to_bf16((float)v); break;
    case WHALE_FLOAT16: ((uint16_t *)buf)[i] = comm_f32_to_f16((float)v); break;
    case WHALE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case WHALE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case WHALE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
    }
}

static double get(const void *buf, size_t i, enum whale_dtype t)
{
    switch (t) {
    case WHALE_FLOAT32: return ((const float *)buf)[i];
    case WHALE_BFLOAT16: return comm_bf16_to_f32(((const uint16_t *)buf)[i]);
    case WHALE_FLOAT16: return comm_f16_to_f32(((const uint16_t *)buf)[i]);
    case WHALE_INT32: return ((const int32_t *)buf)[i];
    case WHALE_INT64: return (double)((const int64_t *)buf)[i];
    case WHALE_UINT8: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* Expected reduction of element i over p ranks, in dtype t. */
static double expect(int p, size_t i, enum whale_dtype t, int op)
{
    double acc = val(0, i, op);
    for (int r = 1; r < p; r++) {
        double v = val(r, i, op);
        acc = op == WHALE_MAX ? (v > acc ? v : acc) : op == WHALE_MIN ? (v < acc ? v : acc) : acc + v;
    }
    if (op == WHALE_AVG) {
        switch (t) {
        case WHALE_FLOAT32: return (float)((float)acc / (float)p);
        case WHALE_BFLOAT16: return comm_bf16_to_f32(comm_f32_to_bf16((float)acc / (float)p));
        case WHALE_FLOAT16: return comm_f16_to_f32(comm_f32_to_f16((float)acc / (float)p));
        default: return (double)((long long)acc / p);
        }
    }
    return acc;
}

enum kind { K_AR_RING, K_AR_RD, K_AR_RABEN, K_RS_RING, K_RS_HALV, K_AG_RING, K_AG_RD, K_BC_TREE,
            K_BC_CHAIN, K_RED_TREE, K_RED_RING, K_BARRIER, K_COUNT };
static const char *const kind_names[K_COUNT] = { "allreduce/ring", "allreduce/rd", "allreduce/raben",
    "reduce_scatter/ring", "reduce_scatter/halving", "allgather/ring", "allgather/rd",
    "broadcast/tree", "broadcast/chain", "reduce/tree", "reduce/ring", "barrier" };

static bool pow2(int p) { return (p & (p - 1)) == 0; }

static void run_case(enum kind k, int p, size_t count, enum whale_dtype t, int op, size_t chunk,
                     int window, bool inplace)
{
    size_t esz = whale_dtype_size(t);
    struct rank_state *rs = calloc((size_t)p, sizeof *rs);
    void **send = calloc((size_t)p, sizeof *send), **recv = calloc((size_t)p, sizeof *recv);
    int root = p > 2 ? p - 2 : 0;
    int avg = op == WHALE_AVG ? p : 0;
    /* Per-rank input count: full vector for allreduce/bcast/reduce,
     * p blocks for reduce-scatter, one block for allgather. */
    size_t in_n = k == K_RS_RING || k == K_RS_HALV ? count * (size_t)p : count;
    size_t out_n = k == K_AG_RING || k == K_AG_RD ? count * (size_t)p
                 : k == K_RS_RING || k == K_RS_HALV ? count : count;
    for (int r = 0; r < p; r++) {
        send[r] = malloc((in_n > out_n ? in_n : out_n) * esz + 1);
        recv[r] = malloc((out_n > in_n ? out_n : in_n) * esz + 1);
        for (size_t i = 0; i < in_n; i++)
            put(send[r], i, t, val(r, i, op));
        memset(recv[r], 0xAB, out_n * esz + 1);
        if (k == K_BC_TREE || k == K_BC_CHAIN)
            memcpy(recv[r], send[r], count * esz);
        if (inplace && (k == K_AR_RING || k == K_AR_RD || k == K_AR_RABEN))
            memcpy(recv[r], send[r], count * esz);
        const void *src = inplace && (k == K_AR_RING || k == K_AR_RD || k == K_AR_RABEN) ? recv[r] : send[r];
        struct sched *s = &rs[r].s;
        sched_init(s, p, r, t, op);
        switch (k) {
        case K_AR_RING: build_allreduce_ring(s, src, recv[r], count, chunk, window, avg); break;
        case K_AR_RD: build_allreduce_rd(s, src, recv[r], count, avg); break;
        case K_AR_RABEN: build_allreduce_raben(s, src, recv[r], count, avg); break;
        case K_RS_RING: build_rs_ring(s, send[r], NULL, recv[r], in_n, chunk, window, avg); break;
        case K_RS_HALV: build_rs_halving(s, send[r], recv[r], in_n, avg); break;
        case K_AG_RING: build_ag_ring(s, send[r], recv[r], out_n, chunk, window); break;
        case K_AG_RD: build_ag_rd(s, send[r], recv[r], out_n); break;
        case K_BC_TREE: build_bcast_tree(s, recv[r], count, root); break;
        case K_BC_CHAIN: build_bcast_chain(s, recv[r], count, root, chunk, window); break;
        case K_RED_TREE: build_reduce_tree(s, send[r], r == root ? recv[r] : NULL, count, root, avg); break;
        case K_RED_RING: build_reduce_ring(s, send[r], r == root ? recv[r] : NULL, count, root, chunk, window, avg); break;
        case K_BARRIER: build_barrier(s); break;
        default: break;
        }
        assert_int_equal(s->err, 0);
    }
    simulate(rs, p, window);
    for (int r = 0; r < p; r++) {
        bool check = true;
        for (size_t i = 0; check && i < out_n; i++) {
            double want, got = get(recv[r], i, t);
            switch (k) {
            case K_AG_RING: case K_AG_RD: {
                int from = (int)(i / count);
                want = get(send[from], i % count, t);
                break;
            }
            case K_BC_TREE: case K_BC_CHAIN: want = val(root, i, op); break;
            case K_RS_RING: case K_RS_HALV: want = expect(p, (size_t)r * count + i, t, op); break;
            case K_RED_TREE: case K_RED_RING:
                if (r != root) { check = false; continue; }
                want = expect(p, i, t, op);
                break;
            case K_BARRIER: check = false; continue;
            default: want = expect(p, i, t, op); break;
            }
            if (t == WHALE_UINT8 && op != WHALE_MAX && op != WHALE_MIN && k != K_AG_RING &&
                k != K_AG_RD && k != K_BC_TREE && k != K_BC_CHAIN)
                want = (double)((long long)want & 0xff);
            if (got != want)
                fail_msg("%s p=%d count=%zu %s op=%d chunk=%zu window=%d%s: rank %d element %zu = %g, want %g",
                         kind_names[k], p, count, whale_dtype_name(t), op, chunk, window,
                         inplace ? " in place" : "", r, i, got, want);
        }
        /* The guard byte after the output must be untouched. */
        if (k != K_BARRIER && !(k == K_RED_TREE || k == K_RED_RING) && out_n)
            assert_int_equal(((unsigned char *)recv[r])[out_n * esz], 0xAB);
    }
    for (int r = 0; r < p; r++) {
        sched_free(&rs[r].s);
        free(send[r]);
        free(recv[r]);
    }
    free(rs);
    free(send);
    free(recv);
}

static const size_t counts[] = { 0, 1, 2, 3, 7, 64, 1001 };
static const struct { size_t chunk; int window; } pipes[] = { { 3, 2 }, { 1 << 20, 4 }, { 16, 1 } };

static void sweep(enum kind k, int pmin, int pmax, bool only_pow2)
{
    for (int p = pmin; p <= pmax; p++) {
        if (only_pow2 && !pow2(p))
            continue;
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
            for (int t = 0; t < WHALE_DTYPE_COUNT_; t++)
                for (int op = 0; op < WHALE_OP_COUNT_; op++) {
                    bool reduces = k != K_AG_RING && k != K_AG_RD && k != K_BC_TREE &&
                                   k != K_BC_CHAIN && k != K_BARRIER;
                    if (!reduces && op > 0)
                        continue;
                    /* every dtype with SUM and AVG; the others with fp32/bf16/uint8 */
                    if ((!reduces || op == WHALE_MIN || op == WHALE_MAX) && t != WHALE_FLOAT32 &&
                        t != WHALE_UINT8 && t != WHALE_BFLOAT16)
                        continue;
                    /* pipelining settings only matter to the chunked builders */
                    bool chunked = k == K_AR_RING || k == K_RS_RING || k == K_AG_RING ||
                                   k == K_BC_CHAIN || k == K_RED_RING;
                    size_t npipes = chunked ? sizeof pipes / sizeof *pipes : 1;
                    for (size_t pi = 0; pi < npipes; pi++)
                        run_case(k, p, counts[ci], (enum whale_dtype)t, op, pipes[pi].chunk,
                                 pipes[pi].window, false);
                    if (k <= K_AR_RABEN && op == WHALE_SUM)
                        run_case(k, p, counts[ci], (enum whale_dtype)t, op, 5, 3, true);
                }
    }
}

static void t_allreduce_ring(void **st) { (void)st; sweep(K_AR_RING, 1, 9, false); }
static void t_allreduce_rd(void **st) { (void)st; sweep(K_AR_RD, 1, 9, false); }
static void t_allreduce_raben(void **st) { (void)st; sweep(K_AR_RABEN, 1, 9, false); }
static void t_rs_ring(void **st) { (void)st; sweep(K_RS_RING, 1, 9, false); }
static void t_rs_halving(void **st) { (void)st; sweep(K_RS_HALV, 1, 8, true); }
static void t_ag_ring(void **st) { (void)st; sweep(K_AG_RING, 1, 9, false); }
static void t_ag_rd(void **st) { (void)st; sweep(K_AG_RD, 1, 8, true); }
static void t_bcast_tree(void **st) { (void)st; sweep(K_BC_TREE, 1, 9, false); }
static void t_bcast_chain(void **st) { (void)st; sweep(K_BC_CHAIN, 1, 9, false); }
static void t_reduce_tree(void **st) { (void)st; sweep(K_RED_TREE, 1, 9, false); }
static void t_reduce_ring(void **st) { (void)st; sweep(K_RED_RING, 1, 9, false); }
static void t_barrier(void **st) { (void)st; for (int p = 1; p <= 9; p++) run_case(K_BARRIER, p, 0, WHALE_UINT8, 0, 1, 1, false); }

/* 16-bit conversions: round to nearest even, NaN stays NaN. */
static void t_convert(void **st)
{
    (void)st;
    assert_int_equal(comm_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(comm_f32_to_bf16(1.00390625f), 0x3f80); /* tie -> even */
    assert_int_equal(comm_f32_to_bf16(1.01171875f), 0x3f82); /* tie -> even (up) */
    assert_true(comm_bf16_to_f32(comm_f32_to_bf16(__builtin_nanf(""))) !=
                comm_bf16_to_f32(comm_f32_to_bf16(__builtin_nanf(""))));
    assert_int_equal(comm_f32_to_f16(1.0f), 0x3c00);
    assert_true(comm_f16_to_f32(comm_f32_to_f16(65504.0f)) == 65504.0f);
    /* fp32 accumulation: 2048 + 1 + 1 in fp16 steps stays exact only
     * per step rounding; one step of 2049.0 rounds to 2048 (even). */
    uint16_t a = comm_f32_to_f16(2048.0f), b = comm_f32_to_f16(1.0f), d;
    comm_reduce(&d, &a, &b, 1, WHALE_FLOAT16, WHALE_SUM);
    assert_true(comm_f16_to_f32(d) == 2048.0f);
    float x[37], y[37];
    for (int i = 0; i < 37; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    comm_reduce(x, x, y, 37, WHALE_FLOAT32, WHALE_SUM);
    for (int i = 0; i < 37; i++)
        assert_true(x[i] == (float)i + 1.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_convert),
        cmocka_unit_test(t_allreduce_ring),
        cmocka_unit_test(t_allreduce_rd),
        cmocka_unit_test(t_allreduce_raben),
        cmocka_unit_test(t_rs_ring),
        cmocka_unit_test(t_rs_halving),
        cmocka_unit_test(t_ag_ring),
        cmocka_unit_test(t_ag_rd),
        cmocka_unit_test(t_bcast_tree),
        cmocka_unit_test(t_bcast_chain),
        cmocka_unit_test(t_reduce_tree),
        cmocka_unit_test(t_reduce_ring),
        cmocka_unit_test(t_barrier),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_x);
    return rc;
}
