/* Budgeted, accounted allocator (see whale/arena.h). The arena only counts
 * and limits; the memory itself comes from the backend, so the same
 * accounting serves host memory on the CPU backend and device memory on a
 * GPU. */
#include "whale/arena.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "whale/error.h"
#include "whale/log.h"

struct whale_arena {
    pthread_mutex_t mu;
    struct whale_arena_backend be;
    struct whale_arena_stats st;
};

const char *whale_mem_cat_name(enum whale_mem_cat c)
{
    static const char *n[] = { "param", "grad", "optim", "act", "comm" };
    return c >= 0 && c < WHALE_MEM_CAT_COUNT_ ? n[c] : "unknown";
}

static void *host_alloc(void *user, size_t n)
{
    (void)user;
    void *p = NULL;
    /* +64: kernels may read one vector past the end of a row */
    return posix_memalign(&p, 64, n + 64) ? NULL : p;
}

static void host_free(void *user, void *p, size_t n)
{
    (void)user;
    (void)n;
    free(p);
}

int whale_arena_create(int64_t budget, const struct whale_arena_backend *backend,
                       whale_arena **out)
{
    *out = NULL;
    if (budget < 0)
        return WHALE_EINVAL;
    whale_arena *a = calloc(1, sizeof *a);
    if (!a)
        return WHALE_ENOMEM;
    pthread_mutex_init(&a->mu, NULL);
    a->be = backend ? *backend : (struct whale_arena_backend){ host_alloc, host_free, NULL };
    a->st.budget = budget;
    *out = a;
    return 0;
}

void whale_arena_destroy(whale_arena *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void mib(char *buf, size_t len, int64_t b)
{
    if (b < (1 << 20))
        snprintf(buf, len, "%.1f KiB", (double)b / 1024);
    else
        snprintf(buf, len, "%.2f MiB", (double)b / (1 << 20));
}

void *whale_arena_alloc(whale_arena *a, enum whale_mem_cat cat, size_t n, int zero)
{
    if (cat < 0 || cat >= WHALE_MEM_CAT_COUNT_)
        return NULL;
    pthread_mutex_lock(&a->mu);
    if (a->st.budget > 0 && a->st.in_use + (int64_t)n > a->st.budget) {
        a->st.failed++;
        char r[32], u[32], b[32];
        mib(r, sizeof r, (int64_t)n);
        mib(u, sizeof u, a->st.in_use);
        mib(b, sizeof b, a->st.budget);
        pthread_mutex_unlock(&a->mu);
        whale_error("device memory budget exceeded: %s for %s needed, %s in use of a %s budget "
                    "(--device-mem; offload optimizer state or parameters to host memory with "
                    "--offload)", r, whale_mem_cat_name(cat), u, b);
        return NULL;
    }
    a->st.in_use += (int64_t)n;
    a->st.cat_in_use[cat] += (int64_t)n;
    if (a->st.in_use > a->st.peak)
        a->st.peak = a->st.in_use;
    if (a->st.cat_in_use[cat] > a->st.cat_peak[cat])
        a->st.cat_peak[cat] = a->st.cat_in_use[cat];
    pthread_mutex_unlock(&a->mu);
    void *p = a->be.alloc(a->be.user, n ? n : 1);
    if (!p) {
        pthread_mutex_lock(&a->mu);
        a->st.in_use -= (int64_t)n;
        a->st.cat_in_use[cat] -= (int64_t)n;
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    if (zero)
        memset(p, 0, n);
    return p;
}

void whale_arena_free(whale_arena *a, enum whale_mem_cat cat, void *p, size_t n)
{
    if (!p || cat < 0 || cat >= WHALE_MEM_CAT_COUNT_)
        return;
    a->be.free(a->be.user, p, n);
    pthread_mutex_lock(&a->mu);
    a->st.in_use -= (int64_t)n;
    a->st.cat_in_use[cat] -= (int64_t)n;
    pthread_mutex_unlock(&a->mu);
}

int whale_arena_charge(whale_arena *a, enum whale_mem_cat cat, int64_t n, int quiet)
{
    if (!a || cat < 0 || cat >= WHALE_MEM_CAT_COUNT_)
        return WHALE_EINVAL;
    pthread_mutex_lock(&a->mu);
    if (n > 0 && a->st.budget > 0 && a->st.in_use + n > a->st.budget) {
        char r[32], u[32], b[32];
        mib(r, sizeof r, n);
        mib(u, sizeof u, a->st.in_use);
        mib(b, sizeof b, a->st.budget);
        pthread_mutex_unlock(&a->mu);
        whale_log(quiet ? WHALE_LOG_DEBUG : WHALE_LOG_ERROR,
                  "device memory budget exceeded: %s for %s needed, %s in use of a %s budget", r,
                  whale_mem_cat_name(cat), u, b);
        return WHALE_ENOMEM;
    }
    a->st.in_use += n;
    a->st.cat_in_use[cat] += n;
    if (a->st.in_use > a->st.peak)
        a->st.peak = a->st.in_use;
    if (a->st.cat_in_use[cat] > a->st.cat_peak[cat])
        a->st.cat_peak[cat] = a->st.cat_in_use[cat];
    pthread_mutex_unlock(&a->mu);
    return 0;
}

void whale_arena_stats(const whale_arena *a, struct whale_arena_stats *s)
{
    pthread_mutex_lock((pthread_mutex_t *)&a->mu);
    *s = a->st;
    pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
}

void whale_arena_reset_peak(whale_arena *a)
{
    pthread_mutex_lock(&a->mu);
    a->st.peak = a->st.in_use;
    for (int c = 0; c < WHALE_MEM_CAT_COUNT_; c++)
        a->st.cat_peak[c] = a->st.cat_in_use[c];
    pthread_mutex_unlock(&a->mu);
}
