/* Device memory arena: every working tensor of the engine (weights in use,
 * gradients, optimizer state kept on the device, activations, communication
 * buffers) is taken from one arena with a byte budget and per-category
 * accounting, so the memory a step needs is known, limited and reported.
 *
 * The arena is backend-neutral: it accounts and limits, and gets its memory
 * from a backend (struct whale_arena_backend). On the CPU backend that is
 * aligned host memory accounted on its own ("device" memory distinct from the
 * host tier that offload moves state to); a CUDA backend passes cudaMalloc /
 * cudaFree. Thread-safe. */
#ifndef WHALE_ARENA_H
#define WHALE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum whale_mem_cat {
    WHALE_MEM_PARAM = 0, /* weights held or gathered for compute */
    WHALE_MEM_GRAD,      /* gradient buffers and reduction scratch */
    WHALE_MEM_OPTIM,     /* optimizer state kept on the device (moments, masters) */
    WHALE_MEM_ACT,       /* activations and per-layer scratch */
    WHALE_MEM_COMM,      /* communication staging */
    WHALE_MEM_CAT_COUNT_
};
const char *whale_mem_cat_name(enum whale_mem_cat c); /* "param", "grad", ... */

struct whale_arena_backend {
    /* returns memory of at least n bytes aligned to 64, or NULL */
    void *(*alloc)(void *user, size_t n);
    void (*free)(void *user, void *p, size_t n);
    void *user;
};

typedef struct whale_arena whale_arena;

/* budget 0: unlimited (accounting only). backend NULL: aligned host memory. */
int  whale_arena_create(int64_t budget, const struct whale_arena_backend *backend,
                        whale_arena **out);
void whale_arena_destroy(whale_arena *a);

/* n bytes (zeroed when zero is set) in category cat. Over the budget:
 * returns NULL and, unless quiet, logs the category, the request, what is
 * in use and the budget. */
void *whale_arena_alloc(whale_arena *a, enum whale_mem_cat cat, size_t n, int zero);
void  whale_arena_free(whale_arena *a, enum whale_mem_cat cat, void *p, size_t n);
/* Counts n bytes in category cat that the caller got elsewhere (a shared-
 * memory window the peers map, which the backend cannot provide), so that
 * they count against the budget and show in the statistics; n < 0 gives
 * them back. Over the budget: WHALE_ENOMEM, nothing counted, and the
 * message says what was asked for (quiet: logged at debug level only, for
 * a caller that can do without). */
int   whale_arena_charge(whale_arena *a, enum whale_mem_cat cat, int64_t n, int quiet);

struct whale_arena_stats {
    int64_t budget;                          /* 0: unlimited */
    int64_t in_use, peak;                    /* bytes, all categories */
    int64_t cat_in_use[WHALE_MEM_CAT_COUNT_];
    int64_t cat_peak[WHALE_MEM_CAT_COUNT_];  /* each category's own peak */
    int64_t failed;                          /* allocations refused by the budget */
};
void whale_arena_stats(const whale_arena *a, struct whale_arena_stats *s);
/* Restart peak tracking from what is in use now. */
void whale_arena_reset_peak(whale_arena *a);


#ifdef __cplusplus
}
#endif
#endif
