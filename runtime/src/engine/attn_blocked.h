/* The blocked CPU attention lives in the backend (backend/attn_blocked.h:
 * the cpu backend's GQA attention wraps it); this header keeps the
 * engine's and the tests' includes unchanged. */
#ifndef ENGINE_ATTN_BLOCKED_H
#define ENGINE_ATTN_BLOCKED_H
#include "backend/attn_blocked.h"
#endif
