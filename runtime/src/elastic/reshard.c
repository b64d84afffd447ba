/* Images of one layout into an engine of another. After an elastic shrink
 * at ZeRO >= 1 every survivor's shard boundaries move (the buckets split
 * over fewer replicas), so no single image restores a rank: each new piece
 * is assembled from the survivors' images and the lost replica's held
 * copy, matched by the directory every image carries (name, kind, flat
 * range within the TP slice). The images are only read. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "elastic/elastic_internal.h"
#include "whale/error.h"
#include "whale/log.h"

/* One image parsed: its directory and where each entry's bytes are
 * (NULL: not in this image, e.g. replicated bytes of a unique prefix). */
struct src {
    const struct red_dirent *dir; /* unaligned in the image: read with memcpy */
    uint64_t n;
    const unsigned char **at;
};

static int parse(const struct whale_red_image *img, int i, struct src *s)
{
    const unsigned char *b = img->data;
    const size_t ts = sizeof(struct whale_train_state);
    uint64_t n;
    if (!b || img->len < ts + sizeof n)
        goto bad;
    memcpy(&n, b + ts, sizeof n);
    if (n > (img->len - ts - sizeof n) / sizeof(struct red_dirent))
        goto bad;
    s->n = n;
    s->dir = (const struct red_dirent *)(b + ts + sizeof n);
    s->at = calloc(n ? n : 1, sizeof *s->at);
    if (!s->at)
        return WHALE_ENOMEM;
    size_t off = ts + sizeof n + n * sizeof(struct red_dirent);
    for (int pass = 0; pass < 2; pass++) /* unique pieces first, then replicated */
        for (uint64_t k = 0; k < n; k++) {
            struct red_dirent d;
            memcpy(&d, (const unsigned char *)s->dir + k * sizeof d, sizeof d);
            size_t es = whale_dtype_size((enum whale_dtype)d.dtype);
            if ((d.rep != 0) != (pass == 1))
                continue;
            if (d.end < d.begin || d.begin < 0 || es == 0)
                goto bad;
            size_t len = (size_t)(d.end - d.begin) * es;
            if (off + len > img->len) {
                if (pass == 0)
                    goto bad; /* the unique prefix is always whole */
                break;        /* replicated bytes not in this image */
            }
            s->at[k] = b + off;
            off += len;
        }
    return 0;
bad:
    whale_error("reshard: image %d does not parse (%zu bytes)", i, img->len);
    return WHALE_EDATA;
}

struct fill_walk {
    struct src *s;
    int n;
};

static int fill_fn(const struct whale_tensor_piece *p, void *user)
{
    struct fill_walk *w = user;
    const uint64_t name = XXH64(p->name, strnlen(p->name, sizeof p->name), 0);
    const size_t es = whale_dtype_size(p->dtype);
    const int64_t want = p->flat_end - p->flat_begin;
    int64_t covered = 0;
    for (int i = 0; i < w->n && covered < want; i++)
        for (uint64_t k = 0; k < w->s[i].n && covered < want; k++) {
            struct red_dirent d;
            memcpy(&d, (const unsigned char *)w->s[i].dir + k * sizeof d, sizeof d);
            if (d.name != name || d.kind != (int32_t)p->kind || !w->s[i].at[k])
                continue;
            if (d.dtype != (int32_t)p->dtype) {
                whale_error("reshard: piece %s (%s) is %s in the image but %s in the engine",
                            p->name, whale_tensor_kind_name(p->kind),
                            whale_dtype_name((enum whale_dtype)d.dtype),
                            whale_dtype_name(p->dtype));
                return WHALE_EDATA;
            }
            int64_t a = d.begin > p->flat_begin ? d.begin : p->flat_begin;
            int64_t z = d.end < p->flat_end ? d.end : p->flat_end;
            if (a >= z)
                continue;
            /* an image covers a piece whole (replicated) or one shard of it
             * (unique: the shards of one layout are disjoint) */
            memcpy((unsigned char *)p->data + (size_t)(a - p->flat_begin) * es,
                   w->s[i].at[k] + (size_t)(a - d.begin) * es, (size_t)(z - a) * es);
            covered += z - a;
        }
    if (covered != want) {
        whale_error("reshard: piece %s (%s), elements %lld..%lld: %lld of %lld found in the "
                    "%d images", p->name, whale_tensor_kind_name(p->kind),
                    (long long)p->flat_begin, (long long)p->flat_end, (long long)covered,
                    (long long)want, w->n);
        return WHALE_ENOENT;
    }
    return 0;
}

int whale_red_fill(whale_engine *e, const struct whale_red_image *img, int n)
{
    if (n < 1)
        return WHALE_EINVAL;
    struct src *s = calloc((size_t)n, sizeof *s);
    if (!s)
        return WHALE_ENOMEM;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = parse(&img[i], i, &s[i]);
    if (!rc) {
        struct fill_walk w = { .s = s, .n = n };
        rc = whale_engine_tensors(e, fill_fn, &w);
    }
    if (!rc) {
        struct whale_train_state ts;
        memcpy(&ts, img[0].data, sizeof ts);
        rc = whale_engine_set_state(e, &ts);
    }
    for (int i = 0; i < n; i++)
        free(s[i].at);
    free(s);
    return rc;
}

int whale_red_local_image(const whale_red *r, int64_t step, struct whale_red_image *out,
                          size_t *unique_len)
{
    for (int i = 0; i < 2; i++)
        if (step >= 0 && r->slot_step[i] == step) {
            out->data = r->slot[i] + sizeof(struct red_hdr);
            out->len = r->local_bytes - sizeof(struct red_hdr);
            if (unique_len)
                *unique_len = sizeof(struct whale_train_state) + r->dir_bytes + r->uniq;
            return 0;
        }
    return WHALE_ENOENT;
}

int whale_red_slot_image(const void *mem, size_t slot_bytes, int64_t step,
                         struct whale_red_image *out)
{
    int64_t st[2];
    whale_red_scan(mem, slot_bytes, st, NULL);
    for (int i = 0; i < 2; i++)
        if (step >= 0 && st[i] == step) {
            const unsigned char *slot = (const unsigned char *)mem + (size_t)i * slot_bytes;
            const struct red_hdr *h = (const struct red_hdr *)slot;
            out->data = slot + sizeof *h;
            out->len = h->bytes;
            return 0;
        }
    return WHALE_ENOENT;
}
