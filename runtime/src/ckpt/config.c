/* Checkpoint settings: defaults and WHALE_CKPT_* overrides, read through a
 * lookup (the environment, or a tool's own resolution of flags, variables
 * and plan: whale_ckpt_config_from). */
#include "ckpt_internal.h"

#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void whale_ckpt_config_default(whale_ckpt_config *c)
{
    memset(c, 0, sizeof *c);
    c->world = 1;
    c->keep = 3;
    c->async = true;
    c->busy = WHALE_CKPT_BUSY_WAIT;
    c->priority = WHALE_CKPT_PRIO_LOW;
    c->snapshot = WHALE_CKPT_SNAPSHOT_COPY;
    c->weights = WHALE_CKPT_WEIGHTS_EXACT;
    c->quant_block = 128;
    c->incremental = true;
    c->chunk_bytes = 32u << 20;
    c->commit_timeout_s = 600;
    c->writers = 2;
}

/* 1: unset; the value through util's checked parser (whale/envnum.h) */
static int env_long(whale_ckpt_lookup_fn get, void *user, const char *var, long lo, long hi,
                    long *out)
{
    const char *s = get(var, user);
    if (!s || !*s)
        return 1;
    if (whale_parse_long(s, lo, hi, out)) {
        whale_error("%s=%s: expected an integer in [%ld, %ld]", var, s, lo, hi);
        return WHALE_ERANGE;
    }
    return 0;
}

static int env_bool(whale_ckpt_lookup_fn get, void *user, const char *var, bool *out)
{
    long v;
    int rc = env_long(get, user, var, 0, 1, &v);
    if (rc == 0)
        *out = v != 0;
    return rc < 0 ? rc : 0;
}

/* "100" (steps) or "30s", "10m", "2h" (time). */
static int parse_every(const char *s, int *steps, double *secs)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0)
        return WHALE_ERANGE;
    if (!*end) {
        if (v != (double)(int)v)
            return WHALE_ERANGE;
        *steps = (int)v;
        *secs = 0;
        return 0;
    }
    double mul = !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600 : 0;
    if (mul == 0)
        return WHALE_ERANGE;
    *secs = v * mul;
    *steps = 0;
    return 0;
}

static const char *knob_lookup(const char *name, void *user)
{
    (void)user;
    return whale_knob_getenv(name);
}

int whale_ckpt_config_from_env(whale_ckpt_config *c)
{
    return whale_ckpt_config_from(c, knob_lookup, NULL);
}

