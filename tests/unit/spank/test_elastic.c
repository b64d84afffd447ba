/* The plugin's elastic side outside Slurm (elastic.c, report.c): reading
 * --whale-spares and contradicting options from a command line, checking
 * failure report lines against a step, and the report FIFO end to end
 * (libwhale's whale_report_failure -> slurmstepd's reader -> drain + kill),
 * with the Slurm calls recorded by stubs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "elastic.h"
#include "plugin.h"
#include "step.h"
#include "whale/env.h"
#include "whale/error.h"
#include "whale/report.h"

/* ---- stubs of the Slurm side ------------------------------------------ */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static char drained[256], reason[256], last_err[512];
static int ndrain, nerr;

void slurm_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&mu);
    vsnprintf(last_err, sizeof last_err, fmt, ap);
    nerr++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    va_end(ap);
}
void slurm_info(const char *fmt, ...) { (void)fmt; }
void slurm_verbose(const char *fmt, ...) { (void)fmt; }
spank_context_t spank_context(void) { return S_CTX_LOCAL; }
void slurm_init_update_node_msg(update_node_msg_t *m) { memset(m, 0, sizeof *m); }
int slurm_update_node(update_node_msg_t *m)
{
    pthread_mutex_lock(&mu);
    snprintf(drained, sizeof drained, "%s", m->node_names);
    snprintf(reason, sizeof reason, "%s", m->reason);
    assert_int_equal(m->node_state, NODE_STATE_DRAIN);
    ndrain++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return SLURM_SUCCESS;
}
/* slurmctld's answer for a node: its slurmd at 127.0.0.1:node_port (0: unknown node) */
static uint16_t node_port;
static node_info_t node_rec;
static node_info_msg_t node_msg;
int slurm_load_node_single(node_info_msg_t **resp, char *name, uint16_t flags)
{
    (void)flags;
    if (!node_port)
        return SLURM_ERROR;
    memset(&node_rec, 0, sizeof node_rec);
    node_rec.name = name;
    node_rec.node_addr = "127.0.0.1";
    node_rec.port = node_port;
    node_msg.record_count = 1;
    node_msg.node_array = &node_rec;
    *resp = &node_msg;
    return SLURM_SUCCESS;
}
void slurm_free_node_info_msg(node_info_msg_t *m) { (void)m; }
int slurm_get_errno(void) { return 0; }
char *slurm_strerror(int e) { (void)e; return "stub"; }

/* ---- a step: node1 (tasks 0,1) node2 (tasks 2,3) node3 (spares 4,5) ---- */
static char *names[] = { "node1", "node2", "node3" };
static int node_of_task[] = { 0, 0, 1, 1, 2, 2 };
static struct whale_step step;

static void make_step(void)
{
    memset(&step, 0, sizeof step);
    step.nodes = names;
    step.nnodes = 3;
    step.layout.world = 4;
    step.layout.ntasks = 6;
    step.layout.node_of_task = node_of_task;
}

static void test_spares_arg(void **st)
{
    (void)st;
    char *a1[] = { "srun", "-N", "5", "--whale-spares=2", "train", "--whale-spares=9" };
    assert_int_equal(whale_elastic_spares_arg(a1, 6, NULL), 2);
    char *a2[] = { "srun", "--whale-spares", "1", "x" };
    assert_int_equal(whale_elastic_spares_arg(a2, 4, NULL), 1);
    /* after the command: the program's own argument, not ours */
    char *a3[] = { "srun", "-n4", "prog", "--whale-spares=3" };
    assert_int_equal(whale_elastic_spares_arg(a3, 4, NULL), 0);
    /* inherited from sbatch; the command line wins */
    assert_int_equal(whale_elastic_spares_arg(a3, 4, "2"), 2);
    assert_int_equal(whale_elastic_spares_arg(a1, 6, "7"), 2);
}

