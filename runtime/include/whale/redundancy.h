/* The state half of elastic training: in-memory copies of a rank's training
 * state (for rollback and for handing a failed rank's place to a spare),
 * the rule that says who holds whose copy, fault injection (WHALE_FAULT)
 * and the recovery event record.
 *
 * Everything goes through the checkpoint seam only: whale_engine_tensors()
 * for the pieces and whale_engine_get/set_state() for the scalars, so the
 * copies stay complete when mixed precision (MASTER pieces) or offload
 * (pieces in host memory) change what a rank holds.
 *
 * An *image* of a rank at a completed step is
 *     [slot header | struct whale_train_state | unique pieces | replicated pieces]
 * "Unique" pieces exist only on this rank (ZeRO shards, TP/PP slices when
 * DP = 1); "replicated" ones are held identically by every DP replica
 * (weights and moments at ZeRO 0, weights at ZeRO 1/2) and need no copy
 * elsewhere. The survivor keeps the whole image (to roll back), the holder
 * gets header + state + unique pieces (to rebuild a lost rank). Each slot
 * carries its step, a layout hash and an xxh64 of its bytes, and there are
 * two slots per owner written alternately, so a refresh cut short by a
 * failure is detected and the previous copy is still intact. */
#ifndef WHALE_REDUNDANCY_H
#define WHALE_REDUNDANCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/engine.h"
#include "whale/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- where a copy goes ------------------------------------------------------
 * A target is the holder's memory for one owner: 2 slots of
 * whale_red_remote_slot_bytes() each. put/wait are non-blocking puts and
 * their completion (remote completion after wait); the memory target is an
 * in-process buffer (tests, and the holder's own view of what it holds), the
 * RMA target (whale_red_target_rma) uses the comm module's whale_iput. */
struct whale_red_target {
    int  (*put)(void *u, size_t off, const void *src, size_t len, void **req);
    int  (*wait)(void *u, void *req);     /* completes (remotely) and frees req */
    void (*release)(void *u);             /* frees u (may be NULL) */
    void *u;
};
/* base must hold 2 * slot_bytes; it is not owned. */
int whale_red_target_mem(void *base, size_t len, struct whale_red_target *out);
/* The owner's 2 slots at byte `base` of a peer's registered region (dst
 * from whale_region_exchange; not owned). Completion = whale_wait + a flush
 * of dst, so a finished refresh is visible at the holder. */
int whale_red_target_rma(whale_remote *dst, size_t base, struct whale_red_target *out);

/* ---- the store of one rank ------------------------------------------------ */
typedef struct whale_red whale_red;

struct whale_red_config {
    int dp;                /* DP degree and ZeRO stage of the layout (they decide */
    int zero;              /* which pieces every DP replica holds) */
    bool copy_all;         /* the holder gets replicated pieces too (e.g. DP = 1 after a shrink) */
    int every;             /* refresh every K completed steps (>= 1) */
};

/* Reads WHALE_REDUNDANCY_EVERY (1..1000000; 0 disables the remote copy,
 * the rollback snapshot stays; "auto" gives dflt: the caller adapts K with
 * whale_red_adapt_every). Bad value: message naming it, WHALE_EINVAL. */
int whale_red_every_from_env(int dflt, int *every);

/* WHALE_REDUNDANCY_EVERY=auto (and unset, in whale-train): the refresh
 * interval follows the measured cost. Given one refresh's cost (serialising
 * + waiting, seconds), the step time, the target share (0.05) and the
 * current K: the K to use, 1..kmax. Up at once; down by one only when K - 1
 * would stay within half the target (hysteresis). Non-positive or NaN
 * times: K unchanged. */
int whale_red_adapt_every(double refresh_s, double step_s, double target, int cur, int kmax);
/* Change K of a live store (every rank must use the same K). */
void whale_red_set_every(whale_red *r, int every);

/* Sizes the image from the engine's current layout and allocates the two
 * local slots. The engine is only walked, never kept. */
int  whale_red_create(whale_engine *e, const struct whale_red_config *c, whale_red **out);
void whale_red_destroy(whale_red *r);

/* Bytes of one remote slot (header + state + unique pieces, or everything
 * with copy_all) and of one local slot (everything). */
size_t whale_red_remote_slot_bytes(const whale_red *r);
size_t whale_red_local_slot_bytes(const whale_red *r);

/* Attach (or with NULL detach) the holder. Ownership of t->u passes to r. */
int whale_red_set_target(whale_red *r, const struct whale_red_target *t);

/* After every completed step: finishes the previous refresh (its puts had
 * a whole step to overlap with compute), serialises this step into the
 * other local slot and, every K steps, starts the puts of it into the
 * matching remote slot. Returns WHALE_EPEER when the holder is gone (the
 * local snapshot is still taken). */
int whale_red_snapshot(whale_red *r, whale_engine *e);
/* Waits for the refresh in flight (before a clean exit, or in tests). */
int whale_red_flush(whale_red *r);

/* Would whale_red_rollback accept this engine (same pieces, as the images
 * were cut)? After a shrink at ZeRO >= 1 the shards move: no. */
bool whale_red_fits(const whale_red *r, whale_engine *e);
/* Steps held locally (-1: empty slot), newest first. */
void whale_red_local_steps(const whale_red *r, int64_t steps[2]);
/* Restore the engine (a new one on rebuilt groups, or the same after a
 * failed step) to the local image of `step`: every piece and the scalars.
 * WHALE_ENOENT when that step is not held; WHALE_EDATA when the engine's
 * layout differs from the image's. */
int whale_red_rollback(whale_red *r, whale_engine *e, int64_t step);

/* ---- reading a holder's copy ----------------------------------------------
 * mem: the owner's 2 slots (2 * slot_bytes) as the holder has them (or as
 * fetched). Scans both slots: steps[i] = step of slot i when it is complete,
 * untorn and of a known layout, else -1 (torn[i] = true when a header is
 * present but its bytes do not match: a refresh cut short). */
void whale_red_scan(const void *mem, size_t slot_bytes, int64_t steps[2], bool torn[2]);
/* Restore an engine from the slot holding `step`: the scalars and every piece
 * the slot holds (unique ones; all with copy_all). *complete says whether
 * the replicated pieces were in it too (otherwise take them from a DP
 * replica: whale_red_sync_replicated). */
int whale_red_restore_slot(whale_engine *e, const void *mem, size_t slot_bytes, int64_t step,
                           bool *complete);
/* Broadcast the DP-replicated pieces from DP group rank `root` to the
 * others (a promoted spare takes them from a surviving replica). */
int whale_red_sync_replicated(whale_engine *e, whale_group *dp, int root, int zero);

/* ---- resharding: images into an engine of another layout -------------------
 * Every image carries a directory of its pieces (name, kind, flat range),
 * so images cut for one DP degree and ZeRO partition can fill an engine of
 * another (an elastic shrink at ZeRO >= 1 moves the shards). An image is
 *     [struct whale_train_state | directory | unique pieces | replicated pieces]
 * and `len` says how much of it is there: the unique prefix (what a holder
 * keeps, and what the survivors exchange) or everything. */
struct whale_red_image {
    const void *data;
    size_t len;
};
/* The local image of `step` (the whole of it) and the length of its unique
 * prefix. WHALE_ENOENT when this rank does not hold that step. */
int whale_red_local_image(const whale_red *r, int64_t step, struct whale_red_image *out,
                          size_t *unique_len);
/* The image of `step` in a holder's 2 slots (whale_red_scan's rules).
 * WHALE_ENOENT when neither slot holds it intact. */
int whale_red_slot_image(const void *mem, size_t slot_bytes, int64_t step,
                         struct whale_red_image *out);
/* Fill every piece of e from the images (same model, any DP degree or ZeRO
 * stage; the same TP/PP coordinate): each element from an image whose
 * directory covers it; the scalars from img[0]. WHALE_ENOENT, naming the
 * piece, when some element is in none of them; WHALE_EDATA for an image
 * that does not parse. */
int whale_red_fill(whale_engine *e, const struct whale_red_image *img, int n);

struct whale_red_stats {
    uint64_t local_bytes;   /* bytes serialised per snapshot (everything) */
    uint64_t remote_bytes;  /* bytes put to the holder per refresh */
    int64_t snapshots, refreshes, torn_waits;
    double t_serialize;     /* seconds, sum over snapshots */
    double t_wait;          /* seconds blocked finishing refreshes */
    uint64_t dir_bytes;     /* of those, the image's directory of pieces */
};
void whale_red_get_stats(const whale_red *r, struct whale_red_stats *s);

/* Does this piece exist identically on every DP replica (so the holder
 * needs no copy of it)? With DP > 1: everything at ZeRO 0, the weights
 * (kind PARAM) at ZeRO 1/2, nothing at ZeRO 3; never an expert's piece
 * (p->expert: other EP ranks hold other experts). (Not the flat range: a
 * small tensor that falls whole into one rank's ZeRO shard covers its box
 * but exists once.) */
bool whale_red_piece_replicated(const struct whale_tensor_piece *p, int dp, int zero);

/* ---- who holds whose copy --------------------------------------------------
 * Deterministic (every rank computes the same answer without talking).
 * Inputs: the layout and the node of every working rank and every spare
 * task. Rule, for each working rank r:
 *   1. nothing to copy (ZeRO 0 with DP > 1 and no EP: the DP replicas hold
 *      it all; with EP each rank's experts are its own)
 *      -> holder = WHALE_RED_NO_HOLDER;
 *   2. spares exist: the spares' memory, spread round-robin over the
 *      spares in rank order, preferring a spare on another node than r
 *      -> holder = -(1 + spare index);
 *   3. else the same (tp, pp) coordinate in the next DP replica
 *      (dp + 1 mod DP), if on another node; else the first rank after r
 *      (cyclically) on another node; else (one node) the next rank
 *      -> holder = that working rank. */
#define WHALE_RED_NO_HOLDER  INT32_MIN
struct whale_red_layout {
    WHALE_GRID(grid);          /* working ranks = tp * pp * dp, Megatron order */
    int zero;                  /* ZeRO stage */
    const int *rank_node;      /* [tp*pp*dp] node index of each working rank */
    int nspares;
    const int *spare_node;     /* [nspares] */
};
int whale_red_holders(const struct whale_red_layout *l, int *holder /* [world] */);
/* The owners whose copies `me` holds (me: working rank >= 0, or -(1+spare)). */
int whale_red_owned_by(const struct whale_red_layout *l, int me, int *owners, int max);

/* ---- fault injection: WHALE_FAULT ------------------------------------------
 *   WHALE_FAULT="ACTION:KEY=VAL[:KEY=VAL...][;ACTION:...]"
 *   ACTION  kill (SIGKILL itself) | hang (SIGSTOP itself)
 *   rank=N[,N...]  logical rank(s) that fail (required; several ranks in one
 *           item fail at the same step and phase, like items joined by ;)
 *   step=N  the 1-based step during which it fails (required)
 *   phase=  start (default: before the step's first forward) | forward
 *           (inside the first forward) | backward (inside the first backward)
 *           | collective (a gradient collective in flight) | optimizer
 *           (before the update) | ckpt (a checkpoint save of this step in
 *           flight)
 * A fault fires once per process (a replacement does not inherit it: it
 * fires only in the task that was started with that logical rank). */
enum whale_fault_phase {
    WHALE_FAULT_START = 0, WHALE_FAULT_FORWARD, WHALE_FAULT_BACKWARD, WHALE_FAULT_COLLECTIVE,
    WHALE_FAULT_OPTIMIZER, WHALE_FAULT_CKPT, WHALE_FAULT_PHASE_COUNT_
};
enum whale_fault_action { WHALE_FAULT_KILL = 0, WHALE_FAULT_HANG };
#define WHALE_FAULT_MAX 16
struct whale_fault {
    enum whale_fault_action action;
    int rank;
    int64_t step;
    enum whale_fault_phase phase;
    bool fired;
};
struct whale_fault_plan {
    int n;
    struct whale_fault f[WHALE_FAULT_MAX];
};
/* Strict parse; an error names the item and the problem (WHALE_EINVAL). */
int whale_fault_parse(const char *spec, struct whale_fault_plan *out);
/* Parse $WHALE_FAULT (unset/empty: no faults). */
int whale_fault_from_env(struct whale_fault_plan *out);
const char *whale_fault_phase_name(enum whale_fault_phase p);
/* The fault due now for this rank, step (1-based) and phase, or NULL; marks
 * it fired. */
const struct whale_fault *whale_fault_due(struct whale_fault_plan *p, int rank, int64_t step,
                                          enum whale_fault_phase phase);
/* Do two or more faults fire at this step and phase (whatever the rank)?
 * Every process of the step computes the same answer from the same
 * WHALE_FAULT, so whale-train can meet all ranks in a barrier there first:
 * then no rank can notice one victim's death before the others have died
 * too (simultaneous faults, e.g. a rank and the holder of its copy). */
bool whale_fault_group_due(const struct whale_fault_plan *p, int64_t step,
                           enum whale_fault_phase phase);
/* whale_fault_due + carry it out (logs a line first, then SIGKILL/SIGSTOP). */
void whale_fault_point(struct whale_fault_plan *p, int rank, int64_t step,
                       enum whale_fault_phase phase);

/* ---- the recovery record ---------------------------------------------------- */
struct whale_recovery_report {
    const char *kind;          /* "replaced" | "shrunk" | "restored" | "stopped" */
    const char *how;           /* "crash" | "node" | "link" | "hang" */
    int nfailed;
    int failed_rank[8];
    char failed_node[8][64];
    int64_t failed_step;       /* step that was running (1-based) */
    int64_t rollback_step;     /* completed step everybody went back to */
    int64_t steps_lost;        /* steps computed again */
    WHALE_GRID(grid);          /* layout after recovery */
    double detect_s, agree_s, transfer_s, rebuild_s, redo_s;
    const char *source;        /* "memory" | "replica" | "disk" */
    /* appended: the failed tasks (Slurm task ids), when tasks_known */
    int failed_task[8];
    bool tasks_known;
    /* appended: spare tasks that failed (no rank), named in the log line */
    int nfailed_spares;
    int failed_spare_task[8];
    char failed_spare_node[8][64];
};
struct whale_membership_event;
/* Copy the failed spares of ev into r (whale_recovery_log names them). */
void whale_recovery_note_spares(struct whale_recovery_report *r,
                                const struct whale_membership_event *ev);
/* {"event":"recovery", ...} as one compact JSON line (caller frees). */
char *whale_recovery_json(const struct whale_recovery_report *r);
/* One human line: what failed, how it was detected, what was done, phase times. */
void whale_recovery_log(const struct whale_recovery_report *r);

#ifdef __cplusplus
}
#endif
#endif
