/* Memory model against the ZeRO and activation formulas (training-facts
 * note), pipeline in-flight activations, the recompute dynamic program
 * against brute force, the uniform fast path against the DP, calibration
 * profiles, and the plan handed to the runtime. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "whale/planfile.h"
#include "plan/plan_internal.h"
#include "plan_fixture.h"
#include "backend/attn_blocked.h"

static void model(struct whale_model_desc *m, int layers, int hidden, int heads, int seq)
{
    char txt[256];
    snprintf(txt, sizeof txt, "Name=t Layers=%d Hidden=%d Heads=%d Seq=%d Vocab=1000", layers,
             hidden, heads, seq);
    assert_int_equal(whale_model_desc_parse_string(txt, "test", m), 0);
}

/* Weight, gradient and optimizer bytes per parameter of M at dp 8 on C, for
 * ZeRO stages 0 to 3, are WANT[stage]. */
static void state_bytes_are(const struct whale_model_desc *m, const struct whale_cluster *c,
                            const double want[4])
{
    double P = (double)whale_model_desc_params(m);
    for (int z = 0; z <= 3; z++) {
        struct whale_plan_config cfg = cfg_of(1, 1, 8, 1, z, WHALE_RECOMPUTE_NONE);
        struct whale_plan_prediction p;
        assert_int_equal(whale_plan_eval(m, 8, c, &cfg, &p), 0);
        double got = (p.mem_weights + p.mem_grads + p.mem_optim) / P;
        assert_true(fabs(got - want[z]) < 1e-9);
    }
}

/* ZeRO (Rajbhandari et al.): 16, 4 + 12/N, 2 + 14/N, 16/N bytes per parameter. */
static void test_zero_bytes_per_param(void **state)
{
    (void)state;
    struct whale_model_desc m;
    model(&m, 4, 1024, 16, 512);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 8, "A100-80GB"), 0);
    double P = (double)whale_model_desc_params(&m);
    double N = 8;
    double want[4] = { 16, 4 + 12 / N, 2 + 14 / N, 16 / N };
    state_bytes_are(&m, &c, want);
    /* CPU ranks train in fp32: 4 + 4 + 8 (Adam m, v; the weights are the master) */
    struct whale_cluster cpu;
    assert_int_equal(whale_cluster_init(&cpu, 4, 2, "cpu"), 0);
    double want32[4] = { 16, 8 + 8 / N, 4 + 12 / N, 16 / N };
    state_bytes_are(&m, &cpu, want32);
    /* and 4-byte activations: twice the bf16 formula */
    {
        struct whale_model_desc m5;
        model(&m5, 5, 1024, 16, 512);
        struct whale_plan_config a = cfg_of(1, 1, 8, 1, 0, WHALE_RECOMPUTE_NONE), b = a;
        struct whale_plan_prediction p1, p2;
        assert_int_equal(whale_plan_eval(&m, 8, &cpu, &a, &p1), 0);
        assert_int_equal(whale_plan_eval(&m5, 8, &cpu, &b, &p2), 0);
        double sbh = 512.0 * 1024;
        assert_true(fabs((p2.mem_act - p1.mem_act) / (2 * sbh * (34 + 5 * 16 * 512 / 1024.0)) - 1) < 1e-9);
    }
    /* optimizer offload moves the 12 (or 12/N) bytes to the host */
    struct whale_plan_config cfg = cfg_of(1, 1, 8, 1, 1, WHALE_RECOMPUTE_NONE);
    cfg.offload = WHALE_OFFLOAD_OPTIMIZER;
    struct whale_plan_prediction p;
    assert_int_equal(whale_plan_eval(&m, 8, &c, &cfg, &p), 0);
    assert_true(fabs((p.mem_weights + p.mem_grads + p.mem_optim) / P - 4) < 1e-9);
    /* params offload needs ZeRO-3 */
    cfg.offload = WHALE_OFFLOAD_PARAMS;
    assert_int_equal(whale_plan_eval(&m, 8, &c, &cfg, &p), WHALE_EINVAL);
}

/* Activation bytes of one layer: the difference between an L- and an
 * (L+1)-layer model, one micro-batch in flight. */
static double layer_act(int tp, bool sp, int rc, int b)
{
    struct whale_model_desc m1, m2;
    model(&m1, 4, 1024, 16, 512);
    model(&m2, 5, 1024, 16, 512);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 8, "A100-80GB"), 0);
    struct whale_plan_config a = cfg_of(tp, 1, 8 / tp, b, 0, rc), bb = a;
    a.seqpar = bb.seqpar = sp;
    struct whale_plan_prediction p1, p2;
    long batch = (long)(8 / tp) * b;
    assert_int_equal(whale_plan_eval(&m1, batch, &c, &a, &p1), 0);
    assert_int_equal(whale_plan_eval(&m2, batch, &c, &bb, &p2), 0);
    return p2.mem_act - p1.mem_act;
}

