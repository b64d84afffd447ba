/* whale-train's model area in the area hooks of train_areas.h:
 * --seqpar (Megatron sequence parallelism, or the plan's
 * sequence_parallel) into the engine configuration and the summary. */
#include "train_models.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "train_areas.h"

int train_seqpar_parse(const char *arg, int *out)
{
    if (!arg || !strcasecmp(arg, "yes") || !strcmp(arg, "1") || !strcasecmp(arg, "on")) {
        *out = 1;
        return 0;
    }
    if (!strcasecmp(arg, "no") || !strcmp(arg, "0") || !strcasecmp(arg, "off")) {
        *out = 0;
        return 0;
    }
    fprintf(stderr, "whale-train: --seqpar=%s: expected yes or no\n", arg);
    return -1;
}

bool train_seqpar_pick(int opt, const struct whale_plan *plan, int tp, int rank)
{
    bool sp = opt >= 0 ? opt == 1 : plan && plan->sequence_parallel;
    if (sp && tp < 2) {
        if (rank == 0)
            fprintf(stderr, "whale-train: --seqpar ignored: sequence parallelism splits the "
                            "sequence over tensor-parallel ranks and TP is 1\n");
        return false;
    }
    return sp;
}

static int seqpar_opt = -1; /* --seqpar: -1 the plan's choice, 0 off, 1 on */

static int set_seqpar(struct train *t, const char *a)
{
    (void)t;
    return train_seqpar_parse(a, &seqpar_opt);
}

static const struct train_opt model_opts[] = {
    { "seqpar", 2 /* optional_argument */, set_seqpar },
    { NULL, 0, NULL },
};

static void usage(FILE *f)
{
    fprintf(f,
"  --seqpar[=yes|no]    Megatron sequence parallelism in the TP group (plan's\n"
"                       sequence_parallel, else no; needs TP > 1 and micro-batch x\n"
"                       seq divisible by TP). Models: --model llama-tiny|llama-small|\n"
"                       llama-110m or any description (RMSNorm, SwiGLU, rotary, GQA)\n");
}

static int configure(struct train *t)
{
    t->ec.seqpar = train_seqpar_pick(seqpar_opt, t->have_plan ? &t->plan : NULL, t->tp, t->rank);
    return TRAIN_GO;
}

static void report(struct train *t, json_t *summary)
{
    json_object_set_new(summary, "seqpar", json_boolean(t->ec.seqpar));
}

const struct train_area train_area_models = {
    .name = "models",
    .opts = model_opts,
    .usage = usage,
    .configure = configure,
    .report = report,
};
