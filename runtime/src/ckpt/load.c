/* Restore: resolve a checkpoint, read the pieces a rank owns now (any
 * layout) from the chunks that overlap them, verify checksums. */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/checked.h"
#include "whale/nameidx.h"
#include "whale/readfile.h"
#include "whale/envnum.h"
#include "whale/knobs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

typedef struct rchunk {
    const char *file;    /* relative to the checkpoint directory */
    ckpt_region reg;
    enum ckpt_enc enc;
    int block;
    uint64_t begin, nbytes, zraw;
    int shuffle;         /* byte-shuffle width applied before zstd (0/1: none) */
    const char *xxh;     /* xxh3-128 of the stored bytes, hex */
    const char *cxxh;    /* content_xxh3_128 (digest.c), hex; NULL in older manifests */
    const char *delta_base; /* a delta chunk: the full step directory it is against */
} rchunk;

typedef struct rtensor {
    const char *name;
    enum whale_dtype dtype;
    int ndim;
    int64_t shape[WHALE_CKPT_MAX_DIMS];
    rchunk *c;
    size_t nc;
} rtensor;

struct whale_ckpt_reader {
    char *dir;
    json_t *man;
    rtensor *t;
    size_t nt;
    whale_ckpt_info info;
    char *plan, *data, *extra;
    struct whale_nameidx idx; /* tensor name -> index into t */
    bool digest_bad;          /* open_all: the manifest failed its digest (verify counts it) */
    bool is_base;             /* opened as a delta's base: holds no deltas itself */
    bool direct;              /* large chunks read with O_DIRECT (WHALE_CKPT_READ_DIRECT) */
    /* the full checkpoints this one's delta chunks are against, opened on
     * first use (siblings of dir) */
    struct { char name[64]; whale_ckpt_reader *r; } base[4];
    int nbase;
    pthread_mutex_t base_mu;
};

static int reader_open(const char *dir, whale_ckpt_reader **out, bool strict);

/* ---- resolve -------------------------------------------------------------- */

/* A manifest lists every chunk: large for big models, but bounded (and
 * read without blocking: a FIFO in its place must not hang a tool). */
#define CKPT_MANIFEST_MAX ((size_t)1 << 30)

static json_t *load_manifest(const char *path, json_error_t *je, bool quiet)
{
    char *text = NULL;
    size_t len = 0;
    int rc = whale_read_file(path, CKPT_MANIFEST_MAX, quiet ? WHALE_READ_QUIET : 0, &text, &len);
    if (rc) {
        if (je)
            snprintf(je->text, sizeof je->text, "cannot read (%s)", whale_strerror(rc));
        return NULL;
    }
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, je);
    free(text);
    return m;
}

static bool has_manifest(const char *dir)
{
    char *p = ckpt_path(dir, CKPT_MANIFEST);
    json_t *m = p ? load_manifest(p, NULL, true) : NULL;
    free(p);
    bool ok = m && json_is_object(m);
    json_decref(m);
    return ok;
}

static int newest_step(const char *root, int64_t want, char **out)
{
    DIR *d = opendir(root);
    if (!d)
        return WHALE_ENOENT;
    struct dirent *e;
    int64_t best = -1;
    char *bestp = NULL;
    while ((e = readdir(d))) {
        int64_t s = ckpt_step_of(e->d_name);
        if (s < 0 || (want >= 0 && s != want) || s <= best)
            continue;
        char *p = ckpt_path(root, e->d_name);
        if (p && has_manifest(p)) {
            free(bestp);
            bestp = p;
            best = s;
        } else {
            free(p);
        }
    }
    closedir(d);
    if (!bestp)
        return WHALE_ENOENT;
    *out = bestp;
    return 0;
}

#define LOGQ(...) do { if (!quiet) whale_error(__VA_ARGS__); } while (0)

int ckpt_resolve(const char *root, const char *which, char **out, bool quiet)
{
    *out = NULL;
    if (!root || !*root) {
        LOGQ("checkpoint: no checkpoint directory given");
        return WHALE_EINVAL;
    }
    bool latest = !which || !*which || !strcmp(which, "latest");
    if (latest) {
        if (has_manifest(root)) { /* root is itself a checkpoint */
            *out = strdup(root);
            return *out ? 0 : WHALE_ENOMEM;
        }
        char *lp = ckpt_path(root, "latest");
        char target[PATH_MAX];
        ssize_t n = lp ? readlink(lp, target, sizeof target - 1) : -1;
        char *dir = NULL;
        if (n > 0) {
            target[n] = 0;
            dir = target[0] == '/' ? strdup(target) : ckpt_path(root, target);
        } else if (lp) { /* a plain file holding the name also works */
            char *b = NULL;
            size_t len = 0;
            if (!ckpt_read_file(lp, &b, &len) && len) {
                b[strcspn(b, "\r\n")] = 0;
                dir = ckpt_path(root, b);
            }
            free(b);
        }
        free(lp);
        if (dir && has_manifest(dir)) {
            *out = dir;
            return 0;
        }
        int rc = newest_step(root, -1, out);
        if (rc) {
            LOGQ("checkpoint: no checkpoint under %s (no readable latest or step-*/%s)",
                        root, CKPT_MANIFEST);
        } else if (dir) {
            if (!quiet)
                whale_warn("checkpoint: %s/latest -> %s is not a readable checkpoint; using %s",
                           root, dir, *out);
        }
        free(dir);
        return rc;
    }
    char *end;
    const char *num = !strncmp(which, "step-", 5) ? which + 5 : which;
    long long s = strtoll(num, &end, 10);
    if (*num && !*end && s >= 0) {
        int rc = newest_step(root, s, out);
        if (rc)
            LOGQ("checkpoint: no readable checkpoint for step %lld under %s", s, root);
        return rc;
    }
    /* a path: relative to the root, else as given */
    char *p = ckpt_path(root, which);
    if (p && has_manifest(p)) {
        *out = p;
        return 0;
    }
    free(p);
    if (has_manifest(which)) {
        *out = strdup(which);
        return *out ? 0 : WHALE_ENOMEM;
    }
    LOGQ("checkpoint: %s is not a checkpoint (no readable %s)", which, CKPT_MANIFEST);
    return WHALE_ENOENT;
}

