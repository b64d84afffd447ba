/* The fp32 CPU kernels live in the backend (backend/kernels.h, under the
 * engine in the module stack: the CPU backend wraps them). This header
 * keeps the engine's and the tests' includes unchanged. */
#ifndef ENGINE_KERNELS_H
#define ENGINE_KERNELS_H
#include "backend/kernels.h"
#endif
