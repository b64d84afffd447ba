#include "inproc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

/* ---- point to point ------------------------------------------------------------ */

struct ireq {
    struct ireq *next;
    bool send, done;
    int src, dst, tag;
    void *buf;
    size_t bytes;
    int status;
};

/* ---- collectives ----------------------------------------------------------------- */

enum coll_kind { CO_AR_SUM, CO_AR_MAX, CO_AR16, CO_RS, CO_RS16, CO_AG, CO_AG16 };

struct coll_arg {
    enum coll_kind kind;
    enum whale_dtype dt; /* 16-bit kinds */
    size_t n;
    const void *send;
    void *recv;
};

struct inproc_world {
    int size;
    bool offer16;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ireq *sends, *recvs; /* unmatched, in posting order */
    long messages, collectives;
    long elems[3];        /* by enum inproc_coll */
    /* the collective in progress: arrivals, generation, its result */
    int co_arrived;
    unsigned co_gen;
    int co_status;
    struct coll_arg *co;  /* (size) */
};

/* A completed collective's request: every collective completes before it
 * returns, so its request is this marker. */
static char coll_done;

struct inproc_world *inproc_create(int size)
{
    struct inproc_world *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->size = size;
    w->offer16 = true;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->co = calloc((size_t)size, sizeof *w->co);
    return w;
}

void inproc_destroy(struct inproc_world *w)
{
    if (!w)
        return;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->co);
    free(w);
}

void inproc_set_16(struct inproc_world *w, bool on)
{
    w->offer16 = on;
}

long inproc_messages(struct inproc_world *w)
{
    return w->messages;
}

long inproc_collectives(struct inproc_world *w)
{
    return w->collectives;
}

long inproc_coll_elems(struct inproc_world *w, enum inproc_coll kind)
{
    return w->elems[kind];
}

