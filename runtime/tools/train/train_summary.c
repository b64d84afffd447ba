/* The end of a whale-train run: the last checkpoint lands, rank 0 prints
 * the summary (stdout and the metrics file; each area adds its fields),
 * and train_teardown releases whatever the phases opened. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "whale/blascore.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"
#include "whale/outfile.h"

#include "whale/grid.h"
#include "train.h"
#include "train_areas.h"

static json_t *summary_object(struct train *t)
{
    const struct train_totals *r = &t->tot;
    const struct whale_engine_config *ec = &t->ec;
    /* rates over one window (train_totals.c): the steps this process timed */
    double tps = train_rate(r->tok_run, r->t_run);
    double mfu = train_mfu(t, r->flops_run, r->t_run);
    double ovl = r->sum_comm > 0 ? 1 - r->sum_wait / r->sum_comm : 0;
    /* steps: how far the run got from where it began; a step redone after a
     * recovery is one step (its second computation is in redone_steps) */
    struct whale_train_state ts;
    whale_engine_get_state(t->e, &ts);
    long steps = (long)ts.step - r->start_step;
    if (steps < 0 || steps > r->done)
        steps = r->done;
    /* no step run (--steps 0, resumed at the end): the losses are NaN,
     * which JSON cannot hold: null (json_real(NaN) fails) */
    json_t *j = json_pack("{s{sIsososfsfsfsfsfsisisi}}", "summary",
                          "steps", (json_int_t)steps, "first_loss",
                          train_json_num(r->first_loss), "final_loss",
                          train_json_num(r->last_loss), "tokens_per_s", tps, "mfu", mfu,
                          "comm_overlap", ovl < 0 ? 0.0 : ovl, "peak_rss_mb",
                          train_peak_rss_mb(), "peak_gflops", t->peak, "dp", t->dp, "zero",
                          ec->zero_stage, "global_batch", (int)t->gbatch);
    json_t *sm = json_object_get(j, "summary");
    if (!sm)
        return j;
    if (!isfinite(r->first_loss) || !isfinite(r->last_loss)) {
        json_object_set_new(sm, "first_loss", json_null());
        json_object_set_new(sm, "final_loss", json_null());
    }
    if (r->done > steps)
        json_object_set_new(sm, "redone_steps", json_integer(r->done - steps));
    json_object_set_new(sm, "tp", json_integer(t->tp));
    json_object_set_new(sm, "pp", json_integer(t->pp));
    json_object_set_new(sm, "ep", json_integer(whale_grid_ep(&t->grid)));
    json_object_set_new(sm, "schedule", json_string(whale_schedule_name(ec->schedule)));
    json_object_set_new(sm, "interleave", json_integer(ec->interleave));
    json_object_set_new(sm, "recompute", json_string(whale_recompute_name(ec->recompute)));
    json_object_set_new(sm, "precision", json_string(whale_precision_name(ec->precision)));
    struct whale_engine_memory emem;
    struct whale_train_state ts2;
    whale_engine_memory(t->e, &emem);
    whale_engine_get_state(t->e, &ts2);
    json_object_set_new(sm, "skipped_steps", json_integer(ts2.scaler_skipped));
    json_object_set_new(sm, "loss_scale", json_real(ts2.loss_scale));
    json_object_set_new(sm, "act_mb", json_real(emem.act_bytes / 1048576.0));
    json_object_set_new(sm, "param_mb", json_real(emem.param_bytes / 1048576.0));
    json_object_set_new(sm, "blas_core", json_string(whale_blas_corename()));
    train_areas_report(t, sm);
    if (r->nsaves) {
        /* stall per save (its call plus the wait for its deferred snapshot)
         * and the share of the loop's wall time the saves stalled */
        double stall = r->ckpt_stall + r->hist_stall;
        json_object_set_new(sm, "checkpoints",
                            json_pack("{sisfsfsfsf}", "saves", r->nsaves, "stall_s", stall,
                                      "stall_per_save_s", stall / r->nsaves, "stall_max_s",
                                      r->save_stall_max, "stall_pct_of_run",
                                      r->loop_s > 0 ? 100 * r->ckpt_stall / r->loop_s : 0.0));
    }
    return j;
}

int train_summary(struct train *t)
{
    if (t->ck) { /* the last save in flight must land */
        int crc = whale_ckpt_close(t->ck);
        t->ck = NULL;
        if (crc) {
            whale_error("the last checkpoint failed (the previous ones are intact)");
            return 1;
        }
    }
    if (train_stop_requested())
        whale_warn("stopped by a signal after %ld steps", t->tot.done);
    if (t->rank == 0) {
        json_t *j = summary_object(t);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (!s) {
            whale_error("cannot build the summary (out of memory)");
            return 1;
        }
        printf("%s\n", s);
        if (t->mf)
            fprintf(t->mf, "%s\n", s);
        free(s);
    }
    return train_stop_requested() ? 1 : 0;
}

/* Every task, whatever phase stopped the run: areas first (spares lending
 * memory wait for them), then the checkpointer, files, data, elastic
 * state, engine and ranks. Returns the exit status. */
int train_teardown(struct train *t, int rc)
{
    rc = train_areas_teardown(t, rc);
    if (t->ck && whale_ckpt_close(t->ck))
        rc = 1;
    free(t->plan_json);
    whale_trace_close();
    whale_plan_free(&t->plan);
    if (t->mf)
        whale_output_close(t->mf);
    free(t->in);
    free(t->tg);
    whale_data_close(t->data);
    te_free(t->te, rc == 0);
    whale_engine_destroy(t->e);
    if (t->ctx)
        whale_finalize(t->ctx);
    return rc;
}
