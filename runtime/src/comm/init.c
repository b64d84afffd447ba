/* whale_init / whale_finalize: bootstrap, UCX wire-up, the standard groups
 * (world, TP, PP, DP, and every task including spares), the cost model and
 * the progress thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "comm/transport/shm_internal.h"
#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

/* Fixed group ids of the standard groups (each reserves 3: the group and its
 * two hierarchical sub-groups); created groups start after them. */
enum { GID_ALL = 0, GID_WORLD = 3, GID_TP = 6, GID_PP = 9, GID_DP = 12, GID_FIRST_FREE = 15 };

/* util's checked parser (whale/envnum.h) with this module's message */
static int env_double(const char *name, double lo, double hi, double dflt, double *out)
{
    const char *s = whale_knob_getenv(name);
    *out = dflt;
    if (!s || !*s)
        return 0;
    if (whale_parse_double(s, lo, hi, out)) {
        whale_error("%s='%s' is not a number in [%g, %g]", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    return 0;
}

static int read_knobs(whale_ctx *ctx)
{
    double t, chunk, window, shm_chunk, cma_min, cma_step, sleep_after, stream_min;
    bool shm, cma;
    int rc;
    if ((rc = env_double("WHALE_PEER_TIMEOUT", 0.1, 3600, 5.0, &t)) ||
        (rc = env_double("WHALE_COLL_CHUNK", 4096, 1 << 30, 2 << 20, &chunk)) ||
        (rc = env_double("WHALE_COLL_WINDOW", 1, 64, 2, &window)) ||
        (rc = whale_env_bool("WHALE_SHM", true, &shm)) ||
        (rc = env_double("WHALE_SHM_CHUNK", 4096, 64 << 20, 0, &shm_chunk)) ||
        (rc = whale_env_bool("WHALE_SHM_CMA", false, &cma)) ||
        (rc = env_double("WHALE_SHM_CMA_MIN", 0, 1e15, 1 << 20, &cma_min)) ||
        (rc = env_double("WHALE_SHM_CMA_STEP", 4096, 16 << 20, 128 << 10, &cma_step)) ||
        (rc = env_double("WHALE_SHM_STREAM_MIN", 0, 1e15, (double)comm_shm_stream_min_auto(),
                         &stream_min)) ||
        (rc = env_double("WHALE_PROGRESS_SLEEP", 0, 1 << 20, COMM_SLEEP_AFTER, &sleep_after)))
        return rc;
    ctx->shm_cma = cma;
    ctx->shm_cma_min = (size_t)cma_min;
    ctx->shm_cma_step = (size_t)cma_step & ~(size_t)63;
    ctx->shm_stream_min = (size_t)stream_min;
    ctx->sleep_after = (int)sleep_after;
    ctx->shm_mode = shm;
    ctx->shm_chunk = (size_t)shm_chunk & ~(size_t)63; /* cache-line aligned pieces; 0: by group size */
    ctx->peer_timeout = t;
    ctx->chunk_bytes = (size_t)chunk;
    ctx->window = (int)window;
    if ((rc = comm_parse_algo_env(getenv(WHALE_ENV_COLL_ALGO), ctx->forced_algo)))
        return rc;
    /* Defaults until the probe (or WHALE_COLL_MODEL) says better. */
    ctx->link[COMM_LINK_SHM] = (struct comm_link){ 1e-6, 1.0 / 6e9 };
    ctx->link[COMM_LINK_NET] = (struct comm_link){ 20e-6, 1.0 / 1.5e9 };
    ctx->link[COMM_LINK_COPY] = (struct comm_link){ 0.3e-6, 1.0 / 8e9 };
    return comm_parse_model_env(whale_knob_getenv("WHALE_COLL_MODEL"), ctx->link);
}

/* Exchange blob: node name (NUL-terminated) followed by the UCX address. */
static int wireup(whale_ctx *ctx)
{
    struct boot *b = &ctx->boot;
    char node[256];
    int rc = boot_node_name(node, sizeof node);
    if (rc)
        return rc;
    ucp_address_t *addr = NULL;
    size_t alen = 0;
    if (b->ntasks > 1) {
        if ((rc = comm_ucx_init(ctx)))
            return rc;
        /* The progress thread sleeps in poll() on the worker's event fd
         * and this eventfd (comm_wake) while idle. */
        if (ucp_worker_get_efd(ctx->worker, &ctx->efd) != UCS_OK)
            ctx->efd = -1;
        ctx->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ucs_status_t st = ucp_worker_get_address(ctx->worker, &addr, &alen);
        if (st != UCS_OK) {
            whale_error("ucp_worker_get_address: %s", ucs_status_string(st));
            return WHALE_EUCX;
        }
    }
    size_t nlen = strlen(node) + 1;
    struct comm_proc_id me = comm_proc_self();
    char *blob = malloc(nlen + sizeof me + alen);
    if (!blob) {
        if (addr)
            ucp_worker_release_address(ctx->worker, addr);
        return WHALE_ENOMEM;
    }
    memcpy(blob, node, nlen);
    memcpy(blob + nlen, &me, sizeof me);
    if (alen)
        memcpy(blob + nlen + sizeof me, addr, alen);
    if (addr)
        ucp_worker_release_address(ctx->worker, addr);
    void **blobs = NULL;
    size_t *lens = NULL;
    rc = boot_exchange(b, "whale.wireup", blob, nlen + sizeof me + alen, &blobs, &lens);
    free(blob);
    if (rc)
        return rc;
    char **names = calloc((size_t)b->ntasks, sizeof *names);
    void **addrs = calloc((size_t)b->ntasks, sizeof *addrs);
    ctx->procs = calloc((size_t)b->ntasks, sizeof *ctx->procs);
    if (!names || !addrs || !ctx->procs) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int t = 0; t < b->ntasks; t++) {
        char *bl = blobs[t];
        size_t l = strnlen(bl, lens[t]);
        if (l + 1 + sizeof(struct comm_proc_id) > lens[t]) {
            whale_error("malformed bootstrap data from task %d", t);
            rc = WHALE_EPMIX;
            goto out;
        }
        names[t] = bl;
        memcpy(&ctx->procs[t], bl + l + 1, sizeof ctx->procs[t]);
        addrs[t] = bl + l + 1 + sizeof(struct comm_proc_id);
    }
    if ((rc = boot_set_nodes(b, names)))
        goto out;
    ctx->dead = calloc((size_t)b->ntasks, sizeof(bool));
    ctx->remote_refs = calloc((size_t)b->ntasks, sizeof(int));
    if (!ctx->dead || !ctx->remote_refs) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    if (b->ntasks > 1)
        rc = comm_ucx_connect(ctx, addrs);
out:
    free(names);
    free(addrs);
    boot_free_blobs(b->ntasks, blobs, lens);
    return rc;
}

int comm_std_groups(whale_ctx *ctx, uint16_t gid_base, const uint8_t *member)
{
    struct boot *b = &ctx->boot;
    int n = b->ntasks > b->world ? b->ntasks : b->world;
    int *tasks = malloc(sizeof(int) * (size_t)n), *wr = malloc(sizeof(int) * (size_t)n);
    int rc = 0, na = 0;
    ctx->all = ctx->world = ctx->tp = ctx->pp = ctx->dp = NULL;
    if (!tasks || !wr) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int t = 0; t < b->ntasks; t++) {
        if (member && !member[t])
            continue;
        tasks[na] = t;
        wr[na] = b->rank_of_task[t];
        na++;
    }
    if ((rc = comm_group_new(ctx, (uint16_t)(gid_base + GID_ALL), tasks, wr, na, false, &ctx->all)))
        goto out;
    if (b->spare)
        goto out;
    for (int r = 0; r < b->world; r++) {
        tasks[r] = b->task_of_rank[r];
        wr[r] = r;
    }
    if ((rc = comm_group_new(ctx, (uint16_t)(gid_base + GID_WORLD), tasks, wr, b->world, false, &ctx->world)))
        goto out;
    struct { int gid; enum whale_axis axis; whale_group **out; } kinds[3] = {
        { GID_TP, WHALE_AXIS_TP, &ctx->tp }, { GID_PP, WHALE_AXIS_PP, &ctx->pp },
        { GID_DP, WHALE_AXIS_DP, &ctx->dp } };
    for (int k = 0; k < 3; k++) {
        int gn = whale_grid_group(&b->grid, kinds[k].axis, b->rank, wr);
        for (int i = 0; i < gn; i++)
            tasks[i] = b->task_of_rank[wr[i]];
        if ((rc = comm_group_new(ctx, (uint16_t)(gid_base + kinds[k].gid), tasks, wr, gn, false,
                                 kinds[k].out)))
            goto out;
    }
out:
    free(tasks);
    free(wr);
    return rc;
}

