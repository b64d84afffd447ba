/* Pipeline schedules as pure functions: each pipeline rank's ordered list of
 * forward/backward passes with the peers it receives from and sends to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/pipeline.h"

/* Fill the peers of a pass of (chunk) on `rank` from the virtual stage chain. */
static void set_peers(struct whale_pp_op *o, int p, int v, int rank)
{
    int S = p * v;
    int s = whale_pp_vstage(p, rank, o->chunk);
    int prev = s > 0 ? (s - 1) % p : -1;
    int next = s < S - 1 ? (s + 1) % p : -1;
    if (o->kind == WHALE_PP_FORWARD) {
        o->recv_peer = prev;
        o->send_peer = next;
    } else {
        o->recv_peer = next;
        o->send_peer = prev;
    }
}

static void push(struct whale_pp_schedule *s, int kind, int chunk, int mb)
{
    struct whale_pp_op *o = &s->ops[s->n++];
    o->kind = (int8_t)kind;
    o->chunk = (int16_t)chunk;
    o->mb = mb;
    set_peers(o, s->p, s->v, s->rank);
}

/* Interleaved: the k-th forward (backward) pass of this rank, in Megatron's
 * order. Virtual micro-batches are taken in groups of p micro-batches: p of
 * chunk 0, p of chunk 1, ..., then the next p micro-batches. Backwards walk
 * the chunks in reverse. */
static void interleaved_id(int p, int v, int k, bool forward, int *chunk, int *mb)
{
    int in_group = k % (p * v);
    int c = in_group / p;
    *chunk = forward ? c : v - 1 - c;
    *mb = (k / (p * v)) * p + (k % p);
}

int whale_pp_schedule_build(enum whale_schedule kind, int p, int v, int m, int rank,
                            struct whale_pp_schedule *out)
{
    memset(out, 0, sizeof *out);
    if (p < 1 || v < 1 || m < 1 || rank < 0 || rank >= p) {
        whale_error("pipeline schedule: need p >= 1, v >= 1, m >= 1 and 0 <= rank < p "
                    "(got p=%d v=%d m=%d rank=%d)", p, v, m, rank);
        return WHALE_EINVAL;
    }
    if (kind != WHALE_SCHED_INTERLEAVED && v != 1) {
        whale_error("pipeline schedule %s: virtual stages per rank must be 1 (got %d); "
                    "use the interleaved schedule", whale_schedule_name(kind), v);
        return WHALE_EINVAL;
    }
    if (kind == WHALE_SCHED_INTERLEAVED && m % p != 0) {
        whale_error("interleaved pipeline schedule: micro-batches (%d) must be a multiple "
                    "of the pipeline degree (%d)", m, p);
        return WHALE_EINVAL;
    }
    if ((long)2 * p * v * m >= (1L << 19)) {
        whale_error("pipeline schedule: p*v*m = %ld is too large", (long)p * v * m);
        return WHALE_EINVAL;
    }
    out->kind = kind;
    out->p = p;
    out->v = v;
    out->m = m;
    out->rank = rank;
    out->ops = calloc((size_t)2 * v * m, sizeof *out->ops);
    if (!out->ops)
        return WHALE_ENOMEM;

    switch (kind) {
    case WHALE_SCHED_GPIPE:
        out->warmup = m;
        for (int i = 0; i < m; i++)
            push(out, WHALE_PP_FORWARD, 0, i);
        for (int i = 0; i < m; i++)
            push(out, WHALE_PP_BACKWARD, 0, i);
        break;
    case WHALE_SCHED_1F1B: {
        int w = p - rank - 1;
        if (w > m)
            w = m;
        out->warmup = w;
        int f = 0, b = 0;
        for (; f < w; f++)
            push(out, WHALE_PP_FORWARD, 0, f);
        while (f < m) {
            push(out, WHALE_PP_FORWARD, 0, f++);
            push(out, WHALE_PP_BACKWARD, 0, b++);
        }
        while (b < m)
            push(out, WHALE_PP_BACKWARD, 0, b++);
        break;
    }
    case WHALE_SCHED_INTERLEAVED: {
        int total = m * v;
        int w;
        if (m == p) {
            /* Megatron: with one micro-batch per rank in flight the steady
             * state is empty; run every forward first. */
            w = total;
        } else {
            w = (p - rank - 1) * 2 + (v - 1) * p;
            if (w > total)
                w = total;
        }
        out->warmup = w;
        int f = 0, b = 0, c, mb;
        for (; f < w; f++) {
            interleaved_id(p, v, f, true, &c, &mb);
            push(out, WHALE_PP_FORWARD, c, mb);
        }
        while (f < total) {
            interleaved_id(p, v, f++, true, &c, &mb);
            push(out, WHALE_PP_FORWARD, c, mb);
            interleaved_id(p, v, b++, false, &c, &mb);
            push(out, WHALE_PP_BACKWARD, c, mb);
        }
        while (b < total) {
            interleaved_id(p, v, b++, false, &c, &mb);
            push(out, WHALE_PP_BACKWARD, c, mb);
        }
        break;
    }
    default:
        free(out->ops);
        out->ops = NULL;
        whale_error("pipeline schedule: unknown kind %d", (int)kind);
        return WHALE_EINVAL;
    }
    return 0;
}

void whale_pp_schedule_free(struct whale_pp_schedule *s)
{
    if (!s)
        return;
    free(s->ops);
    s->ops = NULL;
    s->n = 0;
}

int whale_pp_schedule_format(const struct whale_pp_schedule *s, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = 0;
    for (int i = 0; i < s->n; i++) {
        const struct whale_pp_op *o = &s->ops[i];
        char one[32];
        int k = snprintf(one, sizeof one, "%s%c%d.%d", i ? " " : "",
                         o->kind == WHALE_PP_FORWARD ? 'F' : 'B', o->chunk, o->mb);
        if (used + (size_t)k < len)
            memcpy(buf + used, one, (size_t)k + 1);
        else if (len)
            buf[len - 1] = 0;
        used += (size_t)k;
    }
    return (int)used;
}

int whale_pp_tag(enum whale_pp_kind kind, int dst_vstage, int mb, int S, int m)
{
    return ((int)kind * S + dst_vstage) * m + mb;
}