static void test_activation_formulas(void **state)
{
    (void)state;
    double s = 512, h = 1024, a = 16, b = 2, sbh = s * b * h;
    struct { int tp; bool sp; int rc; double want; } cases[] = {
        { 1, false, WHALE_RECOMPUTE_NONE, sbh * (34 + 5 * a * s / h) },
        { 4, false, WHALE_RECOMPUTE_NONE, sbh * (10 + 24.0 / 4 + 5 * a * s / (h * 4)) },
        { 4, true, WHALE_RECOMPUTE_NONE, sbh / 4 * (34 + 5 * a * s / h) },
        { 4, true, WHALE_RECOMPUTE_SELECTIVE, 34 * sbh / 4 },
        { 2, false, WHALE_RECOMPUTE_SELECTIVE, sbh * (10 + 24.0 / 2) },
        { 1, false, WHALE_RECOMPUTE_FULL, 2 * sbh },
        { 4, true, WHALE_RECOMPUTE_FULL, 2 * sbh / 4 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = layer_act(cases[i].tp, cases[i].sp, cases[i].rc, (int)b);
        if (fabs(got / cases[i].want - 1) > 1e-9)
            fail_msg("case %zu: %.0f bytes, formula %.0f", i, got, cases[i].want);
    }
}

/* 1F1B: the first stage holds p micro-batches; interleaved p + (p-1)/v. */
static void test_pipeline_inflight(void **state)
{
    (void)state;
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 8, "A100-80GB"), 0);
    double s = 512, h = 1024, b = 1, full = 2 * s * b * h;
    struct { int L1, L2, v; double inflight; } cases[] = {
        { 8, 12, 1, 4 },          /* stage 0 layers 2 -> 3 */
        { 8, 16, 2, 4 + 3 / 2.0 }, /* 2 -> 4 layers, interleaved v=2 */
    };
    for (size_t i = 0; i < 2; i++) {
        struct whale_model_desc m1, m2;
        model(&m1, cases[i].L1, 1024, 16, 512);
        model(&m2, cases[i].L2, 1024, 16, 512);
        struct whale_plan_config a = cfg_of(1, 4, 2, 1, 0, WHALE_RECOMPUTE_FULL), bb;
        a.interleave = cases[i].v;
        bb = a;
        struct whale_plan_prediction p1, p2;
        assert_int_equal(whale_plan_eval(&m1, 16, &c, &a, &p1), 0);
        assert_int_equal(whale_plan_eval(&m2, 16, &c, &bb, &p2), 0);
        assert_int_equal(p1.worst_stage, 0);
        double dl = (cases[i].L2 - cases[i].L1) / 4.0;
        double want = dl * full * cases[i].inflight;
        if (fabs((p2.mem_act - p1.mem_act) / want - 1) > 1e-9)
            fail_msg("case %zu: %.0f vs %.0f", i, p2.mem_act - p1.mem_act, want);
    }
}

/* Pipeline schedule: bubble = (p-1)/v stage-times against m of them
 * (1F1B and interleaved), on a model whose embedding/output are negligible. */
static void test_pipeline_bubble(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_parse_string(
        "Name=b Layers=32 Hidden=2048 Heads=16 Seq=1024 Vocab=16", "t", &m), 0);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 4, 8, "A100-80GB"), 0);
    struct { int pp, v, mb; } cases[] = { { 4, 1, 1 }, { 8, 1, 2 }, { 4, 2, 1 }, { 8, 4, 1 } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int pp = cases[i].pp, v = cases[i].v, dp = 32 / pp;
        struct whale_plan_config cfg = cfg_of(1, pp, dp, cases[i].mb, 1, WHALE_RECOMPUTE_FULL);
        cfg.interleave = v;
        struct whale_plan_prediction p;
        long batch = (long)dp * cases[i].mb * 16;   /* m = 16 micro-batches */
        assert_int_equal(whale_plan_eval(&m, batch, &c, &cfg, &p), 0);
        assert_int_equal(cfg.nmicro, 16);
        double pipe = p.t_step - p.t_dp - p.t_optim - p.t_offload;
        double want = (pp - 1.0) / v / (16 + (pp - 1.0) / v);
        if (fabs(p.t_bubble / pipe / want - 1) > 0.02)
            fail_msg("pp=%d v=%d: bubble share %.4f, (p-1)/v over m+(p-1)/v = %.4f", pp, v,
                     p.t_bubble / pipe, want);
    }
}

/* Exhaustive minimum over all nopt^n choices. */
static double brute(int n, int nopt, const double *mem, const double *time, double budget)
{
    double best = INFINITY;
    int ch[12] = { 0 };
    for (;;) {
        double mm = 0, tt = 0;
        for (int i = 0; i < n; i++) {
            mm += mem[i * nopt + ch[i]];
            tt += time[i * nopt + ch[i]];
        }
        if (mm <= budget + 1e-9 && tt < best)
            best = tt;
        int i = 0;
        while (i < n && ++ch[i] == nopt)
            ch[i++] = 0;
        if (i == n)
            break;
    }
    return best;
}

