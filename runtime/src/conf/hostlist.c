/* Hostlist expressions: libslurm does the expansion (slurm_hostlist_*),
 * we only reject what it silently accepts as a literal name (unbalanced
 * brackets such as "n[1-"). The plugin does not link libslurm: inside srun
 * and slurmstepd these symbols come from the process's libslurmfull. */
#include "conf_internal.h"
#include "whale/conf.h"
#include "whale/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <slurm/slurm.h>

static int bad_name(const char *h)
{
    return strchr(h, '[') || strchr(h, ']') || !*h;
}

/* Every [...] holds a non-empty list of N or N-M (digits, N <= M < N+64k),
 * brackets do not nest and are closed. */
static bool brackets_ok(const char *e)
{
    for (const char *p = e; *p; p++) {
        if (*p == ']')
            return false;
        if (*p != '[')
            continue;
        p++;
        for (;;) {
            char *end;
            if (*p < '0' || *p > '9')
                return false;
            unsigned long lo = strtoul(p, &end, 10), hi = lo;
            p = end;
            if (*p == '-') {
                p++;
                if (*p < '0' || *p > '9')
                    return false;
                hi = strtoul(p, &end, 10);
                p = end;
            }
            /* libslurm refuses ranges over 64k hosts (MAX_RANGE) */
            if (hi < lo || hi - lo >= 65536)
                return false;
            if (*p == ']')
                break;
            if (*p != ',')
                return false;
            p++;
        }
    }
    return true;
}

int conf_hostlist_foreach(const char *expr, int (*fn)(const char *host, void *user), void *user)
{
    if (!expr || !*expr)
        return WHALE_EINVAL;
    /* libslurm 22.05 leaks an allocation on every bracket it fails to
     * parse ("n[]", "n[1x]"; found by tests/fuzz): refuse those first */
    if (!brackets_ok(expr))
        return WHALE_EINVAL;
    hostlist_t hl = slurm_hostlist_create(expr);
    if (!hl)
        return WHALE_EINVAL;
    /* n[0-999999999] is a short string: bound the expansion */
    if (slurm_hostlist_count(hl) > CONF_MAX_HOSTS) {
        slurm_hostlist_destroy(hl);
        return WHALE_ERANGE;
    }
    int rc = 0;
    char *h;
    while ((h = slurm_hostlist_shift(hl))) {
        if (!rc)
            rc = bad_name(h) ? WHALE_EINVAL : fn ? fn(h, user) : 0;
        free(h);
    }
    slurm_hostlist_destroy(hl);
    return rc;
}

static int count_one(const char *h, void *user)
{
    (void)h;
    (*(int *)user)++;
    return 0;
}

int conf_hostlist_count(const char *expr)
{
    int n = 0;
    if (conf_hostlist_foreach(expr, count_one, &n))
        return -1;
    return n;
}

static int push_name(char ***names, int *n, const char *s, size_t len)
{
    char **p = realloc(*names, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return WHALE_ENOMEM;
    *names = p;
    if (!(p[*n] = strndup(s, len)))
        return WHALE_ENOMEM;
    (*n)++;
    return 0;
}

static int expand_item(const char *item, size_t len, char ***names, int *n)
{
    const char *lb = memchr(item, '[', len);
    if (!lb) {
        if (!len || memchr(item, ']', len))
            return WHALE_EINVAL;
        return push_name(names, n, item, len);
    }
    const char *rb = memchr(lb, ']', len - (size_t)(lb - item));
    if (!rb || memchr(rb + 1, '[', len - (size_t)(rb + 1 - item)))
        return WHALE_EINVAL;
    size_t plen = (size_t)(lb - item), slen = len - (size_t)(rb + 1 - item);
    const char *p = lb + 1;
    while (p < rb) {
        const char *q = p;
        while (q < rb && *q >= '0' && *q <= '9')
            q++;
        if (q == p)
            return WHALE_EINVAL;
        int width = (int)(q - p);
        long a = strtol(p, NULL, 10), b = a;
        if (q < rb && *q == '-') {
            const char *r = ++q;
            while (q < rb && *q >= '0' && *q <= '9')
                q++;
            if (q == r)
                return WHALE_EINVAL;
            b = strtol(r, NULL, 10);
        }
        if (b < a || b - a > 4096)
            return WHALE_EINVAL;
        for (long v = a; v <= b; v++) {
            char buf[256];
            int k = snprintf(buf, sizeof buf, "%.*s%0*ld%.*s", (int)plen, item, width, v, (int)slen,
                             rb + 1);
            if (k < 0 || (size_t)k >= sizeof buf)
                return WHALE_EINVAL;
            int rc = push_name(names, n, buf, (size_t)k);
            if (rc)
                return rc;
        }
        if (q < rb && *q == ',')
            q++;
        else if (q < rb)
            return WHALE_EINVAL;
        p = q;
    }
    return 0;
}

int conf_expand_names(const char *expr, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    const char *p = expr;
    int rc = 0;
    while (*p && !rc) {
        /* split at a comma outside brackets */
        const char *q = p;
        int depth = 0;
        while (*q && !(*q == ',' && depth == 0)) {
            if (*q == '[')
                depth++;
            else if (*q == ']')
                depth--;
            q++;
        }
        rc = expand_item(p, (size_t)(q - p), names, n);
        p = *q ? q + 1 : q;
    }
    if (!rc && *n == 0)
        rc = WHALE_EINVAL;
    if (rc) {
        for (int i = 0; i < *n; i++)
            free((*names)[i]);
        free(*names);
        *names = NULL;
        *n = 0;
    }
    return rc;
}

struct expand_acc {
    char **names;
    int n, cap;
};

static int expand_push(const char *host, void *user)
{
    struct expand_acc *a = user;
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 16;
        char **p = realloc(a->names, (size_t)nc * sizeof *p);
        if (!p)
            return WHALE_ENOMEM;
        a->names = p;
        a->cap = nc;
    }
    if (!(a->names[a->n] = strdup(host)))
        return WHALE_ENOMEM;
    a->n++;
    return 0;
}

int whale_hostlist_expand(const char *expr, char ***names, int *n)
{
    struct expand_acc a = { 0 };
    int rc = conf_hostlist_foreach(expr, expand_push, &a);
    if (rc) {
        for (int i = 0; i < a.n; i++)
            free(a.names[i]);
        free(a.names);
        *names = NULL;
        *n = 0;
        return rc;
    }
    *names = a.names;
    *n = a.n;
    return 0;
}
