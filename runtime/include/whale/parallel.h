/* Umbrella of the parallel building blocks, one header per topic:
 *   whale/par_comm.h  the communication adapter (p2p and collectives over a group)
 *   whale/pipeline.h  pipeline schedules, simulator, executor, stage balancing
 *   whale/tp.h        tensor parallelism: f/g conjugates, even splits
 *   whale/trace.h     the WHALE_TRACE trace writer
 * New code includes the topic header it needs. */
#ifndef WHALE_PARALLEL_H
#define WHALE_PARALLEL_H

#include "whale/par_comm.h"
#include "whale/pipeline.h"
#include "whale/tp.h"
#include "whale/trace.h"

#endif
