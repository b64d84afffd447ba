/* Open-addressing name map (whale/nameidx.h). Linear probing at a load
 * factor <= 1/2: a lookup is O(1) on average for the 50,000-name lists a
 * hostlist may expand to. xxhash header-only: whale_core goes into the
 * SPANK plugin, which links no libxxhash. */
#include "whale/nameidx.h"
#include "whale/error.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

static size_t probe(const struct whale_nameidx_slot *slot, size_t cap, const char *name,
                    uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);
    size_t mask = cap - 1, i = (size_t)h & mask;
    while (slot[i].name && !(slot[i].tag == tag && !strcmp(slot[i].name, name)))
        i = (i + 1) & mask;
    return i;
}

int whale_nameidx_reserve(struct whale_nameidx *ix, size_t n)
{
    if (n * 2 <= ix->cap)
        return 0;
    size_t nc = ix->cap ? ix->cap * 2 : 64;
    while (n * 2 > nc)
        nc *= 2;
    struct whale_nameidx_slot *ns = calloc(nc, sizeof *ns);
    if (!ns)
        return WHALE_ENOMEM;
    for (size_t i = 0; i < ix->cap; i++) {
        const struct whale_nameidx_slot *o = &ix->slot[i];
        if (o->name)
            ns[probe(ns, nc, o->name, name_hash(o->name))] = *o;
    }
    free(ix->slot);
    ix->slot = ns;
    ix->cap = nc;
    return 0;
}

void whale_nameidx_insert(struct whale_nameidx *ix, const char *name, int idx)
{
    uint64_t h = name_hash(name);
    struct whale_nameidx_slot *s = &ix->slot[probe(ix->slot, ix->cap, name, h)];
    s->name = name;
    s->tag = (uint32_t)(h >> 32);
    s->idx = idx;
    ix->n++;
}

int whale_nameidx_add(struct whale_nameidx *ix, const char *name, int idx)
{
    int rc = whale_nameidx_reserve(ix, ix->n + 1);
    if (!rc)
        whale_nameidx_insert(ix, name, idx);
    return rc;
}

int whale_nameidx_find(const struct whale_nameidx *ix, const char *name)
{
    if (!ix->cap || !name)
        return -1;
    const struct whale_nameidx_slot *s = &ix->slot[probe(ix->slot, ix->cap, name, name_hash(name))];
    return s->name ? s->idx : -1;
}

void whale_nameidx_set(struct whale_nameidx *ix, const char *name, int idx)
{
    if (!ix->cap)
        return;
    struct whale_nameidx_slot *s = &ix->slot[probe(ix->slot, ix->cap, name, name_hash(name))];
    if (s->name)
        s->idx = idx;
}

void whale_nameidx_free(struct whale_nameidx *ix)
{
    free(ix->slot);
    ix->slot = NULL;
    ix->cap = ix->n = 0;
}
