/* Elastic membership: hot-spare tasks, the failure detector, agreement of the
 * survivors on one failed set and one decision, and the rebuild of the
 * process groups (world/TP/PP/DP/all tasks) with the new member or with a
 * smaller DP. The training-state half (buddy copies, state transfer,
 * rollback/redo) is built on top of this API and the RMA calls of
 * whale/comm.h.
 *
 * Life of a step with spares
 *   - Spare tasks (WHALE_SPARE=1: `srun --whale-spares=N`, `whale-run
 *     --spares N`) bootstrap and connect like everyone, then call
 *     whale_spare_wait(). It blocks in the kernel (UCX worker event fd; the
 *     progress thread sleeps in poll()), yet keeps serving one-sided puts
 *     into memory the spare registered (whale_region_*) and answers the
 *     detector's heartbeats. It returns 0 when the spare is promoted (the ctx
 *     now holds the logical rank, coordinates and groups of the rank it
 *     replaces), or WHALE_EDONE when the step ends normally (the working
 *     ranks called whale_finalize); then the spare calls whale_finalize too.
 *   - Working ranks train. Any operation may return WHALE_EPEER or
 *     WHALE_ETIMEDOUT, and whale_elastic_check() turns > 0 once a failure is
 *     suspected anywhere in the step (a computing rank polls it between
 *     micro-batches to break out early). Then every survivor calls
 *     whale_elastic_recover(). When it returns 0, re-fetch whale_world(),
 *     whale_tp_group(), ... (the old group objects stay valid but failed;
 *     groups made with whale_group_create must be made again from the new
 *     world) and whale_rank()/whale_coords()/whale_degrees(); a rank whose
 *     DP replica was dropped (SHRUNK) is now a spare (whale_is_spare()) and
 *     goes to whale_spare_wait().
 *
 * Detection (how, enum whale_detect)
 *   CRASH  a process died: UCX reports a reset/refused connection, or the
 *          pid watchdog (same-node peers) sees the process gone.
 *   NODE   every task of one node failed together (its processes killed).
 *   LINK   a peer went silent without any error (no heartbeat for
 *          WHALE_PEER_TIMEOUT, or UCX keepalive timed out): a node cut off.
 *          When all tasks of a node go silent together this is still LINK.
 *   HANG   a peer stopped (SIGSTOP: silent while its process is alive and
 *          stopped, seen by the same-node watchdog) or made no progress:
 *          its heartbeat counter (whale_elastic_progress) did not move for
 *          WHALE_HANG_TIMEOUT while it was computing (not waiting in a
 *          collective, not a spare).
 *   A detection is broadcast to every task (so all survivors abandon their
 *   work at once): every group of the step is then failed and later calls
 *   return WHALE_EPEER until whale_elastic_recover() rebuilt them.
 *
 * Knobs (environment; bad values are refused by whale_init with the range)
 *   WHALE_HEARTBEAT=S     heartbeat interval in seconds, [0.01, 60]; 0 turns
 *                         the heartbeat off. Default 0.5 when the step has
 *                         spare tasks or WHALE_ELASTIC=1, else off (failures
 *                         are then still reported as WHALE_EPEER by UCX and
 *                         the pid watchdog, but not broadcast).
 *   WHALE_PEER_TIMEOUT=S  a peer silent for S seconds is declared failed
 *                         (LINK); also UCX keepalive (S/4) and the pid
 *                         watchdog period (S/5). Default 5; 3 for <= 3 s
 *                         detection of a silent node. [0.1, 3600]
 *   WHALE_HANG_TIMEOUT=S  no progress for S seconds while computing: HANG.
 *                         Default 0 (off: a long compute phase is not a
 *                         hang); also bounds how long the coordinator of
 *                         an agreement waits for a live member's proposal
 *                         (default then 30 s). [0, 86400]
 *   WHALE_ELASTIC=1       arm heartbeats and failure broadcast without
 *                         spares (a DP > 1 step that may shrink).
 *   WHALE_NODE_GRACE=S    the recovery window (srun --whale-node-grace,
 *                         whale.conf NodeGrace=), [0, 86400], default 0:
 *                         see "Grace" below.
 *
 * Agreement (inside whale_elastic_recover; runs over UCX, never PMIx,
 * whose fences hang on a dead peer)
 *   The coordinator is the lowest-numbered task of the current membership
 *   that the caller does not suspect. Every survivor (spares included, from
 *   whale_spare_wait) sends it a proposal: its suspect set, its membership
 *   epoch and its my_last_completed_step. The coordinator unions the
 *   suspects (suspicion only grows), waits until every member it does not
 *   suspect has proposed (a member that does not within WHALE_HANG_TIMEOUT
 *   or 30 s is suspected as HANG), checks the quorum, decides, and sends
 *   the one decision (new epoch, full rank map) to everybody. When the
 *   coordinator fails meanwhile, the next one takes over from the highest
 *   epoch any survivor holds, so survivors never act on two different
 *   decisions for one epoch; a barrier over all remaining tasks on the new
 *   groups closes each round (a failure there starts another round, so a
 *   second failure during recovery is one more decision, not a split).
 *   Quorum: the survivors must be a strict majority of the previous
 *   membership, not counting tasks known to have crashed (CRASH/NODE:
 *   connection reset, process gone); at exactly half, the half holding the
 *   lowest task id wins. The others get WHALE_EMINORITY and must stop.
 *
 * Decision (deterministic, made once by the coordinator)
 *   REPLACED: every failed working rank gets a spare task: the spare whose
 *     node is nearest to the failed rank's node in the site topology
 *     (link class node < nvl < leaf < spine < core, from WHALE_CONF's
 *     topology when readable, else all remote nodes equal), ties by lowest
 *     task id, so a failed node's ranks land together on one spare node
 *     (the plugin holds one spare node per leaf switch for this). The spare
 *     takes the same logical rank and TP/PP/DP coordinates.
 *   SHRUNK: when spares run out and DP > 1, the DP replica (same dp index
 *     across all TP and PP ranks) holding the most unreplaced failed ranks
 *     is dropped (ties: highest dp index), its healthy tasks become spares
 *     (and may replace failures in other replicas), until every remaining
 *     rank has a task. Ranks are renumbered for the new DP with
 *     rank = ((pp * DP) + dp) * TP + tp, dp counting the kept replicas in
 *     their old order.
 *   Otherwise (DP = 1 and no spare): whale_elastic_recover returns
 *     WHALE_ENOFIT and logs what failed; the step cannot continue here.
 *
 * Grace (WHALE_NODE_GRACE=S > 0)
 *   When the decision at hand would drop a DP replica, stop the step
 *   (ENOFIT) or stop this side as a minority, and some member is gone only
 *   for silence (LINK or HANG, not known crashed), the coordinator waits up
 *   to S seconds from that member's detection. Everybody keeps probing the
 *   silent members (one heartbeat each per WHALE_HEARTBEAT). A member heard
 *   again within S takes its place back on every task that hears it; once
 *   the coordinator has its proposal it decides RESUMED: same ranks, same
 *   degrees, a new epoch, agreed_step as always (the ranks roll back to it
 *   from their own copies and redo the steps since, with the same losses).
 *   Past S the decision is taken without it as before (it then learns it
 *   was left out and stops), and a cut-off side that still has no quorum
 *   stops: one decision for all survivors, a minority never goes on. A free
 *   spare is used at once (no wait); a crashed member is never waited for.
 *   agreed_step = min over surviving working ranks of the
 *   my_last_completed_step they passed (spares do not count).
 *
 * Epochs: every decision increments the epoch; the new groups use group
 * ids derived from it, so a late message of an older epoch never matches
 * an operation of the new one.
 *
 * Log lines (level info, on every task; one "elastic:" line per event):
 *   elastic: epoch E REPLACED|SHRUNK: rank R (task T on NODE) failed (CRASH|
 *   NODE|LINK|HANG) -> task S on NODE2 ...; detect X s, agree Y s, rebuild
 *   Z s; agreed step K; TPxPPxDP. */
