/* A plan against the job that uses it (whale/planjob.h). */
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/planjob.h"

/* The fields a plan's layout and predictions depend on. */
static bool same_arch(const struct whale_model_desc *a, const struct whale_model_desc *b)
{
    return a->layers == b->layers && a->hidden == b->hidden && a->heads == b->heads &&
           a->kv_heads == b->kv_heads && a->ffn == b->ffn && a->seq == b->seq &&
           a->vocab == b->vocab && a->tied_embeddings == b->tied_embeddings &&
           a->mlp == b->mlp && a->norm == b->norm && a->position == b->position &&
           a->no_bias == b->no_bias && a->attention == b->attention;
}

static int check_model(const struct whale_plan *p, const char *src,
                       const struct whale_plan_job *job)
{
    if (!p->model[0] || !job->model || !strcmp(p->model, job->model))
        return 0;
    struct whale_model_desc mp, mj;
    bool lp = !whale_model_desc_load(p->model, &mp);
    bool lj = !whale_model_desc_load(job->model, &mj);
    if (lp && lj && same_arch(&mp, &mj))
        return 0;
    whale_error("the plan (%s) was made for model %s%s but %s gives %s%s: its layout and "
                "predictions do not hold for this model; make a plan for %s (whale-plan, or "
                "--whale-plan=auto --whale-model=%s) or leave %s out to train the plan's model",
                src, p->model, lp ? "" : " (which cannot be loaded here)",
                job->model_from ? job->model_from : "the job", job->model,
                lj ? "" : " (which cannot be loaded)", job->model, job->model,
                job->model_from ? job->model_from : "the model option");
    return WHALE_EINVAL;
}

int whale_plan_check_job(const struct whale_plan *p, const char *plan_src,
                         const struct whale_plan_job *job)
{
    const char *src = plan_src ? plan_src : "plan";
    if (check_model(p, src, job))
        return WHALE_EINVAL;
    if (job->batch > 0 && !(p->unset & WHALE_PLAN_UNSET_GLOBAL_BATCH) && p->global_batch > 0 &&
        p->global_batch != job->batch) {
        whale_error("the plan (%s) was made for global batch %d but %s gives %ld: its micro-batch "
                    "split and predictions do not hold; make a plan for batch %ld or leave %s out",
                    src, p->global_batch, job->batch_from ? job->batch_from : "the job",
                    job->batch, job->batch, job->batch_from ? job->batch_from : "the batch option");
        return WHALE_EINVAL;
    }
    if ((job->tp > 0 && p->tp != job->tp) || (job->pp > 0 && p->pp != job->pp) ||
        (job->dp > 0 && p->dp != job->dp)) {
        whale_error("the plan (%s) says TP=%d PP=%d DP=%d but this step runs TP=%d PP=%d DP=%d; "
                    "refusing before any step", src, p->tp, p->pp, p->dp, job->tp, job->pp,
                    job->dp);
        return WHALE_EINVAL;
    }
    return 0;
}
