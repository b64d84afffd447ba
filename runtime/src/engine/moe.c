/* The mixture-of-experts MLP of a MoE block (GShard / Switch / DeepSeek-MoE):
 *
 *   logits (N,E) = ln @ Wrouter^T            fp32, every TP rank (replicated router)
 *   p = softmax(logits) | sigmoid(logits)    Gate=
 *   top-k experts per token by logit         ties: the lower expert index wins
 *   g_j = p[e_j]  (GateRenorm: / sum_j p[e_j])
 *   capacity = ceil(CapacityFactor * N * K / E) per expert and micro-batch
 *   (dropless: none); an expert keeps the first `capacity` tokens that chose
 *   it in token order (row b*T + t of the micro-batch): a later token is
 *   dropped for that expert, its contribution is zero and the residual
 *   carries it
 *   out[t] = sum over kept j of g_j * FFN_{e_j}(ln[t]) + shared FFN(ln[t])
 *
 * The dispatch is a gather of each expert's tokens into a contiguous buffer
 * (expert-major, token order inside an expert), one GEMM chain per expert
 * through the backend, and a weighted scatter-add back: the step expert
 * parallelism replaces with an all-to-all (dispatch) and its inverse
 * (combine), the per-expert GEMMs unchanged.
 *
 * Auxiliary losses of one micro-batch (Switch/GShard load balancing and
 * ST-MoE's z-loss), added to the objective as tokens x (A aux + Z z) so
 * that the step's mean over tokens weighs them once per block forward:
 *   aux = E * sum_e f_e P_e, f_e = (assignments to e before dropping)/(N K),
 *         P_e = mean_t q_te, q = p (softmax) or p / sum_e p (sigmoid)
 *   z   = mean_t logsumexp(logits_t)^2
 * Top-k selection is not differentiated; the gates, aux (through P) and z
 * are.
 *
 * TP: each expert's FFN (and the shared one) is split like the dense MLP
 * (fc/gate/up column-parallel, proj row-parallel); routing is computed
 * identically on every TP rank, the partial outputs are summed over TP
 * once, the gate gradients' dot products too. Routing, gather and scatter
 * run on the host: the backend must read host memory (cpu). */
#include "moe.h"
#include "moe_ep.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

#define F32 WHALE_FLOAT32

bool eng_moe_block(const struct eng_dims *d, int index)
{
    const struct whale_moe_desc *m = &d->moe;
    int i = index - 1;
    return m->experts > 0 && i >= m->first && (i - m->first) % m->every == 0;
}

static bool moe_glu(const struct eng_dims *d)
{
    return d->mlp == WHALE_MLP_SWIGLU || d->mlp == WHALE_MLP_GEGLU;
}

/* ---- parameters ------------------------------------------------------------- */

/* Offsets of one FFN's parameters from its first one (-1: none). */
struct moe_ffn_ix {
    int fcw, fcb, upw, upb, pw, pb, n;
};

static struct moe_ffn_ix moe_ffn_ix(const struct eng_dims *d)
{
    struct moe_ffn_ix x = { -1, -1, -1, -1, -1, -1, 0 };
    const bool bias = !d->no_bias;
    x.fcw = x.n++;
    if (bias)
        x.fcb = x.n++;
    if (moe_glu(d)) {
        x.upw = x.n++;
        if (bias)
            x.upb = x.n++;
    }
    x.pw = x.n++;
    if (bias)
        x.pb = x.n++;
    return x;
}

/* One FFN of global width F named PREFIX.{fc|gate,up,proj}.{w,b}: the dense
 * MLP's names and TP splits */
static int moe_ffn_decl(const struct eng_dims *d, struct eng_param *p, const char *prefix,
                        int64_t F)
{
    const int64_t C = d->C;
    const float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * d->L);
    const bool bias = !d->no_bias;
    char n[96];
    int i = 0;
#define DECL(nm, nd, split, sd, decay, sdv, cst, ...)                                       \
    do {                                                                                     \
        if (p) {                                                                             \
            snprintf(n, sizeof n, "%s.%s", prefix, nm);                                      \
            eng_param_decl(&p[i], d, n, nd, (int64_t[]){ __VA_ARGS__ }, split, sd, decay,    \
                           sdv, cst);                                                        \
        }                                                                                    \
        i++;                                                                                 \
    } while (0)
    DECL(moe_glu(d) ? "gate.w" : "fc.w", 2, WHALE_SPLIT_COL, 0, true, std, 0, F, C);
    if (bias)
        DECL(moe_glu(d) ? "gate.b" : "fc.b", 1, WHALE_SPLIT_COL, 0, false, 0, 0, F);
    if (moe_glu(d)) {
        DECL("up.w", 2, WHALE_SPLIT_COL, 0, true, std, 0, F, C);
        if (bias)
            DECL("up.b", 1, WHALE_SPLIT_COL, 0, false, 0, 0, F);
    }
    DECL("proj.w", 2, WHALE_SPLIT_ROW, 1, true, pstd, 0, C, F);
    if (bias)
        DECL("proj.b", 1, WHALE_SPLIT_NONE, 0, false, 0, 0, C);
