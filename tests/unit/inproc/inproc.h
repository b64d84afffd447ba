/* The one in-process communication fake of the unit tests: threads of one
 * process play the ranks of a group, behind the same struct whale_par_comm
 * (whale/par_comm.h) the engine and the parallel blocks use in production.
 *
 *  - Point to point is rendezvous (a send completes only once the receiver
 *    has matched it), so buffer-lifetime and ordering bugs that eager
 *    transports hide show up here.
 *  - Collectives (allreduce sum/max, reduce-scatter, all-gather, fp32 and
 *    16-bit) are synchronous: the last rank to arrive computes every rank's
 *    result, summing in rank order, so results are deterministic; a request
 *    is complete on return. Ranks that call different collectives (or the
 *    same with different counts) all get WHALE_EINVAL instead of a hang or
 *    garbage.
 *  - Waiting is on a condition variable, never on a timer: a descheduled
 *    rank on a loaded machine only makes a test slower. */
#ifndef TEST_INPROC_H
#define TEST_INPROC_H

#include <stdbool.h>

#include "whale/par_comm.h"

struct inproc_world;

struct inproc_world *inproc_create(int size);
void inproc_destroy(struct inproc_world *w);
/* The rank's view; valid while the world lives. */
void inproc_comm(struct inproc_world *w, int rank, struct whale_par_comm *out);
/* Whether the 16-bit collectives are offered (default: yes). A test that
 * needs the engine's fp32 fallback turns them off before inproc_comm. */
void inproc_set_16(struct inproc_world *w, bool on);
/* Messages matched so far (all ranks); collectives completed so far. */
long inproc_messages(struct inproc_world *w);
long inproc_collectives(struct inproc_world *w);

/* Run fn(rank, arg) on `size` threads; returns the first non-zero result. */
int inproc_run(int size, int (*fn)(int rank, void *arg), void *arg);

/* Capture log lines instead of printing them (tests of error paths);
 * test_log_last() is the last captured line. */
void test_log_capture(bool on);
const char *test_log_last(void);
#endif
