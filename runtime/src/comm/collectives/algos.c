/* Collective algorithms as schedule builders (see sched.h).
 *
 * Notation: p ranks, my rank r, blocks of a balanced partition of `count`
 * elements (block b at part_off/part_len), chunk c of a block = elements
 * [c*chunk, (c+1)*chunk) of it. Ring chains are per chunk so that up to
 * `window` chunks are in flight (pipelining); all ring variants end with
 * rank r owning block r. */
#include "comm/collectives/sched.h"

#include <stdint.h>

#define AT(base, elems) ((char *)(base) + (size_t)(elems) * s->esz)
#define CAT(base, elems) ((const char *)(base) + (size_t)(elems) * s->esz)

static inline int mod(int a, int p) { return ((a % p) + p) % p; }

static inline size_t chunk_len(size_t blen, size_t c, size_t chunk)
{
    size_t lo = c * chunk;
    if (blen <= lo)
        return 0;
    return blen - lo < chunk ? blen - lo : chunk;
}

static size_t nchunks(size_t maxlen, size_t chunk)
{
    if (chunk == 0)
        chunk = 1;
    return maxlen ? (maxlen + chunk - 1) / chunk : 0;
}

static int pow2_floor(int p)
{
    int q = 1;
    while (q * 2 <= p)
        q *= 2;
    return q;
}

static void copy_all(struct sched *s, const void *send, void *recv, size_t count)
{
    sched_round(s);
    sched_copy(s, recv, send, count * s->esz);
}

/* Reduce-scatter rounds of chain c (ring; block r ends in out + c*chunk).
 * Partial sums go to work (full layout) or ping-pong buffers pp[2]. */
static void rs_ring_chain(struct sched *s, size_t count, size_t c, size_t chunk, const void *src,
                          void *work, void *pp0, void *pp1, void *rt, void *out, uint32_t tag0,
                          int avg_div)
{
    const int p = s->p, r = s->r;
    void *pp[2] = { pp0, pp1 };
    for (int st = 0; st < p - 1; st++) {
        int sb = mod(r - st - 1, p), rb = mod(r - st - 2, p);
        size_t soff = part_off(count, p, sb) + c * chunk;
        size_t slen = chunk_len(part_len(count, p, sb), c, chunk);
        size_t roff = part_off(count, p, rb) + c * chunk;
        size_t rlen = chunk_len(part_len(count, p, rb), c, chunk);
        const void *sp = st == 0 ? CAT(src, soff) : (work ? AT(work, soff) : pp[(st - 1) % 2]);
        bool last = st == p - 2;
        void *dst = last ? AT(out, c * chunk) : (work ? AT(work, roff) : pp[st % 2]);
        sched_round(s);
        sched_send(s, mod(r + 1, p), tag0 + (uint32_t)st, sp, slen * s->esz);
        sched_recv(s, mod(r - 1, p), tag0 + (uint32_t)st, rt, rlen * s->esz);
        sched_reduce(s, dst, CAT(src, roff), rt, rlen);
        if (last)
            sched_avg(s, dst, rlen, avg_div);
    }
}

/* Allgather rounds of chain c (ring; block r is already in dst). */
static void ag_ring_chain(struct sched *s, size_t count, size_t c, size_t chunk, void *dst,
                          uint32_t tag0)
{
    const int p = s->p, r = s->r;
    for (int st = 0; st < p - 1; st++) {
        int sb = mod(r - st, p), rb = mod(r - st - 1, p);
        size_t soff = part_off(count, p, sb) + c * chunk;
        size_t slen = chunk_len(part_len(count, p, sb), c, chunk);
        size_t roff = part_off(count, p, rb) + c * chunk;
        size_t rlen = chunk_len(part_len(count, p, rb), c, chunk);
        sched_round(s);
        sched_send(s, mod(r + 1, p), tag0 + (uint32_t)st, AT(dst, soff), slen * s->esz);
        sched_recv(s, mod(r - 1, p), tag0 + (uint32_t)st, AT(dst, roff), rlen * s->esz);
    }
}

