/* whale-bench comm: nccl-tests' command line and columns over Whale's
 * collectives, plus the algorithm the cost model chose.
 *
 *   whale-bench comm [allreduce|reduce_scatter|allgather|broadcast|reduce|alltoall|alltoallv]
 *                    [-b MIN] [-e MAX] [-f FACTOR | -i INCR] [-n ITERS] [-w WARMUP]
 *                    [-c 0|1] [-o sum|avg|max|min] [-d TYPE] [-a ALGO] [-g GROUP] [-r ROOT]
 *                    [-N]
 *
 * size is the bytes of the full vector (nccl-tests convention: for
 * reduce-scatter the send size, for allgather the receive size); time is
 * the slowest rank's mean per iteration; busbw = algbw x 2(p-1)/p for
 * allreduce, (p-1)/p for reduce-scatter, allgather and all-to-all, 1 for
 * broadcast and reduce. All-to-all: size is one rank's send buffer (count:
 * its elements, size/p to each peer); alltoallv sends uneven blocks, some
 * empty (a2a_count), within that size, whose nominal value algbw uses. */
#include "bench_comm.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "whale/comm.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/clock.h"

static const char *const colls[] = { "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                     "alltoall", "alltoallv" };
enum { C_ALLTOALL = 5, C_ALLTOALLV = 6, NCOLLS = 7 };

/* The library's name for collective k (the bench's index). */
static enum whale_coll lib_coll(int k)
{
    return k >= C_ALLTOALL ? WHALE_COLL_ALLTOALL : (enum whale_coll)k;
}
static const char *const ops[] = { "sum", "avg", "max", "min" };

void bench_comm_usage(void *stream)
{
    fprintf(stream,
            "Usage: whale-bench comm [COLLECTIVE] [options]\n"
            "Collective bandwidth/latency with nccl-tests' options and columns.\n"
            "COLLECTIVE: allreduce (default), reduce_scatter, allgather, broadcast, reduce,\n"
            "            alltoall, alltoallv\n"
            "\n"
            "  -b, --minbytes N     smallest size (K, M, G suffixes; default 8)\n"
            "  -e, --maxbytes N     largest size (default 64M)\n"
            "  -f, --stepfactor F   multiply the size by F each step (default 2)\n"
            "  -i, --stepbytes N    or add N bytes each step\n"
            "  -n, --iters N        timed iterations per size (default 20)\n"
            "  -w, --warmup_iters N untimed iterations first (default 5)\n"
            "  -c, --check 0|1      verify results, count wrong elements (default 1)\n"
            "  -o, --op OP          sum, avg, max, min (default sum)\n"
            "  -d, --datatype T     float, bfloat16, half, int32, int64, uint8 (default float)\n"
            "  -a, --algo A         auto, ring, rd, raben, hier, tree, shm (default: WHALE_COLL_ALGO,\n"
            "                       else auto, as in training)\n"
            "  -g, --group G        world (default), tp, pp, dp\n"
            "  -r, --root R         root of broadcast/reduce (default 0)\n"
            "  -N, --nonblocking    issue with the non-blocking call and wait\n"
            "  -W, --window         buffers from whale_shm_alloc (all-to-all on one node: the\n"
            "                       senders write into the receive buffer; default malloc)\n"
            "  -h, --help           show this help\n"
            "Run it under whale-run or srun --whale-...; exit status 1 if any result is wrong.\n");
}

/* whale_parse_size (K/M/G suffixes) into a size_t */
static int parse_size(const char *s, size_t *out)
{
    int64_t v = whale_parse_size(s);
    if (v < 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_dtype(const char *s, enum whale_dtype *t)
{
    static const struct { const char *n; enum whale_dtype t; } names[] = {
        { "float", WHALE_FLOAT32 }, { "float32", WHALE_FLOAT32 }, { "bfloat16", WHALE_BFLOAT16 },
        { "bf16", WHALE_BFLOAT16 }, { "half", WHALE_FLOAT16 }, { "float16", WHALE_FLOAT16 },
        { "fp16", WHALE_FLOAT16 }, { "int32", WHALE_INT32 }, { "int", WHALE_INT32 },
        { "int64", WHALE_INT64 }, { "uint8", WHALE_UINT8 } };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcasecmp(s, names[i].n)) {
            *t = names[i].t;
            return 0;
        }
    return -1;
}

/* Small integer test values: exact in every dtype, order-independent sums. */
static double val(int rank, size_t i) { return (double)((rank + (int)(i % 7)) % 4); }

static void put(void *b, size_t i, enum whale_dtype t, double v)
{
    switch (t) {
    case WHALE_FLOAT32: ((float *)b)[i] = (float)v; break;
    case WHALE_BFLOAT16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)b)[i] = (uint16_t)(u >> 16); break; }
    case WHALE_FLOAT16: { _Float16 h = (_Float16)v; memcpy((uint16_t *)b + i, &h, 2); break; }
    case WHALE_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case WHALE_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    default: ((uint8_t *)b)[i] = (uint8_t)v; break;
    }
}

