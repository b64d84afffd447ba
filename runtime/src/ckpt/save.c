/* Saving: snapshot, background persist, incremental bundles, commit.
 *
 * A save is a job: the pieces are copied to one reusable host buffer (in
 * whale_ckpt_save, or by the worker thread with SNAPSHOT_DEFERRED), then the
 * worker cuts them into chunks (<= chunk_bytes, split along the outermost
 * dimension or the flat range), packs chunks into bundles in the caller's
 * order, and writes each bundle as one safetensors file. A bundle's key is
 * xxh3-128 over its chunks' names, regions, encodings and raw-data hashes;
 * a bundle whose key matches one of the previous save is hard-linked from
 * there instead of encoded and written. Writer threads write and
 * fdatasync bundles' staged images while the next is hashed, encoded and
 * staged (writer.c). Rank 0 then commits (see ckpt.h). */
#define _GNU_SOURCE
#include "ckpt_internal.h"
#include "save_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/nameidx.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

typedef struct chunk {
    const struct job_piece *p;
    ckpt_region reg;
    const unsigned char *raw;
    int64_t n;
    enum ckpt_enc enc;
    int block;           /* elements per int8 scale: quant_block, or a row (per channel) */
    XXH128_hash_t h;
} chunk;

typedef struct bundle {
    size_t first, count; /* chunks */
    size_t raw_bytes;
    char key[33];
} bundle;

static enum ckpt_enc pick_enc(const whale_ckpt_config *c, const struct job_piece *p)
{
    if (p->dtype != WHALE_FLOAT32)
        return CKPT_ENC_RAW;
    switch (p->kind) {
    case WHALE_CKPT_PARAM:
        return c->weights == WHALE_CKPT_WEIGHTS_BF16   ? CKPT_ENC_BF16
               : c->weights == WHALE_CKPT_WEIGHTS_FP16 ? CKPT_ENC_FP16
               : c->weights == WHALE_CKPT_WEIGHTS_INT8 ? CKPT_ENC_Q8
                                                       : CKPT_ENC_RAW;
    case WHALE_CKPT_MOMENT1:
        return c->quantize_moments ? CKPT_ENC_Q8 : CKPT_ENC_RAW;
    case WHALE_CKPT_MOMENT2:
        return c->quantize_moments ? CKPT_ENC_Q8SQRT : CKPT_ENC_RAW;
    default:
        return CKPT_ENC_RAW;
    }
}

/* Cut pieces into chunks of at most ~chunk_bytes. */
static int plan_chunks(whale_ckpt *ck, struct job *j, chunk **out, size_t *nout)
{
    size_t cap = j->n + 16, n = 0;
    chunk *c = malloc(cap * sizeof *c);
    if (!c)
        return WHALE_ENOMEM;
    for (size_t i = 0; i < j->n; i++) {
        const struct job_piece *p = &j->p[i];
        size_t k = p->bytes > ck->cfg.chunk_bytes
                       ? (p->bytes + ck->cfg.chunk_bytes - 1) / ck->cfg.chunk_bytes : 1;
        whale_ckpt_piece wp;
        memset(&wp, 0, sizeof wp);
        wp.dtype = p->dtype;
        wp.ndim = p->reg.ndim;
        memcpy(wp.shape, p->reg.shape, sizeof wp.shape);
        wp.flat = p->reg.flat;
        memcpy(wp.offset, p->reg.off, sizeof wp.offset);
        memcpy(wp.count, p->reg.cnt, sizeof wp.count);
        wp.flat_begin = p->reg.fb;
        wp.flat_end = p->reg.fe;
        wp.data = (void *)p->src;
        if (!wp.flat && wp.ndim > 0) { /* a box splits at most into its outer extent */
            int d = 0;
            while (d < wp.ndim - 1 && wp.count[d] <= 1)
                d++;
            if ((int64_t)k > wp.count[d])
                k = wp.count[d] > 0 ? (size_t)wp.count[d] : 1;
        } else if (wp.ndim == 0) {
            k = 1;
        }
        for (size_t part = 0; part < k; part++) {
            whale_ckpt_piece sub;
            if (k == 1)
                sub = wp;
            else
                whale_ckpt_piece_part(&wp, (int)part, (int)k, &sub);
            if (n == cap) {
                cap *= 2;
                chunk *nc = realloc(c, cap * sizeof *c);
                if (!nc) {
                    free(c);
                    return WHALE_ENOMEM;
                }
                c = nc;
            }
            chunk *x = &c[n++];
            x->p = p;
            ckpt_region_from_piece(&x->reg, &sub);
            x->raw = sub.data;
            x->n = ckpt_region_numel(&x->reg);
            x->enc = pick_enc(&ck->cfg, p);
            x->block = ck->cfg.quant_block;
            /* int8 weights: one scale per output channel, a row of the box
             * (the row-major inner extent); flat shards have no rows */
            if (x->enc == CKPT_ENC_Q8 && p->kind == WHALE_CKPT_PARAM && !x->reg.flat &&
                x->reg.ndim >= 2) {
                int64_t row = 1;
                for (int d = 1; d < x->reg.ndim; d++)
                    row *= x->reg.cnt[d];
                if (row >= 1 && row <= (1 << 30))
                    x->block = (int)row;
            }
        }
    }
    *out = c;
    *nout = n;
    return 0;
}