#undef DECL
    return i;
}

/* Table: router.w, then expert 0..E-1's FFN, then the shared FFN (if any) */
int eng_moe_params(const struct eng_dims *d, int index, struct eng_param *p)
{
    const int E = d->moe.experts;
    char pre[64];
    int i = 0;
    if (p)
        eng_param_decl(&p[0], d, (snprintf(pre, sizeof pre, "h.%d.moe.router.w", index - 1), pre),
                       2, (int64_t[]){ E, d->C }, WHALE_SPLIT_NONE, 0, true, 0.02f, 0);
    i++;
    const struct moe_ffn_ix ix = moe_ffn_ix(d);
    const int e0 = eng_moe_ep_first(d), e1 = e0 + eng_moe_ep_local(d);
    for (int e = 0; e < E; e++) {
        snprintf(pre, sizeof pre, "h.%d.moe.expert.%d", index - 1, e);
        int n = moe_ffn_decl(d, p ? p + i : NULL, pre, (int64_t)d->Fe * d->tp);
        /* EP: the experts of the other ranks of the EP group take no memory
         * here (numel 0: no storage, no gradient, no optimizer state, not in
         * this rank's checkpoint pieces). Their output bias stays on every
         * rank: the combine adds it and its gradient on the token's rank. */
        for (int k = 0; p && d->ep > 1 && k < n; k++) {
            if (k == ix.pb)
                continue;
            if (e >= e0 && e < e1)
                p[i + k].expert = true;
            else
                p[i + k].numel = 0;
        }
        i += n;
    }
    if (d->Fs) {
        snprintf(pre, sizeof pre, "h.%d.moe.shared", index - 1);
        i += moe_ffn_decl(d, p ? p + i : NULL, pre, (int64_t)d->Fs * d->tp);
    }
    return i;
}

/* ---- areas ------------------------------------------------------------------- */

/* Saved, with R = N*K assignment rows at most and Rx the rows this rank's
 * experts compute (R; with EP the rows the EP group can send them,
 * eng_moe_ep_rows):
 *   ids (N*K*2): the chosen experts as two byte-sized floats each (exact in
 *       16 bits: a 16-bit model rounds what it saves), in choice order;
 *   fc, up (glu), h (Rx,Fe): the experts' activations, expert-major rows;
 *   eo (R,C): the experts' outputs (this TP rank's part, no bias), in this
 *       rank's row order;
 *   xin (Rx,C), EP only: the rows the experts here received;
 *   sfc, sup (glu), sh (N,Fs): the shared experts' activations. */
struct moe_saved {
    float *ids, *fc, *up, *h, *eo, *xin, *sfc, *sup, *sh;
};

static size_t moe_saved_carve(const struct eng_dims *d, float *base, struct moe_saved *s)
{
    const size_t N = (size_t)d->B * d->T, R = N * d->moe.topk, C = d->C;
    const size_t Fe = d->Fe, Fs = d->Fs, nact = moe_glu(d) ? 3 : 2, Rx = eng_moe_ep_rows(d);
    size_t o = 0;
#define TAKE(f, n) do { if (s) s->f = base + o; o += (n); } while (0)
    TAKE(ids, 2 * R);
    TAKE(fc, Rx * Fe);
    TAKE(up, moe_glu(d) ? Rx * Fe : 0);
    TAKE(h, Rx * Fe);
    TAKE(eo, R * C);
    TAKE(xin, d->ep > 1 ? Rx * C : 0);
    TAKE(sfc, Fs ? N * Fs : 0);
    TAKE(sup, Fs && nact == 3 ? N * Fs : 0);
    TAKE(sh, Fs ? N * Fs : 0);
#undef TAKE
    return o;
}

size_t eng_moe_saved_floats(const struct eng_dims *d)
{
    return moe_saved_carve(d, NULL, NULL);
}

/* Scratch: logits, p (N,E); xe, ye (R,C) gathered inputs / output
 * gradients; dh (R,2Fe); gate, dgate (R); the shared experts' dh (N,2Fs);
 * then the routing in int32: choice (N*K) expert ids, row (N*K) the
 * assignment's row or -1 (dropped), tok (R) row -> token, slot (R) row ->
 * n*K+j, cnt, all (E) kept / routed counts, off (E+1). With EP: ey, eptmp
 * (Rx,C) the experts' side of the exchanges, epw its layout (int32). */
struct moe_scratch {
    float *logits, *p, *xe, *ye, *dh, *gate, *dgate, *sdh, *ey, *eptmp;
    int32_t *choice, *row, *tok, *slot, *cnt, *all, *off, *epw;
};

