/* Tokenizer for Slurm-style Key=Value files. Kept dependency-free because
 * it runs inside srun and slurmstepd (through the SPANK plugin). */
#include "whale/kv.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/checked.h"
#include "whale/readfile.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const struct whale_kv *whale_kv_find(const struct whale_kv_line *l, const char *key)
{
    for (int i = 0; i < l->n; i++)
        if (!strcasecmp(l->kv[i].key, key))
            return &l->kv[i];
    return NULL;
}

static void kv_line_free(struct whale_kv_line *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->kv[i].key);
        free(l->kv[i].value);
    }
    free(l->kv);
    l->kv = NULL;
    l->n = 0;
}

static int kv_push(struct whale_kv_line *l, int *cap, char *k, char *v)
{
    if (l->n == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        struct whale_kv *p = realloc(l->kv, (size_t)nc * sizeof *p);
        if (!p)
            return WHALE_ENOMEM;
        l->kv = p;
        *cap = nc;
    }
    l->kv[l->n].key = k;
    l->kv[l->n].value = v;
    l->n++;
    return 0;
}

/* Split one logical line into pairs. */
static int kv_tokenize(char *s, struct whale_kv_line *l)
{
    int cap = 0;
    char *p = s;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#')
            return 0;
        char *kstart = p;
        while (*p && *p != '=' && !isspace((unsigned char)*p))
            p++;
        if (*p != '=') {
            char *kend = p;
            char save = *kend;
            *kend = '\0';
            whale_error("%s:%d: '" WHALE_KV_ECHO_FMT "' is not of the form Key=Value", l->file,
                        l->line, WHALE_KV_ECHO_ARG(kstart));
            *kend = save;
            return WHALE_ECONF;
        }
        size_t klen = (size_t)(p - kstart);
        if (klen == 0) {
            whale_error("%s:%d: missing key before '='", l->file, l->line);
            return WHALE_ECONF;
        }
        p++; /* '=' */
        char *val;
        if (*p == '"') {
            char *vs = ++p;
            while (*p && *p != '"')
                p++;
            if (*p != '"') {
                whale_error("%s:%d: unterminated quoted value for key '%.*s%s'", l->file,
                            l->line, (int)(klen > 64 ? 64 : klen), kstart, klen > 64 ? "..." : "");
                return WHALE_ECONF;
            }
            val = strndup(vs, (size_t)(p - vs));
            p++;
        } else {
            char *vs = p;
            while (*p && !isspace((unsigned char)*p) && *p != '#')
                p++;
            val = strndup(vs, (size_t)(p - vs));
        }
        char *key = strndup(kstart, klen);
        if (!key || !val) {
            free(key);
            free(val);
            return WHALE_ENOMEM;
        }
        int rc = kv_push(l, &cap, key, val);
        if (rc) {
            free(key);
            free(val);
            return rc;
        }
    }
}

static int kv_parse_lines(char *text, const char *name, whale_kv_line_fn fn, void *user)
{
    int lineno = 0;
    char *p = text;
    size_t cap = 256;
    char *logical = malloc(cap);
    if (!logical)
        return WHALE_ENOMEM;
    int rc = 0;
    while (*p && !rc) {
        size_t len = 0;
        int first = lineno + 1;
        int more;
        do {
            lineno++;
            char *nl = strchr(p, '\n');
            size_t plen = nl ? (size_t)(nl - p) : strlen(p);
            char *next = nl ? nl + 1 : p + plen;
            /* strip CR and detect continuation */
            while (plen > 0 && (p[plen - 1] == '\r'))
                plen--;
            more = plen > 0 && p[plen - 1] == '\\';
            if (more)
                plen--;
            if (len + plen + 2 > cap) {
                while (len + plen + 2 > cap)
                    cap *= 2;
                char *nb = realloc(logical, cap);
                if (!nb) {
                    free(logical);
                    return WHALE_ENOMEM;
                }
                logical = nb;
            }
            memcpy(logical + len, p, plen);
            len += plen;
            logical[len++] = ' ';
            p = next;
        } while (more && *p);
        logical[len] = '\0';
        struct whale_kv_line l = { .file = name, .line = first };
        rc = kv_tokenize(logical, &l);
        if (!rc && l.n > 0)
            rc = fn(&l, user);
        kv_line_free(&l);
    }
    free(logical);
    return rc;
}

