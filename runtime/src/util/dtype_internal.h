/* Testing hook of util/dtype.c (module-internal). */
#ifndef UTIL_DTYPE_INTERNAL_H
#define UTIL_DTYPE_INTERNAL_H
/* Use vector path `level` (0 plain C, 1 AVX2+F16C, 2 AVX-512) when this CPU
 * has it, so tests can compare every path here; -1 or an unsupported level
 * restores automatic choice. Returns the level now forced, or -1. */
int util_dtype_force(int level);
#endif