static size_t moe_scratch_carve(const struct eng_dims *d, float *base, struct moe_scratch *s)
{
    const size_t N = (size_t)d->B * d->T, K = d->moe.topk, R = N * K, C = d->C;
    const size_t E = d->moe.experts, Rx = eng_moe_ep_rows(d);
    size_t o = 0;
#define TAKE(f, n) do { if (s) s->f = base + o; o += (n); } while (0)
#define TAKEI(f, n) do { if (s) s->f = (int32_t *)(void *)(base + o); o += (n); } while (0)
    TAKE(logits, N * E);
    TAKE(p, N * E);
    TAKE(xe, R * C);
    TAKE(ye, R * C);
    TAKE(dh, Rx * 2 * (size_t)d->Fe);
    TAKE(gate, R);
    TAKE(dgate, R);
    TAKE(sdh, N * 2 * (size_t)d->Fs);
    TAKE(ey, d->ep > 1 ? Rx * C : 0);
    TAKE(eptmp, d->ep > 1 ? Rx * C : 0);
    TAKEI(choice, R);
    TAKEI(row, R);
    TAKEI(tok, R);
    TAKEI(slot, R);
    TAKEI(cnt, E);
    TAKEI(all, E);
    TAKEI(off, E + 1);
    TAKEI(epw, eng_moe_ep_layout_words(d));
#undef TAKEI
#undef TAKE
    return o;
}

size_t eng_moe_scratch_floats(const struct eng_dims *d)
{
    return moe_scratch_carve(d, NULL, NULL);
}

/* ---- routing ----------------------------------------------------------------- */

/* logits (N,E) = ln @ Wr^T in fp32 whatever the model's precision; p the
 * gate function of them */
static int moe_router(const struct eng_layer *l, int p0, struct moe_scratch *x, const float *ln)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, E = d->moe.experts;
    BK(whale_gemm(d->bk, NULL, false, true, N, E, d->C, 1.0f, ln, d->C, eng_pw(l, p0), d->C,
                  F32, 0.0f, x->logits, E, F32));
    for (int n = 0; n < N; n++) {
        const float *z = x->logits + (size_t)n * E;
        float *p = x->p + (size_t)n * E;
        if (d->moe.gate == WHALE_GATE_SIGMOID) {
            for (int e = 0; e < E; e++)
                p[e] = 1.0f / (1.0f + expf(-z[e]));
            continue;
        }
        float mx = z[0], sum = 0;
        for (int e = 1; e < E; e++)
            mx = z[e] > mx ? z[e] : mx;
        for (int e = 0; e < E; e++)
            sum += (p[e] = expf(z[e] - mx));
        for (int e = 0; e < E; e++)
            p[e] /= sum;
    }
    return 0;
}

/* Top-k by logit (a strict > keeps the lower index among equal logits), in
 * descending order, into x->choice */
static void moe_topk(const struct eng_dims *d, struct moe_scratch *x)
{
    const int N = d->B * d->T, E = d->moe.experts, K = d->moe.topk;
    for (int n = 0; n < N; n++) {
        const float *z = x->logits + (size_t)n * E;
        int32_t *c = x->choice + (size_t)n * K;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int i = 0; i < j && !taken; i++)
                    taken = c[i] == e;
                if (!taken && (best < 0 || z[e] > z[best]))
                    best = e;
            }
            c[j] = best;
        }
    }
}

/* From x->choice: capacity, kept rows (expert-major, token order inside an
 * expert), counts and offsets; gates of the rows from x->p */
static void moe_assign(const struct eng_dims *d, struct moe_scratch *x)
{
    const int N = d->B * d->T, E = d->moe.experts, K = d->moe.topk;
    int64_t cap = INT32_MAX;
    if (d->moe.capacity > 0)
        cap = (int64_t)ceil(d->moe.capacity * (double)N * K / E);
    memset(x->cnt, 0, sizeof(int32_t) * E);
    memset(x->all, 0, sizeof(int32_t) * E);
    /* position of each assignment in its expert's list (token order) */
    for (int s = 0; s < N * K; s++) {
        int e = x->choice[s];
        x->all[e]++;
        x->row[s] = x->cnt[e] < cap ? x->cnt[e]++ : -1;
    }
    x->off[0] = 0;
    for (int e = 0; e < E; e++)
        x->off[e + 1] = x->off[e] + x->cnt[e];
    for (int n = 0; n < N; n++) {
        const int32_t *c = x->choice + (size_t)n * K;
        const float *p = x->p + (size_t)n * E;
        float S = 0;
        for (int j = 0; j < K; j++)
            S += p[c[j]];
        for (int j = 0; j < K; j++) {
            int s = n * K + j;
            if (x->row[s] < 0)
                continue;
            int r = x->row[s] += x->off[c[j]];
            x->tok[r] = n;
            x->slot[r] = s;
            x->gate[r] = d->moe.renorm ? p[c[j]] / S : p[c[j]];
        }
    }
}

/* q (the distribution P averages): p itself (softmax) or p / sum_e p */
static void moe_q(const struct eng_dims *d, const float *p, float *q)
{
    const int E = d->moe.experts;
    float S = 1.0f;
    if (d->moe.gate == WHALE_GATE_SIGMOID) {
        S = 0;
        for (int e = 0; e < E; e++)
            S += p[e];
    }
    for (int e = 0; e < E; e++)
        q[e] = p[e] / S;
}

