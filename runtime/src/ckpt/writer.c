/* The bundle writers: threads that write bundles' file images while the
 * save thread hashes, encodes and stages the next ones. With one writer
 * (double buffer) the CPU part and the device part overlapped, but one
 * file at a time left the device idle during each file's open, truncate
 * and fdatasync, and a whole save's fdatasyncs came one after the other at
 * the end (22 files: ~0.25 s of a 0.7 s save). With `nth` writers several
 * O_DIRECT writes are in flight, and each file is fdatasynced by the thread
 * that wrote it, right after its last write, while the others write.
 *
 * fsync policy: every bundle file is written (O_DIRECT where the file
 * system allows it, else through the page cache), fdatasynced and closed by
 * its writer; the rank's directory is fsynced after the last file, before
 * the rank index is published (save.c); rank 0 then fsyncs the manifest
 * and each renamed directory (commit.c). So a published index or a
 * committed step never names bytes that a crash could lose.
 *
 * Ownership: the save thread fills a FREE image (ckpt_writer_image), then
 * ckpt_writer_submit queues it; a writer takes the oldest queued image and
 * sets it FREE again when its file is on disk. The fault counters are
 * shared by the writers (atomics). ckpt_writer_finish joins the threads,
 * after which the save thread owns everything again. */
#define _GNU_SOURCE
#include "save_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int errno_to_whale(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG ? WHALE_ENOSPC : WHALE_EIO;
}

enum { CKPT_IMG_FREE, CKPT_IMG_FILLING, CKPT_IMG_QUEUED, CKPT_IMG_WRITING };

/* pwrite of a whole extent, counting bytes for the disk-full test hook
 * (the count is shared by the writers: reserved before each write). */
static int pwrite_all(int fd, const unsigned char *b, size_t len, uint64_t off, ckpt_fault *f)
{
    while (len) {
        size_t n = len > (1u << 26) ? (1u << 26) : len;
        long long before = __atomic_fetch_add(&f->written, (long long)n, __ATOMIC_RELAXED);
        if (f->enospc_after >= 0 && before + (long long)n > f->enospc_after) {
            __atomic_fetch_sub(&f->written, (long long)n, __ATOMIC_RELAXED);
            errno = ENOSPC;
            return -1;
        }
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        __atomic_fetch_sub(&f->written, (long long)n - (w > 0 ? w : 0), __ATOMIC_RELAXED);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        off += (uint64_t)w;
        len -= (size_t)w;
    }
    return 0;
}

/* Every extent at its offset; with O_DIRECT the last one rounded up to the
 * block (the stage holds its zero padding). */
static int write_extents(int fd, const struct ckpt_image *im, bool direct, ckpt_fault *f)
{
    for (size_t i = 0; i < im->next; i++) {
        const struct ckpt_extent *x = &im->ext[i];
        size_t len = x->len;
        if (direct && i + 1 == im->next)
            len = (len + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
        if (len && pwrite_all(fd, x->src, len, x->off, f))
            return -1;
    }
    return 0;
}

static void no_direct(struct ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    w->ps->no_direct = true;
    pthread_mutex_unlock(&w->mu);
}

/* Writes one image as tmpdir/fname: O_DIRECT when it was laid out for it
 * (truncated back to its size after the rounded last block), else through
 * the page cache. A file system without O_DIRECT (tmpfs) is found out at
 * open or at the first write; the same extents are then written buffered
 * (the padded header stays valid: safetensors allows it). The file is
 * fdatasynced and closed here. */
static int write_image(struct ckpt_writer *w, struct ckpt_image *im)
{
    whale_ckpt *ck = w->ck;
    struct persist *ps = w->ps;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ps->tmpdir, im->fname);
    bool direct = im->direct;
    if (ck->fault.slow_ms > 0)
        usleep((useconds_t)ck->fault.slow_ms * 1000);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0),
                  ps->fmode);
    if (fd < 0 && direct && errno == EINVAL) { /* no O_DIRECT here */
        no_direct(w);
        direct = false;
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, ps->fmode);
    }
    if (fd < 0) {
        int e = errno;
        whale_error("checkpoint step %lld: rank %d: cannot create %s: %s", (long long)ps->step,
                    ck->cfg.rank, path, strerror(e));
        return errno_to_whale(e);
    }
    int werr = 0;
    const char *what = "writing";
    if (write_extents(fd, im, direct, &ck->fault)) {
        werr = errno;
        if (direct && werr == EINVAL) { /* O_DIRECT refused at write time: buffered */
            no_direct(w);
            direct = false;
            werr = 0;
            if (ftruncate(fd, 0) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT) ||
                write_extents(fd, im, false, &ck->fault))
                werr = errno;
        }
    }
    if (!werr && direct && ftruncate(fd, (off_t)im->total))
        werr = errno;
    if (ck->fault.kill_rank == ck->cfg.rank) /* test hook: kill -9 in the middle of a save */
        raise(SIGKILL);
    if (!werr && fdatasync(fd)) {
        werr = errno;
        what = "fdatasync of";
    }
    if (close(fd) && !werr) {
        werr = errno;
        what = "closing";
    }
    if (werr) {
        whale_error("checkpoint step %lld: rank %d: %s %s: %s", (long long)ps->step,
                    ck->cfg.rank, what, path, strerror(werr));
        return errno_to_whale(werr);
    }
    return 0;
}

