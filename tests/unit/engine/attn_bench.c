/* Causal attention on the CPU, blocked (attn_blocked.c) against plain
 * (kernels.c): time of one forward and one backward, and the bytes each
 * keeps from forward to backward, for one shape. Driven by
 * contrib/bench/attention-cpu.py; prints one JSON object.
 *
 *   attn_bench B HEADS HEAD_SIZE T REPS THREADS
 *
 * Kept for backward (beyond q|k|v and the output, which both keep):
 * plain the probabilities (B,H,T,T) fp32, blocked the row log-sum-exp
 * (B,H,T) fp32. The time is the best of REPS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/attn_blocked.h"
#include "backend/kernels.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: attn_bench B HEADS HEAD_SIZE T REPS THREADS\n");
        return 2;
    }
    const int B = atoi(argv[1]), H = atoi(argv[2]), hd = atoi(argv[3]), T = atoi(argv[4]);
    const int reps = atoi(argv[5]), thr = atoi(argv[6]);
    if (B < 1 || H < 1 || hd < 2 || T < 1 || reps < 1 || thr < 1) {
        fprintf(stderr, "attn_bench: every argument must be >= 1 (HEAD_SIZE >= 2)\n");
        return 2;
    }
    k_set_threads(thr);
    const size_t N = (size_t)B * T, C = (size_t)H * hd, ld = 3 * C;
    const struct k_attn_map m = { .NH = H, .KVl = H, .hd = hd, .hq0 = 0, .g = 1, .k0 = 0 };
    float *qkv = malloc(N * ld * 4), *out = malloc(N * C * 4), *dout = malloc(N * C * 4);
    float *d = malloc(N * ld * 4), *lse = malloc((size_t)B * H * T * 4);
    float *att = malloc((size_t)B * H * T * T * 4), *out2 = malloc(N * C * 4);
    if (!qkv || !out || !dout || !d || !lse || !att || !out2) {
        fprintf(stderr, "attn_bench: out of memory for T=%d\n", T);
        return 1;
    }
    uint64_t s = 7;
    for (size_t i = 0; i < N * ld; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        qkv[i] = (float)((s >> 40) / 16777216.0) * 2.0f - 1.0f;
    }
    for (size_t i = 0; i < N * C; i++)
        dout[i] = qkv[i * 3 % (N * ld)];
    double pf = 1e30, pb = 1e30, ff = 1e30, fb = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        k_attention_fwd(out2, att, qkv, B, T, H, hd);
        double t1 = now();
        k_attention_bwd(d, dout, qkv, att, B, T, H, hd);
        double t2 = now();
        if (k_flash_fwd(out, (int)C, lse, qkv, (int)ld, qkv + C, (int)ld, qkv + 2 * C, (int)ld,
                        B, T, &m))
            return 1;
        double t3 = now();
        if (k_flash_bwd(d, d + C, d + 2 * C, dout, (int)C, out, lse, qkv, (int)ld, qkv + C,
                        (int)ld, qkv + 2 * C, (int)ld, B, T, &m))
            return 1;
        double t4 = now();
        pf = fmin(pf, t1 - t0);
        pb = fmin(pb, t2 - t1);
        ff = fmin(ff, t3 - t2);
        fb = fmin(fb, t4 - t3);
    }
    double md = 0;
    for (size_t i = 0; i < N * C; i++)
        md = fmax(md, fabs(out[i] - out2[i]));
    printf("{\"B\": %d, \"heads\": %d, \"head_size\": %d, \"T\": %d, \"threads\": %d, "
           "\"plain_fwd_ms\": %.3f, \"plain_bwd_ms\": %.3f, \"blocked_fwd_ms\": %.3f, "
           "\"blocked_bwd_ms\": %.3f, \"plain_kept_bytes\": %zu, \"blocked_kept_bytes\": %zu, "
           "\"max_out_diff\": %.3g}\n", B, H, hd, T, thr, pf * 1e3, pb * 1e3, ff * 1e3, fb * 1e3,
           (size_t)B * H * T * T * 4, (size_t)B * H * T * 4, md);
    free(qkv); free(out); free(dout); free(d); free(lse); free(att); free(out2);
    return 0;
}
