/* whale-train's model area: sequence parallelism. The block
 * architecture itself (GPT-2 or Llama-style) comes from --model's
 * description and needs no option. */
#ifndef TRAIN_MODELS_H
#define TRAIN_MODELS_H

#include <stdbool.h>

#include "whale/planfile.h"

/* --seqpar[=yes|no]: *out = 1 / 0. Returns 0, or -1 after a message. */
int train_seqpar_parse(const char *arg, int *out);
/* Whether the engine runs sequence parallelism: the flag (opt >= 0), else
 * the plan's sequence_parallel. With TP 1 it is off (said once, rank 0). */
bool train_seqpar_pick(int opt, const struct whale_plan *plan, int tp, int rank);

#endif
