/* The failure report channel of a running Whale step (slurmstepd, one per
 * node). When the survivors agree that a rank failed, each reports it to
 * the slurmstepd of its own node by writing one line to the FIFO named by
 * WHALE_REPORT (whale_report_failure in libwhale):
 *     NODE KIND RANK TASK        e.g. "node2 node 3 6"
 * slurmstepd runs as root, the only context of the step with the right to
 * change a node in slurmctld, so the reader thread here
 *   - drains NODE with a reason naming the job, step, rank, task and kind,
 *     at once: Slurm itself only marks a dead node DOWN after
 *     SlurmdTimeout, and with ReturnToService it would hand the node out
 *     again as soon as its slurmd comes back;
 *   - SIGKILLs TASK when it runs on this node and is still there (a
 *     stopped or hung rank that the step has replaced would otherwise keep
 *     srun waiting forever).
 * The lines come from user processes: every field is checked against the
 * step (the node must be one of the step's nodes and the task must run
 * there); a bad line is logged and ignored. A well-formed line is still
 * only a claim: before it drains anything slurmstepd checks the claim
 * itself (report_judge.c): the task really exited or is stopped on this
 * node, or the other node's slurmd really does not answer. A forged
 * report about a healthy node drains nothing (spank/ELASTIC.md, "Threat
 * model"; spank_whale(8), SECURITY). */
#include "plugin.h"
#include "elastic.h"
#include "step.h"

#include <slurm/slurm.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DRAINED 64

static struct {
    char path[1100];      /* dir/report, handed to the tasks as WHALE_REPORT */
    char dir[1024];       /* the private directory (mkdtemp) */
    int parent_fd, dir_fd; /* kept: removal never follows a path swapped meanwhile */
    bool running;
    atomic_bool stopping;  /* close() asks the reader to return */
    pthread_t thread;
    const struct whale_step *step;
    unsigned job, stepid;
    pid_t *pid_of_task;   /* [ntasks]: pid of a live task of this node, 0 never here, -1 ended */
    uid_t uid;            /* the job's user (named as the drain reason's author) */
    char host[256];       /* this node's name */
    int ntasks;
    pthread_mutex_t lock; /* pid_of_task */
    char drained[MAX_DRAINED][64];
    int ndrained;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .parent_fd = -1, .dir_fd = -1 };

#define FIFO_NAME "report"

static const char *const kinds[] = { "crash", "node", "link", "hang" };

int whale_report_parse(const char *line, const struct whale_step *s, struct whale_report *r,
                       char *why, size_t n)
{
    char node[sizeof r->node], kind[sizeof r->kind], extra[2];
    int rank, task;
    /* widths: sizeof - 1; a longer word fails the %d that follows */
    if (sscanf(line, "%63s %7s %d %d %1s", node, kind, &rank, &task, extra) != 4) {
        snprintf(why, n, "expected 'NODE KIND RANK TASK'");
        return -1;
    }
    bool known = false;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        known = known || !strcmp(kind, kinds[i]);
    if (!known) {
        snprintf(why, n, "kind '%s' is not crash, node, link or hang", kind);
        return -1;
    }
    const struct whale_layout *l = &s->layout;
    /* -1: a spare task (it holds no rank), e.g. the one lending memory */
    if (rank < -1 || rank >= l->world) {
        snprintf(why, n, "rank %d outside 0..%d (or -1 for a spare)", rank, l->world - 1);
        return -1;
    }
    if (task < 0 || task >= l->ntasks) {
        snprintf(why, n, "task %d outside 0..%d", task, l->ntasks - 1);
        return -1;
    }
    int ni = l->node_of_task[task];
    if (ni < 0 || ni >= s->nnodes || strcmp(s->nodes[ni], node)) {
        snprintf(why, n, "task %d does not run on '%s'", task, node);
        return -1;
    }
    memcpy(r->node, node, sizeof r->node);
    memcpy(r->kind, kind, sizeof r->kind);
    r->rank = rank;
    r->task = task;
    return 0;
}

static void drain(const struct whale_report *r)
{
    for (int i = 0; i < g.ndrained; i++)
        if (!strcmp(g.drained[i], r->node))
            return; /* one report per node is enough (every survivor reports) */
    char reason[256];
    if (r->rank >= 0)
        snprintf(reason, sizeof reason, "whale: job %u step %u: rank %d (task %d) failed (%s)",
                 g.job, g.stepid, r->rank, r->task, r->kind);
    else
        snprintf(reason, sizeof reason, "whale: job %u step %u: spare task %d failed (%s)",
                 g.job, g.stepid, r->task, r->kind);
    update_node_msg_t m;
    slurm_init_update_node_msg(&m);
    m.node_names = (char *)r->node;
    m.node_state = NODE_STATE_DRAIN;
    m.reason = reason;
    m.reason_uid = (uint32_t)g.uid; /* the user whose step reported it */
    if (slurm_update_node(&m) != SLURM_SUCCESS) {
        slurm_error(PLUGIN_NAME ": cannot drain %s (%s): %s", r->node, reason,
                    slurm_strerror(slurm_get_errno()));
        return;
    }
    slurm_info(PLUGIN_NAME ": drained %s: %s", r->node, reason);
    if (g.ndrained < MAX_DRAINED)
        snprintf(g.drained[g.ndrained++], sizeof g.drained[0], "%s", r->node);
}

