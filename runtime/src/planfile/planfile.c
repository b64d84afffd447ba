/* whale_plan <-> JSON (jansson). Strict: unknown keys and wrong types are
 * errors naming the key, because a silently ignored typo in a plan would run
 * a different training than the user asked for. */
#include "whale/planfile.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/checked.h"
#include "whale/readfile.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- enum names --------------------------------------------------------- */
static const char *const sched_names[] = { "1f1b", "interleaved", "gpipe" };
static const char *const recompute_names[] = { "none", "selective", "full", "auto", "layers" };
static const char *const offload_names[] = { "none", "optimizer", "params" };
static const char *const prec_names[] = { "fp32", "bf16", "fp16" };
static const char *const map_names[] = { "topo", "block" };

#define NAME_OF(tab, v) (((unsigned)(v) < sizeof(tab) / sizeof(tab[0])) ? tab[v] : "?")

static int parse_enum(const char *const *tab, int n, const char *s, int *out)
{
    for (int i = 0; s && i < n; i++)
        if (!strcasecmp(s, tab[i])) {
            *out = i;
            return 0;
        }
    return WHALE_EINVAL;
}

const char *whale_schedule_name(enum whale_schedule s) { return NAME_OF(sched_names, s); }
const char *whale_recompute_name(enum whale_recompute r) { return NAME_OF(recompute_names, r); }
const char *whale_offload_name(enum whale_offload o) { return NAME_OF(offload_names, o); }
const char *whale_precision_name(enum whale_precision p) { return NAME_OF(prec_names, p); }
const char *whale_map_policy_name(enum whale_map_policy m) { return NAME_OF(map_names, m); }

#define DEF_PARSE(fn, type, tab)                                            \
    int fn(const char *s, type *out)                                        \
    {                                                                       \
        int v;                                                              \
        int rc = parse_enum(tab, (int)(sizeof(tab) / sizeof(tab[0])), s, &v); \
        if (!rc)                                                            \
            *out = (type)v;                                                 \
        return rc;                                                          \
    }
DEF_PARSE(whale_schedule_parse, enum whale_schedule, sched_names)
DEF_PARSE(whale_recompute_parse, enum whale_recompute, recompute_names)
DEF_PARSE(whale_offload_parse, enum whale_offload, offload_names)
DEF_PARSE(whale_precision_parse, enum whale_precision, prec_names)
DEF_PARSE(whale_map_policy_parse, enum whale_map_policy, map_names)

/* ---- lifecycle ------------------------------------------------------------ */
void whale_plan_init(struct whale_plan *p)
{
    memset(p, 0, sizeof *p);
    whale_grid_init(&p->grid);
    p->micro_batch = 1;
    p->num_micro_batches = 1;
    p->interleave = 1;
    p->schedule = WHALE_SCHED_1F1B;
    p->recompute = WHALE_RECOMPUTE_NONE;
    p->offload = WHALE_OFFLOAD_NONE;
    p->precision = WHALE_PREC_FP32;
    p->map = WHALE_MAP_TOPO;
    p->ckpt_keep = -1;
}

void whale_plan_free(struct whale_plan *p)
{
    free(p->recompute_layers);
    free(p->stage_layers);
    free(p->dp_batch);
    free(p->prediction_json);
    p->recompute_layers = p->stage_layers = p->dp_batch = NULL;
    p->n_recompute_layers = p->n_stage_layers = p->n_dp_batch = 0;
    p->prediction_json = NULL;
}

static int dup_ints(int **dst, const int *src, int n)
{
    *dst = NULL;
    if (n <= 0)
        return 0;
    *dst = malloc((size_t)n * sizeof(int));
    if (!*dst)
        return WHALE_ENOMEM;
    memcpy(*dst, src, (size_t)n * sizeof(int));
    return 0;
}

int whale_plan_copy(struct whale_plan *dst, const struct whale_plan *src)
{
    *dst = *src;
    dst->recompute_layers = dst->stage_layers = dst->dp_batch = NULL;
    dst->prediction_json = NULL;
    if (dup_ints(&dst->recompute_layers, src->recompute_layers, src->n_recompute_layers) ||
        dup_ints(&dst->stage_layers, src->stage_layers, src->n_stage_layers) ||
        dup_ints(&dst->dp_batch, src->dp_batch, src->n_dp_batch) ||
        (src->prediction_json && !(dst->prediction_json = strdup(src->prediction_json)))) {
        whale_plan_free(dst);
        return WHALE_ENOMEM;
    }
    return 0;
}

