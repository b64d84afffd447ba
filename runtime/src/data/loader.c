/* Memory-mapped token files, a DP split by global sample index, and a
 * background thread that prepares the next step's batch. */
#include "whale/data.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "whale/error.h"
#include "whale/log.h"

struct dfile {
    char *path;
    int fd;
    void *map;
    size_t map_len;
    enum whale_data_format fmt;
    int tokw;            /* bytes per token of an llm.c shard: 2, or 4 (version 2) */
    const void *tok;     /* first token */
    int64_t ntok;
    int64_t first;       /* global index of its first token */
    /* loss mask, one byte per token (NULL: every target counts) */
    char *mpath;
    void *mask;
    size_t mask_len;
};

struct whale_data {
    struct whale_data_config cfg;
    struct dfile *f;
    int nf;
    int64_t ntok, epoch;

    /* prefetch: one prepared batch */
    pthread_t th;
    bool th_started, quit, busy;
    int perr;            /* the prefetch's fill failed (WHALE_E*) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t want, have;
    int32_t *pin, *ptg;
};

static int open_one(struct dfile *f, const struct whale_data_config *cfg)
{
    /* O_NONBLOCK: a FIFO named as data would otherwise block the open until
     * a writer comes; the regular-file check then refuses it */
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f->fd < 0) {
        whale_error("data file %s: %s", f->path, strerror(errno));
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        whale_error("data file %s: not a regular file", f->path);
        return WHALE_EDATA;
    }
    fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK);
    if (sb.st_size == 0) {
        whale_error("data file %s: empty file", f->path);
        return WHALE_EDATA;
    }
    f->map_len = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        whale_error("data file %s: mmap: %s", f->path, strerror(errno));
        return WHALE_EIO;
    }
    madvise(f->map, f->map_len, MADV_WILLNEED);

    enum whale_data_format fmt = cfg->format;
    const int32_t *hdr = f->map;
    size_t pl = strlen(f->path);
    if (fmt == WHALE_DATA_AUTO) {
        bool magic = f->map_len >= 4 && hdr[0] == WHALE_LLMC_MAGIC;
        bool bin = pl > 4 && !strcmp(f->path + pl - 4, ".bin");
        fmt = magic || bin ? WHALE_DATA_LLMC : WHALE_DATA_BYTES;
    }
    f->fmt = fmt;
    if (fmt == WHALE_DATA_LLMC) {
        const size_t hb = WHALE_LLMC_HEADER_INTS * sizeof(int32_t);
        if (f->map_len < hb) {
            whale_error("data file %s: truncated llm.c shard: %zu bytes, the header alone is %zu",
                        f->path, f->map_len, hb);
            return WHALE_EDATA;
        }
        if (hdr[0] != WHALE_LLMC_MAGIC) {
            whale_error("data file %s: wrong magic %d (an llm.c token shard starts with %d)",
                        f->path, hdr[0], WHALE_LLMC_MAGIC);
            return WHALE_EDATA;
        }
        if (hdr[1] != 1 && hdr[1] != 2) {
            whale_error("data file %s: llm.c shard version %d not supported (1: uint16 "
                        "tokens; 2: uint32 tokens, whale-data's for vocabularies over 65536)",
                        f->path, hdr[1]);
            return WHALE_EDATA;
        }
        f->tokw = hdr[1] == 2 ? 4 : 2;
        if (hdr[2] <= 0) {
            whale_error("data file %s: header says %d tokens", f->path, hdr[2]);
            return WHALE_EDATA;
        }
        f->ntok = hdr[2];
        size_t need = hb + (size_t)f->ntok * (size_t)f->tokw;
        if (f->map_len < need) {
            whale_error("data file %s: truncated: header says %lld tokens (%zu bytes) but the "
                        "file has %zu bytes", f->path, (long long)f->ntok, need, f->map_len);
            return WHALE_ECORRUPT;
        }
        f->tok = (const char *)f->map + hb;
        const uint16_t *t = f->tok;
        const uint32_t *t4 = f->tok;
        int64_t bad = -1;
        for (int64_t i = 0; i < f->ntok; i++)
            if ((f->tokw == 4 ? t4[i] : t[i]) >= (uint32_t)cfg->vocab) {
                bad = i;
                break;
            }
        if (bad >= 0) {
            whale_error("data file %s: token %u at position %lld is >= the model's vocabulary "
                        "size %d", f->path, f->tokw == 4 ? t4[bad] : t[bad], (long long)bad,
                        cfg->vocab);
            return WHALE_EDATA;
        }
    } else {
        f->tok = f->map;
        f->ntok = (int64_t)f->map_len;
        if (cfg->vocab < 256) {
            const uint8_t *t = f->tok;
            for (int64_t i = 0; i < f->ntok; i++)
                if (t[i] >= cfg->vocab) {
                    whale_error("data file %s: byte %d at offset %lld is >= the model's "
                                "vocabulary size %d (raw bytes need Vocab >= 256)", f->path, t[i],
                                (long long)i, cfg->vocab);
                    return WHALE_EDATA;
                }
        }
    }
    return 0;
}