int whale_ckpt_resolve(const char *root, const char *which, char **out)
{
    return ckpt_resolve(root, which, out, false);
}

int whale_ckpt_resolve_quiet(const char *root, const char *which, char **out)
{
    return ckpt_resolve(root, which, out, true);
}

int whale_ckpt_resolve_strict(const char *root, const char *which, char **out)
{
    int rc = ckpt_resolve(root, which, out, false);
    bool latest = !which || !*which || !strcmp(which, "latest");
    if (rc || !latest || !strcmp(*out, root))
        return rc;
    const char *base = strrchr(*out, '/');
    int64_t chosen = ckpt_step_of(base ? base + 1 : *out);
    DIR *d = opendir(root);
    if (!d)
        return rc;
    struct dirent *e;
    while ((e = readdir(d)) && !rc) {
        int64_t st = ckpt_step_of(e->d_name);
        if (st <= chosen)
            continue;
        char *dir = ckpt_path(root, e->d_name);
        char *mp = dir ? ckpt_path(dir, CKPT_MANIFEST) : NULL;
        /* no manifest at all: a save that never committed (normal after a
         * crash); a manifest that does not load: damage */
        if (mp && access(mp, F_OK) == 0 && !has_manifest(dir)) {
            json_error_t je;
            json_t *m = load_manifest(mp, &je, true);
            whale_error("checkpoint: %s: the newest step's manifest is damaged (%s); %s is "
                        "older", mp, m ? "not an object" : je.text, *out);
            json_decref(m);
            rc = WHALE_ECORRUPT;
        }
        free(mp);
        free(dir);
    }
    closedir(d);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- open ----------------------------------------------------------------- */

static int parse_region(json_t *j, int ndim, const int64_t *shape, ckpt_region *r)
{
    memset(r, 0, sizeof *r);
    r->ndim = ndim;
    memcpy(r->shape, shape, sizeof r->shape);
    json_t *o = json_object_get(j, "offsets"), *c = json_object_get(j, "count");
    if (json_array_size(o) != (size_t)ndim || json_array_size(c) != (size_t)ndim)
        return WHALE_EDATA;
    for (int d = 0; d < ndim; d++) {
        r->off[d] = json_integer_value(json_array_get(o, (size_t)d));
        r->cnt[d] = json_integer_value(json_array_get(c, (size_t)d));
    }
    json_t *flat = json_object_get(j, "flat");
    if (flat) {
        r->flat = true;
        r->fb = json_integer_value(json_array_get(flat, 0));
        r->fe = json_integer_value(json_array_get(flat, 1));
    }
    return ckpt_region_check(r, "stored chunk");
}

static char *dump_or_null(json_t *v)
{
    if (!v || json_is_null(v))
        return NULL;
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

void whale_ckpt_reader_close(whale_ckpt_reader *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nbase; i++)
        whale_ckpt_reader_close(r->base[i].r);
    pthread_mutex_destroy(&r->base_mu);
    for (size_t i = 0; i < r->nt; i++)
        free(r->t[i].c);
    free(r->t);
    whale_nameidx_free(&r->idx);
    json_decref(r->man);
    free(r->plan);
    free(r->data);
    free(r->extra);
    free(r->dir);
    free(r);
}

/* Every shard file the manifest lists: inside the checkpoint directory, a
 * parseable safetensors header, the size the manifest recorded. Run when
 * a reader opens, so --resume refuses exactly what `verify` refuses. */
static int check_files(whale_ckpt_reader *r, const char *mp)
{
    int bad = 0;
    json_t *files = json_object_get(r->man, "files");
    if (files && !json_is_object(files)) {
        whale_error("checkpoint: %s: \"files\" is not an object", mp);
        return 1;
    }
    const char *fname;
    json_t *f;
    json_object_foreach(files, fname, f) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, fname);
        int fd;
        if (ckpt_open_confined(r->dir, fname, mp, &fd)) {
            bad++;
            continue;
        }
        ckpt_st_entry *e = NULL;
        size_t ne = 0;
        uint64_t doff, fsz;
        if (ckpt_st_read_header(fd, path, &e, &ne, &doff, &fsz, NULL)) {
            bad++;
            close(fd);
            continue;
        }
        ckpt_st_entries_free(e, ne);
        close(fd);
        json_int_t want = json_integer_value(json_object_get(f, "bytes"));
        if (want < 0 || fsz != (uint64_t)want) {
            whale_error("checkpoint: %s: %llu bytes, the manifest says %lld", path,
                        (unsigned long long)fsz, (long long)want);
            bad++;
        }
    }
    return bad;
}

