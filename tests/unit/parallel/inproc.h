/* In-process communication backend for the parallel unit tests: threads
 * play the ranks. Point to point is rendezvous (a send completes only once
 * the receiver has matched it), so buffer-lifetime and ordering bugs that
 * eager transports hide show up here. */
#ifndef TEST_INPROC_H
#define TEST_INPROC_H

#include "whale/parallel.h"

struct inproc_world;

struct inproc_world *inproc_create(int size);
void inproc_destroy(struct inproc_world *w);
/* The rank's view; valid while the world lives. */
void inproc_comm(struct inproc_world *w, int rank, struct whale_par_comm *out);
/* Messages matched so far (all ranks). */
long inproc_messages(struct inproc_world *w);

/* Run fn(rank, arg) on `size` threads; returns the first non-zero result. */
int inproc_run(int size, int (*fn)(int rank, void *arg), void *arg);



/* Capture log lines instead of printing them (tests of error paths);
 * test_log_last() is the last captured line. */
void test_log_capture(bool on);
const char *test_log_last(void);
#endif
