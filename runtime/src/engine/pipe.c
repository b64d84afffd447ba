/* Pipeline side of the engine: which layers this rank holds (stage
 * partition), recomputation policy per layer, activation slots per
 * (chunk, micro-batch) in flight, and the micro-batch loop of a step driven
 * by the pipeline executor (whale/parallel.h) with the plan's schedule. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/plan.h"

static size_t NC(const whale_engine *e)
{
    return (size_t)e->d.Ns * e->d.C; /* B*T rows, or this rank's sequence shard (SP) */
}

/* ---- stage partition ---------------------------------------------------------- */

/* Forward FLOPs of one micro-batch of chain layer i (0 embed, 1..L blocks,
 * L+1 head), global (before TP). */
static double chain_cost(const whale_engine *e, int i)
{
    const struct whale_model_desc *m = &e->cfg.model;
    double N = (double)e->d.B * e->d.T, C = m->hidden, F = m->ffn, T = e->d.T;
    if (i == 0)
        return N * C;
    if (i == m->layers + 1)
        return 2.0 * N * C * m->vocab;
    return 2.0 * N * (4.0 * C * C + 2.0 * C * F) + 2.0 * N * T * C;
}

int eng_layout(whale_engine *e, int *blocks)
{
    const int p = e->grp.pp.size, v = e->nchunks, S = p * v, L = e->cfg.model.layers;
    const struct whale_engine_config *c = &e->cfg;
    if (c->stage_layers && c->n_stage_layers > 0) {
        if (c->n_stage_layers != S) {
            whale_error("stage_layers has %d entries but the pipeline has %d x %d = %d virtual "
                        "stages", c->n_stage_layers, p, v, S);
            return WHALE_EINVAL;
        }
        int sum = 0;
        for (int s = 0; s < S; s++) {
            int own = c->stage_layers[s] + (s == 0) + (s == S - 1);
            if (c->stage_layers[s] < 0 || own < 1) {
                whale_error("stage_layers[%d] = %d: every virtual stage needs at least one layer "
                            "(the first holds the embedding, the last the head)", s,
                            c->stage_layers[s]);
                return WHALE_EINVAL;
            }
            sum += c->stage_layers[s];
            blocks[s] = c->stage_layers[s];
        }
        if (sum != L) {
            whale_error("stage_layers sum to %d blocks but model %s has %d", sum,
                        c->model.name, L);
            return WHALE_EINVAL;
        }
        return 0;
    }
    if (L + 2 < S) {
        whale_error("model %s has %d layers (with embedding and head) for %d virtual pipeline "
                    "stages (PP=%d x interleave %d)", c->model.name, L + 2, S, p, v);
        return WHALE_EINVAL;
    }
    double *cost = malloc(sizeof(double) * (size_t)(L + 2));
    int *n = malloc(sizeof(int) * (size_t)S);
    if (!cost || !n) {
        free(cost);
        free(n);
        return WHALE_ENOMEM;
    }
    for (int i = 0; i < L + 2; i++)
        cost[i] = chain_cost(e, i);
    int rc = whale_pp_balance(cost, L + 2, S, n);
    for (int s = 0; s < S && !rc; s++)
        blocks[s] = n[s] - (s == 0) - (s == S - 1);
    free(cost);
    free(n);
    return rc;
}

/* ---- recomputation policy ----------------------------------------------------------- */

/* Maximum number of micro-batches of chunk c in flight on this rank. */
static int chunk_stash(const struct whale_pp_schedule *s, int c)
{
    int cur = 0, mx = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->ops[i].chunk != c)
            continue;
        cur += s->ops[i].kind == WHALE_PP_FORWARD ? 1 : -1;
        mx = cur > mx ? cur : mx;
    }
    return mx;
}

static size_t layer_floats(struct eng_layer *l, int rc)
{
    int keep = l->rc;
    l->rc = rc;
    size_t n = l->ops->act_floats(l);
    l->rc = keep;
    return n;
}

