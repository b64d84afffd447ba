/* Load a Hugging Face directory straight into a training engine of any
 * TP/PP/DP/ZeRO layout (whale-train --init-from): each rank maps the
 * safetensors files and copies only the elements of its own pieces (its
 * TP box, its ZeRO flat range), converting the dtype; the files are never
 * read whole by one rank, and nothing is written. */
#define _GNU_SOURCE
#include "hf_internal.h"

#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"

#include <jansson.h>
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
};

#define GATHER 4096

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
            int rc = ckpt_convert(x.e->dtype, (const char *)hf_tdata(&x) + (g % part) * ses, dt,
                                  dst, n);
            if (rc)
                return rc;
            g += n;
            len -= n;
            dst = (char *)dst + n * des;
        }
        return 0;
    }
    hf_find(c->s, m->src[0], &x);
    const size_t ses = ckpt_dtype_size(x.e->dtype);
    const char *src = hf_tdata(&x);
    if (m->op == HF_COPY)
        return ckpt_convert(x.e->dtype, src + g * ses, dt, dst, len);
    /* transposed: whale [R, K] element (r, k) is Hugging Face's [K, R] (k, r) */
    const int64_t K = m->sshape[0], R = m->sshape[1];
    char tmp[GATHER * 4];
    while (len > 0) {
        int64_t n = len < GATHER ? len : GATHER;
        for (int64_t i = 0; i < n; i++) {
            int64_t gi = g + i, r = gi / K, k = gi % K;
            memcpy(tmp + i * ses, src + (k * R + r) * ses, ses);
        }
        int rc = ckpt_convert(x.e->dtype, tmp, dt, dst, n);
        if (rc)
            return rc;
        g += n;
        len -= n;
        dst = (char *)dst + n * des;
    }
    return 0;
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
    int64_t g, len, ls;
    const size_t des = ckpt_dtype_size(t->dtype);
    while (ckpt_runs_next(&it, &g, &len, &ls)) {
        int rc = fill_run(c, m, g, len, t->dtype, (char *)t->data + ls * des);
        if (rc)
            return rc;
        c->elems += (uint64_t)len;
    }
    c->pieces++;
    return 0;
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
    struct timespec t0, t1;
    const double rss0 = rss_mb();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!rc)
        rc = whale_engine_tensors(e, piece_fn, &c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc)
        whale_info("init-from %s: %zu pieces, %llu elements (%s in the files) of this rank in "
                   "%.2f s, resident memory +%.0f MB (file pages it mapped included)", hf_dir,
                   c.pieces, (unsigned long long)c.elems, ckpt_dtype_st(dt0),
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                   rss_mb() - rss0);
    free(used);
    free(m);
    hf_src_close(&s);
    return rc;
}
