/* The way back into a running step (member/el_join.c): a removed task slot
 * taken again as a spare (JOINED), DP grown back to the planned size from
 * free spares (GROWN) with the planned layout restored after a shrink, and
 * the join request check that keeps a stray process out (secret, step,
 * task, node, slot still in use), and the join file that publishes the
 * contact point and the secret (only a private regular file of ours is
 * read), and the peer table that travels with a join. Pure functions and files in a scratch directory: no processes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "member/el_internal.h"
#include "whale/error.h"

static int node_of[8];

/* 0 same node, 4 elsewhere */
static int cls(int a, int b, void *user)
{
    (void)user;
    return node_of[a] == node_of[b] ? 0 : 4;
}

static void base(struct el_state *s, int ntasks, int tp, int dp, const int *rank_of_task)
{
    memset(s, 0, sizeof *s); /* ep, cp: 0 reads as their default of 1 */
    s->ntasks = ntasks;
    s->tp = tp;
    s->pp = 1;
    s->dp = dp;
    s->world = tp * dp;
    s->rank_of_task = malloc(sizeof(int) * (size_t)ntasks);
    s->member = malloc((size_t)ntasks);
    for (int t = 0; t < ntasks; t++) {
        s->rank_of_task[t] = rank_of_task[t];
        s->member[t] = 1;
    }
}

/* TP 2 x DP 2 on 2 nodes (tasks 0,1 on node 0; 2,3 on node 1), no spare:
 * task 3 crashes, the step shrinks to DP 1, task 2 becomes a spare and
 * task 3's slot is left out. Its node comes back: a restarted task 3 joins
 * as a spare, and the two spares grow DP back to 2 with every task in its
 * planned place again. */
