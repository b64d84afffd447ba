/* srun's exit status for a step with spares: the training's result, not the
 * replaced task's death.
 *
 * srun exits with the highest task status (a signal as 128 + signal): a
 * rank that was killed (or stopped, then killed by report.c) and replaced
 * by a spare makes srun exit 137 although every step completed. srun gives
 * a plugin no task statuses, so the step's slurmstepds tell it:
 *   - srun (local_user_init) listens on a TCP port and exports
 *     SLURM_WHALE_RESULT=PORT:TOKEN to the step (a SLURM_* name: srun
 *     forwards it even with --export=NONE, which drops every other
 *     variable of the user's environment; slurmstepd removes it from the
 *     tasks' environment);
 *   - every slurmstepd connects to SLURM_SRUN_COMM_HOST (the address srun
 *     is reachable at, set by slurmd) and sends "TOKEN S TASK STATUS" when a
 *     task of its node exits (task_exit, before Slurm's own exit message),
 *     and "TOKEN F TASK" for each task a failure report named (report.c);
 *   - at srun's exit (slurm_spank_exit, run by srun's atexit after its
 *     status is final) the plugin recomputes the status with Slurm's rule
 *     over the tasks that were not reported failed, and exits with it —
 *     only when some task was reported failed, and only when every other
 *     task's status arrived (otherwise Slurm's status stands).
 * The token (random, in the step's environment only) keeps other users'
 * processes from changing the result. */
#define _GNU_SOURCE
#include "plugin.h"
#include "elastic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ENV_RESULT WHALE_SPANK_RESULT_ENV

/* ---- srun: collect ------------------------------------------------------- */

static struct {
    int fd;                 /* listening socket, -1 when off */
    pthread_t thread;
    bool running;
    char token[33];
    int ntasks;
    int *status;            /* [ntasks] raw wait status, -1 unknown */
    bool *failed;           /* [ntasks] named by a failure report */
    pthread_mutex_t lock;
} s = { .fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

void whale_result_record(const char *line, int ntasks, int *status, bool *failed,
                         const char *token)
{
    char tok[40], kind[2];
    int task = -1, st = 0;
    int n = sscanf(line, "%39s %1s %d %d", tok, kind, &task, &st);
    if (n < 3 || strcmp(tok, token) || task < 0 || task >= ntasks)
        return;
    if (kind[0] == 'F')
        failed[task] = true;
    else if (kind[0] == 'S' && n == 4 && st >= 0)
        status[task] = st;
}

int whale_result_status(int ntasks, const int *status, const bool *failed)
{
    int nfailed = 0, max_code = 0, max_sig = 0;
    for (int t = 0; t < ntasks; t++) {
        if (failed[t]) {
            nfailed++;
            continue;
        }
        if (status[t] < 0)
            return -1; /* incomplete: Slurm's status stands */
        if (WIFSIGNALED(status[t]) && WTERMSIG(status[t]) > max_sig)
            max_sig = WTERMSIG(status[t]);
        else if (WIFEXITED(status[t]) && WEXITSTATUS(status[t]) > max_code)
            max_code = WEXITSTATUS(status[t]);
    }
    if (!nfailed)
        return -1; /* nothing of Whale's to correct */
    return max_sig ? 128 + max_sig : max_code;
}

static void serve_one(int c)
{
    char line[128];
    size_t have = 0;
    struct pollfd p = { .fd = c, .events = POLLIN };
    /* one short line per connection; a silent peer is dropped */
    while (have < sizeof line - 1 && poll(&p, 1, 2000) == 1) {
        ssize_t k = read(c, line + have, sizeof line - 1 - have);
        if (k <= 0)
            break;
        have += (size_t)k;
        if (memchr(line, '\n', have))
            break;
    }
    line[have] = '\0';
    close(c);
    pthread_mutex_lock(&s.lock);
    whale_result_record(line, s.ntasks, s.status, s.failed, s.token);
    pthread_mutex_unlock(&s.lock);
}

static void *serve(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept4(s.fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL; /* the socket was shut down */
        }
        serve_one(c);
    }
}