static double moe_lse(const float *z, int E)
{
    float mx = z[0];
    for (int e = 1; e < E; e++)
        mx = z[e] > mx ? z[e] : mx;
    double s = 0;
    for (int e = 0; e < E; e++)
        s += exp((double)z[e] - mx);
    return mx + log(s);
}

/* aux and z of this micro-batch, statistics */
static void moe_losses(const struct eng_dims *d, struct moe_scratch *x, double *aux, double *z)
{
    const int N = d->B * d->T, E = d->moe.experts, K = d->moe.topk;
    double a = 0, zz = 0;
    float q[4096];
    double P[4096];
    memset(P, 0, sizeof(double) * E);
    for (int n = 0; n < N; n++) {
        moe_q(d, x->p + (size_t)n * E, q);
        for (int e = 0; e < E; e++)
            P[e] += q[e];
        double lse = moe_lse(x->logits + (size_t)n * E, E);
        zz += lse * lse;
    }
    for (int e = 0; e < E; e++)
        a += ((double)x->all[e] / ((double)N * K)) * (P[e] / N);
    *aux = E * a;
    *z = zz / N;
}

/* The routing statistics of one block forward. With EP they describe the
 * EP group: the experts of a rank see the tokens every rank of its group
 * routes to them, so tokens per expert (and with them the imbalance), the
 * routed and dropped assignments are summed over the group and the
 * auxiliary losses averaged over it (one small allreduce per block
 * forward, beside the block's all-to-alls); what the loss adds stays this
 * rank's own, as the loss is summed over the ranks later. */
static int moe_stats(const struct eng_dims *d, struct moe_scratch *x, double aux, double z,
                     struct whale_moe_stats *st)
{
    const int N = d->B * d->T, E = d->moe.experts, K = d->moe.topk;
    const int G = d->ep > 1 ? d->ep : 1;
    /* E routed counts, kept and routed assignments, then aux and z in
     * fixed point (2^-32): one integer sum, exact whatever the order of
     * the group's additions */
    int64_t v[4096 + 4], kept = 0;
    const double fx = 4294967296.0;
    for (int e = 0; e < E; e++) {
        v[e] = x->all[e];
        kept += x->cnt[e];
    }
    v[E] = kept;
    v[E + 1] = (int64_t)N * K;
    v[E + 2] = llround(aux * fx);
    v[E + 3] = llround(z * fx);
    if (G > 1) {
        int rc = eng_moe_ep_sum(d, v, E + 4);
        if (rc)
            return rc;
    }
    int64_t mn = INT64_MAX, mx = 0;
    for (int e = 0; e < E; e++) {
        int64_t n = v[e];
        mn = n < mn ? n : mn;
        mx = n > mx ? n : mx;
    }
    const int64_t routed = v[E + 1];
    double imb = (double)mx / ((double)routed / E);
    if (st->forwards == 0 || mn < st->tok_min)
        st->tok_min = mn;
    if (mx > st->tok_max)
        st->tok_max = mx;
    st->imbalance += imb; /* a sum until the step divides it */
    if (imb > st->imbalance_max)
        st->imbalance_max = imb;
    st->forwards++;
    st->routed += routed;
    st->dropped += routed - v[E];
    st->aux += (double)v[E + 2] / fx / G;
    st->zloss += (double)v[E + 3] / fx / G;
    st->loss_sum += (double)N * (d->moe.aux * aux + d->moe.zloss * z);
    return 0;
}

/* The routing of a forward (or its replay in backward from the saved ids) */
static int moe_route(const struct eng_layer *l, int p0, struct moe_scratch *x, float *ids,
                     const float *ln, bool replay)
{
    const struct eng_dims *d = l->d;
    const int R = d->B * d->T * d->moe.topk;
    BK(moe_router(l, p0, x, ln));
    if (!replay) {
        moe_topk(d, x);
        for (int s = 0; s < R; s++) {
            ids[2 * s] = (float)(x->choice[s] >> 8);
            ids[2 * s + 1] = (float)(x->choice[s] & 255);
        }
    } else {
        for (int s = 0; s < R; s++)
            x->choice[s] = ((int32_t)ids[2 * s] << 8) | (int32_t)ids[2 * s + 1];
    }
    moe_assign(d, x);
    return 0;
}

/* ---- dispatch and combine -------------------------------------------------------
 * The only steps that move tokens between their rows and the experts' rows:
 * local copies here; with expert parallelism they become an all-to-all(v)
 * over the EP group (rows grouped by the rank that holds the expert, counts
 * from x->cnt) and its inverse, the per-expert GEMMs unchanged. */

/* x->xe (R,C): row r = the token tok[r]'s row of src (N,C), expert-major */
static void moe_dispatch(const struct eng_dims *d, struct moe_scratch *x, const float *src)
{
    const int C = d->C, R = x->off[d->moe.experts];
    for (int r = 0; r < R; r++)
        memcpy(x->xe + (size_t)r * C, src + (size_t)x->tok[r] * C, sizeof(float) * C);
}

