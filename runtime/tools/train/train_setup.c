/* Setting up a whale-train run: the ranks (a spare waits here), the layout,
 * the engine, each area's setup, the data, checkpoints (resume, saver), the
 * batch buffers and rank 0's metrics file. Everything it opens is released
 * by train_teardown (train_summary.c), whatever phase failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/ckpt_hf.h"
#include "whale/blascore.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/outfile.h"
#include "whale/parallel.h"

#include "train.h"
#include "train_areas.h"
#include "train_planrec.h"

/* whale_init, then the areas' ranks hook: the elastic area's spare waits
 * there until it is promoted (then it carries on as the rank it took) or
 * the step ends. */
static int setup_ranks(struct train *t)
{
    int rc;
    if (whale_init(&t->ctx))
        return 1;
    if ((rc = train_areas_ranks(t)) != TRAIN_GO)
        return rc;
    int tpr, ppr;
    whale_ctx_grid(t->ctx, &t->grid);
    whale_coords(t->ctx, &tpr, &ppr, &t->dp_rank);
    t->world = whale_world_size(t->ctx);
    t->rank = whale_rank(t->ctx);
    if (whale_is_spare(t->ctx)) {
        whale_info("hot spare: idle (promotion needs the elastic module)");
        return train_offload_spare(&t->off, t->ctx) ? 1 : 0; /* lends memory when asked */
    }
    return TRAIN_GO;
}

/* The library's checkpoint settings as whale-train resolves them: the
 * directory and the interval from flags > WHALE_CKPT_* > the plan (the
 * interval's source recorded for the site limits), the rest from the
 * environment. Handed down as a lookup, never put into the environment. */
static const char *ckpt_setting(const char *name, void *user)
{
    struct train *t = user;
    const char *src;
    if (!strcmp(name, "WHALE_CKPT_DIR"))
        return train_pick(t, t->o.ckpt_dir, "--whale-ckpt-dir", name, t->plan_ckpt_dir, &src);
    if (!strcmp(name, "WHALE_CKPT_EVERY"))
        return train_pick(t, t->o.ckpt_every, "--whale-ckpt-every", name, t->plan_ckpt_every,
                          &t->src_ckpt);
    /* retention: the variable, else the site default the plan carries
     * (whale.conf CkptKeep / CkptMilestoneEvery); the flags apply after */
    if (!strcmp(name, "WHALE_CKPT_KEEP") || !strcmp(name, "WHALE_CKPT_MILESTONE_EVERY")) {
        const char *e = whale_knob_getenv(name);
        bool keep = !strcmp(name, "WHALE_CKPT_KEEP");
        int pv = keep ? t->plan.ckpt_keep : t->plan.ckpt_milestone_every;
        char *buf = keep ? t->plan_ckpt_keep : t->plan_ckpt_milestone;
        if ((e && *e) || !t->have_plan || pv < (keep ? 0 : 1))
            return e;
        snprintf(buf, 16, "%d", pv);
        return buf;
    }
    return whale_knob_getenv(name);
}

/* Checkpoint settings: flags > WHALE_CKPT_* > the plan. */
static int checkpoint_config(struct train *t)
{
    const struct train_opts *o = &t->o;
    whale_ckpt_config *ckc = &t->ckc;
    whale_ckpt_config_default(ckc);
    if (whale_ckpt_config_from(ckc, ckpt_setting, t))
        return 1;
    if (o->ckpt_keep >= 0)
        ckc->keep = (int)o->ckpt_keep;
    if (o->ckpt_milestone >= 0)
        ckc->milestone_every = (int)o->ckpt_milestone;
    ckc->rank = t->rank;
    ckc->world = t->ctx ? whale_world_size(t->ctx) : 1;
    if ((ckc->every_steps > 0 || ckc->every_seconds > 0) && !ckc->root) {
        whale_error("--whale-ckpt-every needs a checkpoint directory (--whale-ckpt-dir or "
                    "WHALE_CKPT_DIR)");
        return 1;
    }
    if (t->o.resume && !strcmp(t->o.resume, "latest") && !ckc->root) {
        whale_error("--resume latest needs a checkpoint directory (--whale-ckpt-dir or "
                    "WHALE_CKPT_DIR)");
        return 1;
    }
    return TRAIN_GO;
}

/* The checkpoint --resume names: *dir (free it) or NULL where `latest`
 * finds none yet. */
static int resume_dir(struct train *t, char **dir)
{
    bool latest = !strcmp(t->o.resume, "latest");
    *dir = NULL;
    const char *where = latest ? t->ckc.root : t->o.resume;
    /* --resume latest on a job's first start finds nothing: not an error,
     * and resume() says so once (rank 0) instead of every rank twice */
    int lrc = whale_ckpt_resolve_quiet(where, "latest", dir);
    if (lrc == WHALE_ENOENT && latest)
        return TRAIN_GO;
    if (lrc) /* again, aloud, for the reason */
        lrc = whale_ckpt_resolve(where, "latest", dir);
    return lrc ? 1 : TRAIN_GO;
}

