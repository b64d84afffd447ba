/* whale-ckpt convert --from-safetensors: refuse a file whose tensors
 * whale-train could not load as the model's weights, before anything is
 * written. Every tensor must be a parameter of the model (by whale's
 * names; the optimizer's "opt.m." / "opt.v." / "opt.master." copies of one
 * too) with its global shape and a float dtype, and every parameter must
 * be there. Problems are all named (the first few of each kind), so one
 * run shows what is wrong. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/ckpt.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/nameidx.h"

#include "ckpt_tool.h"

#define SHOW 8 /* problems named per kind; the rest are counted */

struct param {
    char name[96];
    int ndim;
    int64_t shape[WHALE_MAX_DIMS];
    bool seen;
};

struct check {
    const char *file, *model;
    struct param *p;
    size_t n, cap;
    struct whale_nameidx idx;
    int unknown, wrong;
};

static int add_param(const char *name, int ndim, const int64_t *shape, void *user)
{
    struct check *c = user;
    if (c->n == c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 64;
        struct param *np = realloc(c->p, nc * sizeof *np);
        if (!np)
            return WHALE_ENOMEM;
        c->p = np;
        c->cap = nc;
    }
    struct param *x = &c->p[c->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = ndim;
    for (int d = 0; d < ndim && d < WHALE_MAX_DIMS; d++)
        x->shape[d] = shape[d];
    return 0;
}

static void fmt(char *b, size_t n, int nd, const int64_t *s)
{
    size_t o = (size_t)snprintf(b, n, "[");
    for (int d = 0; d < nd && o < n; d++)
        o += (size_t)snprintf(b + o, n - o, d ? ", %lld" : "%lld", (long long)s[d]);
    if (o < n)
        snprintf(b + o, n - o, "]");
}

static int on_tensor(void *user, const char *name, enum whale_dtype dt, int ndim,
                     const int64_t *shape)
{
    struct check *c = user;
    static const char *opt[] = {"opt.m.", "opt.v.", "opt.master."};
    const char *base = name;
    for (size_t k = 0; k < sizeof opt / sizeof *opt; k++)
        if (!strncmp(name, opt[k], strlen(opt[k])))
            base = name + strlen(opt[k]);
    int i = whale_nameidx_find(&c->idx, base);
    if (i < 0) {
        if (c->unknown++ < SHOW)
            whale_error("%s: tensor \"%s\" is not a parameter of model %s", c->file, name,
                        c->model);
        return 0;
    }
    struct param *x = &c->p[i];
    if (base == name)
        x->seen = true;
    bool same = ndim == x->ndim;
    for (int d = 0; same && d < ndim; d++)
        same = shape[d] == x->shape[d] ||
               /* learned positions: one row per position of the run's --seq,
                * which may be shorter than the model's Seq */
               (d == 0 && !strcmp(base, "wpe") && shape[d] >= 1 && shape[d] <= x->shape[d]);
    bool is_float = dt == WHALE_FLOAT32 || dt == WHALE_BFLOAT16 || dt == WHALE_FLOAT16;
    if (!same || !is_float) {
        char a[128], b[128];
        fmt(a, sizeof a, ndim, shape);
        fmt(b, sizeof b, x->ndim, x->shape);
        if (c->wrong++ < SHOW)
            whale_error("%s: tensor %s: %s%s, model %s needs a float tensor of shape %s%s",
                        c->file, name, is_float ? "shape " : "not a float tensor, shape ", a,
                        c->model, b, strcmp(base, "wpe") ? "" : " (or fewer rows)");
        return 0;
    }
    return 0;
}

static int on_end(void *user)
{
    struct check *c = user;
    int missing = 0;
    for (size_t i = 0; i < c->n; i++)
        if (!c->p[i].seen && missing++ < SHOW)
            whale_error("%s: has no tensor %s, a parameter of model %s", c->file, c->p[i].name,
                        c->model);
    if (c->unknown > SHOW || c->wrong > SHOW || missing > SHOW)
        whale_error("%s: %d unknown, %d wrong and %d missing tensors in all", c->file,
                    c->unknown, c->wrong, missing);
    if (c->unknown)
        whale_error("%s: whale-train loads tensors by whale's parameter names (wte, "
                    "h.0.attn.qkv.w, ..., as `whale-ckpt convert CKPT OUT --params-only` "
                    "writes them); for a Hugging Face model directory use `whale-ckpt import "
                    "HF_DIR` or `whale-train --init-from HF_DIR`", c->file);
    if (c->unknown || c->wrong || missing) {
        whale_error("%s: not converted (%s is not a checkpoint of model %s)", c->file, c->file,
                    c->model);
        return WHALE_EDATA;
    }
    return 0;
}

int ckpt_tool_import(const char *in, const char *root, long long step, const char *model)
{
    whale_ckpt_config cfg;
    whale_ckpt_config_default(&cfg);
    cfg.root = root;
    if (!model) /* the caller asked for no check (--any-names) */
        return whale_ckpt_import_safetensors(in, &cfg, step) ? 1 : 0;
    struct whale_model_desc m;
    if (whale_model_desc_load(model, &m))
        return 1;
    struct check c = {.file = in, .model = model};
    int rc = whale_model_params(&m, add_param, &c);
    if (!rc && whale_nameidx_reserve(&c.idx, c.n))
        rc = WHALE_ENOMEM;
    for (size_t i = 0; i < c.n && !rc; i++)
        whale_nameidx_insert(&c.idx, c.p[i].name, (int)i);
    if (rc) {
        whale_error("model %s: cannot list its parameters (%s)", model, whale_strerror(rc));
    } else {
        whale_ckpt_import_check chk = {.tensor = on_tensor, .end = on_end, .user = &c};
        rc = whale_ckpt_import_safetensors_checked(in, &cfg, step, &chk);
    }
    whale_nameidx_free(&c.idx);
    free(c.p);
    return rc ? 1 : 0;
}
