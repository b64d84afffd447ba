/* Load a Hugging Face directory straight into a training engine of any
 * TP/PP/DP/ZeRO layout (whale-train --init-from): each rank maps the
 * safetensors files and copies only the elements of its own pieces (its
 * TP box, its ZeRO flat range), converting the dtype; the files are never
 * read whole by one rank, and nothing is written. The rank's memory grows
 * by a bounded amount while it loads (its weights exist already): the file
 * pages it has converted are dropped from its mapping as it goes. bf16
 * widens with streaming stores (hf_cvt.c); the engine skipped its random
 * initialisation (whale_engine_config.skip_init). */
#define _GNU_SOURCE
#include "hf_internal.h"

#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"

#include <jansson.h>
#include <sys/mman.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct load_ctx {
    struct hf_src *s;
    struct hf_ent *m;
    size_t nm;
    int rc;
    size_t pieces;
    uint64_t elems;
    double peak;        /* resident MB, the largest seen */
    const char *rel_lo; /* mapped source bytes from here on not yet dropped */
};

/* Mapped file pages are dropped from this process (madvise DONTNEED; they
 * stay in the page cache) every RELEASE bytes of a tensor read in order,
 * so a large embedding does not map whole while it converts. */
#define RELEASE (16u << 20)
#define PAGE 4096u

static double rss_mb(void);

/* the source bytes [.., end) of the tensor starting at t0 are done */
static void release_upto(struct load_ctx *c, const char *t0, const char *end)
{
    if (!c->rel_lo || c->rel_lo < t0 || c->rel_lo > end)
        c->rel_lo = t0;
    if ((size_t)(end - c->rel_lo) < RELEASE)
        return;
    uintptr_t a = ((uintptr_t)c->rel_lo + PAGE - 1) & ~(uintptr_t)(PAGE - 1),
              b = (uintptr_t)end & ~(uintptr_t)(PAGE - 1);
    double rss = rss_mb(); /* before the drop: the peak */
    c->peak = rss > c->peak ? rss : c->peak;
    if (a >= (uintptr_t)t0 && b > a) /* whole pages of this tensor only */
        (void)madvise((void *)a, b - a, MADV_DONTNEED); /* advice: failure changes nothing */
    c->rel_lo = (const char *)b;
}

#define GATHER 4096

/* n elements from, contiguous, to dt */
static int cvt(enum whale_dtype from, const void *src, enum whale_dtype dt, void *dst, int64_t n)
{
    if (from == WHALE_BFLOAT16 && dt == WHALE_FLOAT32) {
        hf_bf16_to_f32_stream(dst, src, (size_t)n);
        return 0;
    }
    return ckpt_convert(from, src, dt, dst, n);
}

/* tmp[i] = src[i * stride] for elements of es bytes */
static void gather(void *tmp, const char *src, int64_t n, int64_t stride, size_t es)
{
    if (es == 2) {
        const uint16_t *s = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)tmp)[i] = s[i * stride];
    } else if (es == 4) {
        const uint32_t *s = (const uint32_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)tmp)[i] = s[i * stride];
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)tmp + i * es, src + i * stride * (int64_t)es, es);
    }
}

/* Elements [g, g + len) of whale tensor m (row-major), converted to dt, into dst. */
static int fill_run(struct load_ctx *c, const struct hf_ent *m, int64_t g, int64_t len,
                    enum whale_dtype dt, void *dst)
{
    const size_t des = ckpt_dtype_size(dt);
    if (m->op == HF_ZERO) {
        memset(dst, 0, (size_t)len * des); /* zero bits are 0.0 in every float dtype */
        return 0;
    }
    struct hf_found x;
    if (m->op == HF_STACK) {
        const int64_t part = ckpt_shape_numel(m->ndim, m->shape) / m->nsrc;
        while (len > 0) {
            int j = (int)(g / part);
            int64_t n = part - g % part < len ? part - g % part : len;
            hf_find(c->s, m->src[j], &x);
            const size_t ses = ckpt_dtype_size(x.e->dtype);
            const char *t0 = hf_tdata(&x);
            int rc = cvt(x.e->dtype, t0 + (g % part) * ses, dt, dst, n);
            if (rc)
                return rc;
            release_upto(c, t0, t0 + (g % part + n) * ses);
            g += n;
            len -= n;
            dst = (char *)dst + n * des;
        }
        return 0;
    }
    hf_find(c->s, m->src[0], &x);
    const size_t ses = ckpt_dtype_size(x.e->dtype);
    const char *src = hf_tdata(&x);
    if (m->op == HF_COPY) { /* in RELEASE-sized steps: the pages done are dropped */
        const int64_t step = RELEASE / ses;
        for (int64_t o = 0; o < len; o += step) {
            int64_t n = len - o < step ? len - o : step;
            int rc = cvt(x.e->dtype, src + (g + o) * ses, dt, (char *)dst + o * des, n);
            if (rc)
                return rc;
            release_upto(c, src, src + (g + o + n) * ses);
        }
        return 0;
    }
    /* transposed: whale [R, K] element (r, k) is Hugging Face's [K, R] (k, r):
     * along a whale row, a column of the source (stride R) */
    const int64_t K = m->sshape[0], R = m->sshape[1];
    int64_t r = g / K, k = g % K;
    char tmp[GATHER * 4];
    while (len > 0) {
        int64_t n = len < GATHER ? len : GATHER;
        n = n < K - k ? n : K - k;
        gather(tmp, src + (k * R + r) * (int64_t)ses, n, R, ses);
        int rc = ckpt_convert(x.e->dtype, tmp, dt, dst, n);
        if (rc)
            return rc;
        len -= n;
        dst = (char *)dst + n * des;
        if ((k += n) == K) {
            k = 0;
            r++;
        }
    }
    return 0;
}

