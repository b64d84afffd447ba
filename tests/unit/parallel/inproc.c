#include "inproc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include <stdio.h>

struct ireq {
    struct ireq *next;
    bool send, done;
    int src, dst, tag;
    void *buf;
    size_t bytes;
    int status;
};

struct inproc_world {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ireq *sends, *recvs; /* unmatched, in posting order */
    long messages;
    /* allreduce */
    int ar_arrived;
    unsigned ar_gen;
    float *ar_acc;
    size_t ar_n;
    float **ar_bufs;
};

struct inproc_world *inproc_create(int size)
{
    struct inproc_world *w = calloc(1, sizeof *w);
    w->size = size;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->ar_bufs = calloc((size_t)size, sizeof *w->ar_bufs);
    return w;
}

void inproc_destroy(struct inproc_world *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->ar_bufs);
    free(w->ar_acc);
    free(w);
}

long inproc_messages(struct inproc_world *w)
{
    return w->messages;
}

/* Under the lock: match r against the opposite queue (first in order). */
static void match(struct inproc_world *w, struct ireq *r)
{
    struct ireq **q = r->send ? &w->recvs : &w->sends;
    for (struct ireq **pp = q; *pp; pp = &(*pp)->next) {
        struct ireq *o = *pp;
        if (o->src == r->src && o->dst == r->dst && o->tag == r->tag) {
            *pp = o->next;
            struct ireq *s = r->send ? r : o, *rv = r->send ? o : r;
            if (s->bytes != rv->bytes) {
                s->status = rv->status = WHALE_EINVAL;
            } else {
                memcpy(rv->buf, s->buf, s->bytes);
            }
            s->done = rv->done = true;
            w->messages++;
            pthread_cond_broadcast(&w->cv);
            return;
        }
    }
    struct ireq **tail = r->send ? &w->sends : &w->recvs;
    while (*tail)
        tail = &(*tail)->next;
    r->next = NULL;
    *tail = r;
}

static int post(struct whale_par_comm *c, bool send, void *buf, size_t bytes, int peer, int tag,
                void **req)
{
    struct inproc_world *w = c->impl;
    if (peer < 0 || peer >= w->size || peer == c->rank)
        return WHALE_EINVAL;
    struct ireq *r = calloc(1, sizeof *r);
    r->send = send;
    r->src = send ? c->rank : peer;
    r->dst = send ? peer : c->rank;
    r->tag = tag;
    r->buf = buf;
    r->bytes = bytes;
    pthread_mutex_lock(&w->mu);
    match(w, r);
    pthread_mutex_unlock(&w->mu);
    *req = r;
    return 0;
}

static int ip_isend(struct whale_par_comm *c, const void *buf, size_t bytes, int peer, int tag,
                    void **req)
{
    return post(c, true, (void *)buf, bytes, peer, tag, req);
}

static int ip_irecv(struct whale_par_comm *c, void *buf, size_t bytes, int peer, int tag,
                    void **req)
{
    return post(c, false, buf, bytes, peer, tag, req);
}

static int ip_wait(struct whale_par_comm *c, void *req)
{
    struct inproc_world *w = c->impl;
    struct ireq *r = req;
    pthread_mutex_lock(&w->mu);
    while (!r->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    int st = r->status;
    free(r);
    return st;
}

static int ip_test(struct whale_par_comm *c, void *req, bool *done)
{
    struct inproc_world *w = c->impl;
    struct ireq *r = req;
    pthread_mutex_lock(&w->mu);
    *done = r->done;
    pthread_mutex_unlock(&w->mu);
    if (!*done)
        return 0;
    int st = r->status;
    free(r);
    return st;
}

static int ip_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    struct inproc_world *w = c->impl;
    pthread_mutex_lock(&w->mu);
    unsigned gen = w->ar_gen;
    w->ar_bufs[c->rank] = buf;
    if (++w->ar_arrived == w->size) {
        /* reduce in rank order, so every run sums identically */
        free(w->ar_acc);
        w->ar_acc = malloc(n * sizeof(float) + 1);
        w->ar_n = n;
        memcpy(w->ar_acc, w->ar_bufs[0], n * sizeof(float));
        for (int r = 1; r < w->size; r++)
            for (size_t i = 0; i < n; i++) {
                float x = w->ar_bufs[r][i];
                if (op == WHALE_MAX)
                    w->ar_acc[i] = x > w->ar_acc[i] ? x : w->ar_acc[i];
                else
                    w->ar_acc[i] += x;
            }
        for (int r = 0; r < w->size; r++)
            memcpy(w->ar_bufs[r], w->ar_acc, n * sizeof(float));
        w->ar_arrived = 0;
        w->ar_gen++;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (w->ar_gen == gen)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void inproc_comm(struct inproc_world *w, int rank, struct whale_par_comm *out)
{
    *out = (struct whale_par_comm){ .rank = rank, .size = w->size, .impl = w,
                                    .isend = ip_isend, .irecv = ip_irecv, .wait = ip_wait,
                                    .test = ip_test, .allreduce = ip_allreduce };
}

struct runarg {
    int rank;
    int (*fn)(int, void *);
    void *arg;
    int rc;
};

static void *trampoline(void *p)
{
    struct runarg *a = p;
    a->rc = a->fn(a->rank, a->arg);
    return NULL;
}

int inproc_run(int size, int (*fn)(int rank, void *arg), void *arg)
{
    pthread_t *t = calloc((size_t)size, sizeof *t);
    struct runarg *a = calloc((size_t)size, sizeof *a);
    for (int r = 0; r < size; r++) {
        a[r] = (struct runarg){ r, fn, arg, 0 };
        pthread_create(&t[r], NULL, trampoline, &a[r]);
    }
    int rc = 0;
    for (int r = 0; r < size; r++) {
        pthread_join(t[r], NULL);
        if (a[r].rc && !rc)
            rc = a[r].rc;
    }
    free(t);
    free(a);
    return rc;
}

static char last_line[1024];

static void capture(int level, const char *line, void *user)
{
    (void)level;
    (void)user;
    snprintf(last_line, sizeof last_line, "%s", line);
}

void test_log_capture(bool on)
{
    last_line[0] = 0;
    whale_log_set_sink(on ? capture : NULL, NULL);
}

const char *test_log_last(void)
{
    return last_line;
}