static int reader_open(const char *dir, whale_ckpt_reader **out, bool strict)
{
    *out = NULL;
    whale_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return WHALE_ENOMEM;
    pthread_mutex_init(&r->base_mu, NULL);
    if (whale_env_bool("WHALE_CKPT_READ_DIRECT", true, &r->direct)) {
        whale_warn("WHALE_CKPT_READ_DIRECT: using 1 (O_DIRECT reads of large chunks)");
        r->direct = true;
    }
    r->dir = strdup(dir);
    char *mp = ckpt_path(dir, CKPT_MANIFEST);
    json_error_t je;
    r->man = mp ? load_manifest(mp, &je, false) : NULL;
    int rc = 0;
    if (!r->man) {
        whale_error("checkpoint: %s: %s", mp ? mp : dir, mp ? je.text : "out of memory");
        rc = access(mp, F_OK) ? WHALE_ENOENT : WHALE_ECORRUPT;
        free(mp);
        whale_ckpt_reader_close(r);
        return rc;
    }
    const char *fmt = json_string_value(json_object_get(r->man, "format"));
    if (!fmt || strcmp(fmt, CKPT_FORMAT) ||
        json_integer_value(json_object_get(r->man, "version")) != CKPT_VERSION) {
        whale_error("checkpoint: %s: not a %s version %d manifest", mp, CKPT_FORMAT,
                    CKPT_VERSION);
        free(mp);
        whale_ckpt_reader_close(r);
        return WHALE_EDATA;
    }
    /* the manifest's own digest: any edited field (an older manifest has
     * none and is accepted with a warning, since users have them) */
    json_t *dg = json_object_get(r->man, CKPT_DIGEST_KEY);
    char want[33];
    if (!dg) {
        whale_warn("checkpoint: %s has no %s (written by an older whale): its fields cannot "
                   "be checked; a new save of this run will have it", mp, CKPT_DIGEST_KEY);
    } else if (ckpt_manifest_digest(r->man, want)) {
        rc = WHALE_ENOMEM;
    } else if (!json_is_string(dg) || strcmp(json_string_value(dg), want)) {
        whale_error("checkpoint: %s: field %s does not match the manifest's content: the "
                    "manifest was edited or damaged after it was written%s", mp,
                    CKPT_DIGEST_KEY, strict ? "; refusing it" : "");
        if (strict)
            rc = WHALE_ECORRUPT;
        r->digest_bad = true;
    }
    if (rc) {
        free(mp);
        whale_ckpt_reader_close(r);
        return rc;
    }
    json_t *tensors = json_object_get(r->man, "tensors");
    if (whale_nameidx_reserve(&r->idx, json_object_size(tensors)))
        rc = WHALE_ENOMEM;
    r->t = calloc(json_object_size(tensors) + 1, sizeof *r->t);
    if (!r->t)
        rc = WHALE_ENOMEM;
    const char *name;
    json_t *t;
    json_object_foreach(tensors, name, t) {
        if (rc)
            break;
        rtensor *x = &r->t[r->nt];
        x->name = name;
        json_t *shape = json_object_get(t, "shape");
        if (ckpt_dtype_from_st(json_string_value(json_object_get(t, "dtype")), &x->dtype) ||
            !json_is_array(shape) || json_array_size(shape) > WHALE_CKPT_MAX_DIMS) {
            whale_error("checkpoint: %s: tensor %s: bad dtype or shape", mp, name);
            rc = WHALE_EDATA;
            break;
        }
        x->ndim = (int)json_array_size(shape);
        for (int d = 0; d < x->ndim; d++)
            x->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
        if (!ckpt_numel_ok(x->ndim, x->shape, NULL)) {
            whale_error("checkpoint: %s: tensor %s: shape has a negative extent or more than "
                        "2^60 elements", mp, name);
            rc = WHALE_EDATA;
            break;
        }
        json_t *cs = json_object_get(t, "chunks");
        x->c = calloc(json_array_size(cs) + 1, sizeof *x->c);
        if (!x->c) {
            rc = WHALE_ENOMEM;
            break;
        }
        whale_nameidx_insert(&r->idx, name, (int)r->nt); /* keys are unique in an object */
        r->nt++;
        size_t k;
        json_t *c;
        json_array_foreach(cs, k, c) {
            rchunk *y = &x->c[x->nc];
            y->file = json_string_value(json_object_get(c, "file"));
            /* every field is untrusted: read as signed, refuse negatives
             * before they turn into huge unsigned sizes */
            json_int_t blk = json_integer_value(json_object_get(c, "block"));
            json_int_t beg = json_integer_value(json_object_get(c, "begin"));
            json_int_t nb = json_integer_value(json_object_get(c, "nbytes"));
            json_int_t zr = json_integer_value(json_object_get(c, "zstd"));
            json_int_t sh = json_integer_value(json_object_get(c, "shuffle"));
            const char *xs = json_string_value(json_object_get(c, "xxh3_128"));
            json_t *cj = json_object_get(c, "content_xxh3_128");
            y->xxh = xs;
            y->cxxh = json_string_value(cj);
            json_t *dbj = json_object_get(c, "delta_base");
            y->delta_base = json_string_value(dbj);
            const char *why = NULL;
            if (!y->file || !xs || strlen(xs) != 32)
                why = "missing file or xxh3_128";
            else if (cj && (!y->cxxh || strlen(y->cxxh) != 32))
                why = "content_xxh3_128 is not 32 hex digits";
            else if (ckpt_name_confined(r->dir, y->file, name))
                why = "file outside the checkpoint";
            else if (dbj && (!y->delta_base || ckpt_step_of(y->delta_base) < 0 ||
                             strchr(y->delta_base, '/') || strlen(y->delta_base) > 60))
                why = "delta_base is not a step directory name";
            else if (dbj && !cj)
                why = "a delta chunk without content_xxh3_128";
            else if (ckpt_enc_from_name(json_string_value(json_object_get(c, "enc")), &y->enc))
                why = "unknown enc";
            else if (parse_region(json_object_get(c, "region"), x->ndim, x->shape, &y->reg))
                why = "bad region";
            else if (blk < 1 || blk > (1 << 30))
                why = "block out of range [1, 2^30]";
            else if (beg < 0 || nb < 0 || zr < 0 || beg > INT64_MAX - nb)
                why = "negative or overflowing begin/nbytes/zstd";
            y->block = (int)blk;
            y->begin = (uint64_t)beg;
            y->nbytes = (uint64_t)nb;
            y->zraw = (uint64_t)zr;
            y->shuffle = (int)sh;
            /* the saver shuffles by the element width of the stored
             * encoding and nothing else: any other width would overrun
             * the decode buffer (n elements * width bytes) */
            int w = ckpt_shuffle_width(y->enc, x->dtype);
            if (!why && !(sh == 0 || sh == 1 || sh == w))
                why = "shuffle width does not match the encoding";
            if (why) {
                whale_error("checkpoint: %s: tensor %s: bad chunk record %zu (file %s): %s", mp,
                            name, k, y->file ? y->file : "?", why);
                rc = WHALE_EDATA;
                break;
            }
            x->nc++;
        }
    }
    if (!rc && strict && check_files(r, mp))
        rc = WHALE_ECORRUPT;
    free(mp);
    if (rc) {
        whale_ckpt_reader_close(r);
        return rc;
    }
    r->plan = dump_or_null(json_object_get(r->man, "plan"));
    r->data = dump_or_null(json_object_get(r->man, "data"));
    r->extra = dump_or_null(json_object_get(r->man, "extra"));
    r->info.step = json_integer_value(json_object_get(r->man, "step"));
    r->info.samples = json_integer_value(json_object_get(r->man, "samples"));
    r->info.loss_scale = json_number_value(json_object_get(r->man, "loss_scale"));
    r->info.world = (int)json_integer_value(json_object_get(r->man, "world"));
    r->info.plan_json = r->plan;
    r->info.data_json = r->data;
    r->info.extra_json = r->extra;
    r->info.dir = r->dir;
    r->info.ntensors = r->nt;
    *out = r;
    return 0;
}