/* The loss mask of f: one byte (0 or 1) per token, exactly ntok bytes. */
static int open_mask(struct dfile *f)
{
    int fd = open(f->mpath, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        whale_error("loss mask %s: %s", f->mpath, strerror(errno));
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        whale_error("loss mask %s: not a regular file", f->mpath);
        rc = WHALE_EDATA;
    } else if ((int64_t)sb.st_size != f->ntok) {
        whale_error("loss mask %s: %lld bytes, but data file %s has %lld tokens (one byte per "
                    "token)", f->mpath, (long long)sb.st_size, f->path, (long long)f->ntok);
        rc = WHALE_EDATA;
    } else {
        f->mask_len = (size_t)sb.st_size;
        f->mask = mmap(NULL, f->mask_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->mask == MAP_FAILED) {
            f->mask = NULL;
            whale_error("loss mask %s: mmap: %s", f->mpath, strerror(errno));
            rc = WHALE_EIO;
        }
    }
    close(fd);
    if (rc)
        return rc;
    const uint8_t *m = f->mask;
    for (int64_t i = 0; i < f->ntok; i++)
        if (m[i] > 1) {
            whale_error("loss mask %s: byte %d at offset %lld (expected 0 or 1)", f->mpath, m[i],
                        (long long)i);
            return WHALE_EDATA;
        }
    return 0;
}

static char *mask_name(const char *path, size_t len)
{
    char *m = malloc(len + 6);
    if (m) {
        memcpy(m, path, len);
        memcpy(m + len, ".mask", 6);
    }
    return m;
}