static double get(const void *b, size_t i, enum whale_dtype t)
{
    switch (t) {
    case WHALE_FLOAT32: return ((const float *)b)[i];
    case WHALE_BFLOAT16: { uint32_t u = (uint32_t)((const uint16_t *)b)[i] << 16; float f; memcpy(&f, &u, 4); return f; }
    case WHALE_FLOAT16: { _Float16 h; memcpy(&h, (const uint16_t *)b + i, 2); return (double)h; }
    case WHALE_INT32: return ((const int32_t *)b)[i];
    case WHALE_INT64: return (double)((const int64_t *)b)[i];
    default: return ((const uint8_t *)b)[i];
    }
}

static double expect(int p, const int *wr, size_t i, int op, enum whale_dtype t)
{
    double acc = val(wr[0], i);
    for (int k = 1; k < p; k++) {
        double v = val(wr[k], i);
        acc = op == WHALE_MAX ? fmax(acc, v) : op == WHALE_MIN ? fmin(acc, v) : acc + v;
    }
    if (op == WHALE_AVG) {
        double a = t == WHALE_FLOAT32 || t == WHALE_BFLOAT16 || t == WHALE_FLOAT16 ? acc / p
                                                                                   : (double)((long long)acc / p);
        char tmp[8];
        if (t == WHALE_FLOAT32)
            return (float)((float)acc / (float)p);
        put(tmp, 0, t, a);
        return get(tmp, 0, t);
    }
    if (t == WHALE_UINT8)
        acc = (double)((long long)acc & 0xff);
    return acc;
}

struct cfg {
    int coll;
    size_t minb, maxb, stepb;
    double factor;
    int iters, warmup, check, op, root;
    enum whale_dtype t;
    const char *algo, *group;
    bool nonblocking;
    bool window; /* buffers from whale_shm_alloc */
};

/* Elements rank s sends to rank d in an alltoallv of about `base` per
 * peer: uneven (1/(p+1) to 2p/(p+1) of base), and none where s + d is a
 * multiple of p (s != d), so empty blocks are exercised; at most p * base
 * per rank in all. */
static size_t a2a_count(int p, int s, int d, size_t base)
{
    int k = (s + d) % p;
    if (k == 0 && s != d)
        return 0;
    return base * 2 * (size_t)(k + 1) / (size_t)(p + 1);
}

/* The tables of one alltoallv: packed blocks in rank order. */
struct a2a_tab {
    size_t *sc, *sd, *rc, *rd;
};

static void a2a_tables(struct a2a_tab *t, int p, int me, size_t base)
{
    size_t so = 0, ro = 0;
    for (int q = 0; q < p; q++) {
        t->sc[q] = a2a_count(p, me, q, base);
        t->rc[q] = a2a_count(p, q, me, base);
        t->sd[q] = so;
        t->rd[q] = ro;
        so += t->sc[q];
        ro += t->rc[q];
    }
}

/* Value of element i of the block rank s sends to rank d: exact in every
 * dtype, different for a neighbouring block or offset. */
static double a2a_val(int s, int d, size_t i) { return (double)((s * 5 + d * 3 + (int)(i % 11)) % 32); }

static struct a2a_tab g_tab; /* alltoallv tables of the current size */

