/* The coordinator: one WebSocket endpoint (libwebsockets) for the workers of every job.
 *
 * Per job it authenticates workers by the job's token, holds the gang barrier until every
 * worker has said hello, asks the planner (a hook) for each worker's assignment, relays the
 * rendezvous (TCP endpoints, NCCL unique ids), starts training on every worker together,
 * aggregates progress, and on a failure (a worker's connection drops or it reports an error)
 * tells every other worker to stop and restarts the job in place (workers hello again, get the
 * same assignments, re-rendezvous and resume from their last checkpoint) up to max_restarts.
 * A coordinator that starts while workers are mid-training (operator restart) adopts them when
 * they all reconnect with the same attempt.
 *
 * Single-threaded: everything, hooks included, runs inside coord_service(). The protocol is
 * common/protocol.h; docs/protocol.md describes it. */
#ifndef HOLMES_COORDINATOR_H
#define HOLMES_COORDINATOR_H

#include <cjson/cJSON.h>

#include "error.h"
#include "nic_summary.h"
#include "plan_doc.h"
#include "protocol.h"

struct coordinator;

struct coord_options {
    const char *bind;       /* address or interface to listen on; NULL = all */
    int port;               /* 0 = an ephemeral port (see coord_port) */
    const char *tls_cert;   /* PEM files; both set = wss:// */
    const char *tls_key;
    const char *tls_cert_pem; /* or the PEM texts themselves (wins over the files) */
    const char *tls_key_pem;
    int hello_timeout_s;    /* a connection that has not said hello by then is closed; 0 = 10 */
    int max_pending;        /* connections that have not said hello yet; more are closed at
                             * once (0 = 1024). Admitted workers are not counted. */
    /* A hello names a job that is not registered: the owner may register it now with
     * coord_add_job (e.g. from the TrainingJob in the API server) and return 0; -1 refuses
     * the hello like any unknown job; 1 says the job is over (failed or succeeded): the
     * worker is told to stop for good. Optional. */
    int (*resolve_job)(void *user, struct coordinator *c, const char *job);
    void *user;
};

enum coord_job_state {
    COORD_GATHERING,        /* waiting for every worker's hello (the gang barrier) */
    COORD_RENDEZVOUS,       /* assignments sent; waiting for every worker's endpoint */
    COORD_RUNNING,          /* start sent; training */
    COORD_RESTARTING,       /* a worker failed; others told to stop; gathering again */
    COORD_SUCCEEDED,        /* every worker reported done */
    COORD_FAILED,           /* planner refused, or restarts exhausted */
};
const char *coord_state_name(enum coord_job_state s);

/* What the coordinator knows about one worker (index i of the job). */
struct coord_worker {
    int index;
    int connected;
    char pod[128];
    char node[128];
    int gpus;
    double tflops;          /* per rank, from hello (measured or declared); 0 = not sent */
    int tflops_measured;    /* with tflops: 1 measured by the worker, 0 declared */
    double gpu_memory_gb;   /* per GPU, from hello (read from the device or declared); 0 = not sent */
    int gpu_memory_measured; /* with gpu_memory_gb: 1 read from the device, 0 declared */
    double memory_gbps;     /* per device, from hello (measured or declared); 0 = not sent */
    int memory_gbps_measured; /* with memory_gbps: 1 measured by the worker, 0 declared */
    struct nic_summary nic;
    int rank;               /* from the assignment; -1 before */
};

/* The job's progress, aggregated over workers. */
struct coord_progress {
    int attempt;
    long step;              /* the slowest worker's last step */
    long total_steps;       /* from the job spec; 0 = unknown */
    int has_loss;
    double loss;            /* mean over the workers that report loss (last stage) */
    double tokens_per_s;    /* sum over the workers that report loss (one per replica) */
    double step_ms;         /* the slowest worker's last step time */
    double eta_s;           /* coord_eta: the steps left at the pace measured since this
                               attempt's first report; -1 when unknown */
    long eval_step;         /* the newest evaluation (training.eval) a worker reported; 0: none */
    double eval_loss;       /* its held-out loss (already the mean over the set) */
    int has_norm;           /* grad_norm: the global gradient norm before clipping of the */
    double grad_norm;       /* loss reporters' last steps (their mean) */
    long skipped_steps;     /* steps skipped for a non-finite loss or gradient norm, and the
                               newest of them (training.maxNonFiniteSteps) */
    long skipped_last;
};

struct coord_hooks {
    /* Every worker has said hello: fill assignments[i] (zeroed; the coordinator owns it
     * afterwards) for each of the n workers given. Each holds at least its first rank (and
     * nranks, ranks when it has several; every rank of the job in exactly one worker) and may
     * name peers (the ranks whose endpoints the worker needs; all when NULL). Return -1 with
     * `e` to fail the job. Required. */
    int (*plan)(void *user, const struct coord_worker *workers, int n,
                struct plan_assignment *assignments, herr *e);
    /* A worker was admitted (its hello accepted): e.g. label its pod. Optional. */
    void (*on_hello)(void *user, const struct coord_worker *w);
    /* Every progress message as received (per-step records of one worker). Optional. */
    void (*on_steps)(void *user, const struct coord_worker *w, const struct proto_progress *p);
    /* The aggregate, at most once per progress_interval_ms and only when it changed. Optional. */
    void (*on_progress)(void *user, const struct coord_progress *p);
    /* A state change or an event worth a Kubernetes Event (gang timeout naming the missing
     * workers, a worker failure, a refused connection). Optional. */
    void (*on_event)(void *user, enum coord_job_state s, const char *message);
    /* A worker's notice: not a failure, but the user must hear of it (a checkpoint fallback).
     * `reason` is CamelCase; `message` names the worker. Optional. */
    void (*on_notice)(void *user, const char *reason, const char *message);
    /* Elastic jobs: worker w was counted as lost (lost 1: coord_job_lose_worker; delete its pod)
     * or a lost worker is back (lost 0: scaleUp); the gang re-plans next, and the plan hook then
     * gets the workers that remain. `why` says what happened. Optional. */
    void (*on_elastic)(void *user, const struct coord_worker *w, int lost, const char *why);
    /* Elastic jobs with scaleUp: the workers that remain cannot hold the model (the plan hook
     * failed for them), so the job waits for a lost worker to come back instead of failing.
     * `reason` is CamelCase (InsufficientCapacity). Optional. */
    void (*on_waiting)(void *user, const char *reason, const char *message);
};