/* out (N,C) += for every row r: w[r] (1 when w is NULL) x rows (R,C)[r] at
 * its token's row */
static void moe_combine(const struct eng_dims *d, const struct moe_scratch *x,
                        const float *rows, const float *w, float *out)
{
    const int C = d->C, R = x->off[d->moe.experts];
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)x->tok[r] * C;
        const float *y = rows + (size_t)r * C, g = w ? w[r] : 1.0f;
#pragma omp simd
        for (int c = 0; c < C; c++)
            o[c] += g * y[c];
    }
}

/* ---- forward ----------------------------------------------------------------- */

static float *pw_opt(const struct eng_layer *l, int base, int off)
{
    return off < 0 ? NULL : eng_pw(l, base + off);
}
static float *pg_opt(const struct eng_layer *l, int base, int off)
{
    return off < 0 ? NULL : eng_pg(l, base + off);
}

static enum whale_glu_act moe_act(const struct eng_dims *d)
{
    return d->mlp == WHALE_MLP_SWIGLU ? WHALE_GLU_SILU : WHALE_GLU_GELU;
}

/* One FFN over n rows: fc, up, h (n,F) kept; y (n,C) = h @ Wproj^T without
 * the bias (added once after the TP sum) */
static int moe_ffn_fwd(const struct eng_layer *l, int base, const struct moe_ffn_ix *ix,
                       const float *xin, float *fc, float *up, float *h, float *y, int n, int F)
{
    const struct eng_dims *d = l->d;
    whale_backend *bk = d->bk;
    const int C = d->C;
    if (moe_glu(d)) {
        BK(whale_k_linear_fwd(bk, NULL, F32, fc, xin, eng_pw(l, base + ix->fcw),
                              pw_opt(l, base, ix->fcb), n, C, F));
        BK(whale_k_linear_fwd(bk, NULL, F32, up, xin, eng_pw(l, base + ix->upw),
                              pw_opt(l, base, ix->upb), n, C, F));
        BK(whale_k_glu_fwd(bk, NULL, F32, moe_act(d), h, fc, up, (int64_t)n * F));
    } else {
        /* GELU on each block of the GEMM while it is in cache, as the dense
         * MLP does, instead of a second pass over the (n,F) activations */
        BK(whale_k_linear_gelu_fwd(bk, NULL, F32, fc, h, xin, eng_pw(l, base + ix->fcw),
                                   pw_opt(l, base, ix->fcb), n, C, F));
    }
    return whale_k_linear_fwd(bk, NULL, F32, y, h, eng_pw(l, base + ix->pw), NULL, n, F, C);
}

static int moe_host_check(const struct eng_dims *d)
{
    if (whale_backend_reads_host(d->bk))
        return 0;
    whale_error("MoE blocks route tokens on the host: this compute backend's memory is not "
                "host-readable (MoE runs on the cpu backend)");
    return WHALE_ENOTSUP;
}

/* EP: this rank's rows x->xe go to the experts' ranks (moe_ep.c), the
 * experts here run on what they receive (kept in s->xin for backward), and
 * their outputs come back into s->eo in this rank's row order */
static int moe_ep_experts_fwd(const struct eng_layer *l, int p0, const struct moe_ffn_ix *ix,
                              struct moe_saved *s, struct moe_scratch *x)
{
    const struct eng_dims *d = l->d;
    const int El = eng_moe_ep_local(d), e0 = eng_moe_ep_first(d), C = d->C, Fe = d->Fe;
    struct moe_ep_x ex = { x->epw, x->epw + (size_t)d->ep * El, 0 };
    BK(eng_moe_ep_counts(d, x->cnt, &ex));
    BK(eng_moe_ep_dispatch(d, &ex, x->off, x->xe, s->xin, x->eptmp));
    for (int el = 0; el < El; el++) {
        int n = ex.eoff[el + 1] - ex.eoff[el];
        size_t r0 = (size_t)ex.eoff[el];
        if (!n)
            continue;
        BK(moe_ffn_fwd(l, p0 + 1 + (e0 + el) * ix->n, ix, s->xin + r0 * C, s->fc + r0 * Fe,
                       s->up ? s->up + r0 * Fe : NULL, s->h + r0 * Fe, x->ey + r0 * C, n, Fe));
    }
    return eng_moe_ep_combine(d, &ex, x->off, x->ey, s->eo, x->eptmp, NULL);
}

