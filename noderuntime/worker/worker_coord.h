/* The worker's side of the coordinator protocol (`holmes-node worker --coordinator URL`):
 * hello with the NIC summary → assignment → the runner prepares (binds its endpoint) →
 * rendezvous → start → the runner trains on its own thread while this thread streams its
 * per-step records at a bounded rate → done. A stop from the coordinator asks the runner to
 * stop; a stop with restart makes worker_coord_run return WORKER_EXIT_RESTART so the process
 * (or the pod's container) is started again and resumes from its last checkpoint. When the
 * coordinator goes away mid-training, training goes on and the worker reconnects, saying hello
 * with `resume` so a new coordinator adopts it. */
#ifndef HOLMES_WORKER_COORD_H
#define HOLMES_WORKER_COORD_H

#include <signal.h>
#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "nic_summary.h"
#include "plan_doc.h"
#include "protocol.h"

#define WORKER_EXIT_RESTART 75 /* EX_TEMPFAIL: start me again (in-place restart) */
#define WORKER_EXIT_TERMINATED 143 /* 128 + SIGTERM: left on SIGTERM after checkpointing */
/* EX_CONFIG: do not start me again: the coordinator ended the job (failed, or over), refused
 * this worker, or the failure is one of configuration (a restart would fail the same way). */
#define WORKER_EXIT_FINAL 78

struct worker_link; /* handed to the runner: report steps, check for a stop */

/* Records one finished step (thread-safe; called from the runner's thread). */
void worker_report_step(struct worker_link *l, const struct proto_step *s);
/* Queues a notice for the coordinator (thread-safe; at most a few are kept until sent). */
void worker_report_notice(struct worker_link *l, const char *reason, const char *message);
/* True once the coordinator asked the worker to stop. */
int worker_stop_requested(const struct worker_link *l);

/* What trains. Both calls get the coordinator's assignment, decoded (common/plan_doc.h); run
 * may fill in its plan's endpoints. */
struct worker_runner {
    void *user;
    /* Bind what peers will connect to: return *endpoints, an array with one "host:port" (may
     * be "") per rank of the assignment, and optionally ids (an object of name -> string, e.g.
     * NCCL unique ids); both freed by the caller. Called on the main thread. */
    int (*prepare)(void *user, const struct plan_assignment *assignment, int attempt,
                   cJSON **endpoints, cJSON **ids, herr *e);
    /* Train, on a thread of its own. `start`: the peers from the start message. Report every
     * step with worker_report_step; return early (0) once worker_stop_requested. Returns 0
     * when finished (*last_step set), -1 with `e` on failure. */
    int (*run)(void *user, struct plan_assignment *assignment, const struct proto_start *start,
               long resume_step, struct worker_link *link, long *last_step, herr *e);
};

struct worker_coord_options {
    const char *url;
    const char *ca_file;        /* wss://: PEM CA for the coordinator's certificate; NULL = system */
    const char *job;
    const char *token;
    const char *pod;
    const char *node;
    int worker;
    int gpus;
    double tflops;              /* sent in hello when > 0 (measured or declared) */
    int tflops_measured;        /* 1: measured here; 0: declared (--tflops) */
    double gpu_memory_gb;       /* per GPU, sent in hello when > 0 (read from the device or
                                 * declared) */
    int gpu_memory_measured;    /* 1: read from the device; 0: declared (--gpu-memory-gb) */
    double memory_gbps;         /* per device, sent in hello when > 0 (measured or declared) */
    int memory_gbps_measured;   /* 1: measured here; 0: declared (--memory-gbps) */
    struct nic_summary nic;
    int progress_interval_ms;   /* 0 = 500 */
    int connect_timeout_ms;     /* total time to keep trying to connect at start; 0 = 60000 */
    /* Set (by a SIGTERM handler) when the worker must leave: mid-training it tells the
     * coordinator, every rank stops and checkpoints at the next step boundary, and
     * worker_coord_run returns WORKER_EXIT_TERMINATED. NULL = never. */
    const volatile sig_atomic_t *terminate;
};

/* Runs the protocol until the job is over for this worker. Returns 0 (finished),
 * WORKER_EXIT_RESTART (stopped for an in-place restart), WORKER_EXIT_TERMINATED (left on
 * `terminate`, with `e` saying where), WORKER_EXIT_FINAL with the reason in `e` (the
 * coordinator stopped the job or refused this worker, or a configuration error), or -1 with
 * the reason in `e` (the runner failed, the coordinator unreachable: worth starting again). */
int worker_coord_run(const struct worker_coord_options *o, const struct worker_runner *r, herr *e);

/* A runner that trains nothing: it sleeps step_ms per step and reports steps (loss only on
 * the last stage: "stage" == "stages"-1 in the assignment) so the protocol, process handling
 * and the coordinator can be exercised and benchmarked without a model. */
struct worker_sim {
    long steps;
    int step_ms;
    int fail_at_step;           /* > 0: the run fails there (tests of restarts) */
};
extern const struct worker_runner worker_sim_runner; /* user: struct worker_sim * */

#endif
