#define _GNU_SOURCE
/* Embedded PMIx server for whale-run. All tasks are local, so a fence is
 * complete as soon as the server library has every local contribution: the
 * host hands the collected data straight back (no inter-node exchange). */
#include "pmix_host.h"

#include <ftw.h>
#include <pmix.h>
#include <pmix_server.h>
#include <sys/stat.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/error.h"
#include "whale/log.h"

struct pmix_host {
    char nspace[PMIX_MAX_NSLEN + 1];
    char tmpdir[256];
    int ntasks;
    atomic_int aborted;
    atomic_int abort_status;
};

static struct pmix_host *g_host;

static pmix_status_t fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                              size_t ninfo, char *data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                              void *cbdata)
{
    (void)procs;
    (void)nprocs;
    (void)info;
    (void)ninfo;
    /* Every participant is local: the local contributions are everything. */
    if (cbfunc)
        cbfunc(PMIX_SUCCESS, data, ndata, cbdata, NULL, NULL);
    return PMIX_SUCCESS;
}

static pmix_status_t direct_modex(const pmix_proc_t *proc, const pmix_info_t info[], size_t ninfo,
                                  pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
    (void)proc;
    (void)info;
    (void)ninfo;
    (void)cbfunc;
    (void)cbdata;
    return PMIX_ERR_NOT_SUPPORTED; /* all data is local */
}

static pmix_status_t client_finalized(const pmix_proc_t *proc, void *obj, pmix_op_cbfunc_t cbfunc,
                                      void *cbdata)
{
    (void)proc;
    (void)obj;
    if (cbfunc)
        cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
}

static pmix_status_t client_abort(const pmix_proc_t *proc, void *obj, int status, const char msg[],
                                  pmix_proc_t procs[], size_t nprocs, pmix_op_cbfunc_t cbfunc,
                                  void *cbdata)
{
    (void)obj;
    (void)procs;
    (void)nprocs;
    fprintf(stderr, "whale-run: task %u called abort(%d): %s\n", proc->rank, status, msg ? msg : "");
    if (g_host) {
        atomic_store(&g_host->abort_status, status ? status : 1);
        atomic_store(&g_host->aborted, 1);
    }
    if (cbfunc)
        cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
}

static pmix_server_module_t module = {
    .client_finalized = client_finalized,
    .abort = client_abort,
    .fence_nb = fence_nb,
    .direct_modex = direct_modex,
};

struct op_wait {
    atomic_int done;
    pmix_status_t status;
};

static void op_cb(pmix_status_t st, void *cbdata)
{
    struct op_wait *w = cbdata;
    w->status = st;
    atomic_store(&w->done, 1);
}

static pmix_status_t wait_op(struct op_wait *w, pmix_status_t rc)
{
    if (rc != PMIX_SUCCESS)
        return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : rc;
    while (!atomic_load(&w->done))
        usleep(100);
    return w->status;
}

int pmix_host_start(int ntasks, struct pmix_host **out)
{
    struct pmix_host *h = calloc(1, sizeof *h);
    if (!h)
        return WHALE_ENOMEM;
    h->ntasks = ntasks;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(h->tmpdir, sizeof h->tmpdir, "%s/whale-run.XXXXXX", base);
    if (!mkdtemp(h->tmpdir)) {
        whale_error("cannot create a temporary directory under %s", base);
        free(h);
        return WHALE_EIO;
    }
    snprintf(h->nspace, sizeof h->nspace, "whale-run.%d", (int)getpid());
    g_host = h;
    pmix_info_t info[2];
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, h->tmpdir, PMIX_STRING);
    bool no = false;
    PMIX_INFO_LOAD(&info[1], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
    pmix_status_t st = PMIx_server_init(&module, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_server_init: %s", PMIx_Error_string(st));
        rmdir(h->tmpdir);
        free(h);
        g_host = NULL;
        return WHALE_EPMIX;
    }

    char host[256];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    size_t plen = (size_t)ntasks * 12 + 16;
    char *peers = malloc(plen);
    if (!peers) {
        pmix_host_stop(h);
        return WHALE_ENOMEM;
    }
    peers[0] = '\0';
    for (int i = 0; i < ntasks; i++)
        snprintf(peers + strlen(peers), plen - strlen(peers), "%s%d", i ? "," : "", i);
    char *node_regex = NULL, *proc_regex = NULL;
    PMIx_generate_regex(host, &node_regex);
    PMIx_generate_ppn(peers, &proc_regex);

    uint32_t n32 = (uint32_t)ntasks;
    pmix_info_t ji[8];
    size_t nji = 0;
    PMIX_INFO_LOAD(&ji[nji++], PMIX_UNIV_SIZE, &n32, PMIX_UINT32);
    PMIX_INFO_LOAD(&ji[nji++], PMIX_JOB_SIZE, &n32, PMIX_UINT32);
    PMIX_INFO_LOAD(&ji[nji++], PMIX_LOCAL_SIZE, &n32, PMIX_UINT32);
    PMIX_INFO_LOAD(&ji[nji++], PMIX_MAX_PROCS, &n32, PMIX_UINT32);
    PMIX_INFO_LOAD(&ji[nji++], PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    PMIX_INFO_LOAD(&ji[nji++], PMIX_JOBID, h->nspace, PMIX_STRING);
    if (node_regex)
        PMIX_INFO_LOAD(&ji[nji++], PMIX_NODE_MAP, node_regex, PMIX_REGEX);
    if (proc_regex)
        PMIX_INFO_LOAD(&ji[nji++], PMIX_PROC_MAP, proc_regex, PMIX_REGEX);
    struct op_wait w = { 0 };
    st = wait_op(&w, PMIx_server_register_nspace(h->nspace, ntasks, ji, nji, op_cb, &w));
    for (size_t i = 0; i < nji; i++)
        PMIX_INFO_DESTRUCT(&ji[i]);
    free(node_regex);
    free(proc_regex);
    free(peers);
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_server_register_nspace: %s", PMIx_Error_string(st));
        pmix_host_stop(h);
        return WHALE_EPMIX;
    }
    for (int i = 0; i < ntasks; i++) {
        pmix_proc_t p;
        PMIX_LOAD_PROCID(&p, h->nspace, (pmix_rank_t)i);
        struct op_wait cw = { 0 };
        st = wait_op(&cw, PMIx_server_register_client(&p, getuid(), getgid(), NULL, op_cb, &cw));
        if (st != PMIX_SUCCESS) {
            whale_error("PMIx_server_register_client(%d): %s", i, PMIx_Error_string(st));
            pmix_host_stop(h);
            return WHALE_EPMIX;
        }
    }
    *out = h;
    return 0;
}

int pmix_host_child_env(struct pmix_host *h, int task, char ***env)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, h->nspace, (pmix_rank_t)task);
    pmix_status_t st = PMIx_server_setup_fork(&p, env);
    if (st != PMIX_SUCCESS) {
        whale_error("PMIx_server_setup_fork(%d): %s", task, PMIx_Error_string(st));
        return WHALE_EPMIX;
    }
    return 0;
}

int pmix_host_abort_status(struct pmix_host *h, bool *aborted)
{
    *aborted = h && atomic_load(&h->aborted);
    return h ? atomic_load(&h->abort_status) : 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* The server's rendezvous files live in our private temporary directory. */
static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void pmix_host_stop(struct pmix_host *h)
{
    if (!h)
        return;
    PMIx_server_finalize();
    rm_tree(h->tmpdir);
    g_host = NULL;
    free(h);
}