int whale_result_listen(int ntasks)
{
    unsigned char rnd[16];
    if (ntasks <= 0 || getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return -1;
    for (int i = 0; i < 16; i++)
        snprintf(s.token + 2 * i, 3, "%02x", rnd[i]);
    s.status = malloc((size_t)ntasks * sizeof(int));
    s.failed = calloc((size_t)ntasks, sizeof(bool));
    if (!s.status || !s.failed)
        goto fail;
    for (int t = 0; t < ntasks; t++)
        s.status[t] = -1;
    s.ntasks = ntasks;
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
    socklen_t len = sizeof a;
    if (s.fd < 0 || bind(s.fd, (struct sockaddr *)&a, sizeof a) || listen(s.fd, 256) ||
        getsockname(s.fd, (struct sockaddr *)&a, &len))
        goto fail;
    char v[64];
    snprintf(v, sizeof v, "%u:%s", ntohs(a.sin_port), s.token);
    if (setenv(ENV_RESULT, v, 1) || pthread_create(&s.thread, NULL, serve, NULL))
        goto fail;
    s.running = true;
    return 0;
fail:
    slurm_verbose(PLUGIN_NAME ": no result channel (%s): srun's status stays Slurm's",
                  strerror(errno));
    if (s.fd >= 0)
        close(s.fd);
    s.fd = -1;
    free(s.status);
    free(s.failed);
    s.status = NULL;
    s.failed = NULL;
    return -1;
}

void whale_result_exit(void)
{
    if (!s.running)
        return;
    /* stepds send before Slurm's exit message: what is queued is complete */
    shutdown(s.fd, SHUT_RDWR);
    pthread_join(s.thread, NULL);
    s.running = false;
    close(s.fd);
    s.fd = -1;
    int rc = whale_result_status(s.ntasks, s.status, s.failed);
    if (rc >= 0) {
        int n = 0;
        for (int t = 0; t < s.ntasks; t++)
            n += s.failed[t];
        slurm_info(PLUGIN_NAME ": %d replaced task(s) do not count: exit status %d (the "
                   "training's)", n, rc);
        fflush(NULL);
        _exit(rc);
    }
}

/* ---- slurmstepd: send ---------------------------------------------------- */

static struct {
    char host[256];
    char port[8];
    char token[40];
} r;

void whale_result_target(const char *comm_host, const char *value)
{
    r.host[0] = '\0';
    if (!comm_host || !value)
        return;
    unsigned port = 0;
    char tok[40];
    if (sscanf(value, "%u:%39s", &port, tok) != 2 || port == 0 || port > 65535 ||
        strlen(tok) != 32)
        return;
    snprintf(r.host, sizeof r.host, "%s", comm_host);
    snprintf(r.port, sizeof r.port, "%u", port);
    memcpy(r.token, tok, sizeof r.token);
}

static void send_line(const char *line)
{
    if (!r.host[0])
        return;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    if (getaddrinfo(r.host, r.port, &hints, &ai) || !ai)
        return;
    int c = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c >= 0) {
        /* never hold slurmstepd up for long: srun may be gone */
        int ok = connect(c, ai->ai_addr, ai->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
            struct pollfd p = { .fd = c, .events = POLLOUT };
            int err = 0;
            socklen_t el = sizeof err;
            ok = poll(&p, 1, 1000) == 1 && !getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) &&
                 err == 0;
        }
        if (ok && write(c, line, strlen(line)) < 0)
            slurm_verbose(PLUGIN_NAME ": result to srun: %s", strerror(errno));
        close(c);
    }
    freeaddrinfo(ai);
}

void whale_result_task_exit(int task, int status)
{
    char line[96];
    snprintf(line, sizeof line, "%s S %d %d\n", r.token, task, status);
    send_line(line);
}

void whale_result_task_failed(int task)
{
    char line[96];
    snprintf(line, sizeof line, "%s F %d\n", r.token, task);
    send_line(line);
}