/* Top-level groups own their hierarchical sub-groups. */
const struct comm_member_hooks *comm_member;

void comm_member_register(const struct comm_member_hooks *hooks) { comm_member = hooks; }

static void destroy_groups(whale_ctx *ctx)
{
    for (int i = 0; i < ctx->ngroups;) {
        if (ctx->groups[i]->internal)
            i++;
        else {
            comm_group_destroy(ctx->groups[i]);
            i = 0;
        }
    }
    free(ctx->groups);
    ctx->groups = NULL;
    ctx->ngroups = 0;
}

int whale_init(whale_ctx **out)
{
    if (!out)
        return WHALE_EINVAL;
    *out = NULL;
    whale_log_init_from_env();
    whale_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return WHALE_ENOMEM;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->cond, NULL);
    ctx->next_gid = GID_FIRST_FREE;
    ctx->wakefd = ctx->efd = -1;
    int rc = read_knobs(ctx);
    if (rc)
        goto fail;
    if ((rc = boot_init(&ctx->boot)))
        goto fail;
    whale_log_set_rank(ctx->boot.rank);
    if ((rc = wireup(ctx)) || (rc = comm_std_groups(ctx, 0, NULL)) ||
        (comm_member && (rc = comm_member->init(ctx))))
        goto fail;
    /* An elastic step must survive a dead rank: under Slurm 22.05 a task that
     * dies while still a PMIx client makes slurmstepd kill the whole step
     * (spank/ELASTIC.md). Nothing needs PMIx after the wire-up. */
    if (ctx->el && comm_member->armed(ctx) && (rc = boot_detach(&ctx->boot)))
        goto fail;
    {
        cpu_set_t set;
        int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        int here = 0;
        for (int t = 0; t < ctx->boot.ntasks; t++)
            here += ctx->boot.node_of_task[t] == ctx->boot.node_of_task[ctx->boot.task];
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        bool bound = online > 0 && cores < online;
        ctx->oversubscribed = here > (online > 0 ? online : cores);
        /* A rank bound to its own cores (whale-run --bind, srun --cpu-bind)
         * keeps polling: yielding would hand its core to an unrelated
         * process for a whole time slice at every rendezvous step. An
         * unbound rank may share a core with the peer it waits for, so it
         * yields after a few polls. */
        const char *sp = whale_knob_getenv("WHALE_SPIN");
        ctx->spin = sp && atoi(sp) > 0 ? atoi(sp) : bound && !ctx->oversubscribed ? 100000 : 16;
    }
    if (ctx->boot.ntasks > 1 && (rc = comm_thread_start(ctx)))
        goto fail;
    /* spares take part: they receive the ranks' cost model */
    if (((ctx->world && ctx->world->size > 1) || (ctx->boot.spare && ctx->boot.world > 1)) &&
        (rc = comm_probe(ctx, !whale_knob_getenv("WHALE_COLL_MODEL"))))
        goto fail;
    whale_debug("initialised: task %d of %d, rank %d of %d (tp %d pp %d dp %d), %d node(s)",
                ctx->boot.task, ctx->boot.ntasks, ctx->boot.rank, ctx->boot.world, ctx->boot.tp,
                ctx->boot.pp, ctx->boot.dp, ctx->boot.nnodes);
    *out = ctx;
    return 0;