static void test_ckpt_dp_vs_brute_force(void **state)
{
    (void)state;
    srand(12345);
    int checked = 0, infeasible = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + rand() % 8, nopt = 2 + rand() % 2;
        double mem[8 * 3], time[8 * 3];
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nopt; k++) {
                /* heterogeneous chain: option k keeps less and costs more */
                mem[i * nopt + k] = (double)(rand() % 12);
                time[i * nopt + k] = (double)(rand() % 1000) / 7.0;
            }
        int budget = rand() % (6 * n + 1);
        int choice[8];
        double t;
        double want = brute(n, nopt, mem, time, budget);
        int rc = whale_plan_recompute_select(n, nopt, mem, time, budget, budget > 0 ? budget : 1, choice, &t);
        if (isinf(want)) {
            assert_int_equal(rc, WHALE_ENOFIT);
            infeasible++;
            continue;
        }
        assert_int_equal(rc, 0);
        assert_true(fabs(t - want) < 1e-9);
        double mm = 0, tt = 0;
        for (int i = 0; i < n; i++) {
            assert_true(choice[i] >= 0 && choice[i] < nopt);
            mm += mem[i * nopt + choice[i]];
            tt += time[i * nopt + choice[i]];
        }
        assert_true(mm <= budget + 1e-9);
        assert_true(fabs(tt - t) < 1e-9);
        checked++;
    }
    assert_true(checked > 200 && infeasible > 5);

    /* coarse slots with real-valued memory: never over budget, and never
     * better than the exact optimum */
    for (int trial = 0; trial < 100; trial++) {
        int n = 6;
        double mem[6 * 3], time[6 * 3];
        for (int i = 0; i < n; i++) {
            mem[i * 3 + 0] = 3.3 + (rand() % 100) / 37.0;
            mem[i * 3 + 1] = 1.1 + (rand() % 100) / 91.0;
            mem[i * 3 + 2] = 0.25;
            time[i * 3 + 0] = 0;
            time[i * 3 + 1] = 1 + rand() % 5;
            time[i * 3 + 2] = 6 + rand() % 5;
        }
        double budget = 8 + (rand() % 100) / 10.0;
        int choice[6];
        double t;
        if (whale_plan_recompute_select(n, 3, mem, time, budget, 37, choice, &t) == 0) {
            double mm = 0;
            for (int i = 0; i < n; i++)
                mm += mem[i * 3 + choice[i]];
            assert_true(mm <= budget);
            assert_true(t >= brute(n, 3, mem, time, budget) - 1e-9);
        }
    }
}

static void test_rc_uniform_matches_dp(void **state)
{
    (void)state;
    srand(7);
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + rand() % 10;
        double act[3] = { 20 + rand() % 20, 8 + rand() % 10, 1 + rand() % 3 };
        double cost[3] = { 0, 1 + rand() % 4, 5 + rand() % 6 };
        int budget = rand() % (int)(n * act[0] + 2);
        double mem[30], time[30];
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 3; k++) {
                mem[i * 3 + k] = act[k];
                time[i * 3 + k] = cost[k];
            }
        int choice[10], ns, nf;
        double t_dp, t_u;
        int rc_dp = whale_plan_recompute_select(n, 3, mem, time, budget, budget > 0 ? budget : 1, choice, &t_dp);
        int rc_u = plan_rc_uniform(n, act, cost, budget, &ns, &nf, &t_u);
        assert_int_equal(rc_dp == 0, rc_u == 0);
        if (rc_dp == 0) {
            assert_true(fabs(t_dp - t_u) < 1e-9);
            assert_true((n - ns - nf) * act[0] + ns * act[1] + nf * act[2] <= budget + 1e-9);
        }
    }
}