/* Length of a name's layer prefix: up to and including its first numeric
 * component ("h.3." of "opt.m.h.3.attn.qkv.weight"), 0 when it has none. */
static size_t group_len(const char *name)
{
    const char *s = name;
    while (*s) {
        const char *e = strchr(s, '.');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        bool num = l > 0;
        for (size_t i = 0; i < l; i++)
            num = num && s[i] >= '0' && s[i] <= '9';
        if (num)
            return (size_t)(s - name) + l + (e ? 1 : 0);
        if (!e)
            break;
        s = e + 1;
    }
    return 0;
}

static bool same_group(const char *a, const char *b)
{
    size_t la = group_len(a), lb = group_len(b);
    return la == lb && !strncmp(a, b, la);
}

/* Bundles pack consecutive chunks up to chunk_bytes and never mix layers,
 * so a frozen layer's bundles stay identical from step to step. */
static int plan_bundles(whale_ckpt *ck, chunk *c, size_t nc, bundle **out, size_t *nout)
{
    bundle *b = calloc(nc ? nc : 1, sizeof *b);
    /* the names in the current bundle: a scan per chunk made a bundle of
     * many small tensors O(n^2) (100k tensors: most of a 47 s import) */
    struct whale_nameidx names = {0};
    if (!b)
        return WHALE_ENOMEM;
    size_t nb = 0;
    for (size_t i = 0; i < nc; i++) {
        size_t bytes = (size_t)c[i].n * ckpt_dtype_size(c[i].p->dtype);
        bool fits = nb > 0 && b[nb - 1].raw_bytes + bytes <= ck->cfg.chunk_bytes &&
                    same_group(c[i - 1].p->name, c[i].p->name);
        /* one entry per tensor name in a safetensors file */
        if (fits && whale_nameidx_find(&names, c[i].p->name) >= 0)
            fits = false;
        if (!fits) {
            b[nb].first = i;
            nb++;
            whale_nameidx_free(&names); /* a new bundle: no names yet */
        }
        if (whale_nameidx_find(&names, c[i].p->name) < 0 &&
            whale_nameidx_add(&names, c[i].p->name, (int)i)) {
            whale_nameidx_free(&names);
            free(b);
            return WHALE_ENOMEM;
        }
        b[nb - 1].count++;
        b[nb - 1].raw_bytes += bytes;
    }
    whale_nameidx_free(&names);
    *out = b;
    *nout = nb;
    return 0;
}

static json_t *region_json(const ckpt_region *r)
{
    json_t *o = json_array(), *n = json_array();
    for (int d = 0; d < r->ndim; d++) {
        json_array_append_new(o, json_integer(r->off[d]));
        json_array_append_new(n, json_integer(r->cnt[d]));
    }
    json_t *j = json_pack("{s:o, s:o}", "offsets", o, "count", n);
    if (r->flat)
        json_object_set_new(j, "flat", json_pack("[I,I]", (json_int_t)r->fb, (json_int_t)r->fe));
    return j;
}

static json_t *shape_json(int ndim, const int64_t *s)
{
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++)
        json_array_append_new(a, json_integer(s[d]));
    return a;
}

static void bundle_key(whale_ckpt *ck, chunk *c, bundle *b)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (size_t i = b->first; i < b->first + b->count; i++) {
        const chunk *x = &c[i];
        XXH3_128bits_update(st, x->p->name, strlen(x->p->name) + 1);
        int32_t hdr[4] = {(int32_t)x->p->dtype, (int32_t)x->enc, x->block, ck->cfg.zstd_level};
        XXH3_128bits_update(st, hdr, sizeof hdr);
        /* a delta's bytes mean something only with its base (full saves
         * keep the keys earlier versions gave them: they still link) */
        if (ck->delta_now)
            XXH3_128bits_update(st, &ck->base_step, sizeof ck->base_step);
        XXH3_128bits_update(st, &x->reg, sizeof x->reg);
        XXH3_128bits_update(st, &x->h, sizeof x->h);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, h);
    ckpt_hex128(&can, b->key);
}

static const struct prev_bundle *prev_find(whale_ckpt *ck, const char *key)
{
    int i = whale_nameidx_find(&ck->prev_idx, key);
    return i >= 0 ? &ck->prev[i] : NULL;
}

/* Index the keys of ck->prev (a scan per bundle was O(n^2) with many
 * bundles); the first of equal keys wins. Out of memory: no index, so
 * nothing is linked this time, which is only slower. */
static void prev_set(whale_ckpt *ck, struct prev_bundle *pb, size_t n)
{
    ckpt_prev_clear(ck);
    ck->prev = pb;
    ck->nprev = n;
    if (whale_nameidx_reserve(&ck->prev_idx, n))
        return;
    for (size_t i = 0; i < n; i++)
        if (whale_nameidx_find(&ck->prev_idx, pb[i].key) < 0)
            whale_nameidx_insert(&ck->prev_idx, pb[i].key, (int)i);
}

