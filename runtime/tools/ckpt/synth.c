/* Synthetic GPT-shaped model for checkpoint tests and benchmarks.
 *
 * Tensors (H hidden, V vocab, S positions, per layer l), TP split:
 *   wte.weight [V, H] rows (vocab-parallel)   wpe.weight [S, H] replicated
 *   h.l.ln_1.{weight,bias} [H]                h.l.ln_2.{weight,bias} [H]
 *   h.l.attn.qkv.weight [3, H, H] dim 1       h.l.attn.qkv.bias [3, H] dim 1
 *     (q, k, v kept apart so a TP slice is a box in any TP degree: the
 *     fused-QKV interleaving trap of resharding)
 *   h.l.attn.proj.weight [H, H] dim 1 (row-parallel)   h.l.attn.proj.bias [H]
 *   h.l.mlp.fc.weight [4H, H] dim 0           h.l.mlp.fc.bias [4H] dim 0
 *   h.l.mlp.proj.weight [H, 4H] dim 1         h.l.mlp.proj.bias [H]
 *   ln_f.{weight,bias} [H] (last stage)
 * and opt.m.<name>, opt.v.<name> (Adam moments) with the same layout.
 * Layers go to PP stages in contiguous blocks; ZeRO >= 1 partitions the
 * moments, ZeRO 3 also the parameters, as flat ranges of the TP slice. */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tdesc {
    char name[96];
    int ndim;
    int64_t shape[3];
    int split;   /* TP split dimension, -1 replicated */
    int stage;   /* PP stage */
};

static int layer_of(const char *name)
{
    const char *p = strstr(name, "h.");
    if (!p || (p != name && p[-1] != '.'))
        return -1;
    return atoi(p + 2);
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static float value_h(uint64_t h, int kind, int64_t idx, int64_t step)
{
    uint64_t r = mix(h ^ mix((uint64_t)idx * 2654435761ull ^ ((uint64_t)step << 40)));
    /* ~N(0, 1): sum of four 16-bit uniforms */
    float g = ((float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) +
               (float)(r >> 48)) / 65536.0f - 2.0f;
    g *= 1.7320508f;
    if (kind == 1)
        return g * 1e-3f;
    if (kind == 2)
        return g * g * 1e-6f + 1e-12f;
    return g * 0.02f;
}

static int kind_of(const char *name)
{
    return !strncmp(name, "opt.m.", 6) ? 1 : !strncmp(name, "opt.v.", 6) ? 2 : 0;
}

float synth_value(const char *name, int64_t idx, int64_t step, int frozen)
{
    int l = layer_of(name);
    if (l >= 0 && l < frozen)
        step = 0;
    return value_h(name_hash(name), kind_of(name), idx, step);
}

static size_t model_tensors(const struct synth_model *m, int pp, struct tdesc **out)
{
    int H = m->hidden;
    size_t cap = (size_t)(m->layers * 12 + 4) * 3, n = 0;
    struct tdesc *t = calloc(cap, sizeof *t);
#define ADD(nm, nd, s0, s1, s2, sp, st)                                                       \
    do {                                                                                    \
        struct tdesc *x = &t[n++];                                                          \
        snprintf(x->name, sizeof x->name, "%s", nm);                                        \
        x->ndim = nd; x->shape[0] = s0; x->shape[1] = s1; x->shape[2] = s2;                 \
        x->split = sp; x->stage = st;                                                       \
    } while (0)
    ADD("wte.weight", 2, m->vocab, H, 0, 0, 0);
    ADD("wpe.weight", 2, m->seq, H, 0, -1, 0);
    for (int l = 0; l < m->layers; l++) {
        int st = (int)((int64_t)l * pp / m->layers);
        char b[96];
#define L(suffix, nd, s0, s1, s2, sp) \
        snprintf(b, sizeof b, "h.%d.%s", l, suffix); ADD(b, nd, s0, s1, s2, sp, st)
        L("ln_1.weight", 1, H, 0, 0, -1);
        L("ln_1.bias", 1, H, 0, 0, -1);
        L("attn.qkv.weight", 3, 3, H, H, 1);
        L("attn.qkv.bias", 2, 3, H, 0, 1);
        L("attn.proj.weight", 2, H, H, 0, 1);
        L("attn.proj.bias", 1, H, 0, 0, -1);
        L("ln_2.weight", 1, H, 0, 0, -1);
        L("ln_2.bias", 1, H, 0, 0, -1);
        L("mlp.fc.weight", 2, 4 * H, H, 0, 0);
        L("mlp.fc.bias", 1, 4 * H, 0, 0, 0);
        L("mlp.proj.weight", 2, H, 4 * H, 0, 1);
        L("mlp.proj.bias", 1, H, 0, 0, -1);
#undef L
    }
    ADD("ln_f.weight", 1, H, 0, 0, -1, pp - 1);
    ADD("ln_f.bias", 1, H, 0, 0, -1, pp - 1);
    size_t np = n;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < np; i++) {
            /* via a copy: the compiler cannot tell t[n] from t[i] (-Wrestrict) */
            char base[sizeof t[i].name];
            memcpy(base, t[i].name, sizeof base);
            t[n] = t[i];
            snprintf(t[n].name, sizeof t[n].name, "opt.%c.%.80s", k ? 'v' : 'm', base);
            n++;
        }
#undef ADD
    *out = t;
    return n;
}

