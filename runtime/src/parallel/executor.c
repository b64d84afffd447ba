/* Pipeline executor: runs one rank's pass list with non-blocking transfers.
 *
 * Receives are posted `lookahead` passes ahead of the pass that consumes
 * them, so a transfer overlaps the compute before it; a pass blocks only on
 * its own input. Sends are issued right after the pass that produces them
 * and reaped lazily (the downstream rank consumes them while this rank
 * computes on; between passes a send is only tested once it has completed,
 * so reaping costs no lock and no progress call on the critical path); all
 * are complete when the step returns. Deadlock freedom is
 * therefore exactly the property whale_pp_simulate checks. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/pipeline.h"
#include "whale/trace.h"
#include "whale/clock.h"

struct inflight {
    void *req;
    int kind, chunk, mb;
    uint64_t t0;
};

/* Reap completed sends (all of them, blocking, when `all`). */
static int reap_sends(struct whale_par_comm *c, const struct whale_pp_hooks *h,
                      struct inflight *snd, int *nsnd, bool all, struct whale_pp_stats *st)
{
    int k = 0, rc = 0;
    for (int i = 0; i < *nsnd; i++) {
        bool done = false;
        int e;
        if (all) {
            double w0 = whale_now_s();
            e = c->wait(c, snd[i].req);
            st->t_wait += whale_now_s() - w0;
            done = true;
        } else if (c->done && !c->done(c, snd[i].req)) {
            /* still moving: leave it to the progress thread. A test here
             * would take the engine's lock (just woken by the isend) and
             * progress UCX: 15-60 us between two passes, on the critical
             * path of every pass of the steady state. */
            e = 0;
        } else {
            e = c->test(c, snd[i].req, &done);
        }
        if (e && !rc)
            rc = e;
        if (done || e) {
            if (whale_trace_on())
                whale_trace_span("send", snd[i].kind ? "send grad" : "send act", snd[i].t0,
                                 snd[i].chunk, snd[i].mb);
            if (h->sent && !e)
                h->sent(h->user, (enum whale_pp_kind)snd[i].kind, snd[i].chunk, snd[i].mb);
        } else {
            snd[k++] = snd[i];
        }
    }
    *nsnd = k;
    return rc;
}