/* ---- one bundle: encode, describe, stage, hand to the writer ------------------ */

/* A chunk as stored in its file: the raw bytes, or an encoded (bf16, int8),
 * byte-shuffled and/or zstd-compressed copy owned here. */
struct stored {
    const void *data;
    size_t len;      /* stored bytes */
    size_t enc_len;  /* bytes after encoding, before zstd */
    int shuffle;     /* byte-shuffle width applied before zstd (0: none) */
    XXH128_hash_t content; /* of the encoded bytes, before shuffle and zstd */
    void *own;
    bool raw;        /* data is the chunk's source, alive until the save ends */
    bool z;          /* zstd-compressed (opaque bytes in the file) */
    bool delta;      /* the difference against the base's chunk (delta.c) */
};

/* Whether chunk x of this save is stored as a delta: a chunk of a delta
 * save whose encoding the difference handles (exact of width 1/2/4/8,
 * bf16, fp16, int8). */
static bool delta_chunk(const whale_ckpt *ck, const chunk *x)
{
    return ck->delta_now && ckpt_delta_enc_ok(x->enc, x->p->dtype);
}

static int encode_chunk(whale_ckpt *ck, const chunk *x, struct stored *s)
{
    const struct job_piece *p = x->p;
    memset(s, 0, sizeof *s);
    s->enc_len = ckpt_enc_size(x->enc, p->dtype, x->n, x->block);
    s->data = x->raw;
    s->len = s->enc_len;
    if (x->enc != CKPT_ENC_RAW) {
        if (!(s->own = malloc(s->enc_len ? s->enc_len : 1)))
            return WHALE_ENOMEM;
        ckpt_encode(x->enc, p->dtype, x->raw, x->n, x->block, s->own);
        s->data = s->own;
    }
    /* raw: the data itself, already hashed for deduplication */
    s->content = x->enc == CKPT_ENC_RAW ? x->h : XXH3_128bits(s->data, s->enc_len);
    s->raw = s->data == x->raw;
    int level = ck->cfg.zstd_level;
    if (delta_chunk(ck, x)) {
        /* the snapshot of the base has this save's layout: the same offset;
         * encoded again, it gives the codes the base stored (encoding is a
         * pure function of the values) */
        const unsigned char *b = ck->base + (x->raw - ck->buf);
        void *benc = NULL, *d = malloc(s->enc_len ? s->enc_len : 1);
        if (d && x->enc != CKPT_ENC_RAW) {
            if ((benc = malloc(s->enc_len ? s->enc_len : 1)))
                ckpt_encode(x->enc, p->dtype, b, x->n, x->block, benc);
        }
        if (!d || (x->enc != CKPT_ENC_RAW && !benc)) {
            free(d);
            return WHALE_ENOMEM;
        }
        ckpt_delta_encode_enc(x->enc, p->dtype, x->n, x->block, benc ? benc : b, s->data, d);
        free(benc);
        free(s->own);
        s->own = d;
        s->data = d;
        s->delta = true;
        level = level > 0 ? level : 1; /* the point of a delta is its zeros */
    }
    if (level <= 0)
        return 0;
    s->raw = false;
    s->z = true;
    s->shuffle = ckpt_shuffle_width(x->enc, p->dtype);
    if (s->shuffle > 1) { /* bytes of equal significance together: exponents compress */
        void *sh = malloc(s->enc_len ? s->enc_len : 1);
        if (!sh)
            return WHALE_ENOMEM;
        ckpt_shuffle(s->data, sh, (size_t)x->n, s->shuffle);
        free(s->own);
        s->own = sh;
        s->data = sh;
    }
    size_t bound = ZSTD_compressBound(s->enc_len);
    void *z = malloc(bound ? bound : 1);
    if (!z)
        return WHALE_ENOMEM;
    size_t zr = ZSTD_compressCCtx(ck->zc, z, bound, s->data, s->enc_len, level);
    if (ZSTD_isError(zr)) {
        free(z);
        whale_error("checkpoint: zstd: %s", ZSTD_getErrorName(zr));
        return WHALE_EIO;
    }
    free(s->own);
    s->own = z;
    s->data = z;
    s->len = zr;
    return 0;
}

/* The safetensors entries of one stored chunk at data offset `off` (a
 * compressed chunk is opaque bytes; int8 chunks carry their scales as a
 * second tensor NAME#scales, whose name is malloc'd). Returns how many. */