/* send, recv: [count]; pipelined ring reduce-scatter + allgather, in recv. */
void build_allreduce_ring(struct sched *s, const void *send, void *recv, size_t count,
                          size_t chunk, int window, int avg_div)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, send, recv, count);
        return;
    }
    size_t maxlen = part_len(count, p, 0);
    if (chunk > maxlen)
        chunk = maxlen; /* same chunk count, scratch no larger than a block */
    size_t nch = nchunks(maxlen, chunk);
    size_t w = (size_t)window < nch ? (size_t)window : nch;
    char *tmp = sched_tmp(s, w * chunk * s->esz);
    if (!tmp)
        return;
    uint32_t nsteps = 2 * (uint32_t)(p - 1);
    for (size_t c = 0; c < nch; c++) {
        sched_chain(s);
        void *rt = tmp + (c % w) * chunk * s->esz;
        rs_ring_chain(s, count, c, chunk, send, recv, NULL, NULL, rt,
                      AT(recv, part_off(count, p, r)), (uint32_t)c * nsteps, avg_div);
        ag_ring_chain(s, count, c, chunk, recv, (uint32_t)c * nsteps + (uint32_t)(p - 1));
    }
}

/* Non-power-of-two groups fold the last p - p2 ranks onto the first ones
 * (tag 0) and get the result back at the end (tag 63). Returns the source
 * of the power-of-two phase, NULL for a folded-away rank. */
static const void *fold_in(struct sched *s, const void *send, void *recv, size_t count, void *tmp,
                           int p2)
{
    const int r = s->r, extra = s->p - p2;
    size_t bytes = count * s->esz;
    if (r >= p2) {
        sched_round(s);
        sched_send(s, r - p2, 0, send, bytes);
        sched_round(s);
        sched_recv(s, r - p2, 63, recv, bytes);
        return NULL;
    }
    if (r < extra) {
        sched_round(s);
        sched_recv(s, r + p2, 0, tmp, bytes);
        sched_reduce(s, recv, send, tmp, count);
        return recv;
    }
    return send;
}

static void fold_out(struct sched *s, void *recv, size_t count, int p2)
{
    if (s->r < s->p - p2) {
        sched_round(s);
        sched_send(s, s->r + p2, 63, recv, count * s->esz);
    }
}

/* send, recv: [count]; log2(p) exchanges of the whole vector. */
void build_allreduce_rd(struct sched *s, const void *send, void *recv, size_t count, int avg_div)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, send, recv, count);
        return;
    }
    int p2 = pow2_floor(p);
    void *tmp = sched_tmp(s, count * s->esz);
    if (!tmp)
        return;
    const void *src = fold_in(s, send, recv, count, tmp, p2);
    if (!src)
        return;
    if (src != recv) {
        sched_round(s);
        sched_copy(s, recv, src, count * s->esz);
    }
    uint32_t k = 1;
    for (int mask = 1; mask < p2; mask <<= 1, k++) {
        int partner = r ^ mask;
        sched_round(s);
        sched_send(s, partner, k, recv, count * s->esz);
        sched_recv(s, partner, k, tmp, count * s->esz);
        sched_reduce(s, recv, recv, tmp, count);
    }
    sched_avg(s, recv, count, avg_div);
    fold_out(s, recv, count, p2);
}

/* send, recv: [count]; recursive halving reduce-scatter over p2 blocks, then
 * recursive doubling allgather (Rabenseifner). */