int whale_pp_run(struct whale_par_comm *c, const struct whale_pp_schedule *s,
                 const struct whale_pp_hooks *h, struct whale_pp_stats *st_out)
{
    struct whale_pp_stats st = { 0 };
    if (c->rank != s->rank || c->size != s->p) {
        whale_error("pipeline executor: schedule is for rank %d of %d but the pipeline group "
                    "has rank %d of %d", s->rank, s->p, c->rank, c->size);
        return WHALE_EINVAL;
    }
    if (!h->forward || !h->backward || (s->p * s->v > 1 && (!h->recv_buf || !h->send_buf))) {
        whale_error("pipeline executor: forward/backward (and buffers for p > 1) are required");
        return WHALE_EINVAL;
    }
    int n = s->n, p = s->p, v = s->v, m = s->m, S = p * v;
    int la = h->lookahead > 0 ? h->lookahead : 1;
    void **rreq = calloc((size_t)n, sizeof *rreq);
    struct inflight *snd = calloc((size_t)n, sizeof *snd);
    int *flags = calloc((size_t)n, sizeof *flags);
    int *seen = calloc((size_t)2 * v, sizeof *seen);
    /* Passes whose input comes from this very rank (v > 1 chunks on a
     * pipeline of one, or the chain wrapping around p = 1): no transfer, the
     * consumer copies from the producer's buffer, which stays reserved
     * (`sent` not called) until then. */
    const void **self_src = calloc((size_t)n, sizeof *self_src);
    int *op_of = malloc((size_t)2 * v * m * sizeof *op_of);
    int rc = 0, nsnd = 0;
    if (!rreq || !snd || !flags || !seen || !self_src || !op_of) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    /* first / last pass of each (kind, chunk) */
    for (int i = 0; i < n; i++) {
        const struct whale_pp_op *o = &s->ops[i];
        op_of[(o->kind * v + o->chunk) * m + o->mb] = i;
        int k = o->kind * v + o->chunk;
        if (seen[k]++ == 0)
            flags[i] |= WHALE_PP_FIRST_MB;
        if (seen[k] == m)
            flags[i] |= WHALE_PP_LAST_MB;
    }

    int posted = 0;
    for (int i = 0; i < n; i++) {
        const struct whale_pp_op *o = &s->ops[i];
        /* post receives up to `la` passes ahead */
        for (; posted < n && posted <= i + la; posted++) {
            const struct whale_pp_op *q = &s->ops[posted];
            if (q->recv_peer < 0 || q->recv_peer == s->rank)
                continue;
            int vs = whale_pp_vstage(p, s->rank, q->chunk);
            void *buf = h->recv_buf(h->user, (enum whale_pp_kind)q->kind, q->chunk, q->mb);
            rc = c->irecv(c, buf, h->msg_bytes, q->recv_peer,
                          whale_pp_tag((enum whale_pp_kind)q->kind, vs, q->mb, S, m),
                          &rreq[posted]);
            if (rc) {
                whale_error("pipeline rank %d: posting the receive of %c%d.%d from rank %d failed",
                            s->rank, q->kind ? 'B' : 'F', q->chunk, q->mb, q->recv_peer);
                goto out;
            }
        }
        if (rreq[i]) {
            uint64_t t0 = whale_trace_now();
            double w0 = whale_now_s();
            rc = c->wait(c, rreq[i]);
            rreq[i] = NULL;
            st.t_wait += whale_now_s() - w0;
            st.bytes_recv += (int64_t)h->msg_bytes;
            if (whale_trace_on())
                whale_trace_span("recv", o->kind ? "recv grad" : "recv act", t0, o->chunk, o->mb);
            if (rc) {
                whale_error("pipeline rank %d: receive for %c%d.%d from rank %d failed: %s",
                            s->rank, o->kind ? 'B' : 'F', o->chunk, o->mb, o->recv_peer,
                            whale_strerror(rc));
                goto out;
            }
        }
        if (o->recv_peer == s->rank) {
            int vs = whale_pp_vstage(p, s->rank, o->chunk);
            int pc = (o->kind == WHALE_PP_FORWARD ? vs - 1 : vs + 1) / p;
            void *dst = h->recv_buf(h->user, (enum whale_pp_kind)o->kind, o->chunk, o->mb);
            if (!self_src[i]) {
                whale_error("pipeline rank %d: %c%d.%d runs before its producer", s->rank,
                            o->kind ? 'B' : 'F', o->chunk, o->mb);
                rc = WHALE_ESTATE;
                goto out;
            }
            memcpy(dst, self_src[i], h->msg_bytes);
            if (h->sent)
                h->sent(h->user, (enum whale_pp_kind)o->kind, pc, o->mb);
        }
        uint64_t t0 = whale_trace_now();
        double c0 = whale_now_s();
        if (o->kind == WHALE_PP_FORWARD)
            rc = h->forward(h->user, o->chunk, o->mb, flags[i]);
        else
            rc = h->backward(h->user, o->chunk, o->mb, flags[i]);
        st.t_compute += whale_now_s() - c0;
        if (whale_trace_on())
            whale_trace_span(o->kind ? "backward" : "forward", o->kind ? "backward" : "forward",
                             t0, o->chunk, o->mb);
        if (rc)
            goto out;
        if (o->send_peer == s->rank) {
            int vs = whale_pp_vstage(p, s->rank, o->chunk);
            int dvs = o->kind == WHALE_PP_FORWARD ? vs + 1 : vs - 1;
            int ci = op_of[(o->kind * v + dvs / p) * m + o->mb];
            self_src[ci] = h->send_buf(h->user, (enum whale_pp_kind)o->kind, o->chunk, o->mb);
        } else if (o->send_peer >= 0) {
            int vs = whale_pp_vstage(p, s->rank, o->chunk);
            int dst = o->kind == WHALE_PP_FORWARD ? vs + 1 : vs - 1;
            const void *buf = h->send_buf(h->user, (enum whale_pp_kind)o->kind, o->chunk, o->mb);
            struct inflight *f = &snd[nsnd];
            f->kind = o->kind;
            f->chunk = o->chunk;
            f->mb = o->mb;
            f->t0 = whale_trace_now();
            rc = c->isend(c, buf, h->msg_bytes, o->send_peer,
                          whale_pp_tag((enum whale_pp_kind)o->kind, dst, o->mb, S, m), &f->req);
            if (rc) {
                whale_error("pipeline rank %d: send of %c%d.%d to rank %d failed: %s", s->rank,
                            o->kind ? 'B' : 'F', o->chunk, o->mb, o->send_peer,
                            whale_strerror(rc));
                goto out;
            }
            nsnd++;
            st.bytes_sent += (int64_t)h->msg_bytes;
        }
        if (nsnd && (rc = reap_sends(c, h, snd, &nsnd, false, &st)))
            goto out;
        if (o->kind == WHALE_PP_BACKWARD && (flags[i] & WHALE_PP_LAST_MB) && h->chunk_done &&
            (rc = h->chunk_done(h->user, o->chunk)))
            goto out;
    }
    rc = reap_sends(c, h, snd, &nsnd, true, &st);
out:
    if (rc && rreq) {
        /* The step is abandoned: transfers still posted reference the
         * caller's buffers, which must outlive the run (the caller aborts). */
        /* without a pipeline (p = 1) there is no pipeline rank to blame:
         * the caller names the failed step and peer */
        whale_log(s->p > 1 ? WHALE_LOG_ERROR : WHALE_LOG_DEBUG,
                  "pipeline stage %d of %d: step aborted (%s)", s->rank, s->p,
                  whale_strerror(rc));
    }
    free(rreq);
    free(self_src);
    free(op_of);
    free(snd);
    free(flags);
    free(seen);
    if (st_out)
        *st_out = st;
    return rc;
}