static size_t chunk_entries(const whale_ckpt *ck, const chunk *x, const struct stored *s,
                            uint64_t off, ckpt_st_entry *ent)
{
    const struct job_piece *p = x->p;
    int64_t lshape[WHALE_CKPT_MAX_DIMS];
    int lnd;
    if (x->reg.flat) {
        lnd = 1;
        lshape[0] = x->n;
    } else {
        lnd = x->reg.ndim;
        memcpy(lshape, x->reg.cnt, sizeof lshape);
    }
    if (s->z) {
        ent[0] = (ckpt_st_entry){.name = (char *)p->name, .dtype = WHALE_UINT8, .ndim = 1,
                                 .shape = {(int64_t)s->len}, .begin = off, .end = off + s->len};
        return 1;
    }
    if (x->enc == CKPT_ENC_Q8 || x->enc == CKPT_ENC_Q8SQRT) {
        int block = x->block;
        int64_t nbk = (x->n + block - 1) / block;
        char sname[1024];
        snprintf(sname, sizeof sname, "%s#scales", p->name);
        ent[0] = (ckpt_st_entry){.name = strdup(sname), .dtype = WHALE_FLOAT32, .ndim = 1,
                                 .shape = {nbk}, .begin = off, .end = off + (uint64_t)nbk * 4};
        ent[1] = (ckpt_st_entry){.name = (char *)p->name,
                                 .dtype = x->enc == CKPT_ENC_Q8 ? CKPT_INT8 : WHALE_UINT8,
                                 .ndim = lnd, .begin = off + (uint64_t)nbk * 4,
                                 .end = off + s->len};
        memcpy(ent[1].shape, lshape, sizeof lshape);
        return 2;
    }
    enum whale_dtype sd = x->enc == CKPT_ENC_BF16   ? WHALE_BFLOAT16
                          : x->enc == CKPT_ENC_FP16 ? WHALE_FLOAT16
                                                    : p->dtype;
    ent[0] = (ckpt_st_entry){.name = (char *)p->name, .dtype = sd, .ndim = lnd, .begin = off,
                             .end = off + s->len};
    memcpy(ent[0].shape, lshape, sizeof lshape);
    return 1;
}

/* The manifest record of one chunk (file and begin are added once the
 * header size is known). */
static json_t *chunk_record(const whale_ckpt *ck, const chunk *x, const struct stored *s)
{
    const struct job_piece *p = x->p;
    /* checksum of the stored bytes: for raw chunks the dedup hash already is one */
    XXH128_hash_t sh = s->data == x->raw ? x->h : XXH3_128bits(s->data, s->len);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, sh);
    char hx[33];
    ckpt_hex128(&can, hx);
    bool z = s->z;
    char cx[33];
    ckpt_content_hash(s->content, p->dtype, x->enc, x->block, &x->reg, cx);
    json_t *rec = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:i, s:I, s:i, s:I, s:s, s:s}",
                     "tensor", p->name, "dtype", ckpt_dtype_st(p->dtype),
                     "kind", p->kind == WHALE_CKPT_PARAM     ? "param"
                             : p->kind == WHALE_CKPT_MOMENT1 ? "moment1"
                             : p->kind == WHALE_CKPT_MOMENT2 ? "moment2"
                                                             : "other",
                     "shape", shape_json(p->reg.ndim, p->reg.shape), "region",
                     region_json(&x->reg), "enc", ckpt_enc_name(x->enc), "block", x->block, "zstd", (json_int_t)(z ? s->enc_len : 0), "shuffle",
                     z ? s->shuffle : 0, "nbytes", (json_int_t)s->len, "xxh3_128", hx,
                     "content_xxh3_128", cx);
    if (rec && s->delta) { /* the full checkpoint this chunk is a difference against */
        char bn[64];
        snprintf(bn, sizeof bn, "step-%08lld", (long long)ck->base_step);
        json_object_set_new(rec, "delta_base", json_string(bn));
    }
    return rec;
}

/* Chunks whose stored bytes can go to the file straight from their
 * source: raw, a whole number of blocks, big enough to be worth an extent.
 * They come first in the file (each then starts on a block, right after the
 * block-padded header); the others follow, staged. Readers find chunks by
 * their recorded offsets, so the order inside a file is free; it depends
 * only on sizes, so a bundle's bytes stay the same from save to save. */
static bool in_place_size(const struct stored *s)
{
    return s->len >= CKPT_ZC_MIN && s->len % CKPT_DIRECT_ALIGN == 0;
}

static void file_order(const struct stored *s, size_t n, size_t *ord)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (in_place_size(&s[i]))
            ord[k++] = i;
    for (size_t i = 0; i < n; i++)
        if (!in_place_size(&s[i]))
            ord[k++] = i;
}

/* Appends bytes to the open staged extent (starting one, block-aligned in
 * the stage, when the last extent is not staged). */
