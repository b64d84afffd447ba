/* DeviceTypeFromFeature= / DeviceTypeFromGres= (runtime/src/conf/devtype.c):
 * the parse with file:line errors, the mapping of a node's Slurm features
 * and GRES to a GPU type, and a mixed allocation without NodeName lines
 * that becomes two node groups for the planner. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/conf.h"
#include "whale/log.h"
#include "whale/plan.h"
#include "whale/topo.h"

#include "conf_test.h"

static void test_mapping(void **st)
{
    (void)st;
    struct whale_conf *c = NULL;
    const char *text = "TopologyFile=none\n"
                       "GPUType=MyGPU PeakTFLOPS=100 Memory=40G\n"
                       "DeviceTypeFromFeature=a100:A100-80GB,mine:MyGPU\n"
                       "DeviceTypeFromGres=h100:H100-80GB,A100:A100-80GB\n";
    assert_int_equal(whale_conf_parse_string(text, "whale.conf", &c), 0);
    assert_int_equal(c->nfeature_types, 2);
    assert_int_equal(c->ngres_types, 2);
    int gpus = -1, line = -1;
    /* a feature among others, matched without case */
    assert_string_equal(whale_conf_device_type(c, "ib,A100,bigmem", NULL, &gpus, &line),
                        "A100-80GB");
    assert_int_equal(gpus, 0);
    assert_int_equal(line, 3);
    /* the count of a GRES of the same type */
    assert_string_equal(whale_conf_device_type(c, "a100", "gpu:a100:4(S:0-1)", &gpus, NULL),
                        "A100-80GB");
    assert_int_equal(gpus, 4);
    /* GRES only; the socket list may hold commas */
    assert_string_equal(whale_conf_device_type(c, "ib", "shard:8,gpu:h100:8(S:0,1),mps:100",
                                               &gpus, &line), "H100-80GB");
    assert_int_equal(gpus, 8);
    assert_int_equal(line, 4);
    assert_string_equal(whale_conf_device_type(c, NULL, "gpu:A100:2", &gpus, NULL), "A100-80GB");
    assert_int_equal(gpus, 2);
    /* a feature wins over a GRES */
    assert_string_equal(whale_conf_device_type(c, "mine", "gpu:h100:8", &gpus, NULL), "MyGPU");
    /* nothing mapped: untyped GRES, other GRES, unknown features, junk */
    assert_null(whale_conf_device_type(c, "ib", "gpu:4", &gpus, NULL));
    assert_null(whale_conf_device_type(c, "", "gpu:v100:4", &gpus, NULL));
    assert_null(whale_conf_device_type(c, "a1000,,", "gpu::", &gpus, NULL));
    assert_null(whale_conf_device_type(c, "a10", "gpu:h10", &gpus, NULL));
    assert_null(whale_conf_device_type(c, NULL, NULL, &gpus, NULL));
    /* an oversized string from slurmctld is not read */
    size_t big = 20000;
    char *s = malloc(big + 1);
    assert_non_null(s);
    memset(s, 'x', big);
    memcpy(s, "a100,", 5);
    s[big] = 0;
    assert_null(whale_conf_device_type(c, s, NULL, &gpus, NULL));
    free(s);
    whale_conf_free(c);
}

/* Two nodes with feature a100 and two with an h100 GRES, no NodeName
 * lines: the planner sees two groups of the right devices; a node a
 * NodeName line types keeps its type. */
static void test_groups(void **st)
{
    (void)st;
    struct whale_conf *c = NULL;
    const char *text = "TopologyFile=none\n"
                       "GPUType=V100 PeakTFLOPS=125 Memory=32G\n"
                       "NodeName=v1 GPUs=4 GPUType=V100\n"
                       "DeviceTypeFromFeature=a100:A100-80GB\n"
                       "DeviceTypeFromGres=h100:H100-80GB\n";
    assert_int_equal(whale_conf_parse_string(text, "whale.conf", &c), 0);
    struct whale_topo *t = NULL;
    assert_int_equal(whale_conf_build_topo(c, NULL, &t), 0);
    const char *names[] = { "a1", "a2", "h1", "h2", "v1" };
    const char *feat[] = { "a100", "a100,ib", "ib", NULL, "a100" };
    const char *gres[] = { NULL, NULL, "gpu:h100:4", "gpu:h100:4(S:0)", NULL };
    int idx[5];
    for (int i = 0; i < 5; i++) {
        idx[i] = whale_conf_topo_ensure_node(c, t, names[i]);
        assert_true(idx[i] >= 0);
        int gpus = 0;
        const char *type = whale_conf_device_type(c, feat[i], gres[i], &gpus, NULL);
        assert_non_null(type);
        assert_int_equal(whale_conf_topo_set_device(t, idx[i], type, gpus > 0 ? gpus : 4),
                         i < 4 ? 1 : 0);
    }
    assert_string_equal(t->gpu_types[t->nodes[idx[4]].gpu_type].name, "V100");
    struct whale_cluster cl;
    assert_int_equal(whale_cluster_from_topo(t, idx, 4, 4, &cl), 0);
    assert_int_equal(cl.ngroups, 2);
    assert_string_equal(cl.group[0].gpu.name, "A100-80GB");
    assert_int_equal(cl.group[0].nodes, 2);
    assert_string_equal(cl.group[1].gpu.name, "H100-80GB");
    assert_int_equal(cl.group[1].nodes, 2);
    whale_topo_free(t);
    whale_conf_free(c);
}

static void test_errors(void **st)
{
    (void)st;
    expect_error("TopologyFile=none\nDeviceTypeFromFeature=a100\n",
                 "/etc/slurm/whale.conf:2: DeviceTypeFromFeature=a100: expected NAME:TYPE");
    expect_error("DeviceTypeFromGres=a100:A100-80GB,\n", ":1: DeviceTypeFromGres=");
    expect_error("DeviceTypeFromGres=:A100-80GB\n", "expected NAME:TYPE");
    expect_error("DeviceTypeFromFeature=a100:A100 80GB\n", ":1: '80GB' is not of the form Key=Value");
    expect_error("DeviceTypeFromFeature=a100:A100-80GB:x\n", "expected NAME:TYPE");
    expect_error("DeviceTypeFromFeature=a1/0:A100-80GB\n", "expected NAME:TYPE");
    expect_error("DeviceTypeFromFeature=a100:A100-80GB\nDeviceTypeFromFeature=A100:H100-80GB\n",
                 ":2: DeviceTypeFromFeature: 'A100' is mapped twice (first on line 1)");
    expect_error("DeviceTypeFromFeatures=a100:A100-80GB\n", "did you mean 'DeviceTypeFromFeature'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_mapping, setup),
        cmocka_unit_test_setup(test_groups, setup),
        cmocka_unit_test_setup(test_errors, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