#ifndef WHALE_ELASTIC_H
#define WHALE_ELASTIC_H

#include <stdint.h>

#include "whale/comm.h"
#include "whale/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_MAX_FAILED 64

enum whale_recovery {
    WHALE_RECOVERY_REPLACED = 1,
    WHALE_RECOVERY_SHRUNK = 2,
    /* nothing failed for good: every member declared failed for silence was
     * heard again within WHALE_NODE_GRACE and keeps its rank (no replacement,
     * same degrees); the ranks roll back to agreed_step from their own copies */
    WHALE_RECOVERY_RESUMED = 3,
};

struct whale_membership_event {
    uint64_t epoch;                 /* membership epoch after the event (first event: 1) */
    enum whale_recovery kind;
    enum whale_detect how;          /* how the first failure was detected */
    int nfailed;                    /* failed working ranks (<= WHALE_MAX_FAILED) */
    int failed_rank[WHALE_MAX_FAILED];      /* logical rank before the event */
    int failed_task[WHALE_MAX_FAILED];      /* task that held it */
    char failed_node[WHALE_MAX_FAILED][64]; /* its node */
    enum whale_detect failed_how[WHALE_MAX_FAILED];
    int replacement_task[WHALE_MAX_FAILED]; /* task now holding the rank (same logical
                                               rank for REPLACED); -1 when its DP replica
                                               was dropped */
    WHALE_GRID(grid);               /* degrees after the event */
    struct whale_grid old_grid;     /* degrees before (dp differs after SHRUNK) */
    int dropped_dp;                 /* old dp index of the (first) dropped replica, -1 none */
    int ndropped;                   /* replicas dropped */
    int dropped[WHALE_MAX_FAILED];  /* their old dp indices, ascending */
    int nfailed_spares;             /* spare tasks that failed (not ranks) */
    int64_t agreed_step;            /* min over survivors of my_last_completed_step */
    double detect_s;                /* last sign of life of the first failed task ->
                                       declared failed (as seen by the coordinator) */
    double agree_s;                 /* entering recovery -> decision known (this task) */
    double rebuild_s;               /* groups rebuilt + closing barrier (this task) */
    /* the spare tasks of nfailed_spares (first WHALE_MAX_FAILED) */
    int failed_spare_task[WHALE_MAX_FAILED];
    char failed_spare_node[WHALE_MAX_FAILED][64];
    enum whale_detect failed_spare_how[WHALE_MAX_FAILED];
};

