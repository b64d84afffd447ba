/* The way back into a running step, transport side (the pure rules are in
 * el_join.c, the join file in el_joinfile.c).
 *
 * Members: the lowest member writes the join file (its worker address, the
 * step's secret) at the start and whenever the lowest member changes; a
 * join request that reaches the coordinator (the lowest live member) and
 * passes el_join_check is remembered, and at its next step boundary
 * (whale_elastic_check) the coordinator tells everyone (a notice with
 * EL_F_CHANGE) to agree, as after a failure. With nothing
 * failed the decision is JOINED (the slot a member again, a spare); the
 * members get the joiner's peer entry with it and make a new endpoint to
 * it, the joiner gets every member's entry and the cost model. Once JOINED
 * leaves enough spares for a whole DP replica and the step runs below its
 * planned DP, the coordinator starts one more agreement at its next step
 * boundary: GROWN.
 *
 * Joiner (WHALE_JOIN, whale_init's join hook): its contract (WHALE_NTASKS,
 * WHALE_TASK_ID, degrees) says which slot it takes; it reads the join file,
 * sends its request to the contact task and resends it every second
 * (re-reading the file: the contact may change) until the decision that
 * takes it in arrives, then builds the endpoints, the detector and the
 * groups of that epoch; whale_init closes with the members' barrier. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/boot.h"
#include "comm/comm_internal.h"
#include "member/el_internal.h"
#include "whale/env.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

#define JOIN_RESEND_S 1.0

/* Slurm "JOBID.STEPID" of the running step, else the PMIx namespace
 * (whale-run's run), else "local". A joiner names the step in WHALE_JOIN
 * (its own srun step has another id); "1" means the one it runs in. */
static void step_id(char *buf, size_t len, bool joining)
{
    const char *j = whale_knob_getenv(WHALE_ENV_JOIN), *job = getenv("SLURM_JOB_ID"),
               *st = getenv("SLURM_STEP_ID"), *ns = getenv("PMIX_NAMESPACE");
    if (joining && j && strcmp(j, "1") != 0)
        snprintf(buf, len, "%s", j);
    else if (job && *job && st && *st)
        snprintf(buf, len, "%s.%s", job, st);
    else if (ns && *ns)
        snprintf(buf, len, "%s", ns);
    else
        snprintf(buf, len, "local");
    /* a PMIx namespace may hold characters a file name should not */
    for (char *p = buf; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_'))
            *p = '_';
}

static int join_path(whale_ctx *ctx, char **out)
{
    char dir[4096], path[4200];
    int rc = el_join_dir(dir, sizeof dir, whale_knob_getenv("WHALE_JOIN_DIR"), NULL);
    if (!rc)
        rc = el_join_path(path, sizeof path, dir, ctx->el ? ctx->el->step_id : "");
    if (rc)
        return rc;
    *out = strdup(path);
    return *out ? 0 : WHALE_ENOMEM;
}

/* This task is the contact now: (re)write the join file with its address,
 * keeping the step's secret when the file has one. */
static void publish(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    int me = ctx->boot.task;
    if (!el->join_path || !ctx->peer_addr || !ctx->peer_addr[me])
        return;
    struct el_join_info ji = { 0 }, old;
    bool have = access(el->join_path, F_OK) == 0 && el_join_file_read(el->join_path, &old) == 0;
    if (have) {
        memcpy(ji.secret, old.secret, sizeof ji.secret);
        el_join_info_free(&old);
    } else if (el_join_secret_new(ji.secret)) {
        return;
    }
    snprintf(ji.step_id, sizeof ji.step_id, "%s", el->step_id);
    ji.ntasks = ctx->boot.ntasks;
    ji.contact_task = me;
    snprintf(ji.contact_node, sizeof ji.contact_node, "%s",
             ctx->boot.node_names[ctx->boot.node_of_task[me]]);
    ji.epoch = el->st.epoch;
    ji.addr = ctx->peer_addr[me];
    ji.addr_len = ctx->peer_alen[me];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", el->join_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    if (el_join_file_write(slash ? dir : ".", &ji) == 0) {
        el->join_wrote = true;
        whale_debug("elastic: join file %s: contact task %d", el->join_path, me);
    } else {
        whale_warn("elastic: no join file: a restarted task cannot rejoin this step");
    }
}