int whale_kv_parse_string(const char *text, const char *name, whale_kv_line_fn fn, void *user)
{
    char *copy = strdup(text ? text : "");
    if (!copy)
        return WHALE_ENOMEM;
    int rc = kv_parse_lines(copy, name ? name : "<string>", fn, user);
    free(copy);
    return rc;
}

int whale_kv_parse_file(const char *path, whale_kv_line_fn fn, void *user)
{
    /* bounded and non-blocking: whale.conf may name /dev/zero or a FIFO,
     * and the plugin reads it inside srun and slurmstepd */
    char *buf = NULL;
    size_t len = 0;
    int rc = whale_read_file(path, WHALE_READ_MAX_TEXT, 0, &buf, &len);
    if (rc)
        return rc;
    if (memchr(buf, '\0', len)) {
        whale_error("%s: contains a NUL byte; not a text file", path);
        free(buf);
        return WHALE_ECONF;
    }
    rc = kv_parse_lines(buf, path, fn, user);
    free(buf);
    return rc;
}

int whale_kv_to_long(const struct whale_kv_line *l, const struct whale_kv *kv,
                     long min, long max, bool units, long *out)
{
    const char *s = kv->value;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno == ERANGE)
        goto bad;
    if (units && *end) {
        long mul = 1;
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1L << 10; break;
        case 'M': mul = 1L << 20; break;
        case 'G': mul = 1L << 30; break;
        case 'T': mul = 1L << 40; break;
        default: goto bad;
        }
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        /* checked: -9000000T must not wrap around into range */
        if (!whale_mul_long(v, mul, &v))
            goto range;
    }
    if (*end)
        goto bad;
    if (v < min || v > max)
        goto range;
    *out = v;
    return 0;
bad:
    whale_error("%s:%d: " WHALE_KV_ECHO_FMT "=" WHALE_KV_ECHO_FMT ": not an integer", l->file,
                l->line, WHALE_KV_ECHO_ARG(kv->key), WHALE_KV_ECHO_ARG(s));
    return WHALE_ECONF;
range:
    whale_error("%s:%d: " WHALE_KV_ECHO_FMT "=" WHALE_KV_ECHO_FMT ": out of range [%ld, %ld]",
                l->file, l->line, WHALE_KV_ECHO_ARG(kv->key), WHALE_KV_ECHO_ARG(s), min, max);
    return WHALE_ECONF;
}

int whale_kv_to_double(const struct whale_kv_line *l, const struct whale_kv *kv,
                       double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(kv->value, &end);
    if (end == kv->value || *end || errno == ERANGE || !isfinite(v)) {
        whale_error("%s:%d: " WHALE_KV_ECHO_FMT "=" WHALE_KV_ECHO_FMT ": not a number", l->file,
                    l->line, WHALE_KV_ECHO_ARG(kv->key), WHALE_KV_ECHO_ARG(kv->value));
        return WHALE_ECONF;
    }
    if (v < min || v > max) {
        whale_error("%s:%d: " WHALE_KV_ECHO_FMT "=" WHALE_KV_ECHO_FMT ": out of range [%g, %g]",
                    l->file, l->line, WHALE_KV_ECHO_ARG(kv->key), WHALE_KV_ECHO_ARG(kv->value),
                    min, max);
        return WHALE_ECONF;
    }
    *out = v;
    return 0;
}

int whale_kv_to_bool(const struct whale_kv_line *l, const struct whale_kv *kv, bool *out)
{
    const char *s = kv->value;
    if (!strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "on")) {
        *out = true;
        return 0;
    }
    if (!strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "off")) {
        *out = false;
        return 0;
    }
    whale_error("%s:%d: " WHALE_KV_ECHO_FMT "=" WHALE_KV_ECHO_FMT ": expected yes or no", l->file,
                l->line, WHALE_KV_ECHO_ARG(kv->key), WHALE_KV_ECHO_ARG(s));
    return WHALE_ECONF;
}
