/* whale-train's model options (issue 16): sequence parallelism. The model
 * architecture itself (Llama-style blocks) comes from --model's
 * description and needs no option. */
#include "train_models.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

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
    return 1;
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