int eng_moe_fwd(const struct eng_layer *l, struct eng_io *io, int p0, float *saved,
                float *scratch, const float *ln, float *out)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, E = d->moe.experts, Fe = d->Fe;
    const struct moe_ffn_ix ix = moe_ffn_ix(d);
    struct moe_saved s;
    struct moe_scratch x;
    int rc = moe_host_check(d);
    if (rc)
        return rc;
    moe_saved_carve(d, saved, &s);
    moe_scratch_carve(d, scratch, &x);
    BK(moe_route(l, p0, &x, s.ids, ln, false));
    if (io->moe) {
        double aux, z;
        moe_losses(d, &x, &aux, &z);
        BK(moe_stats(d, &x, aux, z, io->moe));
    }
    moe_dispatch(d, &x, ln);
    if (d->ep > 1)
        BK(moe_ep_experts_fwd(l, p0, &ix, &s, &x));
    for (int e = 0; e < E && d->ep <= 1; e++) {
        int n = x.cnt[e];
        size_t r0 = (size_t)x.off[e];
        if (!n)
            continue;
        BK(moe_ffn_fwd(l, p0 + 1 + e * ix.n, &ix, x.xe + r0 * C, s.fc + r0 * Fe,
                       s.up ? s.up + r0 * Fe : NULL, s.h + r0 * Fe, s.eo + r0 * C, n, Fe));
    }
    /* combine: out = shared (this rank's part) + sum_r g_r eo_r, summed over TP */
    const int sb = p0 + 1 + E * ix.n;
    if (d->Fs)
        BK(moe_ffn_fwd(l, sb, &ix, ln, s.sfc, s.sup, s.sh, out, N, d->Fs));
    else
        BK(whale_memset(d->bk, out, 0, sizeof(float) * N * C, NULL));
    moe_combine(d, &x, s.eo, x.gate, out);
    if (io->tp_group)
        BK(eng_tp_allreduce(io->tp_group, out, (size_t)N * C));
    if (ix.pb < 0)
        return 0;
    /* biases once, after the sum: g_r b_e for each kept row, the shared one */
    for (int e = 0; e < E; e++) {
        const float *b = eng_pw(l, p0 + 1 + e * ix.n + ix.pb);
        for (int r = x.off[e]; r < x.off[e + 1]; r++) {
            float *o = out + (size_t)x.tok[r] * C;
#pragma omp simd
            for (int c = 0; c < C; c++)
                o[c] += x.gate[r] * b[c];
        }
    }
    if (d->Fs) {
        const float *b = eng_pw(l, sb + ix.pb);
        for (int n = 0; n < N; n++) {
#pragma omp simd
            for (int c = 0; c < C; c++)
                out[(size_t)n * C + c] += b[c];
        }
    }
    return 0;
}

/* ---- backward ---------------------------------------------------------------- */

/* One FFN's backward over n rows: dy (n,C) the output gradient (weighted),
 * dx (n,C) = or += (acc) the input gradient; dh (n,2F) scratch */
static int moe_ffn_bwd(const struct eng_layer *l, int base, const struct moe_ffn_ix *ix,
                       const float *xin, const float *fc, const float *up, const float *h,
                       const float *dy, float *dx, float *dh, int n, int F, bool acc)
{
    const struct eng_dims *d = l->d;
    whale_backend *bk = d->bk;
    const int C = d->C;
    if (!moe_glu(d)) {
        /* dfc = GELU'(fc) * (dy @ Wproj) in the GEMM's blocks (the dense
         * MLP's fused kernel), then fc's backward */
        BK(whale_k_linear_bwd_gelu(bk, NULL, F32, dh, fc, eng_pg(l, base + ix->pw), NULL, dy, h,
                                   eng_pw(l, base + ix->pw), n, F, C));
        return whale_k_linear_bwd(bk, NULL, F32, dx, eng_pg(l, base + ix->fcw),
                                  pg_opt(l, base, ix->fcb), dh, xin, eng_pw(l, base + ix->fcw), n,
                                  C, F, acc);
    }
    BK(whale_k_linear_bwd(bk, NULL, F32, dh, eng_pg(l, base + ix->pw), NULL, dy, h,
                          eng_pw(l, base + ix->pw), n, F, C, false));
    float *dgate = dh, *dup = dh + (size_t)n * F;
    BK(whale_k_glu_bwd(bk, NULL, F32, moe_act(d), dgate, dup, dh, fc, up, (int64_t)n * F));
    BK(whale_k_linear_bwd(bk, NULL, F32, dx, eng_pg(l, base + ix->fcw), pg_opt(l, base, ix->fcb),
                          dgate, xin, eng_pw(l, base + ix->fcw), n, C, F, acc));
    return whale_k_linear_bwd(bk, NULL, F32, dx, eng_pg(l, base + ix->upw),
                              pg_opt(l, base, ix->upb), dup, xin, eng_pw(l, base + ix->upw), n, C,
                              F, true);
}

/* dlogits (N,E) into x->logits (overwritten) from the gates' gradients
 * (x->dgate per row) and the auxiliary losses: ka = d(objective)/d(aux),
 * kz = d(objective)/d(z) */