static void shrink_join_grow_restores_the_plan(void **state)
{
    (void)state;
    int rot[4] = { 0, 1, 2, 3 };
    node_of[0] = node_of[1] = 0;
    node_of[2] = node_of[3] = 1;
    struct el_state b, s1, s2, s3;
    base(&b, 4, 2, 2, rot);
    uint8_t gone[4] = { 0, 0, 0, 1 }, how[4] = { 0, 0, 0, WHALE_DETECT_CRASH };
    struct whale_membership_event ev;
    assert_int_equal(el_decide(&b, gone, how, cls, NULL, &s1, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_SHRUNK);
    assert_int_equal(s1.dp, 1);
    assert_int_equal(s1.member[3], 0);
    assert_int_equal(s1.rank_of_task[2], -1);
    /* below the plan, but one spare cannot fill a TP 2 replica */
    assert_int_equal(el_grow_count(&s1, 2), 0);
    assert_int_equal(el_decide_grow(&s1, 2, cls, NULL, &s2, &ev), WHALE_ENOFIT);

    int j = 3;
    assert_int_equal(el_decide_join(&s1, &j, 1, &s2, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_JOINED);
    assert_int_equal(ev.epoch, s1.epoch + 1);
    assert_int_equal(ev.njoined, 1);
    assert_int_equal(ev.joined_task[0], 3);
    assert_int_equal(s2.epoch, s1.epoch + 1);
    assert_int_equal(s2.member[3], 1);
    assert_int_equal(s2.rank_of_task[3], -1);
    assert_int_equal(s2.dp, 1); /* joining changes no rank */
    assert_int_equal(s2.rank_of_task[0], 0);
    assert_int_equal(s2.rank_of_task[1], 1);

    assert_int_equal(el_grow_count(&s2, 2), 1);
    assert_int_equal(el_decide_grow(&s2, 2, cls, NULL, &s3, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_GROWN);
    assert_int_equal(ev.old_grid.dp, 1);
    assert_int_equal(ev.dp, 2);
    assert_int_equal(ev.nadded, 2);
    assert_int_equal(ev.nfailed, 0);
    assert_int_equal(s3.dp, 2);
    assert_int_equal(s3.world, 4);
    assert_int_equal(s3.epoch, s2.epoch + 1);
    for (int t = 0; t < 4; t++) {
        assert_int_equal(s3.member[t], 1);
        assert_int_equal(s3.rank_of_task[t], rot[t]);
    }
    /* at the plan: nothing more to grow */
    assert_int_equal(el_grow_count(&s3, 2), 0);
    el_state_free(&b);
    el_state_free(&s1);
    el_state_free(&s2);
    el_state_free(&s3);
}

/* Only a removed slot can be taken again: a live member (working or
 * spare) or a task id outside the step is refused, nothing allocated. */
static void join_only_a_removed_slot(void **state)
{
    (void)state;
    int rot[3] = { 0, -1, -1 };
    struct el_state b, o;
    base(&b, 3, 1, 1, rot);
    b.member[2] = 0;
    struct whale_membership_event ev;
    int t = 0;
    assert_int_equal(el_decide_join(&b, &t, 1, &o, &ev), WHALE_ESTATE);
    assert_null(o.member);
    t = 1; /* a spare is a member */
    assert_int_equal(el_decide_join(&b, &t, 1, &o, &ev), WHALE_ESTATE);
    t = 3;
    assert_int_equal(el_decide_join(&b, &t, 1, &o, &ev), WHALE_ESTATE);
    t = -1;
    assert_int_equal(el_decide_join(&b, &t, 1, &o, &ev), WHALE_ESTATE);
    assert_int_equal(el_decide_join(&b, &t, 0, &o, &ev), WHALE_EINVAL);
    int two[2] = { 2, 2 }; /* named twice: joined once */
    assert_int_equal(el_decide_join(&b, two, 2, &o, &ev), 0);
    assert_int_equal(ev.njoined, 1);
    assert_int_equal(o.member[2], 1);
    el_state_free(&o);
    el_state_free(&b);
}

/* DP 1 of a planned 4, TP 1, two free spares: grows by the two replicas
 * it can fill (DP 3), each added rank to the spare nearest replica 0's
 * task (same node first), ties by task id; the kept rank stays rank 0. */
static void grow_partially_nearest_first(void **state)
{
    (void)state;
    int rot[5] = { -1, 0, -1, -1, -1 };
    node_of[0] = 0;
    node_of[1] = 1;
    node_of[2] = 2;
    node_of[3] = 1;
    node_of[4] = 3;
    struct el_state b, o;
    base(&b, 5, 1, 1, rot);
    b.member[0] = 0; /* removed earlier */
    b.member[2] = 0;
    assert_int_equal(el_grow_count(&b, 4), 2);
    assert_int_equal(el_grow_count(&b, 1), 0);
    struct whale_membership_event ev;
    assert_int_equal(el_decide_grow(&b, 4, cls, NULL, &o, &ev), 0);
    assert_int_equal(o.dp, 3);
    assert_int_equal(o.world, 3);
    assert_int_equal(o.rank_of_task[1], 0);
    assert_int_equal(o.rank_of_task[3], 1); /* same node as task 1 */
    assert_int_equal(o.rank_of_task[4], 2);
    assert_int_equal(o.rank_of_task[0], -1);
    assert_int_equal(o.member[0], 0);
    assert_int_equal(ev.nadded, 2);
    assert_int_equal(ev.added_rank[0], 1);
    assert_int_equal(ev.added_task[0], 3);
    assert_int_equal(ev.added_rank[1], 2);
    assert_int_equal(ev.added_task[1], 4);
    el_state_free(&o);
    /* expert parallelism fixes DP: never grown */
    b.ep = 2;
    assert_int_equal(el_grow_count(&b, 4), 0);
    assert_int_equal(el_decide_grow(&b, 4, cls, NULL, &o, &ev), WHALE_ENOFIT);
    el_state_free(&b);
}

/* Renumbering with TP 2 x PP 2: a kept replica's ranks follow
 * rank = ((pp * DP) + dp) * TP + tp for the new DP. */
static void grow_renumbers_megatron(void **state)
{
    (void)state;
    /* DP 1 of TP 2 x PP 2: tasks 0-3 ranks 0-3; spares 4-7 */
    int rot[8] = { 0, 1, 2, 3, -1, -1, -1, -1 };
    for (int t = 0; t < 8; t++)
        node_of[t] = t / 2;
    struct el_state b, o;
    base(&b, 8, 2, 1, rot);
    b.pp = 2;
    b.world = 4;
    struct whale_membership_event ev;
    assert_int_equal(el_decide_grow(&b, 2, cls, NULL, &o, &ev), 0);
    assert_int_equal(o.world, 8);
    /* (pp 0, dp 0) ranks 0,1; (pp 1, dp 0) ranks 4,5 */
    assert_int_equal(o.rank_of_task[0], 0);
    assert_int_equal(o.rank_of_task[1], 1);
    assert_int_equal(o.rank_of_task[2], 4);
    assert_int_equal(o.rank_of_task[3], 5);
    /* dp 1: ranks 2,3 (pp 0) and 6,7 (pp 1), all on other nodes: by task id */
    assert_int_equal(o.rank_of_task[4], 2);
    assert_int_equal(o.rank_of_task[5], 3);
    assert_int_equal(o.rank_of_task[6], 6);
    assert_int_equal(o.rank_of_task[7], 7);
    el_state_free(&o);
    el_state_free(&b);
}

/* The agreement's one call: joiners plus a grow in one decision (one
 * epoch), a join alone when the spares fill no replica, nothing when
 * nothing asks and nothing can grow. */
static void rejoin_is_one_decision(void **state)
{
    (void)state;
    /* after the shrink of shrink_join_grow_restores_the_plan */
    int rot[4] = { 0, 1, -1, -1 };
    node_of[0] = node_of[1] = 0;
    node_of[2] = node_of[3] = 1;
    struct el_state b, o;
    base(&b, 4, 2, 1, rot);
    b.epoch = 1;
    b.member[3] = 0;
    struct whale_membership_event ev;
    int j = 3;
    assert_int_equal(el_decide_rejoin(&b, &j, 1, 2, cls, NULL, &o, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_GROWN);
    assert_int_equal(ev.epoch, 2);
    assert_int_equal(o.epoch, 2);
    assert_int_equal(ev.njoined, 1);
    assert_int_equal(ev.joined_task[0], 3);
    assert_int_equal(o.dp, 2);
    for (int t = 0; t < 4; t++)
        assert_int_equal(o.rank_of_task[t], t);
    el_state_free(&o);
    /* planned DP 1 (nothing to grow back to): the join alone */
    assert_int_equal(el_decide_rejoin(&b, &j, 1, 1, cls, NULL, &o, &ev), 0);
    assert_int_equal(ev.kind, WHALE_RECOVERY_JOINED);
    assert_int_equal(o.dp, 1);
    assert_int_equal(o.member[3], 1);
    el_state_free(&o);
    /* nobody asks, one spare cannot fill TP 2: nothing to decide */
    assert_int_equal(el_decide_rejoin(&b, NULL, 0, 2, cls, NULL, &o, &ev), WHALE_ENOFIT);
    assert_null(o.member);
    /* a live member cannot "join" */
    j = 0;
    assert_int_equal(el_decide_rejoin(&b, &j, 1, 2, cls, NULL, &o, &ev), WHALE_ESTATE);
    el_state_free(&b);
}

static const char *nodes[4] = { "n0", "n0", "n1", "n1" };

static size_t request(uint8_t *buf, int task, const char *step, const char *node, uint8_t key)
{
    struct el_join_req rq;
    memset(&rq, 0, sizeof rq);
    rq.magic = EL_JOIN_MAGIC;
    rq.task = task;
    rq.ntasks = 4;
    rq.addr_len = 5;
    strncpy(rq.step_id, step, sizeof rq.step_id - 1);
    strncpy(rq.node, node, sizeof rq.node - 1);
    memset(rq.secret, key, sizeof rq.secret);
    memcpy(buf, &rq, sizeof rq);
    memcpy(buf + sizeof rq, "addr!", 5);
    return sizeof rq + 5;
}

/* Only the step's own restarted task gets in: the right secret, step,
 * task count, a removed slot, and the slot's own node. */
static void join_request_checked(void **state)
{
    (void)state;
    uint8_t member[4] = { 1, 1, 1, 0 };
    struct el_join_expect x = { .step_id = "77.0", .ntasks = 4, .node_of_task = nodes,
                                .member = member };
    memset(x.secret, 0xab, sizeof x.secret);
    uint8_t buf[sizeof(struct el_join_req) + 16];
    char why[256];
    struct el_join_req got;
    size_t len = request(buf, 3, "77.0", "n1", 0xab);
    assert_int_equal(el_join_check(buf, len, &x, &got, why, sizeof why), 0);
    assert_int_equal(got.task, 3);
    assert_int_equal(got.addr_len, 5);
    /* a wrong secret */
    len = request(buf, 3, "77.0", "n1", 0xac);
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "secret"));
    /* another step of the same job */
    len = request(buf, 3, "77.1", "n1", 0xab);
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "step"));
    /* the slot's node is n1 */
    len = request(buf, 3, "77.0", "n0", 0xab);
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_EINVAL);
    assert_non_null(strstr(why, "node"));
    /* a live member's slot */
    len = request(buf, 1, "77.0", "n0", 0xab);
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_ESTATE);
    /* out of range */
    len = request(buf, 4, "77.0", "n1", 0xab);
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_EINVAL);
    /* truncated, no address, not a join request */
    len = request(buf, 3, "77.0", "n1", 0xab);
    assert_int_equal(el_join_check(buf, 10, &x, NULL, why, sizeof why), WHALE_EDATA);
    assert_int_equal(el_join_check(buf, len - 1, &x, NULL, why, sizeof why), WHALE_EDATA);
    buf[0] ^= 1;
    assert_int_equal(el_join_check(buf, len, &x, NULL, why, sizeof why), WHALE_EDATA);
}