static int run_op(whale_group *g, const struct cfg *c, void *send, void *recv, size_t count)
{
    whale_req *req = NULL;
    int rc;
    switch (c->coll) {
    case C_ALLTOALL:
        rc = whale_alltoall(g, send, recv, count, c->t);
        break;
    case C_ALLTOALLV:
        rc = whale_alltoallv(g, send, g_tab.sc, g_tab.sd, recv, g_tab.rc, g_tab.rd, c->t);
        break;
    case 0:
        rc = c->nonblocking ? whale_iallreduce(g, send, recv, count, c->t, c->op, &req)
                            : whale_allreduce(g, send, recv, count, c->t, c->op);
        break;
    case 1:
        rc = c->nonblocking ? whale_ireduce_scatter(g, send, recv, count, c->t, c->op, &req)
                            : whale_reduce_scatter(g, send, recv, count, c->t, c->op);
        break;
    case 2:
        rc = c->nonblocking ? whale_iallgather(g, send, recv, count, c->t, &req)
                            : whale_allgather(g, send, recv, count, c->t);
        break;
    case 3:
        rc = c->nonblocking ? whale_ibroadcast(g, recv, count, c->t, c->root, &req)
                            : whale_broadcast(g, recv, count, c->t, c->root);
        break;
    default:
        rc = whale_reduce(g, send, recv, count, c->t, c->op, c->root);
        break;
    }
    if (!rc && req)
        rc = whale_wait(req);
    return rc;
}

/* Phase 1, the command line. -1: go on; else the exit status (printed). */
static int parse_args(int argc, char **argv, struct cfg *c)
{
    static const struct option lo[] = {
        { "minbytes", required_argument, NULL, 'b' }, { "maxbytes", required_argument, NULL, 'e' },
        { "stepfactor", required_argument, NULL, 'f' }, { "stepbytes", required_argument, NULL, 'i' },
        { "iters", required_argument, NULL, 'n' }, { "warmup_iters", required_argument, NULL, 'w' },
        { "check", required_argument, NULL, 'c' }, { "op", required_argument, NULL, 'o' },
        { "datatype", required_argument, NULL, 'd' }, { "algo", required_argument, NULL, 'a' },
        { "group", required_argument, NULL, 'g' }, { "root", required_argument, NULL, 'r' },
        { "nonblocking", no_argument, NULL, 'N' }, { "help", no_argument, NULL, 'h' },
        { "window", no_argument, NULL, 'W' },
        { NULL, 0, NULL, 0 } };
    int o;
    long v;
    optind = 1;
    while ((o = getopt_long(argc, argv, "b:e:f:i:n:w:c:o:d:a:g:r:NWh", lo, NULL)) != -1) {
        /* numbers through util's checked parsers (whale/envnum.h) */
        switch (o) {
        case 'b':
            if (parse_size(optarg, &c->minb)) goto bad;
            break;
        case 'e':
            if (parse_size(optarg, &c->maxb)) goto bad;
            break;
        case 'f':
            if (whale_parse_double(optarg, 1.0, 1e6, &c->factor) || c->factor <= 1.0) goto bad;
            break;
        case 'i':
            if (parse_size(optarg, &c->stepb) || !c->stepb) goto bad;
            break;
        case 'n':
            if (whale_parse_long(optarg, 1, INT_MAX, &v)) goto bad;
            c->iters = (int)v;
            break;
        case 'w':
            if (whale_parse_long(optarg, 0, INT_MAX, &v)) goto bad;
            c->warmup = (int)v;
            break;
        case 'c':
            if (whale_parse_long(optarg, 0, 1, &v)) goto bad;
            c->check = (int)v;
            break;
        case 'o':
            c->op = -1;
            for (int k = 0; k < 4; k++)
                if (!strcasecmp(optarg, ops[k]))
                    c->op = k;
            if (c->op < 0) goto bad;
            break;
        case 'd':
            if (parse_dtype(optarg, &c->t)) goto bad;
            break;
        case 'a': c->algo = optarg; break;
        case 'g': c->group = optarg; break;
        case 'r':
            if (whale_parse_long(optarg, 0, INT_MAX, &v)) goto bad;
            c->root = (int)v;
            break;
        case 'N': c->nonblocking = true; break;
        case 'W': c->window = true; break;
        case 'h': bench_comm_usage(stdout); return 0;
        default: bench_comm_usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "whale-bench comm: bad value '%s' for -%c (see --help)\n", optarg, o);
        return 2;
    }
    if (optind < argc) {
        c->coll = -1;
        for (int k = 0; k < NCOLLS; k++)
            if (!strcasecmp(argv[optind], colls[k]) ||
                (k == 1 && !strcasecmp(argv[optind], "reducescatter")) ||
                (k == 0 && !strcasecmp(argv[optind], "all_reduce")) ||
                (k == 2 && !strcasecmp(argv[optind], "all_gather")))
                c->coll = k;
        if (c->coll < 0 || optind + 1 < argc) {
            fprintf(stderr, "whale-bench comm: unknown collective '%s' (allreduce, reduce_scatter, "
                            "allgather, broadcast, reduce, alltoall, alltoallv)\n", argv[optind]);
            return 2;
        }
    }
    if (c->minb > c->maxb) {
        fprintf(stderr, "whale-bench comm: -b %zu is larger than -e %zu\n", c->minb, c->maxb);
        return 2;
    }
    return -1;
}

