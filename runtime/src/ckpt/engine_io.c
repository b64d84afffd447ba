/* Glue between the training engine's tensor enumeration (whale/engine.h)
 * and checkpoints: engine pieces become ckpt pieces (box = the TP slice,
 * flat range = the ZeRO shard of it), the scalar train state rides in the
 * manifest. Only the engine's public interface is used. */
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MASTER_PREFIX "opt.master."

struct collect {
    whale_ckpt_piece *p;
    char (*names)[128];
    size_t n, cap;
    bool writers_only;
    /* what to do with the pieces before the walk ends: with a remote
     * offload tier some of them live only until then (transient) */
    int (*use)(struct collect *c);
    void *ctx;
};

static int collect_fn(const struct whale_tensor_piece *t, void *user)
{
    struct collect *c = user;
    if (c->writers_only && !t->writer)
        return 0;
    if (t->ndim > WHALE_CKPT_MAX_DIMS)
        return WHALE_EINVAL;
    if (c->n == c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 256;
        whale_ckpt_piece *np = realloc(c->p, nc * sizeof *np);
        if (!np)
            return WHALE_ENOMEM;
        c->p = np;
        char (*nn)[128] = realloc(c->names, nc * sizeof *nn);
        if (!nn)
            return WHALE_ENOMEM;
        c->names = nn;
        c->cap = nc;
    }
    static const char *prefix[] = {"", "opt.m.", "opt.v.", MASTER_PREFIX};
    static const enum whale_ckpt_kind kinds[] = {WHALE_CKPT_PARAM, WHALE_CKPT_MOMENT1,
                                                 WHALE_CKPT_MOMENT2, WHALE_CKPT_PARAM};
    int k = (unsigned)t->kind < 4 ? (int)t->kind : 0;
    snprintf(c->names[c->n], sizeof c->names[c->n], "%s%s", prefix[k], t->name);
    whale_ckpt_piece_box_flat(&c->p[c->n], NULL, t->dtype, t->ndim, t->global_shape,
                              t->tp_offset, t->tp_shape, t->flat_begin, t->flat_end, t->data);
    c->p[c->n].kind = kinds[k];
    c->p[c->n].transient = t->transient;
    c->n++;
    return 0;
}

static int collect_done(void *user)
{
    struct collect *c = user;
    for (size_t i = 0; i < c->n; i++) /* names array may have moved while growing */
        c->p[i].name = c->names[i];
    return c->use(c);
}

/* Collects this rank's pieces and calls use(c) while they are all valid
 * (inside the engine's walk); frees the lists after. */
static int collect_use(whale_engine *e, bool writers_only, int (*use)(struct collect *c),
                       void *ctx)
{
    struct collect c;
    memset(&c, 0, sizeof c);
    c.writers_only = writers_only;
    c.use = use;
    c.ctx = ctx;
    int rc = whale_engine_tensors_then(e, collect_fn, collect_done, &c);
    free(c.p);
    free(c.names);
    return rc;
}

struct save_ctx {
    whale_ckpt *ck;
    const whale_ckpt_meta *m;
    bool *skipped;
};

static int save_use(struct collect *c)
{
    struct save_ctx *s = c->ctx;
    return whale_ckpt_save(s->ck, s->m, c->p, c->n, s->skipped);
}

/* weights only (no train state): the optimizer starts afresh */
static int load_weights_use(struct collect *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (!strncmp(c->p[i].name, MASTER_PREFIX, strlen(MASTER_PREFIX)))
            c->p[i].name += strlen(MASTER_PREFIX); /* 16-bit run: master = the weights */
        else if (!strncmp(c->p[i].name, "opt.", 4))
            continue;
        c->p[k++] = c->p[i];
    }
    return whale_ckpt_read(c->ctx, c->p, k);
}

struct load_ctx {
    whale_ckpt_reader *r;
    const char *dir;
    enum whale_precision ckp, ep;
};

