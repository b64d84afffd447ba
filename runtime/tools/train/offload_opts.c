/* whale-train's offload knobs and metrics (see offload_opts.h). */
#include "offload_opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "whale/arena.h"
#include "whale/envnum.h"
#include "whale/offload.h"
#include "whale/optim.h"

const char *const train_offload_optnames[TRAIN_OFF_N_] = {
    "offload", "whale-offload-target", "device-mem", "offload-prefetch",
};

void train_offload_opt(struct train_offload *o, int which, const char *value)
{
    switch (which) {
    case TRAIN_OFF_MODE: o->mode = value; break;
    case TRAIN_OFF_TARGET: o->target = value; break;
    case TRAIN_OFF_DEVMEM: o->device_mem = value; break;
    case TRAIN_OFF_PREFETCH: o->prefetch = value; break;
    default: break;
    }
}

static const char *pick(const char *flag, const char *env)
{
    const char *e = getenv(env);
    return flag ? flag : e && *e ? e : NULL;
}

int train_offload_apply(struct train_offload *o, const struct whale_plan *plan,
                        struct whale_engine_config *ec)
{
    const char *mode = pick(o->mode, "WHALE_OFFLOAD");
    ec->offload = plan ? (int)plan->offload : WHALE_OFFLOAD_NONE;
    if (mode) {
        enum whale_offload m;
        if (whale_offload_parse(mode, &m)) {
            fprintf(stderr, "whale-train: --offload=%s: expected none, optimizer or params\n",
                    mode);
            return -1;
        }
        ec->offload = (int)m;
    }
    const char *pf = pick(o->prefetch, "WHALE_OFFLOAD_PREFETCH");
    if (pf) {
        long v;
        if (whale_parse_long(pf, 1, 64, &v)) {
            fprintf(stderr, "whale-train: --offload-prefetch=%s: expected layers in 1..64\n", pf);
            return -1;
        }
        ec->offload_prefetch = (int)v;
    }
    const char *dm = pick(o->device_mem, "WHALE_DEVICE_MEM");
    if (dm) {
        int64_t b = whale_parse_size(dm);
        if (b < 0) {
            fprintf(stderr, "whale-train: --device-mem=%s: expected a size such as 512M, 12G, "
                    "1.5GiB or a byte count (0: unlimited)\n", dm);
            return -1;
        }
        ec->device_mem = b;
    }
    const char *tg = pick(o->target, "WHALE_OFFLOAD_TARGET");
    o->where = tg && strcmp(tg, "local") ? tg : NULL;
    if (o->where && ec->offload == WHALE_OFFLOAD_NONE) {
        fprintf(stderr, "whale-train: --whale-offload-target=%s keeps offloaded state in other "
                "tasks' memory: it needs --offload=optimizer or --offload=params (offload is "
                "none)\n", tg);
        return -1;
    }
    if (ec->offload == WHALE_OFFLOAD_PARAMS && ec->zero_stage != 3) {
        fprintf(stderr, "whale-train: --offload=params keeps the ZeRO-3 weight shard in host "
                "memory and needs --zero 3 (ZeRO is %d); use --offload=optimizer with ZeRO "
                "0..2\n", ec->zero_stage);
        return -1;
    }
    return 0;
}

int train_offload_open(struct train_offload *o, whale_ctx *ctx, whale_engine *e)
{
    if (o->joined) /* a promoted spare: it lent memory at the start and keeps its own
                    * optimizer state in its host memory (no collective to join now) */
        return 0;
    o->joined = true; /* the collective ran, whatever its outcome */
    return whale_offload_target_open(ctx, o->where, e, &o->tgt);
}

void train_offload_fail(struct train_offload *o, whale_ctx *ctx)
{
    const char *tg = pick(o->target, "WHALE_OFFLOAD_TARGET");
    if (!ctx || o->joined || !tg || !strcmp(tg, "local"))
        return;
    o->joined = true;
    whale_offload_target_abort(ctx, tg);
}

int train_offload_close(struct train_offload *o, bool elastic)
{
    int rc = 0;
    if (elastic) /* spares are in whale_spare_wait, not in a barrier */
        whale_offload_target_release(o->tgt);
    else
        rc = whale_offload_target_close(o->tgt);
    o->tgt = NULL;
    return rc;
}

