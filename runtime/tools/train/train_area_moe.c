/* Mixture-of-experts routing in whale-train's metrics: each step's line
 * gets a "moe" object (the step's MoE block forwards on this rank: tokens
 * per expert, imbalance, dropped assignments, aux and z losses before their
 * coefficients) and the summary the run's totals. Rank 0 writes them: under
 * pipeline parallelism they describe the MoE blocks of rank 0's stage, with
 * expert parallelism its EP group (the engine sums them over the group). The
 * loss of the line already holds every stage's weighted auxiliary losses. */
#include "train_areas.h"

#include "whale/modeldesc.h"

static struct {
    int64_t steps, forwards, routed, dropped, tok_min, tok_max;
    double aux, zloss, imbalance, imbalance_max;
} tot;

static void step(struct train *t, const struct whale_step_stats *st, json_t *line)
{
    const struct whale_moe_stats *m = &st->moe;
    if (t->ec.model.moe.experts == 0 || m->forwards == 0)
        return;
    if (tot.steps == 0 || m->tok_min < tot.tok_min)
        tot.tok_min = m->tok_min;
    if (m->tok_max > tot.tok_max)
        tot.tok_max = m->tok_max;
    if (m->imbalance_max > tot.imbalance_max)
        tot.imbalance_max = m->imbalance_max;
    tot.steps++;
    tot.forwards += m->forwards;
    tot.routed += m->routed;
    tot.dropped += m->dropped;
    tot.aux += m->aux * m->forwards;
    tot.zloss += m->zloss * m->forwards;
    tot.imbalance += m->imbalance * m->forwards;
    if (!line)
        return;
    json_object_set_new(line, "moe", json_pack("{sfsfsfsfsIsIsIsIsf}", "aux", m->aux, "zloss",
                                               m->zloss, "imbalance", m->imbalance,
                                               "imbalance_max", m->imbalance_max, "tok_min",
                                               (json_int_t)m->tok_min, "tok_max",
                                               (json_int_t)m->tok_max, "routed",
                                               (json_int_t)m->routed, "dropped",
                                               (json_int_t)m->dropped, "dropped_frac",
                                               m->routed ? (double)m->dropped / m->routed : 0.0));
}

static void report(struct train *t, json_t *summary)
{
    const struct whale_model_desc *md = &t->ec.model;
    if (md->moe.experts == 0)
        return;
    double f = tot.forwards ? (double)tot.forwards : 1.0;
    json_object_set_new(
        summary, "moe",
        json_pack("{sisisIsIsIsfsfsfsfsIsIsIsf}", "experts", md->moe.experts, "topk",
                  md->moe.topk, "moe_blocks", (json_int_t)whale_model_desc_moe_blocks(md),
                  "params", (json_int_t)whale_model_desc_params(md), "active_params",
                  (json_int_t)whale_model_desc_active_params(md), "aux", tot.aux / f, "zloss",
                  tot.zloss / f, "imbalance", tot.imbalance / f, "imbalance_max",
                  tot.imbalance_max, "tok_min", (json_int_t)tot.tok_min, "tok_max",
                  (json_int_t)tot.tok_max, "dropped", (json_int_t)tot.dropped, "dropped_frac",
                  tot.routed ? (double)tot.dropped / tot.routed : 0.0));
    /* for people, after the other summary lines */
    fprintf(stderr, "  %-20s %d experts, top-%d, %d MoE blocks; %.3g M of %.3g M parameters "
            "active per token\n", "experts", md->moe.experts, md->moe.topk,
            whale_model_desc_moe_blocks(md), whale_model_desc_active_params(md) / 1e6,
            whale_model_desc_params(md) / 1e6);
    fprintf(stderr, "  %-20s tokens per expert %lld..%lld, imbalance (max/mean) %.2f mean, "
            "%.2f worst; dropped %.2f%%; aux %.4f, z-loss %.4f\n",
            whale_grid_ep(&t->grid) > 1 ? "routing (EP group)" : "routing (rank 0)",
            (long long)tot.tok_min, (long long)tot.tok_max, tot.imbalance / f, tot.imbalance_max,
            tot.routed ? 100.0 * tot.dropped / tot.routed : 0.0, tot.aux / f, tot.zloss / f);
}

const struct train_area train_area_moe = {
    .name = "moe",
    .step = step,
    .report = report,
};