struct coord_job_spec {
    const char *name;
    const char *token;      /* workers must present it in hello */
    int workers;            /* gang size */
    const char *const *pods; /* NULL: any pod name; else pods[i] is the only pod for index i */
    int gang_timeout_ms;    /* 0 = 300000; reported once per gathering, the job keeps waiting */
    int max_restarts;       /* in-place restarts after failures */
    int restarts_used;      /* of those, already used (status.restarts: a new coordinator goes on
                             * counting where the last one stopped) */
    int restart_backoff_ms; /* after a failure, the restarted gang starts no sooner than this
                             * (spec.restartPolicy.backoffSeconds); 0 = at once */
    long total_steps;       /* for the ETA; 0 = unknown */
    long skipped_steps, skipped_last; /* steps already skipped as not finite, the newest
                             * (status.skippedSteps: a new coordinator goes on counting) */
    int progress_interval_ms; /* 0 = 2000 */
    /* spec.elastic: min_workers below workers makes the job elastic (0: workers, not elastic);
     * scale_up: a lost worker that says hello again is planned in; lost: workers already lost
     * (status.elastic: a new coordinator goes on without them), each index once. */
    int min_workers;
    int scale_up;
    const int *lost;
    int nlost;
    struct coord_hooks hooks;
    void *user;
};

int coord_create(struct coordinator **out, const struct coord_options *opt, herr *e);
/* Closes every connection and frees everything. Workers are NOT told to stop: training goes
 * on and they reconnect to the next coordinator (see coord_cancel_job to end a job). */
void coord_destroy(struct coordinator *c);
int coord_port(const struct coordinator *c);

/* Registers a job (the spec is copied). Returns -1 if the name is taken or the spec is bad. */
int coord_add_job(struct coordinator *c, const struct coord_job_spec *spec, herr *e);
/* Forgets a job (e.g. its TrainingJob was deleted): its connections are closed, workers are
 * not told to stop. -1 when no such job. */
int coord_remove_job(struct coordinator *c, const char *name);
/* Tells the job's workers to stop (no restart), marks it FAILED with `reason`. */
int coord_cancel_job(struct coordinator *c, const char *name, const char *reason, herr *e);
/* -1 when no such job. */
int coord_job_state(const struct coordinator *c, const char *name, enum coord_job_state *s);
int coord_job_progress(const struct coordinator *c, const char *name, struct coord_progress *p);

/* Seconds until step `total` from `step`: at the pace measured since the attempt's first
 * report (step0 at time t0, now: evaluations, checkpoints and every other pause between steps
 * counted) once that spans COORD_ETA_PACE_S and 2 steps, before that at step_ms a step; -1
 * when neither is known. */
#define COORD_ETA_PACE_S 10.0
double coord_eta(long total, long step, double step_ms, long step0, double t0, double now);
/* Connected, admitted workers of the job; -1 when no such job. */
int coord_job_connected(const struct coordinator *c, const char *name);
int coord_job_restarts(const struct coordinator *c, const char *name);
/* Elastic jobs: counts worker `index` as lost for good (its pod unschedulable, its node gone:
 * the owner decides). The workers that remain re-plan: at once when the gang is gathering (the
 * usual case: the lost worker's disconnect restarted it), else after a stop at the next step
 * boundary (not charged). 0 done; 1 not done because fewer than min_workers would remain (the
 * job keeps waiting for it); -1 with `e`: not elastic, no such worker, already lost, or
 * connected (a worker that is there is not lost). */
int coord_job_lose_worker(struct coordinator *c, const char *name, int index, const char *why,
                          herr *e);
/* Per worker of the job: 1 connected (said hello, or training), 0 absent, -1 lost; fills
 * state[0..workers-1] (cap entries at most) and returns the worker count, -1 when no such job. */
int coord_job_workers(const struct coordinator *c, const char *name, int *state, int cap);
/* Elastic jobs: workers lost, and re-plans so far (loss and scale-up). -1 when no such job. */
int coord_job_elastic(const struct coordinator *c, const char *name, int *lost, int *replans);

/* Connections refused so far (bad token, bad message, unknown pod...), for tests and metrics. */
long coord_refused(const struct coordinator *c);

/* Serves new TLS connections with another certificate (a renewal); connections already open
 * keep theirs. Only on a coordinator made with TLS, from the thread that runs coord_service. */
int coord_tls_reload(struct coordinator *c, const char *cert_pem, const char *key_pem, herr *e);

/* Open WebSocket connections, and of those the ones that have not said hello. */
int coord_connections(const struct coordinator *c, int *pending);

/* Runs the event loop once: waits for activity (at most ~100 ms) and handles it. */
int coord_service(struct coordinator *c);

#endif
