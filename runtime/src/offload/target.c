/* --whale-offload-target: spare tasks lend their host memory to workers'
 * offloaded state (optimizer state; params mode: also the ZeRO-3 weight
 * shard) through the RMA API (see whale/offload.h). */
#define _GNU_SOURCE
#include "whale/offload.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"

struct whale_offload_target {
    whale_ctx *ctx;
    bool spare;
    void *mem;            /* spares: the memory they serve (lend_alloc) */
    size_t bytes;
    bool exchanged;       /* peers may hold an rkey to mem */
    whale_region *reg;
    whale_remote **rem;   /* [ntasks] from the exchange */
    int ntasks;
};

/* What every task tells every other (64 bytes, allgathered as bytes). */
struct task_info {
    int64_t need;         /* bytes of offloaded state (workers), 0 for spares */
    int32_t spare;
    char host[52];
};

static bool in_list(const char *host, char **names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], host))
            return true;
    return false;
}

static int target_open(whale_ctx *ctx, const char *target, whale_engine *e, bool failed,
                       whale_offload_target **out);

/* Lent memory is its own mapping, never the heap's: a worker's put may
 * still be on its way when a spare gives up (a failed setup, a dead peer
 * in the closing barrier). Over tcp the spare's own UCX worker writes
 * that put's bytes at the address it names, registration or not, and over
 * CMA the worker writes into this process directly; memory handed back to
 * malloc or unmapped then turned into heap corruption or a SIGSEGV inside
 * UCX progress (seen once). */
static void *lend_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* quiesced: every peer is known to be done with the memory (the closing
 * barrier passed, or the exchange never handed out its key): unmapped.
 * Otherwise the pages go back to the kernel (MADV_DONTNEED: a late write
 * faults in a zero page and lands harmlessly) and the address range stays
 * reserved until the process ends. */
static void lend_free(void *mem, size_t bytes, bool quiesced)
{
    if (!mem)
        return;
    if (quiesced)
        munmap(mem, bytes);
    else
        madvise(mem, bytes, MADV_DONTNEED);
}

int whale_offload_target_open(whale_ctx *ctx, const char *target, whale_engine *e,
                              whale_offload_target **out)
{
    return target_open(ctx, target, e, false, out);
}

int whale_offload_target_abort(whale_ctx *ctx, const char *target)
{
    whale_offload_target *t = NULL;
    int rc = target_open(ctx, target, NULL, true, &t);
    whale_offload_target_close(t);
    return rc;
}

