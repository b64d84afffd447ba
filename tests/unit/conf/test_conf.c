#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale_config.h"

#include "conf_test.h"

static const char *good =
    "# a GPU site\n"
    "TopologyFile=none\n"
    "DefaultMap=block MaxSpares=4 MaxTP=8\n"
    "CheckpointRoot=/ckpt/%u/%j CkptKeep=5 CkptMilestoneEvery=1000\n"
    "NodeGrace=45\n"
    "AllowedOffload=none,optimizer AllowedRecompute=none,selective,full\n"
    "SetNCCLEnv=no LinkBandwidth=leaf:40,spine:20\n"
    "GPUType=H100 PeakTFLOPS=989 Memory=80G NVLinkBandwidth=450\n"
    "NodeName=DEFAULT GPUs=8 GPUType=H100 NICs=mlx5_[0-7]:1 NICBandwidth=400Gb\n"
    "NodeName=gpu[001-004]\n"
    "NodeName=cpu[1-2] GPUs=0 Cores=64 NICs=eth0\n"
    "NVLinkDomain=rack1 Nodes=gb[01-18]\n";

static void test_parse_good(void **st)
{
    (void)st;
    struct whale_conf *c;
    assert_int_equal(whale_conf_parse_string(good, "whale.conf", &c), 0);
    assert_int_equal(c->default_map, WHALE_MAP_BLOCK);
    assert_int_equal(c->max_spares, 4);
    assert_int_equal(c->max_tp, 8);
    assert_false(c->set_nccl_env);
    assert_true(c->set_cuda_visible_devices);
    assert_true(c->allowed_offload & (1u << WHALE_OFFLOAD_OPTIMIZER));
    assert_false(c->allowed_offload & (1u << WHALE_OFFLOAD_PARAMS));
    assert_int_equal(c->ngpu_types, 1);
    assert_true(c->gpu_types[0].peak_tflops == 989);
    assert_int_equal(c->nnodesets, 2);
    assert_int_equal(c->nodesets[0].gpus, 8);         /* from DEFAULT */
    assert_int_equal(c->nodesets[0].nnics, 8);
    assert_string_equal(c->nodesets[0].nics[7], "mlx5_7:1");
    assert_true(c->nodesets[0].nic_gbs == 50);        /* 400 Gb/s */
    assert_int_equal(c->nodesets[1].gpus, 0);
    assert_int_equal(c->nodesets[1].nnics, 1);
    assert_int_equal(c->ckpt_keep, 5);
    assert_int_equal(c->ckpt_milestone_every, 1000);
    assert_int_equal(c->node_grace, 45);
    char *p = whale_conf_expand_path(c->checkpoint_root, "alice", "42");
    assert_string_equal(p, "/ckpt/alice/42");
    free(p);
    struct whale_topo *t;
    assert_int_equal(whale_conf_build_topo(c, NULL, &t), 0);
    int g = whale_topo_find_node(t, "gpu003");
    assert_true(g >= 0);
    assert_int_equal(t->nodes[g].gpus, 8);
    assert_int_equal(t->nodes[g].nnics, 8);
    int d = whale_topo_find_node(t, "gb07");
    assert_true(d >= 0);
    assert_int_equal(t->domains[t->nodes[d].domain].nnodes, 18);
    assert_true(t->link_gbs[WHALE_LINK_LEAF] == 40);
    assert_true(t->link_gbs[WHALE_LINK_NODE] == 450);
    /* a step node unknown to the config gets the DEFAULT attributes */
    int x = whale_conf_topo_ensure_node(c, t, "newnode");
    assert_true(x >= 0);
    assert_int_equal(t->nodes[x].gpus, 8);
    whale_topo_free(t);
    whale_conf_free(c);
}

