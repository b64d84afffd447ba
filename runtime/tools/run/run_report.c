/* whale-run's end of the failure report channel (whale/report.h).
 *
 * Under srun, each node's slurmstepd reads the reports an elastic step's
 * survivors write after they agreed on a failure, and leaves the replaced
 * tasks out of srun's exit status (spank/report.c, spank/result.c).
 * whale-run offers the same channel so that an elastic run behaves the
 * same on one machine: a task the step replaced does not make whale-run
 * fail when the training completed. The FIFO lives in a fresh 0700
 * directory (mkdtemp): no other user can pre-create or read it. */
#define _GNU_SOURCE
#include "run_report.h"

#include "whale/env.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int run_report_open(struct run_report *r)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/' || strlen(tmp) > 40)
        tmp = "/tmp";
    snprintf(r->dir, sizeof r->dir, "%s/whale-run.XXXXXX", tmp);
    if (!mkdtemp(r->dir)) {
        fprintf(stderr, "whale-run: cannot create a directory for the failure report FIFO in "
                "%s: %s (replaced tasks will count in the exit status)\n", tmp, strerror(errno));
        r->dir[0] = '\0';
        return -1;
    }
    snprintf(r->path, sizeof r->path, "%s/report", r->dir);
    if (mkfifo(r->path, 0600) ||
        (r->fd = open(r->path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
        setenv(WHALE_ENV_REPORT, r->path, 1)) {
        fprintf(stderr, "whale-run: cannot create the failure report FIFO %s: %s (replaced "
                "tasks will count in the exit status)\n", r->path, strerror(errno));
        run_report_close(r);
        return -1;
    }
    return 0;
}

int run_report_parse(const char *line, int ntasks, int *task)
{
    char node[64], kind[8], extra[2];
    int rank, t;
    if (sscanf(line, "%63s %7s %d %d %1s", node, kind, &rank, &t, extra) != 4)
        return -1;
    if (strcmp(kind, "crash") && strcmp(kind, "node") && strcmp(kind, "link") &&
        strcmp(kind, "hang"))
        return -1;
    if (rank < -1 || t < 0 || t >= ntasks)
        return -1;
    *task = t;
    return 0;
}

int run_report_poll(struct run_report *r, int ntasks, bool *replaced)
{
    if (r->fd < 0)
        return 0;
    int taken = 0;
    for (;;) {
        ssize_t k = read(r->fd, r->buf + r->have, sizeof r->buf - 1 - (size_t)r->have);
        if (k <= 0)
            break;
        r->have += (int)k;
        r->buf[r->have] = '\0';
        char *start = r->buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            int t;
            if (!run_report_parse(start, ntasks, &t)) {
                replaced[t] = true;
                taken++;
            } else if (*start) {
                fprintf(stderr, "whale-run: ignored failure report '%.80s'\n", start);
            }
            start = nl + 1;
        }
        r->have -= (int)(start - r->buf);
        memmove(r->buf, start, (size_t)r->have);
        if (r->have == (int)sizeof r->buf - 1)
            r->have = 0; /* an over-long line: drop it */
    }
    return taken;
}

void run_report_close(struct run_report *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->path[0])
        unlink(r->path);
    if (r->dir[0])
        rmdir(r->dir);
    r->path[0] = r->dir[0] = '\0';
}
