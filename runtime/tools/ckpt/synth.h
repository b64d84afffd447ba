/* A synthetic GPT-shaped model and parallel layouts, to exercise and
 * benchmark checkpoints without the engine: every (TP, PP, DP, ZeRO)
 * layout enumerates the pieces a rank owns, as the engine does, with
 * deterministic values so any rank can check what it restores. */
#ifndef WHALE_CKPT_SYNTH_H
#define WHALE_CKPT_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/ckpt.h"

#include "whale/grid.h"
struct synth_model {
    int layers, hidden, vocab, seq;
    int frozen;      /* layers [0, frozen) do not change between steps */
};

struct synth_layout {
    WHALE_GRID(grid);        /* degrees */
    int zero;                /* ZeRO stage */
    int tp_rank, pp_rank, dp_rank;
};

/* Layout of logical rank r (rank = ((pp * DP) + dp) * TP + tp). */
void synth_layout_of(int tp, int pp, int dp, int zero, int rank, struct synth_layout *out);

/* Pieces of this rank: for_save = the pieces it writes (replicas split
 * across DP ranks), else the pieces it holds (replicas whole). Data is
 * allocated; filled with the values at `step` when fill, else NaN. */
int  synth_pieces(const struct synth_model *m, const struct synth_layout *l, bool for_save,
                  bool fill, int64_t step, whale_ckpt_piece **out, size_t *n);
void synth_free(whale_ckpt_piece *p, size_t n);
/* Largest |restored - expected| (relative to max(|expected|, floor)) over
 * the pieces; *count_bad = elements beyond tol. */
double synth_check(const whale_ckpt_piece *p, size_t n, int64_t step, int frozen, double tol,
                   double floor, long *count_bad);
/* The value of a tensor element at a step (exact function of its inputs). */
float synth_value(const char *name, int64_t global_index, int64_t step, int frozen_layers);
/* Total elements of the model (parameters + both moments). */
int64_t synth_numel(const struct synth_model *m);

#endif