static void moe_router_grad(const struct eng_dims *d, struct moe_scratch *x, double ka,
                            double kz)
{
    const int N = d->B * d->T, E = d->moe.experts, K = d->moe.topk;
    float dp[4096], q[4096];
    for (int n = 0; n < N; n++) {
        float *z = x->logits + (size_t)n * E;
        const float *p = x->p + (size_t)n * E;
        const int32_t *c = x->choice + (size_t)n * K;
        memset(dp, 0, sizeof(float) * E);
        /* gates: g_j = p_cj (/ S) */
        float S = 0, sgd = 0;
        for (int j = 0; j < K; j++)
            S += p[c[j]];
        for (int j = 0; j < K; j++) {
            int r = x->row[n * K + j];
            float dg = r < 0 ? 0.0f : x->dgate[r];
            if (!d->moe.renorm)
                dp[c[j]] += dg;
            else
                sgd += dg * p[c[j]] / S;
        }
        if (d->moe.renorm)
            for (int j = 0; j < K; j++) {
                int r = x->row[n * K + j];
                float dg = r < 0 ? 0.0f : x->dgate[r];
                dp[c[j]] += (dg - sgd) / S;
            }
        /* aux: d/dq_e = ka E f_e / N, q = p (softmax) or p / sum p (sigmoid) */
        if (ka != 0) {
            moe_q(d, p, q);
            float T = 1.0f, sdq = 0;
            if (d->moe.gate == WHALE_GATE_SIGMOID) {
                T = 0;
                for (int e = 0; e < E; e++)
                    T += p[e];
            }
            for (int e = 0; e < E; e++) {
                float dq = (float)(ka * E * ((double)x->all[e] / ((double)N * K)) / N);
                sdq += dq * q[e];
                dp[e] += dq / T;
            }
            if (d->moe.gate == WHALE_GATE_SIGMOID)
                for (int e = 0; e < E; e++)
                    dp[e] -= sdq / T;
        }
        /* through the gate function */
        if (d->moe.gate == WHALE_GATE_SIGMOID) {
            for (int e = 0; e < E; e++)
                dp[e] *= p[e] * (1.0f - p[e]);
        } else {
            float sdp = 0;
            for (int e = 0; e < E; e++)
                sdp += dp[e] * p[e];
            for (int e = 0; e < E; e++)
                dp[e] = p[e] * (dp[e] - sdp);
        }
        /* z: d/dz_e = kz 2 lse softmax(z)_e / N */
        if (kz != 0) {
            double lse = moe_lse(z, E);
            for (int e = 0; e < E; e++)
                dp[e] += (float)(kz * 2.0 * lse * exp((double)z[e] - lse) / N);
        }
        memcpy(z, dp, sizeof(float) * E);
    }
}

/* EP: the weighted output gradients x->ye go to the experts' ranks like
 * the inputs did, the experts here accumulate their weight gradients, and
 * the input gradients come back in this rank's row order, into x->ye or
 * the receive window (*rows says which) */
static int moe_ep_experts_bwd(const struct eng_layer *l, int p0, const struct moe_ffn_ix *ix,
                              struct moe_saved *s, struct moe_scratch *x, const float **rows)
{
    const struct eng_dims *d = l->d;
    const int El = eng_moe_ep_local(d), e0 = eng_moe_ep_first(d), C = d->C, Fe = d->Fe;
    struct moe_ep_x ex = { x->epw, x->epw + (size_t)d->ep * El, 0 };
    BK(eng_moe_ep_counts(d, x->cnt, &ex));
    BK(eng_moe_ep_dispatch(d, &ex, x->off, x->ye, x->ey, x->eptmp));
    for (int el = 0; el < El; el++) {
        int n = ex.eoff[el + 1] - ex.eoff[el];
        size_t r0 = (size_t)ex.eoff[el];
        if (!n)
            continue;
        BK(moe_ffn_bwd(l, p0 + 1 + (e0 + el) * ix->n, ix, s->xin + r0 * C, s->fc + r0 * Fe,
                       s->up ? s->up + r0 * Fe : NULL, s->h + r0 * Fe, x->ey + r0 * C,
                       x->ey + r0 * C, x->dh, n, Fe, false));
    }
    return eng_moe_ep_combine(d, &ex, x->off, x->ey, x->ye, x->eptmp, rows);
}