static void test_conflicts(void **st)
{
    (void)st;
    char out[128];
    char *ok[] = { "srun", "-K0", "--kill-on-bad-exit=0", "--wait=0", "-W", "0", "--no-kill", "x",
                   "-K" };
    whale_elastic_argv_conflict(ok, 9, out, sizeof out);
    assert_string_equal(out, "");
    char *k[] = { "srun", "-N2", "-K", "x" };
    whale_elastic_argv_conflict(k, 4, out, sizeof out);
    assert_string_equal(out, "-K");
    char *k1[] = { "srun", "--kill-on-bad-exit=1", "x" };
    whale_elastic_argv_conflict(k1, 3, out, sizeof out);
    assert_string_equal(out, "--kill-on-bad-exit=1");
    char *w[] = { "srun", "--wait", "30", "x" };
    whale_elastic_argv_conflict(w, 4, out, sizeof out);
    assert_string_equal(out, "--wait 30");
    char *w2[] = { "srun", "-W5", "x" };
    whale_elastic_argv_conflict(w2, 3, out, sizeof out);
    assert_string_equal(out, "-W5");
    /* after an option's separate value ("-N 4") the scan goes on */
    char *kv[] = { "srun", "-N", "4", "--ntasks", "8", "-K1", "x" };
    whale_elastic_argv_conflict(kv, 7, out, sizeof out);
    assert_string_equal(out, "-K1");
    char *kw[] = { "srun", "-W", "0", "-N", "2", "--wait", "9", "x" };
    whale_elastic_argv_conflict(kw, 8, out, sizeof out);
    assert_string_equal(out, "--wait 9");
    char *cmd[] = { "srun", "-N2", "prog", "-K1" };
    whale_elastic_argv_conflict(cmd, 4, out, sizeof out);
    assert_string_equal(out, "");
    char *nk[] = { "srun", "--no-kill=off", "x" };
    whale_elastic_argv_conflict(nk, 3, out, sizeof out);
    assert_string_equal(out, "--no-kill=off");
}

static void test_parse(void **st)
{
    (void)st;
    make_step();
    struct whale_report r;
    char why[160];
    assert_int_equal(whale_report_parse("node2 hang 3 3", &step, &r, why, sizeof why), 0);
    assert_string_equal(r.node, "node2");
    assert_string_equal(r.kind, "hang");
    assert_int_equal(r.rank, 3);
    assert_int_equal(r.task, 3);
    /* rank -1: a spare task that failed */
    assert_int_equal(whale_report_parse("node2 crash -1 3", &step, &r, why, sizeof why), 0);
    assert_int_equal(r.rank, -1);
    const char *bad[][2] = {
        { "node2 hang 3", "expected" },
        { "node2 hang 3 3 extra", "expected" },
        { "node2 boom 3 3", "kind 'boom'" },
        { "node2 crash 4 3", "rank 4 outside 0..3" },
        { "node2 crash -2 3", "rank -2 outside 0..3 (or -1 for a spare)" },
        { "node2 node 1 6", "task 6 outside 0..5" },
        { "node1 node 3 3", "task 3 does not run on 'node1'" },
        { "node9 node 3 3", "does not run on 'node9'" },
        { "", "expected" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        assert_int_equal(whale_report_parse(bad[i][0], &step, &r, why, sizeof why), -1);
        if (!strstr(why, bad[i][1]))
            fail_msg("'%s': reason '%s' lacks '%s'", bad[i][0], why, bad[i][1]);
    }
}

static int wait_for(int *counter, int want)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 120; /* a bound against a hang, not a timing check */
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&cv, &mu, &t);
    pthread_mutex_unlock(&mu);
    return *counter >= want ? 0 : -1;
}

