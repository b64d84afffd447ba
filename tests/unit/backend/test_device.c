/* --device cpu|cuda|auto (whale_device_resolve, backend/choose.c): every
 * branch of the decision from a made-up probe (so it runs without a GPU),
 * then the real resolution on this machine, and the engine's refusals:
 * auto must be resolved before an engine exists, and cuda refuses what its
 * backend lacks by name before it touches a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/choose.h"
#include "backend/kernels.h"
#include "whale/dtype.h"
#include "whale/backend.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"

static char why[256];

static int decide(enum whale_device asked, bool built, const char *vis, int count,
                  const char *err, enum whale_device *out)
{
    struct bk_device_probe p = { .built = built, .visible = vis, .count = count, .error = err };
    *out = (enum whale_device)-1;
    why[0] = '\0';
    return bk_device_decide(asked, &p, out, why, sizeof why);
}

static void cpu_is_cpu(void **st)
{
    (void)st;
    enum whale_device d;
    assert_int_equal(decide(WHALE_DEVICE_CPU, true, "0", 1, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CPU);
}

static void auto_without_gpu_is_cpu_with_reason(void **st)
{
    (void)st;
    enum whale_device d;
    /* not built with CUDA */
    assert_int_equal(decide(WHALE_DEVICE_AUTO, false, "0", 0, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CPU);
    assert_non_null(strstr(why, "auto chose cpu"));
    assert_non_null(strstr(why, "no CUDA backend"));
    /* built, but the driver fails */
    assert_int_equal(decide(WHALE_DEVICE_AUTO, true, "0", 0, "CUDA driver version is insufficient",
                            &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CPU);
    assert_non_null(strstr(why, "driver"));
    assert_non_null(strstr(why, "insufficient"));
    /* Slurm hid the devices */
    assert_int_equal(decide(WHALE_DEVICE_AUTO, true, "NoDevFiles", 0, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CPU);
    assert_non_null(strstr(why, "CUDA_VISIBLE_DEVICES=NoDevFiles"));
    /* GPUs answer but none was bound to this task */
    assert_int_equal(decide(WHALE_DEVICE_AUTO, true, NULL, 4, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CPU);
    assert_non_null(strstr(why, "unset"));
}

static void auto_with_bound_gpu_is_cuda(void **st)
{
    (void)st;
    enum whale_device d;
    assert_int_equal(decide(WHALE_DEVICE_AUTO, true, "2,3", 2, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CUDA);
    assert_non_null(strstr(why, "2,3"));
}

static void cuda_unavailable_is_an_error_naming_why(void **st)
{
    (void)st;
    enum whale_device d;
    assert_int_equal(decide(WHALE_DEVICE_CUDA, false, "0", 1, NULL, &d), WHALE_ENOTSUP);
    assert_non_null(strstr(why, "no CUDA backend"));
    assert_int_equal(decide(WHALE_DEVICE_CUDA, true, NULL, 0, NULL, &d), WHALE_ENOTSUP);
    assert_non_null(strstr(why, "no GPU answered"));
    assert_int_equal(decide(WHALE_DEVICE_CUDA, true, "0", 0, "no CUDA-capable device is detected",
                            &d), WHALE_ENOTSUP);
    assert_non_null(strstr(why, "driver"));
    /* cuda asked for with visible GPUs but no binding: the user decides */
    assert_int_equal(decide(WHALE_DEVICE_CUDA, true, NULL, 1, NULL, &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CUDA);
}

/* The real probe of this process: on a machine without a GPU auto is cpu
 * with a reason and cuda is refused; with one, both may be cuda. */
static void this_machine(void **st)
{
    (void)st;
    enum whale_device d;
    char w[256];
    assert_int_equal(whale_device_resolve(WHALE_DEVICE_AUTO, &d, w, sizeof w), 0);
    assert_true(d == WHALE_DEVICE_CPU || d == WHALE_DEVICE_CUDA);
    assert_non_null(strstr(w, "auto chose"));
    int rc = whale_device_resolve(WHALE_DEVICE_CUDA, &d, w, sizeof w);
    if (whale_device_count(WHALE_DEVICE_CUDA) == 0) {
        assert_int_equal(rc, WHALE_ENOTSUP);
        assert_true(strlen(w) > 10);
        print_message("cuda here: %s\n", w);
    } else {
        assert_int_equal(rc, 0);
    }
}

static char logged[4096];
static void sink(int level, const char *line, void *user)
{
    (void)level;
    (void)user;
    size_t u = strlen(logged);
    snprintf(logged + u, sizeof logged - u, "%s\n", line);
}

static struct whale_engine_config tiny(void)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "dev", .layers = 1, .hidden = 16, .heads = 2,
                                         .kv_heads = 2, .ffn = 64, .seq = 8, .vocab = 32,
                                         .tied_embeddings = true };
    c.seq = 8;
    c.micro_batch = 1;
    c.threads = 1;
    return c;
}

static void engine_refusals(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    whale_engine *e = NULL;
    struct whale_engine_config c = tiny();
    /* auto reaching the engine is a caller bug, named */
    c.device = WHALE_DEVICE_AUTO;
    logged[0] = '\0';
    assert_int_equal(whale_engine_create(&c, NULL, &e), WHALE_EINVAL);
    assert_non_null(strstr(logged, "resolve auto"));
    /* cuda refuses what its backend lacks, by name, before any GPU is touched */
    c.device = WHALE_DEVICE_CUDA;
    c.offload = WHALE_OFFLOAD_OPTIMIZER;
    logged[0] = '\0';
    assert_int_equal(whale_engine_create(&c, NULL, &e), WHALE_ENOTSUP);
    assert_non_null(strstr(logged, "--offload optimizer"));
    assert_non_null(strstr(logged, "--device cpu"));
    /* cpu (the default) builds */
    c = tiny();
    assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
    whale_engine_destroy(e);
    whale_log_set_sink(NULL, NULL);
}

/* The ops appended for the engine, on cpu: the same bits as the code they
 * replaced in the engine. */
static void cpu_appended_ops(void **st)
{
    (void)st;
    whale_backend *b = NULL;
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    assert_int_equal(whale_backend_open(&o, &b), 0);
    enum { N = 7, IC = 24, OC = 10 };
    float x[N * IC], w[OC * IC], bias[OC], y1[N * OC], y2[N * OC];
    for (int i = 0; i < N * IC; i++)
        x[i] = (float)((i * 37) % 101) / 17.0f - 3.0f;
    for (int i = 0; i < OC * IC; i++)
        w[i] = (float)((i * 53) % 89) / 29.0f - 1.5f;
    for (int i = 0; i < OC; i++)
        bias[i] = 0.1f * (float)i - 0.3f;
    /* bias_add: the loop of the engine's row-parallel linear */
    for (int i = 0; i < N * OC; i++)
        y1[i] = y2[i] = (float)i / 3.0f;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < OC; c++)
            y1[n * OC + c] += bias[c];
    assert_int_equal(whale_k_bias_add(b, NULL, WHALE_FLOAT32, y2, bias, N, OC), 0);
    assert_memory_equal(y1, y2, sizeof y1);
    /* round: what eng_lp_round did */
    memcpy(y1, x, sizeof y1);
    memcpy(y2, x, sizeof y2);
    whale_round_f32_bf16(y1, N * OC);
    assert_int_equal(whale_k_round(b, NULL, y2, WHALE_BFLOAT16, N * OC), 0);
    assert_memory_equal(y1, y2, sizeof y1);
    /* fp32 GEMM arithmetic: the engine's k_linear_fwd(mm) */
    assert_int_equal(whale_backend_fp32_gemm_math(b), WHALE_FLOAT32);
    assert_int_equal(whale_backend_set_fp32_gemm_math(b, WHALE_INT32), WHALE_EINVAL);
    assert_int_equal(whale_backend_set_fp32_gemm_math(b, WHALE_BFLOAT16), 0);
    k_linear_fwd(WHALE_BFLOAT16, y1, x, w, bias, N, IC, OC);
    assert_int_equal(whale_k_linear_fwd(b, NULL, WHALE_FLOAT32, y2, x, w, bias, N, IC, OC), 0);
    assert_memory_equal(y1, y2, sizeof y1);
    assert_true(whale_backend_reads_host(b));
    whale_backend_close(b);
}

/* WHALE_BF16_GEMM: an unknown value is refused when a CPU backend opens;
 * auto multiplies bf16 in oneDNN only where the CPU has AMX-BF16 (with
 * AVX512_BF16 alone sgemm trained faster) */
static void bf16_gemm_choice(void **st)
{
    (void)st;
    whale_backend *b = NULL;
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    setenv("WHALE_BF16_GEMM", "amx", 1);
    assert_int_equal(whale_backend_open(&o, &b), WHALE_EINVAL);
    assert_null(b);
    unsetenv("WHALE_BF16_GEMM");
    assert_int_equal(whale_backend_open(&o, &b), 0);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-bf16"))
        assert_false(whale_backend_has_gemm_math(b, WHALE_BFLOAT16));
    assert_true(whale_backend_has_gemm_math(b, WHALE_FLOAT32));
    whale_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest t[] = {
        cmocka_unit_test(bf16_gemm_choice),
        cmocka_unit_test(cpu_is_cpu),
        cmocka_unit_test(auto_without_gpu_is_cpu_with_reason),
        cmocka_unit_test(auto_with_bound_gpu_is_cuda),
        cmocka_unit_test(cuda_unavailable_is_an_error_naming_why),
        cmocka_unit_test(this_machine),
        cmocka_unit_test(engine_refusals),
        cmocka_unit_test(cpu_appended_ops),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
