/* Elastic membership, the module above comm (whale/elastic.h): detector state, the
 * control messages, the membership state and the decision function.
 *
 * Control messages travel as UCX tagged messages of their own tag space
 * (point-to-point flag + group id EL_GID, source task in the sender field),
 * received by whoever progresses the worker (comm_progress -> el_poll), so
 * the detector and the agreement never depend on PMIx. All el_* functions
 * except el_decide run with ctx->lock held. */
#ifndef WHALE_EL_INTERNAL_H
#define WHALE_EL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "member/mp.h"
#include "whale/elastic.h"

struct whale_ctx;

#define EL_GID 0x7ffe
/* Group ids of the standard groups of epoch e: EL_GID_BASE + (e % 1000) * 16
 * + {0,3,6,9,12}; whale_group_create stays below EL_GID_BASE. */
#define EL_GID_BASE COMM_GID_REBUILT /* comm/comm_internal.h */

/* EL_MP: a message of the tree agreement (el_mp.c), WHALE_MEMBERSHIP=tree */
enum el_type { EL_HB = 1, EL_NOTICE, EL_PROPOSE, EL_DECIDE, EL_DONE, EL_MP };
/* EL_F_COORD: a heartbeat to the coordinator only because a recovery is
 * due, or the answer to a probe (not a ring heartbeat): it proves life,
 * its end is no silence. */
/* EL_F_PROBE: a heartbeat to a member declared failed for silence, within
 * the grace period (el_grace.c): it may bring the member back; it is no
 * ring heartbeat either. */
enum { EL_F_WAITING = 1, EL_F_RECOVERING = 2, EL_F_SPARE = 4, EL_F_COORD = 8, EL_F_PROBE = 16 };
enum { EL_D_MINORITY = 1, EL_D_FATAL = 2 };

#define EL_MAGIC 0x57454c31u /* "WEL1" */

/* Membership of one epoch: who is in the step and which rank each holds. */
struct el_state {
    uint64_t epoch;
    int ntasks;
    WHALE_GRID(grid);
    int world;
    int *rank_of_task;      /* [ntasks] logical rank, -1 spare or gone */
    uint8_t *member;        /* [ntasks] 1 still in the step (working or spare) */
};

/* Wire header of every control message; arrays follow per type:
 *   HB      nothing
 *   NOTICE  dead[ntasks] how[ntasks] float lat[ntasks]
 *   PROPOSE dead[ntasks] how[ntasks] float lat[ntasks], state
 *   DECIDE  state, struct whale_membership_event
 * state = the degrees (struct whale_grid as int32s), world (int32),
 *         rank_of_task[ntasks] (int32), member[ntasks] (uint8); its epoch
 *         is the header's. Every process of a step runs one build, so the
 *         grid's members travel as they are. */
#define EL_GRID_INTS ((int)(sizeof(struct whale_grid) / sizeof(int32_t)))
_Static_assert(sizeof(struct whale_grid) % sizeof(int32_t) == 0 && sizeof(int) == sizeof(int32_t),
               "struct whale_grid travels as int32s");
#define EL_STATE_HEAD ((size_t)(EL_GRID_INTS + 1) * sizeof(int32_t))
struct el_hdr {
    uint32_t magic;
    uint8_t type, flags;
    uint16_t dflags;        /* DECIDE: EL_D_* */
    int32_t task;           /* sender */
    uint32_t ntasks;
    uint64_t epoch;         /* sender's membership epoch (DECIDE: the new one) */
    uint64_t counter;       /* progress counter (heartbeats) */
    int64_t last_step;      /* PROPOSE: my_last_completed_step (INT64_MAX: spare) */
};

struct el_proposal {
    bool valid;
    uint64_t epoch;
    int64_t last_step;
    bool spare;
};

struct comm_elastic {
    bool armed;             /* heartbeats + failure broadcast on */
    double hb_interval, hang_timeout, agree_timeout;
    double next_hb, next_watch;
    double last_pass; /* when this task last ran its heartbeat pass */
    double last_poll; /* when this task last polled (mp_own_stall) */
    /* per task */
    double *last_heard;     /* any control message */
    uint64_t *counter;      /* last progress counter heard */
    double *counter_at;     /* when it last changed */
    uint8_t *peer_flags;    /* flags of its last heartbeat */
    bool *hb_seen;          /* it sends heartbeats: silence counts */
    struct mp_arrival *arr; /* its heartbeats' inter-arrival times */
    struct mp_ring ring;    /* whom this task heartbeats */
    int *inflight;          /* control sends not yet completed */
    uint8_t *how;           /* enum whale_detect of a dead task, 0 alive */
    bool *hard;             /* died for sure (CRASH/NODE), not merely silent */
    double *gone_at;        /* when it was declared failed (el_now) */
    double *revived_at;     /* when it was last heard again within the grace, 0 never */
    double grace;           /* WHALE_NODE_GRACE seconds, 0 none (el_grace.c) */
    uint64_t grace_logged;  /* epoch whose wait was logged, +1 (0: none) */
    double last_revival;    /* when a member was last heard again, 0 never */
    uint8_t grace_how;      /* how the members waited for were detected */
    float grace_lat;        /* and the worst detection latency among them */
    float *lat;             /* last sign of life -> declared dead, seconds */
    bool notice_dirty;      /* something new to broadcast */
    bool suspected;         /* a failure is known: recovery needed */
    bool excluded;          /* another task declared me failed */
    bool done;              /* every working rank finished (spares) */
    uint8_t *done_from;     /* [ntasks] DONE received from this task */
    bool recovering, waiting_spare;
    atomic_uint_fast64_t progress;
    /* membership */
    struct el_state st;
    struct el_proposal *prop;   /* [ntasks] (coordinator) */
    /* a decision received (newest epoch) */
    uint8_t *decide_msg;
    size_t decide_len;
    uint64_t decide_epoch;
    /* the posted control receive */
    void *rx_buf, *rx_req;
    size_t rx_cap, rx_len;
    bool rx_posted;
    volatile bool rx_done;
    int rx_status;              /* ucs_status_t */
    ucp_tag_recv_info_t rx_info;
    pthread_cond_t cond;    /* spare wait: news arrived */
    struct whale_topo *topo;    /* site topology for the spare choice, or NULL */
    struct el_mp *mp;           /* the tree agreement, NULL: the coordinator (el_mp.c) */
};

