/* comm_copy_stream (comm/transport/shm_copy.c): the same bytes as memcpy for every
 * destination and source alignment and for lengths around each of its
 * boundaries (the 1 KiB memcpy cut-off, the 64-byte head, the 256-byte
 * body, the tail), and nothing written outside [dst, dst + n). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm_internal.h"

#define GUARD 192

static void check_one(unsigned char *dbuf, const unsigned char *sbuf, size_t doff, size_t soff, size_t n)
{
    memset(dbuf, 0xA5, doff + n + 2 * GUARD);
    comm_copy_stream(dbuf + GUARD + doff, sbuf + soff, n);
    for (size_t i = 0; i < GUARD + doff; i++)
        if (dbuf[i] != 0xA5)
            fail_msg("byte %zu before dst written (doff %zu soff %zu n %zu)", i, doff, soff, n);
    if (memcmp(dbuf + GUARD + doff, sbuf + soff, n) != 0)
        fail_msg("copy differs (doff %zu soff %zu n %zu)", doff, soff, n);
    for (size_t i = GUARD + doff + n; i < doff + n + 2 * GUARD; i++)
        if (dbuf[i] != 0xA5)
            fail_msg("byte %zu after dst written (doff %zu soff %zu n %zu)", i - GUARD - doff - n, doff,
                     soff, n);
}

static void test_alignments_and_lengths(void **state)
{
    (void)state;
    const size_t lens[] = { 0, 1, 63, 64, 255, 1023, 1024, 1025, 1087, 1088, 1279, 1280, 1281, 4096,
                            4097, 65536 + 200, 131072, 262144 - 1, (1u << 20) + 321 };
    const size_t maxn = (1u << 20) + 321;
    /* aligned_alloc wants a multiple of the alignment */
    const size_t sbytes = (maxn + 128 + 63) & ~(size_t)63, dbytes = (maxn + 128 + 2 * GUARD + 63) & ~(size_t)63;
    unsigned char *sbuf = aligned_alloc(64, sbytes);
    unsigned char *dbuf = aligned_alloc(64, dbytes);
    assert_non_null(sbuf);
    assert_non_null(dbuf);
    for (size_t i = 0; i < maxn + 128; i++)
        sbuf[i] = (unsigned char)(i * 131 + (i >> 8) * 7 + 1); /* no period of 64 or 256 */
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (size_t doff = 0; doff < 64; doff += lens[l] > 100000 ? 31 : 1)
            for (size_t soff = 0; soff < 64; soff += lens[l] > 100000 ? 37 : 9)
                check_one(dbuf, sbuf, doff, soff, lens[l]);
    free(sbuf);
    free(dbuf);
}

/* The default threshold is a positive size (twice an L2, or of a 1 MiB
 * one when sysconf does not know): never 0, which would stream even
 * vectors that fit the cache. */
static void test_auto_threshold(void **state)
{
    (void)state;
    size_t t = comm_shm_stream_min_auto();
    assert_true(t >= (size_t)64 << 10);
    assert_true(t <= (size_t)1 << 34);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignments_and_lengths),
        cmocka_unit_test(test_auto_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
