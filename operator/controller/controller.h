/* The TrainingJob controller: level-triggered and idempotent. For each TrainingJob it keeps a
 * Secret with a per-job token (<job>-token), a headless Service (<job>) and one pod per worker
 * (<job>-worker-<i>), all owned by the job (ownerReferences, controller: true); it writes
 * status (phase, conditions, workers, restarts, times) through the status subresource, only
 * when something changed. Informers on TrainingJobs, pods, secrets and services feed a work
 * queue of job keys ("namespace/name") drained by worker threads.
 *
 * API for the coordinator (embedded in `holmes-operator run`), all thread-safe. The controller
 * is the one writer of a job's status: what the coordinator reports is kept in the job's status
 * feed and written by the job's next reconcile, together with what the controller sets, in one
 * patch (controller_api.c, controller_status.c):
 *   controller_patch_job_status  fields merged into the job's status (e.g. plan, progress,
 *                                phase Planning/Running)
 *   controller_set_job_condition one status condition, keeping the others
 *   controller_patch_pod_labels  merge-patch labels of a pod (holmes.dev/fabric, ...)
 *   controller_emit_event        a core/v1 Event about a job
 *   controller_get_job           the cached job
 *   controller_job_pods          the cached pods of a job
 *   controller_job_token         the job's token from the cached Secret
 * The controller owns phases Pending, Discovering (all pods ready), Suspended and Succeeded (all
 * pods succeeded); it leaves Planning and Running, set by the coordinator, alone while all pods
 * stay ready, and keeps conditions it does not own. Restarts are the coordinator's: it restarts
 * the gang in place, counts status.restarts and sets phase Failed when they are spent; the
 * controller only replaces a pod that failed or was evicted (and recreates one deleted). */
#ifndef HOLMES_CONTROLLER_H
#define HOLMES_CONTROLLER_H

#include <stdio.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "kube_client.h"
#include "metrics.h"
#include "trainingjob.h"

/* Every API call the operator can make, for `run --print-api-calls` and the Helm RBAC test. */
struct api_call {
    const char *verb;                  /* get list watch create patch delete */
    const struct kube_resource *res;
    const char *sub;                   /* "status" or NULL */
    enum tj_gang gang;                 /* made only when this gang scheduler is enabled
                                        * (TJ_GANG_DEFAULT: always) */
};
/* Features of `run` that make API calls of their own (controller_api_call_needs). */
enum { API_NEEDS_TLS_SECRET = 1,       /* --tls-secret: the operator's TLS Secret */
       API_NEEDS_CA = 2,               /* a CA for the pods: kept in each job's Secret */
       API_NEEDS_AUTH = 4 };           /* --metrics-secure: TokenReview, SubjectAccessReview */
enum api_op {
    API_LIST_JOBS, API_WATCH_JOBS, API_PATCH_JOB_STATUS,
    API_DELETE_JOB, /* spec.ttlSecondsAfterFinished */
    API_LIST_PODS, API_WATCH_PODS, API_CREATE_POD, API_DELETE_POD, API_PATCH_POD,
    API_LIST_SECRETS, API_WATCH_SECRETS, API_CREATE_SECRET,
    API_GET_SECRET, API_PATCH_SECRET, /* the operator's TLS Secret; a job Secret's ca.crt */
    API_LIST_SERVICES, API_WATCH_SERVICES, API_CREATE_SERVICE,
    API_CREATE_EVENT, API_PATCH_EVENT,
    API_CREATE_TOKEN_REVIEW, API_CREATE_ACCESS_REVIEW, /* who may read metrics, the job page */
    API_GET_LEASE, API_CREATE_LEASE, API_PATCH_LEASE,
    API_GET_NODE,
    API_LIST_VOLCANO_PG, API_WATCH_VOLCANO_PG, API_CREATE_VOLCANO_PG, API_DELETE_VOLCANO_PG,
    API_LIST_COSCHED_PG, API_WATCH_COSCHED_PG, API_CREATE_COSCHED_PG, API_DELETE_COSCHED_PG,
    API_OP_COUNT
};
extern const struct api_call controller_api_calls[API_OP_COUNT];
/* Per call: made only with one of these features (API_NEEDS_*; 0: always). */
extern const unsigned controller_api_call_needs[API_OP_COUNT];
/* Writes "<verb> <group|core> <resource>[/<sub>]" lines: the calls always made, and those of
 * the gang schedulers in `gang_enabled` (bits 1u << TJ_GANG_*). */