bool whale_data_mask_beside(const char *paths)
{
    for (const char *p = paths; p && *p;) {
        size_t len = strcspn(p, ",");
        char *m = mask_name(p, len);
        bool here = m && access(m, F_OK) == 0;
        free(m);
        if (here)
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* file being read by this thread's copy (named when it faults) */
static __thread int t_file = -1;

/* dst (n) = tokens [start, start + n) of the concatenated stream, dm (n)
 * their loss-mask bytes (1 where a file has no mask) */
static void copy_tokens(const whale_data *d, int64_t start, int32_t *dst, uint8_t *dm, int n)
{
    int fi = 0;
    while (fi + 1 < d->nf && d->f[fi + 1].first <= start)
        fi++;
    int64_t pos = start - d->f[fi].first;
    for (int i = 0; i < n; i++) {
        while (pos >= d->f[fi].ntok) {
            fi = (fi + 1) % d->nf;
            pos = 0;
        }
        t_file = fi;
        if (d->f[fi].fmt == WHALE_DATA_LLMC && d->f[fi].tokw == 4)
            dst[i] = (int32_t)((const uint32_t *)d->f[fi].tok)[pos];
        else if (d->f[fi].fmt == WHALE_DATA_LLMC)
            dst[i] = ((const uint16_t *)d->f[fi].tok)[pos];
        else
            dst[i] = ((const uint8_t *)d->f[fi].tok)[pos];
        dm[i] = d->f[fi].mask ? ((const uint8_t *)d->f[fi].mask)[pos] : 1;
        pos++;
    }
}

/* inputs/targets (local_batch, seq) of the step starting at global sample gs */
struct fill_job {
    const whale_data *d;
    int64_t gs;
    int32_t *in, *tg, *win;
    uint8_t *wm;
};

static void fill_run(void *arg)
{
    struct fill_job *j = arg;
    const whale_data *d = j->d;
    const int T = d->cfg.seq, B = d->cfg.local_batch;
    const int64_t off = d->cfg.global_batch ? d->cfg.offset : (int64_t)d->cfg.dp_rank * B;
    for (int b = 0; b < B; b++) {
        int64_t g = j->gs + off + b;
        int64_t start = (g % d->epoch) * T;
        copy_tokens(d, start, j->win, j->wm, T + 1);
        memcpy(j->in + (size_t)b * T, j->win, sizeof(int32_t) * T);
        int32_t *tg = j->tg + (size_t)b * T;
        for (int t = 0; t < T; t++) /* a masked token is no target: -1 */
            tg[t] = j->wm[t + 1] ? j->win[t + 1] : -1;
    }
}

/* The files are mapped: one truncated after open would kill the process
 * with SIGBUS. Check the sizes first (the common case, between steps) and
 * guard the copy itself (truncation during it). */
static int fill(const whale_data *d, int64_t gs, int32_t *in, int32_t *tg)
{
    for (int i = 0; i < d->nf; i++) {
        struct stat sb;
        if (fstat(d->f[i].fd, &sb) == 0 && (size_t)sb.st_size < d->f[i].map_len) {
            whale_error("data file %s shrank from %zu to %lld bytes while training (truncated "
                        "or rewritten?)", d->f[i].path, d->f[i].map_len, (long long)sb.st_size);
            return WHALE_ECORRUPT;
        }
    }
    struct fill_job j = { d, gs, in, tg, malloc(sizeof(int32_t) * ((size_t)d->cfg.seq + 1)),
                          malloc((size_t)d->cfg.seq + 1) };
    if (!j.win || !j.wm) {
        free(j.win);
        free(j.wm);
        return WHALE_ENOMEM;
    }
    t_file = -1;
    int g = data_guard_run(fill_run, &j);
    free(j.win);
    free(j.wm);
    if (g) {
        const char *path = t_file >= 0 ? d->f[t_file].path : "(unknown)";
        whale_error("data file %s: reading it failed (SIGBUS: the file was truncated while "
                    "training)", path);
        return WHALE_ECORRUPT;
    }
    return 0;
}

static void *prefetch_main(void *arg)
{
    whale_data *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        /* after a failure the next whale_data_next reports it: no retry */
        while (!d->quit && (d->want < 0 || d->want == d->have || d->perr))
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit)
            break;
        int64_t w = d->want;
        d->busy = true;
        pthread_mutex_unlock(&d->mu);
        int frc = fill(d, w, d->pin, d->ptg);
        pthread_mutex_lock(&d->mu);
        if (frc)
            d->perr = frc;
        else
            d->have = w;
        d->busy = false;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int whale_data_open(const struct whale_data_config *cfg, whale_data **out)
{
    *out = NULL;
    if (!cfg->paths || !*cfg->paths) {
        whale_error("no training data given (--data FILE)");
        return WHALE_EINVAL;
    }
    if (cfg->seq < 1 || cfg->local_batch < 1 || cfg->dp_size < 1 || cfg->dp_rank < 0 ||
        cfg->dp_rank >= cfg->dp_size || cfg->vocab < 1) {
        whale_error("data loader: bad geometry (seq %d, batch %d, dp %d/%d, vocab %d)", cfg->seq,
                    cfg->local_batch, cfg->dp_rank, cfg->dp_size, cfg->vocab);
        return WHALE_EINVAL;
    }
    if (cfg->global_batch && (cfg->global_batch < 0 || cfg->offset < 0 ||
                              (int64_t)cfg->offset + cfg->local_batch > cfg->global_batch)) {
        whale_error("data loader: dp rank %d reads samples [%d, %lld) of a global batch of %d",
                    cfg->dp_rank, cfg->offset, (long long)cfg->offset + cfg->local_batch,
                    cfg->global_batch);
        return WHALE_EINVAL;
    }
    whale_data *d = calloc(1, sizeof *d);
    if (!d)
        return WHALE_ENOMEM;
    d->cfg = *cfg;
    d->cfg.paths = NULL;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->want = d->have = -1;
    int n = 1;
    for (const char *p = cfg->paths; *p; p++)
        n += *p == ',';
    d->f = calloc(n, sizeof *d->f);
    if (!d->f) {
        free(d);
        return WHALE_ENOMEM;
    }
    int rc = 0;
    const char *p = cfg->paths;
    for (int i = 0; i < n && !rc; i++) {
        size_t len = strcspn(p, ",");
        if (!len) {
            whale_error("data list '%s': empty file name", cfg->paths);
            rc = WHALE_EINVAL;
            break;
        }
        d->f[i].fd = -1;
        d->f[i].path = strndup(p, len);
        d->nf = i + 1;
        rc = open_one(&d->f[i], cfg);
        if (!rc && !cfg->masks) { /* PATH.mask beside the file, when there */
            char *m = mask_name(p, len);
            if (!m)
                rc = WHALE_ENOMEM;
            else if (access(m, F_OK) == 0)
                d->f[i].mpath = m;
            else
                free(m);
        } else if (!rc) {
            const char *q = cfg->masks;
            for (int k = 0; k < i && q; k++)
                q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL;
            size_t ql = q ? strcspn(q, ",") : 0;
            if (!ql) {
                whale_error("--loss-mask '%s': no mask for data file %d (%s): give one per "
                            "data file", cfg->masks, i + 1, d->f[i].path);
                rc = WHALE_EINVAL;
            } else if (!(d->f[i].mpath = strndup(q, ql)))
                rc = WHALE_ENOMEM;
        }
        if (!rc && d->f[i].mpath)
            rc = open_mask(&d->f[i]);
        if (!rc) {
            d->f[i].first = d->ntok;
            d->ntok += d->f[i].ntok;
        }
        p += len + (p[len] == ',');
    }
    if (!rc && d->ntok < cfg->seq + 1) {
        whale_error("data %s: %lld tokens, fewer than one sample needs (seq + 1 = %d)", cfg->paths,
                    (long long)d->ntok, cfg->seq + 1);
        rc = WHALE_EDATA;
    }
    if (rc) {
        whale_data_close(d);
        return rc;
    }
    d->epoch = (d->ntok - 1) / cfg->seq;
    if (cfg->prefetch) {
        size_t bt = (size_t)cfg->local_batch * cfg->seq;
        d->pin = malloc(bt * sizeof(int32_t));
        d->ptg = malloc(bt * sizeof(int32_t));
        if (!d->pin || !d->ptg || pthread_create(&d->th, NULL, prefetch_main, d)) {
            whale_data_close(d);
            return WHALE_ENOMEM;
        }
        d->th_started = true;
    }
    *out = d;
    return 0;
}

int whale_data_next(whale_data *d, int64_t gs, int32_t *in, int32_t *tg)
{
    if (gs < 0)
        return WHALE_EINVAL;
    size_t bt = (size_t)d->cfg.local_batch * d->cfg.seq;
    if (!d->th_started)
        return fill(d, gs, in, tg);
    pthread_mutex_lock(&d->mu);
    while (d->busy)
        pthread_cond_wait(&d->cv, &d->mu);
    int rc = 0;
    if (d->perr) { /* the prefetch already said what went wrong */
        rc = d->perr;
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    if (d->have == gs) {
        memcpy(in, d->pin, bt * sizeof(int32_t));
        memcpy(tg, d->ptg, bt * sizeof(int32_t));
    } else if ((rc = fill(d, gs, in, tg))) {
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    d->want = gs + (d->cfg.global_batch ? (int64_t)d->cfg.global_batch
                                         : (int64_t)d->cfg.local_batch * d->cfg.dp_size);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

int64_t whale_data_tokens(const whale_data *d)
{
    return d->ntok;
}

int64_t whale_data_epoch_samples(const whale_data *d)
{
    return d->epoch;
}

void whale_data_close(whale_data *d)
{
    if (!d)
        return;
    if (d->th_started) {
        pthread_mutex_lock(&d->mu);
        d->quit = true;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->th, NULL);
    }
    for (int i = 0; i < d->nf; i++) {
        if (d->f[i].map)
            munmap(d->f[i].map, d->f[i].map_len);
        if (d->f[i].fd >= 0)
            close(d->f[i].fd);
        if (d->f[i].mask)
            munmap(d->f[i].mask, d->f[i].mask_len);
        free(d->f[i].path);
        free(d->f[i].mpath);
    }
    free(d->f);
    free(d->pin);
    free(d->ptg);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}
