/* Resource limits checked before whale-run starts anything: each task
 * costs the launcher about three descriptors (its stdout and stderr pipes
 * and its PMIx connection) and one process. Without this check -n 1000
 * under the usual 1024-descriptor limit failed halfway ("cannot prepare
 * task 504", no reason) after starting 500 tasks, and -n 10000 took
 * minutes to fail. */
#include "run_limits.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

long run_fds_needed(int ntasks)
{
    return 3L * ntasks + RUN_FD_BASE;
}

int run_check_limits(int ntasks, char *why, size_t n)
{
    struct rlimit rl;
    long need = run_fds_needed(ntasks);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < need) {
        /* the soft limit may go up to the hard one without privileges */
        rlim_t old = rl.rlim_cur;
        if (rl.rlim_max == RLIM_INFINITY || (long)rl.rlim_max >= need)
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)need : rl.rlim_max;
        else
            rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = old;
        if ((long)rl.rlim_cur < need) {
            snprintf(why, n,
                     "-n %d needs about %ld open files (3 per task: output pipes and the PMIx "
                     "connection), but the limit is %llu (hard limit %llu%s); raise it (ulimit "
                     "-Hn, limits.conf) or run fewer tasks",
                     ntasks, need, (unsigned long long)rl.rlim_cur,
                     (unsigned long long)rl.rlim_max,
                     rl.rlim_max == RLIM_INFINITY ? ", unlimited" : "");
            return -1;
        }
    }
    if (getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < (long)ntasks + RUN_PROC_BASE) {
        snprintf(why, n,
                 "-n %d needs at least %d processes, but this user may run %llu (ulimit -u)",
                 ntasks, ntasks + RUN_PROC_BASE, (unsigned long long)rl.rlim_cur);
        return -1;
    }
    return 0;
}