static void stage_bytes(struct ckpt_image *im, size_t *spos, uint64_t off, const void *src,
                        size_t len)
{
    struct ckpt_extent *x = im->next ? &im->ext[im->next - 1] : NULL;
    if (!x || x->src < im->buf || x->src >= im->buf + im->cap) {
        *spos = (*spos + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
        x = &im->ext[im->next++];
        *x = (struct ckpt_extent){ .off = off, .len = 0, .src = im->buf + *spos };
    }
    if (len) /* an empty tensor may have no data pointer */
        memcpy(im->buf + *spos, src, len);
    *spos += len;
    x->len += len;
}

/* The file as extents: the header and small or unaligned chunks staged,
 * block-aligned raw chunks (O_DIRECT) written from where they are -- the
 * snapshot buffer places pieces on page boundaries for this. */
static uint64_t lay_out(struct ckpt_image *im, const char *hdr, size_t hlen,
                        const struct stored *s, const size_t *ord, size_t n, bool direct)
{
    uint64_t in_place = 0;
    size_t spos = 0;
    uint64_t off = 0;
    stage_bytes(im, &spos, off, hdr, hlen);
    off += hlen;
    for (size_t k = 0; k < n; k++) {
        const struct stored *x = &s[ord[k]];
        size_t whole = 0;
        /* only a source that lives until the save ends (encoded copies are
         * freed once staged, while the writer may still be writing) */
        if (direct && x->raw && in_place_size(x) && off % CKPT_DIRECT_ALIGN == 0 &&
            (uintptr_t)x->data % CKPT_DIRECT_ALIGN == 0)
            whole = x->len;
        if (whole) {
            im->ext[im->next++] = (struct ckpt_extent){ .off = off, .len = whole, .src = x->data };
            in_place += whole;
        } else {
            stage_bytes(im, &spos, off, x->data, x->len);
        }
        off += x->len;
    }
    im->total = (size_t)off;
    /* O_DIRECT writes the last block whole: stage its zero padding */
    if (direct && off % CKPT_DIRECT_ALIGN) {
        size_t pad = CKPT_DIRECT_ALIGN - (size_t)(off % CKPT_DIRECT_ALIGN);
        memset(im->buf + spos, 0, pad);
    }
    return in_place;
}

/* Encodes bundle b, lays out its safetensors file and hands it to the
 * writer; appends its chunk records to chunks_out and its file size to
 * *stored_out. The write itself may still be running on return: its error
 * comes back from a later submit or from ckpt_writer_finish. */
static int write_bundle(whale_ckpt *ck, struct ckpt_writer *w, chunk *c, bundle *b,
                        const char *fname, json_t *chunks_out, uint64_t *stored_out,
                        uint64_t *in_place)
{
    size_t n = b->count, ne = 0;
    ckpt_st_entry *ent = calloc(2 * n, sizeof *ent);
    struct stored *s = calloc(n, sizeof *s);
    size_t *ord = calloc(n, sizeof *ord);
    uint64_t *pos = calloc(n, sizeof *pos); /* data offset of each chunk */
    json_t *meta = json_object(), *recs = json_array();
    char *hdr = NULL;
    size_t hlen = 0;
    uint64_t off = 0;
    int rc = ent && s && ord && pos && meta && recs ? 0 : WHALE_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++)
        rc = encode_chunk(ck, &c[b->first + i], &s[i]);
    if (!rc) {
        json_object_set_new(meta, "format", json_string("whale-ckpt-1"));
        file_order(s, n, ord);
    }
    for (size_t k = 0; k < n && !rc; k++) {
        size_t i = ord[k];
        ne += chunk_entries(ck, &c[b->first + i], &s[i], off, ent + ne);
        pos[i] = off;
        off += s[i].len;
    }
    for (size_t i = 0; i < n && !rc; i++) { /* records in chunk order */
        json_t *rec = chunk_record(ck, &c[b->first + i], &s[i]);
        char *ms = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
        json_object_set_new(meta, c[b->first + i].p->name, json_string(ms ? ms : ""));
        free(ms);
        if (!rec)
            rc = WHALE_ENOMEM;
        else
            json_array_append_new(recs, rec);
    }
    /* big bundles go around the page cache (O_DIRECT), small ones through it */
    bool direct = !rc && off >= CKPT_DIRECT_MIN && ckpt_writer_direct_ok(w);
    if (!rc)
        rc = ckpt_st_header_aligned(ent, ne, meta, direct ? CKPT_DIRECT_ALIGN : 8, &hdr, &hlen);
    /* stage bound: everything, plus a block of alignment per extent */
    struct ckpt_image *im =
        rc ? NULL : ckpt_writer_image(w, hlen + (size_t)off + CKPT_DIRECT_ALIGN * (2 * n + 2),
                                      2 * n + 2);
    if (!rc && !im)
        rc = WHALE_ENOMEM;
    if (!rc) {
        /* file offsets of each chunk now that the header size is known */
        for (size_t i = 0; i < n; i++) {
            json_t *rec = json_array_get(recs, i);
            json_object_set_new(rec, "file", json_string(fname));
            json_object_set_new(rec, "begin", json_integer((json_int_t)(hlen + pos[i])));
        }
        *in_place += lay_out(im, hdr, hlen, s, ord, n, direct);
        im->direct = direct;
        snprintf(im->fname, sizeof im->fname, "%s", fname);
        /* encoded copies are staged (freed below); raw chunks may be written in place */
        rc = ckpt_writer_submit(w, im);
    }
    if (!rc) {
        *stored_out = im->total;
        for (size_t i = 0; i < n; i++)
            json_array_append(chunks_out, json_array_get(recs, i));
    }
    free(hdr);
    for (size_t i = 0; ent && i < ne; i++)
        if (strstr(ent[i].name, "#scales"))
            free(ent[i].name);
    free(ent);
    for (size_t i = 0; s && i < n; i++)
        free(s[i].own);
    free(s);
    free(ord);
    free(pos);
    json_decref(meta);
    json_decref(recs);
    return rc;
}