int whale_ckpt_reader_open(const char *dir, whale_ckpt_reader **out)
{
    return reader_open(dir, out, true);
}

int whale_ckpt_reader_open_all(const char *dir, whale_ckpt_reader **out)
{
    return reader_open(dir, out, false);
}

const whale_ckpt_info *whale_ckpt_reader_info(const whale_ckpt_reader *r) { return &r->info; }

int whale_ckpt_reader_tensor(const whale_ckpt_reader *r, size_t i, const char **name,
                             enum whale_dtype *dtype, int *ndim, int64_t *shape)
{
    if (i >= r->nt)
        return WHALE_ERANGE;
    const rtensor *t = &r->t[i];
    if (name)
        *name = t->name;
    if (dtype)
        *dtype = t->dtype;
    if (ndim)
        *ndim = t->ndim;
    if (shape)
        memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return 0;
}

long whale_ckpt_reader_find(const whale_ckpt_reader *r, const char *name)
{
    return whale_nameidx_find(&r->idx, name); /* a scan per piece was O(n^2) */
}

int whale_ckpt_reader_rng(const whale_ckpt_reader *r, int rank, void *buf, size_t cap,
                          size_t *len)
{
    json_t *ranks = json_object_get(r->man, "ranks");
    size_t k;
    json_t *e;
    json_array_foreach(ranks, k, e) {
        if (json_integer_value(json_object_get(e, "rank")) != rank)
            continue;
        const char *h = json_string_value(json_object_get(e, "rng"));
        size_t n = h ? strlen(h) / 2 : 0;
        *len = n;
        if (n > cap)
            return WHALE_ERANGE;
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            if (sscanf(h + 2 * i, "%2x", &v) != 1)
                return WHALE_EDATA;
            ((unsigned char *)buf)[i] = (unsigned char)v;
        }
        return 0;
    }
    *len = 0;
    return WHALE_ENOENT;
}

