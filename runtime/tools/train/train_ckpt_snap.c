/* Which snapshot whale-train's checkpoints take (WHALE_CKPT_SNAPSHOT).
 *
 * deferred (the default): whale_ckpt_save returns at once, the save thread
 * copies the weights and moments while the next step's forward and
 * backward run, and the optimizer phase waits for the copy (the fence in
 * train_elastic.c's phase hook; the caller helps with what is left). The
 * step stalls for the copy only when forward/backward is shorter than it.
 * copy: the save copies everything before the step goes on (the stall is
 * the whole copy). With offload the tensors a save reads are host-tier
 * buffers that exist only during the engine's tensor walk, so those runs
 * copy. */
#include "train.h"

#include "whale/ckpt.h"
#include "whale/knobs.h"
#include "whale/log.h"

void train_ckpt_snapshot_mode(struct train *t)
{
    whale_ckpt_config *ckc = &t->ckc;
    bool asked = whale_knob_getenv("WHALE_CKPT_SNAPSHOT") != NULL;
    if (!asked) {
        ckc->snapshot = t->ec.offload ? WHALE_CKPT_SNAPSHOT_COPY : WHALE_CKPT_SNAPSHOT_DEFERRED;
    } else if (ckc->snapshot == WHALE_CKPT_SNAPSHOT_DEFERRED && t->ec.offload) {
        if (t->rank == 0)
            whale_warn("WHALE_CKPT_SNAPSHOT=deferred: not with offload (the saved tensors live "
                       "only during the save); checkpoints copy before the step goes on");
        ckc->snapshot = WHALE_CKPT_SNAPSHOT_COPY;
    }
}
