/* Module-internal structures of the collectives layer.
 *
 * Execution model: every collective is compiled into a schedule (sched.h):
 * chains of rounds; a round posts tagged sends/receives and, once all have
 * completed, runs local actions (reduce, copy, average). Chains are
 * independent (pipelining: chunk c of a ring is chain c) and up to `window`
 * of them run at once. A composite operation (hierarchical algorithms) runs
 * stages, each a schedule on a sub-group, one after the other.
 *
 * One UCX worker per process, used under ctx->lock by whoever drives
 * progress: the progress thread (non-blocking requests) or a caller blocked
 * in whale_wait. Operations of one group run strictly in issue order (one at
 * a time), different groups run concurrently. */
#ifndef WHALE_COMM_INTERNAL_H
#define WHALE_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "boot/boot.h"
#include "comm/collectives/sched.h"
#include "whale/comm.h"

/* Algorithms (WHALE_COLL_ALGO names in comm_algo_name). */
enum comm_algo {
    COMM_ALGO_AUTO = 0,
    COMM_ALGO_RING,       /* pipelined ring */
    COMM_ALGO_RD,         /* recursive doubling (small messages) */
    COMM_ALGO_RABEN,      /* Rabenseifner: recursive halving + doubling */
    COMM_ALGO_HIER,       /* inside nodes, then across node leaders/rails */
    COMM_ALGO_TREE,       /* binomial tree (broadcast, reduce) */
    COMM_ALGO_SHM,        /* one node: through a shared segment (shm_coll.c) */
    COMM_ALGO_COUNT_
};

enum comm_coll {
    COMM_ALLREDUCE = 0, COMM_REDUCE_SCATTER, COMM_ALLGATHER, COMM_BROADCAST, COMM_REDUCE,
    COMM_BARRIER, COMM_ALLTOALL, COMM_COLL_COUNT_
};

const char *comm_algo_name(int algo);
int comm_algo_parse(const char *s);
const char *comm_coll_name(int coll);

/* Link class cost model (alpha-beta). */
struct comm_link {
    double alpha;   /* seconds per message */
    double beta;    /* seconds per byte */
};
/* COPY: a member's memcpy and a flag wait in a shared segment (COMM_ALGO_SHM) */
enum { COMM_LINK_SHM = 0, COMM_LINK_NET = 1, COMM_LINK_COPY = 2, COMM_LINK_NCLASS };

/* Entries of the table of collective transports (transport/transport.h). */
#define COMM_TRANSPORT_MAX 4

struct whale_group {
    whale_ctx *ctx;
    uint16_t gid;          /* tag space; unique among groups sharing a member */
    int size, rank;        /* my rank in the group, -1 if not a member */
    int *tasks;            /* [size] task id of each member (endpoint index) */
    int *world_ranks;      /* [size] logical rank (-1 for a spare) */
    int *node;             /* [size] node index */
    int nnodes;            /* distinct nodes among members */
    int ppn;               /* members per node when uniform, else 0 */
    bool internal;         /* sub-group of a hierarchical algorithm */
    whale_group *local;    /* members on my node (hierarchical), or NULL */
    whale_group *cross;    /* same local index on every node, or NULL */
    uint32_t seq;          /* next operation number (tag field) */
    uint16_t next_gid;     /* used by whale_group_create (per process) */
    int failed_rank;       /* world rank (or -2 - task for spares) of a dead member, -1 none */
    int failed_task;       /* task of that member (or of the failure that failed all groups), -1 unknown */
    bool failed;
    /* FIFO of operations in issue order */
    struct whale_req *head, *tail;
    struct whale_group *next_active; /* list of groups with pending work */
    bool active;
    bool owned;            /* freed by whale_group_free / finalize */
    struct comm_shm *shm;  /* shared segment of a one-node group (shm_seg.c), or NULL */
    int shm_state;         /* enum comm_shm_state: agreed by every member */
    void *tstate[COMM_TRANSPORT_MAX]; /* each transport's state (comm_transport_state) */
};

/* A stage run through the group's shared segment instead of a schedule
 * (shm_coll.c). Steps are numbered by the segment's generation counter;
 * s1/s2/s3 are the next step of each phase (copy in, reduce, copy out). */
enum comm_shm_kind { SHM_NONE = 0, SHM_ALLREDUCE, SHM_ALLREDUCE_SMALL, SHM_REDUCE_SCATTER, SHM_ALLGATHER };
struct comm_shm_job {
    int kind;
    const char *send;
    char *recv;
    size_t count;          /* elements of the whole vector (reduce-scatter, allgather: all blocks) */
    size_t cb;             /* elements of each block moved per step */
    uint64_t gen0;         /* generation of step 0 */
    uint32_t nsteps, s1, s2, s3;
    int avg_div;
    bool balanced;         /* blocks: balanced partition of count (else q * count) */
    /* the single-copy path (shm_cma.c): phase 0 publish, 1 wait for the
     * peers' buffers, 2 reduce / read, 3 wait until no peer reads mine */
    bool cma;
    uint8_t phase;
    uint32_t got[64];      /* [q] steps of peer q's block read so far (WHALE_SHM_MAX_RANKS) */
};

