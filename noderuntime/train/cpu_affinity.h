/* Where the ranks of a job that all run on one machine (holmes-operator local, the fabric
 * benchmark) compute: each rank pins its training thread, and so every thread it starts, to its
 * share of the machine's cores. Without it the kernel's scheduler shares the cores as it goes:
 * two replicas of one stage drift apart and the data-parallel collectives wait for the slower.
 * Spread gives every core an equal share of the planned compute, as every GPU of a cluster
 * computes only its own rank's stage. */
#ifndef HOLMES_CPU_AFFINITY_H
#define HOLMES_CPU_AFFINITY_H

#include <stddef.h>

#include "core_spread.h"
#include "error.h"
#include "rank_table.h"

enum cpu_affinity { CPU_AFFINITY_NONE = 0, CPU_AFFINITY_SPREAD = 1 };

/* "none" | "spread"; -1 for anything else. */
int cpu_affinity_parse(const char *s, enum cpu_affinity *out);

/* Pins the calling thread, and so the threads it starts later, to `count` of the cores the
 * thread may use now, from the first-th of them on; writes their numbers ("3" or "4-7") into
 * desc. */
int cpu_pin_thread(int first, int count, char *desc, size_t cap, herr *e);

/* cpu_spread over every rank of rt (loads: its stage's layer count, of `layers` in the model),
 * then cpu_pin_thread for `rank`. Returns how many cores `rank` got (>= 1), or -1. */
int cpu_spread_rank(const struct plan_doc *rt, int layers, int rank, char *desc, size_t cap,
                    herr *e);

/* The compute threads for `rank` when the ranks of rt that name its host (host and port
 * given: a rank table) share the cores this thread may use: their count divided among them,
 * at least 1; 0 when it is the only one there (or the table names no hosts). Several ranks on
 * one machine with a full OpenMP team each spend their cores spinning for one another's
 * (20 steps of terapipe.sh's tiny model: 53 s with a team of 2 per rank, 2 s with 1). */
int cpu_threads_shared(const struct plan_doc *rt, int rank);

#endif
