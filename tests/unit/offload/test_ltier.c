/* The local offload tier's UCX transport (whale/ltier.h):
 *  - its private endpoint (error mode NONE) gets UCX's `self` transport,
 *    not tcp (the reason it exists; skipped when UCX_TLS leaves self out);
 *  - puts into and gets out of a registered buffer move the right bytes at
 *    odd sizes and offsets, counted by direction;
 *  - a copy that touches no registered buffer, a NULL or empty
 *    registration, and a copy into a buffer after it was unregistered are
 *    refused with WHALE_EINVAL (never a silent memcpy). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/ltier.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed);
}

static void test_transport(void **st)
{
    (void)st;
    whale_ltier *t = NULL;
    assert_int_equal(whale_ltier_open(&t), 0);
    const char *tr = whale_ltier_transport(t);
    printf("local tier endpoint: %s\n", tr);
    const char *tls = getenv("UCX_TLS");
    if (!tls || !strcmp(tls, "all")) {
        assert_non_null(strstr(tr, "self"));
        assert_null(strstr(tr, "tcp")); /* what whale_ctx's own endpoint falls back to */
    } else if (strstr(tls, "self")) {
        assert_non_null(strstr(tr, "self"));
    }
    whale_ltier_close(t);
}

static void test_copies(void **st)
{
    (void)st;
    const size_t N = (1 << 20) + 4099;
    unsigned char *host = malloc(N), *dev = malloc(N), *chk = malloc(N);
    assert_non_null(host);
    assert_non_null(dev);
    assert_non_null(chk);
    whale_ltier *t = NULL;
    assert_int_equal(whale_ltier_open(&t), 0);
    assert_int_equal(whale_ltier_register(t, host, N), 0);
    const size_t sizes[] = { 1, 7, 4097, 65536 + 3, N - 13 };
    int64_t want_put = 0, want_get = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k], off = k * 5 % 13;
        fill(dev, N, (unsigned)k);
        memset(host, 0xee, N);
        /* "device" -> registered host: a put */
        assert_int_equal(whale_ltier_copy(t, host + off, dev + 3, n, WHALE_LTIER_HOST), 0);
        assert_memory_equal(host + off, dev + 3, n);
        if (off)
            assert_int_equal(host[off - 1], 0xee);
        if (off + n < N)
            assert_int_equal(host[off + n], 0xee);
        want_put += (int64_t)n;
        /* registered host -> "device": a get */
        memset(chk, 0x11, N);
        assert_int_equal(whale_ltier_copy(t, chk + 1, host + off, n, WHALE_LTIER_HOST), 0);
        assert_memory_equal(chk + 1, dev + 3, n);
        assert_int_equal(chk[0], 0x11);
        want_get += (int64_t)n;
    }
    int64_t p, g;
    whale_ltier_counts(t, &p, &g);
    assert_int_equal(p, want_put);
    assert_int_equal(g, want_get);
    /* the registered range is exact: one byte past it is not registered */
    assert_int_equal(whale_ltier_copy(t, host + 1, dev, N, WHALE_LTIER_HOST), WHALE_EINVAL);
    assert_int_equal(whale_ltier_copy(t, chk, dev, 16, WHALE_LTIER_HOST), WHALE_EINVAL);
    assert_int_equal(whale_ltier_register(t, NULL, 16), WHALE_EINVAL);
    assert_int_equal(whale_ltier_register(t, chk, 0), WHALE_EINVAL);
    whale_ltier_unregister(t, host);
    assert_int_equal(whale_ltier_copy(t, host, dev, 16, WHALE_LTIER_HOST), WHALE_EINVAL);
    whale_ltier_close(t);
    free(host);
    free(dev);
    free(chk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transport),
        cmocka_unit_test(test_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