static void test_recompute_auto_engine(void **state)
{
    (void)state;
    struct whale_model_desc m;
    model(&m, 8, 1024, 16, 512);
    int pol[8];
    /* a generous budget: nothing recomputed; none at all: refused */
    assert_int_equal(whale_plan_recompute_auto(&m, 1, false, 1, 8, 2, 1e12, NULL, pol), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(pol[i], WHALE_RECOMPUTE_NONE);
    assert_int_equal(whale_plan_recompute_auto(&m, 1, false, 1, 8, 2, 1, NULL, pol), WHALE_ENOFIT);
    /* in between: some layers recomputed, the kept bytes within budget */
    double s = 512, h = 1024, a = 16, sbh = s * h;
    double none = sbh * (34 + 5 * a * s / h), sel = 34 * sbh, full = 2 * sbh;
    double budget = 2 * (4 * none + 2 * sel + 2 * full) + 1;
    assert_int_equal(whale_plan_recompute_auto(&m, 1, false, 1, 8, 2, budget, NULL, pol), 0);
    double kept = 0;
    int changed = 0;
    for (int i = 0; i < 8; i++) {
        kept += 2 * (pol[i] == WHALE_RECOMPUTE_NONE ? none : pol[i] == WHALE_RECOMPUTE_SELECTIVE ? sel : full);
        changed += pol[i] != WHALE_RECOMPUTE_NONE;
        if (i)
            assert_true(pol[i] <= pol[i - 1]);   /* full first */
    }
    assert_true(kept <= budget);
    assert_true(changed >= 4 && changed < 8);
}

static void test_recompute_auto_between(void **state)
{
    (void)state;
    /* auto is never slower than the fixed policies that fit, and fits when full fits */
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-18.4b", &c, 32, 8, "A100-80GB");
    struct whale_plan_prediction p[4];
    for (int r = 0; r < 4; r++) {
        struct whale_plan_config cfg = cfg_of(8, 1, 32, 1, 1, r);
        cfg.seqpar = true;
        assert_int_equal(whale_plan_eval(&m, 1024, &c, &cfg, &p[r]), 0);
    }
    assert_true(p[WHALE_RECOMPUTE_FULL].fits);
    assert_true(p[WHALE_RECOMPUTE_AUTO].fits);
    for (int r = 0; r < 3; r++)
        if (p[r].fits)
            assert_true(p[WHALE_RECOMPUTE_AUTO].t_step <= p[r].t_step * (1 + 1e-12));
    assert_true(p[WHALE_RECOMPUTE_NONE].mem_act > p[WHALE_RECOMPUTE_SELECTIVE].mem_act);
    assert_true(p[WHALE_RECOMPUTE_SELECTIVE].mem_act > p[WHALE_RECOMPUTE_FULL].mem_act);
    assert_true(p[WHALE_RECOMPUTE_NONE].t_step < p[WHALE_RECOMPUTE_FULL].t_step);
}

static void test_calibration_roundtrip(void **state)
{
    (void)state;
    struct whale_calib cal;
    memset(&cal, 0, sizeof cal);
    snprintf(cal.source, sizeof cal.source, "whale-bench");
    snprintf(cal.host, sizeof cal.host, "node1");
    snprintf(cal.device, sizeof cal.device, "cpu");
    cal.peak_flops = 0.123456789e12;
    cal.gemm_eff = 0.61;
    cal.mem_eff = 0.5;
    cal.hbm_bw = 21.5e9;
    cal.dp_overlap = 0.25;
    cal.link[WHALE_PLAN_LINK_NVLINK].alpha = 1.5e-6;
    cal.link[WHALE_PLAN_LINK_NVLINK].bw = 8.25e9;
    cal.link[WHALE_PLAN_LINK_LEAF].alpha = 33e-6;
    cal.link[WHALE_PLAN_LINK_LEAF].bw = 1.9e9;
    cal.has = WHALE_CAL_PEAK | WHALE_CAL_GEMM_EFF | WHALE_CAL_MEM_EFF | WHALE_CAL_HBM |
              WHALE_CAL_DP_OVERLAP | (WHALE_CAL_LINK0 << WHALE_PLAN_LINK_NVLINK) |
              (WHALE_CAL_LINK0 << WHALE_PLAN_LINK_LEAF);
    char path[] = "/tmp/whale-calib-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(whale_calib_save(path, &cal), 0);
    struct whale_calib back;
    assert_int_equal(whale_calib_load(path, &back), 0);
    unlink(path);
    assert_int_equal(back.has, cal.has);
    assert_string_equal(back.source, "whale-bench");
    assert_string_equal(back.device, "cpu");
    assert_true(back.peak_flops == cal.peak_flops);
    assert_true(back.gemm_eff == cal.gemm_eff && back.hbm_bw == cal.hbm_bw);
    assert_true(fabs(back.link[WHALE_PLAN_LINK_LEAF].alpha - 33e-6) < 1e-18);
    assert_true(back.link[WHALE_PLAN_LINK_NVLINK].bw == 8.25e9);

    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 4, 2, "cpu"), 0);
    whale_calib_apply(&back, &c);
    assert_true(c.group[0].gpu.peak_flops == cal.peak_flops);
    assert_true(c.eff.gemm_eff == 0.61 && c.eff.dp_overlap == 0.25);
    assert_true(c.link[WHALE_PLAN_LINK_LEAF].bw == 1.9e9);

    /* fits: a model with known constants is recovered from two points */
    struct whale_calib fit;
    memset(&fit, 0, sizeof fit);
    double k = 48, pk = 2e11;
    double g64 = 64 / (64 + k), g2k = 2048 / (2048 + k);
    assert_int_equal(whale_calib_fit_gemm(64, pk * g64 * g64 * g64, 2048, pk * g2k * g2k * g2k, &fit), 0);
    assert_true(fabs(fit.gemm_half_dim - k) < 1e-6 && fabs(fit.peak_flops / pk - 1) < 1e-9);
    double al = 20e-6, bw = 2e9, n = 64e6;
    assert_int_equal(whale_calib_fit_link(4, 6 * al, n, 6 * al + 1.5 * n / bw, WHALE_PLAN_LINK_LEAF, &fit), 0);
    assert_true(fabs(fit.link[WHALE_PLAN_LINK_LEAF].alpha - al) < 1e-12);
    assert_true(fabs(fit.link[WHALE_PLAN_LINK_LEAF].bw / bw - 1) < 1e-9);
    assert_int_equal(whale_calib_fit_gemm(2048, 1, 64, 2, &fit), WHALE_EINVAL);

    /* one-point step fit: reproduces the measured time, then predicts others */
    {
        struct whale_model_desc ms;
        struct whale_cluster one;
        plan_setup(&ms, "gpt-small", &one, 1, 1, "cpu");
        struct whale_calib sc;
        memset(&sc, 0, sizeof sc);
        struct whale_plan_config g = cfg_of(1, 1, 1, 8, 0, WHALE_RECOMPUTE_NONE);
        assert_int_equal(whale_calib_fit_step(&ms, 8, &one, &g, 1.0, &sc), 0);
        whale_calib_apply(&sc, &one);
        struct whale_plan_prediction pp;
        assert_int_equal(whale_plan_eval(&ms, 8, &one, &g, &pp), 0);
        assert_true(fabs(pp.t_step - 1.0) < 1e-3);
        assert_int_equal(whale_calib_fit_step(&ms, 8, &one, &g, 1e-9, &sc), WHALE_ERANGE);
    }

    /* errors name the line and the key */
    struct whale_calib bad;
    assert_int_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu PeakTFLOP=3\n", "x.cal", &bad),
                     WHALE_ECONF);
    assert_int_equal(whale_calib_parse_string("Link=ethernet AlphaUs=3\n", "x.cal", &bad), WHALE_ECONF);
    assert_int_equal(whale_calib_parse_string("Device=cpu GemmEfficiency=1.5\n", "x.cal", &bad),
                     WHALE_ECONF);
    assert_int_equal(whale_calib_parse_string("Calibration=2\n", "x.cal", &bad), WHALE_ECONF);
}

