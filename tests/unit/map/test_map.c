#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/map.h"
#include "synth.h"

static char last_err[1024];
static void sink(int level, const char *line, void *u)
{
    (void)u;
    if (level == WHALE_LOG_ERROR)
        snprintf(last_err, sizeof last_err, "%s", line);
}

/* ---- property checks shared by the tests -------------------------------- */

static int dom_of(const struct whale_map_input *in, const struct whale_layout *l, int task)
{
    int node = l->node_of_task[task];
    int k = l->topo_node[node];
    if (in->topo && k >= 0 && in->topo->nodes[k].domain >= 0)
        return in->topo->nodes[k].domain;
    return 1000000 + node;
}

static void check_layout(const struct whale_map_input *in, const struct whale_layout *l)
{
    /* bijection between working ranks and non-spare tasks */
    unsigned char *seen = calloc((size_t)l->ntasks, 1);
    for (int r = 0; r < l->world; r++) {
        int t = l->task_of_rank[r];
        assert_true(t >= 0 && t < l->ntasks);
        assert_false(seen[t]);
        seen[t] = 1;
        assert_int_equal(l->rank_of_task[t], r);
    }
    /* spares are whole nodes: a task is spare iff its node is */
    int spare_tasks = 0;
    for (int t = 0; t < l->ntasks; t++) {
        int sp = l->spare_node[l->node_of_task[t]];
        assert_int_equal(sp, l->rank_of_task[t] < 0);
        assert_int_equal(sp, !seen[t]);
        spare_tasks += sp;
    }
    assert_int_equal(spare_tasks + l->world, l->ntasks);
    assert_int_equal(l->nspare_nodes, in->spares);
    /* every TP group inside one NVLink domain */
    for (int r = 0; r < l->world; r += l->tp)
        for (int k = 1; k < l->tp; k++)
            assert_int_equal(dom_of(in, l, l->task_of_rank[r]), dom_of(in, l, l->task_of_rank[r + k]));
    free(seen);
}

static void same_layout(const struct whale_layout *a, const struct whale_layout *b)
{
    assert_int_equal(a->world, b->world);
    assert_int_equal(a->ntasks, b->ntasks);
    assert_memory_equal(a->rank_of_task, b->rank_of_task, (size_t)a->ntasks * sizeof(int));
    assert_memory_equal(a->spare_node, b->spare_node, (size_t)a->nnodes);
}

/* ---- tests -------------------------------------------------------------- */

static void test_flat_block(void **st)
{
    (void)st;
    const char *nodes[] = { "a", "b" };
    int nt[] = { 4, 4 };
    struct whale_map_input in = { .tp = 2, .pp = 2, .dp = 0, .nnodes = 2, .nodes = nodes,
                                  .ntasks = nt, .policy = WHALE_MAP_BLOCK };
    struct whale_layout l;
    assert_int_equal(whale_map_compute(&in, &l), 0);
    assert_int_equal(l.dp, 2);
    for (int t = 0; t < 8; t++)
        assert_int_equal(l.rank_of_task[t], t);
    check_layout(&in, &l);
    whale_layout_free(&l);
}

