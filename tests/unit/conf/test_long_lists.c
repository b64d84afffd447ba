/* Long lists through the parsers the SPANK plugin runs as root: each case
 * feeds tens of thousands of names and checks the result. They used to be
 * O(n^2) (a linear search per name, a realloc per line); a fuzz input with
 * a 24,336-name Switches= list took 32 s under ASan. No timing is
 * asserted: meson's timeout is the only clock, and at O(n^2) these inputs
 * run for minutes under ASan. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/nameidx.h"
#include "whale/topo.h"

#include <slurm/slurm.h>

#define N 50000

#include "conf_test.h"

/* a text buffer that grows as lines are appended */
struct text {
    char *s;
    size_t len, cap;
};

static void add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        assert_true(k >= 0);
        if (t->s && t->len + (size_t)k < t->cap) {
            t->len += (size_t)k;
            return;
        }
        t->cap = t->cap ? t->cap * 2 : 1 << 16;
        t->s = realloc(t->s, t->cap);
        assert_non_null(t->s);
    }
}

/* Switches= and Nodes= of 50,000 names each, and a block of all nodes. */
static void test_topology_long_hostlists(void **st)
{
    (void)st;
    const char *text = "SwitchName=top Switches=s[0-49999]\n"
                       "SwitchName=s0 Nodes=n[0-49999]\n"
                       "BlockName=b0 Nodes=n[0-49999]\n";
    struct whale_topo *t = whale_topo_new();
    assert_int_equal(whale_topology_conf_parse_string(text, "topology.conf", t), 0);
    assert_int_equal(t->nswitches, N + 1);
    assert_int_equal(t->nnodes, N);
    int top = whale_topo_find_switch(t, "top");
    assert_int_equal(top, 0);
    int last = whale_topo_find_switch(t, "s49999");
    assert_int_equal(last, N);
    assert_int_equal(t->switches[last].parent, top);
    assert_int_equal(t->switches[top].level, 1);
    int n = whale_topo_find_node(t, "n49999");
    assert_int_equal(n, N - 1);
    assert_int_equal(t->nodes[n].leaf, whale_topo_find_switch(t, "s0"));
    assert_int_equal(t->domains[t->nodes[n].domain].nnodes, N);
    assert_int_equal(whale_topo_find_switch(t, "s50000"), -1);
    assert_int_equal(whale_topo_find_node(t, "n50000"), -1);
    whale_topo_free(t);
}

/* A chain of 20,000 switches, each the parent of the one before: levels
 * were computed by a walk up from every switch (O(depth) each). */
static void test_topology_deep_chain(void **st)
{
    (void)st;
    const int depth = 20000;
    struct text x = { 0 };
    add(&x, "SwitchName=c0 Nodes=leafnode\n");
    for (int i = 1; i < depth; i++)
        add(&x, "SwitchName=c%d Switches=c%d\n", i, i - 1);
    struct whale_topo *t = whale_topo_new();
    assert_int_equal(whale_topology_conf_parse_string(x.s, "topology.conf", t), 0);
    assert_int_equal(t->switches[whale_topo_find_switch(t, "c19999")].level, depth - 1);
    assert_int_equal(t->switches[whale_topo_find_switch(t, "c0")].level, 0);
    whale_topo_free(t);
    /* closing the chain into a cycle is still found and named */
    add(&x, "SwitchName=c0 Switches=c%d\n", depth - 1);
    t = whale_topo_new();
    assert_int_equal(whale_topology_conf_parse_string(x.s, "topology.conf", t), WHALE_ECONF);
    assert_non_null(strstr(last_err, "cycle through switch 'c0'"));
    whale_topo_free(t);
    free(x.s);
}

/* 50,000 GPUType, NVLinkDomain and NodeName lines; a duplicate at the end
 * is still refused with its line. */