/* ---- reading chunks -------------------------------------------------------- */

static int load_chunk(whale_ckpt_reader *r, const rtensor *t, const rchunk *c, void **alloc,
                      void **out, bool decode);

static bool same_region(const ckpt_region *a, const ckpt_region *b)
{
    if (a->ndim != b->ndim || a->flat != b->flat || (a->flat && (a->fb != b->fb || a->fe != b->fe)))
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->off[d] != b->off[d] || a->cnt[d] != b->cnt[d])
            return false;
    return true;
}

/* The reader of full checkpoint `name`, a sibling of r's directory that a
 * delta chunk of r is against (opened once, strictly: verified files). */
static int base_reader(whale_ckpt_reader *r, const char *name, whale_ckpt_reader **out)
{
    int rc = 0;
    pthread_mutex_lock(&r->base_mu);
    *out = NULL;
    for (int i = 0; i < r->nbase && !*out; i++)
        if (!strcmp(r->base[i].name, name))
            *out = r->base[i].r;
    if (!*out) {
        const char *sl = strrchr(r->dir, '/');
        char p[4096];
        if (sl)
            snprintf(p, sizeof p, "%.*s/%s", (int)(sl - r->dir), r->dir, name);
        else
            snprintf(p, sizeof p, "%s", name);
        whale_ckpt_reader *b = NULL;
        if (r->nbase == (int)(sizeof r->base / sizeof r->base[0])) {
            whale_error("checkpoint: %s: delta chunks against more than %d full checkpoints",
                        r->dir, r->nbase);
            rc = WHALE_EDATA;
        } else if ((rc = reader_open(p, &b, true))) {
            whale_error("checkpoint: %s is a delta checkpoint: it needs the full checkpoint %s, "
                        "which does not open (%s)", r->dir, p, whale_strerror(rc));
        } else {
            b->is_base = true;
            snprintf(r->base[r->nbase].name, sizeof r->base[r->nbase].name, "%s", name);
            r->base[r->nbase++].r = b;
            *out = b;
        }
    }
    pthread_mutex_unlock(&r->base_mu);
    return rc;
}

/* A delta chunk's n values in buf (differences, delta.c, of its encoded
 * bytes) become the encoded values: the same region of the same tensor in
 * its base, stored in the same encoding, plus these. */
static int apply_delta(whale_ckpt_reader *r, const rtensor *t, const rchunk *c, void *buf,
                       int64_t n)
{
    if (r->is_base || !ckpt_delta_enc_ok(c->enc, t->dtype)) {
        whale_error("checkpoint: %s: tensor %s: a delta chunk %s", r->dir, t->name,
                    r->is_base ? "in a checkpoint that a delta names as its full base (chains "
                                 "are one deep)"
                               : "of an encoding deltas do not use");
        return WHALE_EDATA;
    }
    whale_ckpt_reader *b;
    int rc = base_reader(r, c->delta_base, &b);
    if (rc)
        return rc;
    long ti = whale_ckpt_reader_find(b, t->name);
    const rtensor *bt = ti >= 0 ? &b->t[ti] : NULL;
    const rchunk *bc = NULL;
    for (size_t k = 0; bt && k < bt->nc && !bc; k++)
        if (same_region(&bt->c[k].reg, &c->reg))
            bc = &bt->c[k];
    if (!bt || bt->dtype != t->dtype || !bc || bc->enc != c->enc || bc->block != c->block) {
        whale_error("checkpoint: %s: tensor %s: its base %s has no chunk of the same dtype, "
                    "region and encoding (%s, block %d)", r->dir, t->name, b->dir,
                    ckpt_enc_name(c->enc), c->block);
        return WHALE_EDATA;
    }
    void *ba, *bb;
    if ((rc = load_chunk(b, bt, bc, &ba, &bb, false)))
        return rc;
    ckpt_delta_apply_enc(c->enc, t->dtype, n, c->block, bb, buf);
    free(ba);
    return 0;
}

/* Reads, checks and decodes one chunk into a buffer of the tensor's dtype
 * (a delta chunk: plus its base's): *out, inside the allocation *alloc
 * that the caller frees (an O_DIRECT read's aligned buffer starts before
 * the chunk's first byte). decode false: the checked encoded bytes (what
 * a delta against this chunk is a difference of). */