static char *hexdump(const void *p, size_t n)
{
    char *s = malloc(2 * n + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++)
        snprintf(s + 2 * i, 3, "%02x", ((const unsigned char *)p)[i]);
    s[2 * n] = 0;
    return s;
}

/* JSON text to a json value (a string when it does not parse). */
static json_t *json_text(const char *s)
{
    if (!s)
        return json_null();
    json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
    return v ? v : json_string(s);
}

/* Hard-links bundle b from the previous save when its key matches (its
 * files may still sit in that save's temporary directory); appends the
 * reused chunk records. Returns whether it did. */
static bool link_bundle(whale_ckpt *ck, struct persist *ps, const bundle *b, const char *fname,
                        json_t *chunks, uint64_t *fbytes)
{
    const struct prev_bundle *pb = ck->cfg.incremental ? prev_find(ck, b->key) : NULL;
    if (!pb)
        return false;
    char dst[4096];
    snprintf(dst, sizeof dst, "%s/%s", ps->tmpdir, fname);
    bool linked = false;
    for (int attempt = 0; attempt < 2 && !linked; attempt++) {
        const char *src = attempt == 0 ? pb->path : pb->tmp_path;
        if (!src)
            continue;
        char sp[4096];
        snprintf(sp, sizeof sp, "%s/%s", ck->root, src);
        linked = link(sp, dst) == 0;
    }
    if (!linked)
        return false;
    *fbytes = pb->bytes;
    size_t k;
    json_t *r;
    json_array_foreach(pb->chunks, k, r) {
        json_t *copy = json_deep_copy(r);
        json_object_set_new(copy, "file", json_string(fname));
        json_array_append_new(chunks, copy);
    }
    return true;
}

/* The incremental map entry of a bundle of this save, for the next one. */
static void remember_bundle(struct persist *ps, const bundle *b, const char *fname,
                            uint64_t fbytes, json_t *chunks, size_t from,
                            struct prev_bundle *np)
{
    /* this bundle's records are the ones appended since `from` (a scan of
     * all records per bundle was O(n^2) with many bundles) */
    json_t *mine = json_array();
    for (size_t k = from; k < json_array_size(chunks); k++)
        json_array_append(mine, json_array_get(chunks, k));
    memcpy(np->key, b->key, sizeof np->key);
    char fp[4096];
    snprintf(fp, sizeof fp, "%s/%s", ps->final_name, fname);
    np->path = strdup(fp);
    snprintf(fp, sizeof fp, "%s/%s", ps->tmp_name, fname);
    np->tmp_path = strdup(fp);
    np->bytes = fbytes;
    np->chunks = mine;
}

static void free_prev(struct prev_bundle *np, size_t n)
{
    for (size_t i = 0; np && i < n; i++) {
        free(np[i].path);
        free(np[i].tmp_path);
        json_decref(np[i].chunks);
    }
    free(np);
}

/* The rank index (rank-N.json): publishing it tells rank 0 this rank is done. */
static int publish_index(whale_ckpt *ck, struct job *j, struct persist *ps,
                         const whale_ckpt_stats *st, json_t *chunks, json_t *files)
{
    char *rng = j->rng_len ? hexdump(j->rng, j->rng_len) : NULL;
    json_t *idx = json_pack(
        "{s:s, s:i, s:i, s:i, s:I, s:I, s:f, s:s, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
        "format", CKPT_FORMAT, "version", CKPT_VERSION, "rank", ck->cfg.rank, "world",
        ck->cfg.world, "step", (json_int_t)j->step, "samples", (json_int_t)j->samples,
        "loss_scale", j->loss_scale, "run", ck->run_id, "seq", (int)j->seq, "rng",
        rng ? json_string(rng) : json_null(), "plan", json_text(j->plan), "data",
        json_text(j->data), "extra", json_text(j->extra), "chunks", json_incref(chunks), "files",
        json_incref(files),
        "encoding", json_pack("{s:s, s:s, s:i, s:i, s:I}", "weights",
                              ck->cfg.weights == WHALE_CKPT_WEIGHTS_BF16   ? "bf16"
                              : ck->cfg.weights == WHALE_CKPT_WEIGHTS_FP16 ? "fp16"
                              : ck->cfg.weights == WHALE_CKPT_WEIGHTS_INT8 ? "int8"
                                                                           : "exact",
                              "moments", ck->cfg.quantize_moments ? "int8" : "exact",
                              "quant_block", ck->cfg.quant_block, "zstd", ck->cfg.zstd_level,
                              "chunk_bytes", (json_int_t)ck->cfg.chunk_bytes));
    free(rng);
    if (!idx)
        return WHALE_ENOMEM;
    json_object_set_new(idx, "bytes",
                        json_pack("{s:I, s:I, s:I, s:I}", "logical", (json_int_t)st->bytes_logical,
                                  "stored", (json_int_t)st->bytes_stored, "written",
                                  (json_int_t)st->bytes_written, "linked",
                                  (json_int_t)st->bytes_linked));
    char *txt = json_dumps(idx, JSON_COMPACT);
    json_decref(idx);
    if (!txt)
        return WHALE_ENOMEM;
    char iname[64];
    snprintf(iname, sizeof iname, "rank-%05d.json", ck->cfg.rank);
    /* rank 0 fsyncs the directory once all ranks' indexes are there */
    int rc = ckpt_write_file_renamed(ps->tmpdir, iname, txt, strlen(txt), ps->fmode, &ck->fault);
    free(txt);
    if (rc)
        whale_error("checkpoint step %lld: rank %d: cannot publish %s/%s", (long long)j->step,
                    ck->cfg.rank, ps->tmpdir, iname);
    return rc;
}