void build_allreduce_raben(struct sched *s, const void *send, void *recv, size_t count, int avg_div)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, send, recv, count);
        return;
    }
    int p2 = pow2_floor(p);
    void *tmp = sched_tmp(s, count * s->esz);
    if (!tmp)
        return;
    const void *src = fold_in(s, send, recv, count, tmp, p2);
    if (!src)
        return;
    int lo = 0, hi = p2;
    uint32_t k = 1;
    for (int mask = p2 / 2; mask >= 1; mask >>= 1, k++) {
        int partner = r ^ mask, mid = (lo + hi) / 2;
        int klo = (r & mask) ? mid : lo, khi = (r & mask) ? hi : mid;
        int glo = (r & mask) ? lo : mid, ghi = (r & mask) ? mid : hi;
        size_t ko = part_off(count, p2, klo), kl = part_off(count, p2, khi - 1) +
                                                   part_len(count, p2, khi - 1) - ko;
        size_t go = part_off(count, p2, glo), gl = part_off(count, p2, ghi - 1) +
                                                   part_len(count, p2, ghi - 1) - go;
        sched_round(s);
        sched_send(s, partner, k, CAT(src, go), gl * s->esz);
        sched_recv(s, partner, k, tmp, kl * s->esz);
        sched_reduce(s, AT(recv, ko), CAT(src, ko), tmp, kl);
        src = recv;
        lo = klo;
        hi = khi;
    }
    sched_avg(s, AT(recv, part_off(count, p2, r)), part_len(count, p2, r), avg_div);
    k = 32;
    for (int mask = 1; mask < p2; mask <<= 1, k++) {
        int partner = r ^ mask;
        int mlo = r & ~(mask - 1), plo = partner & ~(mask - 1);
        size_t mo = part_off(count, p2, mlo), ml = part_off(count, p2, mlo + mask - 1) +
                                                   part_len(count, p2, mlo + mask - 1) - mo;
        size_t po = part_off(count, p2, plo), pl = part_off(count, p2, plo + mask - 1) +
                                                   part_len(count, p2, plo + mask - 1) - po;
        sched_round(s);
        sched_send(s, partner, k, AT(recv, mo), ml * s->esz);
        sched_recv(s, partner, k, AT(recv, po), pl * s->esz);
    }
    fold_out(s, recv, count, p2);
}

/* src: [count] (all blocks), out: [part_len(count, p, r)]. */
void build_rs_ring(struct sched *s, const void *src, void *work, void *out, size_t count,
                   size_t chunk, int window, int avg_div)
{
    const int p = s->p;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, src, out, count);
        return;
    }
    size_t maxlen = part_len(count, p, 0);
    if (chunk > maxlen)
        chunk = maxlen;
    size_t nch = nchunks(maxlen, chunk);
    size_t w = (size_t)window < nch ? (size_t)window : nch;
    size_t per = work ? 1 : 3;
    char *tmp = sched_tmp(s, w * per * chunk * s->esz);
    if (!tmp)
        return;
    for (size_t c = 0; c < nch; c++) {
        sched_chain(s);
        char *t = tmp + (c % w) * per * chunk * s->esz;
        void *p0 = work ? NULL : t + chunk * s->esz, *p1 = work ? NULL : t + 2 * chunk * s->esz;
        rs_ring_chain(s, count, c, chunk, src, work, p0, p1, t, out,
                      (uint32_t)(c * (size_t)(p - 1)), avg_div);
    }
}

/* Power-of-two p: recursive halving; src: [count], out: my block. */
void build_rs_halving(struct sched *s, const void *src, void *out, size_t count, int avg_div)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, src, out, count);
        return;
    }
    char *work = sched_tmp(s, 2 * count * s->esz);
    if (!work)
        return;
    char *rt = work + count * s->esz;
    const void *cur = src;
    int lo = 0, hi = p;
    uint32_t k = 1;
    for (int mask = p / 2; mask >= 1; mask >>= 1, k++) {
        int partner = r ^ mask, mid = (lo + hi) / 2;
        int klo = (r & mask) ? mid : lo, khi = (r & mask) ? hi : mid;
        int glo = (r & mask) ? lo : mid, ghi = (r & mask) ? mid : hi;
        size_t ko = part_off(count, p, klo), kl = part_off(count, p, khi - 1) +
                                                  part_len(count, p, khi - 1) - ko;
        size_t go = part_off(count, p, glo), gl = part_off(count, p, ghi - 1) +
                                                  part_len(count, p, ghi - 1) - go;
        sched_round(s);
        sched_send(s, partner, k, CAT(cur, go), gl * s->esz);
        sched_recv(s, partner, k, rt, kl * s->esz);
        void *dst = mask == 1 ? out : AT(work, ko);
        sched_reduce(s, dst, CAT(cur, ko), rt, kl);
        if (mask == 1)
            sched_avg(s, out, kl, avg_div);
        cur = work;
        lo = klo;
        hi = khi;
    }
}

