/* The bundle writer: a second thread that writes one bundle's file image
 * while the save thread hashes, encodes and stages the next one (double
 * buffer). Written one after the other, the CPU part (hash + copy, ~0.3 s
 * per GB here) and the device part (~0.37 s per GB with O_DIRECT) added up
 * and persist reached 47-59 % of `dd oflag=direct`; overlapped, the slower
 * of the two sets the pace.
 *
 * Ownership: the save thread fills the free image (ckpt_writer_image), then
 * ckpt_writer_submit waits until the writer has finished the previous image
 * and hands this one over. Only the writer touches ps->fds/nfds and the
 * fault counters while it runs; ckpt_writer_finish joins it, after which
 * the save thread owns everything again. */
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

/* pwrite of a whole extent, counting bytes for the disk-full test hook. */
static int pwrite_all(int fd, const unsigned char *b, size_t len, uint64_t off, ckpt_fault *f)
{
    while (len) {
        size_t n = len > (1u << 26) ? (1u << 26) : len;
        if (f->enospc_after >= 0 && f->written + (long long)n > f->enospc_after) {
            errno = ENOSPC;
            return -1;
        }
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        f->written += w;
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
 * (the padded header stays valid: safetensors allows it). Write-back is
 * started at once; the fsync of every file comes at the end of the save. */
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
    if (werr) {
        whale_error("checkpoint step %lld: rank %d: writing %s: %s", (long long)ps->step,
                    ck->cfg.rank, path, strerror(werr));
        close(fd);
        return errno_to_whale(werr);
    }
    sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    ps->fds[ps->nfds++] = fd;
    if (ck->fault.kill_rank == ck->cfg.rank) /* test hook: kill -9 in the middle of a save */
        raise(SIGKILL);
    return 0;
}

static void *writer_main(void *arg)
{
    struct ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->queued < 0 && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->queued < 0)
            break;
        struct ckpt_image *im = &w->img[w->queued];
        pthread_mutex_unlock(&w->mu);
        uint64_t tr0 = whale_trace_now();
        int rc = w->err ? 0 : write_image(w, im);
        whale_trace_span("ckpt", "ckpt write", tr0, -1, -1);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->err)
            w->err = rc;
        w->queued = -1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void ckpt_writer_init(struct ckpt_writer *w, whale_ckpt *ck, struct persist *ps)
{
    memset(w, 0, sizeof *w);
    w->ck = ck;
    w->ps = ps;
    w->queued = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

struct ckpt_image *ckpt_writer_image(struct ckpt_writer *w, size_t stage_bytes, size_t extents)
{
    struct ckpt_image *im = &w->img[w->next];
    size_t cap = (stage_bytes + CKPT_DIRECT_ALIGN - 1) / CKPT_DIRECT_ALIGN * CKPT_DIRECT_ALIGN;
    if (cap > im->cap) {
        free(im->buf);
        im->buf = aligned_alloc(CKPT_DIRECT_ALIGN, cap);
        im->cap = im->buf ? cap : 0;
        if (!im->buf)
            return NULL;
    }
    if (extents > im->ext_cap) {
        struct ckpt_extent *e = realloc(im->ext, extents * sizeof *e);
        if (!e)
            return NULL;
        im->ext = e;
        im->ext_cap = extents;
    }
    im->next = 0;
    im->total = 0;
    return im;
}

/* Whether O_DIRECT is still worth trying (the writer may have found out). */
bool ckpt_writer_direct_ok(struct ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    bool ok = !w->ps->no_direct;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Without a thread (one bundle, or the thread could not start) the image
 * is written right here. */
int ckpt_writer_submit(struct ckpt_writer *w, struct ckpt_image *im)
{
    if (!w->have_thread && !w->no_thread) {
        if (pthread_create(&w->th, NULL, writer_main, w) == 0)
            w->have_thread = true;
        else
            w->no_thread = true; /* written inline: slower, still correct */
    }
    if (!w->have_thread) {
        int rc = w->err ? w->err : write_image(w, im);
        w->err = w->err ? w->err : rc;
        return rc;
    }
    pthread_mutex_lock(&w->mu);
    while (w->queued >= 0)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->err;
    if (!rc) {
        w->queued = (int)(im - w->img);
        w->next ^= 1; /* the other buffer is free: the writer finished it */
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ckpt_writer_finish(struct ckpt_writer *w)
{
    if (w->have_thread) {
        pthread_mutex_lock(&w->mu);
        while (w->queued >= 0)
            pthread_cond_wait(&w->cv, &w->mu);
        w->stop = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        w->have_thread = false;
    }
    int rc = w->err;
    for (int i = 0; i < 2; i++) {
        free(w->img[i].buf);
        free(w->img[i].ext);
        memset(&w->img[i], 0, sizeof w->img[i]);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return rc;
}