/* Flash attention on a device without a measured fused kernel (the CPU's
 * blocked kernel) pays the softmax work of the causal half of the scores at
 * the element-wise rate, forward once and backward twice; with a fused
 * kernel of the same GEMM efficiency, nothing more. */
static void test_flash_without_fused_kernel(void **state)
{
    (void)state;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_load("llama-tiny", &m), 0);
    assert_int_equal(m.attention, WHALE_ATTN_FLASH);
    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 1, "cpu"), 0);
    struct plan_ctx x;
    plan_ctx_init(&x, &m, 32, &c);
    struct whale_plan_device g = c.group[0].gpu;
    assert_true(g.flash_eff == 0);
    struct plan_layer_cost blocked, fused;
    plan_layer_cost(&x, &g, 1, false, 32, &blocked);
    g.flash_eff = c.eff.gemm_eff > 0 ? c.eff.gemm_eff : g.gemm_eff;
    plan_layer_cost(&x, &g, 1, false, 32, &fused);
    /* seq 64 is one 64 x 64 block: the blocked kernel computes every
     * score (GEMMs and softmax), a fused kernel the causal half */
    assert_int_equal(PLAN_CPU_FLASH_BLOCK, K_FLASH_BLOCK);
    assert_int_equal(m.seq, K_FLASH_BLOCK);
    double scores = 32.0 * m.heads * m.seq * m.seq;
    double t = 9.0 * x.es * scores / (g.hbm_bw * c.eff.mem_eff);
    double peak = x.fp32 && g.fp32_ratio > 0 ? g.peak_flops * g.fp32_ratio : g.peak_flops;
    double f = 4.0 * scores * m.hidden / m.heads / (peak * g.flash_eff);
    assert_true(t > 0 && f > 0);
    assert_true(fabs((blocked.fwd - fused.fwd) / (t + f / 2) - 1) < 1e-6);
    assert_true(fabs((blocked.bwd - fused.bwd) / (2 * t + 2.5 * f / 2) - 1) < 1e-6);
    /* nothing of it is kept: the activations are the same */
    assert_float_equal(blocked.act[WHALE_RECOMPUTE_NONE], fused.act[WHALE_RECOMPUTE_NONE], 1e-6);
    /* seq 1024: 16 blocks a side, 136 of 256 computed */
    m.seq = 1024;
    plan_ctx_init(&x, &m, 32, &c);
    g = c.group[0].gpu;
    plan_layer_cost(&x, &g, 1, false, 32, &blocked);
    g.flash_eff = c.eff.gemm_eff > 0 ? c.eff.gemm_eff : g.gemm_eff;
    plan_layer_cost(&x, &g, 1, false, 32, &fused);
    scores = 32.0 * m.heads * 1024.0 * 1024.0;
    t = 9.0 * x.es * scores * 136 / 256 / (g.hbm_bw * c.eff.mem_eff);
    f = 4.0 * scores * m.hidden / m.heads / (peak * g.flash_eff);
    assert_true(fabs((blocked.fwd - fused.fwd) / (t + f * (136.0 / 256 - 0.5)) - 1) < 1e-6);
}

/* CacheBytes= / SpillFactor= (CPU): the memory-bound kernels of a layer whose
 * activations W outgrow the cache C run 1 + k (1 - C / W) times as long, its
 * GEMMs and overhead as before; one that fits is unchanged; the keys go
 * together and round-trip. */
