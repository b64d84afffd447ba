/* PMIx client side of the bootstrap: rank/size, and the Put / Commit /
 * Fence(collect) / Get rendezvous used to exchange endpoint addresses.
 * A process launched without a PMIx server (plain ./prog) is a world of one. */
#include "boot/boot.h"

#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"

static const char *env_get(const char *name, void *user)
{
    (void)user;
    return getenv(name);
}

int boot_node_name(char *buf, size_t len)
{
    const char *n = getenv(WHALE_ENV_NODE);
    if (n && *n) {
        snprintf(buf, len, "%s", n);
        return 0;
    }
    if (gethostname(buf, len) != 0) {
        whale_error("gethostname failed");
        return WHALE_EIO;
    }
    buf[len - 1] = '\0';
    return 0;
}

int boot_init(struct boot *b)
{
    memset(b, 0, sizeof *b);
    int psize = -1, prank = -1;
    /* Only talk to PMIx when a server announced itself: PMIx_Init without one
     * would try to start as a singleton and print noise. */
    const char *ns = getenv("PMIX_NAMESPACE"), *pr = getenv("PMIX_RANK");
    if (ns && *ns && pr && *pr) {
        pmix_proc_t *me = calloc(1, sizeof *me);
        if (!me)
            return WHALE_ENOMEM;
        pmix_status_t st = PMIx_Init(me, NULL, 0);
        if (st != PMIX_SUCCESS) {
            whale_error("PMIx_Init failed: %s (launched by srun without --mpi=pmix?)",
                        PMIx_Error_string(st));
            free(me);
            return WHALE_EPMIX;
        }
        pmix_proc_t wild;
        PMIX_LOAD_PROCID(&wild, me->nspace, PMIX_RANK_WILDCARD);
        pmix_value_t *val = NULL;
        st = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
        if (st != PMIX_SUCCESS || !val) {
            whale_error("PMIx_Get(PMIX_JOB_SIZE) failed: %s", PMIx_Error_string(st));
            PMIx_Finalize(NULL, 0);
            free(me);
            return WHALE_EPMIX;
        }
        psize = (int)val->data.uint32;
        PMIX_VALUE_RELEASE(val);
        prank = (int)me->rank;
        b->have_pmix = true;
        b->pmix = me;
    }
    int rc = boot_read_contract(b, env_get, NULL, psize, prank);
    if (rc) {
        boot_finalize(b);
        return rc;
    }
    if (!b->have_pmix && b->ntasks > 1) {
        whale_error("the environment describes %d tasks but no PMIx server is reachable: "
                    "launch with `srun --mpi=pmix` or `whale-run`", b->ntasks);
        boot_finalize(b);
        return WHALE_EPMIX;
    }
    return 0;
}

void boot_free_blobs(int n, void **blobs, size_t *lens)
{
    if (blobs)
        for (int i = 0; i < n; i++)
            free(blobs[i]);
    free(blobs);
    free(lens);
}

int boot_fence(struct boot *b)
{
    if (!b->have_pmix)
        return 0;
    /* Without PMIX_COLLECT_DATA Slurm's fence returns at once (not a barrier). */
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_proc_t all;
    const pmix_proc_t *me = b->pmix;
    PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
    pmix_status_t st = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_Fence failed: %s", PMIx_Error_string(st));
        return WHALE_EPMIX;
    }
    return 0;
}

int boot_exchange(struct boot *b, const char *key, const void *data, size_t len, void ***blobs_out,
                  size_t **lens_out)
{
    int n = b->ntasks;
    void **blobs = calloc((size_t)n, sizeof *blobs);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    if (!blobs || !lens) {
        free(blobs);
        free(lens);
        return WHALE_ENOMEM;
    }
    if (!b->have_pmix) {
        blobs[0] = malloc(len ? len : 1);
        if (!blobs[0]) {
            boot_free_blobs(n, blobs, lens);
            return WHALE_ENOMEM;
        }
        memcpy(blobs[0], data, len);
        lens[0] = len;
        *blobs_out = blobs;
        *lens_out = lens;
        return 0;
    }
    pmix_proc_t *me = b->pmix;
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)data;
    v.data.bo.size = len;
    pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (st == PMIX_SUCCESS)
        st = PMIx_Commit();
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_Put/Commit(%s) failed: %s", key, PMIx_Error_string(st));
        boot_free_blobs(n, blobs, lens);
        return WHALE_EPMIX;
    }
    if (boot_fence(b)) {
        boot_free_blobs(n, blobs, lens);
        return WHALE_EPMIX;
    }
    for (int t = 0; t < n; t++) {
        pmix_proc_t p;
        PMIX_LOAD_PROCID(&p, me->nspace, (pmix_rank_t)t);
        pmix_value_t *pv = NULL;
        st = PMIx_Get(&p, key, NULL, 0, &pv);
        if (st != PMIX_SUCCESS || !pv || pv->type != PMIX_BYTE_OBJECT) {
            whale_error("PMIx_Get(%s) from task %d failed: %s", key, t, PMIx_Error_string(st));
            if (pv)
                PMIX_VALUE_RELEASE(pv);
            boot_free_blobs(n, blobs, lens);
            return WHALE_EPMIX;
        }
        lens[t] = pv->data.bo.size;
        blobs[t] = malloc(lens[t] ? lens[t] : 1);
        if (!blobs[t]) {
            PMIX_VALUE_RELEASE(pv);
            boot_free_blobs(n, blobs, lens);
            return WHALE_ENOMEM;
        }
        memcpy(blobs[t], pv->data.bo.bytes, lens[t]);
        PMIX_VALUE_RELEASE(pv);
    }
    *blobs_out = blobs;
    *lens_out = lens;
    return 0;
}

int boot_set_nodes(struct boot *b, char **names_of_task)
{
    b->node_of_task = calloc((size_t)b->ntasks, sizeof(int));
    b->node_names = calloc((size_t)b->ntasks, sizeof(char *));
    if (!b->node_of_task || !b->node_names)
        return WHALE_ENOMEM;
    b->nnodes = 0;
    for (int t = 0; t < b->ntasks; t++) {
        int k;
        for (k = 0; k < b->nnodes; k++)
            if (!strcmp(b->node_names[k], names_of_task[t]))
                break;
        if (k == b->nnodes) {
            b->node_names[k] = strdup(names_of_task[t]);
            if (!b->node_names[k])
                return WHALE_ENOMEM;
            b->nnodes++;
        }
        b->node_of_task[t] = k;
    }
    return 0;
}

int boot_detach(struct boot *b)
{
    if (!b->have_pmix)
        return 0;
    pmix_status_t st = PMIx_Finalize(NULL, 0);
    b->have_pmix = false;
    b->detached = true;
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_Finalize failed: %s", PMIx_Error_string(st));
        return WHALE_EPMIX;
    }
    whale_debug("left PMIx after the wire-up (elastic step)");
    return 0;
}

int boot_finalize(struct boot *b)
{
    int rc = 0;
    if (b->have_pmix) {
        pmix_status_t st = PMIx_Finalize(NULL, 0);
        if (st != PMIX_SUCCESS) {
            whale_error("PMIx_Finalize failed: %s", PMIx_Error_string(st));
            rc = WHALE_EPMIX;
        }
        b->have_pmix = false;
    }
    free(b->pmix);
    free(b->rank_of_task);
    free(b->task_of_rank);
    free(b->node_of_task);
    if (b->node_names)
        for (int i = 0; i < b->nnodes; i++)
            free(b->node_names[i]);
    free(b->node_names);
    memset(b, 0, sizeof *b);
    return rc;
}