fail:
    comm_thread_stop(ctx);
    destroy_groups(ctx);
    if (ctx->el)
        comm_member->cancel_rx(ctx);
    comm_ucx_fini(ctx, false);
    if (ctx->el)
        comm_member->fini(ctx);
    if (ctx->wakefd >= 0)
        close(ctx->wakefd);
    free(ctx->dead);
    free(ctx->remote_refs);
    free(ctx->procs);
    boot_finalize(&ctx->boot);
    pthread_mutex_destroy(&ctx->lock);
    pthread_cond_destroy(&ctx->cond);
    free(ctx);
    return rc;
}

/* The finalize barrier's group when a member of the step-wide group is
 * dead (an idle spare that died: no agreement rebuilt the groups since, so
 * ctx->all still holds it and a barrier on it fails at once): the live
 * members, the same set on every task once each has noticed the death
 * (a dead same-node process is checked here, not only while an operation
 * waits). NULL: nobody is dead, a working rank is, or no group could be
 * made. */
#define FINALIZE_GID 0x7ff0 /* above every epoch's groups (member/el_internal.h) */
static whale_group *live_group(whale_ctx *ctx)
{
    whale_group *all = ctx->all, *g = NULL;
    pthread_mutex_lock(&ctx->lock);
    for (int t = 0; ctx->watch && t < ctx->boot.ntasks; t++)
        if (ctx->watch[t] && !ctx->dead[t] && comm_proc_alive(&ctx->procs[t]) == 0)
            comm_mark_dead(ctx, t, "the process exited");
    int *tasks = malloc(sizeof(int) * (size_t)all->size);
    int *wr = malloc(sizeof(int) * (size_t)all->size), n = 0;
    bool rank_lost = false;
    for (int i = 0; tasks && wr && i < all->size; i++)
        if (!ctx->dead[all->tasks[i]]) {
            tasks[n] = all->tasks[i];
            wr[n++] = all->world_ranks[i];
        } else {
            rank_lost |= ctx->boot.rank_of_task[all->tasks[i]] >= 0;
        }
    /* Only spares dead: every working rank is on its way here. A dead working
     * rank means the step is stopping on a failure: the barrier on
     * ctx->all fails at once as before, rather than waiting here on a
     * peer that may be stuck elsewhere. internal: no sub-groups (their
     * ids would be FINALIZE_GID + 1, + 2). */
    if (tasks && wr && !rank_lost && n < all->size && n > 1 &&
        comm_group_new(ctx, FINALIZE_GID, tasks, wr, n, true, &g))
        g = NULL;
    pthread_mutex_unlock(&ctx->lock);
    free(tasks);
    free(wr);
    return g;
}