static void test_two_leaf_topo(void **st)
{
    (void)st;
    /* nodes named so Slurm order interleaves the two leaves */
    struct whale_topo *t = whale_topo_new();
    int sp = whale_topo_add_switch(t, "spine", -1);
    int l0 = whale_topo_add_switch(t, "s0", sp), l1 = whale_topo_add_switch(t, "s1", sp);
    whale_topo_add_node(t, "m1", 0, l0, -1);
    whale_topo_add_node(t, "m2", 0, l1, -1);
    whale_topo_add_node(t, "m3", 0, l0, -1);
    whale_topo_add_node(t, "m4", 0, l1, -1);
    assert_int_equal(whale_topo_finalize(t), 0);
    const char *nodes[] = { "m1", "m2", "m3", "m4" };
    int nt[] = { 2, 2, 2, 2 };
    struct whale_map_input in = { .tp = 2, .pp = 2, .nnodes = 4, .nodes = nodes, .ntasks = nt,
                                  .topo = t, .policy = WHALE_MAP_TOPO };
    struct whale_layout topo, block;
    assert_int_equal(whale_map_compute(&in, &topo), 0);
    in.policy = WHALE_MAP_BLOCK;
    assert_int_equal(whale_map_compute(&in, &block), 0);
    check_layout(&in, &topo);
    /* topo keeps each DP group (one PP stage) under one leaf */
    for (int p = 0; p < 2; p++) {
        int n0 = topo.node_of_task[topo.task_of_rank[p * 4]];
        int n1 = topo.node_of_task[topo.task_of_rank[p * 4 + 2]];
        assert_int_equal(t->nodes[whale_topo_find_node(t, nodes[n0])].leaf,
                         t->nodes[whale_topo_find_node(t, nodes[n1])].leaf);
    }
    assert_true(topo.cost.seconds < block.cost.seconds);
    assert_true(topo.cost.bytes[WHALE_LINK_SPINE] < block.cost.bytes[WHALE_LINK_SPINE]);
    char *m = whale_rankmap_encode(topo.task_of_rank, topo.world);
    assert_string_equal(m, "0-1,4-5,2-3,6-7");
    free(m);
    whale_layout_free(&topo);
    whale_layout_free(&block);
    whale_topo_free(t);
}

static void test_errors(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    const char *nodes[] = { "a", "b", "c" };
    int nt[] = { 2, 2, 2 };
    struct whale_map_input in = { .tp = 3, .pp = 1, .nnodes = 3, .nodes = nodes, .ntasks = nt };
    struct whale_layout l;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_ENOFIT);
    assert_non_null(strstr(last_err, "TP=3 is larger than any NVLink domain"));
    in.tp = 2;
    in.dp = 2;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "TP*PP*DP = 2*1*2 = 4 working ranks, but the step has 6"));
    in.dp = 0;
    in.pp = 4;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "not a multiple of TP*PP"));
    in.pp = 1;
    in.spares = 3;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_ENOFIT);
    assert_non_null(strstr(last_err, "leave no working node"));
    /* uneven tasks: a node with 3 tasks cannot hold whole TP=2 groups */
    int odd[] = { 3, 2, 1 };
    in.spares = 0;
    in.ntasks = odd;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_ENOFIT);
    assert_non_null(strstr(last_err, "not a multiple of 2"));
    /* block order refuses a TP group across nodes when topo could do it */
    int mix[] = { 1, 2, 1 };
    const char *nodes2[] = { "a", "b", "c" };
    struct whale_map_input in2 = { .tp = 2, .pp = 1, .nnodes = 3, .nodes = nodes2, .ntasks = mix,
                                   .policy = WHALE_MAP_BLOCK };
    assert_int_equal(whale_map_compute(&in2, &l), WHALE_ENOFIT);
    whale_log_set_sink(NULL, NULL);
}

static void test_cyclic_task_ids(void **st)
{
    (void)st;
    const char *nodes[] = { "a", "b" };
    int nt[] = { 2, 2 };
    int *ids = NULL;
    assert_int_equal(whale_map_parse_pmi_mapping("(vector,(0,2,1))", 2, nt, &ids), 0);
    int want[] = { 0, 2, 1, 3 };
    assert_memory_equal(ids, want, sizeof want);
    struct whale_map_input in = { .tp = 2, .pp = 1, .nnodes = 2, .nodes = nodes, .ntasks = nt,
                                  .task_ids = ids, .policy = WHALE_MAP_TOPO };
    struct whale_layout l;
    assert_int_equal(whale_map_compute(&in, &l), 0);
    check_layout(&in, &l);
    /* TP pairs are the two tasks of one node: tasks 0 and 2 on node a */
    assert_int_equal(l.node_of_task[l.task_of_rank[0]], l.node_of_task[l.task_of_rank[1]]);
    whale_layout_free(&l);
    free(ids);
    /* uneven cyclic: 7 tasks on 4 nodes as Slurm writes it */
    int nt7[] = { 2, 2, 2, 1 };
    assert_int_equal(whale_map_parse_pmi_mapping("(vector,(0,4,1),(0,3,1))", 4, nt7, &ids), 0);
    int want7[] = { 0, 4, 1, 5, 2, 6, 3 };
    assert_memory_equal(ids, want7, sizeof want7);
    free(ids);
    whale_log_set_sink(sink, NULL);
    assert_int_not_equal(whale_map_parse_pmi_mapping("(vector,(0,5,1))", 4, nt7, &ids), 0);
    assert_int_not_equal(whale_map_parse_pmi_mapping("garbage", 4, nt7, &ids), 0);
    whale_log_set_sink(NULL, NULL);
}

