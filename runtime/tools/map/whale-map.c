/* whale-map: the plugin's mapper, offline. Node list + whale.conf (+ its
 * topology.conf) + degrees -> the layout as a table, WHALE_RANKMAP, the
 * env of one task, the cost against block order, and an SVG picture. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "svg.h"
#include "whale/conf.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/map.h"
#include "whale/outfile.h"
#include "whale_config.h"

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: whale-map --nodes HOSTLIST --tasks-per-node N|SPEC --tp N [options]\n"
        "\n"
        "Compute the layout the Whale SPANK plugin gives a step, offline: which task\n"
        "(node, local slot) takes each logical rank, and what it costs per step.\n"
        "\n"
        "Step:\n"
        "  -w, --nodes HOSTLIST        step nodes in Slurm order, e.g. gpu[001-016]\n"
        "                              (default inside a job: $SLURM_JOB_NODELIST)\n"
        "  -t, --tasks-per-node SPEC   N, or Slurm's form such as 8(x15),4\n"
        "                              (default inside a job: $SLURM_TASKS_PER_NODE)\n"
        "      --distribution block|cyclic   task id order (default block)\n"
        "Degrees:\n"
        "      --tp N  --pp N  --dp N  degrees (dp default: working tasks / (tp*pp))\n"
        "      --ep N                  expert-parallel degree, divides dp (default 1)\n"
        "      --spares N              hot-spare nodes (default 0)\n"
        "      --map topo|block        placement policy (default: the config's DefaultMap)\n"
        "Site:\n"
        "  -c, --conf FILE             whale.conf (default %s when readable)\n"
        "      --topology FILE         topology.conf (default: the config's TopologyFile, or\n"
        "                              topology.conf next to $SLURM_CONF)\n"
        "Output:\n"
        "      --groups                also list every TP, DP and PP group\n"
        "      --summary               only the header and the cost\n"
        "      --compare               also compute block order and print both costs\n"
        "      --rankmap               print WHALE_RANKMAP\n"
        "      --env TASK              print the contract environment of task id TASK\n"
        "      --svg FILE              draw the layout (nodes under switches, groups coloured)\n"
        "      --bench N               time N mappings of this step, print the median\n"
        "  -h, --help                  this help;  -V, --version  version\n"
        "\n"
        "Exit status: 0 ok, 1 the layout is impossible or a file is bad, 2 usage.\n",
        WHALE_CONF_DEFAULT_PATH);
}

static int print_env(const char *name, const char *value, void *u)
{
    (void)u;
    printf("%s=%s\n", name, value);
    return 0;
}

static void list_groups(const struct whale_map_input *in, const struct whale_layout *l)
{
    static const struct { const char *name; enum whale_axis axis; } kind[] = {
        { "TP", WHALE_AXIS_TP }, { "DP", WHALE_AXIS_DP }, { "PP", WHALE_AXIS_PP } };
    int *members = malloc((size_t)l->world * sizeof *members);
    if (!members)
        return;
    for (size_t g = 0; g < sizeof kind / sizeof kind[0]; g++) {
        int size = whale_grid_group(&l->grid, kind[g].axis, 0, NULL);
        int count = l->world / size;
        if (size < 2)
            continue;
        printf("%s groups (%d of %d ranks):\n", kind[g].name, count, size);
        /* groups in the order of their first rank (the one at coordinate 0) */
        for (int r0 = 0, q = 0; r0 < l->world; r0++) {
            if (whale_grid_group_index(&l->grid, kind[g].axis, r0))
                continue;
            whale_grid_group(&l->grid, kind[g].axis, r0, members);
            printf("  %s%-5d", kind[g].name, q++);
            for (int k = 0; k < size; k++) {
                int t = l->task_of_rank[members[k]];
                printf(" r%d@%s", members[k], in->nodes[l->node_of_task[t]]);
            }
            printf("\n");
        }
    }
    free(members);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall time of whale_map_compute on this input (what each
 * slurmstepd spends in user_init, plus srun once). */