/* Sets l->rc of every block from the configured policy. */
static int assign_recompute(whale_engine *e)
{
    const struct whale_engine_config *c = &e->cfg;
    int nblk = 0;
    for (int i = 0; i < e->nl; i++)
        if (e->layers[i].ops == &eng_block_ops && e->layers[i].chunk >= 0)
            nblk++;
    switch (c->recompute) {
    case WHALE_RECOMPUTE_NONE:
        return 0;
    case WHALE_RECOMPUTE_SELECTIVE:
    case WHALE_RECOMPUTE_FULL:
        for (int i = 0; i < e->nl; i++)
            if (e->layers[i].ops == &eng_block_ops)
                e->layers[i].rc = c->recompute == WHALE_RECOMPUTE_FULL ? ENG_RC_FULL
                                                                       : ENG_RC_SELECTIVE;
        return 0;
    case WHALE_RECOMPUTE_LAYERS:
        for (int k = 0; k < c->n_recompute_layers; k++) {
            int b = c->recompute_layers[k];
            if (b < 0 || b >= c->model.layers) {
                whale_error("recompute_layers: block %d out of range 0..%d", b,
                            c->model.layers - 1);
                return WHALE_ERANGE;
            }
            for (int i = 0; i < e->nl; i++)
                if (e->layers[i].ops == &eng_block_ops && e->layers[i].index == b + 1)
                    e->layers[i].rc = ENG_RC_FULL;
        }
        return 0;
    case WHALE_RECOMPUTE_AUTO:
        break;
    default:
        whale_error("unknown recompute policy %d", (int)c->recompute);
        return WHALE_EINVAL;
    }
    if (nblk == 0)
        return 0;
    /* AUTO: per block none / selective / full, memory = stash x kept bytes,
     * time = forward FLOPs re-run; the planner's exact dynamic program picks
     * the cheapest set within the budget. */
    double *mem = calloc((size_t)nblk * 3, sizeof *mem), *tim = calloc((size_t)nblk * 3, sizeof *tim);
    int *choice = calloc((size_t)nblk, sizeof *choice), *idx = calloc((size_t)nblk, sizeof *idx);
    int rc = 0;
    if (!mem || !tim || !choice || !idx) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    double none_total = 0, full_total = 0;
    int k = 0;
    for (int i = 0; i < e->nl; i++) {
        struct eng_layer *l = &e->layers[i];
        if (l->ops != &eng_block_ops || l->chunk < 0)
            continue;
        double st = chunk_stash(&e->psched, l->chunk);
        const struct eng_dims *d = l->d;
        double fwd, bwd;
        l->ops->flops(l, &fwd, &bwd);
        double att_flops = 2.0 * 2.0 * d->B * d->NH * (double)d->T * d->T * d->hd / 2.0;
        const double eb = eng_lp(e) ? 2.0 : 4.0; /* bytes per kept activation element */
        mem[k * 3 + 0] = st * eb * (double)layer_floats(l, ENG_RC_NONE);
        mem[k * 3 + 1] = st * eb * (double)layer_floats(l, ENG_RC_SELECTIVE);
        mem[k * 3 + 2] = 0; /* only the layer input, which the chunk keeps anyway */
        tim[k * 3 + 0] = 0;
        tim[k * 3 + 1] = att_flops / 2.0; /* the probabilities: QK^T and softmax */
        tim[k * 3 + 2] = fwd;
        none_total += mem[k * 3 + 0];
        full_total += mem[k * 3 + 2];
        idx[k++] = i;
    }
    double budget = c->act_budget_bytes > 0 ? (double)c->act_budget_bytes : none_total / 2;
    double tt = 0;
    rc = whale_plan_recompute_select(nblk, 3, mem, tim, budget, 4096, choice, &tt);
    if (rc == WHALE_ENOFIT) {
        whale_error("recompute=auto: even full recomputation of every block needs %.1f MiB of "
                    "activations, over the budget of %.1f MiB", full_total / 1048576.0,
                    budget / 1048576.0);
        goto out;
    }
    if (rc)
        goto out;
    int cnt[3] = { 0, 0, 0 };
    double used = 0;
    for (int j = 0; j < nblk; j++) {
        e->layers[idx[j]].rc = choice[j] == 0 ? ENG_RC_NONE
                             : choice[j] == 1 ? ENG_RC_SELECTIVE : ENG_RC_FULL;
        cnt[choice[j]]++;
        used += mem[j * 3 + choice[j]];
    }
    /* one line per pipeline stage */
    if ((e->dp.size <= 1 || e->dp.rank == 0) && e->d.tp_rank == 0)
        whale_info("recompute=auto (stage %d): budget %.1f MiB -> %d blocks keep everything, %d "
                   "selective, %d full (%.1f MiB of block activations, %.3f GFLOP re-run per "
                   "micro-batch)", e->grp.pp.rank, budget / 1048576.0, cnt[0], cnt[1], cnt[2],
                   used / 1048576.0, tt / 1e9);
out:
    free(mem);
    free(tim);
    free(choice);
    free(idx);
    return rc;
}