/* in: my block [part_len(count, p, r)], dst: [count]. */
void build_ag_ring(struct sched *s, const void *in, void *dst, size_t count, size_t chunk,
                   int window)
{
    const int p = s->p, r = s->r;
    (void)window;
    if (!count)
        return;
    size_t nch = nchunks(part_len(count, p, 0), chunk);
    size_t mine = part_len(count, p, r), moff = part_off(count, p, r);
    for (size_t c = 0; c < nch; c++) {
        sched_chain(s);
        sched_round(s);
        sched_copy(s, AT(dst, moff + c * chunk), CAT(in, c * chunk),
                   chunk_len(mine, c, chunk) * s->esz);
        ag_ring_chain(s, count, c, chunk, dst, (uint32_t)(c * (size_t)(p - 1)));
    }
}

/* Power-of-two p: recursive doubling allgather. */
void build_ag_rd(struct sched *s, const void *in, void *dst, size_t count)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    sched_round(s);
    sched_copy(s, AT(dst, part_off(count, p, r)), in, part_len(count, p, r) * s->esz);
    uint32_t k = 1;
    for (int mask = 1; mask < p; mask <<= 1, k++) {
        int partner = r ^ mask;
        int mlo = r & ~(mask - 1), plo = partner & ~(mask - 1);
        size_t mo = part_off(count, p, mlo), ml = part_off(count, p, mlo + mask - 1) +
                                                  part_len(count, p, mlo + mask - 1) - mo;
        size_t po = part_off(count, p, plo), pl = part_off(count, p, plo + mask - 1) +
                                                  part_len(count, p, plo + mask - 1) - po;
        sched_round(s);
        sched_send(s, partner, k, AT(dst, mo), ml * s->esz);
        sched_recv(s, partner, k, AT(dst, po), pl * s->esz);
    }
}

/* Binomial tree rooted at root; buf: [count]. */
void build_bcast_tree(struct sched *s, void *buf, size_t count, int root)
{
    const int p = s->p;
    if (!count || p == 1)
        return;
    int vr = mod(s->r - root, p);
    size_t bytes = count * s->esz;
    int top;
    if (vr) {
        int low = vr & -vr;
        sched_round(s);
        sched_recv(s, mod(vr - low + root, p), 0, buf, bytes);
        top = low >> 1;
    } else {
        top = pow2_floor(p);
        if (top == p)
            top >>= 1;
        if (top >= p)
            top >>= 1;
    }
    sched_round(s);
    for (int mask = top; mask >= 1; mask >>= 1)
        if (vr + mask < p)
            sched_send(s, mod(vr + mask + root, p), 0, buf, bytes);
}

/* Pipelined chain root -> root+1 -> ...; buf: [count]. */
void build_bcast_chain(struct sched *s, void *buf, size_t count, int root, size_t chunk, int window)
{
    const int p = s->p;
    (void)window;
    if (!count || p == 1)
        return;
    int vr = mod(s->r - root, p);
    size_t nch = nchunks(count, chunk);
    for (size_t c = 0; c < nch; c++) {
        size_t len = chunk_len(count, c, chunk);
        sched_chain(s);
        if (vr > 0) {
            sched_round(s);
            sched_recv(s, mod(s->r - 1, p), (uint32_t)c, AT(buf, c * chunk), len * s->esz);
        }
        if (vr < p - 1) {
            sched_round(s);
            sched_send(s, mod(s->r + 1, p), (uint32_t)c, AT(buf, c * chunk), len * s->esz);
        }
    }
}

