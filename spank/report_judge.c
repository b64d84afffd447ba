/* Is a failure report believable? (report.c asks before it acts.)
 *
 * The report FIFO is written by the step's tasks, i.e. by the job's user:
 * anything in it may be forged. Killing one of the step's own tasks gives
 * a user nothing they could not do themselves, but draining a node takes a
 * shared machine out of the cluster, so slurmstepd (root) drains only on
 * evidence it gathers itself (spank/ELASTIC.md, "Threat model"):
 *   - crash/hang of a task of THIS node: the task has really exited
 *     (slurmstepd saw it end), or it is stopped (state T in /proc); a task
 *     that still runs is not drained for (a hang by lack of progress cannot
 *     be told from a slow rank: it is killed, the node stays in service);
 *   - node/link of ANOTHER node: that node's slurmd does not answer a TCP
 *     connection from here (refused: its slurmd is dead; no answer: its link
 *     is down). A node whose slurmd answers is alive and is not drained;
 *   - node/link naming this very node: impossible (we are running on it);
 *   - crash/hang of a task of another node: that node's slurmd lists no
 *     process of the step any more (the task was alone there, or all its
 *     tasks ended: nobody is left to report it to that node's slurmstepd);
 *     otherwise that node's own slurmstepd decides when a task there
 *     reports it. */
#include "elastic.h"

#include <stdio.h>
#include <string.h>

unsigned whale_report_judge(const struct whale_report *r, bool this_node,
                            enum whale_task_seen seen, int node_answers, char *why, size_t n)
{
    bool node_kind = !strcmp(r->kind, "node") || !strcmp(r->kind, "link");
    bool hang = !strcmp(r->kind, "hang");
    if (this_node) {
        if (node_kind) {
            snprintf(why, n, "%s says this node is lost, but its slurmstepd is running", r->kind);
            return 0;
        }
        switch (seen) {
        case WHALE_TASK_GONE:
            return WHALE_REPORT_DRAIN;
        case WHALE_TASK_STOPPED:
            return WHALE_REPORT_DRAIN | WHALE_REPORT_KILL;
        case WHALE_TASK_RUNNING:
            if (hang) {
                snprintf(why, n, "task %d still runs (not stopped): killed, node not drained",
                         r->task);
                return WHALE_REPORT_KILL;
            }
            snprintf(why, n, "task %d still runs here: no crash to drain for", r->task);
            return 0;
        case WHALE_TASK_UNKNOWN:
            break;
        }
        snprintf(why, n, "task %d was never started on this node", r->task);
        return 0;
    }
    if (!node_kind) {
        if (seen == WHALE_TASK_GONE)
            return WHALE_REPORT_DRAIN;
        snprintf(why, n, "a %s of a task of %s is for that node's slurmstepd to judge (the step "
                 "still has processes there, or its slurmd cannot tell)", r->kind, r->node);
        return 0;
    }
    if (node_answers == 0)
        return WHALE_REPORT_DRAIN;
    snprintf(why, n, node_answers > 0 ? "the slurmd of %s answers: the node is alive"
                                      : "cannot tell whether %s is alive", r->node);
    return 0;
}