/* ---- slots ------------------------------------------------------------------------ */

static int slot_alloc(whale_engine *e, int c, struct eng_slot *s)
{
    const struct eng_chunk *ch = &e->chunks[c];
    size_t nb = (size_t)(ch->l1 - ch->l0 + 1) * NC(e);
    memset(s, 0, sizeof *s);
    s->chunk = c;
    s->mb = -1;
    /* mixed precision keeps the saved activations in 16 bits; zeroed now so
     * RSS reflects what is held */
    const size_t saved_bytes = ch->saved_floats * (eng_lp(e) ? 2 : 4);
    void **sv = eng_lp(e) ? (void **)&s->saved16 : (void **)&s->saved;
    s->nb_floats = nb;
    s->saved_bytes = saved_bytes;
    if (!(s->bnd = whale_arena_alloc(e->arena, WHALE_MEM_ACT, nb * sizeof(float), 1)) ||
        !(*sv = whale_arena_alloc(e->arena, WHALE_MEM_ACT, saved_bytes, 1)) ||
        !(s->dgrad = whale_arena_alloc(e->arena, WHALE_MEM_ACT, NC(e) * sizeof(float), 1)))
        return WHALE_ENOMEM;
    e->act_now += (int64_t)(nb + NC(e)) * 4 + (int64_t)saved_bytes;
    if (e->act_now > e->act_peak)
        e->act_peak = e->act_now;
    return 0;
}

/* The slot of (c, mb), taking a free one of chunk c or a new one. */
static struct eng_slot *slot_get(whale_engine *e, int c, int mb)
{
    int m = e->cfg.grad_accum;
    int *so = &e->slot_of[c * m + mb];
    if (*so >= 0)
        return &e->slots[*so];
    int k = -1;
    for (int i = 0; i < e->nslots; i++)
        if (e->slots[i].chunk == c && e->slots[i].mb < 0) {
            k = i;
            break;
        }
    if (k < 0) {
        struct eng_slot *ns = realloc(e->slots, sizeof *ns * (size_t)(e->nslots + 1));
        if (!ns)
            return NULL;
        e->slots = ns;
        if (slot_alloc(e, c, &e->slots[e->nslots])) {
            whale_error("out of memory for the activations of micro-batch %d (chunk %d)", mb, c);
            return NULL;
        }
        k = e->nslots++;
    }
    struct eng_slot *s = &e->slots[k];
    s->mb = mb;
    s->done = false;
    s->sends = 0;
    *so = k;
    return s;
}

static void slot_maybe_release(whale_engine *e, struct eng_slot *s)
{
    if (!s->done || s->sends > 0)
        return;
    e->slot_of[s->chunk * e->cfg.grad_accum + s->mb] = -1;
    s->mb = -1;
}

static void slot_free(whale_engine *e, struct eng_slot *s)
{
    whale_arena_free(e->arena, WHALE_MEM_ACT, s->bnd, s->nb_floats * sizeof(float));
    whale_arena_free(e->arena, WHALE_MEM_ACT, s->saved, s->saved_bytes);
    whale_arena_free(e->arena, WHALE_MEM_ACT, s->saved16, s->saved_bytes);
    whale_arena_free(e->arena, WHALE_MEM_ACT, s->dgrad, NC(e) * sizeof(float));
}

/* ---- init ---------------------------------------------------------------------------- */

