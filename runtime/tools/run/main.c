#define _GNU_SOURCE
/* whale-run: start N tasks of a program on this machine with the same
 * environment contract (WHALE_* + PMIx) that `srun --whale-...` gives them,
 * like torchrun/mpirun for one machine.
 *
 *   whale-run -n 8 [--tp 2 --pp 2 --nodes 2 --spares 1 ...] PROG ARGS
 *
 * Output lines are prefixed with the rank ("3: ..."); SIGINT/SIGTERM are
 * forwarded to every task (a second one kills them); when a task fails the
 * others are stopped (unless --keep-going, or the step is elastic: it has
 * spares or WHALE_ELASTIC=1, and replaces or drops the failed rank itself)
 * and whale-run exits with the worst exit status of the tasks that failed
 * on their own (exit_status). Tasks that an elastic step reported as
 * replaced (run_report.c) do not count, as under srun. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pmix_host.h"
#include "run_limits.h"
#include "run_report.h"
#include "task_env.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/clock.h"
#include "whale_config.h"

extern char **environ;

struct child {
    pid_t pid;
    int fd[2];          /* stdout, stderr read ends (-1 when closed) */
    char *buf[2];
    size_t len[2], cap[2];
    bool exited;
    int status;         /* exit code (128+sig for a signal) */
    bool by_signal;     /* status is 128+sig: it was killed by a signal */
    bool stopped_by_us; /* we signalled it before it exited */
    bool replaced;      /* an elastic step reported it failed and went on */
    char label[16];
};

static int g_sigpipe[2] = { -1, -1 };

static void on_signal(int sig)
{
    int e = errno;
    unsigned char c = (unsigned char)sig;
    if (write(g_sigpipe[1], &c, 1) < 0) {
        /* nothing to do: the pipe is full, a wake-up is pending anyway */
    }
    errno = e;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: whale-run -n N [options] PROG [ARGS...]\n"
            "Start N tasks of PROG on this machine with the Whale environment contract\n"
            "(WHALE_* variables and a PMIx server), as `srun --whale-...` would on a cluster.\n"
            "\n"
            "  -n, --ntasks N      number of tasks (required)\n"
            "      --tp N          tensor-parallel degree (default 1)\n"
            "      --pp N          pipeline-parallel degree (default 1)\n"
            "      --dp N          data-parallel degree (default: working tasks / (tp*pp))\n"
            "      --ep N          expert-parallel degree, divides DP (default 1)\n"
            "      --nodes K       simulate K nodes: tasks split in blocks, WHALE_NODE=node<i> (default 1)\n"
            "      --spares S      hold back the last S simulated nodes as hot spares (default 0)\n"
            "      --plan PLAN     value of WHALE_PLAN (path or inline JSON)\n"
            "      --keep-going    do not stop the other tasks when one fails (always so for an\n"
            "                      elastic step: spares, or WHALE_ELASTIC=1)\n"
            "      --timeout SEC   stop every task after SEC seconds (exit status 124)\n"
            "      --no-label      do not prefix output lines with the rank\n"
            "      --bind core|none  give each task its share of this process's CPUs when there\n"
            "                      are at least as many CPUs as tasks (default core)\n"
            "  -h, --help          show this help\n"
            "      --help-env      every WHALE_* variable: type, default, meaning\n"
            "  -V, --version       show the version\n"
            "\n"
            "Network: every task is on this machine, so UCX_NET_DEVICES defaults to lo (UCX's\n"
            "network transports stay on loopback); a UCX_NET_DEVICES you set is kept.\n\n"
            "Limits: each task needs about 3 open files here; the soft limit is raised to the\n"
            "hard one, and a run that still does not fit is refused before any task starts.\n"
            "\n"
            "Exit status: 0 when every task succeeded, else the worst status of a task that\n"
            "failed on its own (128+N for signal N; a signal beats an exit code, else the\n"
            "higher number wins; tasks failing within 2 s of the first all count; tasks an\n"
            "elastic step replaced do not), 124 on --timeout, 128+N when whale-run itself\n"
            "got signal N; 2 for usage errors.\n");
}

