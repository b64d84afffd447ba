/* whale_report_failure: one line into the slurmstepd FIFO (whale/report.h).
 * The FIFO is opened non-blocking for each report (failures are rare): if
 * slurmstepd's reader is gone the open fails with ENXIO instead of hanging
 * a recovering rank, and a line under PIPE_BUF is written atomically even
 * when several local ranks report at once. */
#include "whale/report.h"

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int valid_word(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] == 0x7f)
            return 0;
    return 1;
}

int whale_report_failure(const char *node, const char *kind, int rank, int task)
{
    const char *path = getenv(WHALE_ENV_REPORT);
    if (!path || !*path)
        return 0;
    static const char *const kinds[] = { "crash", "node", "link", "hang" };
    int known = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        known |= kind && !strcmp(kind, kinds[i]);
    if (!valid_word(node, 64) || !known || rank < -1 || task < 0) {
        whale_log(WHALE_LOG_ERROR, "failure report: bad node '%s', kind '%s' (crash|node|link|"
                  "hang), rank %d or task %d", node ? node : "(null)", kind ? kind : "(null)",
                  rank, task);
        return WHALE_EINVAL;
    }
    char line[128];
    int n = snprintf(line, sizeof line, "%s %s %d %d\n", node, kind, rank, task);
    if (n < 0 || (size_t)n >= sizeof line || n > PIPE_BUF)
        return WHALE_EINVAL;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        whale_log(WHALE_LOG_WARN, "failure report: cannot open %s=%s: %s (node %s not drained)",
                  WHALE_ENV_REPORT, path, strerror(errno), node);
        return errno == ENXIO || errno == ENOENT ? 0 : WHALE_EIO;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) || !S_ISFIFO(st.st_mode)) {
        whale_log(WHALE_LOG_WARN, "failure report: %s=%s is not a FIFO", WHALE_ENV_REPORT, path);
        rc = WHALE_EIO;
    } else if (write(fd, line, (size_t)n) != n) {
        whale_log(WHALE_LOG_WARN, "failure report to %s: %s", path, strerror(errno));
        rc = WHALE_EIO;
    } else {
        if (rank >= 0)
            whale_log(WHALE_LOG_INFO, "reported to slurmstepd: rank %d (task %d) on %s failed "
                      "(%s)", rank, task, node, kind);
        else
            whale_log(WHALE_LOG_INFO, "reported to slurmstepd: spare task %d on %s failed (%s)",
                      task, node, kind);
    }
    close(fd);
    return rc;
}
