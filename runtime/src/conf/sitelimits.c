/* The site-limits record (whale/sitelimits.h): written by slurmstepd from
 * whale.conf, read and applied by the runtime in each task. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/sitelimits.h"

static const char *const limit_keys[WHALE_LIMIT_N] = {
    "MaxTP", "MaxPP", "MaxDP", "MaxSpares", "MaxMicrobatch", "MaxZero", "MinCkptEvery",
    "AllowedOffload", "AllowedRecompute",
};

/* the knob each limit bounds, as the runtime's messages name it */
static const char *const limit_knob[WHALE_LIMIT_N] = {
    "tp", "pp", "dp", "spares", "micro_batch", "zero", "ckpt_every", "offload", "recompute",
};

const char *whale_conf_limit_key(enum whale_conf_limit l)
{
    return (unsigned)l < WHALE_LIMIT_N ? limit_keys[l] : NULL;
}

static bool is_mask(int i)
{
    return i == WHALE_LIMIT_ALLOWED_OFFLOAD || i == WHALE_LIMIT_ALLOWED_RECOMPUTE;
}

static const char *mask_name(int i, int bit)
{
    return i == WHALE_LIMIT_ALLOWED_OFFLOAD ? whale_offload_name((enum whale_offload)bit)
                                            : whale_recompute_name((enum whale_recompute)bit);
}

static int mask_parse(int i, const char *s, int *bit)
{
    int rc;
    if (i == WHALE_LIMIT_ALLOWED_OFFLOAD) {
        enum whale_offload o;
        rc = whale_offload_parse(s, &o);
        *bit = (int)o;
    } else {
        enum whale_recompute r;
        rc = whale_recompute_parse(s, &r);
        *bit = (int)r;
    }
    return rc || *bit < 0 || *bit > 30 ? WHALE_EINVAL : 0;
}

static long conf_value(const struct whale_conf *c, int i)
{
    switch (i) {
    case WHALE_LIMIT_MAX_TP: return c->max_tp;
    case WHALE_LIMIT_MAX_PP: return c->max_pp;
    case WHALE_LIMIT_MAX_DP: return c->max_dp;
    case WHALE_LIMIT_MAX_SPARES: return c->max_spares;
    case WHALE_LIMIT_MAX_MICROBATCH: return c->max_microbatch;
    case WHALE_LIMIT_MAX_ZERO: return c->max_zero;
    case WHALE_LIMIT_MIN_CKPT_EVERY: return c->min_ckpt_every;
    case WHALE_LIMIT_ALLOWED_OFFLOAD: return (long)c->allowed_offload;
    default: return (long)c->allowed_recompute;
    }
}

/* "none,optimizer" for a mask */
static void mask_text(int i, long mask, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int b = 0; b < 31; b++) {
        const char *name = (mask >> b) & 1 ? mask_name(i, b) : NULL;
        if (name && strcmp(name, "?") && off < n)
            off += (size_t)snprintf(buf + off, n - off, "%s%s", off ? "," : "", name);
    }
    if (!buf[0])
        snprintf(buf, n, "(nothing)");
}

char *whale_site_limits_to_json(const struct whale_conf *c)
{
    json_t *lim = json_object();
    json_t *root = json_pack("{s:i, s:s, s:o}", "version", 1, "conf",
                             c->path ? c->path : "whale.conf", "limits", lim);
    if (!root)
        return NULL;
    for (int i = 0; i < WHALE_LIMIT_N; i++) {
        if (c->limit_line[i] <= 0)
            continue;
        json_t *v;
        if (is_mask(i)) {
            v = json_array();
            long m = conf_value(c, i);
            for (int b = 0; b < 31; b++)
                if ((m >> b) & 1)
                    json_array_append_new(v, json_string(mask_name(i, b)));
        } else {
            v = json_integer(conf_value(c, i));
        }
        json_object_set_new(lim, limit_keys[i], json_pack("{s:o, s:i}", "value", v, "line",
                                                          c->limit_line[i]));
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return s;
}

static int bad(const char *name, const char *what)
{
    whale_error("%s: site limits record: %s", name, what);
    return WHALE_EINVAL;
}

static int parse_limit(const char *name, int i, json_t *e, struct whale_site_limits *out)
{
    json_t *v = json_object_get(e, "value"), *ln = json_object_get(e, "line");
    if (!json_is_object(e) || json_object_size(e) != 2 || !json_is_integer(ln) ||
        json_integer_value(ln) < 1 || json_integer_value(ln) > 1 << 30)
        return bad(name, "each limit needs {\"value\": ..., \"line\": N}");
    out->line[i] = (int)json_integer_value(ln);
    if (!is_mask(i)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 1 << 30)
            return bad(name, "a Max*/Min* limit must be an integer in 0..2^30");
        out->value[i] = (long)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return bad(name, "an Allowed* limit must be a list of names");
    long m = 0;
    size_t k;
    json_t *x;
    json_array_foreach(v, k, x) {
        int bit;
        if (!json_is_string(x) || mask_parse(i, json_string_value(x), &bit))
            return bad(name, "unknown name in an Allowed* limit");
        m |= 1L << bit;
    }
    out->value[i] = m;
    return 0;
}

int whale_site_limits_from_json(const char *text, const char *name, struct whale_site_limits *out)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        whale_error("%s: site limits record: not JSON (%s, line %d)", name, je.text, je.line);
        return WHALE_EINVAL;
    }
    int rc = 0;
    json_t *ver = json_object_get(root, "version"), *conf = json_object_get(root, "conf");
    json_t *lim = json_object_get(root, "limits");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1 || !json_is_string(conf) ||
        !json_is_object(lim) || json_object_size(root) != 3) {
        rc = bad(name, "expected {\"version\": 1, \"conf\": PATH, \"limits\": {...}}");
        goto out;
    }
    snprintf(out->conf, sizeof out->conf, "%s", json_string_value(conf));
    const char *key;
    json_t *e;
    json_object_foreach(lim, key, e) {
        int i = 0;
        while (i < WHALE_LIMIT_N && strcmp(key, limit_keys[i]))
            i++;
        if (i == WHALE_LIMIT_N) {
            whale_error("%s: site limits record: unknown limit '%s'", name, key);
            rc = WHALE_EINVAL;
            goto out;
        }
        if ((rc = parse_limit(name, i, e, out)))
            goto out;
    }
    out->present = true;