/* whale/envnum.h's checked parser, with the option named */
static int parse_pos(const char *opt, const char *s, int lo, int *out)
{
    long v;
    if (whale_parse_long(s, lo, INT_MAX, &v)) {
        fprintf(stderr, "whale-run: %s='%s' must be an integer >= %d\n", opt, s, lo);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Is every task that has not exited in the stopped state ('T' in
 * /proc/PID/stat)? */
static bool all_stopped(const struct child *ch, int n)
{
    for (int t = 0; t < n; t++) {
        if (ch[t].exited || ch[t].pid <= 0)
            continue;
        char p[64], buf[512];
        snprintf(p, sizeof p, "/proc/%d/stat", (int)ch[t].pid);
        FILE *f = fopen(p, "r");
        if (!f)
            return false;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        const char *rp = strrchr(buf, ')'); /* the command name may hold spaces */
        if (!rp || rp[1] != ' ' || rp[2] != 'T')
            return false;
    }
    return true;
}

static void emit(struct child *c, int which, const char *line, size_t n, bool label)
{
    int out = which == 0 ? STDOUT_FILENO : STDERR_FILENO;
    char head[24];
    size_t hl = label ? (size_t)snprintf(head, sizeof head, "%s: ", c->label) : 0;
    /* One write per line so lines of different tasks never interleave. */
    char stackbuf[4096];
    char *b = hl + n + 1 <= sizeof stackbuf ? stackbuf : malloc(hl + n + 1);
    if (!b)
        return;
    memcpy(b, head, hl);
    memcpy(b + hl, line, n);
    b[hl + n] = '\n';
    size_t off = 0, tot = hl + n + 1;
    while (off < tot) {
        ssize_t w = write(out, b + off, tot - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (b != stackbuf)
        free(b);
}

static void drain(struct child *c, int which, bool label, bool eof)
{
    char *b = c->buf[which];
    size_t start = 0;
    if (!b)
        return; /* nothing was ever read from this stream */
    for (size_t i = 0; i < c->len[which]; i++)
        if (b[i] == '\n') {
            emit(c, which, b + start, i - start, label);
            start = i + 1;
        }
    if (eof && start < c->len[which]) {
        emit(c, which, b + start, c->len[which] - start, label);
        start = c->len[which];
    }
    memmove(b, b + start, c->len[which] - start);
    c->len[which] -= start;
}

static void read_fd(struct child *c, int which, bool label)
{
    if (c->cap[which] - c->len[which] < 4096) {
        size_t nc = c->cap[which] ? c->cap[which] * 2 : 8192;
        char *nb = realloc(c->buf[which], nc);
        if (!nb)
            return;
        c->buf[which] = nb;
        c->cap[which] = nc;
    }
    ssize_t n = read(c->fd[which], c->buf[which] + c->len[which], c->cap[which] - c->len[which]);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close(c->fd[which]);
        c->fd[which] = -1;
        drain(c, which, label, true);
        return;
    }
    c->len[which] += (size_t)n;
    drain(c, which, label, false);
}

static void signal_all(struct child *ch, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (!ch[i].exited && ch[i].pid > 0) {
            ch[i].stopped_by_us = true;
            kill(-ch[i].pid, sig); /* its process group: helpers it started too */
        }
}

static char **build_env(struct run_layout *lay, struct pmix_host *ph, int task)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        env[i] = strdup(environ[i]);
    /* Every task runs on this machine: UCX's network transports (TCP when
     * UCX_TLS asks for it, RDMA loopback) stay on loopback unless the user
     * chose devices. Without this UCX spread connections over every
     * interface, and one that vanished mid-run (another cluster's bridge)
     * silenced them with no error. */
    bool have_dev = getenv("UCX_NET_DEVICES") != NULL;
    if ((!have_dev && run_env_set(&env, "UCX_NET_DEVICES", "lo")) ||
        run_layout_env(lay, task, &env) || pmix_host_child_env(ph, task, &env)) {
        for (size_t i = 0; env[i]; i++)
            free(env[i]);
        free(env);
        return NULL;
    }
    return env;
}

/* What the command line asked for. */
struct run_opts {
    struct run_layout_opts lo;
    bool label, keep_going, bind;
    bool elastic;  /* spares or WHALE_ELASTIC=1: the step outlives a failed task */
    int timeout;   /* s, 0: none */
    char **prog;   /* the program and its arguments */
};

static const int g_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD };
#define RUN_GO (-1) /* a phase's "go on"; anything else is the exit status */
/* After a task fails, the others are stopped only this much later, so that
 * tasks failing at about the same moment all count in the exit status,
 * whatever order they were reaped in. */
#define STOP_WINDOW_S 2.0

static int parse_args(int argc, char **argv, struct run_opts *o)
{
    struct run_layout_opts lo = { .ntasks = 0, .spares = 0, .nodes = 1 };
    whale_grid_init(&lo.grid);
    lo.dp = 0; /* derived from the working tasks */
    bool label = true, keep_going = false;
    int timeout = 0;
    bool bind = true;
    enum { O_TP = 256, O_PP, O_DP, O_EP, O_NODES, O_SPARES, O_PLAN, O_KEEP, O_TIMEOUT, O_NOLABEL, O_BIND,
           O_HELPENV };
    static const struct option opts[] = {
        { "ntasks", required_argument, NULL, 'n' }, { "tp", required_argument, NULL, O_TP },
        { "pp", required_argument, NULL, O_PP }, { "dp", required_argument, NULL, O_DP },
        { "ep", required_argument, NULL, O_EP },
        { "nodes", required_argument, NULL, O_NODES }, { "spares", required_argument, NULL, O_SPARES },
        { "plan", required_argument, NULL, O_PLAN }, { "keep-going", no_argument, NULL, O_KEEP },
        { "timeout", required_argument, NULL, O_TIMEOUT }, { "no-label", no_argument, NULL, O_NOLABEL },
        { "bind", required_argument, NULL, O_BIND }, { "help-env", no_argument, NULL, O_HELPENV },
        { "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 } };
    int c;
    while ((c = getopt_long(argc, argv, "+n:hV", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'n': bad = parse_pos("--ntasks", optarg, 1, &lo.ntasks); break;
        case O_TP: bad = parse_pos("--tp", optarg, 1, &lo.tp); break;
        case O_PP: bad = parse_pos("--pp", optarg, 1, &lo.pp); break;
        case O_DP: bad = parse_pos("--dp", optarg, 1, &lo.dp); break;
        case O_EP: bad = parse_pos("--ep", optarg, 1, &lo.ep); break;
        case O_NODES: bad = parse_pos("--nodes", optarg, 1, &lo.nodes); break;
        case O_SPARES: bad = parse_pos("--spares", optarg, 0, &lo.spares); break;
        case O_PLAN: lo.plan = optarg; break;
        case O_KEEP: keep_going = true; break;
        case O_TIMEOUT: bad = parse_pos("--timeout", optarg, 1, &timeout); break;
        case O_NOLABEL: label = false; break;
        case O_BIND:
            if (!strcmp(optarg, "core"))
                bind = true;
            else if (!strcmp(optarg, "none"))
                bind = false;
            else {
                fprintf(stderr, "whale-run: --bind=%s: use core or none\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case O_HELPENV: whale_knobs_print(stdout, NULL, 0); return 0;
        case 'V': printf("whale-run %s\n", WHALE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    if (lo.ntasks < 1) {
        fprintf(stderr, "whale-run: -n/--ntasks N is required\n");
        usage(stderr);
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "whale-run: no program to run\n");
        usage(stderr);
        return 2;
    }
    *o = (struct run_opts){ .lo = lo, .label = label, .keep_going = keep_going, .bind = bind,
                            .timeout = timeout, .prog = &argv[optind] };
    return RUN_GO;
}

static int install_signals(void)
{
    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK)) {
        perror("whale-run: pipe");
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof g_sigs / sizeof *g_sigs; i++)
        sigaction(g_sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return RUN_GO;
}

/* Fork and exec every task; returns 0, or 1 with *started tasks running
 * (killed by the caller). */
static int start_tasks(struct child *ch, int n, struct run_layout *lay, struct pmix_host *ph,
                       const struct run_opts *o, int *started_out)
{
    /* Binding: with at least as many CPUs as tasks, task t gets CPUs
     * [t*k, (t+1)*k) of our affinity mask (k = CPUs / tasks), as mpirun and
     * srun --cpu-bind do; two ranks never fight over one core then. */
    cpu_set_t avail;
    int cpus[CPU_SETSIZE], ncpu = 0;
    if (sched_getaffinity(0, sizeof avail, &avail) == 0)
        for (int c2 = 0; c2 < CPU_SETSIZE; c2++)
            if (CPU_ISSET(c2, &avail))
                cpus[ncpu++] = c2;
    int per = o->bind && ncpu >= n ? ncpu / n : 0;
    int rc = 0, started = 0;
    for (int t = 0; t < n; t++) {
        struct child *k = &ch[t];
        int r = run_layout_rank(lay, t);
        if (r >= 0)
            snprintf(k->label, sizeof k->label, "%d", r);
        else
            snprintf(k->label, sizeof k->label, "s%d", t);
        char **env = build_env(lay, ph, t);
        int po[2], pe[2];
        if (!env || pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
            fprintf(stderr, "whale-run: cannot prepare task %d: %s\n", t,
                    env ? strerror(errno) : "out of memory building its environment");
            rc = 1;
            break;
        }
        /* Signals stay blocked from fork until the child has dropped our
         * handlers: a SIGTERM from signal_all() that reached the child in
         * between ran our handler there, which wrote into the inherited
         * self-pipe, and we took the task's signal for our own (exit 143
         * instead of the failing task's status). */
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, &old);
        pid_t pid = fork();
        if (pid == 0) {
            struct sigaction dfl = { .sa_handler = SIG_DFL };
            for (size_t i = 0; i < sizeof g_sigs / sizeof *g_sigs; i++)
                sigaction(g_sigs[i], &dfl, NULL);
            signal(SIGPIPE, SIG_DFL);
            close(g_sigpipe[0]);
            close(g_sigpipe[1]);
            sigprocmask(SIG_SETMASK, &old, NULL); /* a pending SIGTERM ends it here */
            setpgid(0, 0);
            if (per > 0) {
                cpu_set_t mine;
                CPU_ZERO(&mine);
                for (int c2 = t * per; c2 < (t + 1) * per; c2++)
                    CPU_SET(cpus[c2], &mine);
                sched_setaffinity(0, sizeof mine, &mine);
            }
            dup2(po[1], STDOUT_FILENO);
            dup2(pe[1], STDERR_FILENO);
            environ = env;
            execvp(o->prog[0], o->prog);
            fprintf(stderr, "whale-run: cannot execute %s: %s\n", o->prog[0], strerror(errno));
            _exit(127);
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        for (size_t i = 0; env[i]; i++)
            free(env[i]);
        free(env);
        close(po[1]);
        close(pe[1]);
        if (pid < 0) {
            perror("whale-run: fork");
            close(po[0]);
            close(pe[0]);
            rc = 1;
            break;
        }
        setpgid(pid, pid); /* also from here: no race with an early kill */
        k->pid = pid;
        k->fd[0] = po[0];
        k->fd[1] = pe[0];
        fcntl(po[0], F_SETFL, O_NONBLOCK);
        fcntl(pe[0], F_SETFL, O_NONBLOCK);
        started++;
    }
    *started_out = started;
    return rc;
}

/* Output, child exits, signals, deadlines until every task is gone.
 * Returns rc (an abort status may set it); *user_sig and *timed_out say
 * why the run stopped. */
static int event_loop(struct child *ch, int n, int started, int rc, struct pmix_host *ph,
                      const struct run_opts *o, struct run_report *rep, int *user_sig_out,
                      bool *timed_out_out)
{
    const bool label = o->label, keep_going = o->keep_going || o->elastic;
    const int timeout = o->timeout;
    int live = started, user_sig = 0, nsig = 0;
    bool stopping = rc != 0, timed_out = false;
    double kill_at = 0, all_exited_at = 0, deadline = timeout ? whale_now_s() + timeout : 0;
    double stop_at = 0; /* end of the stop window after the first failure */
    bool *replaced = calloc((size_t)n, sizeof *replaced);
    const double grace = 3.0;
    struct pollfd *pfd = calloc((size_t)(2 * n + 1), sizeof *pfd);
    int *who = calloc((size_t)(2 * n + 1), sizeof *who);
    for (;;) {
        int open_fds = 0, np = 0;
        pfd[np] = (struct pollfd){ .fd = g_sigpipe[0], .events = POLLIN };
        who[np++] = -1;
        for (int t = 0; t < n; t++)
            for (int w = 0; w < 2; w++)
                if (ch[t].fd[w] >= 0) {
                    pfd[np] = (struct pollfd){ .fd = ch[t].fd[w], .events = POLLIN };
                    who[np++] = 2 * t + w;
                    open_fds++;
                }
        if (live == 0 && open_fds == 0)
            break;
        /* Every task exited but something it started still holds its
         * output open: give it a moment, then stop it (like Slurm's
         * process tracking does at step end). */
        if (live == 0 && !all_exited_at)
            all_exited_at = whale_now_s();
        if (live == 0 && whale_now_s() - all_exited_at > 1.0) {
            for (int t = 0; t < n; t++) {
                if (ch[t].pid > 0)
                    kill(-ch[t].pid, SIGKILL);
                for (int w = 0; w < 2; w++)
                    if (ch[t].fd[w] >= 0) {
                        drain(&ch[t], w, label, true);
                        close(ch[t].fd[w]);
                        ch[t].fd[w] = -1;
                    }
            }
            break;
        }
        /* Every live task is stopped (SIGSTOP: a hung rank an elastic step
         * replaced) and the others are done: nothing can resume it. */
        if (live > 0 && live < n && !stopping && all_stopped(ch, n)) {
            fprintf(stderr, "whale-run: the %d task(s) left are stopped (SIGSTOP) and every "
                    "other task has exited: killing them\n", live);
            signal_all(ch, n, SIGKILL);
            stopping = true;
        }
        int wait_ms = 200;
        int pr = poll(pfd, (nfds_t)np, wait_ms);
        if (pr < 0 && errno != EINTR)
            break;
        if (replaced && run_report_poll(rep, n, replaced))
            for (int t = 0; t < n; t++)
                ch[t].replaced = replaced[t];
        for (int i = 0; pr > 0 && i < np; i++) {
            if (!pfd[i].revents)
                continue;
            if (who[i] < 0) {
                unsigned char s;
                while (read(g_sigpipe[0], &s, 1) == 1) {
                    if (s == SIGCHLD)
                        continue;
                    user_sig = s;
                    nsig++;
                    if (nsig == 1) {
                        fprintf(stderr, "whale-run: got signal %d, stopping %d task(s)\n", s, live);
                        signal_all(ch, n, s == SIGHUP ? SIGTERM : s);
                        stopping = true;
                        kill_at = whale_now_s() + grace;
                    } else {
                        signal_all(ch, n, SIGKILL);
                    }
                }
            } else {
                read_fd(&ch[who[i] / 2], who[i] % 2, label);
            }
        }
        /* Reap. */
        for (;;) {
            int st;
            pid_t p = waitpid(-1, &st, WNOHANG);
            if (p <= 0)
                break;
            for (int t = 0; t < n; t++) {
                if (ch[t].pid != p)
                    continue;
                ch[t].exited = true;
                ch[t].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                ch[t].by_signal = !WIFEXITED(st);
                live--;
                if (ch[t].status != 0 && !ch[t].stopped_by_us) {
                    if (WIFSIGNALED(st))
                        fprintf(stderr, "whale-run: task %d (rank %s) killed by signal %d\n", t,
                                ch[t].label, WTERMSIG(st));
                    else
                        fprintf(stderr, "whale-run: task %d (rank %s) exited with status %d\n", t,
                                ch[t].label, ch[t].status);
                    /* the others are stopped after the stop window:
                     * tasks failing together all count (exit_status) */
                    if (!keep_going && !stopping && !stop_at)
                        stop_at = whale_now_s() + STOP_WINDOW_S;
                }
            }
        }
        bool aborted;
        int ast = pmix_host_abort_status(ph, &aborted);
        if (aborted && !stopping) {
            signal_all(ch, n, SIGTERM);
            stopping = true;
            kill_at = whale_now_s() + grace;
            if (!rc)
                rc = ast;
        }
        double t = whale_now_s();
        if (stop_at && !stopping && t >= stop_at && live > 0) {
            fprintf(stderr, "whale-run: stopping the other %d task(s)\n", live);
            signal_all(ch, n, SIGTERM);
            stopping = true;
            kill_at = t + grace;
        }
        if (deadline && t > deadline && !timed_out && live > 0) {
            fprintf(stderr, "whale-run: --timeout %d s reached, stopping %d task(s)\n", timeout, live);
            timed_out = true;
            signal_all(ch, n, SIGTERM);
            stopping = true;
            kill_at = t + grace;
        }
        if (stopping && kill_at && t > kill_at && live > 0) {
            signal_all(ch, n, SIGKILL);
            kill_at = 0;
        }
    }
    free(pfd);
    free(who);
    if (replaced)
        run_report_poll(rep, n, replaced); /* a report written just before the end */
    for (int t = 0; replaced && t < n; t++)
        ch[t].replaced = replaced[t];
    free(replaced);
    *user_sig_out = user_sig;
    *timed_out_out = timed_out;
    return rc;
}

/* Is exit status a (by_signal_a) worse than b? A death by a signal beats
 * any exit code; between two signals, and between two codes, the higher
 * number wins (man/whale-run.1, EXIT STATUS). */
static bool worse(int a, bool sig_a, int b, bool sig_b)
{
    if (sig_a != sig_b)
        return sig_a;
    return a > b;
}

/* The worst status of a task that failed on its own (ended before
 * whale-run stopped it: within the stop window of the first failure, or
 * on its own with --keep-going), leaving out the tasks an elastic step
 * replaced; 124 on --timeout; 128+N when whale-run itself got signal N. */
static int exit_status(const struct child *ch, int n, int rc, int user_sig, bool timed_out)
{
    int worst = rc;
    bool worst_sig = false;
    for (int t = 0; t < n; t++)
        if (ch[t].exited && !ch[t].stopped_by_us && !ch[t].replaced && ch[t].status != 0 &&
            worse(ch[t].status, ch[t].by_signal, worst, worst_sig)) {
            worst = ch[t].status;
            worst_sig = ch[t].by_signal;
        }
    if (timed_out)
        worst = 124;
    else if (user_sig && worst == 0)
        worst = 128 + user_sig;
    else if (user_sig)
        worst = worst > 128 + user_sig ? worst : 128 + user_sig;
    return worst;
}

int main(int argc, char **argv)
{
    struct run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != RUN_GO)
        return rc;
    whale_log_init_from_env();
    char why[512];
    if (run_check_limits(o.lo.ntasks, why, sizeof why)) {
        fprintf(stderr, "whale-run: %s\n", why);
        return 1;
    }
    struct run_layout *lay = NULL;
    if (run_layout_new(&o.lo, &lay))
        return 2;
    if ((rc = install_signals()) != RUN_GO) {
        run_layout_free(lay);
        return rc;
    }
    struct pmix_host *ph = NULL;
    if (pmix_host_start(o.lo.ntasks, &ph)) {
        run_layout_free(lay);
        return 1;
    }
    int n = o.lo.ntasks;
    struct child *ch = calloc((size_t)n, sizeof *ch);
    if (!ch) {
        pmix_host_stop(ph);
        run_layout_free(lay);
        return 1;
    }
    int started = 0, user_sig = 0;
    bool timed_out = false;
    /* an elastic step outlives a failed task as under srun: the survivors
     * are not stopped, and the tasks it replaced do not count */
    const char *el = whale_knob_getenv("WHALE_ELASTIC");
    o.elastic = run_layout_world(lay) < n || (el && !strcmp(el, "1"));
    struct run_report rep = { .fd = -1 };
    if (o.elastic)
        run_report_open(&rep);
    rc = start_tasks(ch, n, lay, ph, &o, &started);
    if (rc && started)
        signal_all(ch, n, SIGKILL);
    rc = event_loop(ch, n, started, rc, ph, &o, &rep, &user_sig, &timed_out);
    run_report_close(&rep);
    int worst = exit_status(ch, n, rc, user_sig, timed_out);
    for (int t = 0; t < n; t++) {
        free(ch[t].buf[0]);
        free(ch[t].buf[1]);
    }
    free(ch);
    pmix_host_stop(ph);
    run_layout_free(lay);
    return worst;
}
