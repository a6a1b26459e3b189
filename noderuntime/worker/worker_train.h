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

/* Fills in every rank's host and port from start's peers ([{rank, endpoint "host:port"}]); with
 * HOLMES_NO_PACING=1 (the network itself is shaped) clears the plan's emulated pacing. -1 with
 * `e` when a peer is malformed or a rank has no endpoint. */
int worker_plan_endpoints(struct plan_doc *d, const cJSON *peers, herr *e);

#endif