/* Before the engine exists: does --resume start a fine-tuning run, i.e.
 * weights without a train state (whale-ckpt convert --from-safetensors)?
 * Then the optimizer starts afresh and train_engine_config gives it a
 * longer default warmup (a fresh Adam at the full rate throws a trained
 * model off: measured loss 3.68 -> 6.39 with steps/20 warmup). */
static int probe_finetune(struct train *t)
{
    if (t->o.init_from && !t->promoted) {
        t->finetune = true;
        return TRAIN_GO;
    }
    if (!t->o.resume || t->promoted)
        return TRAIN_GO;
    char *dir = NULL;
    if (resume_dir(t, &dir) != TRAIN_GO)
        return 1;
    if (!dir)
        return TRAIN_GO;
    whale_ckpt_reader *rd = NULL;
    int rc = whale_ckpt_reader_open(dir, &rd);
    if (!rc) {
        const whale_ckpt_info *in = whale_ckpt_reader_info(rd);
        json_t *x = in->extra_json ? json_loads(in->extra_json, 0, NULL) : NULL;
        t->finetune = !json_is_object(json_object_get(x, "train_state"));
        json_decref(x);
    }
    whale_ckpt_reader_close(rd);
    free(dir);
    return rc ? 1 : TRAIN_GO;
}

/* --resume: load a checkpoint into the engine (a promoted spare got its
 * state from the failed rank's copy instead). */
static int resume(struct train *t)
{
    char *dir = NULL;
    if (resume_dir(t, &dir) != TRAIN_GO)
        return 1;
    if (!dir) {
        if (t->rank == 0)
            whale_info("--resume latest: no checkpoint under %s yet, starting at step 0",
                       t->ckc.root);
        return TRAIN_GO;
    }
    whale_ckpt_reader *rd = NULL;
    int lrc = whale_ckpt_reader_open(dir, &rd);
    if (!lrc)
        lrc = whale_ckpt_load_engine(rd, t->e);
    whale_ckpt_reader_close(rd);
    free(dir);
    return lrc ? 1 : TRAIN_GO;
}

/* Once the engine exists: resume, then the saver. */
static int setup_checkpoints(struct train *t)
{
    whale_ckpt_config *ckc = &t->ckc;
    if (t->o.resume && !t->promoted) {
        int rc = resume(t);
        if (rc != TRAIN_GO)
            return rc;
    }
    if (t->o.init_from && !t->promoted) {
        if (whale_hf_load_engine(t->o.init_from, t->e))
            return 1;
        if (t->rank == 0)
            whale_info("initialized the weights from %s (Hugging Face; optimizer and step start "
                       "afresh)", t->o.init_from);
    }
    train_ckpt_snapshot_mode(t);
    if (ckc->root && (ckc->every_steps > 0 || ckc->every_seconds > 0) &&
        whale_ckpt_open(ckc, &t->ck))
        return 1;
    if (t->ck) { /* the layout this run used, over what the plan (if any) said */
        free(t->plan_json);
        t->plan_json = train_plan_record(t->have_plan ? &t->plan : NULL, &t->ec, t->dp, t->gbatch,
                                         t->o.seed);
    }
    return TRAIN_GO;
}

/* The batch buffers and rank 0's metrics file. */
static int setup_buffers(struct train *t)
{
    size_t bt = (size_t)t->micro * t->accum * t->seq; /* each <= 2^20: no overflow */
    t->in = malloc(bt * sizeof(int32_t));
    t->tg = malloc(bt * sizeof(int32_t));
    if (!t->in || !t->tg) {
        whale_error("out of memory for the batch: micro-batch %ld x %ld micro-batches x seq %ld "
                    "tokens", t->micro, t->accum, t->seq);
        return 1;
    }
    /* never world-writable; owner-only with WHALE_CKPT_PRIVATE=1; a spare that
     * took rank 0's place appends to the file rank 0 began */
    const char *mpath = t->o.metrics;
    if (t->rank == 0 && mpath && *mpath &&
        !(t->mf = t->promoted ? whale_fopen_append(mpath, whale_output_private())
                              : whale_fopen_output(mpath, whale_output_private()))) {
        whale_error("--metrics: cannot write %s: %s", mpath, whale_output_strerror(errno));
        return 1;
    }
    return TRAIN_GO;
}

