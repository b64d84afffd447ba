/* The mover thread and its queue (see mover.h). */
#include "mover.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "whale/error.h"
#include "whale/clock.h"

struct eng_mover {
    eng_copy_fn copy;
    void *ctx;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued / stop / hold released */
    pthread_cond_t done_cv; /* a move finished */
    struct eng_move **q;    /* ring of cap entries, each move at most once */
    size_t cap, head, n;
    bool stop, hold;
    double busy;            /* seconds spent copying since the last read */
    int64_t bytes;
};

/* Under m->mu, with mv in state 3 (owned by the caller): copy it unlocked,
 * then mark it done. */
static void run_move(struct eng_mover *m, struct eng_move *mv)
{
    void *dst = mv->dst;
    const void *src = mv->src;
    size_t len = mv->len;
    pthread_mutex_unlock(&m->mu);
    double t0 = whale_now_s();
    m->copy(m->ctx, dst, src, len);
    double dt = whale_now_s() - t0;
    pthread_mutex_lock(&m->mu);
    m->busy += dt;
    m->bytes += (int64_t)len;
    atomic_store(&mv->state, 2);
    pthread_cond_broadcast(&m->done_cv);
}

static void *mover_main(void *arg)
{
    struct eng_mover *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while ((!m->n || m->hold) && !m->stop)
            pthread_cond_wait(&m->cv, &m->mu);
        if (!m->n)
            break; /* stop, and nothing left */
        struct eng_move *mv = m->q[m->head];
        m->head = (m->head + 1) % m->cap;
        m->n--;
        mv->queued = false;
        if (atomic_load(&mv->state) != 1)
            continue; /* a waiter ran it (eng_mover_wait) */
        atomic_store(&mv->state, 3);
        run_move(m, mv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int eng_mover_create(size_t cap, eng_copy_fn copy, void *ctx, struct eng_mover **out)
{
    *out = NULL;
    if (!cap || !copy)
        return WHALE_EINVAL;
    struct eng_mover *m = calloc(1, sizeof *m);
    if (!m || !(m->q = calloc(cap, sizeof *m->q))) {
        free(m);
        return WHALE_ENOMEM;
    }
    m->cap = cap;
    m->copy = copy;
    m->ctx = ctx;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    pthread_cond_init(&m->done_cv, NULL);
    if (pthread_create(&m->th, NULL, mover_main, m)) {
        pthread_cond_destroy(&m->cv);
        pthread_cond_destroy(&m->done_cv);
        pthread_mutex_destroy(&m->mu);
        free(m->q);
        free(m);
        return WHALE_ENOMEM;
    }
    *out = m;
    return 0;
}

void eng_mover_destroy(struct eng_mover *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    m->hold = false;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->th, NULL);
    pthread_cond_destroy(&m->cv);
    pthread_cond_destroy(&m->done_cv);
    pthread_mutex_destroy(&m->mu);
    free(m->q);
    free(m);
}

void eng_mover_post(struct eng_mover *m, struct eng_move *mv, void *dst, const void *src,
                    size_t len)
{
    if (!len) {
        mv->dst = dst;
        mv->src = src;
        mv->len = 0;
        atomic_store(&mv->state, 2);
        return;
    }
    pthread_mutex_lock(&m->mu);
    mv->dst = dst;
    mv->src = src;
    mv->len = len;
    if (mv->queued) { /* its old entry (run by a waiter) is still queued: it serves */
        atomic_store(&mv->state, 1);
    } else if (m->n < m->cap) {
        atomic_store(&mv->state, 1);
        m->q[(m->head + m->n) % m->cap] = mv;
        m->n++;
        mv->queued = true;
        pthread_cond_signal(&m->cv);
    } else { /* more distinct moves than the queue was sized for: copy here */
        atomic_store(&mv->state, 3);
        run_move(m, mv);
    }
    pthread_mutex_unlock(&m->mu);
}

double eng_mover_wait(struct eng_mover *m, struct eng_move *mv)
{
    int s = atomic_load(&mv->state);
    if (!m || (s != 1 && s != 3))
        return 0;
    double t0 = whale_now_s();
    pthread_mutex_lock(&m->mu);
    if (atomic_load(&mv->state) == 1) {
        /* still queued: copy it here rather than wait for a thread wake-up */
        atomic_store(&mv->state, 3);
        run_move(m, mv);
    }
    while (atomic_load(&mv->state) == 3)
        pthread_cond_wait(&m->done_cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    return whale_now_s() - t0;
}

double eng_mover_take_busy(struct eng_mover *m, int64_t *bytes)
{
    if (!m) {
        if (bytes)
            *bytes = 0;
        return 0;
    }
    pthread_mutex_lock(&m->mu);
    double t = m->busy;
    m->busy = 0;
    if (bytes)
        *bytes = m->bytes;
    m->bytes = 0;
    pthread_mutex_unlock(&m->mu);
    return t;
}

void eng_mover_hold(struct eng_mover *m, bool hold)
{
    pthread_mutex_lock(&m->mu);
    m->hold = hold;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

size_t eng_mover_queued(struct eng_mover *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}