/* ---- JSON -> plan ---------------------------------------------------------- */
static int get_int(json_t *v, const char *key, const char *origin, int lo, int hi, int *out)
{
    if (!json_is_integer(v)) {
        whale_error("%s: plan key \"%s\" must be an integer", origin, key);
        return WHALE_EDATA;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        whale_error("%s: plan key \"%s\" = %lld out of range [%d, %d]", origin, key, (long long)x,
                    lo, hi);
        return WHALE_EDATA;
    }
    *out = (int)x;
    return 0;
}

static int get_str(json_t *v, const char *key, const char *origin, char *buf, size_t sz)
{
    if (!json_is_string(v)) {
        whale_error("%s: plan key \"%s\" must be a string", origin, key);
        return WHALE_EDATA;
    }
    if (json_string_length(v) >= sz) {
        whale_error("%s: plan key \"%s\" is longer than %zu characters", origin, key, sz - 1);
        return WHALE_EDATA;
    }
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int get_ints(json_t *v, const char *key, const char *origin, int lo, int hi, int **arr, int *n)
{
    if (!json_is_array(v)) {
        whale_error("%s: plan key \"%s\" must be an array of integers", origin, key);
        return WHALE_EDATA;
    }
    size_t len = json_array_size(v);
    if (len > WHALE_PLAN_MAX_LIST) {
        whale_error("%s: plan key \"%s\" has %zu entries (at most %d)", origin, key, len,
                    WHALE_PLAN_MAX_LIST);
        return WHALE_EDATA;
    }
    free(*arr);
    *arr = NULL;
    *n = 0;
    if (!len)
        return 0;
    *arr = calloc(len, sizeof(int));
    if (!*arr)
        return WHALE_ENOMEM;
    for (size_t i = 0; i < len; i++) {
        char k[64];
        snprintf(k, sizeof k, "%s[%zu]", key, i);
        int rc = get_int(json_array_get(v, i), k, origin, lo, hi, &(*arr)[i]);
        if (rc)
            return rc;
    }
    *n = (int)len;
    return 0;
}

static int get_enum(json_t *v, const char *key, const char *origin,
                    int (*parse)(const char *, void *), void *out, const char *allowed)
{
    if (!json_is_string(v) || parse(json_string_value(v), out)) {
        whale_error("%s: plan key \"%s\" must be one of %s", origin, key, allowed);
        return WHALE_EDATA;
    }
    return 0;
}

#define ENUM_ARGS(fn) (int (*)(const char *, void *))(fn)

static int plan_from_obj(json_t *root, const char *origin, struct whale_plan *p)
{
    if (!json_is_object(root)) {
        whale_error("%s: a plan must be a JSON object", origin);
        return WHALE_EDATA;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "version")) {
            int ver;
            rc = get_int(v, key, origin, 1, 1000, &ver);
            if (!rc && ver > WHALE_PLAN_VERSION) {
                whale_error("%s: plan version %d is newer than this Whale understands (%d)", origin,
                            ver, WHALE_PLAN_VERSION);
                rc = WHALE_EDATA;
            }
        } else if (!strcmp(key, "model")) rc = get_str(v, key, origin, p->model, sizeof p->model);
        else if (!strcmp(key, "tp")) rc = get_int(v, key, origin, 1, WHALE_GRID_MAX_TP, &p->tp);
        else if (!strcmp(key, "pp")) rc = get_int(v, key, origin, 1, WHALE_GRID_MAX_PP, &p->pp);
        else if (!strcmp(key, "dp")) rc = get_int(v, key, origin, 1, WHALE_GRID_MAX_DP, &p->dp);
        else if (!strcmp(key, "ep")) rc = get_int(v, key, origin, 1, WHALE_GRID_MAX_DP, &p->ep);
        else if (!strcmp(key, "spares")) rc = get_int(v, key, origin, 0, 1 << 20, &p->spares);
        else if (!strcmp(key, "map"))
            rc = get_enum(v, key, origin, ENUM_ARGS(whale_map_policy_parse), &p->map, "topo|block");
        else if (!strcmp(key, "micro_batch")) rc = get_int(v, key, origin, 1, 1 << 24, &p->micro_batch);
        else if (!strcmp(key, "num_micro_batches"))
            rc = get_int(v, key, origin, 1, 1 << 24, &p->num_micro_batches);
        else if (!strcmp(key, "global_batch")) rc = get_int(v, key, origin, 0, 1 << 30, &p->global_batch);
        else if (!strcmp(key, "schedule"))
            rc = get_enum(v, key, origin, ENUM_ARGS(whale_schedule_parse), &p->schedule,
                          "1f1b|interleaved|gpipe");
        else if (!strcmp(key, "interleave")) rc = get_int(v, key, origin, 1, 1024, &p->interleave);
        else if (!strcmp(key, "sequence_parallel")) {
            if (!json_is_boolean(v)) {
                whale_error("%s: plan key \"%s\" must be true or false", origin, key);
                rc = WHALE_EDATA;
            } else {
                p->sequence_parallel = json_is_true(v);
            }
        } else if (!strcmp(key, "zero")) rc = get_int(v, key, origin, 0, 3, &p->zero);
        else if (!strcmp(key, "recompute"))
            rc = get_enum(v, key, origin, ENUM_ARGS(whale_recompute_parse), &p->recompute,
                          "none|selective|full|auto|layers");
        else if (!strcmp(key, "recompute_layers"))
            rc = get_ints(v, key, origin, 0, 1 << 20, &p->recompute_layers, &p->n_recompute_layers);
        else if (!strcmp(key, "offload"))
            rc = get_enum(v, key, origin, ENUM_ARGS(whale_offload_parse), &p->offload,
                          "none|optimizer|params");
        else if (!strcmp(key, "precision"))
            rc = get_enum(v, key, origin, ENUM_ARGS(whale_precision_parse), &p->precision,
                          "fp32|bf16|fp16");
        else if (!strcmp(key, "stage_layers"))
            rc = get_ints(v, key, origin, 1, 1 << 20, &p->stage_layers, &p->n_stage_layers);
        else if (!strcmp(key, "dp_batch"))
            rc = get_ints(v, key, origin, 1, 1 << 30, &p->dp_batch, &p->n_dp_batch);
        else if (!strcmp(key, "ckpt_dir")) rc = get_str(v, key, origin, p->ckpt_dir, sizeof p->ckpt_dir);
        else if (!strcmp(key, "ckpt_every")) rc = get_int(v, key, origin, 0, 1 << 30, &p->ckpt_every);
        else if (!strcmp(key, "ckpt_keep")) rc = get_int(v, key, origin, 0, 1000000, &p->ckpt_keep);
        else if (!strcmp(key, "ckpt_milestone_every"))
            rc = get_int(v, key, origin, 0, 1 << 30, &p->ckpt_milestone_every);
        else if (!strcmp(key, "prediction")) {
            if (!json_is_object(v)) {
                whale_error("%s: plan key \"prediction\" must be an object", origin);
                rc = WHALE_EDATA;
            } else {
                free(p->prediction_json);
                p->prediction_json = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
                if (!p->prediction_json)
                    rc = WHALE_ENOMEM;
                else if (strlen(p->prediction_json) > WHALE_PLAN_MAX_PREDICTION) {
                    whale_error("%s: plan key \"prediction\" is %zu bytes (at most %d)", origin,
                                strlen(p->prediction_json), WHALE_PLAN_MAX_PREDICTION);
                    rc = WHALE_EDATA;
                }
            }
        } else {
            whale_error("%s: unknown plan key \"%s\"", origin, key);
            rc = WHALE_EDATA;
        }
        if (rc)
            return rc;
    }
    p->unset = (json_object_get(root, "micro_batch") ? 0 : WHALE_PLAN_UNSET_MICRO_BATCH) |
               (json_object_get(root, "num_micro_batches") ? 0 : WHALE_PLAN_UNSET_NUM_MICRO) |
               (json_object_get(root, "global_batch") ? 0 : WHALE_PLAN_UNSET_GLOBAL_BATCH);
    /* each degree is in range alone; their product must be too (it sizes
     * every rank table downstream) */
    char why[256];
    if (whale_grid_check(&p->grid, 0, "", why, sizeof why)) {
        whale_error("%s: %s", origin, why);
        return WHALE_EDATA;
    }
    return 0;
}

