/* WHALE_FP32_GEMM (backend/kernels_sgemm.c): an unknown value is refused when
 * a CPU backend opens; onednn runs the linear layers' products through
 * oneDNN's sgemm with the bias fill and GELU hooks around it, and every
 * result matches a double-precision product (other rounding than OpenBLAS:
 * a tolerance, not bits). Skipped where libwhale was built without oneDNN. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "whale/backend.h"
#include "whale/dtype.h"
#include "whale/error.h"

/* sizes above gemm_serial's 2e6 multiply-adds (the threaded path), one odd */
enum { N = 96, IC = 160, OC = 200 };

static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rnd(&seed);
}

static void near(const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > 1e-5 * (1.0 + fabs(want[i])))
            fail_msg("element %zu: %.9g, want %.9g", i, (double)got[i], want[i]);
}

static void knob_refused(void **st)
{
    (void)st;
    whale_backend *b = NULL;
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    setenv("WHALE_FP32_GEMM", "mkl", 1);
    assert_int_equal(whale_backend_open(&o, &b), WHALE_EINVAL);
    assert_null(b);
    setenv("WHALE_FP32_GEMM", "onednn", 1);
    assert_int_equal(whale_backend_open(&o, &b), 0);
    whale_backend_close(b);
}

/* out = x w^T + b, gl = gelu(out); then the backward with GELU and acc = 0 */
static void linear_onednn(void **st)
{
    (void)st;
    if (!k_fp32_gemm_onednn())
        skip();
    k_set_threads(2);
    static float x[N * IC], w[OC * IC], bias[OC], out[N * OC], gl[N * OC], g2[N * OC];
    static float dout[N * OC], pre[N * IC], dinp[N * IC], dw[OC * IC], db[OC], t[N * IC], t2[N * IC];
    static double ref[N * OC], rdw[OC * IC], rdb[OC], rdi[N * IC];
    fill(x, N * IC, 1);
    fill(w, OC * IC, 2);
    fill(bias, OC, 3);
    fill(dout, N * OC, 4);
    fill(pre, N * IC, 5);
    k_linear_gelu_fwd(WHALE_FLOAT32, out, gl, x, w, bias, N, IC, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int i = 0; i < IC; i++)
                s += (double)x[n * IC + i] * w[o * IC + i];
            ref[n * OC + o] = s;
        }
    near(out, ref, N * OC);
    /* the post hook covered every row: the same bits as a separate pass */
    k_gelu_fwd(g2, out, N * OC);
    assert_memory_equal(gl, g2, sizeof gl);

    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    k_linear_bwd_gelu(WHALE_FLOAT32, dinp, pre, dw, db, dout, x, w, N, IC, OC, 0);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int o = 0; o < OC; o++)
                s += (double)dout[n * OC + o] * w[o * IC + i];
            t[n * IC + i] = (float)s;
        }
    k_gelu_bwd(t2, pre, t, N * IC);
    for (int k = 0; k < N * IC; k++)
        rdi[k] = t2[k];
    near(dinp, rdi, N * IC);
    for (int o = 0; o < OC; o++) {
        rdb[o] = 0;
        for (int i = 0; i < IC; i++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += (double)dout[n * OC + o] * x[n * IC + i];
            rdw[o * IC + i] = s;
        }
        for (int n = 0; n < N; n++)
            rdb[o] += dout[n * OC + o];
    }
    near(dw, rdw, OC * IC);
    near(db, rdb, OC);
}

int main(void)
{
    /* read once per process (the first GEMM): set before any */
    setenv("WHALE_FP32_GEMM", "onednn", 1);
    const struct CMUnitTest t[] = {
        cmocka_unit_test(knob_refused),
        cmocka_unit_test(linear_onednn),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