static void test_tasks_per_node(void **st)
{
    (void)st;
    int nt[4];
    assert_int_equal(whale_map_parse_tasks_per_node("2(x3),1", 4, nt), 0);
    assert_int_equal(nt[0], 2);
    assert_int_equal(nt[2], 2);
    assert_int_equal(nt[3], 1);
    whale_log_set_sink(sink, NULL);
    assert_int_not_equal(whale_map_parse_tasks_per_node("2(x5)", 4, nt), 0);
    assert_int_not_equal(whale_map_parse_tasks_per_node("2,x", 4, nt), 0);
    whale_log_set_sink(NULL, NULL);
}

static void test_rankmap_roundtrip(void **st)
{
    (void)st;
    int v[] = { 0, 1, 2, 3, 9, 8, 7, 4, 6, 5, 10 };
    char *s = whale_rankmap_encode(v, 11);
    assert_string_equal(s, "0-3,9-7,4,6-5,10");
    int *d, n;
    assert_int_equal(whale_rankmap_decode(s, &d, &n), 0);
    assert_int_equal(n, 11);
    assert_memory_equal(d, v, sizeof v);
    free(d);
    free(s);
    whale_log_set_sink(sink, NULL);
    assert_int_not_equal(whale_rankmap_decode("1-,2", &d, &n), 0);
    assert_int_not_equal(whale_rankmap_decode("", &d, &n), 0);
    assert_int_not_equal(whale_rankmap_decode("a", &d, &n), 0);
    assert_int_not_equal(whale_rankmap_decode("0-2000000000", &d, &n), 0);
    whale_log_set_sink(NULL, NULL);
    /* '@file' form */
    char path[] = "/tmp/whale-rankmap-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("4-7,0-3\n", f);
    fclose(f);
    char val[64];
    snprintf(val, sizeof val, "@%s", path);
    assert_int_equal(whale_rankmap_load(val, &d, &n), 0);
    assert_int_equal(n, 8);
    assert_int_equal(d[0], 4);
    assert_int_equal(d[7], 3);
    free(d);
    unlink(path);
}

static void test_garbage_strings(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    const char alphabet[] = "0123456789-,()vector x";
    uint64_t seed = 99;
    char buf[128];
    int nt[4] = { 2, 2, 2, 1 };
    for (int iter = 0; iter < 5000; iter++) {
        int n = (int)(seed % 60);
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = alphabet[(seed >> 33) % (sizeof alphabet - 1)];
        }
        buf[n] = '\0';
        int *v = NULL, w = 0;
        if (whale_rankmap_decode(buf, &v, &w) == 0)
            free(v);
        if (whale_map_parse_pmi_mapping(buf, 4, nt, &v) == 0)
            free(v);
        int out[4];
        whale_map_parse_tasks_per_node(buf, 4, out);
    }
    whale_log_set_sink(NULL, NULL);
}

struct envcap {
    char names[40][40];
    char values[40][128];
    int n;
};
static int cap_env(const char *name, const char *value, void *u)
{
    struct envcap *c = u;
    snprintf(c->names[c->n], 40, "%s", name);
    snprintf(c->values[c->n], 128, "%s", value);
    c->n++;
    return 0;
}
static const char *env_get(const struct envcap *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name))
            return c->values[i];
    return NULL;
}

