/* The engine's compute backend (device.c): opened from the config's device,
 * refusing what the chosen backend cannot run. */
#ifndef ENGINE_DEVICE_H
#define ENGINE_DEVICE_H

#include <stdint.h>

#include "whale/arena.h"
#include "whale/engine.h"

/* Opens e->bk for c->device (cpu or cuda; auto must be resolved before),
 * sets e->mm and the backend's fp32 GEMM arithmetic. e->lp must be set. */
int  eng_dev_open(whale_engine *e, const struct whale_engine_config *c);
void eng_dev_close(whale_engine *e);
/* Allocator callbacks that give the arena backend memory. */
void eng_dev_arena_backend(whale_engine *e, struct whale_arena_backend *out);
/* A host-access point: host code is about to read or write engine memory
 * (device.c lists them). Drains the device under stream-ordered cuda; a
 * no-op on cpu and on cuda with one sync per call. */
int  eng_dev_host_access(whale_engine *e);
/* The step's token ids (grad_accum x B x T each) where kernels can read
 * them: unchanged on cpu, copied into backend memory on cuda. */
int  eng_dev_tokens(whale_engine *e, const int32_t **in, const int32_t **tg);

#endif
