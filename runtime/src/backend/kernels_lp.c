/* bf16 arithmetic for the GEMMs of mixed precision: C (M,N) fp32 =
 * op(A) op(B) with bf16 operands and fp32 accumulation, through oneDNN's
 * matmul primitive (Debian's OpenBLAS exports no cblas_sbgemm). Used by
 * default only where the CPU has AMX-BF16 (checked at run time) and oneDNN
 * was found at build time; otherwise k_gemm_mm takes fp32 sgemm on the same
 * values. With AVX512_BF16 alone oneDNN's matmul (Debian's 2.6) trained
 * gpt-small at 0.65x of sgemm's tokens per CPU-second (2,800 vs 4,300,
 * alternated runs, 2026-12-07): the operand conversions and its kernels for
 * these small shapes cost more than the bf16 dot products save, so
 * WHALE_BF16_GEMM=onednn asks for it there; without AVX512_BF16 oneDNN
 * would emulate bf16, slower still, and is never used.
 *
 * Operands arrive in fp32 (weights hold bf16-representable values already;
 * activations are rounded here, as a bf16 tensor would be). Primitives are
 * cached per shape: a model has a handful of GEMM shapes. */
#include "kernels.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "whale/dtype.h"
#include "whale/knobs.h"

int k_bf16_gemm_mode(void)
{
    const char *v = whale_knob_getenv("WHALE_BF16_GEMM");
    if (!v || !*v || !strcmp(v, "auto"))
        return K_BF16_GEMM_AUTO;
    if (!strcmp(v, "onednn"))
        return K_BF16_GEMM_ONEDNN;
    if (!strcmp(v, "sgemm"))
        return K_BF16_GEMM_SGEMM;
    return -1;
}

#ifdef WHALE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

struct mm_key {
    int ta, tb, M, N, K, lda, ldb, ldc, acc;
};
struct mm_entry {
    struct mm_key k;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, scratch;
    size_t scratch_bytes;
};

enum { MM_CACHE = 64 };
static struct mm_entry cache[MM_CACHE];
static int ncache;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t eng;
static pthread_once_t eng_once = PTHREAD_ONCE_INIT;
static bool eng_ok;

/* Per thread: bf16 operand copies, the oneDNN scratchpad and a stream,
 * freed when the thread ends (in-process ranks are threads). */
struct tstate {
    uint16_t *buf;
    size_t cap;
    void *scratch;
    size_t scratch_cap;
    dnnl_stream_t stream;
};
static pthread_key_t tkey;

static void tstate_free(void *p)
{
    struct tstate *t = p;
    free(t->buf);
    free(t->scratch);
    if (t->stream)
        dnnl_stream_destroy(t->stream);
    free(t);
}

static struct tstate *tstate_get(void)
{
    struct tstate *t = pthread_getspecific(tkey);
    if (!t && (t = calloc(1, sizeof *t)) && pthread_setspecific(tkey, t)) {
        free(t);
        t = NULL;
    }
    return t;
}


static void eng_init(void)
{
    __builtin_cpu_init();
    int mode = k_bf16_gemm_mode();
    if (!__builtin_cpu_supports("avx512bf16") || mode == K_BF16_GEMM_SGEMM || mode < 0 ||
        (mode == K_BF16_GEMM_AUTO && !__builtin_cpu_supports("amx-bf16")))
        return;
    eng_ok = pthread_key_create(&tkey, tstate_free) == 0 &&
             dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success;
}

bool k_bf16_gemm_available(void)
{
    pthread_once(&eng_once, eng_init);
    return eng_ok;
}

