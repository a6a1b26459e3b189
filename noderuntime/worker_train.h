/* The worker's training runner: turns the coordinator's assignment and the peers' endpoints
 * into a rank table and runs the distributed trainer (noderuntime/trainer.h), reporting every
 * step to the coordinator. */
#ifndef HOLMES_WORKER_TRAIN_H
#define HOLMES_WORKER_TRAIN_H

#include "error.h"
#include "worker_coord.h"

struct worker_train;

int worker_train_create(struct worker_train **out, herr *e);
void worker_train_free(struct worker_train *wt);
/* A runner whose user is wt. */
struct worker_runner worker_train_runner(struct worker_train *wt);

#endif
