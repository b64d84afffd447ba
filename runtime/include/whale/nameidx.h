/* Name -> index maps for long name lists (hostlists of tens of thousands
 * of nodes, switch trees): open addressing keyed by xxhash of the name, so
 * building and looking up stay linear where a linear search per name made
 * the parsers O(n^2) (a 24,336-name Switches= list took 32 s under ASan;
 * found by tests/fuzz). The map does not own the names: it points at
 * strings the caller keeps alive and unchanged until whale_nameidx_free. */
#ifndef WHALE_NAMEIDX_H
#define WHALE_NAMEIDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct whale_nameidx_slot {
    const char *name;   /* NULL = empty */
    uint32_t tag;       /* upper hash bits: skips most strcmp calls */
    int idx;
};

struct whale_nameidx {
    struct whale_nameidx_slot *slot;
    size_t cap;         /* power of two, or 0 before the first reserve */
    size_t n;
};

/* Room for n entries (load factor <= 1/2); 0 or WHALE_ENOMEM, the map
 * unchanged on failure. A zeroed struct is an empty map. */
int whale_nameidx_reserve(struct whale_nameidx *ix, size_t n);
/* Map name -> idx; name must not be in the map yet, and
 * whale_nameidx_reserve(ix, ix->n + 1) must have succeeded. */
void whale_nameidx_insert(struct whale_nameidx *ix, const char *name, int idx);
/* Reserve room and insert; 0 or WHALE_ENOMEM. */
int whale_nameidx_add(struct whale_nameidx *ix, const char *name, int idx);
/* The idx of name, or -1. */
int whale_nameidx_find(const struct whale_nameidx *ix, const char *name);
/* Repoint name's entry at idx (name must be in the map). */
void whale_nameidx_set(struct whale_nameidx *ix, const char *name, int idx);
void whale_nameidx_free(struct whale_nameidx *ix);

#ifdef __cplusplus
}
#endif
#endif