static void test_fifo_end_to_end(void **st)
{
    (void)st;
    make_step();
    char dir[] = "/tmp/whale-elastic-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ndrain = nerr = 0;
    assert_int_equal(whale_report_open(dir, 42, 7, getuid(), getgid(), &step), 0);
    whale_report_this_node("node2");
    const char *path = whale_report_path();
    assert_non_null(path);
    /* DIR/whale.XXXXXX/report: a private directory of its own */
    assert_int_equal(strncmp(path, dir, strlen(dir)), 0);
    assert_non_null(strstr(path + strlen(dir), "/whale."));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0600);

    /* task 3 "runs on this node": a child that stops itself, like SIGSTOP */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        /* a stopped child must not hold the test's output open: meson waits
         * for end-of-file, so a failed assertion below would hang the test */
        close(STDOUT_FILENO);
        close(STDERR_FILENO);
        raise(SIGSTOP);
        _exit(0);
    }
    int ws;
    assert_int_equal(waitpid(child, &ws, WUNTRACED), child);
    assert_true(WIFSTOPPED(ws));
    whale_report_task_pid(3, child);

    setenv(WHALE_ENV_REPORT, path, 1);
    /* a bad line is reported as an error and changes nothing */
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "node1 node 3 3\n", 15), 15);
    close(fd);
    assert_int_equal(wait_for(&nerr, 1), 0);
    assert_non_null(strstr(last_err, "does not run on 'node1'"));
    assert_int_equal(ndrain, 0);

    assert_int_equal(whale_report_failure("node2", "hang", 3, 3), 0);
    assert_int_equal(wait_for(&ndrain, 1), 0);
    assert_string_equal(drained, "node2");
    assert_non_null(strstr(reason, "job 42 step 7: rank 3 (task 3) failed (hang)"));
    assert_int_equal(waitpid(child, &ws, 0), child);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    whale_report_task_pid(3, 0);

    /* forged: task 2 of this node still runs (this process) -> nothing;
     * this node "lost" -> nothing; node1's slurmd answers -> nothing */
    whale_report_task_pid(2, getpid());
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    node_port = ntohs(sa.sin_port);
    nerr = 0;
    assert_int_equal(whale_report_failure("node2", "crash", 2, 2), 0);
    assert_int_equal(wait_for(&nerr, 1), 0);
    assert_non_null(strstr(last_err, "still runs here"));
    assert_int_equal(whale_report_failure("node2", "node", 2, 2), 0);
    assert_int_equal(wait_for(&nerr, 2), 0);
    assert_non_null(strstr(last_err, "slurmstepd is running"));
    assert_int_equal(whale_report_failure("node1", "node", 0, 0), 0);
    assert_int_equal(wait_for(&nerr, 3), 0);
    assert_non_null(strstr(last_err, "slurmd of node1 answers"));
    assert_int_equal(ndrain, 1);
    /* node1's slurmd gone (connection refused): drained, once although
     * every survivor reports */
    close(lfd);
    assert_int_equal(whale_report_failure("node1", "node", 0, 0), 0);
    assert_int_equal(whale_report_failure("node1", "node", 1, 1), 0);
    assert_int_equal(wait_for(&ndrain, 2), 0);
    assert_string_equal(drained, "node1");
    assert_non_null(strstr(reason, "rank 0 (task 0) failed (node)"));
    /* task 2 really ended here: a crash report drains this node */
    whale_report_task_pid(2, 0);
    assert_int_equal(whale_report_failure("node2", "crash", 2, 2), 0);
    /* node2 was drained already (the hang): once per node */
    assert_int_equal(whale_report_failure("node1", "crash", 0, 0), 0);
    node_port = 0;
    /* the reader takes lines in order: once this one is refused, the ones
     * before have been judged */
    int before = nerr;
    assert_int_equal(whale_report_failure("node2", "node", 3, 3), 0);
    assert_int_equal(wait_for(&nerr, before + 1), 0);
    assert_int_equal(ndrain, 2);

    char pdir[1100];
    snprintf(pdir, sizeof pdir, "%s", path);
    *strrchr(pdir, '/') = '\0';
    whale_report_close();
    assert_null(whale_report_path());
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(pdir, F_OK), -1); /* the private directory too */
    /* no reader any more: the runtime goes on */
    assert_int_equal(whale_report_failure("node2", "node", 2, 2), 0);
    unsetenv(WHALE_ENV_REPORT);
    rmdir(dir);
}

/* Another user who creates the names the FIFO once had (a FIFO of theirs
 * at DIR/whale-report.JOB.STEP.HOST) must not keep the step from opening
 * its own: the name is not predictable. As root the directory is root's
 * (0711) and only the FIFO is the job user's. */
static void test_fifo_name_not_predictable(void **st)
{
    (void)st;
    make_step();
    char dir[] = "/tmp/whale-elastic-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char host[256] = "", planted[512];
    gethostname(host, sizeof host - 1);
    snprintf(planted, sizeof planted, "%s/whale-report.42.7.%s", dir, host);
    assert_int_equal(mkfifo(planted, 0666), 0);
    bool root = geteuid() == 0;
    uid_t other = 65534, attacker = 65533; /* the job's user, another one */
    if (root)
        assert_int_equal(chown(planted, attacker, attacker), 0);
    assert_int_equal(whale_report_open(dir, 42, 7, root ? other : getuid(),
                                       root ? other : getgid(), &step), 0);
    const char *path = whale_report_path();
    assert_non_null(path);
    assert_string_not_equal(path, planted);
    char first[1100], pdir[1100];
    snprintf(first, sizeof first, "%s", path);
    snprintf(pdir, sizeof pdir, "%s", path);
    *strrchr(pdir, '/') = '\0';
    struct stat sb;
    assert_int_equal(lstat(pdir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_uid, geteuid());
    assert_int_equal(sb.st_mode & 0777, root ? 0711 : 0700);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(sb.st_uid, root ? other : getuid());
    whale_report_close();
    /* a second step gets another name */
    assert_int_equal(whale_report_open(dir, 42, 7, getuid(), getgid(), &step), 0);
    assert_string_not_equal(whale_report_path(), first);
    whale_report_close();
    /* only the planted FIFO is left: both private directories are gone */
    assert_int_equal(unlink(planted), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The judge alone: what slurmstepd does for each claim and evidence. */
static void test_judge(void **st)
{
    (void)st;
    char why[160];
    struct whale_report r = { .node = "node2", .kind = "crash", .rank = 3, .task = 3 };
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_GONE, -1, why, sizeof why),
                     WHALE_REPORT_DRAIN);
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_STOPPED, -1, why, sizeof why),
                     WHALE_REPORT_DRAIN | WHALE_REPORT_KILL);
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_RUNNING, -1, why, sizeof why), 0);
    assert_non_null(strstr(why, "still runs here"));
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_UNKNOWN, -1, why, sizeof why), 0);
    assert_non_null(strstr(why, "never started"));
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_UNKNOWN, 0, why, sizeof why), 0);
    /* a task alone on another node: that node's slurmd lists no process of
     * the step any more (nobody there could report it to its own stepd) */
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_GONE, -1, why, sizeof why),
                     WHALE_REPORT_DRAIN);
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_RUNNING, -1, why, sizeof why), 0);
    assert_non_null(strstr(why, "that node's slurmstepd"));
    snprintf(r.kind, sizeof r.kind, "hang");
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_RUNNING, -1, why, sizeof why),
                     WHALE_REPORT_KILL);
    snprintf(r.kind, sizeof r.kind, "node");
    assert_int_equal(whale_report_judge(&r, true, WHALE_TASK_GONE, -1, why, sizeof why), 0);
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_UNKNOWN, 1, why, sizeof why), 0);
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_UNKNOWN, -1, why, sizeof why), 0);
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_UNKNOWN, 0, why, sizeof why),
                     WHALE_REPORT_DRAIN);
    snprintf(r.kind, sizeof r.kind, "link");
    assert_int_equal(whale_report_judge(&r, false, WHALE_TASK_UNKNOWN, 0, why, sizeof why),
                     WHALE_REPORT_DRAIN);
}

