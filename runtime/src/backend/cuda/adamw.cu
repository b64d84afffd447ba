// Fused multi-tensor AdamW: up to MT pieces per launch, passed by value in
// the kernel parameters (no device-side descriptor copy); each block
// updates CHUNK consecutive elements of one piece: moments, weight, and the
// 16-bit PARAM copy in the same pass. Same arithmetic, in the same order,
// as whale_adamw_update (optim/adamw.c); bias corrections computed on the
// host in double exactly as there.
//   w, m, v (n) fp32 in place; g (n) fp32 read; w16 (n) bf16/fp16 written.
#include <cmath>

#include "backend/cuda/common.cuh"

namespace {

constexpr int MT = 32;
constexpr int CHUNK = 4096;
constexpr int THREADS = 256;

struct adam_batch {
    float *w[MT];
    const float *g[MT];
    float *m[MT];
    float *v[MT];
    void *w16[MT];
    int64_t n[MT];
    float wd[MT];
    int64_t first_block[MT + 1];
    int np;
};

struct adam_hyper {
    float lr, b1, b2, eps, c1, c2, grad_mul;
};

template <typename H>
__global__ void __launch_bounds__(THREADS) k_adamw(adam_batch bt, adam_hyper hp)
{
    int p = 0;
    while (p + 1 < bt.np && (int64_t)blockIdx.x >= bt.first_block[p + 1])
        p++;
    int64_t lo = ((int64_t)blockIdx.x - bt.first_block[p]) * CHUNK;
    int64_t hi = min(lo + CHUNK, bt.n[p]);
    float *w = bt.w[p], *m = bt.m[p], *v = bt.v[p];
    const float *g = bt.g[p];
    H *w16 = static_cast<H *>(bt.w16[p]);
    const float wd = bt.wd[p];
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
        float gi = g[i] * hp.grad_mul;
        float mi = hp.b1 * m[i] + (1.0f - hp.b1) * gi;
        float vi = hp.b2 * v[i] + (1.0f - hp.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * hp.c1, vhat = vi * hp.c2;
        float wi = w[i] - hp.lr * (mhat / (sqrtf(vhat) + hp.eps) + wd * w[i]);
        w[i] = wi;
        if (w16)
            stf(w16, i, wi);
    }
}

template <typename H>
int launch(bk_stream s, const adam_batch &bt, const adam_hyper &hp)
{
    int64_t blocks = bt.first_block[bt.np];
    if (!blocks)
        return 0;
    k_adamw<H><<<(unsigned)blocks, THREADS, 0, STREAM(s)>>>(bt, hp);
    LAUNCHED("k_adamw");
    return 0;
}

} // namespace

extern "C" int bkg_adamw(whale_backend *b, bk_stream s, const struct whale_adamw *o, int64_t t,
                         float grad_mul, const struct whale_adamw_piece *pc, int np,
                         enum whale_dtype w16t)
{
    ON_DEVICE(b);
    adam_hyper hp;
    hp.lr = o->lr;
    hp.b1 = o->beta1;
    hp.b2 = o->beta2;
    hp.eps = o->eps;
    hp.c1 = (float)(1.0 / (1.0 - pow(o->beta1, (double)t)));
    hp.c2 = (float)(1.0 / (1.0 - pow(o->beta2, (double)t)));
    hp.grad_mul = grad_mul;
    for (int p0 = 0; p0 < np; p0 += MT) {
        adam_batch bt;
        bt.np = np - p0 < MT ? np - p0 : MT;
        bt.first_block[0] = 0;
        for (int k = 0; k < bt.np; k++) {
            const whale_adamw_piece &x = pc[p0 + k];
            bt.w[k] = x.w;
            bt.g[k] = x.g;
            bt.m[k] = x.m;
            bt.v[k] = x.v;
            bt.w16[k] = x.w16;
            bt.n[k] = (int64_t)x.n;
            bt.wd[k] = x.decay ? o->weight_decay : 0.0f;
            bt.first_block[k + 1] = bt.first_block[k] + ((int64_t)x.n + CHUNK - 1) / CHUNK;
        }
        if (bt.first_block[bt.np] > 0x7fffffff) {
            whale_error("cuda adamw: %lld blocks in one launch (pieces too large)",
                        (long long)bt.first_block[bt.np]);
            return WHALE_ERANGE;
        }
        int rc = w16t == WHALE_FLOAT16 ? launch<__half>(s, bt, hp)
                                       : launch<__nv_bfloat16>(s, bt, hp);
        if (rc)
            return rc;
    }
    return 0;
}
