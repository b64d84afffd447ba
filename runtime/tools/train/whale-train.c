/* whale-train: train a GPT model from a preset on token data, with tensor,
 * pipeline and data parallelism over the ranks the plugin (srun --whale-...)
 * or whale-run started. main runs the phases in order; each lives in its
 * own file (see train.h for the map, train_areas.h to add a feature area). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "train.h"
#include "whale/blascore.h"
#include "whale/knobs.h"

/* libgomp reads OMP_WAIT_POLICY once, when it is loaded (before main). Its
 * default spinning workers burn the cores that OpenBLAS, the data thread,
 * the progress engine and other ranks on the node need: measured 4-5x
 * slower steps on a loaded 2-core machine. Re-exec once with passive
 * waiting unless the user chose a policy. OpenBLAS, too, picks its kernels
 * at load time, and falls back to SSE3 ones on CPU models it does not know
 * (whale/blascore.h): the same re-exec sets OPENBLAS_CORETYPE then. */
static void ensure_passive_omp(char **argv)
{
    if (whale_knob_getenv("WHALE_TRAIN_REEXEC"))
        return;
    const char *core = whale_blas_core_wanted();
    if (getenv("OMP_WAIT_POLICY") && !core)
        return;
    if (!getenv("OMP_WAIT_POLICY"))
        setenv("OMP_WAIT_POLICY", "passive", 1);
    if (core)
        setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("WHALE_TRAIN_REEXEC", "1", 1); /* tells the re-exec'd child not to re-exec */
    /* through the real path, not /proc/self/exe: the kernel names the
     * process after the file it executes, and ps/top/pgrep would show
     * "exe" instead of whale-train */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}

int main(int argc, char **argv)
{
    ensure_passive_omp(argv);
    static struct train t; /* job pointers point into it: it never moves */
    train_defaults(&t);
    /* resolve the configuration: flags > WHALE_* > plan > defaults */
    int rc = train_parse_args(&t, argc, argv);
    if (rc == TRAIN_GO)
        rc = train_resolve_config(&t);
    if (rc != TRAIN_GO) { /* nothing started yet */
        free(t.plan_json);
        whale_plan_free(&t.plan);
        return rc;
    }
    /* set up, the step loop, the report; teardown whatever happened */
    rc = train_setup(&t);
    if (rc == TRAIN_GO)
        rc = train_loop(&t);
    if (rc == TRAIN_GO)
        rc = train_summary(&t);
    return train_teardown(&t, rc);
}