static void test_parse_errors(void **st)
{
    (void)st;
    expect_error("NodeName=a GPUsPerNod=8\n", "/etc/slurm/whale.conf:1: unknown key 'GPUsPerNod' in a NodeName line (did you mean 'GPUs'?)");
    expect_error("# c\n\nMaxTP=8\nMaxTq=4\n", "/etc/slurm/whale.conf:4: unknown key 'MaxTq'");
    expect_error("MaxTP=abc\n", ":1: MaxTP=abc: not an integer");
    expect_error("MaxZero=7\n", "MaxZero=7: out of range");
    expect_error("NodeGrace=86401\n", "NodeGrace=86401: out of range");
    expect_error("DefaultMap=random\n", "DefaultMap=random: expected topo or block");
    expect_error("NodeName=a GPUs=8 GPUType=B200\n", ":1: GPUType=B200 is not defined");
    expect_error("NodeName=a[1- GPUs=8\n", "not a valid hostlist");
    expect_error("NodeName=a NICBandwidth=fast\n", "NICBandwidth=fast: expected a positive bandwidth");
    expect_error("NodeName=a NICs=mlx5_[0-\n", "NICs=mlx5_[0-");
    /* fuzz finding: strtol saturates at LONG_MAX and the range loop's v++
     * overflowed (UBSan); numbers that long are refused */
    expect_error("NodeName=a NICs=mlx5_[88888888888888888888888x]\n", "NICs=mlx5_[8888");
    expect_error("NodeName=a NICs=mlx5_[9223372036854775807]\n", "NICs=mlx5_[9223372036854775807]");
    /* 2^16 hosts per expression, 2^18 per file (fuzz finding: two brackets
     * multiply, and one 25-byte line expanded to a million names) */
    expect_error("NodeName=gb[08-1027]b[08-1027]\n",
                 ":1: NodeName=gb[08-1027]b[08-1027]: expands to more than 65536 hosts");
    expect_error("NodeName=a[0-65535],b\n", "expands to more than 65536 hosts");
    expect_error("NodeName=a[0-65535]\nNodeName=b[0-65535]\nNVLinkDomain=d Nodes=c[0-65535]\n"
                 "NodeName=e[0-65535]\nNodeName=f[0]\n",
                 ":5: NodeName=f[0]: this file's hostlists expand to more than 262144 hosts in all");
    expect_error("NVLinkDomain=r1\n", "needs Nodes=");
    expect_error("CheckpointRoot=relative/dir\n", "must be an absolute path");
    expect_error("CkptKeep=-2\n", "CkptKeep");
    expect_error("AllowedOffload=none,disk\n", "'disk' is not one of");
    expect_error("MaxTP=8 MaxTP=4\n", "given twice");
    expect_error("MaxTP=8 NodeName=a\n", "NodeName= must be the first key");
    expect_error("LinkBandwidth=leaf\n", "LinkBandwidth=leaf: expected class:GB/s");
    expect_error("GPUType=H100\n", "GPUType=H100 alone");
    expect_error("NodeName=a GPUs=0 GPUType=H100\nGPUType=H100 PeakTFLOPS=1\n", "GPUs=0");
    expect_error("Broken line\n", "is not of the form Key=Value");
}

static void test_load_file(void **st)
{
    (void)st;
    struct whale_conf *c;
    assert_int_equal(whale_conf_load("/nonexistent/whale.conf", &c) < 0, 1);
    char dir[] = "/tmp/whale-conf-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char wpath[256], tpath[256], spath[256];
    snprintf(wpath, sizeof wpath, "%s/whale.conf", dir);
    snprintf(tpath, sizeof tpath, "%s/topology.conf", dir);
    snprintf(spath, sizeof spath, "%s/slurm.conf", dir);
    FILE *f = fopen(wpath, "w");
    fputs("NodeName=DEFAULT GPUs=0\n", f);
    fclose(f);
    f = fopen(tpath, "w");
    fputs("SwitchName=leaf1 Nodes=node[1-2]\nSwitchName=leaf2 Nodes=node[3-4]\n"
          "SwitchName=spine0 Switches=leaf[1-2]\n", f);
    fclose(f);
    assert_int_equal(whale_conf_load(wpath, &c), 0);
    char *tp = whale_conf_topology_path(c, spath);
    assert_string_equal(tp, tpath);
    free(tp);
    struct whale_topo *t;
    assert_int_equal(whale_conf_build_topo(c, spath, &t), 0);
    int a = whale_topo_find_node(t, "node1"), b = whale_topo_find_node(t, "node2");
    int d = whale_topo_find_node(t, "node4");
    assert_int_equal(whale_topo_link_class(t, a, b), WHALE_LINK_LEAF);
    assert_int_equal(whale_topo_link_class(t, a, d), WHALE_LINK_SPINE);
    whale_topo_free(t);
    whale_conf_free(c);
    /* an explicit TopologyFile that does not exist is an error */
    f = fopen(wpath, "w");
    fprintf(f, "TopologyFile=%s/missing.conf\n", dir);
    fclose(f);
    assert_int_equal(whale_conf_load(wpath, &c), 0);
    assert_int_not_equal(whale_conf_build_topo(c, spath, &t), 0);
    assert_non_null(strstr(last_err, "missing.conf"));
    whale_conf_free(c);
    unlink(wpath);
    unlink(tpath);
    rmdir(dir);
}