/* What one run works on. */
struct bench {
    whale_ctx *ctx;
    whale_group *g;
    int p, me, *wr; /* group size, rank, world rank of each member */
    size_t esz, unit;
    bool reduces;
    void *send, *recv;
};

/* Phase 2, set up: the group, the algorithm, buffers for the largest size.
 * -1: go on; else the exit status (the context finalized). */
static int setup(const struct cfg *c, struct bench *b)
{
    int rc = whale_init(&b->ctx);
    if (rc) {
        fprintf(stderr, "whale-bench comm: init failed: %s\n", whale_strerror(rc));
        return 1;
    }
    whale_ctx *ctx = b->ctx;
    b->g = !strcmp(c->group, "world") ? whale_world(ctx)
         : !strcmp(c->group, "tp") ? whale_tp_group(ctx)
         : !strcmp(c->group, "pp") ? whale_pp_group(ctx)
         : !strcmp(c->group, "dp") ? whale_dp_group(ctx) : NULL;
    if (!b->g) {
        fprintf(stderr, "whale-bench comm: group '%s' is not one of world, tp, pp, dp (or this is a spare)\n",
                c->group);
        bool spare = whale_is_spare(ctx); /* not after whale_finalize frees ctx */
        whale_finalize(ctx);
        return spare ? 0 : 2;
    }
    /* no -a: whatever WHALE_COLL_ALGO (read by whale_init) chose stands */
    if (c->algo && whale_coll_set_algorithm(ctx, lib_coll(c->coll), c->algo)) {
        whale_finalize(ctx);
        return 2;
    }
    b->p = whale_group_size(b->g);
    b->me = whale_group_rank(b->g);
    if (c->root >= b->p) {
        fprintf(stderr, "whale-bench comm: -r %d is not a rank of the %d-rank group\n", c->root, b->p);
        whale_finalize(ctx);
        return 2;
    }
    b->esz = whale_dtype_size(c->t);
    b->reduces = c->coll == 0 || c->coll == 1 || c->coll == 4;
    b->unit = b->esz * (c->coll == 1 || c->coll == 2 || c->coll >= C_ALLTOALL ? (size_t)b->p : 1);
    size_t maxcount = c->maxb / b->unit + 1;
    b->wr = malloc(sizeof(int) * (size_t)b->p);
    if (c->window) {
        b->send = whale_shm_alloc(maxcount * b->unit + 64);
        b->recv = whale_shm_alloc(maxcount * b->unit + 64);
    }
    if (!b->wr || (c->window && (!b->send || !b->recv)) ||
        (!c->window && (posix_memalign(&b->send, 64, maxcount * b->unit + 64) ||
                        posix_memalign(&b->recv, 64, maxcount * b->unit + 64)))) {
        fprintf(stderr, "whale-bench comm: cannot allocate %zu bytes\n", 2 * maxcount * b->unit);
        whale_finalize(ctx);
        return 1;
    }
    for (int k = 0; k < b->p; k++)
        b->wr[k] = whale_group_world_rank(b->g, k);
    size_t *tab = calloc(4 * (size_t)b->p, sizeof(size_t));
    if (!tab) {
        whale_finalize(ctx);
        return 1;
    }
    g_tab = (struct a2a_tab){ tab, tab + b->p, tab + 2 * b->p, tab + 3 * b->p };
    memset(b->send, 0, maxcount * b->unit + 64);
    memset(b->recv, 0, maxcount * b->unit + 64);
    return -1;
}