void controller_print_api_calls(FILE *f, unsigned gang_enabled);
/* The same for the features given (API_NEEDS_*); controller_print_api_calls prints all. */
void controller_print_api_calls_for(FILE *f, unsigned gang_enabled, unsigned features);

/* Gang admission (controller_gang.c, docs/operator.md): the gang schedulers this operator may
 * use (the chart enables each, with its RBAC) and the one a job that names none gets. */
struct controller_gang {
    unsigned enabled;              /* 1u << TJ_GANG_KUEUE | ...; none is always allowed */
    enum tj_gang default_gang;     /* for jobs without spec.scheduling.gang; TJ_GANG_DEFAULT = none */
    const char *volcano_scheduler; /* the pods' schedulerName for volcano (NULL: "volcano") */
    const char *cosched_scheduler; /* ... for coscheduling (NULL: "scheduler-plugins-scheduler") */
};
/* "kueue,volcano" into bits 1u << TJ_GANG_*; "" and "none" give 0. 0, or -1 naming the bad
 * entry in e. */
int controller_gang_parse_list(const char *list, unsigned *enabled, herr *e);

struct tls_keeper;

struct controller_opts {
    const char *namespace;       /* NULL or "" = all namespaces */
    const char *coordinator_url; /* HOLMES_COORDINATOR for the pods */
    struct tls_keeper *tls;      /* the coordinator's CA: each job's Secret gets it as ca.crt
                                  * (kept equal to it) and the pods verify the coordinator with it
                                  * (HOLMES_COORDINATOR_CA); NULL = none (ws://, or a public CA) */
    const char *default_image;   /* when spec.image is absent */
    int threads;                 /* reconcile workers (default 2) */
    struct controller_gang gang; /* zero: no gang scheduler, every job none */
};

struct controller;

struct controller *controller_new(struct kube_client *kc, const struct controller_opts *o,
                                  herr *e);
/* Starts informers and workers. */
int controller_start(struct controller *c, herr *e);
/* 0 once every informer holds its first LIST, -1 after timeout_ms. */
int controller_wait_synced(struct controller *c, int timeout_ms);
int controller_synced(struct controller *c);
/* Stops workers and informers and frees everything. */
void controller_free(struct controller *c);

/* Prometheus text: jobs by phase, reconciles and latency, API errors by code, restarts. */
void controller_metrics(struct controller *c, struct metrics_buf *out);
/* Every cached TrainingJob as the job page lists it: [{namespace, name, phase, message,
 * conditions, plan, restarts}] from its status (phase Pending when it has none). NULL out of
 * memory. */
cJSON *controller_jobs_json(struct controller *c);
/* Reconcile latency quantile in seconds (for the benchmark); count of reconciles. */
double controller_latency_quantile(struct controller *c, double q);
unsigned long controller_reconciles(struct controller *c);

/* ---- for the coordinator */
/* Merges status_fields (a JSON merge patch of status) into the job's status feed and queues the
 * job: its next reconcile writes them (a write that fails is tried again with what came since
 * on top). Sends nothing itself; 0, or -1 out of memory. */
int controller_patch_job_status(struct controller *c, const char *ns, const char *job,
                                const cJSON *status_fields, herr *e);
/* Sets ONE condition of a job's status and keeps the others: {type, status True/False, reason,
 * message} goes into the job's status feed (replacing one of the same type there) and the next
 * reconcile sets it among status.conditions (lastTransitionTime only when the status changes;
 * nothing written when nothing changed). 0, or -1 out of memory. */
int controller_set_job_condition(struct controller *c, const char *ns, const char *job,
                                 const char *type, int ok, const char *reason,
                                 const char *message, herr *e);
int controller_patch_pod_labels(struct controller *c, const char *ns, const char *pod,
                                const cJSON *labels, herr *e);
int controller_emit_event(struct controller *c, const char *ns, const char *job,
                          const char *type, const char *reason, const char *message, herr *e);