int whale_ckpt_config_from(whale_ckpt_config *c, whale_ckpt_lookup_fn get, void *user)
{
    const char *s;
    long v;
    int rc;
    if ((s = get("WHALE_CKPT_DIR", user)) && *s)
        c->root = s;
    if ((s = get("WHALE_CKPT_EVERY", user)) && *s && parse_every(s, &c->every_steps, &c->every_seconds)) {
        whale_error("WHALE_CKPT_EVERY=%s: expected a number of steps (e.g. 100) or a time "
                    "(e.g. 30s, 10m, 2h)", s);
        return WHALE_ERANGE;
    }
    if ((rc = env_long(get, user, "WHALE_CKPT_KEEP", 0, 1000000, &v)) < 0)
        return rc;
    if (rc == 0)
        c->keep = (int)v;
    if ((rc = env_bool(get, user, "WHALE_CKPT_ASYNC", &c->async)) < 0)
        return rc;
    if ((rc = env_bool(get, user, "WHALE_CKPT_INCREMENTAL", &c->incremental)) < 0)
        return rc;
    if ((rc = env_bool(get, user, "WHALE_CKPT_PRIVATE", &c->private_files)) < 0)
        return rc;
    if ((rc = env_long(get, user, "WHALE_CKPT_ZSTD", 0, 19, &v)) < 0)
        return rc;
    if (rc == 0)
        c->zstd_level = (int)v;
    if ((rc = env_long(get, user, "WHALE_CKPT_CHUNK_MB", 1, 4096, &v)) < 0)
        return rc;
    if (rc == 0)
        c->chunk_bytes = (size_t)v << 20;
    if ((s = get("WHALE_CKPT_BUSY", user)) && *s) {
        if (!strcasecmp(s, "wait"))
            c->busy = WHALE_CKPT_BUSY_WAIT;
        else if (!strcasecmp(s, "skip"))
            c->busy = WHALE_CKPT_BUSY_SKIP;
        else if (!strcasecmp(s, "defer"))
            c->busy = WHALE_CKPT_BUSY_DEFER;
        else {
            whale_error("WHALE_CKPT_BUSY=%s: expected wait, skip or defer", s);
            return WHALE_EINVAL;
        }
    }
    if ((s = get("WHALE_CKPT_PRIORITY", user)) && *s) {
        if (!strcasecmp(s, "low"))
            c->priority = WHALE_CKPT_PRIO_LOW;
        else if (!strcasecmp(s, "normal"))
            c->priority = WHALE_CKPT_PRIO_NORMAL;
        else if (!strcasecmp(s, "idle"))
            c->priority = WHALE_CKPT_PRIO_IDLE;
        else {
            whale_error("WHALE_CKPT_PRIORITY=%s: expected low, normal or idle", s);
            return WHALE_EINVAL;
        }
    }
    if ((rc = env_long(get, user, "WHALE_CKPT_DELTA", 0, 1000000, &v)) < 0)
        return rc;
    if (rc == 0)
        c->delta_every = (int)v;
    if ((rc = env_long(get, user, "WHALE_CKPT_MILESTONE_EVERY", 0, INT32_MAX, &v)) < 0)
        return rc;
    if (rc == 0)
        c->milestone_every = (int)v;
    if ((s = get("WHALE_CKPT_SNAPSHOT", user)) && *s) {
        if (!strcasecmp(s, "copy"))
            c->snapshot = WHALE_CKPT_SNAPSHOT_COPY;
        else if (!strcasecmp(s, "deferred"))
            c->snapshot = WHALE_CKPT_SNAPSHOT_DEFERRED;
        else {
            whale_error("WHALE_CKPT_SNAPSHOT=%s: expected copy or deferred", s);
            return WHALE_EINVAL;
        }
    }
    if ((s = get("WHALE_CKPT_WEIGHTS", user)) && *s) {
        if (!strcasecmp(s, "exact") || !strcasecmp(s, "fp32"))
            c->weights = WHALE_CKPT_WEIGHTS_EXACT;
        else if (!strcasecmp(s, "bf16"))
            c->weights = WHALE_CKPT_WEIGHTS_BF16;
        else if (!strcasecmp(s, "fp16"))
            c->weights = WHALE_CKPT_WEIGHTS_FP16;
        else if (!strcasecmp(s, "int8"))
            c->weights = WHALE_CKPT_WEIGHTS_INT8;
        else {
            whale_error("WHALE_CKPT_WEIGHTS=%s: expected exact, bf16, fp16 or int8", s);
            return WHALE_EINVAL;
        }
    }
    if ((s = get("WHALE_CKPT_MOMENTS", user)) && *s) {
        if (!strcasecmp(s, "exact"))
            c->quantize_moments = false;
        else if (!strcasecmp(s, "int8"))
            c->quantize_moments = true;
        else {
            whale_error("WHALE_CKPT_MOMENTS=%s: expected exact or int8", s);
            return WHALE_EINVAL;
        }
    }
    if ((rc = env_long(get, user, "WHALE_CKPT_COMMIT_TIMEOUT", 1, 86400, &v)) < 0)
        return rc;
    if (rc == 0)
        c->commit_timeout_s = (int)v;
    if ((rc = env_long(get, user, "WHALE_CKPT_WRITERS", 1, CKPT_MAX_WRITERS, &v)) < 0)
        return rc;
    if (rc == 0)
        c->writers = (int)v;
    if ((s = get("WHALE_CKPT_RUN_ID", user)) && *s)
        c->run_id = s;
    if ((rc = env_long(get, user, WHALE_ENV_RANK, -1, 1 << 24, &v)) < 0)
        return rc;
    if (rc == 0 && v >= 0)
        c->rank = (int)v;
    if ((rc = env_long(get, user, WHALE_ENV_WORLD, 1, 1 << 24, &v)) < 0)
        return rc;
    if (rc == 0)
        c->world = (int)v;
    return 0;
}
