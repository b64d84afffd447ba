/* Telling Slurm about a failed rank (spank_whale(8), "Failures and hot
 * spares"). Under srun the plugin's slurmstepd on every node reads a FIFO
 * named by WHALE_REPORT; a line "NODE KIND RANK TASK" there drains NODE in
 * slurmctld with a reason, and kills TASK if it still runs on that node
 * (a stopped or hung rank that the step replaced). Every survivor reports
 * the agreed failed set once, after the recovery decision: reports are
 * idempotent. Without WHALE_REPORT (whale-run, a plain process) nothing
 * happens. */
#ifndef WHALE_REPORT_H
#define WHALE_REPORT_H

#ifdef __cplusplus
extern "C" {
#endif

/* kind: "crash" (the process died), "node" (node lost), "link" (node cut
 * off), "hang" (stopped or no progress). rank -1: TASK is a spare (no
 * rank). 0 when written or when there is
 * no channel; negative WHALE_E* (logged) on a bad argument or a failed
 * write. Never blocks. */
int whale_report_failure(const char *node, const char *kind, int rank, int task);

#ifdef __cplusplus
}
#endif

#endif
