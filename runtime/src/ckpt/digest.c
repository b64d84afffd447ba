/* Digests that make a manifest's meaning checkable.
 *
 * A chunk's stored-bytes checksum (xxh3_128) proves the file is intact but
 * not that the manifest still describes it: a changed "shuffle", "dtype",
 * region or "enc" decodes intact bytes into other values. So each chunk
 * also carries content_xxh3_128, a hash of what it decodes to before the
 * element conversion (the encoded bytes after zstd and unshuffle) bound to
 * the fields that give those bytes their meaning; and the manifest as a
 * whole carries manifest_xxh3_128 over its canonical JSON (keys sorted,
 * compact, the digest itself left out), which catches every other edited
 * field (step, files, train state). These are integrity checks against
 * damage and mistakes, not signatures: whoever can write the directory can
 * recompute them. */
#include "ckpt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void ckpt_content_hash(XXH128_hash_t bytes, enum whale_dtype dt, enum ckpt_enc enc, int block,
                       const ckpt_region *reg, char out[33])
{
    /* explicit little fields, no struct padding: the same on every build */
    int64_t d[8 + 3 * WHALE_CKPT_MAX_DIMS];
    size_t k = 0;
    d[k++] = (int64_t)dt;
    d[k++] = (int64_t)enc;
    d[k++] = block;
    d[k++] = reg->ndim;
    for (int i = 0; i < reg->ndim && i < WHALE_CKPT_MAX_DIMS; i++) {
        d[k++] = reg->shape[i];
        d[k++] = reg->off[i];
        d[k++] = reg->cnt[i];
    }
    d[k++] = reg->flat;
    d[k++] = reg->flat ? reg->fb : 0;
    d[k++] = reg->flat ? reg->fe : 0;
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, bytes);
    XXH3_state_t *st = XXH3_createState();
    XXH128_hash_t h;
    if (st) {
        XXH3_128bits_reset(st);
        XXH3_128bits_update(st, d, k * sizeof d[0]);
        XXH3_128bits_update(st, &can, sizeof can);
        h = XXH3_128bits_digest(st);
        XXH3_freeState(st);
    } else { /* out of memory: a one-shot hash of the same bytes */
        unsigned char b[sizeof d + sizeof can];
        memcpy(b, d, k * sizeof d[0]);
        memcpy(b + k * sizeof d[0], &can, sizeof can);
        h = XXH3_128bits(b, k * sizeof d[0] + sizeof can);
    }
    XXH128_canonicalFromHash(&can, h);
    ckpt_hex128(&can, out);
}

int ckpt_manifest_digest(json_t *man, char out[33])
{
    json_t *c = json_copy(man); /* shallow: only the top-level key set differs */
    if (!c)
        return -1;
    json_object_del(c, CKPT_DIGEST_KEY);
    char *txt = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(c);
    if (!txt)
        return -1;
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, XXH3_128bits(txt, strlen(txt)));
    free(txt);
    ckpt_hex128(&can, out);
    return 0;
}