static void test_whale_conf_many_lines(void **st)
{
    (void)st;
    struct text x = { 0 };
    for (int i = 0; i < N; i++)
        add(&x, "GPUType=g%d PeakTFLOPS=1\nNVLinkDomain=d%d Nodes=n%d\nNodeName=n%d GPUs=1 GPUType=g%d\n",
            i, i, i, i, i);
    struct whale_conf *c = NULL;
    assert_int_equal(whale_conf_parse_string(x.s, "whale.conf", &c), 0);
    assert_int_equal(c->ngpu_types, N);
    assert_int_equal(c->ndomains, N);
    assert_int_equal(c->nnodesets, N);
    assert_string_equal(c->domains[N - 1].name, "d49999");
    assert_string_equal(c->nodesets[N - 1].gpu_type, "g49999");
    struct whale_topo *t = NULL;
    assert_int_equal(whale_conf_build_topo(c, NULL, &t), 0);
    int k = whale_topo_find_node(t, "n49999");
    assert_true(k >= 0);
    assert_int_equal(t->nodes[k].gpu_type, whale_topo_find_gpu_type(t, "g49999"));
    assert_int_equal(t->nodes[k].domain, whale_topo_find_domain(t, "d49999"));
    whale_topo_free(t);
    whale_conf_free(c);

    size_t keep = x.len;
    add(&x, "NVLinkDomain=d7 Nodes=other\n");
    assert_int_not_equal(whale_conf_parse_string(x.s, "whale.conf", &c), 0);
    assert_non_null(strstr(last_err, "whale.conf:150001: NVLinkDomain=d7 is defined twice"));
    x.s[x.len = keep] = '\0';
    add(&x, "GPUType=g123 PeakTFLOPS=2\n");
    assert_int_not_equal(whale_conf_parse_string(x.s, "whale.conf", &c), 0);
    assert_non_null(strstr(last_err, "whale.conf:150001: GPUType=g123 is defined twice"));
    x.s[x.len = keep] = '\0';
    add(&x, "NodeName=z GPUType=nope\n");
    assert_int_not_equal(whale_conf_parse_string(x.s, "whale.conf", &c), 0);
    assert_non_null(strstr(last_err, "GPUType=nope is not defined"));
    free(x.s);
}

/* The price of a 50,000-node job against a 50,000-name NodeName line and
 * a later line overriding ten of them (the last line naming a node wins). */
static void test_price_many_nodes(void **st)
{
    (void)st;
    const char *text = "NodeName=n[0-49999] GPUs=8 PricePerNodeHour=2\n"
                       "NodeName=n[0-9] PricePerGPUHour=1\n";
    struct whale_conf *c = NULL;
    assert_int_equal(whale_conf_parse_string(text, "whale.conf", &c), 0);
    char **names = malloc((N + 1) * sizeof *names);
    assert_non_null(names);
    for (int i = 0; i <= N; i++) {
        char b[32];
        snprintf(b, sizeof b, "n%d", i); /* n50000 is on no line: unpriced */
        names[i] = strdup(b);
    }
    double usd = 0;
    int priced = 0;
    assert_int_equal(whale_conf_price_per_hour(c, (const char *const *)names, N + 1, &usd, &priced), 0);
    assert_int_equal(priced, N);
    /* 49,990 nodes at $2 a node and 10 at $1 per GPU of the second line */
    double expect = 49990 * 2.0 + 10 * (c->nodesets[1].gpus > 0 ? c->nodesets[1].gpus : 0);
    assert_true(usd == expect);
    for (int i = 0; i <= N; i++)
        free(names[i]);
    free(names);
    whale_conf_free(c);
}

/* What libslurm makes of expr in one piece, for comparison; -1 where it
 * refuses the expression. */