/* The layout of a job's snapshot: names, dtypes, regions and places in the
 * buffer. A delta needs its base's to be the same. 0 when the pieces are
 * not all in the snapshot buffer (a synchronous save reads the caller's
 * tensors: no base to keep). */
static uint64_t layout_sig(const whale_ckpt *ck, const struct job *j)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    for (size_t i = 0; i < j->n; i++) {
        const struct job_piece *p = &j->p[i];
        if (!ck->buf || (p->bytes && (p->src < ck->buf || p->src + p->bytes > ck->buf + ck->cap))) {
            XXH3_freeState(st);
            return 0;
        }
        uint64_t off = (uint64_t)(p->src - ck->buf), hdr[3] = {off, p->bytes, (uint64_t)p->dtype};
        XXH3_64bits_update(st, p->name, strlen(p->name) + 1);
        XXH3_64bits_update(st, hdr, sizeof hdr);
        XXH3_64bits_update(st, &p->reg, sizeof p->reg);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h ? h : 1;
}

/* Whether this save is a delta, before it starts. */
static void delta_decide(whale_ckpt *ck, uint64_t sig)
{
    ck->delta_now = ck->cfg.delta_every > 0 && sig && ck->base_valid && sig == ck->base_sig &&
                    ck->since_full < ck->cfg.delta_every;
}

/* After the save: a delta counts against K; a full one becomes the base
 * (its snapshot buffer is kept, the next snapshot goes to the other). */
static void delta_after(whale_ckpt *ck, const struct job *j, uint64_t sig, int rc)
{
    if (rc) { /* the base may not be on disk: start again with a full save */
        ck->base_valid = false;
    } else if (ck->delta_now) {
        ck->since_full++;
    } else if (ck->cfg.delta_every > 0 && sig) {
        unsigned char *b = ck->base;
        size_t bc = ck->base_cap;
        bool bp = ck->base_pinned;
        ck->base = ck->buf;
        ck->base_cap = ck->cap;
        ck->base_pinned = ck->buf_pinned;
        ck->buf = b;
        ck->cap = bc;
        ck->buf_pinned = bp;
        ck->base_valid = true;
        ck->base_step = j->step;
        ck->base_sig = sig;
        ck->since_full = 0;
    }
    ck->delta_now = false;
}

/* Persist this rank's part of a job into ps->tmpdir; on success fills the
 * index (rank-N.json) and the new incremental map. Bundle i+1 is hashed,
 * encoded and staged while the writer thread writes bundle i. */