void el_join_setup(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    step_id(el->step_id, sizeof el->step_id, false);
    if (join_path(ctx, &el->join_path)) {
        el->join_path = NULL;
        return;
    }
    el->join_contact = 0;
    if (ctx->boot.task == 0)
        publish(ctx);
}

void el_join_fini(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    /* the step is over for this task: nobody joins through it any more */
    if (el->join_wrote && el->join_contact == ctx->boot.task && el->join_path)
        unlink(el->join_path);
    free(el->join_path);
    free(el->join_addr);
    free(el->join_ack);
    el->join_path = NULL;
    el->join_addr = NULL;
    el->join_ack = NULL;
}

static int lowest_live(whale_ctx *ctx)
{
    for (int t = 0; t < ctx->boot.ntasks; t++)
        if (ctx->el->st.member[t] && !ctx->dead[t])
            return t;
    return -1;
}

void el_join_on_request(whale_ctx *ctx, const uint8_t *m, size_t cap)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks;
    struct el_join_req rq;
    if (cap < sizeof rq)
        return;
    memcpy(&rq, m, sizeof rq);
    if (rq.addr_len > EL_JOIN_ADDR_MAX || sizeof rq + rq.addr_len > cap)
        return;
    size_t len = sizeof rq + rq.addr_len;
    /* one at a time, outside an agreement, by the coordinator: the joiner
     * resends until one of them takes it */
    if (el->join_task >= 0 || el->recovering || lowest_live(ctx) != ctx->boot.task ||
        !el->join_path) {
        whale_debug("elastic: join request for task %d left for later", rq.task);
        return;
    }
    struct el_join_info ji;
    if (el_join_file_read(el->join_path, &ji))
        return;
    const char **names = calloc((size_t)n, sizeof *names);
    if (!names) {
        el_join_info_free(&ji);
        return;
    }
    for (int t = 0; t < n; t++)
        names[t] = ctx->boot.node_names[ctx->boot.node_of_task[t]];
    struct el_join_expect x = { .step_id = el->step_id, .ntasks = n,
                                .node_of_task = (const char *const *)names,
                                .member = el->st.member };
    memcpy(x.secret, ji.secret, sizeof x.secret);
    el_join_info_free(&ji);
    char why[256];
    int rc = el_join_check(m, len, &x, &rq, why, sizeof why);
    free(names);
    if (rc == WHALE_ESTATE) {
        /* the restarted process is quicker than the detector here */
        whale_debug("elastic: %s: later", why);
        return;
    }
    if (rc) {
        whale_warn("elastic: refused %s", why);
        return;
    }
    free(el->join_addr);
    if (!(el->join_addr = malloc(rq.addr_len)))
        return;
    memcpy(el->join_addr, m + sizeof rq, rq.addr_len);
    el->join_alen = rq.addr_len;
    el->join_pid = rq.pid;
    el->join_start = rq.start;
    snprintf(el->join_node, sizeof el->join_node, "%s", rq.node);
    el->join_task = rq.task;
    whale_info("elastic: task %d on %s (pid %lld) asks to rejoin the step: agreeing", rq.task,
               rq.node, (long long)rq.pid);
    /* agreed at this task's next step boundary (whale_elastic_check), not
     * now: the ranks may still be restoring after the last agreement */
    el->boundary_due = true;
}

/* Peer entries: the joiners only (members), or every task (joiner, with
 * the cost model after them). */