int whale_finalize(whale_ctx *ctx)
{
    if (!ctx)
        return 0;
    int rc = 0;
    bool clean = true;
    whale_group *live = NULL;
    comm_transports_fini(ctx);
    if (ctx->all && ctx->all->size > 1) {
        /* Nobody closes endpoints while a peer may still talk to it. The
         * UCX barrier alone is not enough: a rank leaves it as soon as its
         * own partners have reported, and if it then tore down, a slower
         * rank still finishing the barrier would see it vanish and fail
         * the barrier with WHALE_EPEER. The PMIx fence (outside UCX, the
         * progress thread still serving UCX meanwhile) holds every rank
         * until all have left the UCX barrier. */
        /* a dead idle spare still in ctx->all: the live members fence
         * (the waiting spares among them too, so that none of them sees
         * the working ranks vanish before it learnt that the step ended) */
        if (ctx->el)
            live = live_group(ctx);
        bool lost = false;
        for (int t = 0; t < ctx->boot.ntasks; t++)
            lost |= ctx->dead[t];
        /* Waiting spares learn that the step ended (WHALE_EDONE) and come
         * to the barrier. */
        if (ctx->el && !ctx->boot.spare) {
            pthread_mutex_lock(&ctx->lock);
            comm_member->step_done(ctx);
            pthread_mutex_unlock(&ctx->lock);
        }
        whale_group *fin = live ? live : ctx->all;
        if (whale_barrier(fin)) {
            clean = false;
            rc = WHALE_EPEER;
        } else {
            /* From here on peers leave: that is no failure to detect. */
            pthread_mutex_lock(&ctx->lock);
            ctx->closing = true;
            if (ctx->el)
                comm_member->disarm(ctx);
            pthread_mutex_unlock(&ctx->lock);
            if (lost || ctx->boot.detached) {
                /* PMIx fences hang while a task of the step is dead: a
                 * second UCX barrier narrows the window instead (its
                 * failure only means a peer already left). */
                whale_barrier(fin);
                ctx->fenced = true;
            } else if (boot_fence(&ctx->boot)) {
                clean = false;
                rc = WHALE_EPMIX;
            } else {
                ctx->fenced = true;
            }
        }
    }
    comm_thread_stop(ctx);
    comm_group_destroy(live); /* internal: destroy_groups leaves it */
    if (ctx->nactive)
        whale_warn("finalize with %d operation(s) still pending", ctx->nactive);
    if (ctx->el)
        comm_member->cancel_rx(ctx);
    comm_ucx_fini(ctx, clean);
    destroy_groups(ctx);
    if (ctx->el)
        comm_member->fini(ctx);
    if (ctx->wakefd >= 0)
        close(ctx->wakefd);
    free(ctx->dead);
    free(ctx->remote_refs);
    free(ctx->procs);
    sched_scratch_release_all();
    int brc = boot_finalize(&ctx->boot);
    pthread_mutex_destroy(&ctx->lock);
    pthread_cond_destroy(&ctx->cond);
    free(ctx);
    return rc ? rc : brc;
}