int whale_plan_from_json(const char *text, const char *origin, struct whale_plan *out)
{
    json_error_t err;
    whale_plan_init(out);
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        whale_error("%s:%d:%d: plan is not valid JSON: %s", origin, err.line, err.column, err.text);
        return WHALE_EDATA;
    }
    int rc = plan_from_obj(root, origin, out);
    json_decref(root);
    if (rc)
        whale_plan_free(out);
    return rc;
}

int whale_plan_load_file(const char *path, struct whale_plan *out)
{
    json_error_t err;
    whale_plan_init(out);
    /* bounded and non-blocking: the path comes from a user */
    char *text = NULL;
    size_t len = 0;
    if (whale_read_file(path, WHALE_PLAN_MAX_FILE, 0, &text, &len)) {
        whale_error("%s: cannot read plan (see above)", path);
        return WHALE_EDATA;
    }
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!root) {
        whale_error("%s:%d:%d: plan is not valid JSON: %s", path, err.line, err.column, err.text);
        return WHALE_EDATA;
    }
    int rc = plan_from_obj(root, path, out);
    json_decref(root);
    if (rc)
        whale_plan_free(out);
    return rc;
}

int whale_plan_from_env_value(const char *value, struct whale_plan *out)
{
    if (!value || !*value) {
        whale_plan_init(out);
        return 0;
    }
    const char *s = value;
    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    if (*s == '{')
        return whale_plan_from_json(s, "WHALE_PLAN", out);
    return whale_plan_load_file(value, out);
}