static int load_chunk(whale_ckpt_reader *r, const rtensor *t, const rchunk *c, void **alloc,
                      void **out, bool decode)
{
    *alloc = NULL;
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, c->file);
    int fd;
    int orc = ckpt_open_confined(r->dir, c->file, t->name, &fd);
    if (orc)
        return orc;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        whale_error("checkpoint: %s (tensor %s): not a regular file", path, t->name);
        close(fd);
        return WHALE_ECORRUPT;
    }
    /* the size check comes before any allocation: nbytes is untrusted */
    if (c->begin > (uint64_t)st.st_size || c->nbytes > (uint64_t)st.st_size - c->begin) {
        whale_error("checkpoint: %s is truncated: tensor %s needs bytes [%llu, %llu), the file "
                    "has %lld", path, t->name, (unsigned long long)c->begin,
                    (unsigned long long)(c->begin + c->nbytes), (long long)st.st_size);
        close(fd);
        return WHALE_ECORRUPT;
    }
    void *rawbuf; /* the allocation raw points into (aligned and wider for O_DIRECT) */
    unsigned char *raw;
    uint64_t got = 0;
    int rrc = ckpt_read_range(fd, c->begin, c->nbytes, r->direct, &rawbuf, &raw, &got);
    int rerr = errno;
    close(fd);
    if (rrc == WHALE_ENOMEM) {
        whale_error("checkpoint: %s: tensor %s: out of memory for %llu bytes", path, t->name,
                    (unsigned long long)c->nbytes);
        return rrc;
    }
    if (rrc) {
        whale_error("checkpoint: %s: tensor %s: read error in bytes [%llu, %llu): %s", path,
                    t->name, (unsigned long long)c->begin,
                    (unsigned long long)(c->begin + c->nbytes), strerror(rerr));
        return rrc;
    }
    if (got < c->nbytes) {
        whale_error("checkpoint: %s is truncated: tensor %s needs bytes [%llu, %llu), the file "
                    "has %lld", path, t->name, (unsigned long long)c->begin,
                    (unsigned long long)(c->begin + c->nbytes), (long long)st.st_size);
        free(rawbuf);
        return WHALE_ECORRUPT;
    }
    /* stored bytes of a plain chunk are its content too: hashed once */
    XXH128_hash_t rawh = XXH3_128bits(raw, c->nbytes);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, rawh);
    char hx[33];
    ckpt_hex128(&can, hx);
    if (strcmp(hx, c->xxh)) {
        whale_error("checkpoint: %s: tensor %s: checksum mismatch in bytes [%llu, %llu) "
                    "(corrupted file)", path, t->name, (unsigned long long)c->begin,
                    (unsigned long long)(c->begin + c->nbytes));
        free(rawbuf);
        return WHALE_ECORRUPT;
    }
    int64_t n = ckpt_region_numel(&c->reg); /* <= 2^60: checked when the manifest was read */
    size_t enc_len = ckpt_enc_size(c->enc, t->dtype, n, c->block);
    unsigned char *enc = raw;
    void *encbuf = rawbuf; /* what enc points into */
    if (c->shuffle > 1 && (size_t)n * (size_t)c->shuffle != enc_len) {
        whale_error("checkpoint: %s: tensor %s: shuffle width %d does not fit %lld elements in "
                    "%zu bytes", path, t->name, c->shuffle, (long long)n, enc_len);
        free(rawbuf);
        return WHALE_ECORRUPT;
    }
    if (c->zraw) {
        /* the frame says what it decodes to: refuse before allocating */
        unsigned long long fsz = ZSTD_getFrameContentSize(raw, c->nbytes);
        if (fsz != ZSTD_CONTENTSIZE_UNKNOWN && fsz != enc_len) {
            whale_error("checkpoint: %s: tensor %s: zstd data does not decode to %zu bytes",
                        path, t->name, enc_len);
            free(rawbuf);
            return WHALE_ECORRUPT;
        }
        enc = malloc(enc_len ? enc_len : 1);
        size_t zr = enc ? ZSTD_decompress(enc, enc_len, raw, c->nbytes) : 0;
        if (!enc || ZSTD_isError(zr) || zr != enc_len) {
            whale_error("checkpoint: %s: tensor %s: zstd data does not decode to %zu bytes",
                        path, t->name, enc_len);
            free(enc);
            free(rawbuf);
            return WHALE_ECORRUPT;
        }
        free(rawbuf);
        encbuf = enc;
        if (c->shuffle > 1) {
            unsigned char *u = malloc(enc_len ? enc_len : 1);
            if (!u) {
                free(enc);
                return WHALE_ENOMEM;
            }
            ckpt_unshuffle(enc, u, (size_t)n, c->shuffle);
            free(enc);
            enc = u;
            encbuf = u;
        }
    } else if (c->nbytes != enc_len) {
        whale_error("checkpoint: %s: tensor %s: chunk has %llu bytes, expected %zu", path,
                    t->name, (unsigned long long)c->nbytes, enc_len);
        free(rawbuf);
        return WHALE_ECORRUPT;
    }
    if (c->delta_base) { /* the content hash below then covers base and delta */
        int drc = apply_delta(r, t, c, enc, n);
        if (drc) {
            free(encbuf);
            return drc;
        }
    }
    if (c->cxxh) {
        /* the manifest's fields must still mean what was saved: a changed
         * shuffle, dtype, region, enc or block decodes intact bytes into
         * other values */
        char cx[33];
        XXH128_hash_t ch = !c->zraw && !c->delta_base ? rawh : XXH3_128bits(enc, enc_len);
        ckpt_content_hash(ch, t->dtype, c->enc, c->block, &c->reg, cx);
        if (strcmp(cx, c->cxxh)) {
            whale_error("checkpoint: %s: tensor %s: the chunk at bytes [%llu, %llu) does not "
                        "decode to what was saved (content_xxh3_128 mismatch): its manifest "
                        "record (dtype, shape, region, enc, block, zstd or shuffle) was changed",
                        path, t->name, (unsigned long long)c->begin,
                        (unsigned long long)(c->begin + c->nbytes));
            free(encbuf);
            return WHALE_ECORRUPT;
        }
    }
    if (c->enc == CKPT_ENC_RAW || !decode) {
        *alloc = encbuf;
        *out = enc;
        return 0;
    }
    void *dec = malloc((size_t)n * 4 + 1);
    if (!dec) {
        whale_error("checkpoint: %s: tensor %s: out of memory decoding %lld elements", path,
                    t->name, (long long)n);
        free(encbuf);
        return WHALE_ENOMEM;
    }
    ckpt_decode(c->enc, t->dtype, enc, n, c->block, dec);
    free(encbuf);
    *alloc = dec;
    *out = dec;
    return 0;
}

