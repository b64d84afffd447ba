/* Deferred snapshot of host pieces, copied in slices by whoever gets there.
 *
 * With SNAPSHOT_DEFERRED the save thread copies the caller's tensors into
 * the snapshot buffer while forward/backward run. If the copy is not done
 * when the caller reaches whale_ckpt_fence (a short step, or a busy
 * machine), the caller used to sleep until the save thread finished it;
 * now it takes slices too, so the stall is at most the remaining copy
 * shared by two threads, and usually nothing (measured: the fence's stall
 * with a 400 ms compute window is in contrib/bench/ckpt-bench.sh).
 *
 * Slices are SNAP_SLICE bytes of one piece; `next` hands them out, `done`
 * counts copied bytes; the thread that completes the last one sets
 * snap_done (under ck->mu). */
#include "save_internal.h"

#include <string.h>

#define SNAP_SLICE ((size_t)4 << 20) /* large enough to amortise the lock, small enough to share */

static size_t slices_of(size_t bytes)
{
    return bytes ? (bytes + SNAP_SLICE - 1) / SNAP_SLICE : 1;
}

bool ckpt_snap_prepare(whale_ckpt *ck, struct job *j)
{
    size_t off = 0, n = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (j->p[i].device)
            return false; /* device pieces: the worker's stream path (saver.c) */
        j->p[i].src = ck->buf + off;
        off += ckpt_snap_stride(j->p[i].bytes);
        n += slices_of(j->p[i].bytes);
    }
    ck->snap_slices = n;
    atomic_store(&ck->snap_next, 0);
    ck->snap_copied = 0;
    return true;
}

/* Copies slices until none is left to take; returns when this thread has
 * nothing more to do (others may still be copying theirs). */
void ckpt_snap_help(whale_ckpt *ck)
{
    struct job *j = &ck->job;
    size_t piece = 0, first = 0; /* slice index of piece's first slice */
    for (;;) {
        size_t k = atomic_fetch_add(&ck->snap_next, 1);
        if (k >= ck->snap_slices)
            return;
        /* slices are taken in increasing order: walk forward */
        while (k >= first + slices_of(j->p[piece].bytes)) {
            first += slices_of(j->p[piece].bytes);
            piece++;
        }
        const struct job_piece *p = &j->p[piece];
        size_t a = (k - first) * SNAP_SLICE, len = p->bytes - a < SNAP_SLICE ? p->bytes - a
                                                                              : SNAP_SLICE;
        if (len)
            memcpy((unsigned char *)p->src + a, (const unsigned char *)p->user + a, len);
        pthread_mutex_lock(&ck->mu);
        if (++ck->snap_copied == ck->snap_slices) {
            ck->snap_done = true;
            pthread_cond_broadcast(&ck->cv);
        }
        pthread_mutex_unlock(&ck->mu);
    }
}