static int slurm_names(const char *expr, char ***out)
{
    hostlist_t hl = slurm_hostlist_create(expr);
    if (!hl)
        return -1;
    int n = 0;
    char *h;
    *out = malloc((size_t)slurm_hostlist_count(hl) * sizeof **out + 1);
    while ((h = slurm_hostlist_shift(hl)))
        (*out)[n++] = h;
    slurm_hostlist_destroy(hl);
    return n;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* whale_hostlist_expand hands libslurm one item or range at a time; the
 * names and their order must be what libslurm gives for the whole list. */
static void test_hostlist_same_as_slurm(void **st)
{
    (void)st;
    const char *exprs[] = {
        "node[1-3,7],x", "n[01-03,5],m", "a,b c\td", "n[3,1,2]", "r[1-2]n[3-4]",
        "gpu[001-004],cpu[1-2],gpu[009]", "x,,y", "n[7],n[7]",
        "n[01-03,5]x,m", "p[0-2]-s,q", /* libslurm 22.05 refuses a suffix */
        /* several brackets multiply: conf/hostlist.c expands the first
         * itself (range by range, through libslurm) */
        "gb[08-10]b[08-10]", "r[01-02,5]n[3-4,7]x", "a[1]b[2]c[3-4],d", "x[9-11]y[0-1]z",
        "r[8-10]-n[008-010,12]", "r[9-0011]n[1,00]", "r[01-1]s[00]t[099-101]", "r[1,1]n[2]",
    };
    for (size_t e = 0; e < sizeof exprs / sizeof *exprs; e++) {
        char **a, **b;
        int na, nb = slurm_names(exprs[e], &b);
        if (nb < 0) {
            assert_int_equal(whale_hostlist_expand(exprs[e], &a, &na), WHALE_EINVAL);
            continue;
        }
        assert_int_equal(whale_hostlist_expand(exprs[e], &a, &na), 0);
        if (na != nb)
            fail_msg("%s: %d names, libslurm %d", exprs[e], na, nb);
        for (int i = 0; i < na; i++)
            if (strcmp(a[i], b[i]))
                fail_msg("%s: name %d is %s, libslurm %s", exprs[e], i, a[i], b[i]);
        free_names(a, na);
        free_names(b, nb);
    }
    char **a;
    int na;
    assert_int_equal(whale_hostlist_expand("n[1-", &a, &na), WHALE_EINVAL);
    assert_int_equal(whale_hostlist_expand("n[0-65535],m[0-65535],o[0-65535],p[0-65535],"
                                           "q[0-65535],r[0-65535],s[0-65535],t[0-65535],"
                                           "u[0-65535],v[0-65535],w[0-65535],x[0-65535],"
                                           "y[0-65535],z[0-65535],k[0-65535],l[0-65535],j[0]",
                                           &a, &na), WHALE_ERANGE);
    /* fuzz finding: 18 bytes, a million names; refused before libslurm */
    assert_int_equal(whale_hostlist_expand("gb[08-1027]b[08-1027]", &a, &na), WHALE_ERANGE);
    /* 65536 one-host ranges: libslurm alone holds them all at once and is
     * O(n^2) (0.8 s plain, minutes under a sanitizer); walked one
     * first-bracket name at a time */
    assert_int_equal(whale_hostlist_expand("gb[0-65535]b[1]", &a, &na), 0);
    assert_int_equal(na, 65536);
    assert_string_equal(a[0], "gb0b1");
    assert_string_equal(a[65535], "gb65535b1");
    free_names(a, na);
}

/* 50,000 distinct names in a comma list, and 50,000 single numbers in one
 * bracket: libslurm alone is O(n^2) in the number of ranges. */
static void test_hostlist_long(void **st)
{
    (void)st;
    struct text x = { 0 }, y = { 0 };
    for (int i = 0; i < N; i++) {
        char nm[8];
        int k = 0;
        for (int v = i; k == 0 || v; v /= 26)
            nm[k++] = (char)('a' + v % 26); /* letters only: no two ranges merge */
        nm[k] = '\0';
        add(&x, "%sh%s", i ? "," : "", nm);
        add(&y, "%s%d", i ? "," : "n[", 2 * i);
    }
    add(&y, "]");
    char **a;
    int na;
    assert_int_equal(whale_hostlist_expand(x.s, &a, &na), 0);
    assert_int_equal(na, N);
    assert_string_equal(a[0], "ha");
    assert_string_equal(a[26], "hab");
    free_names(a, na);
    assert_int_equal(whale_hostlist_expand(y.s, &a, &na), 0);
    assert_int_equal(na, N);
    assert_string_equal(a[N - 1], "n99998");
    free_names(a, na);
    free(x.s);
    free(y.s);
}

/* Host names over 255 characters are refused from the text, before any
 * expansion: 65,536 names of a 16 KB prefix were a gigabyte through
 * libslurm (a fuzz input of four such lines ran past 40 s under ASan).
 * 255 itself is accepted, with the widest number of a bracket counted. */
static void test_hostlist_long_names(void **st)
{
    (void)st;
    char pre[300];
    memset(pre, 'a', sizeof pre);
    char expr[1024], text[1200];
    char **a;
    int na;
    /* 251 + "[1-9999]" -> names of up to 255 characters: fine */
    snprintf(expr, sizeof expr, "%.251s[1-9999]", pre);
    assert_int_equal(whale_hostlist_expand(expr, &a, &na), 0);
    assert_int_equal(na, 9999);
    assert_int_equal((int)strlen(a[na - 1]), 255);
    free_names(a, na);
    /* one digit wider: 256 */
    snprintf(expr, sizeof expr, "%.251s[1-10000]", pre);
    assert_int_equal(whale_hostlist_expand(expr, &a, &na), WHALE_ETOOLONG);
    assert_null(a);
    /* a number padded wider than its value still counts the padding; a
     * suffix after the brackets counts; a plain name counts */
    snprintf(expr, sizeof expr, "r[1-2]%.240sn[00000000000001]z", pre);
    assert_int_equal(whale_hostlist_expand(expr, &a, &na), WHALE_ETOOLONG);
    snprintf(expr, sizeof expr, "ok,%.256s", pre);
    assert_int_equal(whale_hostlist_expand(expr, &a, &na), WHALE_ETOOLONG);
    snprintf(expr, sizeof expr, "ok,%.255s", pre);
    assert_int_equal(whale_hostlist_expand(expr, &a, &na), 0);
    assert_int_equal(na, 2);
    free_names(a, na);

    /* numbers: 18 digits are fine, 19 are refused (strtoul saturates past
     * ULONG_MAX and libslurm walked such a range for ever) */
    assert_int_equal(whale_hostlist_expand("n[999999999999999998-999999999999999999]", &a, &na), 0);
    assert_int_equal(na, 2);
    assert_string_equal(a[1], "n999999999999999999");
    free_names(a, na);
    assert_int_equal(whale_hostlist_expand("n[1-0000000000000000002]", &a, &na), WHALE_EINVAL);
    assert_int_equal(whale_hostlist_expand("gb[77777777777777777777777777777777727]7[7]", &a, &na),
                     WHALE_EINVAL);

    /* whale.conf and topology.conf name the line, the key and the limit */
    snprintf(text, sizeof text, "NodeName=n[1-2] GPUs=8\nNodeName=%.251s[0-65535] GPUs=8\n", pre);
    expect_error(text, "whale.conf:2: NodeName=aaaa");
    assert_non_null(strstr(last_err, "longer than 255 characters"));
    snprintf(text, sizeof text, "SwitchName=s0 Nodes=n1,%.300s\n", pre);
    struct whale_topo *t = whale_topo_new();
    last_err[0] = '\0';
    assert_int_not_equal(whale_topology_conf_parse_string(text, "topology.conf", t), 0);
    assert_non_null(strstr(last_err, "topology.conf:1: Nodes="));
    assert_non_null(strstr(last_err, "longer than 255 characters"));
    whale_topo_free(t);
}

/* The map itself: 50,000 names in, each found, repointing, growth. */
static void test_nameidx(void **st)
{
    (void)st;
    struct whale_nameidx ix = { 0 };
    assert_int_equal(whale_nameidx_find(&ix, "x"), -1);
    char (*names)[16] = malloc(N * sizeof *names);
    assert_non_null(names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "h%d", i);
        assert_int_equal(whale_nameidx_add(&ix, names[i], i), 0);
    }
    assert_int_equal((int)ix.n, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(whale_nameidx_find(&ix, names[i]), i);
    assert_int_equal(whale_nameidx_find(&ix, "h50000"), -1);
    whale_nameidx_set(&ix, "h17", 99);
    assert_int_equal(whale_nameidx_find(&ix, "h17"), 99);
    whale_nameidx_free(&ix);
    assert_int_equal(whale_nameidx_find(&ix, "h1"), -1);
    free(names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_topology_long_hostlists, setup),
        cmocka_unit_test_setup(test_topology_deep_chain, setup),
        cmocka_unit_test_setup(test_whale_conf_many_lines, setup),
        cmocka_unit_test_setup(test_price_many_nodes, setup),
        cmocka_unit_test_setup(test_hostlist_same_as_slurm, setup),
        cmocka_unit_test_setup(test_hostlist_long, setup),
        cmocka_unit_test_setup(test_hostlist_long_names, setup),
        cmocka_unit_test_setup(test_nameidx, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
