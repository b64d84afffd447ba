/* minigpt: GPT-2 on whale/backend.h only (see minigpt.h). Shapes:
 *   tokens, targets (B,T) ; x[l] (B,T,C) residual stream before block l
 *   block: ln1 = LN(x) ; qkv (B,T,3C) = ln1 Wqkv^T + b ; y = attn(qkv)
 *          x1 = x + y Wproj^T + b ; ln2 = LN(x1) ; h (B,T,4C) = ln2 Wfc^T + b
 *          x' = x1 + gelu(h) Wfp^T + b
 *   head:  lnf = LN(x[L]) ; logits (B,T,V) = lnf wte^T ; softmax cross-entropy */
#include "minigpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/optim.h"

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FPW,
       P_FPB, P_PER_LAYER };

struct mg_tensor {
    size_t off, n;
    bool decay;
};

struct mg_model {
    struct mg_config c;
    whale_backend *b;
    size_t es;                  /* activation element size */
    int ntensors;
    struct mg_tensor *tens;     /* wte, wpe, L * P_PER_LAYER, lnfw, lnfb */
    size_t P;                   /* flat parameter floats (padded) */
    float *W, *G, *M, *V;       /* device, fp32 (P) */
    void *W16;                  /* device, 16-bit copy (P) or NULL */
    int32_t *tok, *tgt;         /* device (N) */
    float *losses;              /* device (N) */
    /* activations (dtype t) */
    void **x, **ln1, **qkv, **atty, **x1, **ln2, **fch, **fcg;
    float **ln1m, **ln1r, **ln2m, **ln2r, **att;
    void *lnf, *logits, *tmp;
    float *lnfm, *lnfr;
    /* activation gradients */
    void *dres, *dtmp, *dbig, *dqkv, *dln;
    int64_t step;
    float *host_losses;
};

size_t mg_num_params(const struct mg_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->ntensors; i++)
        n += m->tens[i].n;
    return n;
}

double mg_flops_per_token(const struct mg_model *m)
{
    return 6.0 * (double)mg_num_params(m) + 6.0 * m->c.L * m->c.C * m->c.T;
}

static int tensor_index(const struct mg_model *m, int layer, int p)
{
    return 2 + layer * P_PER_LAYER + p;
}

/* weights as the kernels read them (fp32 master or the 16-bit copy) */
static const void *wp(const struct mg_model *m, int ti)
{
    size_t off = m->tens[ti].off;
    if (m->c.t == WHALE_FLOAT32)
        return m->W + off;
    return (const char *)m->W16 + off * 2;
}

static float *gp(const struct mg_model *m, int ti) { return m->G + m->tens[ti].off; }

#define TRY(x)                   \
    do {                         \
        int rc_ = (x);           \
        if (rc_)                 \
            return rc_;          \
    } while (0)

static int alloc_act(struct mg_model *m, size_t elems, void **out)
{
    return whale_mem_alloc(m->b, WHALE_MEM_ACTS, elems * m->es, out);
}

static int alloc_f(struct mg_model *m, size_t n, float **out)
{
    return whale_mem_alloc(m->b, WHALE_MEM_ACTS, n * sizeof(float), (void **)out);
}

static uint64_t mg_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int mg_set_params(struct mg_model *m, const float *host)
{
    TRY(whale_memcpy(m->b, m->W, host, m->P * sizeof(float), WHALE_H2D, NULL));
    if (m->W16)
        TRY(whale_k_cast(m->b, NULL, m->W16, m->c.t, m->W, WHALE_FLOAT32, (int64_t)m->P));
    return whale_stream_sync(whale_stream_compute(m->b));
}

