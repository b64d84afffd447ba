/* Pipeline stage partition: contiguous layer ranges minimising the most
 * expensive stage. */
#include <float.h>
#include <stdlib.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/pipeline.h"

int whale_pp_balance(const double *cost, int n, int k, int *out)
{
    if (k < 1 || n < k) {
        whale_error("pipeline partition: %d layers cannot fill %d stages (each needs >= 1)", n,
                    k);
        return WHALE_EINVAL;
    }
    double *pre = malloc(((size_t)n + 1) * sizeof *pre);
    /* f[j*(n+1) + i]: smallest bottleneck of layers [0, i) in j stages */
    double *f = malloc(((size_t)k + 1) * ((size_t)n + 1) * sizeof *f);
    if (!pre || !f) {
        free(pre);
        free(f);
        return WHALE_ENOMEM;
    }
    pre[0] = 0;
    for (int i = 0; i < n; i++)
        pre[i + 1] = pre[i] + (cost[i] > 0 ? cost[i] : 0);
#define F(j, i) f[(size_t)(j) * ((size_t)n + 1) + (size_t)(i)]
    for (int j = 0; j <= k; j++)
        for (int i = 0; i <= n; i++)
            F(j, i) = DBL_MAX;
    F(0, 0) = 0;
    for (int j = 1; j <= k; j++)
        for (int i = j; i <= n; i++)
            for (int t = j - 1; t < i; t++) {
                if (F(j - 1, t) == DBL_MAX)
                    continue;
                double c = pre[i] - pre[t];
                double b = F(j - 1, t) > c ? F(j - 1, t) : c;
                if (b < F(j, i))
                    F(j, i) = b;
            }
    double best = F(k, n), tol = best * 1e-12 + 1e-300;
    /* Among partitions with that bottleneck, the most even one (least sum of
     * squared stage costs); ties go to lighter earlier stages, which stash
     * more micro-batches under 1F1B. F is reused for the sums of squares. */
    int *from = malloc(((size_t)k + 1) * ((size_t)n + 1) * sizeof *from);
    if (!from) {
        free(pre);
        free(f);
        return WHALE_ENOMEM;
    }
    for (int j = 0; j <= k; j++)
        for (int i = 0; i <= n; i++)
            F(j, i) = DBL_MAX;
    F(0, 0) = 0;
    for (int j = 1; j <= k; j++)
        for (int i = j; i <= n; i++)
            for (int t = j - 1; t < i; t++) {
                double c = pre[i] - pre[t];
                if (F(j - 1, t) == DBL_MAX || c > best + tol)
                    continue;
                double q = F(j - 1, t) + c * c;
                if (F(j, i) == DBL_MAX || q < F(j, i) - 1e-12 * F(j, i)) {
                    F(j, i) = q;
                    from[(size_t)j * ((size_t)n + 1) + (size_t)i] = t;
                }
            }
    int i = n;
    for (int j = k; j >= 1; j--) {
        int t = from[(size_t)j * ((size_t)n + 1) + (size_t)i];
        out[j - 1] = i - t;
        i = t;
    }
    free(from);
#undef F
    free(pre);
    free(f);
    return 0;
}