int train_offload_lend(struct train_offload *o, whale_ctx *ctx)
{
    const char *tg = pick(o->target, "WHALE_OFFLOAD_TARGET");
    o->where = tg && strcmp(tg, "local") ? tg : NULL;
    if (!o->where)
        return 0;
    /* registers the memory lent to the workers assigned to this spare; the
     * elastic wait that follows answers their RMA */
    return train_offload_open(o, ctx, NULL);
}

int train_offload_spare(struct train_offload *o, whale_ctx *ctx)
{
    const char *tg = pick(o->target, "WHALE_OFFLOAD_TARGET");
    o->where = tg && strcmp(tg, "local") ? tg : NULL;
    if (!o->where)
        return 0;
    int rc = train_offload_open(o, ctx, NULL);
    if (rc)
        return rc; /* every task saw the same failure: nothing to serve */
    return train_offload_close(o, false); /* serves until the workers are done */
}

void train_offload_usage(FILE *f)
{
    fprintf(f,
"  --offload M          none, optimizer (fp32 master + AdamW moments in host memory,\n"
"                       AdamW on host threads) or params (also the ZeRO-3 weight\n"
"                       shard; needs --zero 3) (plan, WHALE_OFFLOAD or none); with\n"
"                       --precision bf16|fp16 the fp32 master lives there too\n"
"  --offload-prefetch N ZeRO 3: layers whose weights are fetched ahead (1)\n"
"  --device-mem SIZE    device memory budget per rank (512M, 12G; default unlimited):\n"
"                       a model that does not fit is refused with the numbers\n"
"  --whale-offload-target T  where offloaded state lives: local (host memory of\n"
"                       this task), spares (the step's hot-spare tasks, over UCX RMA)\n"
"                       or a host list (spares on those nodes, node[3-4]); other than\n"
"                       local: --offload optimizer (fp32 master and moments there; any\n"
"                       precision) or params (also the ZeRO-3 weight shard, fetched\n"
"                       per layer by RMA get --offload-prefetch layers ahead)\n");
}

void train_offload_step(json_t *j, const struct whale_step_stats *st)
{
    json_object_set_new(j, "arena_peak_mb", json_real(st->arena_peak_bytes / 1048576.0));
    if (st->host_bytes > 0) {
        json_object_set_new(j, "host_mb", json_real(st->host_bytes / 1048576.0));
        json_object_set_new(j, "offload_s", json_real(st->t_offload));
        json_object_set_new(j, "offload_wait_s", json_real(st->t_offload_wait));
        json_object_set_new(j, "offload_hidden", json_real(st->offload_hidden));
    }
}

void train_offload_account(struct train_offload *o, const struct whale_step_stats *st)
{
    o->steps++;
    o->t_move += st->t_offload;
    o->t_wait += st->t_offload_wait;
    o->moved += st->offload_bytes;
    if (st->arena_peak_bytes > o->arena_peak)
        o->arena_peak = st->arena_peak_bytes;
    o->host_bytes = st->host_bytes;
}

void train_offload_summary(const struct train_offload *o, json_t *sm, whale_engine *e,
                           const struct whale_engine_config *ec)
{
    struct whale_engine_memory m;
    whale_engine_memory(e, &m);
    json_object_set_new(sm, "offload", json_string(whale_offload_name(ec->offload)));
    json_object_set_new(sm, "arena_peak_mb", json_real(o->arena_peak / 1048576.0));
    if (m.arena_budget > 0)
        json_object_set_new(sm, "device_mem_mb", json_real(m.arena_budget / 1048576.0));
    if (o->tgt) /* where the state lives at the end: local after a recovery */
        json_object_set_new(sm, "offload_target",
                            json_string(whale_engine_offload_remote_task(e) >= 0 ? o->where
                                                                                  : "local"));
    if (ec->offload) {
        double hid = o->t_move > 0 ? 1 - o->t_wait / o->t_move : 0;
        json_object_set_new(sm, "host_mb", json_real(m.host_bytes / 1048576.0));
        json_object_set_new(sm, "offload_s", json_real(o->t_move));
        json_object_set_new(sm, "offload_wait_s", json_real(o->t_wait));
        json_object_set_new(sm, "offload_hidden", json_real(hid < 0 ? 0 : hid));
        json_object_set_new(sm, "offload_gbs",
                            json_real(o->t_move > 0 ? o->moved / o->t_move / 1e9 : 0));
        json_object_set_new(sm, "host_adamw", json_string(whale_simd_name(whale_adamw_simd())));
        json_object_set_new(sm, "offload_mover", json_string(whale_engine_offload_transport(e)));
    }
}