static uint8_t *peer_table(whale_ctx *ctx, const struct el_state *ns, bool all, size_t *len)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks, k = 0;
    struct el_peer *p = calloc((size_t)n, sizeof *p);
    struct comm_proc_id jp = { el->join_pid, el->join_start };
    if (!p)
        return NULL;
    for (int t = 0; t < n; t++) {
        bool joined = t == el->join_task;
        if (!all && !joined)
            continue;
        bool live = ns->member[t];
        p[k++] = (struct el_peer){
            .task = t,
            .node = ctx->boot.node_names[ctx->boot.node_of_task[t]],
            .addr = !live ? NULL : joined ? el->join_addr : ctx->peer_addr[t],
            .addr_len = !live ? 0 : joined ? el->join_alen : ctx->peer_alen[t],
            .proc = joined ? (const void *)&jp : (const void *)&ctx->procs[t],
            .proc_len = sizeof(struct comm_proc_id),
        };
    }
    size_t pl = el_peers_size(k, p), extra = all ? sizeof ctx->link : 0;
    uint8_t *out = malloc(sizeof(uint32_t) + pl + extra);
    if (out) {
        uint32_t p32 = (uint32_t)pl;
        memcpy(out, &p32, sizeof p32);
        el_peers_put(out + sizeof p32, k, p);
        if (all)
            memcpy(out + sizeof p32 + pl, ctx->link, sizeof ctx->link);
        *len = sizeof p32 + pl + extra;
    }
    free(p);
    return out;
}

bool el_join_decide(whale_ctx *ctx, el_class_fn cls, struct el_state *ns,
                    struct whale_membership_event *ev, uint8_t **extra, size_t *extra_len)
{
    struct comm_elastic *el = ctx->el;
    const struct el_state *b = &el->st;
    int jt = el->join_task, rc;
    *extra = NULL;
    *extra_len = 0;
    if (jt >= 0 && !b->member[jt])
        rc = el_decide_join(b, &jt, 1, ns, ev);
    else if (el_grow_count(b, el->planned_dp) > 0)
        rc = el_decide_grow(b, el->planned_dp, cls, ctx, ns, ev);
    else
        return false;
    if (rc) {
        el->join_task = -1;
        return false;
    }
    if (ev->njoined && !(*extra = peer_table(ctx, ns, false, extra_len))) {
        el_state_free(ns);
        return false;
    }
    return true;
}

void el_join_ack(whale_ctx *ctx, const uint8_t *m, size_t base)
{
    struct comm_elastic *el = ctx->el;
    struct el_state ns;
    struct el_hdr h;
    memcpy(&h, m, sizeof h);
    if (el_get_state(m + sizeof h, base - sizeof h, ctx->boot.ntasks, h.epoch, &ns))
        return;
    size_t tl = 0;
    uint8_t *t = peer_table(ctx, &ns, true, &tl);
    el_state_free(&ns);
    uint8_t *a = t ? malloc(base + tl) : NULL;
    if (!a) {
        free(t);
        return;
    }
    memcpy(a, m, base);
    h.counter = tl;
    memcpy(a, &h, sizeof h);
    memcpy(a + base, t, tl);
    free(t);
    free(el->join_ack);
    el->join_ack = a;
    el->join_ack_len = base + tl;
    el->join_ack_to = el->join_task;
}

/* A task taken in: its new process is alive, nothing of the old counts. */
static void fresh(whale_ctx *ctx, int t)
{
    struct comm_elastic *el = ctx->el;
    double now = el_now();
    ctx->dead[t] = false;
    el->how[t] = 0;
    el->lat[t] = 0;
    el->hard[t] = false;
    el->gone_at[t] = 0;
    el->last_heard[t] = now;
    el->counter[t] = 0;
    el->counter_at[t] = now;
    el->hb_seen[t] = false;
    el->done_from[t] = 0;
    el->prop[t].valid = false;
    mp_arrival_init(&el->arr[t], now, el->hb_interval);
}