/* Spare task: block until promoted (0, *ev filled) or the step ends
 * (WHALE_EDONE). WHALE_EMINORITY: cut off, stop. WHALE_EINVAL when the
 * caller is not a spare. Takes part in every agreement meanwhile. */
int whale_spare_wait(whale_ctx *ctx, struct whale_membership_event *ev);

/* Survivor: abandon in-flight operations, agree, rebuild (see above).
 * Returns 0 (ev filled; whale_rank() may now be -1: became a spare),
 * WHALE_EMINORITY (cut off: stop without writing shared state),
 * WHALE_ENOFIT (no spare and DP = 1), or another error when nothing can
 * continue. Calling it with no failure anywhere returns WHALE_ESTATE. */
int whale_elastic_recover(whale_ctx *ctx, int64_t my_last_completed_step,
                          struct whale_membership_event *ev);

/* Non-blocking: > 0 when a failure is suspected anywhere in the step (this
 * task's detector fired or another task's broadcast arrived), else 0. */
int whale_elastic_check(whale_ctx *ctx);

/* The engine calls this whenever it made progress (a micro-batch, a
 * step): heartbeats carry the counter, and HANG detection watches it. */
void whale_elastic_progress(whale_ctx *ctx);

/* Task now holding logical rank r (current epoch), -1 when out of range. */
int whale_rankmap_task(const whale_ctx *ctx, int logical_rank);

/* Current membership epoch (0 before any event). */
uint64_t whale_elastic_epoch(const whale_ctx *ctx);

/* Short name for logs: "REPLACED"/"SHRUNK" (whale_detect_name: whale/comm.h). */
const char *whale_recovery_name(enum whale_recovery k);

#ifdef __cplusplus
}
#endif
#endif
