/* Scalable membership protocol: pure state machines, no I/O.
 *
 * One agent per node (the node's leader task) runs the protocol for all
 * tasks of its node: local tasks are watched through the pid watchdog and
 * process state (mp_local_dead), remote nodes through a ring. Everything
 * the agent does is a reaction to one of three events -- a message
 * received (mp_recv), a timer fired (mp_tick), a local task gone
 * (mp_local_dead) -- and everything it emits goes through mp_io: a send
 * and a clock. The real runtime binds mp_io to its transport and the
 * monotonic clock; the deterministic simulator (tests/sim/) binds it to a
 * simulated network and clock, so both run the same code.
 *
 * Detector (SWIM/Lifeguard style): each node pings its MP_WATCH live ring
 * successors every period. A target is suspected when its silence exceeds
 * an adaptive bound (mp_arrival: mean + k * sd of the observed ack
 * inter-arrival times, never below a floor), then probed directly again
 * and indirectly through MP_HELPERS other nodes; only when none of them
 * hears it within the confirmation window is it declared failed. A
 * starved node whose answers are late but within the window therefore
 * stays. Heartbeat traffic per node is 2 * MP_WATCH messages per period,
 * independent of N; each message has a fixed size.
 *
 * Agreement: failures are reported to the root (the lowest live node of
 * the epoch in the reporter's view). The root runs a two-phase ballot
 * (prepare/promise, accept/accepted; Paxos, so that a root that dies
 * mid-ballot cannot make two survivors commit different values) down a
 * k-ary tree of the live nodes rooted at itself, with replies aggregated
 * on the way up: O(log_k N) hops per phase, messages of size O(failed).
 * A subtree that does not answer within its deadline is routed around
 * (its children are asked directly) and the silent node joins the
 * removed set. The root commits only with promises and acceptances from
 * more than half of the epoch's nodes: a cut-off minority never commits
 * and stops after MP_STOP_S without a decision. Commits travel down the
 * same tree; a node that missed one catches up from any ping carrying a
 * newer epoch (full state, the only message of size O(N/8)). */
#ifndef WHALE_MP_H
#define WHALE_MP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MP_WATCH 2       /* ring successors each node pings */
#define MP_HELPERS 3     /* indirect probers before a suspect is declared */
#define MP_FANOUT 16     /* agreement tree arity */
#define MP_MAXF 65536    /* removals one decision carries */

/* Timing (seconds) */
struct mp_timing {
    double period;       /* ping period */
    double floor;        /* never suspect a silence shorter than this */
    double confirm;      /* indirect-probe window before declaring */
    double hop;          /* per-level agreement deadline */
    double resend;       /* retransmission of unanswered protocol messages */
    double settle;       /* root batches reports this long */
    double stop;         /* no decision this long after news: stop */
};
void mp_timing_default(struct mp_timing *t);

/* Adaptive suspicion (phi-accrual in its normal approximation): EWMA of
 * the inter-arrival times of a peer's answers and of their variance. */
struct mp_arrival {
    double mean, var;
    double last;         /* time of the last arrival, <0 none yet */
    int n;
};
void mp_arrival_init(struct mp_arrival *a, double now, double expect);
void mp_arrival_note(struct mp_arrival *a, double now);
/* The silence after which the peer is suspected: mean + 6 sd (phi ~ 9),
 * sd at least a quarter of the mean, never below floor. */
double mp_arrival_bound(const struct mp_arrival *a, double floor);
/* Silence counts only while the observer runs: a machine-wide stall (every
 * task starved or frozen at once) ends with each task checking its senders
 * before they could send again. Called on every poll with the time of the
 * previous one (updated here) and the longest interval the observer
 * sleeps between polls: returns how long the observer itself did not run
 * (0 for a gap within twice the interval), to be forgiven its peers. */
double mp_own_stall(double *last_poll, double now, double interval);

enum mp_type {
    MP_PING = 1, MP_ACK, MP_PREQ, MP_PACK, /* detector */
    MP_REPORT,                            /* failure -> root */
    MP_PREPARE, MP_PROMISE, MP_ACCEPT, MP_ACCEPTED, MP_COMMIT, /* agreement */
    MP_STATE,                             /* catch-up: full membership */
};

/* A removal: a node (all its tasks) or one task. A node all of whose
 * tasks are gone is gone too. MP_NOOP removes nothing: it asks for a
 * decision all the same (a runtime whose members all came back within a
 * grace period must still agree that everyone goes on). */
struct mp_item {
    int32_t id;          /* node >= 0, -(task + 1), or MP_NOOP */
};
#define MP_NOOP INT32_MIN

