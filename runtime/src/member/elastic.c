/* whale/elastic.h: public entry points. The detector lives in el_detect.c,
 * the agreement and rebuild in el_agree.c, the decision in el_decide.c. */
#include <limits.h>

#include "comm/comm_internal.h"
#include "member/el_internal.h"
#include "whale/elastic.h"
#include "whale/error.h"
#include "whale/log.h"

int whale_spare_wait(whale_ctx *ctx, struct whale_membership_event *ev)
{
    if (!ctx || !ev) {
        whale_error("whale_spare_wait: NULL %s", !ctx ? "context" : "event");
        return WHALE_EINVAL;
    }
    if (!ctx->boot.spare || !ctx->el) {
        whale_error("whale_spare_wait: task %d is not a spare (logical rank %d)", ctx->boot.task,
                    ctx->boot.rank);
        return WHALE_EINVAL;
    }
    struct comm_elastic *el = ctx->el;
    int rc;
    pthread_mutex_lock(&ctx->lock);
    /* The progress thread serves the worker (heartbeats, puts into our
     * regions, control messages) and wakes us through el->cond. */
    el->waiting_spare = true;
    comm_wake(ctx);
    for (;;) {
        if (el->excluded) {
            rc = WHALE_EMINORITY;
            break;
        }
        if (el->done) {
            rc = WHALE_EDONE;
            break;
        }
        /* another idle spare's death is no reason to recover (el_on_dead) */
        bool any_dead = false;
        for (int t = 0; t < ctx->boot.ntasks; t++)
            any_dead |= el->st.member[t] && ctx->dead[t] && !el_idle_spare(ctx, t);
        if (el->suspected || any_dead || el->decide_epoch > el->st.epoch) {
            rc = el_recover(ctx, INT64_MAX, true, ev);
            if (rc == WHALE_ESTATE)
                el->suspected = false;
            else if (rc < 0)
                break;
            else if (!ctx->boot.spare)
                break; /* promoted */
            continue;
        }
        pthread_cond_wait(&el->cond, &ctx->lock);
    }
    el->waiting_spare = false;
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int whale_elastic_recover(whale_ctx *ctx, int64_t my_last_completed_step,
                          struct whale_membership_event *ev)
{
    if (!ctx || !ev) {
        whale_error("whale_elastic_recover: NULL %s", !ctx ? "context" : "event");
        return WHALE_EINVAL;
    }
    if (!ctx->el || ctx->boot.ntasks < 2) {
        whale_error("whale_elastic_recover: a step of one task has nobody to recover with");
        return WHALE_ESTATE;
    }
    pthread_mutex_lock(&ctx->lock);
    int rc = el_recover(ctx, my_last_completed_step, ctx->boot.spare, ev);
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int whale_elastic_check(whale_ctx *ctx)
{
    if (!ctx || !ctx->el)
        return 0;
    struct comm_elastic *el = ctx->el;
    /* Without a serving progress thread nobody else receives notices. */
    if (!comm_needs_thread(ctx) && pthread_mutex_trylock(&ctx->lock) == 0) {
        comm_progress(ctx);
        pthread_mutex_unlock(&ctx->lock);
    }
    return el->suspected || el->excluded || el->decide_epoch > el->st.epoch ? 1 : 0;
}

void whale_elastic_progress(whale_ctx *ctx)
{
    if (ctx && ctx->el)
        atomic_fetch_add(&ctx->el->progress, 1);
}

int whale_rankmap_task(const whale_ctx *ctx, int r)
{
    if (!ctx || r < 0 || r >= ctx->boot.world)
        return -1;
    return ctx->boot.task_of_rank[r];
}

uint64_t whale_elastic_epoch(const whale_ctx *ctx)
{
    return ctx && ctx->el ? ctx->el->st.epoch : 0;
}

const char *whale_recovery_name(enum whale_recovery k)
{
    return k == WHALE_RECOVERY_REPLACED ? "REPLACED" : k == WHALE_RECOVERY_SHRUNK ? "SHRUNK"
           : k == WHALE_RECOVERY_RESUMED ? "RESUMED" : "?";
}

