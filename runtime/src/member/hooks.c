/* Membership's side of the hooks comm calls (struct comm_member_hooks in
 * comm/comm_internal.h). comm sits below membership and never includes it:
 * this file registers the detector when libwhale is loaded, before any
 * whale_init can run. */
#include "comm/comm_internal.h"
#include "member/el_internal.h"

/* Since when the task is silent, for the detection latency reported: only
 * known for a task that heartbeats this one (mp_ring_targets); 0 unknown. */
static double silent_for(const whale_ctx *ctx, int task)
{
    return ctx->el->hb_seen[task] ? el_now() - ctx->el->last_heard[task] : 0;
}

static bool armed(const whale_ctx *ctx) { return ctx->el->armed; }

static bool needs_thread(const whale_ctx *ctx) { return ctx->el->armed || ctx->el->waiting_spare; }

static void disarm(whale_ctx *ctx) { ctx->el->armed = false; }

static const struct comm_member_hooks el_hooks = {
    .init = el_init,
    .cancel_rx = el_cancel_rx,
    .fini = el_fini,
    .poll = el_poll,
    .next_deadline = el_next_deadline,
    .on_dead = el_on_dead,
    .silent_for = silent_for,
    .armed = armed,
    .needs_thread = needs_thread,
    .disarm = disarm,
    .step_done = el_broadcast_done,
};

__attribute__((constructor)) static void member_register(void) { comm_member_register(&el_hooks); }