static void stop_task(const struct whale_report *r)
{
    pthread_mutex_lock(&g.lock);
    pid_t pid = r->task < g.ntasks ? g.pid_of_task[r->task] : 0;
    pthread_mutex_unlock(&g.lock);
    if (pid <= 0)
        return; /* not here, or already gone */
    if (kill(pid, SIGKILL) == 0)
        slurm_info(PLUGIN_NAME ": killed task %d (pid %d, rank %d, %s): the step replaced it",
                   r->task, (int)pid, r->rank, r->kind);
}

/* What slurmstepd itself sees of a task of this node. */
static enum whale_task_seen task_seen(int task)
{
    pthread_mutex_lock(&g.lock);
    pid_t pid = task < g.ntasks ? g.pid_of_task[task] : 0;
    pthread_mutex_unlock(&g.lock);
    if (pid == 0)
        return WHALE_TASK_UNKNOWN;
    if (pid < 0)
        return WHALE_TASK_GONE;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return WHALE_TASK_GONE;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    char *rp = strrchr(buf, ')');
    char st = rp && rp[1] == ' ' ? rp[2] : '?';
    return st == 'T' || st == 't' ? WHALE_TASK_STOPPED
         : st == 'Z' || st == 'X' ? WHALE_TASK_GONE : WHALE_TASK_RUNNING;
}

/* Does NODE's slurmd accept a TCP connection from here within 2 s?
 * 1 yes, 0 refused / unreachable / no answer, -1 cannot tell. */