int mg_create(whale_backend *b, const struct mg_config *c, struct mg_model **out)
{
    struct mg_model *m = calloc(1, sizeof *m);
    if (!m)
        return WHALE_ENOMEM;
    m->c = *c;
    m->b = b;
    m->es = whale_dtype_size(c->t);
    int L = c->L, C = c->C;
    size_t N = (size_t)c->B * c->T;
    m->ntensors = 2 + L * P_PER_LAYER + 2;
    m->tens = calloc((size_t)m->ntensors, sizeof *m->tens);
    size_t sizes[P_PER_LAYER] = { C, C, 3 * (size_t)C * C, 3 * (size_t)C, (size_t)C * C, C, C, C,
                                  4 * (size_t)C * C, 4 * (size_t)C, 4 * (size_t)C * C, C };
    bool decays[P_PER_LAYER] = { 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0 };
    int k = 0;
    m->tens[k++] = (struct mg_tensor){ 0, (size_t)c->V * C, true };
    m->tens[k++] = (struct mg_tensor){ 0, (size_t)c->T * C, true };
    for (int l = 0; l < L; l++)
        for (int p = 0; p < P_PER_LAYER; p++)
            m->tens[k++] = (struct mg_tensor){ 0, sizes[p], decays[p] };
    m->tens[k++] = (struct mg_tensor){ 0, (size_t)C, false };
    m->tens[k++] = (struct mg_tensor){ 0, (size_t)C, false };
    size_t off = 0;
    for (int i = 0; i < m->ntensors; i++) {
        m->tens[i].off = off;
        off += (m->tens[i].n + 63) / 64 * 64; /* 256-byte aligned tensors */
    }
    m->P = off;
    *out = m;

    TRY(whale_mem_alloc(b, WHALE_MEM_PARAMS, m->P * 4, (void **)&m->W));
    TRY(whale_mem_alloc(b, WHALE_MEM_GRADS, m->P * 4, (void **)&m->G));
    TRY(whale_mem_alloc(b, WHALE_MEM_OPTIMS, m->P * 4, (void **)&m->M));
    TRY(whale_mem_alloc(b, WHALE_MEM_OPTIMS, m->P * 4, (void **)&m->V));
    TRY(whale_memset(b, m->M, 0, m->P * 4, NULL));
    TRY(whale_memset(b, m->V, 0, m->P * 4, NULL));
    if (c->t != WHALE_FLOAT32)
        TRY(whale_mem_alloc(b, WHALE_MEM_PARAMS, m->P * 2, &m->W16));
    TRY(whale_mem_alloc(b, WHALE_MEM_ACTS, N * 4, (void **)&m->tok));
    TRY(whale_mem_alloc(b, WHALE_MEM_ACTS, N * 4, (void **)&m->tgt));
    TRY(alloc_f(m, N, &m->losses));
    m->host_losses = malloc(N * sizeof(float));

    void ***acts[] = { &m->x, &m->ln1, &m->qkv, &m->atty, &m->x1, &m->ln2, &m->fch, &m->fcg };
    float ***stats[] = { &m->ln1m, &m->ln1r, &m->ln2m, &m->ln2r, &m->att };
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
        *acts[i] = calloc((size_t)L + 1, sizeof(void *));
    for (size_t i = 0; i < sizeof stats / sizeof *stats; i++)
        *stats[i] = calloc((size_t)L, sizeof(float *));
    size_t att_floats = whale_attention_saved_floats(b, c->B, c->T, c->NH, C / c->NH);
    for (int l = 0; l <= L; l++)
        TRY(alloc_act(m, N * C, &m->x[l]));
    for (int l = 0; l < L; l++) {
        TRY(alloc_act(m, N * C, &m->ln1[l]));
        TRY(alloc_act(m, N * 3 * C, &m->qkv[l]));
        TRY(alloc_act(m, N * C, &m->atty[l]));
        TRY(alloc_act(m, N * C, &m->x1[l]));
        TRY(alloc_act(m, N * C, &m->ln2[l]));
        TRY(alloc_act(m, N * 4 * C, &m->fch[l]));
        TRY(alloc_act(m, N * 4 * C, &m->fcg[l]));
        TRY(alloc_f(m, N, &m->ln1m[l]));
        TRY(alloc_f(m, N, &m->ln1r[l]));
        TRY(alloc_f(m, N, &m->ln2m[l]));
        TRY(alloc_f(m, N, &m->ln2r[l]));
        TRY(alloc_f(m, att_floats, &m->att[l]));
    }
    TRY(alloc_act(m, N * C, &m->lnf));
    TRY(alloc_act(m, N * (size_t)c->V, &m->logits));
    TRY(alloc_act(m, N * C, &m->tmp));
    TRY(alloc_f(m, N, &m->lnfm));
    TRY(alloc_f(m, N, &m->lnfr));
    TRY(alloc_act(m, N * C, &m->dres));
    TRY(alloc_act(m, N * C, &m->dtmp));
    TRY(alloc_act(m, N * 4 * C, &m->dbig));
    TRY(alloc_act(m, N * 3 * C, &m->dqkv));
    TRY(alloc_act(m, N * C, &m->dln));

    /* weights: uniform with std 0.02 (residual projections / sqrt(2L)),
     * LayerNorm weight 1, biases 0 */
    float *h = calloc(m->P, sizeof(float));
    if (!h)
        return WHALE_ENOMEM;
    uint64_t s = c->seed * 2654435761u + 1;
    for (int i = 0; i < m->ntensors; i++) {
        int p = i >= 2 && i < 2 + L * P_PER_LAYER ? (i - 2) % P_PER_LAYER : -1;
        bool ln_w = p == P_LN1W || p == P_LN2W || i == m->ntensors - 2;
        float std = 0.02f;
        if (p == P_PROJW || p == P_FPW)
            std /= sqrtf(2.0f * L);
        for (size_t j = 0; j < m->tens[i].n; j++) {
            float u = (float)((mg_rng(&s) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
            h[m->tens[i].off + j] = ln_w ? 1.0f : m->tens[i].decay ? u * std * 1.7320508f : 0.0f;
        }
    }
    int rc = mg_set_params(m, h);
    free(h);
    return rc;
}

void mg_free(struct mg_model *m)
{
    if (!m)
        return;
    whale_backend *b = m->b;
    whale_stream_sync(whale_stream_compute(b));
    void *one[] = { m->W, m->G, m->M, m->V, m->W16, m->tok, m->tgt, m->losses, m->lnf, m->logits,
                    m->tmp, m->lnfm, m->lnfr, m->dres, m->dtmp, m->dbig, m->dqkv, m->dln };
    for (size_t i = 0; i < sizeof one / sizeof *one; i++)
        whale_mem_free(b, one[i]);
    void **acts[] = { m->x, m->ln1, m->qkv, m->atty, m->x1, m->ln2, m->fch, m->fcg };
    float **stats[] = { m->ln1m, m->ln1r, m->ln2m, m->ln2r, m->att };
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        for (int l = 0; acts[i] && l <= m->c.L; l++)
            whale_mem_free(b, acts[i][l]);
        free(acts[i]);
    }
    for (size_t i = 0; i < sizeof stats / sizeof *stats; i++) {
        for (int l = 0; stats[i] && l < m->c.L; l++)
            whale_mem_free(b, stats[i][l]);
        free(stats[i]);
    }
    free(m->tens);
    free(m->host_losses);
    free(m);
}

static int forward(struct mg_model *m, const int32_t *tokens, const int32_t *targets,
                   float *loss)
{
    whale_backend *b = m->b;
    const struct mg_config *c = &m->c;
    enum whale_dtype t = c->t;
    int C = c->C, N = c->B * c->T, hd = C / c->NH;
    TRY(whale_memcpy(b, m->tok, tokens, (size_t)N * 4, WHALE_H2D, NULL));
    TRY(whale_memcpy(b, m->tgt, targets, (size_t)N * 4, WHALE_H2D, NULL));
    TRY(whale_k_embed_fwd(b, NULL, t, m->x[0], m->tok, wp(m, 0), wp(m, 1), c->B, c->T, C));
    for (int l = 0; l < c->L; l++) {
#define W_(p) wp(m, tensor_index(m, l, p))
        TRY(whale_k_layernorm_fwd(b, NULL, t, m->ln1[l], m->ln1m[l], m->ln1r[l], m->x[l],
                                  W_(P_LN1W), W_(P_LN1B), N, C));
        TRY(whale_k_linear_fwd(b, NULL, t, m->qkv[l], m->ln1[l], W_(P_QKVW), W_(P_QKVB), N, C,
                               3 * C));
        TRY(whale_k_attention_fwd(b, NULL, t, m->atty[l], m->att[l], m->qkv[l], c->B, c->T,
                                  c->NH, hd));
        TRY(whale_k_linear_fwd(b, NULL, t, m->tmp, m->atty[l], W_(P_PROJW), W_(P_PROJB), N, C, C));
        TRY(whale_k_add(b, NULL, t, m->x1[l], m->x[l], m->tmp, (int64_t)N * C));
        TRY(whale_k_layernorm_fwd(b, NULL, t, m->ln2[l], m->ln2m[l], m->ln2r[l], m->x1[l],
                                  W_(P_LN2W), W_(P_LN2B), N, C));
        TRY(whale_k_linear_fwd(b, NULL, t, m->fch[l], m->ln2[l], W_(P_FCW), W_(P_FCB), N, C,
                               4 * C));
        TRY(whale_k_gelu_fwd(b, NULL, t, m->fcg[l], m->fch[l], (int64_t)N * 4 * C));
        TRY(whale_k_linear_fwd(b, NULL, t, m->tmp, m->fcg[l], W_(P_FPW), W_(P_FPB), N, 4 * C, C));
        TRY(whale_k_add(b, NULL, t, m->x[l + 1], m->x1[l], m->tmp, (int64_t)N * C));
#undef W_
    }
    int nt = m->ntensors;
    TRY(whale_k_layernorm_fwd(b, NULL, t, m->lnf, m->lnfm, m->lnfr, m->x[c->L], wp(m, nt - 2),
                              wp(m, nt - 1), N, C));
    TRY(whale_k_linear_fwd(b, NULL, t, m->logits, m->lnf, wp(m, 0), NULL, N, C, c->V));
    TRY(whale_k_softmax_xent_fwd(b, NULL, t, m->logits, m->losses, m->tgt, N, c->V));
    TRY(whale_memcpy(b, m->host_losses, m->losses, (size_t)N * 4, WHALE_D2H, NULL));
    TRY(whale_stream_sync(whale_stream_compute(b)));
    double s = 0;
    for (int i = 0; i < N; i++)
        s += m->host_losses[i];
    *loss = (float)(s / N);
    return 0;
}

int mg_loss(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float *loss)
{
    return forward(m, tokens, targets, loss);
}

static int backward(struct mg_model *m)
{
    whale_backend *b = m->b;
    const struct mg_config *c = &m->c;
    enum whale_dtype t = c->t;
    int C = c->C, N = c->B * c->T, hd = C / c->NH, nt = m->ntensors;
    TRY(whale_memset(b, m->G, 0, m->P * 4, NULL));
    TRY(whale_k_softmax_xent_bwd(b, NULL, t, m->logits, m->tgt, 1.0f / N, N, c->V));
    TRY(whale_k_linear_bwd(b, NULL, t, m->dln, gp(m, 0), NULL, m->logits, m->lnf, wp(m, 0), N, C,
                           c->V, false));
    TRY(whale_memset(b, m->dres, 0, (size_t)N * C * m->es, NULL));
    TRY(whale_k_layernorm_bwd(b, NULL, t, m->dres, gp(m, nt - 2), gp(m, nt - 1), m->dln,
                              m->x[c->L], wp(m, nt - 2), m->lnfm, m->lnfr, N, C));
    for (int l = c->L - 1; l >= 0; l--) {
#define W_(p) wp(m, tensor_index(m, l, p))
#define G_(p) gp(m, tensor_index(m, l, p))
        TRY(whale_k_linear_bwd(b, NULL, t, m->dbig, G_(P_FPW), G_(P_FPB), m->dres, m->fcg[l],
                               W_(P_FPW), N, 4 * C, C, false));
        TRY(whale_k_gelu_bwd(b, NULL, t, m->dbig, m->fch[l], m->dbig, (int64_t)N * 4 * C));
        TRY(whale_k_linear_bwd(b, NULL, t, m->dln, G_(P_FCW), G_(P_FCB), m->dbig, m->ln2[l],
                               W_(P_FCW), N, C, 4 * C, false));
        TRY(whale_k_layernorm_bwd(b, NULL, t, m->dres, G_(P_LN2W), G_(P_LN2B), m->dln, m->x1[l],
                                  W_(P_LN2W), m->ln2m[l], m->ln2r[l], N, C));
        TRY(whale_k_linear_bwd(b, NULL, t, m->dtmp, G_(P_PROJW), G_(P_PROJB), m->dres, m->atty[l],
                               W_(P_PROJW), N, C, C, false));
        TRY(whale_k_attention_bwd(b, NULL, t, m->dqkv, m->dtmp, m->qkv[l], m->atty[l], m->att[l],
                                  c->B, c->T, c->NH, hd));
        TRY(whale_k_linear_bwd(b, NULL, t, m->dln, G_(P_QKVW), G_(P_QKVB), m->dqkv, m->ln1[l],
                               W_(P_QKVW), N, C, 3 * C, false));
        TRY(whale_k_layernorm_bwd(b, NULL, t, m->dres, G_(P_LN1W), G_(P_LN1B), m->dln, m->x[l],
                                  W_(P_LN1W), m->ln1m[l], m->ln1r[l], N, C));
#undef W_
#undef G_
    }
    return whale_k_embed_bwd(b, NULL, t, gp(m, 0), gp(m, 1), m->dres, m->tok, c->B, c->T, C);
}

size_t mg_flat_size(const struct mg_model *m) { return m->P; }

int mg_grads(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float *loss)
{
    TRY(forward(m, tokens, targets, loss));
    TRY(backward(m));
    return whale_stream_sync(whale_stream_compute(m->b));
}

int mg_step(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float lr,
            float *loss)
{
    TRY(forward(m, tokens, targets, loss));
    TRY(backward(m));
    double ss = 0;
    TRY(whale_k_sumsq(m->b, NULL, m->G, (int64_t)m->P, &ss));
    float coef = whale_clip_coef(sqrt(ss), 1.0f);
    struct whale_adamw o = { .lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    struct whale_adamw_piece *pc = calloc((size_t)m->ntensors, sizeof *pc);
    if (!pc)
        return WHALE_ENOMEM;
    for (int i = 0; i < m->ntensors; i++) {
        size_t off = m->tens[i].off;
        pc[i] = (struct whale_adamw_piece){ .w = m->W + off, .g = m->G + off, .m = m->M + off,
                                            .v = m->V + off, .n = m->tens[i].n,
                                            .decay = m->tens[i].decay };
        if (m->W16)
            pc[i].w16 = (char *)m->W16 + off * 2;
    }
    m->step++;
    int rc = whale_k_adamw(m->b, NULL, &o, m->step, coef, pc, m->ntensors,
                           m->W16 ? m->c.t : WHALE_BFLOAT16);
    free(pc);
    TRY(rc);
    return whale_stream_sync(whale_stream_compute(m->b));
}

int mg_get_params(struct mg_model *m, float *host)
{
    TRY(whale_memcpy(m->b, host, m->W, m->P * 4, WHALE_D2H, NULL));
    return whale_stream_sync(whale_stream_compute(m->b));
}

int mg_get_grads(struct mg_model *m, float *host)
{
    TRY(whale_memcpy(m->b, host, m->G, m->P * 4, WHALE_D2H, NULL));
    return whale_stream_sync(whale_stream_compute(m->b));
}
