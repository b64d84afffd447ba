/* Hostlist expressions: libslurm does the expansion (slurm_hostlist_*),
 * we only reject what it silently accepts as a literal name (unbalanced
 * brackets such as "n[1-"). The plugin does not link libslurm: inside srun
 * and slurmstepd these symbols come from the process's libslurmfull. */
#include "conf_internal.h"
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"

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

/* libslurm's hostlist is O(n^2) in the number of ranges it holds: built
 * from 50,000 distinct names it took 2.1 s to create and 2.8 s to shift
 * empty (measured on 22.05; hostlist_shift moves the whole range array
 * down each time a range runs out), and the plugin parses these lists as
 * root inside srun. So each piece goes to libslurm on its own: every item
 * between separators outside brackets and, for an item with one bracket,
 * every range in it ("n[1-3,7]x" -> "n[1-3]x", "n[7]x"). The lists stay
 * tiny, the walk is linear and the names and their order are the same. */
struct hl_walk {
    int (*fn)(const char *host, void *user);
    void *user;
    long total;     /* hosts counted so far */
    int rc;         /* first error of fn or of a name */
    bool count_only;
};

static bool hl_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n'; /* libslurm's separators */
}

static int hl_piece(struct hl_walk *w, const char *s)
{
    hostlist_t hl = slurm_hostlist_create(s);
    if (!hl)
        return WHALE_EINVAL;
    if (w->count_only) {
        w->total += slurm_hostlist_count(hl);
        slurm_hostlist_destroy(hl);
        /* n[0-999999999] is a short string: bound the expansion */
        return w->total > CONF_MAX_HOSTS ? WHALE_ERANGE : 0;
    }
    char *h;
    while ((h = slurm_hostlist_shift(hl))) {
        if (!w->rc)
            w->rc = bad_name(h) ? WHALE_EINVAL : w->fn ? w->fn(h, w->user) : 0;
        free(h);
    }
    slurm_hostlist_destroy(hl);
    return 0;
}

/* One item (no separator outside brackets), len bytes at item. */
static int hl_item(struct hl_walk *w, const char *item, size_t len)
{
    const char *lb = memchr(item, '[', len);
    const char *rb = lb ? memchr(lb, ']', len - (size_t)(lb - item)) : NULL;
    size_t rest = rb ? len - (size_t)(rb + 1 - item) : 0;
    char *buf = malloc(len + 3);
    if (!buf)
        return WHALE_ENOMEM;
    int rc = 0;
    if (!lb || !rb || memchr(rb + 1, '[', rest)) {
        /* no bracket, or several (libslurm's multi-dimension names): whole */
        memcpy(buf, item, len);
        buf[len] = '\0';
        rc = hl_piece(w, buf);
    } else {
        size_t plen = (size_t)(lb - item) + 1; /* "pre[" */
        for (const char *r = lb + 1; r < rb && !rc;) {
            const char *e = memchr(r, ',', (size_t)(rb - r));
            if (!e)
                e = rb;
            memcpy(buf, item, plen);
            memcpy(buf + plen, r, (size_t)(e - r));
            memcpy(buf + plen + (size_t)(e - r), rb, rest + 1); /* "]suf" */
            buf[plen + (size_t)(e - r) + rest + 1] = '\0';
            rc = hl_piece(w, buf);
            r = e + 1;
        }
    }
    free(buf);
    return rc;
}

static int hl_walk_all(struct hl_walk *w, const char *expr)
{
    const char *p = expr;
    while (*p) {
        while (*p && hl_sep(*p))
            p++;
        const char *q = p;
        bool in = false;
        while (*q && (in || !hl_sep(*q))) {
            if (*q == '[')
                in = true;
            else if (*q == ']')
                in = false;
            q++;
        }
        if (q > p) {
            int rc = hl_item(w, p, (size_t)(q - p));
            if (rc)
                return rc;
        }
        p = q;
    }
    return 0;
}

int conf_hostlist_foreach(const char *expr, int (*fn)(const char *host, void *user), void *user,
                          long *budget)
{
    if (!expr || !*expr)
        return WHALE_EINVAL;
    /* libslurm 22.05 leaks an allocation on every bracket it fails to
     * parse ("n[]", "n[1x]"; found by tests/fuzz): refuse those first */
    if (!brackets_ok(expr))
        return WHALE_EINVAL;
    /* count first: nothing is handed to fn from a list that is too long */
    struct hl_walk w = { .fn = fn, .user = user, .count_only = true };
    int rc = hl_walk_all(&w, expr);
    if (rc)
        return rc;
    if (budget) {
        *budget -= w.total;
        if (*budget < 0)
            return WHALE_ERANGE;
    }
    w.count_only = false;
    rc = hl_walk_all(&w, expr);
    return rc ? rc : w.rc;
}

static int count_one(const char *h, void *user)
{
    (void)h;
    (*(int *)user)++;
    return 0;
}

int conf_hostlist_count(const char *expr, long *budget)
{
    int n = 0;
    int rc = conf_hostlist_foreach(expr, count_one, &n, budget);
    return rc ? rc : n;
}

int conf_hostlist_error(const char *file, int line, const char *key, const char *value, int rc,
                        const long *budget)
{
    if (rc == WHALE_ERANGE && budget && *budget < 0)
        whale_error("%s:%d: %s=%s: this file's hostlists expand to more than %d hosts in all",
                    file, line, key, value, CONF_MAX_HOSTS_FILE);
    else if (rc == WHALE_ERANGE)
        whale_error("%s:%d: %s=%s: expands to more than %d hosts", file, line, key, value,
                    CONF_MAX_HOSTS);
    else if (rc == WHALE_EINVAL)
        whale_error("%s:%d: %s=%s: not a valid hostlist expression", file, line, key, value);
    else
        return rc;
    return WHALE_ECONF;
}

static int push_name(char ***names, int *n, const char *s, size_t len)
{
    /* capacity doubles at powers of two (16, 32, ...): a realloc per name
     * made long lists O(n^2) under ASan, whose realloc always copies */
    if (*n == 0 || (*n >= 16 && !(*n & (*n - 1)))) {
        char **p = realloc(*names, (size_t)(*n < 16 ? 16 : *n * 2) * sizeof *p);
        if (!p)
            return WHALE_ENOMEM;
        *names = p;
    }
    char **p = *names;
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
        /* strtol saturates at LONG_MAX: a range ending there must not make
         * v++ below overflow, so numbers are capped at 18 digits' worth */
        if (a > 999999999999999999L || b > 999999999999999999L || b < a || b - a > 4096)
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
    int rc = conf_hostlist_foreach(expr, expand_push, &a, NULL);
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
