/* Throughput of one training step (forward, backward, clip, fused AdamW)
 * of a GPT on one device through whale/backend.h (minigpt): tokens/s,
 * model TFLOP/s (6 N + 6 L C T per token) and MFU against the device's
 * dense 16-bit peak. Used by contrib/gpu-check.sh; prints one JSON line
 * last. This measures the backend's kernels on one GPU, not whale-train.
 *
 *   gpu_bench [--model gpt2-124m|gpt-1.3b|gpt-tiny] [--batch B] [--seq T]
 *             [--steps S] [--dtype bf16|fp16|fp32] [--device cuda|cpu]
 *             [--peak-tflops X] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minigpt.h"
#include "whale/error.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int usage(const char *why)
{
    fprintf(stderr, "gpu_bench: %s\nusage: gpu_bench [--model gpt2-124m|gpt-1.3b|gpt-tiny] "
                    "[--batch B] [--seq T] [--steps S] [--dtype bf16|fp16|fp32] "
                    "[--device cuda|cpu] [--peak-tflops X]\n", why);
    return 2;
}

/* Dense bf16/fp16 tensor-core peak by device name (SXM parts); 0: unknown. */
static double peak_for(const char *desc)
{
    if (strstr(desc, "H100") || strstr(desc, "H200") || strstr(desc, "GH200"))
        return 989.4;
    if (strstr(desc, "B200"))
        return 2250.0;
    if (strstr(desc, "A100"))
        return 312.0;
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = "gpt2-124m", *dts = "bf16", *dev = "cuda";
    int B = 0, T = 1024, steps = 20;
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage("help");
            return 0;
        }
        if (!v)
            return usage("option without a value");
        i++;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--dtype")) dts = v;
        else if (!strcmp(a, "--device")) dev = v;
        else if (!strcmp(a, "--peak-tflops")) peak = atof(v);
        else return usage("unknown option");
    }
    struct mg_config c = { .seed = 1 };
    if (!strcmp(model, "gpt2-124m"))
        c = (struct mg_config){ .L = 12, .C = 768, .NH = 12, .V = 50304, .B = B ? B : 8 };
    else if (!strcmp(model, "gpt-1.3b"))
        c = (struct mg_config){ .L = 24, .C = 2048, .NH = 16, .V = 50304, .B = B ? B : 4 };
    else if (!strcmp(model, "gpt-tiny"))
        c = (struct mg_config){ .L = 2, .C = 128, .NH = 4, .V = 256, .B = B ? B : 8 };
    else
        return usage("--model: gpt2-124m, gpt-1.3b or gpt-tiny");
    c.T = T;
    c.seed = 1;
    c.t = !strcmp(dts, "bf16") ? WHALE_BFLOAT16 : !strcmp(dts, "fp16") ? WHALE_FLOAT16
        : !strcmp(dts, "fp32") ? WHALE_FLOAT32 : WHALE_DTYPE_COUNT_;
    if (c.t == WHALE_DTYPE_COUNT_)
        return usage("--dtype: bf16, fp16 or fp32");
    if (c.T < 1 || c.B < 1 || steps < 1)
        return usage("--batch, --seq and --steps must be >= 1");
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    if (whale_device_parse(dev, &o.device))
        return 2;
    if (o.device == WHALE_DEVICE_CUDA && !whale_device_available(WHALE_DEVICE_CUDA)) {
        printf("SKIP: no GPU visible (or no CUDA backend in this build): nothing measured\n");
        return 77;
    }
    whale_backend *b;
    if (whale_backend_open(&o, &b))
        return 1;
    if (peak <= 0)
        peak = peak_for(whale_backend_describe(b));
    struct mg_model *m = NULL;
    int rc = mg_create(b, &c, &m);
    if (rc) {
        fprintf(stderr, "gpu_bench: cannot build %s at B=%d T=%d: %s\n", model, c.B, c.T,
                whale_strerror(rc));
        mg_free(m);
        whale_backend_close(b);
        return 1;
    }
    int n = c.B * c.T;
    int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4);
    uint32_t s = 1;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        tok[i] = (int32_t)((s >> 8) % 50257u % (unsigned)c.V);
        tgt[i] = (int32_t)((s >> 3) % 50257u % (unsigned)c.V);
    }
    const int warm = 2;
    float loss = 0, first = 0;
    double t0 = 0;
    for (int k = 0; k < warm + steps && !rc; k++) {
        if (k == warm)
            t0 = now();
        rc = mg_step(m, tok, tgt, 3e-4f, &loss);
        if (k == 0)
            first = loss;
    }
    double dt = now() - t0;
    if (rc) {
        fprintf(stderr, "gpu_bench: step failed: %s\n", whale_strerror(rc));
    } else {
        double tps = (double)n * steps / dt, fl = mg_flops_per_token(m);
        double tflops = tps * fl / 1e12, mfu = peak > 0 ? tflops / peak : -1;
        size_t now_b, peak_b;
        whale_mem_usage(b, WHALE_MEM_KIND_COUNT_, &now_b, &peak_b);
        printf("%s on %s, %s, B=%d T=%d, %zu params: %.1f ms/step, %.0f tokens/s, "
               "%.1f TFLOP/s, MFU %s%.1f %% (peak %.0f TFLOP/s), loss %.3f -> %.3f, "
               "device memory %.2f GiB\n",
               model, whale_backend_describe(b), dts, c.B, c.T, mg_num_params(m),
               1e3 * dt / steps, tps, tflops, mfu < 0 ? "n/a " : "", mfu < 0 ? 0 : 100 * mfu,
               peak, first, loss, peak_b / 1073741824.0);
        printf("{\"model\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, \"seq\": %d, \"params\": %zu, "
               "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"tflops\": %.2f, \"mfu\": %.4f, "
               "\"peak_tflops\": %.1f, \"device\": \"%s\"}\n",
               model, dts, c.B, c.T, mg_num_params(m), 1e3 * dt / steps, tps, tflops, mfu, peak,
               whale_backend_describe(b));
    }
    free(tok);
    free(tgt);
    mg_free(m);
    whale_backend_close(b);
    return rc ? 1 : 0;
}