static void test_report_args(void **st)
{
    (void)st;
    unsetenv(WHALE_ENV_REPORT);
    assert_int_equal(whale_report_failure("node2", "node", 1, 1), 0); /* no channel */
    setenv(WHALE_ENV_REPORT, "/nonexistent/fifo", 1);
    assert_int_equal(whale_report_failure("node 2", "node", 1, 1), WHALE_EINVAL);
    assert_int_equal(whale_report_failure("node2", "melt", 1, 1), WHALE_EINVAL);
    assert_int_equal(whale_report_failure("node2", "node", -2, 1), WHALE_EINVAL);
    assert_int_equal(whale_report_failure("node2", "crash", -1, 1), 0); /* a spare, no FIFO */
    assert_int_equal(whale_report_failure(NULL, "node", 1, 1), WHALE_EINVAL);
    assert_int_equal(whale_report_failure("node2", "node", 1, 1), 0); /* no FIFO: no drain */
    unsetenv(WHALE_ENV_REPORT);
}

static void test_result_status(void **st)
{
    (void)st;
    const char *tok = "0123456789abcdef0123456789abcdef";
    int status[4];
    bool failed[4] = { false };
    for (int t = 0; t < 4; t++)
        status[t] = -1;
    char line[128];
    /* statuses as slurmstepd has them (raw wait status) */
    for (int t = 0; t < 4; t++) {
        snprintf(line, sizeof line, "%s S %d %d\n", tok, t, t == 2 ? 9 /* SIGKILL */ : 0);
        whale_result_record(line, 4, status, failed, tok);
    }
    /* nothing reported failed: Slurm's own status stands */
    assert_int_equal(whale_result_status(4, status, failed), -1);
    /* a wrong token, an unknown task and garbage change nothing */
    whale_result_record("ffffffffffffffffffffffffffffffff F 2\n", 4, status, failed, tok);
    snprintf(line, sizeof line, "%s F 7\n", tok);
    whale_result_record(line, 4, status, failed, tok);
    whale_result_record("garbage", 4, status, failed, tok);
    assert_int_equal(whale_result_status(4, status, failed), -1);
    /* task 2 was replaced: the others' status (0) is the result */
    snprintf(line, sizeof line, "%s F 2\n", tok);
    whale_result_record(line, 4, status, failed, tok);
    assert_int_equal(whale_result_status(4, status, failed), 0);
    /* a survivor failed: its exit code; a signal wins over exit codes */
    status[1] = 3 << 8;
    assert_int_equal(whale_result_status(4, status, failed), 3);
    status[3] = 15;
    assert_int_equal(whale_result_status(4, status, failed), 128 + 15);
    /* a status missing (a task of a node that was not reported): no answer */
    status[0] = -1;
    assert_int_equal(whale_result_status(4, status, failed), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spares_arg),
        cmocka_unit_test(test_conflicts),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_fifo_end_to_end),
        cmocka_unit_test(test_fifo_name_not_predictable),
        cmocka_unit_test(test_report_args),
        cmocka_unit_test(test_result_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