struct comm_stage {
    whale_group *g;
    uint32_t seq;
    struct sched sched;
    struct comm_shm_job shm;  /* kind != SHM_NONE: runs instead of sched */
};

enum comm_op_kind { COMM_OP_COLL = 0, COMM_OP_SEND, COMM_OP_RECV, COMM_OP_RMA };

struct comm_chain_state {
    struct whale_req *op;
    uint32_t round;        /* index relative to chain start */
    int outstanding;       /* UCX requests in flight */
    bool posted;           /* round's transfers posted, actions pending */
    bool done;
};

struct whale_req {
    whale_ctx *ctx;
    int kind;
    int refs;                 /* user + engine + UCX requests in flight */
    atomic_int done;
    int status;
    struct whale_req *next;     /* group FIFO */
    whale_group *g;
    int coll;                 /* enum comm_coll */
    int algo;
    enum whale_dtype dtype;
    enum whale_op rop;
    /* stages */
    int nstages, cur_stage;
    struct comm_stage stages[3];
    struct comm_chain_state *chains;
    int nchains, window, next_chain, first_open;
    bool started;
    /* in-flight UCX requests (for cancel on failure) */
    void **ucx_reqs;
    int nucx, capucx;
    /* point to point */
    int p2p_peer;
    /* RMA (rma.c): target task; UCX request still owned by UCX */
    int rma_task;
    bool rma_inflight;
    int rma_parts;            /* rma_tag.c: UCX requests of an emulated transfer */
    void *rma_ucx;            /* rma_tag.c: a get's reply receive, to cancel */
};
typedef struct whale_req comm_op_t;

/* Identity of a process for the same-node liveness check: the pid and its
 * start time (so a recycled pid is not mistaken for the peer). */
struct comm_proc_id {
    int64_t pid;
    int64_t start;
};
struct comm_proc_id comm_proc_self(void);
/* 1 alive, 0 gone, -1 cannot tell (not visible from here). */
int comm_proc_alive(const struct comm_proc_id *id);

/* Kernel sleeps of the progress engine (whale_progress_stats). */
struct comm_sleep_stats {
    uint64_t sleeps, woke_event, woke_wake, woke_timeout, busy;
};

struct whale_ctx {
    struct boot boot;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool thread_running, stop;
    bool fenced;         /* finalize: every task has left the last barrier */
    bool closing;        /* finalize passed its barrier: peers leaving is no failure */
    atomic_int nwaiters;
    int nactive;              /* operations queued or running, all groups */
    whale_group *active;      /* groups with queued operations */
    comm_op_t *p2p;           /* point-to-point operations in flight */
    comm_op_t *rma;           /* one-sided transfers in flight (rma.c) */
    ucp_context_h ucp;
    ucp_worker_h worker;
    ucp_ep_h *eps;            /* [ntasks] */
    bool *dead;               /* [ntasks] */
    int *remote_refs;         /* [ntasks] whale_remote handles held here to task t's memory:
                                 a spare with any lends state (offload memory, copies) */
    struct comm_proc_id *procs; /* [ntasks] */
    bool *watch;              /* [ntasks] same-node peer checked by pid */
    double next_watch;        /* next liveness check (CLOCK_MONOTONIC s) */
    double peer_timeout;      /* seconds */
    bool oversubscribed;      /* more tasks on this node than usable cores */
    int spin;                 /* idle polls before yielding the core */
    int sleep_after;          /* WHALE_PROGRESS_SLEEP: yields before sleeping on the event fd, 0 never */
    bool sleeping;            /* a thread sleeps in poll() on efd/wakefd (lock held to change) */
    struct comm_sleep_stats sleep_stats[2]; /* progress_sleep.c: [0] progress thread, [1] waiters (lock held) */
    struct comm_link link[COMM_LINK_NCLASS];
    size_t chunk_bytes;       /* pipelining chunk of ring algorithms */
    int shm_mode;             /* WHALE_SHM: 0 off, 1 on where possible */
    void *shm_wait;           /* struct comm_shm_bell a blocked shared-memory stage waits on (lock held) */
    uint32_t shm_wait_seen;   /* the bell's value before that stage looked at the flags */
    size_t shm_chunk;         /* WHALE_SHM_CHUNK: bytes of the vector per shared-memory step */
    bool shm_cma;             /* WHALE_SHM_CMA: single-copy path for large vectors (shm_cma.c) */
    size_t shm_cma_min;       /* WHALE_SHM_CMA_MIN: bytes from which it is taken */
    size_t shm_cma_step;      /* WHALE_SHM_CMA_STEP: bytes of a block reduced per step */
    size_t shm_stream_min;    /* WHALE_SHM_STREAM_MIN: receive vectors copied out with streaming stores */
    int window;               /* chains in flight */
    int forced_algo[COMM_COLL_COUNT_]; /* WHALE_COLL_ALGO */
    whale_group *world, *tp, *pp, *dp, *all;
    uint16_t next_gid;
    whale_group **groups;     /* every live group (failure marking) */
    int ngroups, capgroups;
    struct comm_elastic *el;  /* membership, detector (member/), opaque here */
    int wakefd;               /* eventfd: wakes the progress thread from poll(), -1 none */
    int efd;                  /* UCX worker event fd, -1 none */
    int nregions;             /* registered RMA regions (rma.c) */
    struct comm_rmat *rmat;   /* RMA emulated over tags (rma_tag.c), or NULL */
};