int el_join_apply(whale_ctx *ctx, const struct el_state *ns, const uint8_t *extra, size_t len,
                  int decider)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks, me = ctx->boot.task;
    bool any = false;
    for (int t = 0; t < n; t++)
        any |= ns->member[t] && !el->st.member[t];
    if (any) {
        uint32_t pl;
        struct el_peer *p = calloc((size_t)n, sizeof *p);
        char (*names)[64] = calloc((size_t)n, sizeof *names);
        int k = 0, rc = WHALE_EDATA;
        if (p && names && len >= sizeof pl && (memcpy(&pl, extra, sizeof pl), pl <= len - sizeof pl))
            rc = el_peers_get(extra + sizeof pl, pl, n, n, p, names, &k);
        for (int i = 0; !rc && i < k; i++) {
            int t = p[i].task;
            if (!ns->member[t] || el->st.member[t] || !p[i].addr_len ||
                p[i].proc_len != sizeof(struct comm_proc_id))
                continue;
            void *a = malloc(p[i].addr_len);
            if (!a) {
                rc = WHALE_ENOMEM;
                break;
            }
            memcpy(a, p[i].addr, p[i].addr_len);
            free(ctx->peer_addr[t]);
            ctx->peer_addr[t] = a;
            ctx->peer_alen[t] = p[i].addr_len;
            memcpy(&ctx->procs[t], p[i].proc, sizeof ctx->procs[t]);
            if ((rc = comm_ucx_ep_replace(ctx, t, a)))
                break;
            fresh(ctx, t);
            el->joined_epoch[t] = ns->epoch;
            whale_debug("elastic: task %d rejoined: new endpoint", t);
        }
        free(p);
        free(names);
        if (rc) {
            whale_error("elastic: taking in the joined task(s) failed: %s", whale_strerror(rc));
            return rc;
        }
    }
    if (decider == me && el->join_ack && el->join_ack_to >= 0) {
        el_send_force(ctx, el->join_ack_to, el->join_ack, el->join_ack_len);
        free(el->join_ack);
        el->join_ack = NULL;
        el->join_ack_to = -1;
    }
    if (any)
        el->join_task = -1;
    /* the lowest member is the contact; a new one rewrites the file */
    int low = -1;
    for (int t = 0; t < n && low < 0; t++)
        if (ns->member[t])
            low = t;
    if (low == me && el->join_contact != me && el->join_path)
        publish(ctx);
    el->join_contact = low;
    /* spares enough for a replica and the step below plan: grow when idle */
    if (low == me && el_grow_count(ns, el->planned_dp) > 0)
        el->boundary_due = true;
    return 0;
}

/* ---- the joiner ---------------------------------------------------------- */

struct op {
    volatile int done;
    ucs_status_t st;
    size_t len;
};

static void send_cb(void *req, ucs_status_t st, void *user)
{
    (void)req;
    struct op *o = user;
    o->st = st;
    o->done = 1;
}

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    struct op *o = user;
    o->st = st;
    o->len = st == UCS_OK ? info->length : 0;
    o->done = 1;
}

static void wait_op(whale_ctx *ctx, void *r, struct op *o, double until)
{
    if (r == NULL) {
        o->done = 1;
        o->st = UCS_OK;
        return;
    }
    if (UCS_PTR_IS_ERR(r)) {
        o->done = 1;
        o->st = UCS_PTR_STATUS(r);
        return;
    }
    while (!o->done && el_now() < until)
        ucp_worker_progress(ctx->worker);
    if (!o->done) {
        ucp_request_cancel(ctx->worker, r);
        while (!o->done)
            ucp_worker_progress(ctx->worker);
    }
    ucp_request_free(r);
}