struct copy_ctx {
    const unsigned char *src;
    enum whale_dtype sdt;
    unsigned char *dst;
    enum whale_dtype ddt;
    uint64_t *bits;
};

static void copy_run(int64_t s, int64_t d, int64_t len, void *u)
{
    struct copy_ctx *c = u;
    ckpt_convert(c->sdt, c->src + (size_t)s * ckpt_dtype_size(c->sdt), c->ddt,
                 c->dst + (size_t)d * ckpt_dtype_size(c->ddt), len);
    for (int64_t i = d; i < d + len;) { /* coverage bitmap */
        if ((i & 63) == 0 && i + 64 <= d + len) {
            c->bits[i >> 6] = ~0ull;
            i += 64;
        } else {
            c->bits[i >> 6] |= 1ull << (i & 63);
            i++;
        }
    }
}

int64_t ckpt_reader_held(const whale_ckpt_reader *r, size_t i)
{
    int64_t have = 0; /* replicas saved by several ranks count more than once */
    for (size_t k = 0; i < r->nt && k < r->t[i].nc; k++)
        have += ckpt_region_numel(&r->t[i].c[k].reg);
    return have;
}

void ckpt_fmt_shape(char *b, size_t n, int nd, const int64_t *s)
{
    size_t o = (size_t)snprintf(b, n, "[");
    for (int d = 0; d < nd && o < n; d++)
        o += (size_t)snprintf(b + o, n - o, d ? ", %lld" : "%lld", (long long)s[d]);
    if (o < n)
        snprintf(b + o, n - o, "]");
}

/* One piece: every chunk that overlaps it, decoded and copied in. */
static int read_piece(whale_ckpt_reader *r, const whale_ckpt_piece *p)
{
    long ti = p->name ? whale_ckpt_reader_find(r, p->name) : -1;
    if (ti < 0) {
        whale_error("checkpoint: tensor %s is not in %s", p->name ? p->name : "(null)",
                    r->dir);
        return WHALE_ENOENT;
    }
    const rtensor *t = &r->t[ti];
    bool same_shape = t->ndim == p->ndim;
    for (int d = 0; same_shape && d < p->ndim; d++)
        same_shape = t->shape[d] == p->shape[d];
    if (!same_shape) {
        char a[128], b[128];
        ckpt_fmt_shape(a, sizeof a, t->ndim, t->shape);
        ckpt_fmt_shape(b, sizeof b, p->ndim, p->shape);
        whale_error("checkpoint: tensor %s: saved with global shape %s, requested %s",
                    p->name, a, b);
        return WHALE_EINVAL;
    }
    if (t->dtype != p->dtype && !(ckpt_dtype_is_float(t->dtype) && ckpt_dtype_is_float(p->dtype))) {
        whale_error("checkpoint: tensor %s: saved as %s, requested %s", p->name,
                    ckpt_dtype_st(t->dtype), ckpt_dtype_st(p->dtype) ? ckpt_dtype_st(p->dtype) : "?");
        return WHALE_EINVAL;
    }
    ckpt_region want;
    ckpt_region_from_piece(&want, p);
    int rc = ckpt_region_check(&want, p->name);
    if (rc)
        return rc;
    int64_t need = ckpt_region_numel(&want);
    if (p->device) { /* GPU memory: through a host copy */
        if (!ckpt_dev_available()) {
            whale_error("checkpoint: tensor %s: GPU memory but this build has no CUDA",
                        p->name);
            return WHALE_ENOTSUP;
        }
        size_t bytes = (size_t)need * ckpt_dtype_size(p->dtype);
        whale_ckpt_piece h = *p;
        h.device = false;
        h.data = malloc(bytes ? bytes : 1);
        if (!h.data)
            return WHALE_ENOMEM;
        rc = read_piece(r, &h);
        if (!rc)
            rc = ckpt_host_to_dev(p->data, h.data, bytes);
        free(h.data);
        return rc;
    }
    uint64_t *bits = calloc((size_t)(need + 63) / 64 + 1, 8);
    if (!bits)
        return WHALE_ENOMEM;
    for (size_t k = 0; k < t->nc && !rc; k++) {
        const rchunk *c = &t->c[k];
        int64_t alo, ahi, blo, bhi;
        ckpt_region_bounds(&c->reg, &alo, &ahi);
        ckpt_region_bounds(&want, &blo, &bhi);
        if (ahi <= blo || bhi <= alo)
            continue;
        void *alloc, *buf;
        if ((rc = load_chunk(r, t, c, &alloc, &buf, true)))
            break;
        struct copy_ctx cc = {buf, t->dtype, p->data, p->dtype, bits};
        if (c->enc != CKPT_ENC_RAW)
            cc.sdt = WHALE_FLOAT32;
        ckpt_region_overlap(&c->reg, &want, copy_run, &cc);
        free(alloc);
    }
    int64_t have = 0;
    for (int64_t w = 0; w < (need + 63) / 64; w++)
        have += __builtin_popcountll(bits[w]);
    free(bits);
    if (rc)
        return rc;
    if (have != need) {
        whale_error("checkpoint: tensor %s: %s holds only %lld of the %lld elements "
                    "requested (a rank's shards are missing?)", p->name, r->dir,
                    (long long)have, (long long)need);
        return WHALE_EDATA;
    }
    return 0;
}