struct mp_msg {
    uint8_t type;
    int32_t from;        /* sender node */
    int32_t about;       /* PREQ/PACK: the probed node; waves: the root */
    uint64_t epoch;      /* sender's committed epoch (waves: the one decided) */
    uint64_t seq;        /* probes: sequence; waves: ballot */
    uint64_t ab;         /* PROMISE: highest accepted ballot (0 none) */
    uint64_t nack;       /* PROMISE/ACCEPTED: a higher ballot refused below (0 none) */
    uint8_t lag;         /* PROMISE/ACCEPTED: the child lacks the epoch: send it STATE */
    uint32_t count;      /* PROMISE/ACCEPTED: nodes that answered */
    uint32_t nitems;
    struct mp_item *items;       /* REPORT/waves: removals; PROMISE: accepted value then missing */
    uint32_t nacc;               /* PROMISE: how many of items are the accepted value */
    const struct mp_node *state; /* STATE: the sender (copied by the receiver) */
};
/* Bytes this message takes on the wire. */
size_t mp_msg_bytes(const struct mp_msg *m, int nnodes);

struct mp_io {
    void (*send)(void *user, int to, const struct mp_msg *m); /* copies what it keeps */
    void *user;
};

/* One wave (a phase of a ballot) as seen by one node. */
struct mp_wave {
    bool active;
    uint8_t type;                /* MP_PREPARE / MP_ACCEPT */
    uint64_t epoch, ballot;
    int root, parent;
    int reply_to[4], nreply;
    int *kids, nkids, capkids;   /* the children waited for: k, plus adopted */
    double *kid_deadline;
    bool *kid_done;
    double next_resend;
    uint32_t count;
    uint64_t ab, nack;
    struct mp_item *acc; uint32_t nacc;      /* best accepted value below */
    struct mp_item *miss; uint32_t nmiss;    /* silent nodes below */
    struct mp_item *val; uint32_t nval;      /* the wave's removal set */
    bool replied;
};

struct mp_watch {
    int target;                  /* -1 none */
    struct mp_arrival arr;
    double probe_deadline;       /* >0: suspected, declared at this time */
    uint64_t seq;
};

struct mp_node {
    int id, nnodes, tasks_per_node;
    struct mp_timing tm;
    struct mp_io io;
    uint64_t rng;
    bool stopped, excluded;
    /* committed membership */
    uint64_t epoch;
    uint8_t *alive;              /* [nnodes / 8] bitmap */
    int32_t *gone_tasks; uint32_t ngone, capgone; /* sorted removed tasks */
    uint64_t hash;               /* of the committed membership */
    /* detector */
    double next_ping;
    struct mp_watch w[MP_WATCH];
    uint64_t pseq;
    /* failures known, not yet committed */
    struct mp_item *news; uint32_t nnews;
    double news_since;           /* first uncommitted news, <0 none */
    double next_report;
    /* Paxos acceptor */
    uint64_t promised, acc_ballot, acc_epoch;
    uint64_t seen_ballot;        /* highest ballot seen refused: the next must beat it */
    int skip;                    /* 1: the root is silent, propose ourselves */
    double skip_at;              /* last sign of the root */
    struct mp_item *accv; uint32_t naccv;
    /* root */
    uint64_t round;
    double ballot_at;            /* start the next ballot at; <0 none */
    struct mp_wave wave;         /* the wave this node takes part in */
    bool proposing;
    /* statistics */
    uint64_t sent_msgs, sent_bytes, hb_msgs, hb_bytes;
};

/* Task-level heartbeat map of the runtime's detector (mp_ring.c). */
struct mp_ring {
    int ntasks, nnodes;
    int *first;          /* [nnodes + 1] offsets into tasks */
    int *tasks;          /* task ids grouped by node, ascending */
    int *local;          /* [ntasks] index of a task among its node's */
    int *node;           /* [ntasks] */
};
int mp_ring_init(struct mp_ring *r, int ntasks, const int *node_of, int nnodes);
void mp_ring_free(struct mp_ring *r);
/* Up to MP_WATCH tasks `me` heartbeats among those ok() accepts; returns
 * how many were written to out. */
int mp_ring_targets(const struct mp_ring *r, int me, bool (*ok)(int task, void *user), void *user,
                    int *out);

int mp_node_init(struct mp_node *n, int id, int nnodes, int tasks_per_node,
                 const struct mp_timing *tm, const struct mp_io *io, uint64_t seed, double now);
void mp_node_free(struct mp_node *n);
void mp_recv(struct mp_node *n, const struct mp_msg *m, double now);
void mp_tick(struct mp_node *n, double now);
/* A task is gone for sure (pid watchdog / process state): a node whose
 * tasks are all gone for sure does not count towards the majority. */
void mp_local_dead(struct mp_node *n, int task, double now);
/* A node is failed by the embedding runtime's own detector (silence it
 * judged, e.g. after a grace period): reported like one of ours. */
void mp_suspect(struct mp_node *n, int node, double now);
/* A decision is wanted even if nothing is removed (MP_NOOP). */
void mp_request(struct mp_node *n, double now);
/* When mp_tick must run next. */
double mp_next(const struct mp_node *n);
bool mp_is_alive(const struct mp_node *n, int node);
bool mp_task_gone(const struct mp_node *n, int task);
/* Bytes of membership state this node holds. */
size_t mp_state_bytes(const struct mp_node *n);

#endif
