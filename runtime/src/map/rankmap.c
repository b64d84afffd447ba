/* WHALE_RANKMAP encoding and Slurm's task-layout strings. */
#include "whale/map.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/readfile.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *whale_rankmap_encode(const int *task_of_rank, int world)
{
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (int r = 0; r < world;) {
        int a = task_of_rank[r], e = r;
        int step = 0;
        if (r + 1 < world && (task_of_rank[r + 1] == a + 1 || task_of_rank[r + 1] == a - 1)) {
            step = task_of_rank[r + 1] - a;
            while (e + 1 < world && task_of_rank[e + 1] == task_of_rank[e] + step)
                e++;
        }
        char item[32];
        int n = e > r ? snprintf(item, sizeof item, "%s%d-%d", r ? "," : "", a, task_of_rank[e])
                      : snprintf(item, sizeof item, "%s%d", r ? "," : "", a);
        if (len + (size_t)n + 1 > cap) {
            while (len + (size_t)n + 1 > cap)
                cap *= 2;
            char *p = realloc(s, cap);
            if (!p) {
                free(s);
                return NULL;
            }
            s = p;
        }
        memcpy(s + len, item, (size_t)n + 1);
        len += (size_t)n;
        r = e + 1;
    }
    return s;
}

static int parse_nonneg(const char **p, int *out)
{
    if (!isdigit((unsigned char)**p))
        return -1;
    long v = 0;
    while (isdigit((unsigned char)**p)) {
        v = v * 10 + (**p - '0');
        if (v > INT_MAX)
            return -1;
        (*p)++;
    }
    *out = (int)v;
    return 0;
}

/* More ranks than any machine has: a garbage value must not allocate GBs. */
#define WHALE_RANKMAP_MAX ((size_t)1 << 24)

int whale_rankmap_decode(const char *s, int **task_of_rank, int *world)
{
    *task_of_rank = NULL;
    *world = 0;
    if (!s) {
        whale_error("WHALE_RANKMAP is not set");
        return WHALE_EINVAL;
    }
    size_t cap = 64, n = 0;
    int *v = malloc(cap * sizeof *v);
    if (!v)
        return WHALE_ENOMEM;
    const char *p = s;
    while (*p) {
        int a, b;
        if (parse_nonneg(&p, &a))
            goto bad;
        b = a;
        if (*p == '-') {
            p++;
            if (parse_nonneg(&p, &b))
                goto bad;
        }
        long cnt = (long)(b > a ? b - a : a - b) + 1;
        if (n + (size_t)cnt > WHALE_RANKMAP_MAX)
            goto bad;
        while (n + (size_t)cnt > cap) {
            cap *= 2;
            int *q = realloc(v, cap * sizeof *q);
            if (!q) {
                free(v);
                return WHALE_ENOMEM;
            }
            v = q;
        }
        int step = b >= a ? 1 : -1;
        for (int x = a;; x += step) {
            v[n++] = x;
            if (x == b)
                break;
        }
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    if (n == 0)
        goto bad;
    *task_of_rank = v;
    *world = (int)n;
    return 0;
bad:
    whale_error("WHALE_RANKMAP '%.60s%s' is malformed near offset %d (expected items "
                "'A' or 'A-B' separated by commas)",
                s, strlen(s) > 60 ? "..." : "", (int)(p - s));
    free(v);
    return WHALE_EINVAL;
}

int whale_rankmap_load(const char *value, int **task_of_rank, int *world)
{
    if (value && value[0] == '@') {
        /* a rank map of 2^24 ranks is under 200 MB only in the worst
         * case; a real one is a few kB (ranges compress it) */
        char *buf = NULL;
        size_t len = 0;
        int rrc = whale_read_file(value + 1, (size_t)256 << 20, 0, &buf, &len);
        if (rrc) {
            whale_error("cannot read WHALE_RANKMAP file %s (see above)", value + 1);
            return rrc;
        }
        while (len && isspace((unsigned char)buf[len - 1]))
            buf[--len] = '\0';
        int rc = whale_rankmap_decode(buf, task_of_rank, world);
        free(buf);
        return rc;
    }
    return whale_rankmap_decode(value, task_of_rank, world);
}

int whale_map_parse_tasks_per_node(const char *s, int nnodes, int *ntasks)
{
    const char *p = s;
    int i = 0;
    if (!s)
        goto bad;
    while (*p) {
        int v, rep = 1;
        if (parse_nonneg(&p, &v))
            goto bad;
        if (*p == '(') {
            p++;
            if (*p++ != 'x' || parse_nonneg(&p, &rep) || *p++ != ')')
                goto bad;
        }
        for (int k = 0; k < rep; k++) {
            if (i >= nnodes)
                goto bad;
            ntasks[i++] = v;
        }
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    if (i != nnodes)
        goto bad;
    return 0;
bad:
    whale_error("tasks per node '%s' does not describe %d node(s)", s ? s : "(null)", nnodes);
    return WHALE_EINVAL;
}

int whale_map_parse_pmi_mapping(const char *s, int nnodes, const int *ntasks, int **task_ids)
{
    /* "(vector,(start,nodes,tasks),...)": blocks of `tasks` consecutive task
     * ids on each of `nodes` nodes from `start`; the vector repeats until
     * every task has a node (cyclic distributions). */
    int nent = 0, cap = 8;
    int (*ent)[3] = malloc((size_t)cap * sizeof *ent);
    int *off = malloc(((size_t)nnodes + 1) * sizeof *off);
    int *fill = calloc((size_t)nnodes, sizeof *fill);
    int *ids = NULL;
    const char *p = s;
    int total = 0;
    if (!ent || !off || !fill)
        goto nomem;
    if (!s || strncmp(p, "(vector", 7))
        goto bad;
    p += 7;
    while (*p == ',') {
        p++;
        if (*p != '(')
            goto bad;
        p++;
        int v[3];
        for (int k = 0; k < 3; k++) {
            if (parse_nonneg(&p, &v[k]))
                goto bad;
            if (k < 2 && *p++ != ',')
                goto bad;
        }
        if (*p++ != ')')
            goto bad;
        if (nent == cap) {
            cap *= 2;
            void *q = realloc(ent, (size_t)cap * sizeof *ent);
            if (!q)
                goto nomem;
            ent = q;
        }
        memcpy(ent[nent++], v, sizeof v);
    }
    if (*p != ')' || nent == 0)
        goto bad;
    off[0] = 0;
    for (int i = 0; i < nnodes; i++)
        off[i + 1] = off[i] + ntasks[i];
    total = off[nnodes];
    ids = malloc((size_t)total * sizeof *ids);
    if (!ids)
        goto nomem;
    int next = 0;
    while (next < total) {
        int before = next;
        for (int e = 0; e < nent && next < total; e++) {
            for (int nd = ent[e][0]; nd < ent[e][0] + ent[e][1] && next < total; nd++) {
                if (nd >= nnodes)
                    goto bad;
                for (int k = 0; k < ent[e][2] && next < total; k++) {
                    if (fill[nd] >= ntasks[nd])
                        goto bad;
                    ids[off[nd] + fill[nd]++] = next++;
                }
            }
        }
        if (next == before)
            goto bad;
    }
    free(ent);
    free(off);
    free(fill);
    *task_ids = ids;
    return 0;
bad:
    whale_error("process mapping '%s' does not match %d task(s) on %d node(s)",
                s ? s : "(null)", total, nnodes);
    free(ent);
    free(off);
    free(fill);
    free(ids);
    return WHALE_EINVAL;
nomem:
    free(ent);
    free(off);
    free(fill);
    free(ids);
    return WHALE_ENOMEM;
}
