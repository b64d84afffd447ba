/* Regions of a row-major tensor (a box, or a flat range of the flattened
 * tensor) and their overlaps. Every region is walked as its contiguous runs
 * in global flat order, so a box saved by TP and a flat ZeRO range loaded
 * by another layout intersect with one merge walk, whatever the layouts. */
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/checked.h"

#include <string.h>

bool ckpt_numel_ok(int ndim, const int64_t *shape, int64_t *out)
{
    int64_t n;
    /* 2^60 elements: bytes of any dtype (and Q8 scales) still fit int64 */
    if (ndim < 0 || ndim > WHALE_CKPT_MAX_DIMS || !whale_numel_i64(ndim, shape, &n) ||
        n > CKPT_MAX_NUMEL)
        return false;
    if (out)
        *out = n;
    return true;
}

int64_t ckpt_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

void ckpt_region_from_piece(ckpt_region *r, const whale_ckpt_piece *p)
{
    memset(r, 0, sizeof *r);
    r->ndim = p->ndim;
    memcpy(r->shape, p->shape, sizeof r->shape);
    memcpy(r->off, p->offset, sizeof r->off);
    memcpy(r->cnt, p->count, sizeof r->cnt);
    r->flat = p->flat;
    if (p->flat) {
        r->fb = p->flat_begin;
        r->fe = p->flat_end;
    }
}

int64_t ckpt_region_numel(const ckpt_region *r)
{
    if (r->flat)
        return r->fe - r->fb;
    return ckpt_shape_numel(r->ndim, r->cnt);
}

int ckpt_region_check(const ckpt_region *r, const char *what)
{
    if (r->ndim < 0 || r->ndim > WHALE_CKPT_MAX_DIMS) {
        whale_error("checkpoint: %s: %d dimensions (allowed 0..%d)", what, r->ndim,
                    WHALE_CKPT_MAX_DIMS);
        return WHALE_EINVAL;
    }
    for (int d = 0; d < r->ndim; d++) {
        if (r->shape[d] < 0) {
            whale_error("checkpoint: %s: negative extent %lld in dimension %d", what,
                        (long long)r->shape[d], d);
            return WHALE_EINVAL;
        }
        int64_t end;
        if (r->off[d] < 0 || r->cnt[d] < 0 || !whale_add_i64(r->off[d], r->cnt[d], &end) ||
            end > r->shape[d]) {
            whale_error("checkpoint: %s: dimension %d range offset %lld count %lld outside "
                        "[0, %lld)", what, d, (long long)r->off[d], (long long)r->cnt[d],
                        (long long)r->shape[d]);
            return WHALE_ERANGE;
        }
    }
    int64_t total;
    if (!ckpt_numel_ok(r->ndim, r->shape, &total)) {
        whale_error("checkpoint: %s: shape has a negative extent or more than 2^60 elements",
                    what);
        return WHALE_ERANGE;
    }
    int64_t box = ckpt_shape_numel(r->ndim, r->cnt);
    if (r->flat && (r->fb < 0 || r->fe < r->fb || r->fe > box)) {
        whale_error("checkpoint: %s: flat range [%lld, %lld) outside the %lld elements of its "
                    "box", what, (long long)r->fb, (long long)r->fe, (long long)box);
        return WHALE_ERANGE;
    }
    return 0;
}

/* Box runs: k = last dimension that is not full; everything inside one
 * index of dims 0..k-1 is one contiguous run. A flat sub-range clips the
 * sequence of runs (seek to the first, cut the last). */
void ckpt_runs_init(ckpt_runs *it, const ckpt_region *r)
{
    memset(it, 0, sizeof *it);
    it->r = r;
    int64_t s = 1;
    for (int d = r->ndim - 1; d >= 0; d--) {
        it->stride[d] = s;
        s *= r->shape[d];
    }
    int64_t box = ckpt_shape_numel(r->ndim, r->cnt);
    if (box == 0 || (r->flat && r->fe <= r->fb)) {
        it->nruns = 0;
        return;
    }
    int k = -1;
    for (int d = r->ndim - 1; d >= 0; d--)
        if (r->cnt[d] != r->shape[d]) {
            k = d;
            break;
        }
    it->k = k;
    if (k < 0) {
        it->runlen = box;
        it->nruns = 1;
    } else {
        it->runlen = r->cnt[k] * it->stride[k];
        it->nruns = ckpt_shape_numel(k, r->cnt);
    }
    if (r->flat) { /* seek to the run holding local index fb */
        it->idx = r->fb / it->runlen;
        int64_t rem = it->idx;
        for (int d = (k < 0 ? 0 : k) - 1; d >= 0; d--) {
            it->mi[d] = rem % r->cnt[d];
            rem /= r->cnt[d];
        }
    }
}

bool ckpt_runs_next(ckpt_runs *it, int64_t *gstart, int64_t *len, int64_t *lstart)
{
    const ckpt_region *r = it->r;
    if (it->idx >= it->nruns)
        return false;
    int64_t ls = it->idx * it->runlen, l = it->runlen, g;
    if (it->k < 0) {
        g = 0;
    } else {
        g = r->off[it->k] * it->stride[it->k];
        for (int d = 0; d < it->k; d++)
            g += (r->off[d] + it->mi[d]) * it->stride[d];
        for (int d = it->k - 1; d >= 0; d--) { /* odometer over dims 0..k-1 */
            if (++it->mi[d] < r->cnt[d])
                break;
            it->mi[d] = 0;
        }
    }
    it->idx++;
    if (r->flat) {
        if (ls >= r->fe)
            return it->idx = it->nruns, false;
        if (ls < r->fb) {
            g += r->fb - ls;
            l -= r->fb - ls;
            ls = r->fb;
        }
        if (ls + l > r->fe)
            l = r->fe - ls;
        ls -= r->fb;
    }
    *gstart = g;
    *len = l;
    *lstart = ls;
    return true;
}

