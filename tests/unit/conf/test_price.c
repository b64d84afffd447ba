/* PricePerNodeHour= / PricePerGPUHour= in whale.conf and the price of a
 * step's nodes (runtime/src/conf/price.c), against hand calculations. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "whale/conf.h"
#include "whale/log.h"

#include "conf_test.h"

static void test_prices(void **st)
{
    (void)st;
    struct whale_conf *c = NULL;
    const char *text =
        "TopologyFile=none\n"
        "GPUType=H100 PeakTFLOPS=989 Memory=80G\n"
        "NodeName=DEFAULT GPUs=8 GPUType=H100 PricePerGPUHour=2.50\n"
        "NodeName=gpu[01-04]\n"                              /* 8 x 2.50 = 20 $/h */
        "NodeName=gpu[03-04] PricePerNodeHour=$32.77\n"      /* the last line wins */
        "NodeName=cpu[1-2] GPUs=0 Cores=64 PricePerNodeHour=1.2\n"
        "NodeName=free[1-2] GPUs=0 Cores=8\n";               /* GPU price, no GPUs: 0 */
    assert_int_equal(whale_conf_parse_string(text, "whale.conf", &c), 0);
    const char *nodes[] = { "gpu01", "gpu03", "cpu2", "free1", "other" };
    double usd = -1;
    int priced = -1;
    assert_int_equal(whale_conf_price_per_hour(c, nodes, 5, &usd, &priced), 0);
    /* gpu01 20 + gpu03 32.77 + cpu2 1.2 + free1 0 + other (DEFAULT: 8 x 2.5) 20 */
    assert_true(fabs(usd - (20 + 32.77 + 1.2 + 0 + 20)) < 1e-9);
    assert_int_equal(priced, 5);
    assert_int_equal(whale_conf_price_per_hour(c, NULL, 0, &usd, &priced), 0);
    assert_true(usd == 0 && priced == 0);
    assert_int_not_equal(whale_conf_price_per_hour(c, NULL, 2, &usd, &priced), 0);
    whale_conf_free(c);

    /* no price anywhere: nothing priced */
    assert_int_equal(whale_conf_parse_string("TopologyFile=none\nNodeName=n[1-2] GPUs=0\n",
                                             "whale.conf", &c), 0);
    const char *n1[] = { "n1" };
    assert_int_equal(whale_conf_price_per_hour(c, n1, 1, &usd, &priced), 0);
    assert_true(usd == 0 && priced == 0);
    whale_conf_free(c);
}

static void test_price_errors(void **st)
{
    (void)st;
    expect_error("NodeName=a GPUs=0\nNodeName=b PricePerNodeHour=cheap\n",
                 "/etc/slurm/whale.conf:2: PricePerNodeHour=cheap: expected a price in dollars");
    expect_error("NodeName=a PricePerGPUHour=-1\n", ":1: PricePerGPUHour=-1: expected a price");
    expect_error("NodeName=a PricePerGPUHour=nan\n", "PricePerGPUHour=nan");
    expect_error("NodeName=a PricePerNodeHour=1 PricePerGPUHour=2\n",
                 ":1: PricePerNodeHour= and PricePerGPUHour= on one line");
    expect_error("NodeName=a PricePerNodeHr=3\n", "did you mean 'PricePerNodeHour'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_prices, setup),
        cmocka_unit_test_setup(test_price_errors, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