/* Binomial tree reduce to root; recv: [count] at the root only. */
void build_reduce_tree(struct sched *s, const void *send, void *recv, size_t count, int root,
                       int avg_div)
{
    const int p = s->p;
    if (!count)
        return;
    int vr = mod(s->r - root, p);
    size_t bytes = count * s->esz;
    char *tmp = sched_tmp(s, vr ? 2 * bytes : bytes);
    if (!tmp)
        return;
    void *acc = vr ? tmp : recv;
    void *rt = vr ? tmp + bytes : tmp;
    sched_round(s);
    sched_copy(s, acc, send, bytes);
    uint32_t k = 0;
    for (int mask = 1; mask < p; mask <<= 1, k++) {
        if (vr & mask) {
            sched_round(s);
            sched_send(s, mod(vr - mask + root, p), k, acc, bytes);
            return;
        }
        if (vr + mask < p) {
            sched_round(s);
            sched_recv(s, mod(vr + mask + root, p), k, rt, bytes);
            sched_reduce(s, acc, acc, rt, count);
        }
    }
    sched_avg(s, acc, count, avg_div);
}

/* Ring reduce-scatter, then every rank sends its reduced block to the root
 * (chunk by chunk, in the same chain). recv: [count] at the root only. */
void build_reduce_ring(struct sched *s, const void *send, void *recv, size_t count, int root,
                       size_t chunk, int window, int avg_div)
{
    const int p = s->p, r = s->r;
    if (!count)
        return;
    if (p == 1) {
        copy_all(s, send, recv, count);
        return;
    }
    size_t maxlen = part_len(count, p, 0);
    if (chunk > maxlen)
        chunk = maxlen;
    size_t nch = nchunks(maxlen, chunk);
    size_t w = (size_t)window < nch ? (size_t)window : nch;
    size_t ring = w * 3 * chunk;
    char *tmp = sched_tmp(s, (ring + (r == root ? 0 : maxlen)) * s->esz);
    if (!tmp)
        return;
    void *out = r == root ? AT(recv, part_off(count, p, r)) : tmp + ring * s->esz;
    uint32_t per = (uint32_t)p;  /* p - 1 ring steps + the gather */
    for (size_t c = 0; c < nch; c++) {
        sched_chain(s);
        char *t = tmp + (c % w) * 3 * chunk * s->esz;
        rs_ring_chain(s, count, c, chunk, send, NULL, t + chunk * s->esz,
                      t + 2 * chunk * s->esz, t, out, (uint32_t)c * per, avg_div);
        sched_round(s);
        uint32_t gtag = (uint32_t)c * per + (uint32_t)(p - 1);
        if (r != root) {
            sched_send(s, root, gtag, AT(out, c * chunk),
                       chunk_len(part_len(count, p, r), c, chunk) * s->esz);
        } else {
            for (int b = 0; b < p; b++)
                if (b != root)
                    sched_recv(s, b, gtag, AT(recv, part_off(count, p, b) + c * chunk),
                               chunk_len(part_len(count, p, b), c, chunk) * s->esz);
        }
    }
}

/* Dissemination barrier: ceil(log2 p) rounds of empty messages. */
void build_barrier(struct sched *s)
{
    const int p = s->p, r = s->r;
    s->keep_empty = true;
    uint32_t k = 0;
    for (int d = 1; d < p; d <<= 1, k++) {
        sched_round(s);
        sched_send(s, mod(r + d, p), k, NULL, 0);
        sched_recv(s, mod(r - d, p), k, NULL, 0);
    }
}