void ckpt_region_bounds(const ckpt_region *r, int64_t *lo, int64_t *hi)
{
    if (ckpt_region_numel(r) == 0) {
        *lo = *hi = 0;
        return;
    }
    int64_t s = 1, a = 0, b = 0;
    for (int d = r->ndim - 1; d >= 0; d--) {
        a += r->off[d] * s;
        b += (r->off[d] + r->cnt[d] - 1) * s;
        s *= r->shape[d];
    }
    *lo = a; /* the box's bounds contain any flat sub-range of it */
    *hi = b + 1;
}

int64_t ckpt_region_overlap(const ckpt_region *src, const ckpt_region *dst,
                            ckpt_overlap_fn fn, void *u)
{
    int64_t slo, shi, dlo, dhi;
    ckpt_region_bounds(src, &slo, &shi);
    ckpt_region_bounds(dst, &dlo, &dhi);
    if (shi <= dlo || dhi <= slo)
        return 0;
    ckpt_runs a, b;
    ckpt_runs_init(&a, src);
    ckpt_runs_init(&b, dst);
    int64_t ag, al, als, bg, bl, bls, total = 0;
    bool ha = ckpt_runs_next(&a, &ag, &al, &als);
    bool hb = ckpt_runs_next(&b, &bg, &bl, &bls);
    while (ha && hb) {
        int64_t s = ag > bg ? ag : bg;
        int64_t e = ag + al < bg + bl ? ag + al : bg + bl;
        if (s < e) {
            fn(als + (s - ag), bls + (s - bg), e - s, u);
            total += e - s;
        }
        if (ag + al <= bg + bl)
            ha = ckpt_runs_next(&a, &ag, &al, &als);
        else
            hb = ckpt_runs_next(&b, &bg, &bl, &bls);
    }
    return total;
}

/* ---- piece helpers (public) --------------------------------------------- */

void whale_ckpt_piece_full(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                           int ndim, const int64_t *shape, void *data)
{
    memset(p, 0, sizeof *p);
    p->name = name;
    p->dtype = t;
    p->kind = whale_ckpt_kind_from_name(name);
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->count[d] = shape[d];
    }
    p->data = data;
}

void whale_ckpt_piece_box(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                          int ndim, const int64_t *shape, const int64_t *offset,
                          const int64_t *count, void *data)
{
    whale_ckpt_piece_full(p, name, t, ndim, shape, data);
    for (int d = 0; d < ndim; d++) {
        p->offset[d] = offset[d];
        p->count[d] = count[d];
    }
}

void whale_ckpt_piece_flat(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                           int ndim, const int64_t *shape, int64_t begin, int64_t end,
                           void *data)
{
    whale_ckpt_piece_full(p, name, t, ndim, shape, data);
    p->flat = true;
    p->flat_begin = begin;
    p->flat_end = end;
}

void whale_ckpt_piece_box_flat(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                               int ndim, const int64_t *shape, const int64_t *offset,
                               const int64_t *count, int64_t begin, int64_t end, void *data)
{
    whale_ckpt_piece_box(p, name, t, ndim, shape, offset, count, data);
    p->flat = true;
    p->flat_begin = begin;
    p->flat_end = end;
}

enum whale_ckpt_kind whale_ckpt_kind_from_name(const char *name)
{
    if (!name)
        return WHALE_CKPT_OTHER;
    if (!strncmp(name, "opt.m.", 6))
        return WHALE_CKPT_MOMENT1;
    if (!strncmp(name, "opt.v.", 6))
        return WHALE_CKPT_MOMENT2;
    if (!strncmp(name, "opt.", 4))
        return WHALE_CKPT_OTHER;
    return WHALE_CKPT_PARAM;
}

int64_t whale_ckpt_piece_numel(const whale_ckpt_piece *p)
{
    ckpt_region r;
    ckpt_region_from_piece(&r, p);
    return ckpt_region_numel(&r);
}

void whale_ckpt_piece_part(const whale_ckpt_piece *p, int i, int n, whale_ckpt_piece *out)
{
    *out = *p;
    size_t es = ckpt_dtype_size(p->dtype);
    if (p->flat) {
        int64_t len = p->flat_end - p->flat_begin;
        int64_t a = len * i / n, b = len * (i + 1) / n;
        out->flat_begin = p->flat_begin + a;
        out->flat_end = p->flat_begin + b;
        out->data = (char *)p->data + (size_t)a * es;
        return;
    }
    int d = 0;
    while (d < p->ndim - 1 && p->count[d] <= 1)
        d++;
    if (p->ndim == 0) { /* a scalar: part 0 holds it */
        if (i != 0) {
            out->flat = true;
            out->flat_begin = out->flat_end = 0;
        }
        return;
    }
    int64_t inner = ckpt_shape_numel(p->ndim - d - 1, p->count + d + 1);
    int64_t a = p->count[d] * i / n, b = p->count[d] * (i + 1) / n;
    out->offset[d] = p->offset[d] + a;
    out->count[d] = b - a;
    out->data = (char *)p->data + (size_t)(a * inner) * es;
}