static void test_task_env(void **st)
{
    (void)st;
    struct whale_topo *t = whale_topo_new();
    int lf = whale_topo_add_switch(t, "leaf", -1);
    for (int i = 0; i < 2; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "g%d", i);
        int k = whale_topo_add_node(t, nm, 8, lf, -1);
        for (int q = 0; q < 4; q++) {
            char nic[16];
            snprintf(nic, sizeof nic, "mlx5_%d:1", q);
            whale_topo_node_add_nic(t, k, nic);
        }
    }
    whale_topo_finalize(t);
    const char *nodes[] = { "g0", "g1" };
    int nt[] = { 8, 8 };
    struct whale_map_input in = { .tp = 8, .pp = 1, .spares = 1, .nnodes = 2, .nodes = nodes,
                                  .ntasks = nt, .topo = t };
    struct whale_layout l;
    assert_int_equal(whale_map_compute(&in, &l), 0);
    check_layout(&in, &l);
    struct whale_env_opts o = { .plan = "{}", .conf_path = "/etc/slurm/whale.conf",
                                .set_cuda = true, .set_nics = true, .set_nccl = true };
    /* find a working task with local index 5 and a spare task */
    int work = -1, spare = -1;
    for (int k = 0; k < l.ntasks; k++) {
        if (l.rank_of_task[k] >= 0 && l.local_of_task[k] == 5)
            work = k;
        if (l.rank_of_task[k] < 0)
            spare = k;
    }
    struct envcap c = { 0 };
    assert_int_equal(whale_map_task_env(&in, &l, work, &o, cap_env, &c), 0);
    assert_string_equal(env_get(&c, WHALE_ENV_TP), "8");
    assert_string_equal(env_get(&c, WHALE_ENV_DP), "1");
    assert_string_equal(env_get(&c, WHALE_ENV_WORLD), "8");
    assert_string_equal(env_get(&c, WHALE_ENV_SPARE), "0");
    assert_string_equal(env_get(&c, WHALE_ENV_TP_RANK), "5");
    assert_string_equal(env_get(&c, "CUDA_VISIBLE_DEVICES"), "5");
    assert_string_equal(env_get(&c, "UCX_NET_DEVICES"), "mlx5_2:1"); /* rail 5*4/8 */
    assert_string_equal(env_get(&c, "NCCL_IB_HCA"), "=mlx5_2:1");
    assert_string_equal(env_get(&c, WHALE_ENV_PLAN), "{}");
    assert_string_equal(env_get(&c, WHALE_ENV_CONF), "/etc/slurm/whale.conf");
    assert_non_null(env_get(&c, WHALE_ENV_RANKMAP));
    memset(&c, 0, sizeof c);
    assert_int_equal(whale_map_task_env(&in, &l, spare, &o, cap_env, &c), 0);
    assert_string_equal(env_get(&c, WHALE_ENV_SPARE), "1");
    assert_string_equal(env_get(&c, WHALE_ENV_RANK), "-1");
    whale_layout_free(&l);
    whale_topo_free(t);
}

/* Property test over many fragmented fat-tree and NVL72-style allocations:
 * valid layouts, TP inside domains, spares whole nodes, deterministic, and
 * never costlier than block order. */
static void run_props(struct whale_topo *t, int want_nodes, int tpn, int tp, int pp, int spares,
                      uint64_t seed, int fragment)
{
    struct synth s;
    assert_int_equal(synth_alloc(&s, t, want_nodes, tpn, seed, fragment), 0);
    struct whale_map_input in;
    synth_input(&s, tp, pp, 0, spares, WHALE_MAP_TOPO, &in);
    struct whale_layout a, b, blk;
    int rc = whale_map_compute(&in, &a);
    if (rc) {
        fprintf(stderr, "map failed: %s\n", last_err);
        fail();
    }
    check_layout(&in, &a);
    assert_int_equal(whale_map_compute(&in, &b), 0);
    same_layout(&a, &b);
    in.policy = WHALE_MAP_BLOCK;
    if (whale_map_compute(&in, &blk) == 0) {
        assert_true(a.cost.seconds <= blk.cost.seconds * (1 + 1e-9));
        whale_layout_free(&blk);
    }
    whale_layout_free(&a);
    whale_layout_free(&b);
    s.topo = NULL; /* owned by the caller */
    synth_free(&s);
}

