/* WHALE_FAULT: deterministic fault injection for tests and rehearsals.
 * Parsed strictly (an unknown key, a missing rank or step, a bad number is
 * an error naming the item), fired at the named phase of the named step. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/redundancy.h"

static const char *const phase_names[WHALE_FAULT_PHASE_COUNT_] = {
    "start", "forward", "backward", "collective", "optimizer", "ckpt",
};

const char *whale_fault_phase_name(enum whale_fault_phase p)
{
    return (unsigned)p < WHALE_FAULT_PHASE_COUNT_ ? phase_names[p] : "?";
}

static int parse_num(const char *item, const char *key, const char *v, long long lo,
                     long long hi, long long *out)
{
    long x; /* util's checked parser (whale/envnum.h); long is 64-bit here */
    if (whale_parse_long(v, (long)lo, (long)hi, &x)) {
        whale_error("WHALE_FAULT item '%s': %s=%s: expected an integer in %lld..%lld", item, key,
                    v, lo, hi);
        return WHALE_EINVAL;
    }
    *out = x;
    return 0;
}

/* rank=R[,R...]: distinct ranks, at most `max`. */
static int parse_ranks(const char *item, const char *v, int *ranks, int max, int *n)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    char *save = NULL;
    if (!*v || *v == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,")) {
        whale_error("WHALE_FAULT item '%s': rank=%s: expected ranks separated by commas "
                    "(e.g. rank=1,3)", item, v);
        return WHALE_EINVAL;
    }
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long long x;
        if (parse_num(item, "rank", t, 0, 1 << 24, &x))
            return WHALE_EINVAL;
        for (int i = 0; i < *n; i++)
            if (ranks[i] == (int)x) {
                whale_error("WHALE_FAULT item '%s': rank %lld listed twice", item, x);
                return WHALE_EINVAL;
            }
        if (*n == max) {
            whale_error("WHALE_FAULT item '%s': more than %d ranks in all", item, WHALE_FAULT_MAX);
            return WHALE_EINVAL;
        }
        ranks[(*n)++] = (int)x;
    }
    return 0;
}

/* One item "ACTION:KEY=VAL:..." (modified in place); rank=R,R,... gives
 * one fault per rank (ranks[], *nranks; f->rank is the first). */
