/* CPU ranks sharing a node's cores (whale_calib_cpu_share, the Threads= and
 * CoresPerNode= keys of a calibration profile, whale_calib_apply): a peak
 * measured with T threads becomes peak / T x min(threads, cores / ranks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "whale/plan.h"

static void share(void **state)
{
    (void)state;
    struct whale_calib cal;
    memset(&cal, 0, sizeof cal);
    /* no Threads=: the profile holds per rank as it is */
    assert_true(whale_calib_cpu_share(&cal, 4, 2, 0) == 1.0);
    cal.has = WHALE_CAL_CPU;
    cal.threads = 1;
    cal.cores_per_node = 2;
    /* 1 rank on 2 cores with whale-train's default threads (2): 2 x */
    assert_true(whale_calib_cpu_share(&cal, 1, 0, 0) == 2.0);
    /* 1 rank, 1 thread: as measured */
    assert_true(whale_calib_cpu_share(&cal, 1, 0, 1) == 1.0);
    /* 2 ranks on 2 cores: one core each, whatever the threads */
    assert_true(whale_calib_cpu_share(&cal, 2, 0, 0) == 1.0);
    assert_true(whale_calib_cpu_share(&cal, 2, 0, 2) == 1.0);
    /* 4 ranks on 2 cores: half a core each */
    assert_true(whale_calib_cpu_share(&cal, 4, 0, 1) == 0.5);
    /* the cluster's core count wins over the profile's */
    assert_true(whale_calib_cpu_share(&cal, 4, 16, 0) == 4.0);
    /* measured with 2 threads: per-thread rate is half the peak */
    cal.threads = 2;
    assert_true(whale_calib_cpu_share(&cal, 1, 0, 1) == 0.5);
    /* Amdahl: with 60 % of the step parallel, 2 threads run 1 / (0.4 + 0.3)
     * = 1.43 x one thread, 4 threads 1 / (0.4 + 0.15) = 1.82 x */
    cal.threads = 1;
    cal.has |= WHALE_CAL_PAR_FRAC;
    cal.parallel_fraction = 0.6;
    assert_float_equal(whale_calib_cpu_share(&cal, 1, 2, 2), 1 / 0.7, 1e-12);
    assert_float_equal(whale_calib_cpu_share(&cal, 1, 4, 4), 1 / 0.55, 1e-12);
    /* threads beyond the rank's cores still add nothing */
    assert_float_equal(whale_calib_cpu_share(&cal, 2, 2, 2), 1.0, 1e-12);
    /* below one core: the time share of one thread's rate */
    assert_float_equal(whale_calib_cpu_share(&cal, 4, 2, 1), 0.5, 1e-12);
    /* a profile measured with 2 threads: 1 thread is 0.7 of it */
    cal.threads = 2;
    assert_float_equal(whale_calib_cpu_share(&cal, 1, 2, 1), 0.7, 1e-12);
    /* ParallelFraction=0: threads add nothing */
    cal.threads = 1;
    cal.parallel_fraction = 0;
    assert_float_equal(whale_calib_cpu_share(&cal, 1, 8, 8), 1.0, 1e-12);
}

