/* whale/blascore.h: which OpenBLAS kernels a CPU gets. The advice is a pure
 * function of (OpenBLAS's choice, CPU flags); these cases pin the table so
 * a CPU without AVX-512 can never be handed AVX-512 kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "whale/blascore.h"

static void advice_table(void **state)
{
    (void)state;
    const unsigned avx2 = WHALE_CPU_AVX | WHALE_CPU_AVX2;
    const unsigned avx512 = avx2 | WHALE_CPU_AVX512;
    /* the fallback of OpenBLAS 0.3.21 for an unknown model */
    assert_string_equal(whale_blas_core_advice("Prescott", avx512), "SkylakeX");
    assert_string_equal(whale_blas_core_advice("Prescott", avx512 | WHALE_CPU_AVX512BF16),
                        "Cooperlake");
    assert_string_equal(whale_blas_core_advice("Prescott", avx2), "Haswell");
    assert_string_equal(whale_blas_core_advice("prescott", avx2), "Haswell");
    assert_string_equal(whale_blas_core_advice("Sandybridge", avx2), "Haswell");
    assert_string_equal(whale_blas_core_advice("Barcelona", avx512), "SkylakeX");
    /* a good choice is kept */
    assert_null(whale_blas_core_advice("SkylakeX", avx512));
    assert_null(whale_blas_core_advice("Haswell", avx512));
    assert_null(whale_blas_core_advice("Zen", avx2));
    assert_null(whale_blas_core_advice("Cooperlake", avx512 | WHALE_CPU_AVX512BF16));
    /* no AVX2: nothing better to offer, whatever OpenBLAS chose */
    assert_null(whale_blas_core_advice("Prescott", WHALE_CPU_AVX));
    assert_null(whale_blas_core_advice("Prescott", 0));
    assert_null(whale_blas_core_advice(NULL, avx512));
}

static void this_machine(void **state)
{
    (void)state;
    unsigned f = whale_cpu_features();
    /* the flags are nested the way the advice assumes */
    if (f & WHALE_CPU_AVX512)
        assert_true(f & WHALE_CPU_AVX2);
    if (f & WHALE_CPU_AVX2)
        assert_true(f & WHALE_CPU_AVX);
    assert_non_null(whale_blas_corename());
    /* OPENBLAS_CORETYPE set or WHALE_BLAS_CORE=off: nothing to do */
    setenv("WHALE_BLAS_CORE", "off", 1);
    assert_null(whale_blas_core_wanted());
    /* forcing the family OpenBLAS already runs is nothing to do either */
    setenv("WHALE_BLAS_CORE", whale_blas_corename(), 1);
    assert_null(whale_blas_core_wanted());
    setenv("WHALE_BLAS_CORE", "auto", 1);
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    assert_null(whale_blas_core_wanted());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(advice_table),
        cmocka_unit_test(this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