/* The decision that takes this task in (a copy, *len bytes), or NULL. */
static uint8_t *ask(whale_ctx *ctx, const char *path, const uint8_t *req, size_t rlen,
                    uint8_t *buf, size_t cap, size_t *len, int *contact)
{
    int n = ctx->boot.ntasks, me = ctx->boot.task;
    struct el_join_info ji;
    if (el_join_file_read(path, &ji))
        return NULL;
    if (ji.ntasks != n || ji.contact_task == me) {
        whale_error("elastic: join file %s is for a step of %d tasks with contact task %d; this "
                    "task is %d of %d", path, ji.ntasks, ji.contact_task, me, n);
        el_join_info_free(&ji);
        return NULL;
    }
    if (ji.contact_task != *contact) {
        if (comm_ucx_ep_replace(ctx, ji.contact_task, ji.addr)) {
            el_join_info_free(&ji);
            return NULL;
        }
        *contact = ji.contact_task;
    }
    uint8_t *m = malloc(rlen);
    if (!m) {
        el_join_info_free(&ji);
        return NULL;
    }
    memcpy(m, req, rlen);
    memcpy(((struct el_join_req *)m)->secret, ji.secret, sizeof ji.secret);
    el_join_info_free(&ji);
    struct op so = { 0 };
    ucp_request_param_t sp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = send_cb, .user_data = &so };
    double until = el_now() + JOIN_RESEND_S;
    wait_op(ctx, ucp_tag_send_nbx(ctx->eps[*contact], m, rlen, comm_tag_p2p(EL_GID, me, 0), &sp),
            &so, until);
    free(m);
    /* answers until the resend time: only the decision that takes us in */
    while (el_now() < until) {
        struct op ro = { 0 };
        ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                   .cb.recv = recv_cb, .user_data = &ro };
        wait_op(ctx, ucp_tag_recv_nbx(ctx->worker, buf, cap, comm_tag_p2p(EL_GID, 0, 0),
                                      0xffff000000000000ull, &rp), &ro, until);
        if (ro.st != UCS_OK)
            break;
        struct el_hdr h;
        memcpy(&h, buf, sizeof h);
        size_t base = el_msg_size(EL_DECIDE, n);
        if (h.magic != EL_MAGIC || h.type != EL_DECIDE || h.ntasks != (uint32_t)n ||
            h.counter > cap - base)
            continue;
        *len = base + (size_t)h.counter;
        uint8_t *c = malloc(*len);
        if (c)
            memcpy(c, buf, *len);
        return c;
    }
    return NULL;
}

/* WHALE_JOIN=1 names no step: the join file of the step this process runs
 * in when there is one, else the only one in the directory (under Slurm:
 * of this job; a restarted task runs in a step of its own). 0, or
 * WHALE_ENOENT while there is none (the members may not have written it
 * yet), WHALE_EINVAL when several would fit. */
static int find_join_file(const char *dir, char *path, size_t len, char *sid, size_t sidlen)
{
    if (access(path, F_OK) == 0)
        return 0;
    const char *j = whale_knob_getenv(WHALE_ENV_JOIN), *job = getenv("SLURM_JOB_ID");
    if (j && strcmp(j, "1") != 0)
        return WHALE_ENOENT; /* named: that one */
    char pre[96];
    snprintf(pre, sizeof pre, "join-%s%s", job && *job ? job : "", job && *job ? "." : "");
    DIR *d = opendir(dir);
    if (!d)
        return WHALE_ENOENT;
    int found = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, pre, strlen(pre)) || l < 11 || strcmp(de->d_name + l - 5, ".json"))
            continue;
        if (found++)
            break;
        snprintf(sid, sidlen, "%.*s", (int)(l - 10), de->d_name + 5);
    }
    closedir(d);
    if (found > 1) {
        whale_error("elastic: several join files in %s: name the step in %s=JOBID.STEPID", dir,
                    WHALE_ENV_JOIN);
        return WHALE_EINVAL;
    }
    return found ? el_join_path(path, len, dir, sid) : WHALE_ENOENT;
}

/* The boot fields of a state (as apply() sets them for a member). */
static int take_state(whale_ctx *ctx, const struct el_state *ns)
{
    struct boot *b = &ctx->boot;
    int n = b->ntasks, me = b->task;
    int *tor = malloc(sizeof(int) * (size_t)(ns->world > 0 ? ns->world : 1));
    if (!tor)
        return WHALE_ENOMEM;
    for (int r = 0; r < ns->world; r++)
        tor[r] = -1;
    for (int t = 0; t < n; t++)
        if (ns->member[t] && ns->rank_of_task[t] >= 0)
            tor[ns->rank_of_task[t]] = t;
    free(b->task_of_rank);
    b->task_of_rank = tor;
    memcpy(b->rank_of_task, ns->rank_of_task, sizeof(int) * (size_t)n);
    b->world = ns->world;
    b->grid = ns->grid;
    b->rank = ns->rank_of_task[me];
    b->spare = b->rank < 0;
    if (b->rank >= 0) {
        struct whale_coords c;
        whale_grid_coords(&b->grid, b->rank, &c);
        b->tp_rank = c.tp;
        b->dp_rank = c.dp;
        b->pp_rank = c.pp;
    } else {
        b->tp_rank = b->dp_rank = b->pp_rank = -1;
    }
    whale_log_set_rank(b->rank);
    return 0;
}