static void test_cache_spill(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-tiny", &c, 1, 1, "cpu");
    struct plan_ctx x;
    plan_ctx_init(&x, &m, 32, &c);
    struct whale_plan_device g = c.group[0].gpu;
    assert_true(g.spill == 0 && g.cache_bytes == 0);
    struct plan_layer_cost base, spilled, fits, nomem;
    plan_layer_cost(&x, &g, 1, false, 32, &base);
    double w = base.act[WHALE_RECOMPUTE_NONE];
    assert_true(w > 4096);
    /* the memory-bound part of the layer: what an endless bandwidth removes */
    struct whale_plan_device inf = g;
    inf.hbm_bw = 1e300;
    plan_layer_cost(&x, &inf, 1, false, 32, &nomem);
    double mem_f = base.fwd - nomem.fwd, mem_b = base.bwd - nomem.bwd;
    assert_true(mem_f > 0 && mem_b > 0 && nomem.fwd > 0);
    struct whale_calib cal;
    char text[256];
    snprintf(text, sizeof text, "Calibration=1\nDevice=cpu CacheBytes=%.17g SpillFactor=0.5\n",
             w / 4);
    assert_int_equal(whale_calib_parse_string(text, "t.cal", &cal), 0);
    assert_true(cal.has & WHALE_CAL_SPILL);
    whale_calib_apply(&cal, &c);
    g = c.group[0].gpu;
    assert_true(g.cache_bytes == w / 4 && g.spill == 0.5);
    plan_layer_cost(&x, &g, 1, false, 32, &spilled);
    double slow = 1 + 0.5 * (1 - 0.25);
    assert_true(fabs((spilled.fwd - base.fwd) / ((slow - 1) * mem_f) - 1) < 1e-9);
    assert_true(fabs((spilled.bwd - base.bwd) / ((slow - 1) * mem_b) - 1) < 1e-9);
    assert_true(spilled.rc_cost[WHALE_RECOMPUTE_FULL] == spilled.fwd);
    assert_true(spilled.act[WHALE_RECOMPUTE_NONE] == w);
    g.cache_bytes = 2 * w;
    plan_layer_cost(&x, &g, 1, false, 32, &fits);
    assert_true(fits.fwd == base.fwd && fits.bwd == base.bwd);
    /* round trip */
    char buf[2048];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    assert_int_equal(whale_calib_write(f, &cal), 0);
    fclose(f);
    struct whale_calib back;
    assert_int_equal(whale_calib_parse_string(buf, "t.cal", &back), 0);
    assert_true((back.has & WHALE_CAL_SPILL) && back.spill == 0.5 && back.cache_bytes == w / 4);
    /* one without the other, or out of range, names the line */
    struct whale_calib bad;
    assert_int_equal(whale_calib_parse_string("Device=cpu SpillFactor=1\n", "t.cal", &bad),
                     WHALE_ECONF);
    assert_int_equal(whale_calib_parse_string("Device=cpu CacheBytes=2097152\n", "t.cal", &bad),
                     WHALE_ECONF);
    assert_int_not_equal(whale_calib_parse_string("Device=cpu CacheBytes=2097152 SpillFactor=-1\n",
                                                  "t.cal", &bad), 0);
}

/* Mixed cluster (Whale's hardware-aware balancing): an uneven layer split
 * across stages and an uneven batch split across replicas beat the even
 * split. */
static void test_heterogeneous(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-3.6b", &c, 2, 8, "H100-80GB");
    assert_int_equal(whale_cluster_add_group(&c, 2, 8, "A100-80GB"), 0);
    assert_true(whale_cluster_is_mixed(&c));

    /* pp=2: stage 0 on H100 nodes, stage 1 on A100 nodes */
    struct whale_plan_config even = cfg_of(8, 2, 2, 1, 1, WHALE_RECOMPUTE_SELECTIVE), un;
    even.seqpar = true;
    un = even;
    un.uneven = true;
    struct whale_plan_prediction pe, pu;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &even, &pe), 0);
    assert_int_equal(whale_plan_eval(&m, 512, &c, &un, &pu), 0);
    assert_true(pe.fits && pu.fits);
    assert_true(un.stage_layers[0] > un.stage_layers[1]);
    assert_int_equal(un.stage_layers[0] + un.stage_layers[1], m.layers);
    assert_true(pu.t_step < 0.95 * pe.t_step);

    /* pp=1, dp=4: replicas 0,1 on H100, 2,3 on A100 */
    even = cfg_of(8, 1, 4, 1, 1, WHALE_RECOMPUTE_SELECTIVE);
    even.seqpar = true;
    un = even;
    un.uneven = true;
    assert_int_equal(whale_plan_eval(&m, 512, &c, &even, &pe), 0);
    assert_int_equal(whale_plan_eval(&m, 512, &c, &un, &pu), 0);
    assert_true(un.replica_micro[0] > un.replica_micro[3]);
    assert_int_equal(un.replica_micro[0] + un.replica_micro[1] + un.replica_micro[2] + un.replica_micro[3],
                     4 * even.nmicro);
    assert_true(pu.t_step < 0.9 * pe.t_step);

    /* the search picks an uneven plan and reports the gain */
    struct whale_plan_request rq;
    struct whale_plan_result *res = plan_request(&rq, &m, 512, &c);
    assert_int_equal(whale_plan_search(&rq, res), 0);
    assert_true(res->mixed);
    assert_true(res->best.cfg.uneven);
    assert_true(res->best.pred.t_step < res->even.pred.t_step);
    printf("mixed 2xH100 + 2xA100 nodes, gpt-3.6b: even %.3f s, uneven %.3f s (%.1f%% faster)\n",
           res->even.pred.t_step, res->best.pred.t_step,
           100 * (res->even.pred.t_step / res->best.pred.t_step - 1));
    /* and the runtime's plan carries the splits */
    struct whale_plan p;
    assert_int_equal(whale_plan_to_planfile(&m, 512, &c, &res->best, &p), 0);
    assert_int_equal(whale_plan_validate(&p, 32, m.layers, "test"), 0);
    if (p.n_dp_batch) {
        int sum = 0;
        for (int i = 0; i < p.n_dp_batch; i++)
            sum += p.dp_batch[i];
        assert_int_equal(sum, 512);
    }
    whale_plan_free(&p);
    /* what --whale-plan=auto runs on such an allocation (spank/autoplan.c):
     * the same uneven plan, its splits in the plan file */
    char explain[512];
    assert_int_equal(whale_plan_auto(&m, 512, &c, NULL, NULL, &p, explain, sizeof explain), 0);
    bool uneven = false;
    for (int i = 1; i < p.n_dp_batch; i++)
        uneven |= p.dp_batch[i] != p.dp_batch[0];
    for (int i = 1; i < p.n_stage_layers; i++)
        uneven |= p.stage_layers[i] != p.stage_layers[0];
    assert_true(uneven);
    assert_int_equal(whale_plan_validate(&p, p.tp * p.pp * p.dp, m.layers, "auto"), 0);
    whale_plan_free(&p);
    free(res);
}