int ckpt_persist_rank(whale_ckpt *ck, struct job *j, struct persist *ps, whale_ckpt_stats *st)
{
    chunk *c = NULL;
    bundle *b = NULL;
    size_t nc = 0, nb = 0;
    json_t *chunks = json_array(), *files = json_array();
    struct prev_bundle *np = NULL;
    size_t nnp = 0;
    struct ckpt_writer w;
    uint64_t sig = ck->cfg.delta_every > 0 ? layout_sig(ck, j) : 0;
    delta_decide(ck, sig);
    int rc = plan_chunks(ck, j, &c, &nc);
    if (!rc)
        rc = plan_bundles(ck, c, nc, &b, &nb);
    if (!rc) {
        np = calloc(nb ? nb : 1, sizeof *np);
        rc = np ? 0 : WHALE_ENOMEM;
    }
    /* one bundle: nothing to overlap, written by this thread */
    ckpt_writer_init(&w, ck, ps, nb < 2 ? 0 : nb < (size_t)ck->cfg.writers ? (int)nb
                                                                          : ck->cfg.writers);
    char rdir[64];
    snprintf(rdir, sizeof rdir, "rank-%05d", ck->cfg.rank);
    for (size_t i = 0; i < nb && !rc; i++) {
        /* hashed here, not all up front: this overlaps the previous write */
        for (size_t k = b[i].first; k < b[i].first + b[i].count; k++)
            c[k].h = XXH3_128bits(c[k].raw, (size_t)c[k].n * ckpt_dtype_size(c[k].p->dtype));
        bundle_key(ck, c, &b[i]);
        char fname[128];
        snprintf(fname, sizeof fname, "%s/%06zu.safetensors", rdir, i);
        uint64_t fbytes = 0;
        size_t from = json_array_size(chunks);
        bool linked = link_bundle(ck, ps, &b[i], fname, chunks, &fbytes);
        if (linked) {
            st->bytes_linked += fbytes;
            st->files_linked++;
        } else {
            if ((rc = write_bundle(ck, &w, c, &b[i], fname, chunks, &fbytes,
                                   &st->bytes_in_place)))
                break;
            st->bytes_written += fbytes;
            st->files_written++;
        }
        st->bytes_stored += fbytes;
        remember_bundle(ps, &b[i], fname, fbytes, chunks, from, &np[nnp++]);
        json_array_append_new(files, json_pack("{s:s, s:I, s:s, s:b}", "file", fname, "bytes",
                                               (json_int_t)fbytes, "key", b[i].key,
                                               "linked", linked));
    }
    /* every file written and fdatasynced, or the first error */
    int wrc = ckpt_writer_finish(&w);
    rc = rc ? rc : wrc;
    if (!rc) {
        char rp[4096];
        snprintf(rp, sizeof rp, "%s/%s", ps->tmpdir, rdir);
        ckpt_fsync_path(rp);
        rc = publish_index(ck, j, ps, st, chunks, files);
    }
    if (!rc) { /* the new map replaces the previous one */
        prev_set(ck, np, nnp);
        np = NULL;
        nnp = 0;
    }
    free_prev(np, nnp);
    delta_after(ck, j, sig, rc);
    free(c);
    free(b);
    json_decref(chunks);
    json_decref(files);
    return rc;
}

void ckpt_prev_clear(whale_ckpt *ck)
{
    for (size_t i = 0; i < ck->nprev; i++) {
        free(ck->prev[i].path);
        free(ck->prev[i].tmp_path);
        json_decref(ck->prev[i].chunks);
    }
    free(ck->prev);
    ck->prev = NULL;
    ck->nprev = 0;
    whale_nameidx_free(&ck->prev_idx);
}

/* Seed the incremental map from the newest committed checkpoint of this
 * root (files this rank wrote), so the first save after a resume links. */
void ckpt_prev_from_latest(whale_ckpt *ck)
{
    char *dir = NULL;
    if (ckpt_resolve(ck->root, "latest", &dir, true))
        return;
    char *mp = ckpt_path(dir, CKPT_MANIFEST);
    json_t *m = mp ? json_load_file(mp, 0, NULL) : NULL;
    free(mp);
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    json_t *files = json_object_get(m, "files");
    json_t *tensors = json_object_get(m, "tensors");
    const char *fname;
    json_t *f;
    size_t cap = json_object_size(files), n = 0;
    struct prev_bundle *pb = calloc(cap ? cap : 1, sizeof *pb);
    struct whale_nameidx byfile = {0}; /* file name -> index into pb */
    if (pb && whale_nameidx_reserve(&byfile, cap)) {
        free(pb);
        pb = NULL;
    }
    char mine[64];
    snprintf(mine, sizeof mine, "rank-%05d/", ck->cfg.rank);
    json_object_foreach(files, fname, f) {
        if (!pb || strncmp(fname, mine, strlen(mine)))
            continue;
        const char *key = json_string_value(json_object_get(f, "key"));
        if (!key || strlen(key) != 32)
            continue;
        memcpy(pb[n].key, key, 33);
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", base, fname);
        pb[n].path = strdup(p);
        pb[n].bytes = (uint64_t)json_integer_value(json_object_get(f, "bytes"));
        pb[n].chunks = json_array();
        whale_nameidx_insert(&byfile, fname, (int)n); /* keys of an object: unique */
        n++;
    }
    /* one pass over the chunk records (one per file was O(n^2)) */
    const char *tn;
    json_t *t;
    json_object_foreach(tensors, tn, t) {
        size_t k;
        json_t *r;
        json_array_foreach(json_object_get(t, "chunks"), k, r) {
            int fi = pb ? whale_nameidx_find(&byfile,
                                             json_string_value(json_object_get(r, "file")))
                        : -1;
            if (fi < 0)
                continue;
            json_t *copy = json_deep_copy(r);
            json_object_del(copy, "rank");
            json_object_set_new(copy, "tensor", json_string(tn));
            json_object_set(copy, "dtype", json_object_get(t, "dtype"));
            json_object_set(copy, "shape", json_object_get(t, "shape"));
            json_object_set(copy, "kind", json_object_get(t, "kind"));
            json_array_append_new(pb[fi].chunks, copy);
        }
    }
    whale_nameidx_free(&byfile); /* before m: it points at m's keys */
    json_decref(m);
    free(dir);
    prev_set(ck, pb, n);
    if (n)
        whale_debug("checkpoint: %zu bundles of the previous checkpoint can be linked", n);
}