static int target_open(whale_ctx *ctx, const char *target, whale_engine *e, bool failed,
                       whale_offload_target **out)
{
    *out = NULL;
    if (!target || !*target || !strcmp(target, "local"))
        return 0;
    char **names = NULL;
    int nnames = 0, rc = 0;
    if (strcmp(target, "spares") && whale_hostlist_expand(target, &names, &nnames)) {
        whale_error("--whale-offload-target=%s: expected local, spares or a host list such as "
                    "node[3-4]", target);
        return WHALE_EINVAL;
    }
    whale_group *all = whale_all_tasks(ctx);
    const int nt = whale_group_size(all), me = whale_group_rank(all);
    struct task_info mine = { 0 }, *info = calloc((size_t)nt, sizeof *info);
    whale_offload_target *t = calloc(1, sizeof *t);
    int64_t *off = calloc((size_t)nt, sizeof *off);
    int *host_of = calloc((size_t)nt, sizeof *host_of);
    if (!info || !t || !off || !host_of) {
        rc = WHALE_ENOMEM;
        goto done;
    }
    t->ctx = ctx;
    t->ntasks = nt;
    t->spare = e == NULL && !failed;
    mine.need = failed ? -1 : e ? (int64_t)whale_engine_offload_bytes(e) : 0;
    mine.spare = t->spare;
    gethostname(mine.host, sizeof mine.host - 1);
    if ((rc = whale_allgather(all, &mine, info, sizeof mine, WHALE_UINT8)))
        goto done;
    for (int i = 0; i < nt; i++)
        if (info[i].need < 0) { /* a worker failed before this point: everybody stops */
            if (!failed && (t->spare || me == 0))
                whale_error("offload target: task %d failed before the offload setup; "
                            "stopping", i);
            rc = WHALE_ECANCELED;
            goto done;
        }
    /* memory hosts: spare tasks (on the listed nodes), in task order */
    int nh = 0;
    int *hosts = calloc((size_t)nt, sizeof *hosts);
    if (!hosts) {
        rc = WHALE_ENOMEM;
        goto done;
    }
    for (int i = 0; i < nt; i++)
        if (info[i].spare && (!names || in_list(info[i].host, names, nnames)))
            hosts[nh++] = i;
    if (!nh) {
        if (me == 0 || !t->spare)
            whale_error("--whale-offload-target=%s: no spare task %s%s to hold offloaded "
                        "state; start the step with hot spares (--whale-spares=N)%s", target,
                        names ? "on " : "in this step", names ? target : "",
                        names ? " on those nodes" : "");
        free(hosts);
        rc = WHALE_EINVAL;
        goto done;
    }
    /* workers with state, round robin over the hosts; offsets 64-aligned */
    int64_t *load = calloc((size_t)nt, sizeof *load);
    if (!load) {
        free(hosts);
        rc = WHALE_ENOMEM;
        goto done;
    }
    int j = 0;
    for (int i = 0; i < nt; i++) {
        host_of[i] = -1;
        if (info[i].spare || info[i].need <= 0)
            continue;
        int h = hosts[j++ % nh];
        host_of[i] = h;
        off[i] = load[h];
        load[h] += (info[i].need + 63) / 64 * 64;
    }
    free(hosts);
    if (t->spare && load[me] > 0) {
        t->bytes = (size_t)load[me];
        if (!(t->mem = lend_alloc(t->bytes)) ||
            (rc = whale_region_register(ctx, t->mem, t->bytes, &t->reg))) {
            whale_error("spare task %d: cannot lend %.1f MiB of host memory for offloaded "
                        "state: %s", me, (double)t->bytes / (1 << 20),
                        whale_strerror(rc ? rc : WHALE_ENOMEM));
            rc = rc ? rc : WHALE_ENOMEM;
        }
    }
    free(load);
    /* everybody takes part in the exchange, even after a local failure, so
     * that no task is left waiting in it */
    t->exchanged = t->reg != NULL;
    int rc2 = whale_region_exchange(all, t->reg, &t->rem);
    rc = rc ? rc : rc2;
    if (!rc && !t->spare && host_of[me] >= 0) {
        whale_remote *r = t->rem[host_of[me]];
        t->bytes = (size_t)info[me].need;
        rc = r ? whale_engine_offload_attach(e, r, (size_t)off[me]) : WHALE_ESTATE;
        if (!rc)
            whale_info("offload: offloaded state of this rank (%.2f MiB) lives on spare task "
                       "%d (%s)", (double)t->bytes / (1 << 20), host_of[me],
                       info[host_of[me]].host);
    }
    if (!rc && t->spare && t->bytes)
        whale_info("spare: lending %.2f MiB of host memory for offloaded state",
                   (double)t->bytes / (1 << 20));
done:
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    free(info);
    free(off);
    free(host_of);
    if (rc) {
        if (t && t->rem) {
            for (int i = 0; i < t->ntasks; i++)
                whale_remote_free(t->rem[i]);
            free(t->rem);
        }
        if (t && t->reg)
            whale_region_free(t->reg);
        if (t)
            lend_free(t->mem, t->bytes, !t->exchanged);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void target_free(whale_offload_target *t, bool quiesced);

int whale_offload_target_close(whale_offload_target *t)
{
    if (!t)
        return 0;
    /* spares wait here (progressing RMA) until every worker has finished */
    int rc = whale_barrier(whale_all_tasks(t->ctx));
    target_free(t, rc == 0);
    return rc;
}

static void target_free(whale_offload_target *t, bool quiesced)
{
    for (int i = 0; i < t->ntasks && t->rem; i++)
        whale_remote_free(t->rem[i]);
    free(t->rem);
    if (t->reg)
        whale_region_free(t->reg);
    lend_free(t->mem, t->bytes, quiesced);
    free(t);
}

void whale_offload_target_release(whale_offload_target *t)
{
    if (t)
        target_free(t, true); /* the caller's word: see whale/offload.h */
}

size_t whale_offload_target_bytes(const whale_offload_target *t)
{
    return t ? t->bytes : 0;
}