/* The queued image submitted first (-1: none). Under w->mu. */
static int oldest_queued(const struct ckpt_writer *w)
{
    int best = -1;
    for (int i = 0; i < w->nimg; i++)
        if (w->state[i] == CKPT_IMG_QUEUED &&
            (best < 0 || (int)(w->seq[i] - w->seq[best]) < 0))
            best = i;
    return best;
}

static void *writer_main(void *arg)
{
    struct ckpt_writer *w = arg;
    whale_trace_thread_name("ckpt writer");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int i;
        while ((i = oldest_queued(w)) < 0 && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (i < 0)
            break;
        w->state[i] = CKPT_IMG_WRITING;
        bool skip = w->err != 0;
        pthread_mutex_unlock(&w->mu);
        uint64_t tr0 = whale_trace_now();
        int rc = skip ? 0 : write_image(w, &w->img[i]);
        whale_trace_span("ckpt", "ckpt write", tr0, -1, -1);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->err)
            w->err = rc;
        w->state[i] = CKPT_IMG_FREE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void ckpt_writer_init(struct ckpt_writer *w, whale_ckpt *ck, struct persist *ps, int threads)
{
    memset(w, 0, sizeof *w);
    w->ck = ck;
    w->ps = ps;
    w->nth = threads < 0 ? 0 : threads > CKPT_MAX_WRITERS ? CKPT_MAX_WRITERS : threads;
    w->inline_only = w->nth == 0;
    w->nimg = w->nth + 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

struct ckpt_image *ckpt_writer_image(struct ckpt_writer *w, size_t stage_bytes, size_t extents)
{
    pthread_mutex_lock(&w->mu);
    int i;
    for (;;) {
        for (i = 0; i < w->nimg && w->state[i] != CKPT_IMG_FREE; i++)
            ;
        if (i < w->nimg)
            break;
        pthread_cond_wait(&w->cv, &w->mu);
    }
    w->state[i] = CKPT_IMG_FILLING;
    pthread_mutex_unlock(&w->mu);
    struct ckpt_image *im = &w->img[i];
    size_t cap = (stage_bytes + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
    if (cap > im->cap) {
        free(im->buf);
        im->buf = aligned_alloc(CKPT_DIRECT_ALIGN, cap);
        im->cap = im->buf ? cap : 0;
    }
    if (im->buf && extents > im->ext_cap) {
        struct ckpt_extent *e = realloc(im->ext, extents * sizeof *e);
        if (e) {
            im->ext = e;
            im->ext_cap = extents;
        }
    }
    if (!im->buf || extents > im->ext_cap) {
        pthread_mutex_lock(&w->mu);
        w->state[i] = CKPT_IMG_FREE;
        pthread_mutex_unlock(&w->mu);
        return NULL;
    }
    im->next = 0;
    im->total = 0;
    return im;
}

/* Whether O_DIRECT is still worth trying (a writer may have found out). */
bool ckpt_writer_direct_ok(struct ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    bool ok = !w->ps->no_direct;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* The threads start with the first image (a save of one bundle, or none
 * that could start, writes here: slower, still correct). */
int ckpt_writer_submit(struct ckpt_writer *w, struct ckpt_image *im)
{
    int i = (int)(im - w->img);
    if (!w->inline_only && w->started < w->nth) {
        while (w->started < w->nth &&
               pthread_create(&w->th[w->started], NULL, writer_main, w) == 0)
            w->started++;
        if (!w->started)
            w->inline_only = true;
        w->nth = w->started;
    }
    if (w->inline_only) {
        int rc = w->err ? w->err : write_image(w, im);
        w->err = w->err ? w->err : rc;
        w->state[i] = CKPT_IMG_FREE;
        return rc;
    }
    pthread_mutex_lock(&w->mu);
    int rc = w->err;
    w->state[i] = rc ? CKPT_IMG_FREE : CKPT_IMG_QUEUED;
    w->seq[i] = w->next_seq++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ckpt_writer_finish(struct ckpt_writer *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true; /* the writers drain the queue first */
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        for (int t = 0; t < w->started; t++)
            pthread_join(w->th[t], NULL);
        w->started = 0;
    }
    int rc = w->err;
    for (int i = 0; i < CKPT_MAX_WRITERS + 1; i++) {
        free(w->img[i].buf);
        free(w->img[i].ext);
        memset(&w->img[i], 0, sizeof w->img[i]);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return rc;
}
