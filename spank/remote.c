/* slurmstepd (S_CTX_REMOTE). */
#include "plugin.h"

#include <stdio.h>

int whale_remote_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    uint32_t gid = 0;
    if (spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) != ESPANK_SUCCESS) {
        slurm_error(PLUGIN_NAME ": cannot read the task id");
        return -1;
    }
    char buf[16];
    snprintf(buf, sizeof buf, "%u", gid);
    if (spank_setenv(sp, "WHALE_TASK_ID", buf, 1) != ESPANK_SUCCESS) {
        slurm_error(PLUGIN_NAME ": cannot set WHALE_TASK_ID");
        return -1;
    }
    return 0;
}
