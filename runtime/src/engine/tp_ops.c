/* The engine's tensor-parallel operators (Megatron), the one implementation
 * the layers (layers.c, block_x.c) and the unit tests (tests/unit/parallel/
 * test_tp.c) share. Every kernel runs through the backend; the TP group's
 * collectives through its whale_par_comm (whale/par_comm.h). A NULL group
 * means tp == 1: the operators are then the plain single-rank ones. */
#include "layer.h"

#include "whale/tp.h"
#include "whale/trace.h"

#define F32 WHALE_FLOAT32

int eng_tp_allreduce(struct whale_par_comm *tp, float *buf, size_t n)
{
    /* g forward / f backward of Megatron's conjugate pair */
    return tp ? whale_tp_g(tp, WHALE_PP_FORWARD, buf, n) : 0;
}

int eng_tp_allreduce_max(struct whale_par_comm *tp, float *buf, size_t n)
{
    if (!tp || tp->size <= 1)
        return 0;
    uint64_t t0 = whale_trace_now();
    int rc = tp->allreduce(tp, buf, n, WHALE_MAX);
    if (whale_trace_on())
        whale_trace_span("allreduce", "tp allreduce max", t0, -1, -1);
    return rc;
}

int eng_tp_row_linear_fwd(whale_backend *bk, float *out, const float *inp, const float *w,
                          const float *b, int N, int IC, int OC, struct whale_par_comm *tp)
{
    if (!tp)
        return whale_k_linear_fwd(bk, NULL, F32, out, inp, w, b, N, IC, OC);
    int rc = whale_k_linear_fwd(bk, NULL, F32, out, inp, w, NULL, N, IC, OC);
    if (!rc)
        rc = eng_tp_allreduce(tp, out, (size_t)N * OC);
    if (!rc && b)
        rc = whale_k_bias_add(bk, NULL, F32, out, b, N, OC);
    return rc;
}

int eng_tp_embed_fwd(whale_backend *bk, struct whale_par_comm *tp, float *out,
                     const int32_t *tok, const float *wte, int v0, int Vl, const float *wpe,
                     int B, int T, int C)
{
    int rc = whale_k_embed_fwd_tp(bk, NULL, F32, out, tok, wte, v0, Vl, wpe, B, T, C);
    return rc ? rc : eng_tp_allreduce(tp, out, (size_t)B * T * C);
}

int eng_tp_xent_fwd(whale_backend *bk, struct whale_par_comm *tp, float *probs, float *losses,
                    const int32_t *targets, int v0, int N, int Vl, float *red)
{
    if (!tp)
        return whale_k_softmax_xent_fwd(bk, NULL, F32, probs, losses, targets, N, Vl);
    /* global row max, then the global sum of exp and the target's logit
     * (held by one rank), each reduced over TP */
    float *mx = red, *sum = red + N, *tl = red + 2 * N;
    int rc = whale_k_rows_max(bk, NULL, F32, mx, probs, N, Vl);
    if (!rc)
        rc = eng_tp_allreduce_max(tp, mx, N);
    if (!rc)
        rc = whale_k_rows_exp_sum(bk, NULL, F32, probs, sum, tl, mx, targets, v0, N, Vl);
    if (!rc)
        rc = eng_tp_allreduce(tp, sum, 2 * (size_t)N);
    if (!rc)
        rc = whale_k_rows_normalize(bk, NULL, F32, probs, losses, sum, tl, N, Vl);
    return rc;
}