out:
    json_decref(root);
    return rc;
}

int whale_site_limits_load(const char *path, struct whale_site_limits *out)
{
    memset(out, 0, sizeof *out);
    /* non-blocking: a FIFO in its place must not stall the task */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        whale_error("%s=%s: cannot open the site limits record: %s", WHALE_ENV_SITE_LIMITS, path,
                    strerror(errno));
        return WHALE_EINVAL;
    }
    struct stat st;
    int rc = WHALE_EINVAL;
    char *buf = NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        whale_error("%s=%s: the site limits record is not a regular file", WHALE_ENV_SITE_LIMITS,
                    path);
    } else if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        /* only slurmstepd (root) writes it: anything else could widen the limits */
        whale_error("%s=%s: refused: the site limits record must be owned by root and writable "
                    "by root alone (owner uid %u, mode %03o); the plugin writes it so",
                    WHALE_ENV_SITE_LIMITS, path, (unsigned)st.st_uid,
                    (unsigned)(st.st_mode & 0777));
    } else if ((size_t)st.st_size > WHALE_SITE_LIMITS_MAX) {
        whale_error("%s=%s: the site limits record is larger than %zu bytes",
                    WHALE_ENV_SITE_LIMITS, path, WHALE_SITE_LIMITS_MAX);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = WHALE_ENOMEM;
    } else {
        size_t off = 0;
        for (;;) {
            ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            off += (size_t)n;
            if (off == (size_t)st.st_size)
                break;
        }
        buf[off] = '\0';
        if (off != (size_t)st.st_size)
            whale_error("%s=%s: cannot read the site limits record", WHALE_ENV_SITE_LIMITS, path);
        else
            rc = whale_site_limits_from_json(buf, path, out);
    }
    free(buf);
    close(fd);
    return rc;
}

int whale_site_limits_from_env(struct whale_site_limits *out)
{
    memset(out, 0, sizeof *out);
    const char *path = whale_knob_getenv(WHALE_ENV_SITE_LIMITS);
    if (path && *path)
        return whale_site_limits_load(path, out);
    const char *conf = whale_knob_getenv(WHALE_ENV_CONF);
    if (conf && *conf) {
        /* the plugin sets both: one without the other was removed */
        whale_error("%s is missing although %s=%s says the Whale plugin launched this step: the "
                    "site limits cannot be applied; refusing to run", WHALE_ENV_SITE_LIMITS,
                    WHALE_ENV_CONF, conf);
        return WHALE_EINVAL;
    }
    return 0; /* whale-run, a plain run: a policy of the site, not a sandbox */
}

int whale_site_limits_check(const struct whale_site_limits *l, enum whale_conf_limit which,
                            long value, const char *source)
{
    int i = (int)which;
    if (!l || !l->present || (unsigned)i >= WHALE_LIMIT_N || l->line[i] <= 0)
        return 0;
    long lim = l->value[i];
    if (is_mask(i)) {
        if (value >= 0 && value < 31 && ((lim >> value) & 1))
            return 0;
        char allowed[128];
        mask_text(i, lim, allowed, sizeof allowed);
        whale_error("%s=%s (from %s) is not allowed on this site: %s=%s (%s:%d)", limit_knob[i],
                    mask_name(i, (int)value), source, limit_keys[i], allowed, l->conf, l->line[i]);
        return WHALE_EINVAL;
    }
    if (i == WHALE_LIMIT_MIN_CKPT_EVERY) {
        if (value <= 0 || lim <= 0 || value >= lim)
            return 0;
        whale_error("%s=%ld (from %s) checkpoints more often than this site allows: %s=%ld "
                    "(%s:%d)", limit_knob[i], value, source, limit_keys[i], lim, l->conf,
                    l->line[i]);
        return WHALE_EINVAL;
    }
    if (value <= lim)
        return 0;
    whale_error("%s=%ld (from %s) exceeds the site limit %s=%ld (%s:%d)", limit_knob[i], value,
                source, limit_keys[i], lim, l->conf, l->line[i]);
    return WHALE_EINVAL;
}

int whale_site_limits_check_seconds(const struct whale_site_limits *l, double seconds,
                                    const char *source)
{
    int i = WHALE_LIMIT_MIN_CKPT_EVERY;
    if (!l || !l->present || seconds <= 0 || l->line[i] <= 0 || l->value[i] <= 0)
        return 0;
    whale_error("ckpt_every=%gs (from %s): this site limits checkpoints to every %ld steps or "
                "fewer (%s=%ld, %s:%d), which a time interval cannot promise; give a number of "
                "steps of at least %ld", seconds, source, l->value[i], limit_keys[i],
                l->value[i], l->conf, l->line[i], l->value[i]);
    return WHALE_EINVAL;
}
