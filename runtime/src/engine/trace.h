/* Chrome / Perfetto trace of one rank (WHALE_TRACE): complete events
 * ("ph":"X") on one timeline per rank, so the 1F1B schedule and its bubbles
 * are visible in chrome://tracing or ui.perfetto.dev. */
#ifndef ENGINE_TRACE_H
#define ENGINE_TRACE_H

#include <stdio.h>

struct eng_trace {
    FILE *f;
    int rank;
    int n;          /* events written */
    double t0;      /* origin, eng_now() seconds */
};

/* path: "%r" is replaced by the rank; without it, ".<rank>" is inserted
 * before the extension when world > 1. Logs and returns an error when the
 * file cannot be created. */
int  eng_trace_open(struct eng_trace *t, const char *path, int rank, int world);
/* Span [a, b] in eng_now() seconds; mb < 0: no micro-batch. */
void eng_trace_span(struct eng_trace *t, const char *name, const char *cat, int mb, double a,
                    double b);
void eng_trace_close(struct eng_trace *t);

#endif