static void test_auto_and_planfile(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-7.5b", &c, 16, 8, "A100-80GB");
    struct whale_plan p;
    char explain[512];
    assert_int_equal(whale_plan_auto(&m, 512, &c, NULL, NULL, &p, explain, sizeof explain), 0);
    assert_int_equal(p.tp * p.pp * p.dp, 128);
    assert_int_equal(p.micro_batch * p.num_micro_batches * p.dp, 512);
    assert_int_equal(whale_plan_validate(&p, 128, m.layers, "auto"), 0);
    assert_non_null(strstr(explain, "predicted"));
    char *js = whale_plan_to_json(&p, 0);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"prediction\""));
    assert_non_null(strstr(js, "step_seconds"));
    struct whale_plan back;
    assert_int_equal(whale_plan_from_json(js, "test", &back), 0);
    assert_int_equal(back.tp, p.tp);
    assert_int_equal(back.pp, p.pp);
    assert_int_equal(back.zero, p.zero);
    assert_int_equal(back.recompute, p.recompute);
    free(js);
    whale_plan_free(&back);
    whale_plan_free(&p);

    /* nothing fits: a clear reason and WHALE_ENOFIT */
    struct whale_model_desc big;
    struct whale_cluster one;
    plan_setup(&big, "gpt-1t", &one, 1, 8, "A100-80GB");
    assert_int_equal(whale_plan_auto(&big, 64, &one, NULL, NULL, &p, explain, sizeof explain), WHALE_ENOFIT);
    assert_non_null(strstr(explain, "GiB"));
}

static void test_bad_configs(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-1.7b", &c, 4, 8, "A100-80GB");
    char why[256];
    struct whale_cluster c4;
    assert_int_equal(whale_cluster_init(&c4, 8, 4, "A100-80GB"), 0);
    struct whale_plan_config cfg = cfg_of(8, 1, 4, 1, 0, 0);    /* tp beyond the NVLink domain */
    assert_int_equal(whale_plan_check(&m, 512, &c4, &cfg, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "NVLink"));
    cfg = cfg_of(1, 1, 16, 1, 0, 0);                              /* product != GPUs */
    assert_int_equal(whale_plan_check(&m, 512, &c, &cfg, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "32 GPUs"));
    cfg = cfg_of(1, 1, 32, 3, 0, 0);                              /* batch not divisible */
    assert_int_equal(whale_plan_check(&m, 512, &c, &cfg, why, sizeof why), WHALE_EINVAL);
    cfg = cfg_of(1, 2, 16, 1, 0, 0);
    cfg.interleave = 13;                                          /* 2*13 chunks > 24 layers */
    assert_int_equal(whale_plan_check(&m, 512, &c, &cfg, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "fewer than pp*v"));
    cfg.interleave = 5;               /* 24 % (2*5) != 0: uneven chunks are allowed since v2 */
    assert_int_equal(whale_plan_check(&m, 512, &c, &cfg, why, sizeof why), 0);
    struct whale_cluster bad;
    assert_int_equal(whale_cluster_init(&bad, 1, 8, "Z100"), WHALE_ENOENT);
}

/* Checking a plan given by flags or a file (what the plugin does with
 * explicit --whale-tp/pp/dp and --whale-model). */
static void test_predict_plan(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-39.1b", &c, 64, 8, "A100-80GB");
    struct whale_plan p;
    whale_plan_init(&p);
    p.tp = 8;
    p.pp = 2;
    p.dp = 32;
    p.micro_batch = 1;
    p.num_micro_batches = 48;
    p.global_batch = 1536;
    p.recompute = WHALE_RECOMPUTE_FULL;
    struct whale_plan_candidate *cd = malloc(sizeof *cd);
    assert_non_null(cd);
    char why[512];
    assert_int_equal(whale_plan_predict(&m, &c, &p, cd, why, sizeof why), 0);
    assert_true(cd->pred.fits && cd->pred.t_step > 0);
    /* without recompute and with TP=1 it cannot fit: the reason names the memory */
    p.tp = 1;
    p.pp = 2;
    p.dp = 256;
    p.num_micro_batches = 6;
    p.recompute = WHALE_RECOMPUTE_NONE;
    assert_int_equal(whale_plan_predict(&m, &c, &p, cd, why, sizeof why), WHALE_ENOFIT);
    assert_non_null(strstr(why, "GiB per device"));
    assert_non_null(strstr(why, "activations"));
    /* inconsistent with the cluster */
    p.dp = 100;
    assert_int_equal(whale_plan_predict(&m, &c, &p, cd, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "512 GPUs"));
    free(cd);
    whale_plan_free(&p);
}