static void profile_round_trip_and_apply(void **state)
{
    (void)state;
    struct whale_calib cal;
    assert_int_equal(whale_calib_parse_string(
                         "Calibration=1\nDevice=cpu PeakTFLOPS=0.1 Threads=1 CoresPerNode=2\n",
                         "test", &cal), 0);
    assert_true(cal.has & WHALE_CAL_CPU);
    assert_true(cal.threads == 1 && cal.cores_per_node == 2);
    char buf[2048];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    assert_int_equal(whale_calib_write(f, &cal), 0);
    fclose(f);
    assert_non_null(strstr(buf, "Threads=1"));
    assert_non_null(strstr(buf, "CoresPerNode=2"));
    /* ParallelFraction round-trips; out of [0, 1] is refused */
    struct whale_calib pf;
    assert_int_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu Threads=1 "
                                              "ParallelFraction=0.625\n", "t", &pf), 0);
    assert_true(pf.parallel_fraction == 0.625);
    f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    assert_int_equal(whale_calib_write(f, &pf), 0);
    fclose(f);
    assert_non_null(strstr(buf, "ParallelFraction=0.625"));
    assert_int_not_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu ParallelFraction=1.5\n",
                                                  "t", &pf), 0);
    assert_int_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu Threads=1 "
                                              "ParallelFraction=0 PeakTFLOPS=0.1 CoresPerNode=2\n",
                                              "t", &pf), 0);
    assert_true(whale_calib_cpu_share(&pf, 1, 2, 2) == 1.0);
    /* bad values name the key */
    struct whale_calib bad;
    assert_int_not_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu Threads=0\n", "t",
                                                  &bad), 0);

    struct whale_cluster c;
    assert_int_equal(whale_cluster_init(&c, 1, 2, "cpu"), 0);
    whale_calib_apply(&cal, &c);            /* 2 ranks on 2 cores: 1 core each */
    assert_true(c.group[0].gpu.peak_flops == 0.1e12);
    assert_int_equal(whale_cluster_init(&c, 1, 1, "cpu"), 0);
    whale_calib_apply(&cal, &c);            /* 1 rank, default threads = 2 cores */
    assert_true(c.group[0].gpu.peak_flops == 0.2e12);
    assert_int_equal(whale_cluster_init(&c, 1, 1, "cpu"), 0);
    c.cpu_threads_per_rank = 1;
    whale_calib_apply(&cal, &c);
    assert_true(c.group[0].gpu.peak_flops == 0.1e12);
    /* a measured GemmHalfDim=0 (flat GEMM rate) reaches the device: it
     * must not fall back to the catalogue's half-dimension */
    struct whale_calib flat;
    assert_int_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu PeakTFLOPS=0.1 "
                                              "GemmHalfDim=0\n", "t", &flat), 0);
    assert_int_equal(whale_cluster_init(&c, 1, 1, "cpu"), 0);
    assert_true(c.group[0].gpu.gemm_half > 0);
    whale_calib_apply(&flat, &c);
    assert_true(c.group[0].gpu.gemm_half == 0);
    /* ThreadSyncUs=: per layer pass and doubling of a rank's own threads,
     * on top of the kernel overhead; nothing at one thread per rank */
    struct whale_calib sy;
    assert_int_equal(whale_calib_parse_string("Calibration=1\nDevice=cpu PeakTFLOPS=0.1 Threads=1 "
                                              "CoresPerNode=4 KernelOverheadUs=10 "
                                              "ThreadSyncUs=100\n", "t", &sy), 0);
    assert_true(sy.has & WHALE_CAL_THREAD_SYNC);
    assert_int_equal(whale_cluster_init(&c, 1, 1, "cpu"), 0);
    c.cpu_threads_per_rank = 4;
    whale_calib_apply(&sy, &c);
    assert_float_equal(c.eff.kernel_overhead, 10e-6 + 2 * 100e-6, 1e-12);
    assert_int_equal(whale_cluster_init(&c, 1, 4, "cpu"), 0);   /* 1 core per rank */
    whale_calib_apply(&sy, &c);
    assert_float_equal(c.eff.kernel_overhead, 10e-6, 1e-12);
    assert_float_equal(whale_calib_cpu_threads(&sy, 2, 0, 0), 2.0, 1e-12);
    assert_float_equal(whale_calib_cpu_threads(&sy, 8, 0, 2), 0.5, 1e-12);
    f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    assert_int_equal(whale_calib_write(f, &sy), 0);
    fclose(f);
    struct whale_calib back;
    assert_int_equal(whale_calib_parse_string(buf, "t", &back), 0);
    assert_true(back.has & WHALE_CAL_THREAD_SYNC);
    assert_float_equal(back.thread_sync, 100e-6, 1e-15);
    /* GPUs are never scaled */
    assert_int_equal(whale_cluster_init(&c, 1, 8, "H100-80GB"), 0);
    double before = c.group[0].gpu.hbm_bw;
    struct whale_calib g = cal;
    g.has &= ~WHALE_CAL_PEAK;
    whale_calib_apply(&g, &c);
    assert_true(c.group[0].gpu.hbm_bw == before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(share),
        cmocka_unit_test(profile_round_trip_and_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