int el_join_boot(whale_ctx *ctx)
{
    struct boot *b = &ctx->boot;
    int n = b->ntasks, me = b->task, rc;
    char node[64], sid[EL_JOIN_ID_MAX];
    step_id(sid, sizeof sid, true);
    if ((rc = boot_node_name(node, sizeof node)))
        return rc;
    ucp_address_t *wa = NULL;
    size_t wl = 0;
    if (ucp_worker_get_address(ctx->worker, &wa, &wl) != UCS_OK || wl > EL_JOIN_ADDR_MAX) {
        whale_error("elastic: join: no worker address");
        return WHALE_EUCX;
    }
    size_t rlen = sizeof(struct el_join_req) + wl;
    size_t cap = 65536 + (size_t)n * (EL_JOIN_ADDR_MAX + 256);
    uint8_t *req = calloc(1, rlen), *buf = malloc(cap), *dec = NULL;
    void **addrs = calloc((size_t)n, sizeof *addrs);
    char *path = NULL, dir[4096], pbuf[4200];
    struct el_peer *p = calloc((size_t)n, sizeof *p);
    char (*names)[64] = calloc((size_t)n, sizeof *names);
    char **nameptr = calloc((size_t)n, sizeof *nameptr);
    struct el_state ns = { 0 };
    size_t dlen = 0;
    if (!req || !buf || !addrs || !p || !names || !nameptr) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    struct el_join_req *rq = (struct el_join_req *)req;
    struct comm_proc_id self = comm_proc_self();
    rq->magic = EL_JOIN_MAGIC;
    rq->task = me;
    rq->ntasks = n;
    rq->addr_len = (uint32_t)wl;
    snprintf(rq->step_id, sizeof rq->step_id, "%s", sid);
    snprintf(rq->node, sizeof rq->node, "%s", node);
    rq->pid = self.pid;
    rq->start = self.start;
    memcpy(req + sizeof *rq, wa, wl);
    if ((rc = el_join_dir(dir, sizeof dir, whale_knob_getenv("WHALE_JOIN_DIR"), NULL)) ||
        (rc = el_join_path(pbuf, sizeof pbuf, dir, sid)))
        goto out;
    path = pbuf;
    /* the arrays of the endpoints; the contact's first */
    if ((rc = comm_ucx_connect_peers(ctx, addrs)))
        goto out;
    ctx->dead = calloc((size_t)n, sizeof(bool));
    ctx->remote_refs = calloc((size_t)n, sizeof(int));
    ctx->procs = calloc((size_t)n, sizeof *ctx->procs);
    ctx->peer_addr = calloc((size_t)n, sizeof *ctx->peer_addr);
    ctx->peer_alen = calloc((size_t)n, sizeof *ctx->peer_alen);
    if (!ctx->dead || !ctx->remote_refs || !ctx->procs || !ctx->peer_addr || !ctx->peer_alen) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    double t0 = el_now(), limit = 60.0 + 4 * ctx->peer_timeout;
    int contact = -1;
    while ((rc = find_join_file(dir, pbuf, sizeof pbuf, sid, sizeof sid)) == WHALE_ENOENT) {
        if (el_now() - t0 > limit) {
            whale_error("elastic: task %d: no join file %s within %.0f s (WHALE_JOIN_DIR)", me,
                        pbuf, limit);
            rc = WHALE_ETIMEDOUT;
            goto out;
        }
        usleep(200000);
    }
    if (rc)
        goto out;
    snprintf(rq->step_id, sizeof rq->step_id, "%s", sid);
    whale_info("elastic: task %d on %s: joining step %s through %s", me, node, sid, path);
    while (!(dec = ask(ctx, path, req, rlen, buf, cap, &dlen, &contact))) {
        if (el_now() - t0 > limit) {
            whale_error("elastic: task %d: no decision took this task into step %s within %.0f s",
                        me, sid, limit);
            rc = WHALE_ETIMEDOUT;
            goto out;
        }
    }
    /* the decision, the peer table, the cost model */
    struct el_hdr h;
    memcpy(&h, dec, sizeof h);
    size_t base = el_msg_size(EL_DECIDE, n), pl32;
    struct whale_membership_event ev;
    uint32_t pl;
    int k = 0;
    if (el_get_state(dec + sizeof h, base - sizeof h, n, h.epoch, &ns) ||
        dlen < base + sizeof pl) {
        rc = WHALE_EDATA;
        goto out;
    }
    memcpy(&ev, dec + base - sizeof ev, sizeof ev);
    memcpy(&pl, dec + base, sizeof pl);
    pl32 = pl;
    if (!ns.member[me] || pl32 > dlen - base - sizeof pl ||
        dlen - base - sizeof pl - pl32 != sizeof ctx->link ||
        el_peers_get(dec + base + sizeof pl, pl32, n, n, p, names, &k) || k != n) {
        whale_error("elastic: task %d: malformed decision from task %d", me, h.task);
        rc = WHALE_EDATA;
        goto out;
    }
    memcpy(ctx->link, dec + base + sizeof pl + pl32, sizeof ctx->link);
    for (int i = 0; i < k; i++) {
        int t = p[i].task;
        nameptr[t] = names[i];
        if (p[i].proc_len == sizeof(struct comm_proc_id))
            memcpy(&ctx->procs[t], p[i].proc, sizeof ctx->procs[t]);
        if (t == me) {
            ctx->procs[t] = self;
            if ((ctx->peer_addr[t] = malloc(wl)))
                memcpy(ctx->peer_addr[t], wa, wl), ctx->peer_alen[t] = wl;
            continue;
        }
        ctx->dead[t] = !ns.member[t];
        if (!p[i].addr_len)
            continue;
        if (!(ctx->peer_addr[t] = malloc(p[i].addr_len))) {
            rc = WHALE_ENOMEM;
            goto out;
        }
        memcpy(ctx->peer_addr[t], p[i].addr, p[i].addr_len);
        ctx->peer_alen[t] = p[i].addr_len;
        if (t != contact && (rc = comm_ucx_ep_replace(ctx, t, ctx->peer_addr[t])))
            goto out;
    }
    for (int t = 0; t < n; t++)
        if (!nameptr[t]) {
            rc = WHALE_EDATA;
            goto out;
        }
    if ((rc = boot_set_nodes(b, nameptr)) || (rc = take_state(ctx, &ns)) || (rc = el_init(ctx)))
        goto out;
    struct comm_elastic *el = ctx->el;
    el_state_free(&el->st);
    el->st = ns;
    ns.rank_of_task = NULL;
    ns.member = NULL;
    for (int t = 0; t < n; t++)
        if (!el->st.member[t]) {
            el->how[t] = WHALE_DETECT_CRASH;
            el->hard[t] = true;
        }
    snprintf(el->step_id, sizeof el->step_id, "%s", sid);
    el->join_contact = contact;
    el->decide_epoch = el->st.epoch;
    if ((rc = comm_std_groups(ctx, (uint16_t)(EL_GID_BASE + (el->st.epoch % 1000) * 16),
                              el->st.member)))
        goto out;
    whale_info("elastic: task %d on %s joined step %s at epoch %llu as a %s after %.2f s", me, node,
               sid, (unsigned long long)el->st.epoch, b->spare ? "spare" : "rank",
               el_now() - t0);
    if (join_path(ctx, &el->join_path))
        el->join_path = NULL;
out:
    if (wa)
        ucp_worker_release_address(ctx->worker, wa);
    el_state_free(&ns);
    free(req);
    free(buf);
    free(dec);
    free(addrs);
    free(p);
    free(names);
    free(nameptr);
    return rc;
}