static int load_all_use(struct collect *c)
{
    struct load_ctx *l = c->ctx;
    if ((l->ckp == WHALE_PREC_FP32) != (l->ep == WHALE_PREC_FP32)) {
        /* switching between fp32 and 16-bit training: the fp32 weights of
         * one are the master weights of the other */
        whale_info("checkpoint %s was trained in %s, resuming in %s: %s", l->dir,
                   whale_precision_name(l->ckp), whale_precision_name(l->ep),
                   l->ep == WHALE_PREC_FP32 ? "weights from its fp32 master weights"
                                            : "master weights from its fp32 weights");
        for (size_t i = 0; i < c->n; i++) {
            bool master = !strncmp(c->p[i].name, MASTER_PREFIX, strlen(MASTER_PREFIX));
            if (l->ep != WHALE_PREC_FP32 && master)
                c->p[i].name += strlen(MASTER_PREFIX);
            else if (l->ep == WHALE_PREC_FP32 && strncmp(c->p[i].name, "opt.", 4)) {
                char tmp[128];
                snprintf(tmp, sizeof tmp, "%s%s", MASTER_PREFIX, c->p[i].name);
                memcpy(c->names[i], tmp, sizeof tmp);
                c->p[i].name = c->names[i];
            }
        }
    }
    return whale_ckpt_read(l->r, c->p, c->n);
}

int whale_ckpt_save_engine(whale_ckpt *ck, whale_engine *e, const char *plan_json,
                           bool *skipped)
{
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    char extra[576];
    snprintf(extra, sizeof extra,
             "{\"train_state\":{\"precision\":\"%s\",\"step\":%lld,\"adam_t\":%lld,\"samples\":%lld,\"seed\":\"%llu\","
             "\"rng_counter\":\"%llu\",\"loss_scale\":%.9g,\"scaler_good_steps\":%d,"
             "\"scaler_skipped\":%lld}}",
             whale_precision_name(whale_engine_precision(e)), (long long)ts.step,
             (long long)ts.adam_t, (long long)ts.samples, (unsigned long long)ts.seed, (unsigned long long)ts.rng_counter,
             (double)ts.loss_scale, (int)ts.scaler_good_steps, (long long)ts.scaler_skipped);
    whale_ckpt_meta m = {.step = ts.step, .samples = ts.samples, .loss_scale = ts.loss_scale,
                         .plan_json = plan_json, .extra_json = extra};
    struct save_ctx sc = {.ck = ck, .m = &m, .skipped = skipped};
    return collect_use(e, true, save_use, &sc);
}

int whale_ckpt_load_engine(whale_ckpt_reader *r, whale_engine *e)
{
    const whale_ckpt_info *in = whale_ckpt_reader_info(r);
    json_t *x = in->extra_json ? json_loads(in->extra_json, 0, NULL) : NULL;
    json_t *st = json_object_get(x, "train_state");
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    if (!json_is_object(st)) {
        /* not saved by the engine (e.g. imported with whale-ckpt convert
         * --from-safetensors): take the weights, start the optimizer afresh */
        json_decref(x);
        int rc = collect_use(e, false, load_weights_use, r);
        if (!rc)
            whale_info("initialized the weights from %s (no train state: optimizer and step "
                       "start afresh)", in->dir);
        return rc;
    }
    ts.step = json_integer_value(json_object_get(st, "step"));
    ts.adam_t = json_integer_value(json_object_get(st, "adam_t"));
    ts.samples = json_integer_value(json_object_get(st, "samples"));
    const char *seed = json_string_value(json_object_get(st, "seed"));
    const char *rngc = json_string_value(json_object_get(st, "rng_counter"));
    ts.seed = seed ? strtoull(seed, NULL, 10) : ts.seed;
    ts.rng_counter = rngc ? strtoull(rngc, NULL, 10) : 0;
    ts.loss_scale = (float)json_number_value(json_object_get(st, "loss_scale"));
    ts.scaler_good_steps = (int32_t)json_integer_value(json_object_get(st, "scaler_good_steps"));
    ts.scaler_skipped = json_integer_value(json_object_get(st, "scaler_skipped"));
    /* precision of the run that saved it (absent before mixed precision: fp32) */
    enum whale_precision ckp = WHALE_PREC_FP32;
    const char *pn = json_string_value(json_object_get(st, "precision"));
    if (pn && whale_precision_parse(pn, &ckp)) {
        whale_error("checkpoint %s: train_state.precision \"%.32s\" is not fp32, bf16 or fp16",
                    in->dir, pn);
        json_decref(x);
        return WHALE_EDATA;
    }
    json_decref(x);

    struct load_ctx lc = {.r = r, .dir = in->dir, .ckp = ckp, .ep = whale_engine_precision(e)};
    int rc = collect_use(e, false, load_all_use, &lc);
    if (!rc)
        rc = whale_engine_set_state(e, &ts);
    if (!rc)
        whale_info("resumed from %s: step %lld, %lld samples consumed", in->dir,
                   (long long)ts.step, (long long)ts.samples);
    return rc;
}