int eng_pipe_init(whale_engine *e)
{
    const int m = e->cfg.grad_accum;
    int rc = whale_pp_schedule_build(e->cfg.schedule, e->grp.pp.size, e->nchunks, m,
                                     e->grp.pp.rank, &e->psched);
    if (rc)
        return rc;
    if ((rc = assign_recompute(e)))
        return rc;
    size_t rc_floats = 0, kept_max = 0;
    bool any_sel = false;
    for (int c = 0; c < e->nchunks; c++) {
        struct eng_chunk *ch = &e->chunks[c];
        int n = ch->l1 - ch->l0;
        ch->saved_off = calloc((size_t)n + 1, sizeof *ch->saved_off);
        if (!ch->saved_off)
            return WHALE_ENOMEM;
        size_t so = 0;
        for (int k = 0; k < n; k++) {
            struct eng_layer *l = &e->layers[ch->l0 + k];
            ch->saved_off[k] = so;
            size_t f = l->ops->act_floats(l);
            if (l->rc == ENG_RC_FULL)
                rc_floats = f > rc_floats ? f : rc_floats;
            else
                so += (f + 15) / 16 * 16;
            if (l->rc != ENG_RC_FULL)
                kept_max = f > kept_max ? f : kept_max;
            any_sel |= l->rc == ENG_RC_SELECTIVE;
        }
        ch->saved_off[n] = so;
        ch->saved_floats = so;
    }
    /* what the backend's attention keeps for backward: the probabilities
     * (B,NH,T,T) on cpu, the row log-sum-exp (B,NH,T) on cuda */
    const size_t att = whale_attention_saved_floats(e->bk, e->d.B, e->d.T, e->d.NH, e->d.hd);
    e->rc_floats = rc_floats;
    e->att_floats = any_sel ? att : 0;
    if (rc_floats && (!(e->rc_saved = whale_arena_alloc(e->arena, WHALE_MEM_ACT, rc_floats * 4, 1)) ||
                      !(e->rc_out = whale_arena_alloc(e->arena, WHALE_MEM_ACT, NC(e) * 4, 1))))
        return WHALE_ENOMEM;
    if (any_sel && !(e->att_tmp = whale_arena_alloc(e->arena, WHALE_MEM_ACT, att * 4, 1)))
        return WHALE_ENOMEM;
    /* 16-bit saved areas: the running layer's in fp32 */
    e->sv32_floats = eng_lp(e) ? kept_max : 0;
    /* backend memory (kernels write it), outside the arena's budget as before */
    if (e->sv32_floats &&
        (whale_mem_alloc(e->bk, WHALE_MEM_ACTS, e->sv32_floats * sizeof(float), (void **)&e->sv32) ||
         whale_memset(e->bk, e->sv32, 0, e->sv32_floats * sizeof(float), NULL)))
        return WHALE_ENOMEM;
    e->slot_of = malloc(sizeof(int) * (size_t)(e->nchunks * m));
    if (!e->slot_of)
        return WHALE_ENOMEM;
    for (int i = 0; i < e->nchunks * m; i++)
        e->slot_of[i] = -1;
    /* one slot per chunk up front; the first one also backs the single-
     * micro-batch view (xb, saved, dstream) the layer tests use */
    for (int c = 0; c < e->nchunks; c++) {
        struct eng_slot *s = slot_get(e, c, 0);
        if (!s)
            return WHALE_ENOMEM;
        s->done = true;
        slot_maybe_release(e, s);
    }
    e->xb = e->slots[0].bnd + NC(e);
    e->saved = e->slots[0].saved;
    e->saved_off = e->chunks[0].saved_off;
    e->dstream = e->slots[0].dgrad;
    e->act_floats = 0;
    e->act_bytes = 0;
    for (int c = 0; c < e->nchunks; c++) {
        e->act_floats += (size_t)(e->chunks[c].l1 - e->chunks[c].l0 + 2) * NC(e) +
                         e->chunks[c].saved_floats;
        e->act_bytes += (int64_t)(e->chunks[c].l1 - e->chunks[c].l0 + 2) * NC(e) * 4 +
                        (int64_t)e->chunks[c].saved_floats * (eng_lp(e) ? 2 : 4);
    }
    return 0;
}