/* ---- plan -> JSON ---------------------------------------------------------- */
static json_t *ints_json(const int *a, int n)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++)
        json_array_append_new(arr, json_integer(a[i]));
    return arr;
}

char *whale_plan_to_json(const struct whale_plan *p, int indent)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "version", json_integer(WHALE_PLAN_VERSION));
    json_object_set_new(o, "model", json_string(p->model));
    json_object_set_new(o, "tp", json_integer(p->tp));
    json_object_set_new(o, "pp", json_integer(p->pp));
    json_object_set_new(o, "dp", json_integer(p->dp));
    if (whale_grid_ep(&p->grid) > 1) /* only when set: plans of dense steps stay as they were */
        json_object_set_new(o, "ep", json_integer(p->ep));
    json_object_set_new(o, "spares", json_integer(p->spares));
    json_object_set_new(o, "map", json_string(whale_map_policy_name(p->map)));
    /* batch fields nobody chose stay out: the reader's default applies */
    if (!(p->unset & WHALE_PLAN_UNSET_MICRO_BATCH))
        json_object_set_new(o, "micro_batch", json_integer(p->micro_batch));
    if (!(p->unset & WHALE_PLAN_UNSET_NUM_MICRO))
        json_object_set_new(o, "num_micro_batches", json_integer(p->num_micro_batches));
    if (!(p->unset & WHALE_PLAN_UNSET_GLOBAL_BATCH))
        json_object_set_new(o, "global_batch", json_integer(p->global_batch));
    json_object_set_new(o, "schedule", json_string(whale_schedule_name(p->schedule)));
    json_object_set_new(o, "interleave", json_integer(p->interleave));
    if (p->sequence_parallel)   /* only when set: older readers keep working */
        json_object_set_new(o, "sequence_parallel", json_true());
    json_object_set_new(o, "zero", json_integer(p->zero));
    json_object_set_new(o, "recompute", json_string(whale_recompute_name(p->recompute)));
    if (p->n_recompute_layers)
        json_object_set_new(o, "recompute_layers", ints_json(p->recompute_layers, p->n_recompute_layers));
    json_object_set_new(o, "offload", json_string(whale_offload_name(p->offload)));
    json_object_set_new(o, "precision", json_string(whale_precision_name(p->precision)));
    if (p->n_stage_layers)
        json_object_set_new(o, "stage_layers", ints_json(p->stage_layers, p->n_stage_layers));
    if (p->n_dp_batch)
        json_object_set_new(o, "dp_batch", ints_json(p->dp_batch, p->n_dp_batch));
    json_object_set_new(o, "ckpt_dir", json_string(p->ckpt_dir));
    json_object_set_new(o, "ckpt_every", json_integer(p->ckpt_every));
    if (p->ckpt_keep >= 0) /* site defaults: only when a site set them */
        json_object_set_new(o, "ckpt_keep", json_integer(p->ckpt_keep));
    if (p->ckpt_milestone_every > 0)
        json_object_set_new(o, "ckpt_milestone_every", json_integer(p->ckpt_milestone_every));
    if (p->prediction_json) {
        json_t *pred = json_loads(p->prediction_json, 0, NULL);
        if (pred)
            json_object_set_new(o, "prediction", pred);
    }
    size_t flags = JSON_PRESERVE_ORDER | (indent > 0 ? JSON_INDENT(indent) : JSON_COMPACT);
    char *s = json_dumps(o, flags);
    json_decref(o);
    return s;
}

