/* Model-level equivalence: the same GPT (minigpt, gpt-tiny's shape) trained
 * for a few steps on the cpu and on the cuda backend from the same weights
 * and batches. fp32: every step's loss within 1e-4 relative, gradients of
 * step 1 within 1e-3 of the largest; bf16: losses within 1e-2 relative
 * (16-bit activations round differently after different summation orders).
 * Skips (exit 77) without a GPU. */
#include <stdint.h>

#include "gpu_util.h"
#include "minigpt.h"

static int run_pair(whale_backend *cpu, whale_backend *gpu, enum whale_dtype t, int steps,
                    double loss_tol)
{
    /* gpt-tiny: 2 layers, 4 heads, C 128, vocabulary 256 (bytes), T 64 */
    struct mg_config c = { .L = 2, .C = 128, .NH = 4, .V = 256, .T = 64, .B = 4, .t = t,
                           .seed = 1 };
    struct mg_model *mc = NULL, *mgp = NULL;
    gu_check(mg_create(cpu, &c, &mc), "mg_create cpu");
    gu_check(mg_create(gpu, &c, &mgp), "mg_create gpu");
    int n = c.B * c.T, fails = 0;
    int32_t *tok = malloc(n * 4), *tgt = malloc(n * 4);
    size_t P = mg_flat_size(mc);
    float *g1 = malloc(P * 4), *g2 = malloc(P * 4);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) {
            tok[i] = (int32_t)((i * 131 + s * 17) % c.V);
            tgt[i] = (tok[i] * 7 + 3) % c.V;
        }
        float lc, lg;
        if (s == 0) {
            /* gradients of the first step, before any update */
            gu_check(mg_grads(mc, tok, tgt, &lc), "mg_grads cpu");
            gu_check(mg_grads(mgp, tok, tgt, &lg), "mg_grads gpu");
            gu_check(mg_get_grads(mc, g1), "grads cpu");
            gu_check(mg_get_grads(mgp, g2), "grads gpu");
            double mx = 0, worst = 0;
            for (size_t i = 0; i < P; i++)
                mx = fmax(mx, fabs(g1[i]));
            for (size_t i = 0; i < P; i++)
                worst = fmax(worst, fabs(g1[i] - g2[i]) / mx);
            double gtol = t == WHALE_FLOAT32 ? 1e-3 : 5e-2;
            bool ok = worst <= gtol;
            printf("%-4s %s gradients, step 1: max |gpu - cpu| / max|g| = %.2e (tol %.0e)\n",
                   ok ? "ok" : "FAIL", whale_dtype_name(t), worst, gtol);
            fails += !ok;
        }
        gu_check(mg_step(mc, tok, tgt, 1e-3f, &lc), "mg_step cpu");
        gu_check(mg_step(mgp, tok, tgt, 1e-3f, &lg), "mg_step gpu");
        double rel = fabs((double)lg - lc) / fabs(lc);
        bool ok = rel <= loss_tol;
        printf("%-4s %s step %d: loss cpu %.6f gpu %.6f rel %.2e (tol %.0e)\n", ok ? "ok" : "FAIL",
               whale_dtype_name(t), s + 1, lc, lg, rel, loss_tol);
        fails += !ok;
    }
    free(tok);
    free(tgt);
    free(g1);
    free(g2);
    mg_free(mc);
    mg_free(mgp);
    return fails;
}

int main(void)
{
    whale_backend *cpu, *gpu;
    gu_open(&cpu, &gpu, -1);
    int fails = run_pair(cpu, gpu, WHALE_FLOAT32, 8, 1e-4);
    fails += run_pair(cpu, gpu, WHALE_BFLOAT16, 8, 1e-2);
    whale_backend_close(gpu);
    whale_backend_close(cpu);
    printf("%s: %d failure%s\n", fails ? "FAIL" : "PASS", fails, fails == 1 ? "" : "s");
    return fails ? 1 : 0;
}
