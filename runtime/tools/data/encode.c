/* Document-parallel encoding with pthreads and a progress line. */
#define _GNU_SOURCE
#include "encode.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "whale/clock.h"

/* documents are handed out in chunks of about this many bytes: large
 * enough to keep the shared counter cold, small enough to balance */
#define CHUNK_BYTES (256u << 10)

static int push(struct wd_ids *d, int32_t id)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 1024;
        int32_t *p = realloc(d->ids, nc * sizeof *p);
        if (!p)
            return -1;
        d->ids = p;
        d->cap = nc;
    }
    d->ids[d->n++] = id;
    return 0;
}

int wd_encode_doc(const wd_spm *s, const char *t, size_t len, bool bos, struct wd_ids *d,
                  char *err, size_t errlen)
{
    if (bos && wd_spm_bos(s) >= 0 && push(d, wd_spm_bos(s)))
        goto oom;
    const int nl = wd_spm_newline(s);
    if (nl < 0) /* no newline piece: the normalizer folds "\n" into a space */
        return wd_spm_encode_line(s, t, len, &d->ids, &d->n, &d->cap, err, errlen);
    size_t p = 0;
    while (p < len) {
        const char *e = memchr(t + p, '\n', len - p);
        size_t end = e ? (size_t)(e - t) : len;
        size_t l = end - p;
        if (l && t[p + l - 1] == '\r')
            l--;
        if (l && wd_spm_encode_line(s, t + p, l, &d->ids, &d->n, &d->cap, err, errlen))
            return -1;
        if (e && push(d, nl))
            goto oom;
        p = end + 1;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}

struct pool {
    const wd_spm *s;
    const struct wd_corpus *c;
    struct wd_ids *out;
    size_t *chunk_start; /* nchunks + 1 document indices */
    size_t nchunks;
    atomic_size_t next;
    atomic_size_t bytes_done;
    atomic_int failed;
    pthread_mutex_t mu;
    char err[512];
    size_t err_doc;
};

static void *worker(void *arg)
{
    struct pool *p = arg;
    char err[512];
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->nchunks || atomic_load(&p->failed))
            break;
        for (size_t i = p->chunk_start[k]; i < p->chunk_start[k + 1]; i++) {
            const struct wd_doc *d = &p->c->docs[i];
            if (wd_encode_doc(p->s, d->text, d->len, true, &p->out[i], err, sizeof err)) {
                pthread_mutex_lock(&p->mu);
                if (!atomic_load(&p->failed) || i < p->err_doc) { /* the first document */
                    snprintf(p->err, sizeof p->err, "%s", err);
                    p->err_doc = i;
                }
                atomic_store(&p->failed, 1);
                pthread_mutex_unlock(&p->mu);
                return NULL;
            }
            atomic_fetch_add(&p->bytes_done, d->len);
        }
    }
    return NULL;
}

static void show(size_t done, size_t total, double t, bool final)
{
    double mb = done / 1048576.0, tot = total / 1048576.0;
    double rate = t > 0 ? mb / t : 0;
    double eta = rate > 0 ? (tot - mb) / rate : 0;
    fprintf(stderr, "\rencoding %.1f/%.1f MB  %.1f MB/s  ETA %.0fs   %s", mb, tot, rate,
            final ? 0.0 : eta, final ? "\n" : "");
}

int wd_encode_all(const wd_spm *s, const struct wd_corpus *c, int threads, bool progress,
                  struct wd_ids **out, double *seconds)
{
    *out = NULL;
    struct pool p = { .s = s, .c = c };
    pthread_mutex_init(&p.mu, NULL);
    p.out = calloc(c->ndocs, sizeof *p.out);
    p.chunk_start = malloc((c->ndocs + 1) * sizeof(size_t));
    pthread_t *th = calloc(threads, sizeof *th);
    if (!p.out || !p.chunk_start || !th) {
        fprintf(stderr, "whale-data: out of memory\n");
        free(p.out);
        free(p.chunk_start);
        free(th);
        return -1;
    }
    size_t acc = 0;
    p.chunk_start[0] = 0;
    for (size_t i = 0; i < c->ndocs; i++) {
        acc += c->docs[i].len;
        if (acc >= CHUNK_BYTES || i + 1 == c->ndocs) {
            p.chunk_start[++p.nchunks] = i + 1;
            acc = 0;
        }
    }
    double t0 = whale_now_s();
    int started = 0;
    for (int i = 0; i < threads; i++, started++)
        if (pthread_create(&th[i], NULL, worker, &p))
            break;
    if (!started) {
        fprintf(stderr, "whale-data: cannot start an encoding thread\n");
        free(th);
        wd_encoded_free(p.out, c->ndocs);
        free(p.chunk_start);
        return -1;
    }
    if (progress) { /* the main thread only reports */
        while (atomic_load(&p.next) < p.nchunks + (size_t)started && !atomic_load(&p.failed)) {
            show(atomic_load(&p.bytes_done), c->bytes, whale_now_s() - t0, false);
            usleep(200000);
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    *seconds = whale_now_s() - t0;
    if (progress && !p.failed)
        show(atomic_load(&p.bytes_done), c->bytes, *seconds, true);
    free(th);
    free(p.chunk_start);
    pthread_mutex_destroy(&p.mu);
    if (p.failed) {
        if (progress)
            fputc('\n', stderr);
        const struct wd_doc *d = &c->docs[p.err_doc];
        if (d->line)
            fprintf(stderr, "whale-data: %s:%ld: encoding failed: %s\n", c->files[d->file],
                    d->line, p.err);
        else
            fprintf(stderr, "whale-data: %s: encoding failed: %s\n", c->files[d->file], p.err);
        wd_encoded_free(p.out, c->ndocs);
        return -1;
    }
    *out = p.out;
    return 0;
}

void wd_encoded_free(struct wd_ids *e, size_t n)
{
    if (!e)
        return;
    for (size_t i = 0; i < n; i++) {
        free(e[i].ids);
        free(e[i].mask);
    }
    free(e);
}