/* EP through the map: exported as WHALE_EP, refused unless it divides DP,
 * and the EP groups that leave an NVLink domain are counted and described. */
static void test_ep(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    const char *nodes[] = { "a", "b" };
    int nt[] = { 4, 4 };
    struct whale_map_input in = { .tp = 1, .pp = 1, .nnodes = 2, .nodes = nodes, .ntasks = nt };
    struct whale_layout l;
    struct envcap c = { 0 };
    /* not given: dense, WHALE_EP=1 */
    assert_int_equal(whale_map_compute(&in, &l), 0);
    assert_int_equal(whale_map_task_env(&in, &l, 0, NULL, cap_env, &c), 0);
    assert_string_equal(env_get(&c, WHALE_ENV_EP), "1");
    assert_int_equal(whale_layout_ep_crossings(&in, &l, NULL), 0);
    whale_layout_free(&l);
    /* EP=2 over DP=8: pairs of consecutive ranks, each on one node */
    in.ep = 2;
    assert_int_equal(whale_map_compute(&in, &l), 0);
    memset(&c, 0, sizeof c);
    assert_int_equal(whale_map_task_env(&in, &l, 3, NULL, cap_env, &c), 0);
    assert_string_equal(env_get(&c, WHALE_ENV_EP), "2");
    assert_string_equal(env_get(&c, WHALE_ENV_DP), "8");
    int first = 0;
    assert_int_equal(whale_layout_ep_crossings(&in, &l, &first), 0);
    assert_int_equal(first, -1);
    char *d = whale_layout_describe(&in, &l, 0);
    assert_non_null(strstr(d, "EP=2: each of the 4 expert group(s) inside one NVLink domain"));
    free(d);
    whale_layout_free(&l);
    /* TP=2 x EP=4: 8 tasks per expert group, nodes of 4: it cannot fit */
    in.tp = 2;
    in.ep = 4;
    assert_int_equal(whale_map_compute(&in, &l), 0);
    assert_int_equal(whale_layout_ep_crossings(&in, &l, &first), 2);
    assert_int_equal(first, 0);
    d = whale_layout_describe(&in, &l, 0);
    assert_non_null(strstr(d, "EP=4: 2 of 2 expert group(s) span more than one NVLink domain"));
    free(d);
    whale_layout_free(&l);
    /* EP must divide DP */
    in.tp = 1;
    in.ep = 3;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_EINVAL);
    assert_non_null(strstr(last_err, "EP=3 does not divide DP=8"));
    assert_non_null(strstr(last_err, "(allowed EP: 1, 2, 4, 8)"));
    whale_log_set_sink(NULL, NULL);
}

static void test_props_fat_tree(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    struct whale_topo *t = synth_fat_tree(2, 4, 16, 8, 1); /* 128 nodes */
    for (uint64_t seed = 1; seed <= 20; seed++) {
        run_props(t, 24, 8, 8, 3, 0, seed, 1);       /* DP=8 */
        run_props(t, 25, 8, 8, 4, 1, seed, 1);       /* DP=6, 1 spare */
        run_props(t, 32, 8, 4, 2, 2, seed, 1);       /* DP=15 */
        run_props(t, 16, 8, 2, 4, 0, seed, 1);
    }
    synth_interleave_names(t, 7);
    for (uint64_t seed = 1; seed <= 10; seed++)
        run_props(t, 40, 8, 8, 5, 0, seed, 1);
    whale_topo_free(t);
    whale_log_set_sink(NULL, NULL);
}