int eng_moe_bwd(const struct eng_layer *l, struct eng_io *io, int p0, float *saved,
                float *scratch, const float *ln, const float *dout, float *dln)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, E = d->moe.experts, Fe = d->Fe;
    const struct moe_ffn_ix ix = moe_ffn_ix(d);
    struct moe_saved s;
    struct moe_scratch x;
    whale_backend *bk = d->bk;
    int rc = moe_host_check(d);
    if (rc)
        return rc;
    moe_saved_carve(d, saved, &s);
    moe_scratch_carve(d, scratch, &x);
    /* the forward's experts (saved ids), gates from the saved input */
    BK(moe_route(l, p0, &x, s.ids, ln, true));
    const int R = x.off[E];
    /* gate gradients: dy . eo (partial over TP, summed), + dy . b once */
    for (int r = 0; r < R; r++) {
        const float *dy = dout + (size_t)x.tok[r] * C, *y = s.eo + (size_t)r * C;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++)
            dot += dy[c] * y[c];
        x.dgate[r] = dot;
    }
    if (io->tp_group && R)
        BK(eng_tp_allreduce(io->tp_group, x.dgate, (size_t)R));
    if (ix.pb >= 0)
        for (int e = 0; e < E; e++) {
            const float *b = eng_pw(l, p0 + 1 + e * ix.n + ix.pb);
            float *gb = eng_pg(l, p0 + 1 + e * ix.n + ix.pb);
            for (int r = x.off[e]; r < x.off[e + 1]; r++) {
                const float *dy = dout + (size_t)x.tok[r] * C;
                float dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int c = 0; c < C; c++) {
                    dot += dy[c] * b[c];
                    gb[c] += x.gate[r] * dy[c];
                }
                x.dgate[r] += dot;
            }
        }
    /* experts: dy_r = g_r dout[tok] in ye, inputs re-gathered into xe */
    if (d->ep <= 1)
        moe_dispatch(d, &x, ln);
    for (int r = 0; r < R; r++) {
        const float *dy = dout + (size_t)x.tok[r] * C;
        float *ye = x.ye + (size_t)r * C, g = x.gate[r];
#pragma omp simd
        for (int c = 0; c < C; c++)
            ye[c] = g * dy[c];
    }
    const float *dxe = x.ye; /* the experts' input gradients, this rank's rows */
    if (d->ep > 1)
        BK(moe_ep_experts_bwd(l, p0, &ix, &s, &x, &dxe));
    for (int e = 0; e < E && d->ep <= 1; e++) {
        int n = x.cnt[e];
        size_t r0 = (size_t)x.off[e];
        if (!n)
            continue;
        /* the input gradient goes to ye's rows (the output gradient is read first) */
        BK(moe_ffn_bwd(l, p0 + 1 + e * ix.n, &ix, x.xe + r0 * C, s.fc + r0 * Fe,
                       s.up ? s.up + r0 * Fe : NULL, s.h + r0 * Fe, x.ye + r0 * C,
                       x.ye + r0 * C, x.dh, n, Fe, false));
    }
    /* shared experts straight into dln (=), else zero it */
    const int sb = p0 + 1 + E * ix.n;
    if (d->Fs) {
        if (ix.pb >= 0)
            BK(whale_k_colsum_acc(bk, NULL, F32, eng_pg(l, sb + ix.pb), dout, C, N, C));
        BK(moe_ffn_bwd(l, sb, &ix, ln, s.sfc, s.sup, s.sh, dout, dln, x.sdh, N, d->Fs, false));
    } else {
        BK(whale_memset(bk, dln, 0, sizeof(float) * N * C, NULL));
    }
    /* dispatch's inverse: scatter-add the experts' input gradients */
    moe_combine(d, &x, dxe, NULL, dln);
    /* router: dlogits, its weight's gradient (the same on every TP rank) and
     * its input gradient on TP rank 0 only (the caller sums dln over TP) */
    const double ka = (double)io->dloss * N * d->moe.aux, kz = (double)io->dloss * N * d->moe.zloss;
    moe_router_grad(d, &x, ka, kz);
    BK(whale_gemm(bk, NULL, true, false, E, C, N, 1.0f, x.logits, E, ln, C, F32, 1.0f,
                  eng_pg(l, p0), C, F32));
    if (d->tp_rank == 0)
        BK(whale_gemm(bk, NULL, false, false, N, C, E, 1.0f, x.logits, E, eng_pw(l, p0), C, F32,
                      1.0f, dln, C, F32));
    return 0;
}

void eng_moe_flops(const struct eng_dims *d, double *fwd, double *bwd)
{
    const double N = (double)d->B * d->T, C = d->C, K = d->moe.topk;
    const double mats = moe_glu(d) ? 3 : 2;
    /* active: TopK routed experts and the shared ones per token, the router */
    double f = 2.0 * N * (C * d->moe.experts + mats * C * (K * d->Fe + d->Fs));
    *fwd = f;
    *bwd = 2.0 * f;
}

int eng_moe_check(const struct whale_engine_config *c, int tp)
{
    const struct whale_model_desc *m = &c->model;
    const struct whale_moe_desc *d = &m->moe;
    const char *src = m->source[0] ? m->source : m->name;
    if (d->experts == 0)
        return 0;
    if (d->experts > 4096) {
        whale_error("%s: Experts=%d: the engine runs at most 4096 experts per block", src,
                    d->experts);
        return WHALE_EINVAL;
    }
    if (d->ffn % tp) {
        whale_error("model %s: ExpertFFN=%d must be divisible by the tensor-parallel degree "
                    "TP=%d", m->name, d->ffn, tp);
        return WHALE_EINVAL;
    }
    if (c->seqpar && tp > 1) {
        whale_error("model %s: MoE blocks do not run with sequence parallelism yet (drop "
                    "--seqpar)", m->name);
        return WHALE_ENOTSUP;
    }
    return 0;
}
