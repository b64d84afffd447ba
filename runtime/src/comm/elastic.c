/* whale/elastic.h: public entry points (implementation in progress). */
#include "comm/comm_internal.h"
#include "whale/elastic.h"
#include "whale/error.h"
#include "whale/log.h"

int whale_spare_wait(whale_ctx *ctx, struct whale_membership_event *ev)
{
    (void)ctx;
    (void)ev;
    return WHALE_ENOTSUP;
}

int whale_elastic_recover(whale_ctx *ctx, int64_t my_last_completed_step,
                          struct whale_membership_event *ev)
{
    (void)ctx;
    (void)my_last_completed_step;
    (void)ev;
    return WHALE_ENOTSUP;
}

int whale_elastic_check(whale_ctx *ctx)
{
    (void)ctx;
    return 0;
}

void whale_elastic_progress(whale_ctx *ctx)
{
    (void)ctx;
}

int whale_rankmap_task(const whale_ctx *ctx, int r)
{
    if (!ctx || r < 0 || r >= ctx->boot.world)
        return -1;
    return ctx->boot.task_of_rank[r];
}

uint64_t whale_elastic_epoch(const whale_ctx *ctx)
{
    (void)ctx;
    return 0;
}

const char *whale_recovery_name(enum whale_recovery k)
{
    return k == WHALE_RECOVERY_REPLACED ? "REPLACED" : k == WHALE_RECOVERY_SHRUNK ? "SHRUNK" : "?";
}

const char *whale_detect_name(enum whale_detect d)
{
    switch (d) {
    case WHALE_DETECT_CRASH: return "CRASH";
    case WHALE_DETECT_NODE: return "NODE";
    case WHALE_DETECT_LINK: return "LINK";
    case WHALE_DETECT_HANG: return "HANG";
    }
    return "?";
}