/* Copies (caller frees): the job, NULL when unknown; its pods as an array sorted by worker
 * index; its token (NUL-terminated), NULL when the Secret is not there yet. */
cJSON *controller_get_job(struct controller *c, const char *ns, const char *job);
cJSON *controller_job_pods(struct controller *c, const char *ns, const char *job);
char *controller_job_token(struct controller *c, const char *ns, const char *job);
/* spec.elastic: a node's state (a GET: nodes are not cached): 1 Ready (or no Ready condition
 * yet), 0 NotReady or Unknown, 2 gone (404); -1 with `e` when it cannot be told. */
int controller_node_state(struct controller *c, const char *node, herr *e);
/* Deletes a pod at once (gracePeriodSeconds 0: a worker counted as lost, whose node will not
 * confirm it); gone already is fine. */
int controller_delete_pod(struct controller *c, const char *ns, const char *pod, herr *e);

/* ---- pure pieces, exposed for tests */
/* The pod for worker i of job, rendered from its parsed spec s (spec.template merged with the
 * holmes-node container; the job object gives the metadata and the spec hash), locked down
 * unless its template says otherwise (docs/operator.md, "Worker pods' security"): non-root
 * (65532), no privilege escalation, every capability dropped (IPC_LOCK added when the worker
 * container asks for RDMA devices), seccomp RuntimeDefault, read-only root file system with
 * writable emptyDirs at /tmp, /dev/shm (memory) and the checkpoint path. */
cJSON *controller_build_pod(const cJSON *job, const struct tj_spec *s, int index,
                            const char *coordinator_url, const char *default_image, herr *e);
/* Where the pods find the coordinator's CA: the job's Secret's ca.crt, mounted read-only. */
#define CONTROLLER_CA_DIR "/var/run/holmes/coordinator"
#define CONTROLLER_CA_FILE CONTROLLER_CA_DIR "/ca.crt"
/* Makes the pod verify the coordinator with the CA in its job's Secret (<job>-token, key ca.crt):
 * a read-only volume at CONTROLLER_CA_DIR and HOLMES_COORDINATOR_CA. 0, or -1 out of memory. */
int controller_pod_trust_ca(cJSON *pod, const char *job_name);
/* Whether a resource name is an RDMA device (rdma/..., mellanox.com/..., nvidia.com/hostdev...):
 * a worker container asking for one keeps IPC_LOCK (registering memory needs it). */
int controller_is_rdma_resource(const char *name);
/* status.conditions with one condition set (as controller_set_job_condition does), as a new
 * {"conditions": [...]} object; *changed = 0 when it was already so. NULL when out of memory. */
cJSON *controller_merge_condition(const cJSON *status, const char *type, int ok,
                                  const char *reason, const char *message, const char *now,
                                  int *changed);
/* The gang scheduler of a job: its spec.scheduling.gang, else the operator's default (never
 * TJ_GANG_DEFAULT). */
enum tj_gang controller_gang_of(const struct tj_spec *s, const struct controller_gang *g);
/* What this operator refuses of a job's spec.scheduling (the gang scheduler resolved): a gang
 * scheduler not enabled, and tj_scheduling_check's rules. Appends to errs; 0 when accepted. */
int controller_gang_check(const struct tj_spec *s, const struct controller_gang *g, struct tj_errors *errs);
/* Worker pod i as controller_build_pod makes it, with what the job's gang scheduler needs:
 * labels, annotations, schedulerName (controller_gang.c). */
cJSON *controller_build_gang_pod(const cJSON *job, const struct tj_spec *s, int index,
                                 const char *coordinator_url, const char *default_image,
                                 const struct controller_gang *g, herr *e);
/* The job's PodGroup (volcano: scheduling.volcano.sh/v1beta1, coscheduling:
 * scheduling.x-k8s.io/v1alpha1), owned by the job; NULL when its gang scheduler has none (none,
 * kueue) or out of memory. */
cJSON *controller_build_podgroup(const cJSON *job, const struct tj_spec *s, const struct controller_gang *g);
/* How many of the pods carry Kueue's scheduling gate (they wait for admission). */
int controller_pods_gated(const cJSON *pods);

#endif