static void print_header(const struct cfg *c, const struct bench *b)
{
    printf("# whale-bench comm %s: %d ranks, %d node(s), group %s, type %s, op %s%s\n",
           colls[c->coll], b->p, whale_nnodes(b->ctx), c->group, whale_dtype_name(c->t),
           b->reduces ? ops[c->op] : "none", c->nonblocking ? ", non-blocking" : "");
    printf("#\n# %10s %12s %9s %6s %6s %10s %8s %8s %6s  %s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "algo");
    printf("# %10s %12s %9s %6s %6s %10s %8s %8s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "");
}

/* Elements of the output that differ from the exact result, after one
 * more run on fresh inputs (a stale buffer cannot pass). */
/* The all-to-all inputs: block for rank d holds a2a_val(me, d, i). */
static void a2a_fill(const struct cfg *c, struct bench *b, size_t count)
{
    for (int d = 0; d < b->p; d++) {
        size_t n = c->coll == C_ALLTOALL ? count : g_tab.sc[d];
        size_t off = c->coll == C_ALLTOALL ? (size_t)d * count : g_tab.sd[d];
        for (size_t i = 0; i < n; i++)
            put(b->send, off + i, c->t, a2a_val(b->me, d, i));
    }
}

/* Every received element against (source, me, index). */
static int64_t a2a_wrong(const struct cfg *c, struct bench *b, size_t count, int *rc)
{
    size_t total = c->coll == C_ALLTOALL ? count * (size_t)b->p : 0;
    for (int s = 0; c->coll == C_ALLTOALLV && s < b->p; s++)
        total += g_tab.rc[s];
    a2a_fill(c, b, count);
    memset(b->recv, 0xCD, total * b->esz);
    *rc = run_op(b->g, c, b->send, b->recv, count);
    int64_t wrong = 0;
    for (int s = 0; !*rc && s < b->p; s++) {
        size_t n = c->coll == C_ALLTOALL ? count : g_tab.rc[s];
        size_t off = c->coll == C_ALLTOALL ? (size_t)s * count : g_tab.rd[s];
        for (size_t i = 0; i < n; i++) {
            char tmp[8];
            put(tmp, 0, c->t, a2a_val(s, b->me, i));
            if (get(b->recv, off + i, c->t) != get(tmp, 0, c->t))
                wrong++;
        }
    }
    return wrong;
}

static int64_t count_wrong(const struct cfg *c, struct bench *b, size_t count, int *rc)
{
    if (c->coll >= C_ALLTOALL)
        return a2a_wrong(c, b, count, rc);
    size_t in_n = c->coll == 1 ? count * (size_t)b->p : count;
    size_t out_n = c->coll == 2 ? count * (size_t)b->p : count;
    int64_t wrong = 0;
    for (size_t i = 0; i < in_n; i++)
        put(b->send, i, c->t, val(b->wr[b->me], i));
    memset(b->recv, 0xCD, out_n * b->esz);
    if (c->coll == 3 && b->me == c->root)
        for (size_t i = 0; i < count; i++)
            put(b->recv, i, c->t, val(b->wr[c->root], i));
    *rc = run_op(b->g, c, b->send, b->recv, count);
    for (size_t i = 0; !*rc && i < out_n; i++) {
        double want;
        if (c->coll == 2)
            want = val(b->wr[i / count], i % count);
        else if (c->coll == 3)
            want = val(b->wr[c->root], i);
        else if (c->coll == 4 && b->me != c->root)
            break;
        else
            want = expect(b->p, b->wr, c->coll == 1 ? (size_t)b->me * count + i : i, c->op, c->t);
        if (c->coll == 2 || c->coll == 3) {
            char tmp[8];
            put(tmp, 0, c->t, want);
            want = get(tmp, 0, c->t);
        }
        if (get(b->recv, i, c->t) != want)
            wrong++;
    }
    return wrong;
}

/* Phase 3, one size: warm-up, timed iterations, the check, one line on
 * rank 0. 0 (busbw in *busbw), 1 when results were wrong, -1 when the
 * collective failed. */
static int run_size(const struct cfg *c, struct bench *b, size_t bytes, double *busbw)
{
    size_t count = bytes / b->unit; /* per-rank block count for RS/AG, per-peer for all-to-all */
    size_t in_n = c->coll == 1 ? count * (size_t)b->p : c->coll >= C_ALLTOALL ? 0 : count;
    for (size_t i = 0; i < in_n; i++)
        put(b->send, i, c->t, val(b->wr[b->me], i));
    if (c->coll >= C_ALLTOALL) {
        a2a_tables(&g_tab, b->p, b->me, count);
        a2a_fill(c, b, count);
    }
    if (c->coll == 3)
        for (size_t i = 0; i < count; i++)
            put(b->recv, i, c->t, val(b->wr[c->root], i));
    int rc = 0;
    for (int k = 0; k < c->warmup && !rc; k++)
        rc = run_op(b->g, c, b->send, b->recv, count);
    if (!rc)
        rc = whale_barrier(b->g);
    double t0 = whale_now_s();
    for (int k = 0; k < c->iters && !rc; k++)
        rc = run_op(b->g, c, b->send, b->recv, count);
    double dt = (whale_now_s() - t0) / c->iters, tmax = 0;
    if (rc) {
        fprintf(stderr, "whale-bench comm: %s of %zu bytes failed: %s\n", colls[c->coll], bytes,
                whale_strerror(rc));
        return -1;
    }
    int64_t wrong = c->check ? count_wrong(c, b, count, &rc) : 0, allwrong = 0;
    /* time: the slowest rank's (non-negative doubles order like their
     * bit patterns, so an int64 MAX is exact) */
    int64_t tb, tmb = 0;
    memcpy(&tb, &dt, sizeof tb);
    if (!rc)
        rc = whale_allreduce(b->g, &tb, &tmb, 1, WHALE_INT64, WHALE_MAX);
    memcpy(&tmax, &tmb, sizeof tmax);
    if (!rc)
        rc = whale_allreduce(b->g, &wrong, &allwrong, 1, WHALE_INT64, WHALE_SUM);
    if (rc)
        return -1;
    int p = b->p;
    size_t tot = count * b->unit;
    double algbw = tot / tmax / 1e9;
    bool a2a = c->coll >= C_ALLTOALL;
    double factor = c->coll == 0 ? 2.0 * (p - 1) / p : c->coll <= 2 || a2a ? (double)(p - 1) / p : 1.0;
    if (p == 1)
        factor = c->coll <= 2 || a2a ? 0 : 1;
    const char *algo = whale_coll_algorithm(b->g, lib_coll(c->coll), count, c->t);
    if (a2a && !strcmp(algo, "ring"))
        algo = "pairwise";
    if (whale_rank(b->ctx) == 0)
        printf("  %10zu %12zu %9s %6s %6d %10.2f %8.2f %8.2f %6lld  %s\n", tot,
               c->coll == 1 || c->coll == 2 || a2a ? count * (size_t)p : count, whale_dtype_name(c->t),
               b->reduces ? ops[c->op] : "none", c->coll == 3 || c->coll == 4 ? c->root : -1, tmax * 1e6,
               algbw, algbw * factor, (long long)allwrong, algo);
    fflush(stdout);
    *busbw = algbw * factor;
    return allwrong ? 1 : 0;
}

int bench_comm_main(int argc, char **argv)
{
    struct cfg c = { .coll = 0, .minb = 8, .maxb = 64 << 20, .factor = 2, .iters = 20, .warmup = 5,
                     .check = 1, .op = WHALE_SUM, .root = 0, .t = WHALE_FLOAT32, .algo = NULL,
                     .group = "world" };
    int st = parse_args(argc, argv, &c);
    if (st >= 0)
        return st;
    whale_log_set_level(WHALE_LOG_WARN);
    struct bench b = { 0 };
    if ((st = setup(&c, &b)) >= 0)
        return st;
    if (whale_rank(b.ctx) == 0)
        print_header(&c, &b);
    int status = 0;
    double bwsum = 0;
    int nbw = 0;
    for (size_t bytes = c.minb; bytes <= c.maxb;) {
        double busbw = 0;
        int r = run_size(&c, &b, bytes, &busbw);
        if (r < 0) { /* the collective itself failed: stop */
            status = 1;
            break;
        }
        status |= r; /* wrong results: reported, go on */
        bwsum += busbw;
        nbw++;
        if (c.stepb) {
            bytes += c.stepb;
        } else {
            size_t nb = (size_t)((double)bytes * c.factor);
            bytes = nb > bytes ? nb : bytes + 1;
        }
    }
    /* Phase 4, report */
    if (whale_rank(b.ctx) == 0 && nbw)
        printf("# Avg bus bandwidth    : %g\n#\n", bwsum / nbw);
    /* memory beside the speed: the largest rank's peak RSS (buffers, the
     * shared segment's pages this rank touched, the library), which the
     * comparison scripts print beside the peer's */
    struct rusage ru;
    int64_t rss = getrusage(RUSAGE_SELF, &ru) ? -1 : (int64_t)ru.ru_maxrss, rssmax = rss;
    if (status == 0 && whale_allreduce(b.g, &rss, &rssmax, 1, WHALE_INT64, WHALE_MAX) == 0 &&
        whale_rank(b.ctx) == 0 && rssmax >= 0)
        printf("# Peak RSS per rank    : %.1f MiB (largest rank)\n", (double)rssmax / 1024.0);
    if (c.window) {
        whale_shm_free(b.send);
        whale_shm_free(b.recv);
    } else {
        free(b.send);
        free(b.recv);
    }
    free(b.wr);
    free(g_tab.sc);
    int rc = whale_finalize(b.ctx);
    return status || rc ? 1 : 0;
}