/* el_detect.c */
int el_init(struct whale_ctx *ctx);
void el_fini(struct whale_ctx *ctx);
void el_cancel_rx(struct whale_ctx *ctx);       /* before the worker goes */
int el_poll(struct whale_ctx *ctx);             /* receive + ticks; events seen */
double el_next_deadline(struct whale_ctx *ctx); /* seconds until the next tick, <0 none */
void el_on_dead(struct whale_ctx *ctx, int task, int how, double last_heard);
void el_fail_all_groups(struct whale_ctx *ctx, int task);
/* A member declared failed for silence takes its place back (heard again
 * within the grace, or kept by a decision): alive, detector state fresh. */
void el_revive(struct whale_ctx *ctx, int task, const char *why);
/* A member spare that holds nothing of the training here (no whale_remote
 * to its memory: neither offloaded state nor in-memory copies). */
bool el_idle_spare(const struct whale_ctx *ctx, int task);
int el_send(struct whale_ctx *ctx, int task, const void *msg, size_t len);
void el_broadcast_done(struct whale_ctx *ctx);
double el_now(void);
/* Exact size of a control message of this type for n tasks (0: unknown). */
size_t el_msg_size(int type, int n);
/* Same-node process state from /proc ('R', 'S', 'T', ...; 0 unknown/gone). */
char el_proc_state(int64_t pid);

/* el_agree.c */
int el_recover(struct whale_ctx *ctx, int64_t last_step, bool spare_caller,
               struct whale_membership_event *ev);
int el_state_copy(struct el_state *dst, const struct el_state *src);
/* Parse a serialized state (n tasks) into *s (allocated): 0 or WHALE_EDATA. */
int el_get_state(const uint8_t *p, size_t left, int n, uint64_t epoch, struct el_state *s);
void el_state_free(struct el_state *s);

/* The tree agreement on the removed set (el_mp.c): every survivor builds
 * the decision from it with el_decide (step INT64_MAX: agreed in the
 * closing reduction). 0 or a negative WHALE_E*. */
int el_tree_decision(struct whale_ctx *ctx, const uint8_t *gone);

/* el_mp.c: the tree agreement (mp_node.c) on the control endpoint.
 * el_mp_init reads WHALE_MEMBERSHIP (tree | coordinator, the default);
 * el_mp_feed reports the failures known here (since: when the recovery
 * began); el_mp_stopped: no majority decided in time (a cut-off
 * minority). */
int el_mp_init(struct whale_ctx *ctx);
void el_mp_fini(struct whale_ctx *ctx);
size_t el_mp_wire_size(void);
void el_mp_handle(struct whale_ctx *ctx, int from, const uint8_t *body, size_t len);
void el_mp_poll(struct whale_ctx *ctx);
double el_mp_next(struct whale_ctx *ctx);
void el_mp_feed(struct whale_ctx *ctx, double since);
bool el_mp_stopped(const struct whale_ctx *ctx);

/* el_grace.c: pure rules of the recovery window (WHALE_NODE_GRACE).
 * el_grace_wanted: the decision at hand costs something a returning member
 * would spare (no quorum, ENOFIT, or a SHRUNK event). el_grace_left:
 * seconds still to wait for the members gone for silence (not hard) of
 * member[] (0: decide now). el_grace_may_revive: a task heard again may
 * take its place back. */
bool el_grace_wanted(bool quorum, int decide_rc, const struct whale_membership_event *ev);
double el_grace_left(int n, const uint8_t *member, const uint8_t *gone, const bool *hard,
                     const double *gone_at, double grace, double now);
bool el_grace_may_revive(bool member, bool dead, bool hard, double gone_at, double grace,
                         double now);

/* el_decide.c: pure (no ctx, no lock). Given the base state, which tasks are
 * gone, and the link class between any task's node and any other's
 * (cls(a, b, user) -> 0..4), compute the new state and the event. Returns 0,
 * or WHALE_ENOFIT when DP = 1 and a rank has no spare (ev says which). */
typedef int (*el_class_fn)(int task_a, int task_b, void *user);
int el_decide(const struct el_state *base, const uint8_t *gone, const uint8_t *how,
              el_class_fn cls, void *user, struct el_state *out,
              struct whale_membership_event *ev);

#endif