int whale_rank(const whale_ctx *ctx) { return ctx ? ctx->boot.rank : -1; }
int whale_world_size(const whale_ctx *ctx) { return ctx ? ctx->boot.world : 0; }
bool whale_is_spare(const whale_ctx *ctx) { return ctx && ctx->boot.spare; }

void whale_degrees(const whale_ctx *ctx, int *tp, int *pp, int *dp)
{
    if (tp)
        *tp = ctx->boot.tp;
    if (pp)
        *pp = ctx->boot.pp;
    if (dp)
        *dp = ctx->boot.dp;
}

void whale_ctx_grid(const whale_ctx *ctx, struct whale_grid *g)
{
    *g = ctx->boot.grid;
}

void whale_coords(const whale_ctx *ctx, int *tp_rank, int *pp_rank, int *dp_rank)
{
    if (tp_rank)
        *tp_rank = ctx->boot.tp_rank;
    if (pp_rank)
        *pp_rank = ctx->boot.pp_rank;
    if (dp_rank)
        *dp_rank = ctx->boot.dp_rank;
}

whale_group *whale_world(whale_ctx *ctx) { return ctx ? ctx->world : NULL; }
whale_group *whale_tp_group(whale_ctx *ctx) { return ctx ? ctx->tp : NULL; }
whale_group *whale_pp_group(whale_ctx *ctx) { return ctx ? ctx->pp : NULL; }
whale_group *whale_dp_group(whale_ctx *ctx) { return ctx ? ctx->dp : NULL; }
whale_group *whale_all_tasks(whale_ctx *ctx) { return ctx ? ctx->all : NULL; }
int whale_task_id(const whale_ctx *ctx) { return ctx ? ctx->boot.task : -1; }
int whale_ntasks(const whale_ctx *ctx) { return ctx ? ctx->boot.ntasks : 0; }
int whale_nnodes(const whale_ctx *ctx) { return ctx ? ctx->boot.nnodes : 0; }
double whale_peer_timeout(const whale_ctx *ctx) { return ctx ? ctx->peer_timeout : 0; }