static void test_props_nvl72(void **st)
{
    (void)st;
    whale_log_set_sink(sink, NULL);
    /* 2 spines x 2 leaves x 36 nodes of 4 GPUs; NVLink domains of 18 nodes */
    struct whale_topo *t = synth_fat_tree(2, 2, 36, 4, 18);
    for (uint64_t seed = 1; seed <= 10; seed++) {
        run_props(t, 36, 4, 8, 2, 0, seed, 1);   /* TP=8 spans 2 nodes inside a rack */
        run_props(t, 54, 4, 4, 3, 0, seed, 1);
        run_props(t, 36, 4, 8, 1, 2, seed, 1);   /* 2 spares inside one rack */
        run_props(t, 72, 4, 4, 2, 4, seed, 1);
    }
    /* TP=144 (all 144 tasks) is larger than any 72-GPU domain */
    struct synth s;
    assert_int_equal(synth_alloc(&s, t, 36, 4, 3, 1), 0);
    struct whale_map_input in;
    synth_input(&s, 144, 1, 0, 0, WHALE_MAP_TOPO, &in);
    struct whale_layout l;
    assert_int_equal(whale_map_compute(&in, &l), WHALE_ENOFIT);
    assert_non_null(strstr(last_err, "NVLink domain 'nvl"));
    /* one spare would leave a rack with 17 trays = 68 GPUs, not a multiple of TP=8 */
    synth_input(&s, 8, 1, 0, 1, WHALE_MAP_TOPO, &in);
    assert_int_equal(whale_map_compute(&in, &l), WHALE_ENOFIT);
    assert_non_null(strstr(last_err, "must be a multiple of 2"));
    s.topo = NULL;
    synth_free(&s);
    whale_topo_free(t);
    whale_log_set_sink(NULL, NULL);
}

static void test_scale_12500_nodes(void **st)
{
    (void)st;
    /* 12,500 nodes x 8 GPUs = 100,000 ranks: 10 spines x 25 leaves x 50 nodes */
    struct whale_topo *t = synth_fat_tree(10, 25, 50, 8, 1);
    assert_int_equal(t->nnodes, 12500);
    synth_interleave_names(t, 11);
    struct synth s;
    assert_int_equal(synth_alloc(&s, t, 12500, 8, 1, 0), 0);
    struct whale_map_input in;
    synth_input(&s, 8, 25, 0, 0, WHALE_MAP_TOPO, &in);
    struct whale_layout a, b, blk;
    assert_int_equal(whale_map_compute(&in, &a), 0);
    assert_int_equal(a.world, 100000);
    assert_int_equal(a.dp, 500);
    check_layout(&in, &a);
    assert_int_equal(whale_map_compute(&in, &b), 0);
    same_layout(&a, &b);
    in.policy = WHALE_MAP_BLOCK;
    assert_int_equal(whale_map_compute(&in, &blk), 0);
    assert_true(a.cost.seconds <= blk.cost.seconds);
    /* rank map of 100,000 ranks round-trips */
    char *m = whale_rankmap_encode(a.task_of_rank, a.world);
    int *d, n;
    assert_int_equal(whale_rankmap_decode(m, &d, &n), 0);
    assert_int_equal(n, a.world);
    assert_memory_equal(d, a.task_of_rank, (size_t)n * sizeof(int));
    free(d);
    free(m);
    whale_layout_free(&a);
    whale_layout_free(&b);
    whale_layout_free(&blk);
    s.topo = NULL;
    synth_free(&s);
    /* fragmented: 10,000 of the 12,500 nodes at random, with and without
     * 16 spare nodes */
    whale_log_set_sink(sink, NULL);
    run_props(t, 10000, 8, 8, 16, 0, 5, 1);
    run_props(t, 10000, 8, 8, 16, 16, 6, 1);
    whale_log_set_sink(NULL, NULL);
    whale_topo_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_block),
        cmocka_unit_test(test_two_leaf_topo),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cyclic_task_ids),
        cmocka_unit_test(test_tasks_per_node),
        cmocka_unit_test(test_rankmap_roundtrip),
        cmocka_unit_test(test_task_env),
        cmocka_unit_test(test_ep),
        cmocka_unit_test(test_garbage_strings),
        cmocka_unit_test(test_props_fat_tree),
        cmocka_unit_test(test_props_nvl72),
        cmocka_unit_test(test_scale_12500_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
