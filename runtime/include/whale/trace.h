/* The WHALE_TRACE Chrome/Perfetto trace writer (spans of passes, transfers,
 * collectives, optimizer, recompute). */
#ifndef WHALE_TRACE_H
#define WHALE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tracing (WHALE_TRACE=FILE) -------------------------------------------------
 * Chrome trace-event JSON, one file per rank: FILE itself in a world of one,
 * else FILE with "-rank<R>" before its extension ("%r" in FILE is replaced
 * by the rank instead when present). Open it in ui.perfetto.dev or
 * chrome://tracing. Spans are recorded into per-thread buffers without
 * locks; the file is written by whale_trace_close(). */
/* Reads WHALE_TRACE; no-op when unset. */
int  whale_trace_init(int rank, int world);
int  whale_trace_open(const char *path, int rank, int world);
/* Writes and closes (call when no other thread records any more). */
int  whale_trace_close(void);
bool whale_trace_on(void);
uint64_t whale_trace_now(void);           /* ns, monotonic */
/* A span [t0, now) in category cat ("forward", "backward", "send", "recv",
 * "allreduce", "optimizer", ...). name, cat: static strings. chunk/mb < 0:
 * omitted. */
void whale_trace_span(const char *cat, const char *name, uint64_t t0, int chunk, int mb);
void whale_trace_span_at(const char *cat, const char *name, uint64_t t0, uint64_t t1,
                         int chunk, int mb);
/* Names the calling thread's track. */
void whale_trace_thread_name(const char *name);
/* The resolved path of this rank's file (valid while open) or NULL. */
const char *whale_trace_path(void);

#ifdef __cplusplus
}
#endif
#endif