static int node_answers(const char *node)
{
    node_info_msg_t *ni = NULL;
    if (slurm_load_node_single(&ni, (char *)node, SHOW_ALL) != SLURM_SUCCESS || !ni ||
        ni->record_count < 1) {
        if (ni)
            slurm_free_node_info_msg(ni);
        return -1;
    }
    char addr[256], port[16];
    const node_info_t *n = &ni->node_array[0];
    snprintf(addr, sizeof addr, "%s", n->node_addr ? n->node_addr : node);
    snprintf(port, sizeof port, "%u", (unsigned)n->port);
    slurm_free_node_info_msg(ni);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    if (getaddrinfo(addr, port, &hints, &ai) || !ai)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ans = -1;
    if (fd >= 0) {
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ans = 1;
        } else if (errno == EINPROGRESS) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            int err = 0;
            socklen_t len = sizeof err;
            if (poll(&p, 1, 2000) == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
                ans = err == 0 ? 1 : 0;
            else
                ans = 0; /* no answer: the link is down */
        } else {
            ans = errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH ? 0 : -1;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return ans;
}

/* Has the step any process left on NODE (another node of the step)? Asked
 * of that node's slurmd (REQUEST_JOB_STEP_PIDS through the Slurm API):
 * RUNNING when it lists some, GONE when it lists none or has no
 * slurmstepd of the step any more (every task there ended: slurmstepd
 * leaves with its last task), UNKNOWN when it cannot tell. This is how a
 * task that was alone on its node is judged: no task of the step is left
 * there to report it to that node's own slurmstepd. */
static enum whale_task_seen step_seen_on(const char *node)
{
    slurm_step_id_t id = { .job_id = g.job, .step_id = g.stepid, .step_het_comp = NO_VAL };
    job_step_pids_response_msg_t *resp = NULL;
    int rc = slurm_job_step_get_pids(&id, (char *)node, &resp);
    int err = slurm_get_errno();
    enum whale_task_seen seen = WHALE_TASK_UNKNOWN;
    bool listed = false;
    uint32_t npids = 0;
    if (resp && resp->pid_list) {
        ListIterator it = slurm_list_iterator_create(resp->pid_list);
        job_step_pids_t *p;
        while ((p = slurm_list_next(it)))
            if (p->node_name && !strcmp(p->node_name, node)) {
                listed = true;
                npids += p->pid_cnt;
            }
        slurm_list_iterator_destroy(it);
    }
    if (listed)
        seen = npids ? WHALE_TASK_RUNNING : WHALE_TASK_GONE;
    else if (rc == ESLURM_INVALID_JOB_ID || (rc != SLURM_SUCCESS && err == ESLURM_INVALID_JOB_ID))
        seen = WHALE_TASK_GONE; /* its slurmd has no slurmstepd of this step (22.05
                                   returns that code itself, not through errno) */
    slurm_verbose(PLUGIN_NAME ": step %u.%u on %s: %s (%s)", g.job, g.stepid, node,
                  seen == WHALE_TASK_GONE ? "no process left" : seen == WHALE_TASK_RUNNING
                  ? "processes left" : "unknown", rc == SLURM_SUCCESS ? "listed"
                  : slurm_strerror(rc == SLURM_ERROR ? err : rc));
    if (resp)
        slurm_job_step_pids_response_msg_free(resp);
    return seen;
}

/* Tasks of the step on NODE (the layout this node computed). */
static int tasks_on(const char *node)
{
    const struct whale_layout *l = &g.step->layout;
    int k = 0;
    for (int t = 0; t < l->ntasks; t++) {
        int ni = l->node_of_task[t];
        k += ni >= 0 && ni < g.step->nnodes && !strcmp(g.step->nodes[ni], node);
    }
    return k;
}

static bool drained_here(const char *node)
{
    for (int i = 0; i < g.ndrained; i++)
        if (!strcmp(g.drained[i], node))
            return true;
    return false;
}

/* A crash or hang of a task of another node: what that node's slurmd
 * says of the step there. A task alone on its node may have been reported
 * before its slurmstepd finished leaving (a report written right after the
 * kill): then ask again for a while. Nodes with several tasks are asked
 * once (a sibling still there reports to that node's own slurmstepd). */
static enum whale_task_seen remote_seen(const char *node)
{
    enum whale_task_seen seen = step_seen_on(node);
    for (int i = 0; i < 20 && seen != WHALE_TASK_GONE && tasks_on(node) == 1 &&
                    !atomic_load(&g.stopping); i++) {
        usleep(500 * 1000);
        seen = step_seen_on(node);
    }
    return seen;
}

static void handle(const char *line)
{
    struct whale_report r;
    char why[160];
    if (whale_report_parse(line, g.step, &r, why, sizeof why)) {
        slurm_error(PLUGIN_NAME ": ignored failure report '%.80s' in %s: %s", line, g.path, why);
        return;
    }
    /* srun's exit status is the user's own business: any well-formed
     * report leaves that task out of it (result.c) */
    whale_result_task_failed(r.task);
    bool here = !strcmp(r.node, g.host);
    bool node_kind = !strcmp(r.kind, "node") || !strcmp(r.kind, "link");
    if (!here && drained_here(r.node))
        return; /* judged already (every survivor reports) */
    enum whale_task_seen seen = here ? task_seen(r.task)
                              : !node_kind ? remote_seen(r.node) : WHALE_TASK_UNKNOWN;
    int answers = !here && node_kind ? node_answers(r.node) : -1;
    unsigned act = whale_report_judge(&r, here, seen, answers, why, sizeof why);
    if (act & WHALE_REPORT_KILL)
        stop_task(&r);
    if (act & WHALE_REPORT_DRAIN)
        drain(&r);
    else if (here || node_kind)
        slurm_error(PLUGIN_NAME ": failure report '%.80s' not believed, nothing drained: %s", line,
                    why);
    else
        slurm_verbose(PLUGIN_NAME ": failure report '%.80s': %s", line, why);
}

/* O_RDWR: open never blocks and read never sees end-of-file when the last
 * writer closes; O_NOFOLLOW + fstat: the directory may be the user's.
 * Opened before the reader thread starts, so that a task's report written
 * right after the step starts never finds the FIFO without a reader
 * (a non-blocking writer then gets ENXIO and the report would be lost). */
static int open_fifo(void)
{
    int fd = openat(g.dir_fd, FIFO_NAME, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISFIFO(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        errno = fd >= 0 ? EINVAL : errno;
        return -1;
    }
    return fd;
}

static void *reader(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[1024];
    size_t have = 0;
    bool skipping = false; /* inside an over-long line */
    while (!atomic_load(&g.stopping)) {
        ssize_t k = read(fd, buf + have, sizeof buf - 1 - have);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || atomic_load(&g.stopping))
            break;
        have += (size_t)k;
        buf[have] = '\0';
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', have - (size_t)(start - buf)))) {
            *nl = '\0';
            if (!skipping && *start)
                handle(start);
            skipping = false;
            start = nl + 1;
        }
        have -= (size_t)(start - buf);
        memmove(buf, start, have);
        if (have == sizeof buf - 1) {
            have = 0;
            skipping = true;
        }
    }
    close(fd);
    return NULL;
}