static void join_file_roundtrip_and_refusals(void **state)
{
    (void)state;
    char dir[] = "/tmp/whale-join-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[128], path[4096], buf[4096];
    snprintf(sub, sizeof sub, "%s/j", dir); /* created 0700 by the writer */
    uint8_t addr[300];
    for (int i = 0; i < 300; i++)
        addr[i] = (uint8_t)(i * 7);
    struct el_join_info w = { .step_id = "123.4", .ntasks = 4, .contact_task = 1,
                              .contact_node = "n0", .epoch = 2, .addr = addr, .addr_len = 300 };
    assert_int_equal(el_join_secret_new(w.secret), 0);
    assert_int_equal(el_join_file_write(sub, &w), 0);
    struct stat st;
    assert_int_equal(stat(sub, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(el_join_path(path, sizeof path, sub, "123.4"), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    struct el_join_info r;
    assert_int_equal(el_join_file_read(path, &r), 0);
    assert_string_equal(r.step_id, "123.4");
    assert_int_equal(r.ntasks, 4);
    assert_int_equal(r.contact_task, 1);
    assert_string_equal(r.contact_node, "n0");
    assert_int_equal(r.epoch, 2);
    assert_int_equal(r.addr_len, 300);
    assert_memory_equal(r.addr, addr, 300);
    assert_memory_equal(r.secret, w.secret, sizeof w.secret);
    el_join_info_free(&r);
    /* written again (a new contact): replaced, still private */
    w.contact_task = 2;
    assert_int_equal(el_join_file_write(sub, &w), 0);
    assert_int_equal(el_join_file_read(path, &r), 0);
    assert_int_equal(r.contact_task, 2);
    el_join_info_free(&r);
    /* readable by others: the secret may have leaked, refused */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(el_join_file_read(path, &r), WHALE_EINVAL);
    assert_null(r.addr);
    assert_int_equal(chmod(path, 0600), 0);
    /* a link planted under the name is not followed */
    char link[4200];
    snprintf(link, sizeof link, "%s/join-9.9.json", sub);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(el_join_file_read(link, &r), WHALE_EINVAL);
    /* malformed: short secret, contact out of range, not JSON */
    static const char *bad[] = {
        "{\"version\":1,\"step\":\"1.0\",\"ntasks\":2,\"contact_task\":0,\"contact_node\":\"n\","
        "\"epoch\":0,\"contact\":\"00ff\",\"secret\":\"abcd\"}",
        "{\"version\":1,\"step\":\"1.0\",\"ntasks\":2,\"contact_task\":2,\"contact_node\":\"n\","
        "\"epoch\":0,\"contact\":\"00ff\",\"secret\":\"%s\"}",
        "not json",
    };
    char sec[65];
    memset(sec, 'a', 64);
    sec[64] = '\0';
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/bad%d.json", sub, i);
        snprintf(buf, sizeof buf, bad[i], sec);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(buf, f);
        fclose(f);
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(el_join_file_read(path, &r), WHALE_EINVAL);
        unlink(path);
    }
    assert_int_equal(el_join_file_read("/nonexistent/join-1.0.json", &r), WHALE_ENOENT);
    /* a step id that would leave the directory */
    assert_int_equal(el_join_path(path, sizeof path, sub, "../x"), WHALE_EINVAL);
    assert_int_equal(el_join_path(path, sizeof path, sub, ""), WHALE_EINVAL);
    /* where it goes: WHALE_JOIN_DIR, else the default, else the home */
    assert_int_equal(el_join_dir(buf, sizeof buf, "/a", "/b"), 0);
    assert_string_equal(buf, "/a");
    assert_int_equal(el_join_dir(buf, sizeof buf, "", "/b"), 0);
    assert_string_equal(buf, "/b");
    setenv("HOME", "/h", 1);
    assert_int_equal(el_join_dir(buf, sizeof buf, NULL, NULL), 0);
    assert_string_equal(buf, "/h/.whale/join");
    unlink(link);
    assert_int_equal(el_join_path(path, sizeof path, sub, "123.4"), 0);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

/* The peer table a joiner gets (every member's node, address, process id)
 * and the survivors get about it: exact round trip; every truncation,
 * a task out of range, more entries than allowed and trailing bytes are
 * refused. */
static void peer_table_roundtrip(void **state)
{
    (void)state;
    uint8_t a0[10], a2[3000], pid0[16], pid2[16];
    memset(a0, 1, sizeof a0);
    memset(a2, 2, sizeof a2);
    memset(pid0, 3, sizeof pid0);
    memset(pid2, 4, sizeof pid2);
    struct el_peer in[3] = {
        { 0, "node0", a0, sizeof a0, pid0, sizeof pid0 },
        { 1, "", NULL, 0, NULL, 0 }, /* a removed slot: no address */
        { 2, "node-two", a2, sizeof a2, pid2, sizeof pid2 },
    };
    size_t len = el_peers_size(3, in);
    uint8_t *buf = malloc(len + 1);
    assert_int_equal(el_peers_put(buf, 3, in), len);
    struct el_peer out[4];
    char names[4][64];
    int k = -1;
    assert_int_equal(el_peers_get(buf, len, 3, 4, out, names, &k), 0);
    assert_int_equal(k, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].task, in[i].task);
        assert_string_equal(out[i].node, in[i].node);
        assert_int_equal(out[i].addr_len, in[i].addr_len);
        assert_int_equal(out[i].proc_len, in[i].proc_len);
        if (in[i].addr_len)
            assert_memory_equal(out[i].addr, in[i].addr, in[i].addr_len);
        if (in[i].proc_len)
            assert_memory_equal(out[i].proc, in[i].proc, in[i].proc_len);
    }
    for (size_t cut = 0; cut < len; cut += cut < 64 ? 1 : 97)
        assert_int_equal(el_peers_get(buf, cut, 3, 4, out, names, &k), WHALE_EDATA);
    buf[len] = 0;
    assert_int_equal(el_peers_get(buf, len + 1, 3, 4, out, names, &k), WHALE_EDATA);
    assert_int_equal(el_peers_get(buf, len, 2, 4, out, names, &k), WHALE_EDATA); /* task 2 of 2 */
    assert_int_equal(el_peers_get(buf, len, 3, 2, out, names, &k), WHALE_EDATA); /* 3 > max */
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shrink_join_grow_restores_the_plan),
        cmocka_unit_test(join_only_a_removed_slot),
        cmocka_unit_test(grow_partially_nearest_first),
        cmocka_unit_test(grow_renumbers_megatron),
        cmocka_unit_test(rejoin_is_one_decision),
        cmocka_unit_test(join_request_checked),
        cmocka_unit_test(join_file_roundtrip_and_refusals),
        cmocka_unit_test(peer_table_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