void eng_pipe_free(whale_engine *e)
{
    /* After a failed step, receives may still be posted into the slots:
     * the comm layer could write into them until it shuts down, so they
     * are left allocated (the run is over anyway). */
    for (int i = 0; i < e->nslots && !e->pipe_abandoned; i++)
        slot_free(e, &e->slots[i]);
    free(e->slots);
    e->slots = NULL;
    e->nslots = 0;
    free(e->slot_of);
    if (e->chunks)
        for (int c = 0; c < e->nchunks; c++)
            free(e->chunks[c].saved_off);
    if (e->arena) {
        whale_arena_free(e->arena, WHALE_MEM_ACT, e->rc_saved, e->rc_floats * 4);
        whale_arena_free(e->arena, WHALE_MEM_ACT, e->rc_out, NC(e) * 4);
        whale_arena_free(e->arena, WHALE_MEM_ACT, e->att_tmp, e->att_floats * 4);
    }
    e->rc_saved = e->rc_out = e->att_tmp = NULL;
    if (e->bk)
        whale_mem_free(e->bk, e->sv32);
    e->sv32 = NULL;
    whale_pp_schedule_free(&e->psched);
    /* aliases of slot 0 */
    e->xb = e->saved = e->dstream = NULL;
    e->saved_off = NULL;
}

/* A new micro-batch count between two steps (shares that follow the DP
 * replicas' speeds): the schedule and the (chunk, micro-batch) -> slot table
 * follow; the slots stay (they belong to a chunk, not to a micro-batch). */
int eng_pipe_set_accum(whale_engine *e, int m)
{
    struct whale_pp_schedule ns;
    int rc = whale_pp_schedule_build(e->cfg.schedule, e->grp.pp.size, e->nchunks, m,
                                     e->grp.pp.rank, &ns);
    if (rc)
        return rc;
    int *so = malloc(sizeof(int) * (size_t)(e->nchunks * m));
    if (!so) {
        whale_pp_schedule_free(&ns);
        return WHALE_ENOMEM;
    }
    for (int i = 0; i < e->nchunks * m; i++)
        so[i] = -1;
    for (int k = 0; k < e->nslots; k++) {
        struct eng_slot *s = &e->slots[k];
        if (s->mb >= 0 && s->mb < m)
            so[s->chunk * m + s->mb] = k;
        else
            s->mb = -1;
    }
    free(e->slot_of);
    e->slot_of = so;
    whale_pp_schedule_free(&e->psched);
    e->psched = ns;
    e->cfg.grad_accum = m;
    return 0;
}

/* ---- the step's micro-batches ------------------------------------------------------------ */

static const int32_t *mb_in(whale_engine *e, const int32_t *base, int mb)
{
    return base ? base + (size_t)mb * e->d.B * e->d.T : NULL;
}

static int h_forward(void *u, int c, int mb, int flags)
{
    whale_engine *e = u;
    (void)flags;
    struct eng_slot *s = slot_get(e, c, mb);
    if (!s)
        return WHALE_ENOMEM;
    /* the executor sends the output after this returns: hold the slot */
    if (e->chunks[c].vstage < e->grp.pp.size * e->nchunks - 1)
        s->sends++;
    return eng_chunk_forward(e, c, s, mb_in(e, e->cur_in, mb), mb_in(e, e->cur_tg, mb),
                             &e->cur_loss, &e->cur_tc);
}

static int h_backward(void *u, int c, int mb, int flags)
{
    whale_engine *e = u;
    struct eng_slot *s = slot_get(e, c, mb);
    if (!s)
        return WHALE_ENOMEM;
    int rc = eng_chunk_backward(e, c, s, mb_in(e, e->cur_in, mb), mb_in(e, e->cur_tg, mb),
                                e->cur_dloss, flags & WHALE_PP_FIRST_MB, flags & WHALE_PP_LAST_MB,
                                &e->cur_tc);
    /* the input gradient is sent after this returns: hold the slot until `sent` */
    if (e->chunks[c].vstage > 0)
        s->sends++;
    s->done = true;
    slot_maybe_release(e, s);
    return rc;
}

static void *h_recv_buf(void *u, enum whale_pp_kind k, int c, int mb)
{
    whale_engine *e = u;
    struct eng_slot *s = slot_get(e, c, mb);
    if (!s)
        return NULL;
    return k == WHALE_PP_FORWARD ? s->bnd : s->dgrad;
}