int train_setup(struct train *t)
{
    int rc;
    if ((rc = setup_ranks(t)) != TRAIN_GO)
        return rc;
    if ((rc = train_resolve_layout(t)) != TRAIN_GO)
        return rc;
    if ((rc = checkpoint_config(t)) != TRAIN_GO || (rc = probe_finetune(t)) != TRAIN_GO)
        return rc;
    if ((rc = train_engine_config(t)) != TRAIN_GO)
        return rc;
    /* every knob is resolved now, from whichever source: the site's limits
     * bind them all (before the engine allocates anything) */
    if (train_check_site_limits(t))
        return 1;
    if (t->finetune && (t->o.warmup < 0 || t->o.lr < 0) && t->rank == 0)
        whale_info("fine-tuning (weights without a train state): AdamW starts afresh, warmup "
                   "%lld steps, learning rate %g (--warmup N, --lr X to change)",
                   (long long)t->ec.warmup_steps, (double)t->ec.lr);
    /* the engine refuses layouts that cannot run (divisibility, stage split,
     * schedule vs micro-batches, a device-memory budget too small) with the
     * reason, before any step */
    /* masked loss (instruction data): the targets the mask hides are -1 */
    t->ec.loss_mask = t->o.loss_mask || whale_data_mask_beside(t->o.data);
    if (t->ec.loss_mask && t->rank == 0)
        whale_info("loss mask: %s (the loss counts the response tokens only)",
                   t->o.loss_mask ? t->o.loss_mask : "DATA.mask beside the data");
    /* --init-from writes every weight: no random initialisation first (a
     * spare's engine keeps it, its weights come from elsewhere; engines
     * built again later, by elastic changes, too) */
    t->ec.skip_init = t->o.init_from && !whale_is_spare(t->ctx);
    int crc = whale_engine_create(&t->ec, t->ctx, &t->e);
    t->ec.skip_init = false;
    if (crc)
        return 1;
    if (whale_trace_init(t->rank, t->world))
        return 1;
    if ((rc = train_areas_setup(t)) != TRAIN_GO)
        return rc;
    t->dc = (struct whale_data_config){ .paths = t->o.data, .format = t->o.format,
                                        .vocab = t->md.vocab, .seq = (int)t->seq,
                                        .local_batch = (int)(t->micro * t->accum),
                                        .dp_rank = t->dp_rank, .dp_size = t->dp,
                                        .global_batch = t->share.uneven ? (int)t->share.global : 0,
                                        .offset = (int)t->share.offset,
                                        .prefetch = true, .masks = t->o.loss_mask };
    if (whale_data_open(&t->dc, &t->data))
        return 1;
    if ((rc = setup_checkpoints(t)) != TRAIN_GO)
        return rc;
    if (t->ck && train_area_data_ckpt(t)) /* the tokenizer, in every manifest */
        return 1;
    if ((rc = setup_buffers(t)) != TRAIN_GO)
        return rc;
    t->job = (struct train_job){ .e = &t->e, .ec = &t->ec, .data = &t->data, .dc = &t->dc,
                                 .in = &t->in, .tg = &t->tg, .accum = &t->accum,
                                 .rank = &t->rank, .world = &t->world, .grid = &t->grid,
                                 .dp_rank = &t->dp_rank,
                                 .metrics = &t->mf, .metrics_path = t->o.metrics,
                                 .ckpt_root = t->ckc.root, .ck = &t->ck, .ckc = &t->ckc };
    /* MFU is reported by rank 0 only: the other ranks skip the measurement
     * (seconds on a loaded machine); a promoted spare takes rank 0's figure
     * from the elastic setup instead of stalling the redo with it */
    t->peak = t->o.peak_gflops > 0            ? t->o.peak_gflops
              : t->rank == 0 && !t->promoted ? whale_sgemm_peak_gflops(t->e)
                                              : 1;
    if (t->rank == 0)
        whale_info("OpenBLAS kernels: %s%s", whale_blas_corename(),
                   getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
    if ((rc = train_areas_start(t)) != TRAIN_GO) /* elastic: the setup exchange */
        return rc;
    /* every rank: --rank-metrics report MFU too, and any rank may become
     * rank 0 after a recovery */
    if (t->promoted ? train_history_agree(t, true) : train_share_peak(t))
        return 1;
    struct whale_engine_memory mem;
    whale_engine_memory(t->e, &mem);
    t->tty = t->o.progress != 0 && t->rank == 0 && isatty(STDERR_FILENO);
    if (t->rank == 0)
        whale_info("model %s: %lld parameters, %d layers, seq %ld, global batch %ld (%ld x %ld "
                   "micro x DP %d%s), ZeRO %d, data %lld tokens, MFU peak %.0f GFLOP/s per rank",
                   t->md.name, (long long)mem.num_params, t->md.layers, t->seq, t->gbatch,
                   t->micro, t->accum, t->dp, t->share.uneven ? " on replica 0, uneven shares" : "",
                   t->ec.zero_stage, (long long)whale_data_tokens(t->data), t->peak);
    return TRAIN_GO;
}
