/* After the survivors agreed on a failure: tell Slurm, through this node's
 * slurmstepd (whale/report.h). It drains the failed node so the scheduler
 * does not hand it out again, kills a replaced rank that still runs there,
 * and leaves the replaced tasks out of srun's exit status. Every survivor
 * reports (the stepd of each node learns the failed set); reports are
 * idempotent. Outside srun (no WHALE_REPORT) nothing happens. */
#include "train_report.h"

#include "whale/report.h"

void train_report_failures(const struct whale_membership_event *ev)
{
    for (int i = 0; i < ev->nfailed && i < WHALE_MAX_FAILED; i++) {
        const char *how = "crash";
        switch (ev->failed_how[i]) {
        case WHALE_DETECT_NODE: how = "node"; break;
        case WHALE_DETECT_LINK: how = "link"; break;
        case WHALE_DETECT_HANG: how = "hang"; break;
        default: break;
        }
        if (ev->failed_node[i][0] && ev->failed_task[i] >= 0 && ev->failed_rank[i] >= 0)
            whale_report_failure(ev->failed_node[i], how, ev->failed_rank[i],
                                 ev->failed_task[i]);
    }
    /* failed spares (rank -1): e.g. the one lending offload memory; their
     * status must not count in srun's either */
    for (int i = 0; i < ev->nfailed_spares && i < WHALE_MAX_FAILED; i++) {
        const char *how = "crash";
        switch (ev->failed_spare_how[i]) {
        case WHALE_DETECT_NODE: how = "node"; break;
        case WHALE_DETECT_LINK: how = "link"; break;
        case WHALE_DETECT_HANG: how = "hang"; break;
        default: break;
        }
        if (ev->failed_spare_node[i][0] && ev->failed_spare_task[i] >= 0)
            whale_report_failure(ev->failed_spare_node[i], how, -1, ev->failed_spare_task[i]);
    }
}