static int parse_item(char *item, const char *orig, struct whale_fault *f, int *ranks, int maxr,
                      int *nranks)
{
    char *save = NULL;
    char *act = strtok_r(item, ":", &save);
    if (!act || !*act) {
        whale_error("WHALE_FAULT item '%s': missing the action (kill or hang)", orig);
        return WHALE_EINVAL;
    }
    if (!strcmp(act, "kill"))
        f->action = WHALE_FAULT_KILL;
    else if (!strcmp(act, "hang"))
        f->action = WHALE_FAULT_HANG;
    else {
        whale_error("WHALE_FAULT item '%s': unknown action '%s' (expected kill or hang)", orig,
                    act);
        return WHALE_EINVAL;
    }
    f->rank = -1;
    f->step = -1;
    f->phase = WHALE_FAULT_START;
    bool have_phase = false;
    for (char *kv; (kv = strtok_r(NULL, ":", &save));) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv || !eq[1]) {
            whale_error("WHALE_FAULT item '%s': '%s' is not KEY=VALUE (keys: rank, step, phase)",
                        orig, kv);
            return WHALE_EINVAL;
        }
        *eq = 0;
        const char *v = eq + 1;
        long long x;
        bool dup = (!strcmp(kv, "rank") && f->rank >= 0) || (!strcmp(kv, "step") && f->step >= 0) ||
                   (!strcmp(kv, "phase") && have_phase);
        if (dup) {
            whale_error("WHALE_FAULT item '%s': %s given twice", orig, kv);
            return WHALE_EINVAL;
        }
        if (!strcmp(kv, "rank")) {
            if (parse_ranks(orig, v, ranks, maxr, nranks))
                return WHALE_EINVAL;
            f->rank = ranks[0];
        } else if (!strcmp(kv, "step")) {
            if (parse_num(orig, kv, v, 1, 1LL << 40, &x))
                return WHALE_EINVAL;
            f->step = x;
        } else if (!strcmp(kv, "phase")) {
            int k = -1;
            for (int i = 0; i < WHALE_FAULT_PHASE_COUNT_; i++)
                if (!strcmp(v, phase_names[i]))
                    k = i;
            if (k < 0) {
                whale_error("WHALE_FAULT item '%s': phase=%s: expected start, forward, "
                            "backward, collective, optimizer or ckpt", orig, v);
                return WHALE_EINVAL;
            }
            f->phase = (enum whale_fault_phase)k;
            have_phase = true;
        } else {
            whale_error("WHALE_FAULT item '%s': unknown key '%s' (keys: rank, step, phase)", orig,
                        kv);
            return WHALE_EINVAL;
        }
    }
    if (f->rank < 0 || f->step < 0) {
        whale_error("WHALE_FAULT item '%s': needs rank=N[,N...] and step=N (e.g. kill:rank=3:step=12 "
                    "or kill:rank=1,3:step=5)",
                    orig);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_fault_parse(const char *spec, struct whale_fault_plan *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return 0;
    char *buf = strdup(spec);
    if (!buf)
        return WHALE_ENOMEM;
    int rc = 0;
    char *save = NULL;
    for (char *it = strtok_r(buf, ";", &save); it && !rc; it = strtok_r(NULL, ";", &save)) {
        while (*it == ' ')
            it++;
        if (!*it)
            continue;
        if (out->n == WHALE_FAULT_MAX) {
            whale_error("WHALE_FAULT: more than %d items", WHALE_FAULT_MAX);
            rc = WHALE_EINVAL;
            break;
        }
        char orig[128];
        snprintf(orig, sizeof orig, "%s", it);
        int ranks[WHALE_FAULT_MAX], nr = 0;
        struct whale_fault f = { 0 }; /* not fired: parse_item sets the other fields */
        rc = parse_item(it, orig, &f, ranks, WHALE_FAULT_MAX - out->n, &nr);
        for (int i = 0; !rc && i < nr; i++) {
            /* the same rank twice in one step and phase would fire only once */
            for (int j = 0; j < out->n; j++)
                if (out->f[j].rank == ranks[i] && out->f[j].step == f.step &&
                    out->f[j].phase == f.phase) {
                    whale_error("WHALE_FAULT item '%s': rank %d already fails at step %lld, "
                                "phase %s", orig, ranks[i], (long long)f.step,
                                whale_fault_phase_name(f.phase));
                    rc = WHALE_EINVAL;
                }
            out->f[out->n] = f;
            out->f[out->n].rank = ranks[i];
            if (!rc)
                out->n++;
        }
    }
    free(buf);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

int whale_fault_from_env(struct whale_fault_plan *out)
{
    return whale_fault_parse(whale_knob_getenv("WHALE_FAULT"), out);
}

const struct whale_fault *whale_fault_due(struct whale_fault_plan *p, int rank, int64_t step,
                                          enum whale_fault_phase phase)
{
    if (!p)
        return NULL;
    for (int i = 0; i < p->n; i++) {
        struct whale_fault *f = &p->f[i];
        if (!f->fired && f->rank == rank && f->step == step && f->phase == phase) {
            f->fired = true;
            return f;
        }
    }
    return NULL;
}

bool whale_fault_group_due(const struct whale_fault_plan *p, int64_t step,
                           enum whale_fault_phase phase)
{
    int n = 0;
    for (int i = 0; p && i < p->n; i++)
        n += p->f[i].step == step && p->f[i].phase == phase;
    return n >= 2;
}

void whale_fault_point(struct whale_fault_plan *p, int rank, int64_t step,
                       enum whale_fault_phase phase)
{
    const struct whale_fault *f = whale_fault_due(p, rank, step, phase);
    if (!f)
        return;
    whale_warn("WHALE_FAULT: rank %d %s itself at step %lld, phase %s (pid %d)", rank,
               f->action == WHALE_FAULT_KILL ? "kills" : "stops (SIGSTOP)", (long long)step,
               whale_fault_phase_name(phase), (int)getpid());
    fflush(stdout);
    fflush(stderr);
    raise(f->action == WHALE_FAULT_KILL ? SIGKILL : SIGSTOP);
}