/* (rows, cols) row-major with leading dimension ld, or its transpose */
static void md_of(dnnl_memory_desc_t *md, int rows, int cols, int ld, int trans,
                  dnnl_data_type_t dt)
{
    dnnl_dims_t dims = { rows, cols };
    dnnl_dims_t strides = { trans ? 1 : ld, trans ? ld : 1 };
    dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static struct mm_entry *get_prim(const struct mm_key *k)
{
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < ncache; i++)
        if (!memcmp(&cache[i].k, k, sizeof *k)) {
            pthread_mutex_unlock(&cache_mu);
            return &cache[i];
        }
    struct mm_entry *e = NULL;
    if (ncache < MM_CACHE) {
        e = &cache[ncache];
        memset(e, 0, sizeof *e);
        e->k = *k;
        md_of(&e->a, k->M, k->K, k->lda, k->ta, dnnl_bf16);
        md_of(&e->b, k->K, k->N, k->ldb, k->tb, dnnl_bf16);
        md_of(&e->c, k->M, k->N, k->ldc, 0, dnnl_f32);
        dnnl_matmul_desc_t d;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        /* user scratchpad: a primitive's own one is shared by every thread that
         * runs it (in-process ranks do), ours is per thread */
        bool ok = dnnl_matmul_desc_init(&d, &e->a, &e->b, NULL, &e->c) == dnnl_success &&
                  dnnl_primitive_attr_create(&attr) == dnnl_success &&
                  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                      dnnl_success;
        if (ok && k->acc) /* beta = 1: C += A B */
            ok = dnnl_post_ops_create(&po) == dnnl_success &&
                 dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
                 dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        ok = ok && dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL) == dnnl_success &&
             dnnl_primitive_create(&e->prim, pd) == dnnl_success;
        if (ok) {
            const dnnl_memory_desc_t *sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            if (sm)
                e->scratch = *sm;
            e->scratch_bytes = sm ? dnnl_memory_desc_get_size(sm) : 0;
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        if (po)
            dnnl_post_ops_destroy(po);
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        if (ok)
            ncache++;
        else
            e = NULL;
    }
    pthread_mutex_unlock(&cache_mu);
    return e;
}

/* the span of a (rows, cols, ld) operand as stored */
static size_t span(int rows, int cols, int ld, int trans)
{
    return trans ? (size_t)(cols - 1) * ld + rows : (size_t)(rows - 1) * ld + cols;
}

static int bf16_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    struct mm_key key = { ta, tb, M, N, K, lda, ldb, ldc, beta != 0.0f };
    struct mm_entry *e = get_prim(&key);
    if (!e)
        return -1;
    struct tstate *t = tstate_get();
    if (!t)
        return -1;
    size_t na = span(M, K, lda, ta), nb = span(K, N, ldb, tb);
    if (na + nb > t->cap) {
        free(t->buf);
        t->cap = na + nb;
        if (!(t->buf = malloc(t->cap * sizeof *t->buf))) {
            t->cap = 0;
            return -1;
        }
    }
    if (!t->stream &&
        dnnl_stream_create(&t->stream, eng, dnnl_stream_default_flags) != dnnl_success) {
        t->stream = NULL;
        return -1;
    }
    if (e->scratch_bytes > t->scratch_cap) {
        free(t->scratch);
        t->scratch = NULL;
        t->scratch_cap = 0;
        if (posix_memalign(&t->scratch, 64, e->scratch_bytes))
            return -1;
        t->scratch_cap = e->scratch_bytes;
    }
    uint16_t *tbuf = t->buf;
    whale_f32_to_bf16(tbuf, A, na);
    whale_f32_to_bf16(tbuf + na, B, nb);
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    int rc = -1;
    if (dnnl_memory_create(&ma, &e->a, eng, tbuf) == dnnl_success &&
        dnnl_memory_create(&mb, &e->b, eng, tbuf + na) == dnnl_success &&
        dnnl_memory_create(&mc, &e->c, eng, C) == dnnl_success &&
        (!e->scratch_bytes ||
         dnnl_memory_create(&ms, &e->scratch, eng, t->scratch) == dnnl_success)) {
        dnnl_exec_arg_t args[4] = { { DNNL_ARG_SRC, ma }, { DNNL_ARG_WEIGHTS, mb },
                                    { DNNL_ARG_DST, mc }, { DNNL_ARG_SCRATCHPAD, ms } };
        if (dnnl_primitive_execute(e->prim, t->stream, ms ? 4 : 3, args) == dnnl_success &&
            dnnl_stream_wait(t->stream) == dnnl_success)
            rc = 0;
    }
    if (ms)
        dnnl_memory_destroy(ms);
    if (ma)
        dnnl_memory_destroy(ma);
    if (mb)
        dnnl_memory_destroy(mb);
    if (mc)
        dnnl_memory_destroy(mc);
    return rc;
}
#else
bool k_bf16_gemm_available(void)
{
    return false;
}
#endif

void k_gemm_mm(enum whale_dtype mm, int transA, int transB, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef WHALE_HAVE_DNNL
    /* the shapes the linear layers use: alpha 1, beta 0 or 1 */
    if (mm == WHALE_BFLOAT16 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && M > 0 &&
        N > 0 && K > 0 && k_bf16_gemm_available() &&
        bf16_gemm(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
#endif
    (void)mm;
    k_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
