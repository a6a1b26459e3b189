/* The worker's training runner: turns the coordinator's assignment and the peers' endpoints
 * into a rank table and runs the distributed trainer, reporting every step to the coordinator. */
#ifndef HOLMES_WORKER_TRAIN_H
#define HOLMES_WORKER_TRAIN_H

#include <cjson/cJSON.h>

#include "cpu_affinity.h"
#include "error.h"
#include "comm_tcp.h"
#include "plan_doc.h"
#include "protocol.h"
#include "trainingjob.h"
#include "worker_coord.h"
#include "worker_peers.h"

struct worker_train;

/* advertise_host: how peers reach this worker (its pod IP; "127.0.0.1" locally); affinity:
 * CPU_AFFINITY_SPREAD when every rank of the job runs on this machine (noderuntime/train/cpu_affinity.h). */
int worker_train_create(struct worker_train **out, const char *advertise_host,
                        enum cpu_affinity affinity, herr *e);
void worker_train_free(struct worker_train *wt);
/* A runner whose user is wt. */
struct worker_runner worker_train_runner(struct worker_train *wt);

/* Where a training rank's reports go: the coordinator link when the rank runs in the worker's
 * process, the pipe to the worker when it is one of several rank processes (rank_procs.h). */
struct rank_sink {
    void *ctx;
    void (*step)(void *ctx, const struct proto_step *s);
    void (*notice)(void *ctx, const char *reason, const char *message);
    int (*should_stop)(void *ctx);
};

/* Trains rank a->ranks[local] of the assignment's plan (every endpoint filled in) on listener
 * l, reporting every step to `out`. *last_step: the last step done. 0, or -1 with `e`. */
int worker_train_rank(const struct tj_spec *spec, const struct plan_assignment *a, int local,
                      struct tcp_listener *l, enum cpu_affinity affinity,
                      const struct rank_sink *out, long *last_step, herr *e);

/* Every rank needs an engine this binary has: real GPUs (gpusPerWorker >= 1 without
 * emulation.gpus) the CUDA engine of the spec's precision (the CUDA build, `make cuda`), CPU
 * workers and emulated GPUs the CPU engine (fp32). A configuration error naming the field
 * otherwise: a GPU job never falls back to the CPU. */
int worker_check_devices(const struct tj_spec *spec, herr *e);

/* Bounds [0, ..., T] of `slices` token slices cut evenly (the first T % slices one token
 * longer), allocated into *bounds; none (NULL) for slices <= 1. A configuration error when a
 * slice would be empty. */
int worker_slice_bounds(int slices, int T, int **bounds, herr *e);

/* TeraPipe's slices of a run into c (token_slices, slice_bounds; c->T set): the plan's (a
 * planner's choice, auto included) when it has them, else `count` cut evenly (bounds allocated
 * into *owned, for the caller to free), else none. A configuration error when the plan's slices
 * do not end at c->T. */
struct trainer_config;
int worker_run_slices(const struct plan_doc *rt, int count, struct trainer_config *c, int **owned,
                      herr *e);

/* worker_plan_endpoints (the start message's peers): worker_peers.h */

#endif