static int run_bench(const struct whale_map_input *in, int n)
{
    double *ms = malloc((size_t)n * sizeof *ms);
    if (!ms)
        return -1;
    for (int i = 0; i < n; i++) {
        struct timespec a, b;
        struct whale_layout l;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int rc = whale_map_compute(in, &l);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (rc) {
            free(ms);
            return -1;
        }
        whale_layout_free(&l);
        ms[i] = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    printf("bench: %d runs, map %s: median %.3f ms, min %.3f ms, max %.3f ms\n", n,
           whale_map_policy_name(in->policy), ms[n / 2], ms[0], ms[n - 1]);
    free(ms);
    return 0;
}

/* What the command line asked for. */
struct map_opts {
    const char *nodes_expr, *tpn, *conf_path, *topo_path, *svg, *dist;
    WHALE_GRID(grid);
    int spares, policy, env_task;
    int groups, summary, compare, rankmap, bench;
};
#define MAP_GO (-1) /* go on; anything else is the exit status */

static int parse_args(int argc, char **argv, struct map_opts *o)
{
    enum { O_TP = 256, O_PP, O_DP, O_EP, O_SPARES, O_MAP, O_TOPO, O_GROUPS, O_SUMMARY, O_COMPARE,
           O_RANKMAP, O_ENV, O_SVG, O_DIST, O_BENCH };
    static const struct option lo[] = {
        { "nodes", required_argument, 0, 'w' },
        { "tasks-per-node", required_argument, 0, 't' },
        { "distribution", required_argument, 0, O_DIST },
        { "tp", required_argument, 0, O_TP },
        { "pp", required_argument, 0, O_PP },
        { "dp", required_argument, 0, O_DP }, { "ep", required_argument, 0, O_EP },
        { "spares", required_argument, 0, O_SPARES },
        { "map", required_argument, 0, O_MAP },
        { "conf", required_argument, 0, 'c' },
        { "topology", required_argument, 0, O_TOPO },
        { "groups", no_argument, 0, O_GROUPS },
        { "summary", no_argument, 0, O_SUMMARY },
        { "compare", no_argument, 0, O_COMPARE },
        { "rankmap", no_argument, 0, O_RANKMAP },
        { "env", required_argument, 0, O_ENV },
        { "svg", required_argument, 0, O_SVG },
        { "bench", required_argument, 0, O_BENCH },
        { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, 'V' },
        { 0, 0, 0, 0 },
    };
    *o = (struct map_opts){ .dist = "block", .tp = 0, .pp = 1, .policy = -1, .env_task = -1 };
    int c;
    while ((c = getopt_long(argc, argv, "w:t:c:hV", lo, NULL)) != -1) {
        switch (c) {
        case 'w': o->nodes_expr = optarg; break;
        case 't': o->tpn = optarg; break;
        case 'c': o->conf_path = optarg; break;
        case O_TOPO: o->topo_path = optarg; break;
        case O_DIST:
            if (strcmp(optarg, "block") && strcmp(optarg, "cyclic")) {
                fprintf(stderr, "whale-map: --distribution=%s: expected block or cyclic\n", optarg);
                return 2;
            }
            o->dist = optarg;
            break;
        case O_TP: if (whale_opt_int("whale-map", "tp", optarg, 1, 1 << 20, &o->tp)) return 2; break;
        case O_PP: if (whale_opt_int("whale-map", "pp", optarg, 1, 1 << 20, &o->pp)) return 2; break;
        case O_DP: if (whale_opt_int("whale-map", "dp", optarg, 1, 1 << 24, &o->dp)) return 2; break;
        case O_EP: if (whale_opt_int("whale-map", "ep", optarg, 1, 1 << 24, &o->ep)) return 2; break;
        case O_SPARES: if (whale_opt_int("whale-map", "spares", optarg, 0, 1 << 20, &o->spares)) return 2; break;
        case O_BENCH: if (whale_opt_int("whale-map", "bench", optarg, 1, 100000, &o->bench)) return 2; break;
        case O_ENV: if (whale_opt_int("whale-map", "env", optarg, 0, 1 << 30, &o->env_task)) return 2; break;
        case O_MAP: {
            enum whale_map_policy m;
            if (whale_map_policy_parse(optarg, &m)) {
                fprintf(stderr, "whale-map: --map=%s: expected topo or block\n", optarg);
                return 2;
            }
            o->policy = (int)m;
            break;
        }
        case O_GROUPS: o->groups = 1; break;
        case O_SUMMARY: o->summary = 1; break;
        case O_COMPARE: o->compare = 1; break;
        case O_RANKMAP: o->rankmap = 1; break;
        case O_SVG: o->svg = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("whale-map %s\n", WHALE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "whale-map: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    /* inside an allocation: the job's nodes and tasks */
    if (!o->nodes_expr && getenv("SLURM_JOB_NODELIST") && *getenv("SLURM_JOB_NODELIST")) {
        o->nodes_expr = getenv("SLURM_JOB_NODELIST");
        if (!o->tpn)
            o->tpn = getenv("SLURM_TASKS_PER_NODE");
    }
    if (!o->nodes_expr || !o->tpn || !o->tp) {
        fprintf(stderr, "whale-map: --nodes, --tasks-per-node and --tp are required (see --help)\n");
        return 2;
    }
    return MAP_GO;
}

/* Everything asked for after the layout: table, groups, comparison, rank
 * map, a task's environment, SVG. 0 or -1. */
static int print_outputs(const struct map_opts *o, const struct whale_conf *conf,
                         struct whale_map_input *in, const struct whale_layout *l,
                         struct whale_layout *blk, bool *have_blk)
{
    char *desc = whale_layout_describe(in, l, o->summary ? -1 : 0);
    if (!desc)
        return -1;
    if (o->summary) {
        /* header and cost lines only */
        char *nl = strchr(desc, '\n');
        char *cost = strstr(desc, "cost per step:");
        if (nl)
            fwrite(desc, 1, (size_t)(nl - desc + 1), stdout);
        if (cost)
            fputs(cost, stdout);
    } else {
        fputs(desc, stdout);
    }
    free(desc);
    if (o->groups)
        list_groups(in, l);
    if (o->compare && in->policy == WHALE_MAP_TOPO) {
        in->policy = WHALE_MAP_BLOCK;
        if (whale_map_compute(in, blk) == 0) {
            *have_blk = true;
            printf("compare: block order link time %.4g s, topo %.4g s (%.2fx); bytes over "
                   "spine+core: block %.4g GB, topo %.4g GB\n",
                   blk->cost.seconds, l->cost.seconds,
                   l->cost.seconds > 0 ? blk->cost.seconds / l->cost.seconds : 1.0,
                   (blk->cost.bytes[WHALE_LINK_SPINE] + blk->cost.bytes[WHALE_LINK_CORE]) / 1e9,
                   (l->cost.bytes[WHALE_LINK_SPINE] + l->cost.bytes[WHALE_LINK_CORE]) / 1e9);
        } else {
            printf("compare: block order is not possible here (see above)\n");
        }
        in->policy = WHALE_MAP_TOPO;
    }
    if (o->rankmap) {
        char *m = whale_rankmap_encode(l->task_of_rank, l->world);
        if (!m)
            return -1;
        printf("WHALE_RANKMAP=%s\n", m);
        free(m);
    }
    if (o->env_task >= 0) {
        struct whale_env_opts eo = { .conf_path = o->conf_path, .set_cuda = conf->set_cuda_visible_devices,
                                     .set_nics = conf->set_ucx_net_devices,
                                     .set_nccl = conf->set_nccl_env };
        if (whale_map_task_env(in, l, o->env_task, &eo, print_env, NULL))
            return -1;
    }
    if (o->svg) {
        FILE *f = whale_fopen_output(o->svg, whale_output_private());
        if (!f) {
            fprintf(stderr, "whale-map: --svg: cannot write %s: %s\n", o->svg,
                    whale_output_strerror(errno));
            return -1;
        }
        int src = map_svg_write(f, in, l);
        if (whale_output_close(f) || src) {
            fprintf(stderr, "whale-map: writing %s failed\n", o->svg);
            return -1;
        }
    }
    return 0;
}

/* Phase 1, resolve the site: --conf (else the installed whale.conf, else
 * built-in defaults), --topology over the config's, then the topology. */
static int load_site(struct map_opts *o, struct whale_conf **conf, struct whale_topo **topo)
{
    if (!o->conf_path && access(WHALE_CONF_DEFAULT_PATH, R_OK) == 0)
        o->conf_path = WHALE_CONF_DEFAULT_PATH;
    if (o->conf_path) {
        if (whale_conf_load(o->conf_path, conf))
            return -1;
    } else if (!(*conf = whale_conf_defaults())) {
        return -1;
    }
    if (o->topo_path) {
        free((*conf)->topology_file);
        (*conf)->topology_file = strdup(o->topo_path);
        (*conf)->topology_file_set = true;
    }
    return whale_conf_build_topo(*conf, getenv("SLURM_CONF"), topo) ? -1 : 0;
}

/* The nodes and their tasks, as Slurm would hand them out. */
struct map_nodes {
    char **nodes;
    int nnodes, *ntasks, *ids; /* ids: task ids in node order (cyclic), NULL for block */
};

static void map_nodes_free(struct map_nodes *n)
{
    for (int i = 0; i < n->nnodes; i++)
        free(n->nodes[i]);
    free(n->nodes);
    free(n->ntasks);
    free(n->ids);
}

/* Slurm's cyclic distribution: task ids round-robin over nodes that still
 * have room. */
static int cyclic_ids(struct map_nodes *n)
{
    int total = 0;
    for (int i = 0; i < n->nnodes; i++)
        total += n->ntasks[i];
    int *fill = calloc((size_t)n->nnodes, sizeof *fill), *off = malloc(((size_t)n->nnodes + 1) * sizeof *off);
    n->ids = malloc((size_t)total * sizeof *n->ids);
    if (!fill || !off || !n->ids) {
        free(fill);
        free(off);
        return -1;
    }
    off[0] = 0;
    for (int i = 0; i < n->nnodes; i++)
        off[i + 1] = off[i] + n->ntasks[i];
    for (int t = 0; t < total;)
        for (int i = 0; i < n->nnodes && t < total; i++)
            if (fill[i] < n->ntasks[i])
                n->ids[off[i] + fill[i]++] = t++;
    free(fill);
    free(off);
    return 0;
}

/* Phase 2, set up: --nodes, --tasks-per-node and --distribution into the
 * nodes and task ids (nodes unknown to the topology are added). 0, 1 (an
 * error already reported) or 2 (bad usage). */
static int resolve_nodes(const struct map_opts *o, struct whale_conf *conf, struct whale_topo *topo,
                         struct map_nodes *n)
{
    if (whale_hostlist_expand(o->nodes_expr, &n->nodes, &n->nnodes)) {
        fprintf(stderr, "whale-map: --nodes=%s: not a valid hostlist\n", o->nodes_expr);
        return 2;
    }
    n->ntasks = malloc((size_t)n->nnodes * sizeof *n->ntasks);
    if (!n->ntasks)
        return 1;
    if (strspn(o->tpn, "0123456789") == strlen(o->tpn)) {
        int v;
        if (whale_opt_int("whale-map", "tasks-per-node", o->tpn, 1, 1 << 16, &v))
            return 2;
        for (int i = 0; i < n->nnodes; i++)
            n->ntasks[i] = v;
    } else if (whale_map_parse_tasks_per_node(o->tpn, n->nnodes, n->ntasks)) {
        return 2;
    }
    for (int i = 0; i < n->nnodes; i++)
        if (whale_conf_topo_ensure_node(conf, topo, n->nodes[i]) < 0)
            return 1;
    if (!strcmp(o->dist, "cyclic") && cyclic_ids(n))
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    struct map_opts o;
    whale_log_init_from_env();
    int prc = parse_args(argc, argv, &o);
    if (prc != MAP_GO)
        return prc;
    int rc = 1;
    struct whale_conf *conf = NULL;
    struct whale_topo *topo = NULL;
    struct map_nodes n = { 0 };
    struct whale_layout l = { 0 }, blk = { 0 };
    bool have_l = false, have_blk = false;
    if (load_site(&o, &conf, &topo) || (rc = resolve_nodes(&o, conf, topo, &n)) != 0)
        goto out;
    rc = 1;
    struct whale_map_input in = {
        .grid = o.grid, .spares = o.spares,
        .policy = o.policy >= 0 ? (enum whale_map_policy)o.policy : conf->default_map,
        .nnodes = n.nnodes, .nodes = (const char *const *)n.nodes, .ntasks = n.ntasks,
        .task_ids = n.ids, .topo = topo,
    };
    /* Phase 3, run: what the plugin would refuse on this site is not drawn
     * either */
    if (whale_conf_check_degrees(conf, o.tp, o.pp, o.dp, o.spares))
        goto out;
    if (whale_map_compute(&in, &l))
        goto out;
    have_l = true;
    if (!o.dp && whale_conf_check_degrees(conf, 0, 0, l.dp, 0)) /* o.dp follows from the tasks */
        goto out;
    if (o.bench > 0 && run_bench(&in, o.bench))
        goto out;
    /* Phase 4, report */
    if (print_outputs(&o, conf, &in, &l, &blk, &have_blk))
        goto out;
    rc = 0;
out:
    if (have_l)
        whale_layout_free(&l);
    if (have_blk)
        whale_layout_free(&blk);
    map_nodes_free(&n);
    whale_topo_free(topo);
    whale_conf_free(conf);
    return rc;
}