/* Pieces are read by up to WHALE_CKPT_READERS threads (default 4): each
 * piece's chunks are independent files or ranges, so several reads keep a
 * parallel file system (or an NVMe queue) busy where one thread waits on
 * one request at a time. */
struct read_pool {
    whale_ckpt_reader *r;
    const whale_ckpt_piece *p;
    size_t n;
    atomic_size_t next;
    atomic_int rc;
};

static void *read_worker(void *arg)
{
    struct read_pool *rp = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&rp->next, 1);
        if (i >= rp->n || atomic_load(&rp->rc))
            return NULL;
        int rc = read_piece(rp->r, &rp->p[i]);
        if (rc) {
            int zero = 0;
            atomic_compare_exchange_strong(&rp->rc, &zero, rc);
        }
    }
}

static int readers(void)
{
    const char *s = whale_knob_getenv("WHALE_CKPT_READERS");
    long v = 4;
    if (s && *s && whale_parse_long(s, 1, 64, &v)) {
        whale_warn("WHALE_CKPT_READERS=%s: expected an integer in [1, 64]; using 4", s);
        v = 4;
    }
    return (int)v;
}

int whale_ckpt_read(whale_ckpt_reader *r, const whale_ckpt_piece *pieces, size_t n)
{
    int nt = readers();
    if ((size_t)nt > n)
        nt = (int)n;
    if (nt <= 1) {
        for (size_t i = 0; i < n; i++) {
            int rc = read_piece(r, &pieces[i]);
            if (rc)
                return rc;
        }
        return 0;
    }
    struct read_pool rp = {.r = r, .p = pieces, .n = n};
    atomic_init(&rp.next, 0);
    atomic_init(&rp.rc, 0);
    pthread_t th[64];
    int started = 0;
    for (int k = 1; k < nt; k++)
        if (pthread_create(&th[started], NULL, read_worker, &rp) == 0)
            started++;
    read_worker(&rp); /* this thread reads too; with no helper it reads them all */
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    return atomic_load(&rp.rc);
}

int whale_ckpt_verify(whale_ckpt_reader *r, int *bad_out)
{
    /* shard files (confined, headers, sizes), then every chunk's checksum */
    char *mp = ckpt_path(r->dir, CKPT_MANIFEST);
    int bad = check_files(r, mp ? mp : r->dir) + r->digest_bad;
    free(mp);
    for (size_t i = 0; i < r->nt; i++) {
        const rtensor *t = &r->t[i];
        int64_t have = 0, want = ckpt_shape_numel(t->ndim, t->shape);
        for (size_t k = 0; k < t->nc; k++) {
            void *alloc, *buf;
            if (load_chunk(r, t, &t->c[k], &alloc, &buf, true))
                bad++;
            free(alloc);
            have += ckpt_region_numel(&t->c[k].reg);
        }
        /* chunks never overlap (one writer per element), so the sum is the coverage;
         * a partial tensor is legal (the saver chose it) but worth saying */
        if (have < want)
            whale_warn("verify: %s: tensor %s: the checkpoint holds %lld of its %lld elements",
                       r->dir, t->name, (long long)have, (long long)want);
    }
    if (bad_out)
        *bad_out = bad;
    return bad ? WHALE_ECORRUPT : 0;
}