/* Group ids from COMM_GID_REBUILT up belong to the standard groups that
 * membership rebuilds for each epoch; whale_group_create stays below. */
#define COMM_GID_REBUILT 0x4000

/* Membership (member/, the module above comm) plugs in through these hooks,
 * registered once by comm_member_register: comm calls them and never the
 * membership code itself. ctx->el is non-NULL only after init succeeded, so
 * every hook but init runs only when ctx->el is set. poll, next_deadline,
 * on_dead, silent_for, disarm and step_done run with ctx->lock held. With
 * no hooks registered a step has no failure detector. */
struct comm_member_hooks {
    int (*init)(whale_ctx *ctx);                /* after the standard groups */
    void (*cancel_rx)(whale_ctx *ctx);          /* before the worker goes */
    void (*fini)(whale_ctx *ctx);
    int (*poll)(whale_ctx *ctx);                /* each progress pass: events seen */
    double (*next_deadline)(whale_ctx *ctx);    /* seconds to the next tick, <0 none */
    void (*on_dead)(whale_ctx *ctx, int task, int how, double lat);
    double (*silent_for)(const whale_ctx *ctx, int task); /* since its last sign of life */
    bool (*armed)(const whale_ctx *ctx);        /* heartbeats + failure broadcast on */
    bool (*needs_thread)(const whale_ctx *ctx); /* armed, or a spare waits */
    void (*disarm)(whale_ctx *ctx);             /* peers leave now: no failure */
    void (*step_done)(whale_ctx *ctx);          /* working ranks finished: tell the spares */
};
extern const struct comm_member_hooks *comm_member;
void comm_member_register(const struct comm_member_hooks *hooks);

/* progress_sleep.c: sleeping in the kernel while nothing moves. */
/* Default of WHALE_PROGRESS_SLEEP: yields before a thread sleeps on the
 * event fd (a few: a peer a step behind on another core usually answers
 * within them; more only burn the core the compute threads need). */
#define COMM_SLEEP_AFTER 32
/* Seconds a sleep may last while operations are posted: the next heartbeat,
 * the next pid check of the watchdog, a fraction of the peer timeout. <0:
 * no bound (idle, nothing to check). lock held. */
double comm_sleep_bound(whale_ctx *ctx);
/* Arm the UCX worker and sleep in poll() on its event fd and the wake
 * eventfd for at most max_s (<0: no bound). lock held on entry and exit,
 * dropped while asleep. 1: slept; 0: did not (the worker had events:
 * progress again; another thread sleeps already; no event fd). */
int comm_sleep_armed(whale_ctx *ctx, double max_s, bool waiter);
/* An operation completed or work arrived: end a sleep of another thread
 * (the sleeper may be waiting for exactly this). lock held. */
void comm_sleep_kick(whale_ctx *ctx);

/* Wake the progress thread (new work, a waiter left, stop). lock held. */
void comm_wake(whale_ctx *ctx);
/* The progress thread must keep serving the worker while idle (pending
 * operations, registered regions, heartbeats). */
bool comm_needs_thread(const whale_ctx *ctx);
/* init.c: (re)build all/world/TP/PP/DP from ctx->boot; member NULL: every
 * task. gid_base: gids gid_base + {0,3,6,9,12}. */
int comm_std_groups(whale_ctx *ctx, uint16_t gid_base, const uint8_t *member);