int64_t synth_numel(const struct synth_model *m)
{
    struct tdesc *t;
    size_t n = model_tensors(m, 1, &t);
    int64_t s = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t e = 1;
        for (int d = 0; d < t[i].ndim; d++)
            e *= t[i].shape[d];
        s += e;
    }
    free(t);
    return s;
}

void synth_layout_of(int tp, int pp, int dp, int zero, int rank, struct synth_layout *o)
{
    struct whale_coords co;
    whale_grid_init(&o->grid);
    o->tp = tp; o->pp = pp; o->dp = dp; o->zero = zero;
    whale_grid_coords(&o->grid, rank, &co);
    o->tp_rank = co.tp;
    o->dp_rank = co.dp;
    o->pp_rank = co.pp;
}

/* Calls the element visitor with (local index, global flat index). */
static void fill_piece(whale_ckpt_piece *p, int64_t step, int frozen, bool nan)
{
    float *x = p->data;
    int64_t n = whale_ckpt_piece_numel(p);
    if (nan) {
        for (int64_t i = 0; i < n; i++)
            x[i] = NAN;
        return;
    }
    int nd = p->ndim;
    int64_t stride[WHALE_CKPT_MAX_DIMS], mi[WHALE_CKPT_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = s;
        s *= p->shape[d];
    }
    int64_t start = p->flat ? p->flat_begin : 0, rem = start;
    for (int d = nd - 1; d >= 0; d--) {
        mi[d] = p->count[d] ? rem % p->count[d] : 0;
        rem = p->count[d] ? rem / p->count[d] : 0;
    }
    int l = layer_of(p->name);
    int64_t st = l >= 0 && l < frozen ? 0 : step;
    uint64_t h = name_hash(p->name);
    int kind = kind_of(p->name);
    for (int64_t i = 0; i < n; i++) {
        int64_t g = 0;
        for (int d = 0; d < nd; d++)
            g += (p->offset[d] + mi[d]) * stride[d];
        x[i] = value_h(h, kind, g, st);
        for (int d = nd - 1; d >= 0; d--) {
            if (++mi[d] < p->count[d])
                break;
            mi[d] = 0;
        }
    }
}

int synth_pieces(const struct synth_model *m, const struct synth_layout *l, bool for_save,
                 bool fill, int64_t step, whale_ckpt_piece **out, size_t *nout)
{
    struct tdesc *t;
    size_t nt = model_tensors(m, l->pp, &t);
    whale_ckpt_piece *p = calloc(nt, sizeof *p);
    size_t n = 0;
    for (size_t i = 0; i < nt; i++) {
        if (t[i].stage != l->pp_rank)
            continue;
        int64_t off[3] = {0}, cnt[3];
        for (int d = 0; d < t[i].ndim; d++)
            cnt[d] = t[i].shape[d];
        if (t[i].split >= 0) {
            int d = t[i].split;
            if (cnt[d] % l->tp) {
                fprintf(stderr, "synth: %s dim %d (%lld) not divisible by TP %d\n", t[i].name, d,
                        (long long)cnt[d], l->tp);
                free(t);
                synth_free(p, n);
                return -1;
            }
            cnt[d] /= l->tp;
            off[d] = cnt[d] * l->tp_rank;
        }
        whale_ckpt_piece box, *q = &p[n];
        whale_ckpt_piece_box(&box, t[i].name, WHALE_FLOAT32, t[i].ndim, t[i].shape, off, cnt,
                             NULL);
        int64_t bn = whale_ckpt_piece_numel(&box);
        bool moment = !strncmp(t[i].name, "opt.", 4);
        bool partitioned = l->zero == 3 || (moment && l->zero >= 1);
        if (partitioned) { /* ZeRO: a flat range of the TP slice */
            int64_t a = bn * l->dp_rank / l->dp, b = bn * (l->dp_rank + 1) / l->dp;
            whale_ckpt_piece_box_flat(q, t[i].name, WHALE_FLOAT32, t[i].ndim, t[i].shape, off,
                                      cnt, a, b, NULL);
        } else if (for_save) { /* replicas: each DP rank writes 1/DP */
            whale_ckpt_piece_part(&box, l->dp_rank, l->dp, q);
        } else {
            *q = box;
        }
        q->name = strdup(t[i].name);
        q->data = malloc((size_t)whale_ckpt_piece_numel(q) * 4 + 4);
        fill_piece(q, step, m->frozen, !fill);
        n++;
    }
    free(t);
    *out = p;
    *nout = n;
    return 0;
}

void synth_free(whale_ckpt_piece *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)p[i].name);
        free(p[i].data);
    }
    free(p);
}

double synth_check(const whale_ckpt_piece *p, size_t n, int64_t step, int frozen, double tol,
                   double floor, long *count_bad)
{
    double worst = 0;
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t k = whale_ckpt_piece_numel(&p[i]);
        whale_ckpt_piece e = p[i];
        e.data = malloc((size_t)k * 4 + 4);
        fill_piece(&e, step, frozen, false);
        for (int64_t j = 0; j < k; j++) {
            double a = ((float *)p[i].data)[j], b = ((float *)e.data)[j];
            double den = fabs(b) > floor ? fabs(b) : floor;
            double err = fabs(a - b) / den;
            if (!(err <= tol)) {
                if (bad < 3)
                    fprintf(stderr, "synth: %s[%lld] = %g, expected %g\n", p[i].name,
                            (long long)j, a, b);
                bad++;
            }
            if (err > worst || err != err)
                worst = err != err ? INFINITY : err;
        }
        free(e.data);
    }
    if (count_bad)
        *count_bad = bad;
    return worst;
}
