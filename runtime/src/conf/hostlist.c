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
 * brackets do not nest and are closed. A number has at most HL_DIGITS
 * digits: strtoul saturates longer ones at ULONG_MAX, and libslurm walks
 * a range ending there for ever ("gb[<38 digits>]x[7]" hung the fuzzer). */
#define HL_DIGITS 18
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
            if (end - p > HL_DIGITS)
                return false;
            p = end;
            if (*p == '-') {
                p++;
                if (*p < '0' || *p > '9')
                    return false;
                hi = strtoul(p, &end, 10);
                if (end - p > HL_DIGITS)
                    return false;
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

/* Hosts one bracket [lb, rb] names: the sum of its ranges' sizes
 * (brackets_ok has checked its syntax). */
static unsigned long bracket_hosts(const char *lb, const char *rb)
{
    unsigned long n = 0;
    for (const char *p = lb + 1; p < rb;) {
        char *end;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtoul(end + 1, &end, 10);
        n += hi - lo + 1;
        p = *end == ',' ? end + 1 : rb;
    }
    return n;
}

/* Calls piece(w, buf) for "pre[r]suf" of each range r of the bracket
 * [lb, rb] of item (len bytes; suf is everything after rb). */
static int hl_ranges(struct hl_walk *w, const char *item, size_t len, const char *lb,
                     const char *rb, int (*piece)(struct hl_walk *, const char *))
{
    size_t rest = len - (size_t)(rb + 1 - item);
    char *buf = malloc(len + 3);
    if (!buf)
        return WHALE_ENOMEM;
    int rc = 0;
    size_t plen = (size_t)(lb - item) + 1; /* "pre[" */
    for (const char *r = lb + 1; r < rb && !rc;) {
        const char *e = memchr(r, ',', (size_t)(rb - r));
        if (!e)
            e = rb;
        memcpy(buf, item, plen);
        memcpy(buf + plen, r, (size_t)(e - r));
        memcpy(buf + plen + (size_t)(e - r), rb, rest + 1); /* "]suf" */
        buf[plen + (size_t)(e - r) + rest + 1] = '\0';
        rc = piece(w, buf);
        r = e + 1;
    }
    free(buf);
    return rc;
}

/* One bracket of a multi-bracket item while it is walked. */
struct hl_br {
    const char *lb, *rb;  /* '[' and ']' */
    const char *r;        /* the range being walked */
    unsigned long v, hi;  /* its current value and end */
    int width;            /* digits of its low end (libslurm pads to that) */
};

static void br_range(struct hl_br *b)
{
    char *end;
    b->v = b->hi = strtoul(b->r, &end, 10);
    b->width = (int)(end - b->r);
    if (*end == '-')
        b->hi = strtoul(end + 1, NULL, 10);
}

/* "r[1-2]n[01-02]": several brackets multiply (r1n01 r1n02 r2n01 r2n02, the
 * first bracket slowest, each number padded to its range's low end, as
 * libslurm does). libslurm would hold one range per name of all but the
 * last bracket at once, O(n^2) in them (gb[0-65535]b[1]: 0.8 s plain,
 * minutes under a sanitizer), so the names are made here. What libslurm
 * accepts decides: an item whose first name it refuses (22.05 refuses
 * anything after the last bracket) is refused whole. prod: the names. */
static int hl_multi(struct hl_walk *w, const char *item, size_t len, int nbr, unsigned long prod)
{
    struct hl_br *br = calloc((size_t)nbr, sizeof *br);
    char *buf = malloc(len + 1), *probe = malloc(len + 1);
    int rc = 0;
    if (!br || !buf || !probe) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    const char *l = memchr(item, '[', len);
    for (int k = 0; k < nbr; k++) {
        br[k].lb = l;
        br[k].rb = memchr(l, ']', len - (size_t)(l - item));
        br[k].r = l + 1;
        br_range(&br[k]);
        l = memchr(br[k].rb, '[', len - (size_t)(br[k].rb - item));
    }
    const char *end = item + len;
    for (bool first = true;; first = false) {
        /* the current name: literal text, then each bracket's value */
        size_t n = (size_t)(br[0].lb - item);
        memcpy(buf, item, n);
        for (int k = 0; k < nbr; k++) {
            /* no wider than the bracket's text: the number is at most hi's
             * digits, the padding at most lo's */
            n += (size_t)sprintf(buf + n, "%0*lu", br[k].width, br[k].v);
            const char *lit = br[k].rb + 1, *next = k + 1 < nbr ? br[k + 1].lb : end;
            memcpy(buf + n, lit, (size_t)(next - lit));
            n += (size_t)(next - lit);
        }
        buf[n] = '\0';
        if (first) {
            /* libslurm on the item with each bracket cut to its first
             * number ("r[01]n[3]x"): one name, the same as ours */
            size_t q = (size_t)(br[0].lb - item);
            memcpy(probe, item, q);
            for (int k = 0; k < nbr; k++) {
                const char *next = k + 1 < nbr ? br[k + 1].lb : end;
                q += (size_t)sprintf(probe + q, "[%.*s]", br[k].width, br[k].lb + 1);
                memcpy(probe + q, br[k].rb + 1, (size_t)(next - br[k].rb - 1));
                q += (size_t)(next - br[k].rb - 1);
            }
            probe[q] = '\0';
            hostlist_t hl = slurm_hostlist_create(probe);
            char *h = hl ? slurm_hostlist_shift(hl) : NULL;
            bool same = h && !strcmp(h, buf) && slurm_hostlist_count(hl) == 0;
            free(h);
            if (hl)
                slurm_hostlist_destroy(hl);
            if (!same) {
                rc = WHALE_EINVAL;
                break;
            }
            if (w->count_only) {
                w->total += (long)prod;
                rc = w->total > CONF_MAX_HOSTS ? WHALE_ERANGE : 0;
                break;
            }
        }
        if (!w->rc)
            w->rc = bad_name(buf) ? WHALE_EINVAL : w->fn ? w->fn(buf, w->user) : 0;
        /* the next name: the last bracket fastest */
        int k = nbr - 1;
        for (; k >= 0; k--) {
            if (br[k].v < br[k].hi) {
                br[k].v++;
                break;
            }
            const char *c = memchr(br[k].r, ',', (size_t)(br[k].rb - br[k].r));
            if (c) { /* its next range */
                br[k].r = c + 1;
                br_range(&br[k]);
                break;
            }
            br[k].r = br[k].lb + 1; /* wraps; the bracket before moves on */
            br_range(&br[k]);
        }
        if (k < 0)
            break;
    }
out:
    free(br);
    free(buf);
    free(probe);
    return rc;
}

/* The longest name item (len bytes) can produce: its literal text plus,
 * per bracket, its widest number (brackets_ok has checked the syntax:
 * digits, '-' and ','), counted on the text before anything expands. */
static size_t name_len(const char *item, size_t len)
{
    size_t n = 0, widest = 0, run = 0;
    bool in = false;
    for (const char *p = item; p < item + len; p++) {
        if (*p == '[' || *p == ']') {
            in = *p == '[';
            n += in ? 0 : widest;
            widest = run = 0;
        } else if (!in) {
            n++;
        } else {
            run = *p >= '0' && *p <= '9' ? run + 1 : 0;
            widest = run > widest ? run : widest;
        }
    }
    return n;
}

/* One item (no separator outside brackets), len bytes at item. */
static int hl_item(struct hl_walk *w, const char *item, size_t len)
{
    if (name_len(item, len) > CONF_MAX_HOSTNAME)
        return WHALE_ETOOLONG;
    const char *lb = memchr(item, '[', len);
    if (!lb) {
        char *buf = strndup(item, len);
        if (!buf)
            return WHALE_ENOMEM;
        int rc = hl_piece(w, buf);
        free(buf);
        return rc;
    }
    const char *rb = memchr(lb, ']', len - (size_t)(lb - item));
    if (!rb)
        return WHALE_EINVAL; /* brackets_ok refused it already */
    /* Brackets multiply: a[0-999]b[0-999] is a million names in 18 bytes.
     * Bound the product before libslurm sees any of it. */
    unsigned long prod = 1;
    int nbr = 0;
    for (const char *l = lb; l && l < item + len; nbr++) {
        const char *r = memchr(l, ']', len - (size_t)(l - item));
        if (!r)
            return WHALE_EINVAL;
        prod *= bracket_hosts(l, r);
        if (prod > CONF_MAX_HOSTS)
            return WHALE_ERANGE;
        l = memchr(r, '[', len - (size_t)(r - item));
    }
    return nbr > 1 ? hl_multi(w, item, len, nbr, prod) : hl_ranges(w, item, len, lb, rb, hl_piece);
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
        whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": this file's hostlists expand to more than "
                    "%d hosts in all", file, line, key, WHALE_KV_ECHO_ARG(value),
                    CONF_MAX_HOSTS_FILE);
    else if (rc == WHALE_ERANGE)
        whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": expands to more than %d hosts", file, line,
                    key, WHALE_KV_ECHO_ARG(value), CONF_MAX_HOSTS);
    else if (rc == WHALE_ETOOLONG)
        whale_error("%s:%d: %s=%.64s...: names a host longer than %d characters", file, line, key,
                    value, CONF_MAX_HOSTNAME);
    else if (rc == WHALE_EINVAL)
        whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": not a valid hostlist expression", file, line,
                    key, WHALE_KV_ECHO_ARG(value));
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