/* Site limits and the sequence-parallel plan key. */
static void test_limits_and_seqpar(void **state)
{
    (void)state;
    struct whale_model_desc m;
    struct whale_cluster c;
    plan_setup(&m, "gpt-18.4b", &c, 32, 8, "A100-80GB");
    struct whale_plan_request lim;
    whale_plan_request_init(&lim);
    lim.max_tp = 2;
    lim.max_zero = 1;
    lim.allowed_recompute = (1u << WHALE_RECOMPUTE_NONE) | (1u << WHALE_RECOMPUTE_FULL);
    lim.seqpar = -1;
    struct whale_plan p;
    char explain[512];
    assert_int_equal(whale_plan_auto(&m, 1024, &c, NULL, &lim, &p, explain, sizeof explain), 0);
    assert_true(p.tp <= 2 && p.zero <= 1);
    assert_true(p.recompute == WHALE_RECOMPUTE_NONE || p.recompute == WHALE_RECOMPUTE_FULL);
    whale_plan_free(&p);

    /* the search may pick sequence parallelism; the plan carries it */
    lim.max_tp = 8;
    lim.tp = 8;
    lim.seqpar = 1;
    assert_int_equal(whale_plan_auto(&m, 1024, &c, NULL, &lim, &p, explain, sizeof explain), 0);
    assert_true(p.sequence_parallel);
    char *js = whale_plan_to_json(&p, 0);
    assert_non_null(strstr(js, "\"sequence_parallel\":true"));
    struct whale_plan back;
    assert_int_equal(whale_plan_from_json(js, "t", &back), 0);
    assert_true(back.sequence_parallel);
    free(js);
    whale_plan_free(&back);
    whale_plan_free(&p);
    /* without limits the search chooses (the engine runs it): only with TP,
     * and the plan file says so exactly when it does */
    assert_int_equal(whale_plan_auto(&m, 1024, &c, NULL, NULL, &p, explain, sizeof explain), 0);
    assert_true(!p.sequence_parallel || p.tp > 1);
    js = whale_plan_to_json(&p, 0);
    assert_true((strstr(js, "sequence_parallel") != NULL) == p.sequence_parallel);
    free(js);
    whale_plan_free(&p);
}

/* Pruning never changes the answer: pruned and exhaustive searches agree. */
static void test_pruning_is_exact(void **state)
{
    (void)state;
    const char *models[] = { "gpt-1.7b", "gpt-7.5b", "gpt-39.1b", "gpt-145.6b" };
    const int nodes[] = { 2, 8, 32, 48 }, batch[] = { 64, 256, 512, 768 };
    const char *gpus[] = { "A100-40GB", "A100-80GB", "H100-80GB", "V100-32GB" };
    struct whale_plan_result *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    int found = 0;
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < 4; g++) {
            struct whale_model_desc m;
            struct whale_cluster c;
            plan_setup(&m, models[i], &c, nodes[(i + g) % 4], 8, gpus[g]);
            struct whale_plan_request rq;
            whale_plan_request_init(&rq);
            rq.model = &m;
            rq.global_batch = batch[(i + 2 * g) % 4];
            rq.cluster = &c;
            int ra = whale_plan_search(&rq, a);
            rq.exhaustive = true;
            int rb = whale_plan_search(&rq, b);
            assert_int_equal(ra, rb);
            if (ra == 0) {
                found++;
                assert_true(a->best.pred.t_step == b->best.pred.t_step);
                assert_true(b->evaluated >= a->evaluated);
            }
        }
    assert_true(found >= 8);
    free(a);
    free(b);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_ERROR + (getenv("WHALE_LOG") ? 3 : 0));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_bytes_per_param),
        cmocka_unit_test(test_activation_formulas),
        cmocka_unit_test(test_pipeline_inflight),
        cmocka_unit_test(test_pipeline_bubble),
        cmocka_unit_test(test_ckpt_dp_vs_brute_force),
        cmocka_unit_test(test_rc_uniform_matches_dp),
        cmocka_unit_test(test_recompute_auto_engine),
        cmocka_unit_test(test_recompute_auto_between),
        cmocka_unit_test(test_calibration_roundtrip),
        cmocka_unit_test(test_heterogeneous),
        cmocka_unit_test(test_auto_and_planfile),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_predict_plan),
        cmocka_unit_test(test_flash_without_fused_kernel),
        cmocka_unit_test(test_cache_spill),
        cmocka_unit_test(test_limits_and_seqpar),
        cmocka_unit_test(test_pruning_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
