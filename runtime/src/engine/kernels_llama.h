/* The fp32 CPU kernels of Llama-style blocks live in the backend
 * (backend/kernels_llama.h); this header keeps the engine's and the tests'
 * includes unchanged. */
#ifndef ENGINE_KERNELS_LLAMA_H
#define ENGINE_KERNELS_LLAMA_H
#include "backend/kernels_llama.h"
#endif