/* ---- validation -------------------------------------------------------------- */
int whale_plan_validate(const struct whale_plan *p, int world, int layers, const char *origin)
{
    char why[256];
    if (whale_grid_check(&p->grid, world, "", why, sizeof why)) {
        whale_error("%s: %s", origin, why);
        return WHALE_EINVAL;
    }
    if (p->schedule != WHALE_SCHED_INTERLEAVED && p->interleave != 1) {
        whale_error("%s: interleave=%d needs schedule \"interleaved\" (have \"%s\")", origin,
                    p->interleave, whale_schedule_name(p->schedule));
        return WHALE_EINVAL;
    }
    if (p->schedule == WHALE_SCHED_INTERLEAVED) {
        if (p->interleave < 2) {
            whale_error("%s: schedule \"interleaved\" needs interleave >= 2", origin);
            return WHALE_EINVAL;
        }
        if (p->pp < 2) {
            whale_error("%s: schedule \"interleaved\" needs pp >= 2", origin);
            return WHALE_EINVAL;
        }
        if (p->num_micro_batches % p->pp) {
            whale_error("%s: interleaved 1F1B needs num_micro_batches (%d) to be a multiple of pp (%d)",
                        origin, p->num_micro_batches, p->pp);
            return WHALE_EINVAL;
        }
    }
    if (p->sequence_parallel && p->tp < 2) {
        whale_error("%s: sequence_parallel needs tp >= 2 (tp=%d)", origin, p->tp);
        return WHALE_EINVAL;
    }
    long chunks = (long)p->pp * p->interleave;
    if (p->n_stage_layers && p->n_stage_layers != chunks) {
        whale_error("%s: stage_layers has %d entries, expected pp*interleave = %ld", origin,
                    p->n_stage_layers, chunks);
        return WHALE_EINVAL;
    }
    if (p->n_dp_batch && p->n_dp_batch != p->dp) {
        whale_error("%s: dp_batch has %d entries, expected dp = %d", origin, p->n_dp_batch, p->dp);
        return WHALE_EINVAL;
    }
    /* how whale-train runs a share: ZeRO 0/1 in micro-batches of micro_batch,
     * ZeRO 2/3 in num_micro_batches micro-batches on every replica */
    for (int i = 0; i < p->n_dp_batch; i++) {
        int unit = p->zero < 2 ? p->micro_batch : p->num_micro_batches;
        if (unit > 0 && p->dp_batch[i] % unit) {
            if (p->zero < 2)
                whale_error("%s: dp_batch[%d] = %d is not a multiple of micro_batch = %d",
                            origin, i, p->dp_batch[i], p->micro_batch);
            else
                whale_error("%s: dp_batch[%d] = %d does not split into num_micro_batches = %d "
                            "(ZeRO %d runs as many micro-batches on every replica)",
                            origin, i, p->dp_batch[i], p->num_micro_batches, p->zero);
            return WHALE_EINVAL;
        }
    }
    int64_t gb64;
    if (!whale_mul_i64(p->micro_batch, p->num_micro_batches, &gb64) ||
        !whale_mul_i64(gb64, p->dp, &gb64) || gb64 > (1LL << 40)) {
        whale_error("%s: micro_batch*num_micro_batches*dp = %d*%d*%d is too large", origin,
                    p->micro_batch, p->num_micro_batches, p->dp);
        return WHALE_EINVAL;
    }
    long gb = (long)gb64;
    if (p->n_dp_batch) {
        gb = 0;
        for (int i = 0; i < p->n_dp_batch; i++)
            gb += p->dp_batch[i];
    }
    if (p->global_batch && p->global_batch != gb) {
        whale_error("%s: global_batch=%d but micro_batch*num_micro_batches*dp (or sum of dp_batch) = %ld",
                    origin, p->global_batch, gb);
        return WHALE_EINVAL;
    }
    if (p->recompute == WHALE_RECOMPUTE_LAYERS && !p->n_recompute_layers) {
        whale_error("%s: recompute \"layers\" needs a non-empty recompute_layers list", origin);
        return WHALE_EINVAL;
    }
    if (p->recompute != WHALE_RECOMPUTE_LAYERS && p->n_recompute_layers) {
        whale_error("%s: recompute_layers given but recompute is \"%s\" (use \"layers\")", origin,
                    whale_recompute_name(p->recompute));
        return WHALE_EINVAL;
    }
    if (layers > 0) {
        if (chunks > layers) {
            whale_error("%s: pp*interleave = %ld pipeline chunks but the model has only %d layers",
                        origin, chunks, layers);
            return WHALE_EINVAL;
        }
        if (p->n_stage_layers) {
            long sum = 0;
            for (int i = 0; i < p->n_stage_layers; i++)
                sum += p->stage_layers[i];
            if (sum != layers) {
                whale_error("%s: stage_layers sum to %ld but the model has %d layers", origin, sum,
                            layers);
                return WHALE_EINVAL;
            }
        }
        for (int i = 0; i < p->n_recompute_layers; i++)
            if (p->recompute_layers[i] >= layers) {
                whale_error("%s: recompute_layers[%d] = %d but the model has %d layers", origin, i,
                            p->recompute_layers[i], layers);
                return WHALE_EINVAL;
            }
    }
    return 0;
}