static const void *h_send_buf(void *u, enum whale_pp_kind k, int c, int mb)
{
    whale_engine *e = u;
    struct eng_slot *s = slot_get(e, c, mb);
    if (!s)
        return NULL;
    const struct eng_chunk *ch = &e->chunks[c];
    return k == WHALE_PP_FORWARD ? s->bnd + (size_t)(ch->l1 - ch->l0) * NC(e) : s->dgrad;
}

static void h_sent(void *u, enum whale_pp_kind k, int c, int mb)
{
    whale_engine *e = u;
    (void)k;
    int si = e->slot_of[c * e->cfg.grad_accum + mb];
    if (si < 0)
        return;
    struct eng_slot *s = &e->slots[si];
    s->sends--;
    slot_maybe_release(e, s);
}

int eng_pipe_step(whale_engine *e, const int32_t *in, const int32_t *tg, float dloss,
                  double *loss_sum, double *tc, struct whale_pp_stats *pst)
{
    e->cur_in = in;
    e->cur_tg = tg;
    e->cur_dloss = dloss;
    e->cur_loss = 0;
    e->cur_tc = 0;
    struct whale_pp_hooks h = {
        .user = e, .forward = h_forward, .backward = h_backward, .recv_buf = h_recv_buf,
        .send_buf = h_send_buf, .sent = h_sent, .msg_bytes = NC(e) * sizeof(float),
        .lookahead = 1,
    };
    int rc = whale_pp_run(&e->grp.pp, &e->psched, &h, pst);
    /* only pipeline transfers (PP > 1) and tensor-parallel collectives
     * (TP > 1) touch the slots; without either, the slots are free to go
     * after a failed step (an elastic run goes on with a new engine: keeping
     * them would leak its activations at every recovery) */
    if (rc && (e->grp.pp.size > 1 || e->grp.tp.size > 1))
        e->pipe_abandoned = true;
    *loss_sum += e->cur_loss;
    *tc += e->cur_tc;
    return rc;
}

int eng_pipe_forward_only(whale_engine *e, const int32_t *in, const int32_t *tg,
                          double *loss_sum)
{
    struct whale_par_comm *pp = &e->grp.pp;
    const int p = pp->size, v = e->nchunks, S = p * v, m = e->cfg.grad_accum;
    double tc = 0;
    int rc = 0;
    /* (micro-batch, virtual stage) order on every rank: consistent waits */
    for (int mb = 0; mb < m && !rc; mb++)
        for (int c = 0; c < v && !rc; c++) {
            const struct eng_chunk *ch = &e->chunks[c];
            int vs = whale_pp_vstage(p, pp->rank, c);
            struct eng_slot *s = slot_get(e, c, mb);
            if (!s)
                return WHALE_ENOMEM;
            void *req;
            if (vs > 0 && p > 1) {
                rc = pp->irecv(pp, s->bnd, NC(e) * 4, (vs - 1) % p,
                               whale_pp_tag(WHALE_PP_FORWARD, vs, mb, S, m), &req);
                if (!rc)
                    rc = pp->wait(pp, req);
            } else if (vs > 0) {
                const struct eng_slot *prev = &e->slots[e->slot_of[(c - 1) * m + mb]];
                const struct eng_chunk *pc = &e->chunks[c - 1];
                memcpy(s->bnd, prev->bnd + (size_t)(pc->l1 - pc->l0) * NC(e), NC(e) * 4);
            }
            if (!rc)
                rc = eng_chunk_forward(e, c, s, mb_in(e, in, mb), mb_in(e, tg, mb), loss_sum, &tc);
            if (!rc && vs < S - 1 && p > 1) {
                rc = pp->isend(pp, s->bnd + (size_t)(ch->l1 - ch->l0) * NC(e), NC(e) * 4,
                               (vs + 1) % p, whale_pp_tag(WHALE_PP_FORWARD, vs + 1, mb, S, m),
                               &req);
                if (!rc)
                    rc = pp->wait(pp, req);
            }
            if (c == v - 1 || p > 1) {
                s->done = true;
                slot_maybe_release(e, s);
            }
            if (p == 1 && c > 0) {
                struct eng_slot *prev = &e->slots[e->slot_of[(c - 1) * m + mb]];
                prev->done = true;
                slot_maybe_release(e, prev);
            }
        }
    return rc;
}
