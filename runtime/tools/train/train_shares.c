/* Per-replica shares of the global batch (see train_shares.h). */
#include "train_shares.h"

#include <errno.h>
#include <stdlib.h>

#include "whale/log.h"

int train_share_of(const long *share, int n, int r, long micro, long accum, int zero,
                   const char *what, struct train_share *out)
{
    *out = (struct train_share){ 0 };
    const long unit = zero < 2 ? micro : accum;
    for (int i = 0; i < n; i++) {
        if (share[i] < 1) {
            whale_error("%s: replica %d's share is %ld samples (expected >= 1)", what, i,
                        share[i]);
            return -1;
        }
        if (share[i] % unit) {
            if (zero < 2)
                whale_error("%s: replica %d's share of %ld samples is not a multiple of the "
                            "micro-batch (%ld)", what, i, share[i], micro);
            else
                whale_error("%s: replica %d's share of %ld samples does not split into "
                            "grad-accum = %ld micro-batches (ZeRO %d runs the same number of "
                            "micro-batches on every replica)", what, i, share[i], accum, zero);
            return -1;
        }
        out->global += share[i];
        if (i < r)
            out->offset += share[i];
        out->uneven |= share[i] != share[0];
    }
    out->micro = zero < 2 ? micro : share[r] / accum;
    out->accum = zero < 2 ? share[r] / micro : accum;
    return 0;
}

void train_share_split(long total, int n, long *out)
{
    for (int i = 0; i < n; i++)
        out[i] = total / n + (i < total % n);
}

int train_share_parse(const char *s, int n, const char *what, long *out)
{
    const char *p = s;
    int k = 0;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > (1L << 20) || (*end && *end != ',')) {
            whale_error("%s=%s: expected %d positive integers separated by commas (each "
                        "1..%ld)", what, s, n, 1L << 20);
            return -1;
        }
        if (k < n)
            out[k] = v;
        k++;
        p = *end ? end + 1 : end;
    }
    if (k != n) {
        whale_error("%s=%s: %d entries, expected one per DP replica (DP = %d)", what, s, k, n);
        return -1;
    }
    return 0;
}
