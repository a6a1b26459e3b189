/* The worker's training runner: turns the coordinator's assignment and the peers' endpoints
 * into a rank table and runs the distributed trainer, reporting every step to the coordinator. */
#ifndef HOLMES_WORKER_TRAIN_H
#define HOLMES_WORKER_TRAIN_H

#include <cjson/cJSON.h>

#include "cpu_affinity.h"
#include "error.h"
#include "worker_coord.h"

struct worker_train;

/* advertise_host: how peers reach this worker (its pod IP; "127.0.0.1" locally); affinity:
 * CPU_AFFINITY_SPREAD when every rank of the job runs on this machine (noderuntime/engine/cpu_affinity.h). */
int worker_train_create(struct worker_train **out, const char *advertise_host,
                        enum cpu_affinity affinity, herr *e);
void worker_train_free(struct worker_train *wt);
/* A runner whose user is wt. */
struct worker_runner worker_train_runner(struct worker_train *wt);

/* The rank table document (noderuntime/train/rank_table.h) for this job: the planner's document from
 * assignment.plan, every rank's host and port from start's peers, and, when the assignment
 * carries `emulation`, pacing: each group at the slowest member NIC's Gb/s (cross-fabric groups
 * and links at emulation.cross_fabric_gbps), times bandwidth_scale. NULL with `e` when the
 * assignment or a peer is malformed. */
cJSON *worker_rank_table_json(const cJSON *assignment, const cJSON *peers, herr *e);

#endif
