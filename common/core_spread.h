/* Which cores the ranks of a job that all run on one machine compute on (holmes-operator local,
 * the benchmarks): the workers pin themselves by it (noderuntime/train/cpu_affinity.h), and the
 * planner's cost model (links.pinned_cores) simulates the same assignment, so both binaries share
 * this one function. Pure: no system calls. */
#ifndef HOLMES_CORE_SPREAD_H
#define HOLMES_CORE_SPREAD_H

#include "error.h"

/* Assigns n ranks with planned compute load[i] >= 0 to ncpu cores. With ncpu >= n, each rank
 * gets ncpu / n cores of its own. Otherwise one core each: heaviest first onto the least loaded
 * core (ties: the lower rank, then a core holding no rank of a neighbouring pipeline stage, then
 * the lower core), so that equal loads (the replicas of one stage) go to different cores, every
 * core carries about the same compute, and adjacent stages (which overlap in a pipeline, token
 * slices most) compute on different cores. stage[i]: rank i's pipeline stage, or NULL. Writes
 * the first core's index (0..ncpu-1, an index into the usable cores) and the core count of each
 * rank. */
int cpu_spread(const double *load, const int *stage, int n, int ncpu, int *first, int *count,
               herr *e);

#endif