/* ucx.c */
int comm_ucx_init(whale_ctx *ctx);
int comm_ucx_connect(whale_ctx *ctx, void **addrs);
void comm_ucx_fini(whale_ctx *ctx, bool clean);
uint64_t comm_tag_coll(uint16_t gid, int src, uint32_t seq, uint32_t xtag);
uint64_t comm_tag_p2p(uint16_t gid, int src, int tag);
/* Post one transfer for an op; returns 1 when completed at once, 0 pending, <0 error. */
int comm_post(whale_ctx *ctx, comm_op_t *op, struct comm_chain_state *cs, whale_group *g,
              const struct sched_xfer *x, uint32_t seq);
void comm_mark_dead(whale_ctx *ctx, int task, const char *why);
/* how: enum whale_detect; lat: seconds since its last sign of life. */
void comm_mark_dead_how(whale_ctx *ctx, int task, const char *why, int how, double lat);
void comm_watchdog(whale_ctx *ctx);
/* Who a failed group lost, for messages: "rank R (task T on NODE)" (thread-local buffer). */
const char *comm_blame(const whale_group *g);

/* rma.c: completes finished RMA requests, fails those to dead targets;
 * ctx->lock held; returns events seen. */
int comm_rma_progress(whale_ctx *ctx);

/* rma_tag.c: one-sided transfers over tagged messages for PEER-mode peers
 * (UCX 1.13's emulated RMA kills the target when the origin dies). All
 * with ctx->lock held. init after connect (reads WHALE_RMA_PROTO). */
int  comm_rmat_init(whale_ctx *ctx);
void comm_rmat_fini(whale_ctx *ctx);
bool comm_rmat_emulated(const whale_ctx *ctx, int task);
void comm_rmat_region(whale_ctx *ctx, const void *buf, size_t len, bool add);
int  comm_rmat_post(whale_ctx *ctx, comm_op_t *op, uint64_t addr, void *local, size_t len, bool put);
void comm_rmat_abandon(whale_ctx *ctx, comm_op_t *op);
int  comm_rmat_pending(const whale_ctx *ctx, int task);
int  comm_rmat_progress(whale_ctx *ctx);   /* serves peers' requests */
int  comm_rmat_flush(whale_ctx *ctx, int task);

/* progress.c: the progress engine */
int comm_submit(whale_ctx *ctx, comm_op_t *op);
comm_op_t *comm_op_new(whale_ctx *ctx, whale_group *g, int coll);
void comm_op_unref(comm_op_t *op);        /* ctx->lock held */
int comm_progress(whale_ctx *ctx);        /* ctx->lock held; returns events seen */
int comm_thread_start(whale_ctx *ctx);
void comm_thread_stop(whale_ctx *ctx);
int comm_run_blocking(whale_ctx *ctx, comm_op_t *op);

/* group.c */
int comm_group_new(whale_ctx *ctx, uint16_t gid, const int *tasks, const int *world_ranks, int n,
                   bool internal, whale_group **out);
void comm_group_destroy(whale_group *g);
int comm_group_world_label(const whale_group *g, int group_rank);

/* select.c */
int comm_select(whale_group *g, int coll, size_t bytes, int forced);
int comm_link_class(const whale_group *g);
int comm_probe(whale_ctx *ctx, bool measure);
int comm_parse_algo_env(const char *s, int forced[COMM_COLL_COUNT_]);
int comm_parse_model_env(const char *s, struct comm_link *link);
void comm_set_gamma(double gamma);
double comm_get_gamma(void);

/* shm_seg.c: the shared segment of a group whose members are all on this
 * node. comm_shm_prepare is called by every member before its first
 * allreduce / reduce-scatter / allgather (caller's thread, ctx->lock not
 * held); it agrees with the others (two small collectives on the group)
 * whether the segment works, so shm_state is the same on every member. */
enum comm_shm_state { COMM_SHM_UNKNOWN = 0, COMM_SHM_READY, COMM_SHM_OFF, COMM_SHM_SETUP };
int comm_shm_prepare(whale_group *g);
void comm_shm_release(whale_group *g);
/* shm_coll.c: fill st->shm for a collective; advance it (ctx->lock held):
 * 1 finished, 0 waiting for peers, <0 error. */
/* balanced: count is the whole vector, blocks its balanced partition
 * (reduce-scatter: recv gets my block; allgather: send is my block). */
int comm_shm_build(comm_op_t *op, struct comm_stage *st, int coll, const void *send, void *recv,
                   size_t count, int avg_div, bool balanced);
int comm_shm_advance(comm_op_t *op, struct comm_stage *st, int *events);
/* A small blocking allreduce on a user group with nothing queued, done in
 * the caller's thread without an operation object (latency). 1: not
 * applicable, take the engine; 0 done; <0 error. */
int comm_shm_allreduce_now(whale_group *g, const void *send, void *recv, size_t count,
                           enum whale_dtype t, enum whale_op op);


/* build.c: turn (collective, algorithm, buffers) into stages */
int comm_build(comm_op_t *op, const void *send, void *recv, size_t count, int root);

#endif
