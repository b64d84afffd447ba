/* A parameter of the model: its declaration (the global shape, this TP
 * rank's box of it, decay and initialisation) and its initial values, a
 * function of the seed, its name and the global index of each element, so
 * that every layout (TP, PP, DP, ZeRO) starts from the same model. */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void eng_split(int64_t g, int tp, int rank, bool uneven, int64_t *off, int64_t *len)
{
    int64_t chunk = uneven ? (g + tp - 1) / tp : g / tp;
    int64_t o = chunk * rank;
    if (o > g)
        o = g;
    int64_t e = o + chunk < g ? o + chunk : g;
    *off = o;
    *len = e - o;
}

void eng_param_decl(struct eng_param *p, const struct eng_dims *d, const char *name, int ndim,
                    const int64_t *gshape, enum whale_tp_split split, int split_dim, bool decay,
                    float std, float cst)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->split = split;
    p->split_dim = split_dim;
    p->decay = decay;
    p->init_std = std;
    p->init_const = cst;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->gshape[i] = gshape[i];
        p->shape[i] = gshape[i];
        p->off[i] = 0;
        if (split != WHALE_SPLIT_NONE && i == split_dim && d->tp > 1)
            eng_split(gshape[i], d->tp, d->tp_rank, split == WHALE_SPLIT_VOCAB, &p->off[i],
                      &p->shape[i]);
        p->numel *= (size_t)p->shape[i];
    }
}

/* ---- deterministic initialisation ----------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

void eng_param_init(const struct eng_param *p, uint64_t seed, float *dst)
{
    if (p->init_std == 0) {
        for (size_t i = 0; i < p->numel; i++)
            dst[i] = p->init_const;
        return;
    }
    uint64_t key = mix64(seed ^ mix64(name_hash(p->name)));
    int nd = p->ndim;
    int64_t gstride[WHALE_MAX_DIMS];
    gstride[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--)
        gstride[i] = gstride[i + 1] * p->gshape[i + 1];
#pragma omp parallel for schedule(static)
    for (size_t li = 0; li < p->numel; li++) {
        /* local row-major index -> global flat index */
        size_t r = li;
        int64_t gi = 0;
        for (int i = nd - 1; i >= 0; i--) {
            int64_t c = (int64_t)(r % (size_t)p->shape[i]);
            r /= (size_t)p->shape[i];
            gi += (c + p->off[i]) * gstride[i];
        }
        uint64_t h = mix64(key ^ mix64((uint64_t)gi));
        double u1 = ((h >> 11) + 1.0) / 9007199254740993.0; /* (0,1] */
        uint64_t h2 = mix64(h);
        double u2 = (h2 >> 11) / 9007199254740992.0;
        dst[li] = (float)(p->init_std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}