/* The mapped bytes of m's sources: read ahead before a piece (a cold page
 * cache is read while the first rows convert), dropped from this process's
 * page tables after it (the pages stay in the page cache; the rank's
 * resident memory grows by its own weights, not by every file page it
 * touched). */
static void advise(struct load_ctx *c, const struct hf_ent *m, int advice)
{
    for (int j = 0; j < m->nsrc; j++) {
        struct hf_found x;
        if (!hf_find(c->s, m->src[j], &x))
            continue;
        uintptr_t a = (uintptr_t)hf_tdata(&x), b = a + (x.e->end - x.e->begin);
        const uintptr_t pg = PAGE, base = (uintptr_t)x.f->map;
        a &= ~(pg - 1);
        if (advice == MADV_DONTNEED) { /* only whole pages of this tensor */
            a = ((uintptr_t)hf_tdata(&x) + pg - 1) & ~(pg - 1);
            b &= ~(pg - 1);
        }
        if (a < base)
            a = base;
        if (b > a)
            (void)madvise((void *)a, b - a, advice); /* advice only: errors change nothing */
    }
}

/* resident pages of this process (mapped file pages it touched included), MB */
static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (double)res * 4096.0 / 1e6;
}

static int piece_fn(const struct whale_tensor_piece *t, void *user)
{
    struct load_ctx *c = user;
    if (t->kind != WHALE_TENSOR_PARAM && t->kind != WHALE_TENSOR_MASTER)
        return 0; /* AdamW moments start at zero */
    const struct hf_ent *m = NULL;
    for (size_t k = 0; k < c->nm && !m; k++)
        if (!strcmp(c->m[k].whale, t->name))
            m = &c->m[k];
    if (!m) {
        whale_error("init-from: the engine's tensor %s has no Hugging Face counterpart", t->name);
        return WHALE_EDATA;
    }
    whale_ckpt_piece p;
    whale_ckpt_piece_box_flat(&p, t->name, t->dtype, t->ndim, t->global_shape, t->tp_offset,
                              t->tp_shape, t->flat_begin, t->flat_end, t->data);
    ckpt_region r;
    ckpt_region_from_piece(&r, &p);
    ckpt_runs it;
    ckpt_runs_init(&it, &r);
    advise(c, m, MADV_WILLNEED);
    int64_t g, len, ls;
    const size_t des = ckpt_dtype_size(t->dtype);
    while (ckpt_runs_next(&it, &g, &len, &ls)) {
        int rc = fill_run(c, m, g, len, t->dtype, (char *)t->data + ls * des);
        if (rc)
            return rc;
        c->elems += (uint64_t)len;
    }
    double rss = rss_mb(); /* before the drop: the peak with this piece's file pages */
    c->peak = rss > c->peak ? rss : c->peak;
    advise(c, m, MADV_DONTNEED);
    c->rel_lo = NULL;
    c->pieces++;
    return 0;
}

static double ts_diff(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

int whale_hf_load_engine(const char *hf_dir, whale_engine *e)
{
    struct whale_model_desc md;
    enum hf_family fam;
    int rc = hf_config_load(hf_dir, &md, &fam);
    if (rc)
        return rc;
    struct hf_src s;
    rc = hf_src_open(hf_dir, &s);
    struct hf_found probe;
    const char *prefix = fam != HF_GPT2 ? "model."
                         : hf_find(&s, "transformer.wte.weight", &probe) ? "transformer." : "";
    struct hf_ent *m = NULL;
    size_t nm = 0;
    unsigned char *used = NULL;
    enum whale_dtype dt0;
    if (!rc)
        rc = hf_map_build(&md, fam, prefix, &m, &nm);
    if (!rc)
        rc = hf_check_all(&s, m, nm, hf_dir, &used, &dt0);
    char embed[160];
    snprintf(embed, sizeof embed, "%s%s", prefix,
             fam == HF_GPT2 ? "wte.weight" : "embed_tokens.weight");
    if (!rc)
        rc = hf_check_leftovers(&s, used, md.tied_embeddings, embed, hf_dir);
    struct load_ctx c = {.s = &s, .m = m, .nm = nm};
    struct timespec t0, t1, u0, u1;
    const double rss0 = rss_mb();
    c.peak = rss0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &u0);
    if (!rc)
        rc = whale_engine_tensors(e, piece_fn, &c);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &u1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* the CPU time apart: on a loaded machine the wall time is mostly
     * waiting for a CPU */
    if (!rc)
        whale_info("init-from %s: %zu pieces, %llu elements (%s in the files) of this rank in "
                   "%.2f s (%.2f s of CPU), resident memory +%.0f MB at the peak (mapped file "
                   "pages included)", hf_dir, c.pieces, (unsigned long long)c.elems,
                   ckpt_dtype_st(dt0), ts_diff(&t0, &t1), ts_diff(&u0, &u1), c.peak - rss0);
    free(used);
    free(m);
    hf_src_close(&s);
    return rc;
}