/* Undo what whale_report_open made, through the directory descriptors. */
static void remove_fifo_dir(void)
{
    if (g.dir_fd >= 0) {
        unlinkat(g.dir_fd, FIFO_NAME, 0);
        close(g.dir_fd);
    }
    if (g.parent_fd >= 0) {
        const char *b = strrchr(g.dir, '/');
        if (g.dir[0] && b)
            unlinkat(g.parent_fd, b + 1, AT_REMOVEDIR);
        close(g.parent_fd);
    }
    g.parent_fd = g.dir_fd = -1;
    g.dir[0] = '\0';
}

/* The FIFO lives in a fresh directory of an unpredictable name (mkdtemp):
 * a fixed name in /tmp let any user create it first (mkfifo) and so turn
 * off the drain of another user's step. As root the directory stays
 * root's with mode 0711 - the tasks reach the FIFO by its full name but
 * cannot list, rename or replace anything in it - and only the FIFO is
 * given to the job's user, who writes it. */
static int make_fifo(const char *base, uid_t uid, gid_t gid)
{
    g.parent_fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (g.parent_fd < 0)
        return -1;
    if ((size_t)snprintf(g.dir, sizeof g.dir, "%s/whale.XXXXXX", base) >= sizeof g.dir) {
        g.dir[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(g.dir)) { /* mode 0700 */
        g.dir[0] = '\0';
        return -1;
    }
    g.dir_fd = open(g.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (g.dir_fd < 0)
        return -1;
    snprintf(g.path, sizeof g.path, "%s/" FIFO_NAME, g.dir);
    if (mkfifoat(g.dir_fd, FIFO_NAME, 0600))
        return -1;
    if (geteuid() == 0 && (fchmod(g.dir_fd, 0711) ||
                           fchownat(g.dir_fd, FIFO_NAME, uid, gid, AT_SYMLINK_NOFOLLOW)))
        return -1;
    return 0;
}

int whale_report_open(const char *dir, unsigned job, unsigned stepid, uid_t uid, gid_t gid,
                      const struct whale_step *s)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1))
        snprintf(host, sizeof host, "node");
    snprintf(g.host, sizeof g.host, "%s", host);
    g.uid = uid;
    const char *base = dir && *dir ? dir : "/tmp";
    g.path[0] = '\0';
    if (make_fifo(base, uid, gid))
        goto fail;
    g.step = s;
    g.job = job;
    g.stepid = stepid;
    g.ntasks = s->layout.ntasks;
    g.pid_of_task = calloc((size_t)(g.ntasks > 0 ? g.ntasks : 1), sizeof(pid_t));
    atomic_store(&g.stopping, false);
    int fd = g.pid_of_task ? open_fifo() : -1;
    if (fd < 0 || pthread_create(&g.thread, NULL, reader, (void *)(intptr_t)fd)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        free(g.pid_of_task);
        g.pid_of_task = NULL;
        errno = e;
        goto fail;
    }
    g.running = true;
    return 0;
fail:;
    int e = errno;
    slurm_error(PLUGIN_NAME ": cannot create the failure report FIFO %s: %s (failed nodes "
                "will not be drained)", g.path[0] ? g.path : g.dir[0] ? g.dir : base, strerror(e));
    remove_fifo_dir();
    g.path[0] = '\0';
    return -1;
}

void whale_report_this_node(const char *name)
{
    if (name && *name)
        snprintf(g.host, sizeof g.host, "%s", name);
}

const char *whale_report_path(void)
{
    return g.running ? g.path : NULL;
}

void whale_report_task_pid(int gid, pid_t pid)
{
    if (!g.running)
        return;
    pthread_mutex_lock(&g.lock);
    if (gid >= 0 && gid < g.ntasks)
        g.pid_of_task[gid] = pid > 0 ? pid : g.pid_of_task[gid] != 0 ? -1 : 0;
    pthread_mutex_unlock(&g.lock);
}

void whale_report_close(void)
{
    if (!g.running)
        return;
    /* wake the reader with an empty line (no pthread_cancel: a cancelled
     * thread in slurmstepd could hold one of its locks) */
    atomic_store(&g.stopping, true);
    int fd = openat(g.dir_fd, FIFO_NAME, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        if (write(fd, "\n", 1) < 0)
            slurm_verbose(PLUGIN_NAME ": cannot wake the report reader: %s", strerror(errno));
        close(fd);
        pthread_join(g.thread, NULL);
    } else {
        pthread_detach(g.thread); /* its FIFO is gone: it exits with the process */
    }
    remove_fifo_dir();
    free(g.pid_of_task);
    g.pid_of_task = NULL;
    g.running = false;
    g.path[0] = '\0';
    g.ndrained = 0;
}
