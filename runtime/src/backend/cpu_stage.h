/* cpu backend: fp32 staging of 16-bit operands, shared by cpu_kernels.c
 * (GPT block) and cpu_llama.c (Llama block). An fp32 call passes its
 * pointers through untouched (the engine's bits); a bf16/fp16 call widens
 * each operand into an fp32 copy, runs the same fp32 kernel, and rounds
 * outputs once on store (nearest even). Up to 8 copies per call, freed
 * together by bkc_done. */
#ifndef BACKEND_CPU_STAGE_H
#define BACKEND_CPU_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "whale/comm.h" /* enum whale_dtype */

struct bkc_stage {
    float *buf[8];
    int n;
    int err;
};

/* dst (n) fp32 = src (n) of dtype t / dst (n) of dtype t = src (n) fp32,
 * round to nearest even (fp32: a copy). */
void bkc_widen(float *dst, const void *src, enum whale_dtype t, size_t n);
void bkc_narrow(void *dst, const float *src, enum whale_dtype t, size_t n);
/* fp32 view of p (n elements): p itself for fp32, a widened copy otherwise
 * (NULL stays NULL). */
float *bkc_in32(struct bkc_stage *st, enum whale_dtype t, const void *p, size_t n);
/* fp32 view of an output: p itself for fp32; otherwise a copy, widened when
 * the kernel also reads it (+=, in place), else zeros (so the bytes between
 * strided rows stay defined). */
float *bkc_out32(struct bkc_stage *st, enum whale_dtype t, void *p, size_t n, bool read);
/* Rounds an fp32 staging copy f (n) back into the 16-bit dst (bulk
 * conversion); nothing for fp32 or a NULL dst. */
void bkc_store(enum whale_dtype t, void *dst, const float *f, size_t n);
/* The same for columns [0, cols) of `rows` rows ld apart only, one value at
 * a time, so a strided output never overwrites the columns between its
 * rows. */
void bkc_store_rows(enum whale_dtype t, void *dst, const float *f, size_t rows, size_t cols,
                    size_t ld);
/* Frees the copies; the first error of the staging (0 or WHALE_ENOMEM). */
int bkc_done(struct bkc_stage *st);
/* Elements spanned by a row-major matrix of `rows` rows, `cols` used
 * columns and row stride ld. */
size_t bkc_span(size_t rows, size_t cols, size_t ld);

#endif