static enum inproc_coll kind_of(enum coll_kind k)
{
    switch (k) {
    case CO_RS:
    case CO_RS16:
        return INPROC_REDUCE_SCATTER;
    case CO_AG:
    case CO_AG16:
        return INPROC_ALLGATHER;
    default:
        return INPROC_ALLREDUCE;
    }
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
    if (!r)
        return WHALE_ENOMEM;
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
    if (req == &coll_done)
        return 0;
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
    if (req == &coll_done) {
        *done = true;
        return 0;
    }
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

static bool ip_done(struct whale_par_comm *c, void *req)
{
    if (req == &coll_done)
        return true;
    struct inproc_world *w = c->impl;
    struct ireq *r = req;
    pthread_mutex_lock(&w->mu);
    bool d = r->done;
    pthread_mutex_unlock(&w->mu);
    return d;
}

/* element i of a 16-bit buffer as fp32 / a fp32 value rounded back */
static float get16(enum whale_dtype dt, const uint16_t *b, size_t i)
{
    return dt == WHALE_FLOAT16 ? whale_fp16_to_float(b[i]) : whale_bf16_to_float(b[i]);
}

static uint16_t put16(enum whale_dtype dt, float f)
{
    return dt == WHALE_FLOAT16 ? whale_float_to_fp16(f) : whale_float_to_bf16(f);
}

/* Reduction of element i over the ranks' sends, in rank order (fp32). */
static float red_at(struct inproc_world *w, size_t i)
{
    const struct coll_arg *a = w->co;
    float acc = 0;
    for (int r = 0; r < w->size; r++) {
        float x;
        if (a[0].kind == CO_AR16 || a[0].kind == CO_RS16)
            x = get16(a[0].dt, a[r].send, i);
        else
            x = ((const float *)a[r].send)[i];
        if (a[0].kind == CO_AR_MAX)
            acc = r == 0 || x > acc ? x : acc;
        else
            acc = r == 0 ? x : acc + x;
    }
    return acc;
}

/* The last rank to arrive: every rank's result. Results go through a
 * temporary first, since a receive buffer may be (or overlap) a send. */
static int coll_compute(struct inproc_world *w)
{
    const struct coll_arg *a = w->co;
    for (int r = 1; r < w->size; r++)
        if (a[r].kind != a[0].kind || a[r].n != a[0].n || a[r].dt != a[0].dt)
            return WHALE_EINVAL;
    const size_t n = a[0].n, P = (size_t)w->size;
    const bool b16 = a[0].kind == CO_AR16 || a[0].kind == CO_RS16 || a[0].kind == CO_AG16;
    const size_t es = b16 ? 2 : 4;
    /* elements of one rank's result */
    size_t m = (a[0].kind == CO_AG || a[0].kind == CO_AG16) ? P * n : n;
    unsigned char *tmp = malloc((a[0].kind == CO_RS || a[0].kind == CO_RS16 ? P : 1) * m * es + 1);
    if (!tmp)
        return WHALE_ENOMEM;
    switch (a[0].kind) {
    case CO_AR_SUM:
    case CO_AR_MAX:
    case CO_AR16:
        for (size_t i = 0; i < n; i++) {
            float v = red_at(w, i);
            if (b16)
                ((uint16_t *)tmp)[i] = put16(a[0].dt, v);
            else
                ((float *)tmp)[i] = v;
        }
        for (size_t r = 0; r < P; r++)
            memcpy(a[r].recv, tmp, n * es);
        break;
    case CO_RS:
    case CO_RS16:
        for (size_t i = 0; i < P * n; i++) {
            float v = red_at(w, i);
            if (b16)
                ((uint16_t *)tmp)[i] = put16(a[0].dt, v);
            else
                ((float *)tmp)[i] = v;
        }
        for (size_t r = 0; r < P; r++)
            memcpy(a[r].recv, tmp + r * n * es, n * es);
        break;
    case CO_AG:
    case CO_AG16:
        for (size_t r = 0; r < P; r++)
            memcpy(tmp + r * n * es, a[r].send, n * es);
        for (size_t r = 0; r < P; r++)
            memcpy(a[r].recv, tmp, P * n * es);
        break;
    }
    free(tmp);
    return 0;
}

static int coll(struct whale_par_comm *c, struct coll_arg arg, void **req)
{
    struct inproc_world *w = c->impl;
    pthread_mutex_lock(&w->mu);
    unsigned gen = w->co_gen;
    w->co[c->rank] = arg;
    if (++w->co_arrived == w->size) {
        w->co_status = coll_compute(w);
        w->co_arrived = 0;
        w->collectives++;
        w->elems[kind_of(w->co[0].kind)] += (long)w->co[0].n;
        w->co_gen++;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (w->co_gen == gen)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    int st = w->co_status;
    pthread_mutex_unlock(&w->mu);
    if (req)
        *req = &coll_done;
    return st;
}

static int ip_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    return coll(c, (struct coll_arg){ op == WHALE_MAX ? CO_AR_MAX : CO_AR_SUM, WHALE_FLOAT32, n,
                                      buf, buf }, NULL);
}

static int ip_iallreduce(struct whale_par_comm *c, float *buf, size_t n, void **req)
{
    return coll(c, (struct coll_arg){ CO_AR_SUM, WHALE_FLOAT32, n, buf, buf }, req);
}

static int ip_ireduce_scatter(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                              void **req)
{
    return coll(c, (struct coll_arg){ CO_RS, WHALE_FLOAT32, n, send, recv }, req);
}

static int ip_iallgather(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                         void **req)
{
    return coll(c, (struct coll_arg){ CO_AG, WHALE_FLOAT32, n, send, recv }, req);
}

static int ip_iallreduce16(struct whale_par_comm *c, uint16_t *buf, size_t n,
                           enum whale_dtype dt, void **req)
{
    return coll(c, (struct coll_arg){ CO_AR16, dt, n, buf, buf }, req);
}

static int ip_ireduce_scatter16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                                size_t n, enum whale_dtype dt, void **req)
{
    return coll(c, (struct coll_arg){ CO_RS16, dt, n, send, recv }, req);
}

static int ip_iallgather16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                           size_t n, void **req)
{
    return coll(c, (struct coll_arg){ CO_AG16, WHALE_BFLOAT16, n, send, recv }, req);
}

void inproc_comm(struct inproc_world *w, int rank, struct whale_par_comm *out)
{
    *out = (struct whale_par_comm){
        .rank = rank, .size = w->size, .impl = w, .isend = ip_isend, .irecv = ip_irecv,
        .wait = ip_wait, .test = ip_test, .done = ip_done, .allreduce = ip_allreduce,
        .iallreduce = ip_iallreduce, .ireduce_scatter = ip_ireduce_scatter,
        .iallgather = ip_iallgather,
        .iallreduce16 = w->offer16 ? ip_iallreduce16 : NULL,
        .ireduce_scatter16 = w->offer16 ? ip_ireduce_scatter16 : NULL,
        .iallgather16 = w->offer16 ? ip_iallgather16 : NULL };
}

/* ---- threads as ranks ----------------------------------------------------------- */

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
    if (!t || !a) {
        free(t);
        free(a);
        return WHALE_ENOMEM;
    }
    int rc = 0, started = 0;
    for (int r = 0; r < size; r++) {
        a[r] = (struct runarg){ r, fn, arg, 0 };
        if (pthread_create(&t[r], NULL, trampoline, &a[r])) {
            /* ranks already started would wait for this one forever */
            fprintf(stderr, "inproc_run: cannot start rank %d of %d\n", r, size);
            abort();
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        pthread_join(t[r], NULL);
        if (a[r].rc && !rc)
            rc = a[r].rc;
    }
    free(t);
    free(a);
    return rc;
}

/* ---- log capture ------------------------------------------------------------------ */

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