static void test_topology_conf(void **st)
{
    (void)st;
    struct whale_topo *t = whale_topo_new();
    /* parents listed after children, as in Slurm's examples; LinkSpeed */
    const char *text = "SwitchName=s0 Nodes=tux[0-3] LinkSpeed=400\n"
                       "SwitchName=s1 Nodes=tux[4-7]\n"
                       "SwitchName=s2 Nodes=tux[8-11]\n"
                       "SwitchName=s3 Switches=s[0-1]\n"
                       "SwitchName=s4 Switches=s[2-3]\n"
                       "BlockName=b0 Nodes=tux[0-1]\n";
    assert_int_equal(whale_topology_conf_parse_string(text, "topology.conf", t), 0);
    int n0 = whale_topo_find_node(t, "tux0"), n1 = whale_topo_find_node(t, "tux1");
    int n2 = whale_topo_find_node(t, "tux2"), n4 = whale_topo_find_node(t, "tux4");
    int n8 = whale_topo_find_node(t, "tux8");
    assert_int_equal(whale_topo_link_class(t, n0, n0), WHALE_LINK_NODE);
    assert_int_equal(whale_topo_link_class(t, n0, n1), WHALE_LINK_NVL);
    assert_int_equal(whale_topo_link_class(t, n0, n2), WHALE_LINK_LEAF);
    assert_int_equal(whale_topo_link_class(t, n0, n4), WHALE_LINK_SPINE);
    assert_int_equal(whale_topo_link_class(t, n0, n8), WHALE_LINK_CORE);
    assert_true(t->switches[whale_topo_find_switch(t, "s0")].link_gbs == 50);
    assert_int_equal(t->switches[whale_topo_find_switch(t, "s4")].level, 2);
    whale_topo_free(t);
    const char *bad[] = {
        "SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=a\n",       /* node under two leaves */
        "SwitchName=s0 Switches=s1\nSwitchName=s1 Switches=s0\n", /* cycle */
        "SwitchName=s0 Nodez=a\n",                                /* unknown key */
        "SwitchName=s0 Switches=s0\n",                            /* self */
        "SwitchName=s0 Nodes=n[0-65536]\n",                       /* 2^16 + 1 hosts */
        /* 2^18 + 1 hosts in all */
        "SwitchName=s0 Nodes=a[0-65535]\nSwitchName=s1 Nodes=b[0-65535]\n"
        "SwitchName=s2 Nodes=c[0-65535]\nSwitchName=s3 Nodes=d[0-65535]\n"
        "SwitchName=s4 Switches=s[0-3] Nodes=e0\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = whale_topo_new();
        assert_int_not_equal(whale_topology_conf_parse_string(bad[i], "topology.conf", t), 0);
        whale_topo_free(t);
    }
}

static void test_hostlist(void **st)
{
    (void)st;
    char **n;
    int k;
    assert_int_equal(whale_hostlist_expand("node[1-3,7],x", &n, &k), 0);
    assert_int_equal(k, 5);
    assert_string_equal(n[3], "node7");
    assert_string_equal(n[4], "x");
    for (int i = 0; i < k; i++)
        free(n[i]);
    free(n);
    assert_int_not_equal(whale_hostlist_expand("node[1-", &n, &k), 0);
}

/* Garbage never crashes the parser (run under ASan in CI). */
static void test_garbage(void **st)
{
    (void)st;
    const char alphabet[] = "NodeName=GPUs[]-,0123456789 #\\\"\nabcXYZ=:%/";
    uint64_t seed = 12345;
    char buf[256];
    for (int iter = 0; iter < 3000; iter++) {
        int n = (int)(seed % 200);
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = alphabet[(seed >> 33) % (sizeof alphabet - 1)];
        }
        buf[n] = '\0';
        struct whale_conf *c = NULL;
        if (whale_conf_parse_string(buf, "fuzz", &c) == 0) {
            struct whale_topo *t = NULL;
            if (whale_conf_build_topo(c, "/nonexistent/slurm.conf", &t) == 0)
                whale_topo_free(t);
            whale_conf_free(c);
        }
        struct whale_topo *t = whale_topo_new();
        whale_topology_conf_parse_string(buf, "fuzz", t);
        whale_topo_free(t);
    }
}

/* The shipped example and test topologies stay valid. */
static void test_shipped_files(void **st)
{
    (void)st;
    struct whale_conf *c;
    assert_int_equal(whale_conf_load(WHALE_SOURCE_CONFIG_DIR "/whale.conf.example", &c), 0);
    assert_int_equal(c->ngpu_types, 3);
    whale_conf_free(c);
    const char *pairs[][2] = {
        { "fattree.whale.conf", "fattree-fragmented.topology.conf" },
        { "nvl72.whale.conf", "nvl72.topology.conf" },
    };
    for (int i = 0; i < 2; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/topologies/%s", WHALE_SOURCE_CONFIG_DIR, pairs[i][0]);
        assert_int_equal(whale_conf_load(p, &c), 0);
        /* TopologyFile is relative to the whale.conf naming it */
        char *tp = whale_conf_topology_path(c, NULL);
        snprintf(p, sizeof p, "%s/topologies/%s", WHALE_SOURCE_CONFIG_DIR, pairs[i][1]);
        assert_string_equal(tp, p);
        free(tp);
        struct whale_topo *t;
        assert_int_equal(whale_conf_build_topo(c, NULL, &t), 0);
        assert_true(t->nnodes >= 32);
        whale_topo_free(t);
        whale_conf_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_parse_good, setup),
        cmocka_unit_test_setup(test_parse_errors, setup),
        cmocka_unit_test_setup(test_load_file, setup),
        cmocka_unit_test_setup(test_topology_conf, setup),
        cmocka_unit_test_setup(test_hostlist, setup),
        cmocka_unit_test_setup(test_shipped_files, setup),
        cmocka_unit_test_setup(test_garbage, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
