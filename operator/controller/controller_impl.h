/* Private to operator/controller/: the controller's state and what its files share.
 *   controller.c            work queue, the reconcile of one job, lifecycle
 *   controller_calls.c      the API calls it may make (the table) and those reconciles make
 *   controller_status.c     the job's status: conditions, phase, workers, the one status patch
 *                           of a reconcile
 *   controller_pods.c       the job's pods: read from the cache, deleted, replaced when failed,
 *                           created when missing; the status they make
 *   controller_informers.c  the informers: what they watch and keep, the keys they queue
 *   controller_memo.c       the memo per job: what the caches cannot know yet ("expectations")
 *   controller_create.c     creating a job's objects in slow-start batches
 *   controller_render.c     the job's spec checks and the objects made for it (pods, Secret,
 *                           Service, spec hash)
 *   controller_gang.c       gang admission: the pods' Kueue/Volcano/coscheduling labels and
 *                           annotations, the PodGroup, the Kueue admission gate
 *   controller_api.c        metrics, and the API the coordinator calls (status, conditions,
 *                           pod labels, events, the job's pods and token) */
#ifndef HOLMES_CONTROLLER_IMPL_H
#define HOLMES_CONTROLLER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "controller.h"
#include "kube_informer.h"
#include "kube_map.h"
#include "kube_queue.h"
#include "kube_recorder.h"

#define LABEL_JOB "holmes.dev/job"
#define LABEL_INDEX "holmes.dev/worker-index"
#define ANN_SPEC "holmes.dev/spec-hash"
#define JOB_API_VERSION "holmes.dev/v1alpha1"
#define MAX_WORKERS 4096
#define POD_GRACE_S 300
#define KUEUE_ADMISSION_GATE "kueue.x-k8s.io/admission" /* Kueue's scheduling gate on waiting pods */ /* terminationGracePeriodSeconds unless the template sets it */


/* The PodGroup informers exist only when their gang scheduler is enabled (else NULL). */
enum { INF_JOBS, INF_PODS, INF_SECRETS, INF_SERVICES, INF_VOLCANO_PG, INF_COSCHED_PG, INF_COUNT };

struct controller {
    struct kube_client *kc;
    struct controller_opts o;
    char *ns, *coordinator, *image;
    struct kube_informer *inf[INF_COUNT];
    struct kube_queue *queue;
    pthread_t *threads;
    int nthreads;
    struct metrics_hist latency;
    struct metrics_hist own_latency; /* latency minus the time waiting for the API */
    atomic_ulong reconciles, reconcile_errors, pod_replacements, pods_created, status_writes,
        status_conflicts;
    atomic_int stopping;
    pthread_mutex_t memo_lock;
    struct kube_map *memos; /* job key -> struct memo */
    pthread_mutex_t feed_lock;
    struct kube_map *feeds; /* job key -> cJSON: the coordinator's status feed */
    struct kube_recorder *events; /* Events: aggregated, sent off the reconcile path */
};

/* controller_informers.c: c->inf[] made; 0, or -1 with e set. */
int ctl_informers_new(struct controller *c, herr *e);

/* controller_memo.c: a job's memo of what the caches cannot know yet (client-go's
 * "expectations"): our own writes the informers have not shown. */
struct memo {
    char written_rv[64]; /* the job's resourceVersion our last status write made */
    cJSON *status;       /* the status that write left */
    cJSON *gone;       /* pod uid -> expiry (deleted by us, maybe still cached) */
    cJSON *made;       /* pod name -> expiry (created by us, maybe not cached yet) */
};
void ctl_memo_free(void *v);
struct memo *ctl_memo_take(struct controller *c, const char *key);
/* Drops expired entries; keeps the memo only when it still says something. */
void ctl_memo_put(struct controller *c, const char *key, struct memo *m, double now);
void ctl_memo_mark(cJSON *set, const char *k, double expiry);

/* controller_create.c: a job's objects, created concurrently in slow-start batches. */
struct create_job {
    enum api_op op;
    cJSON *obj;
    char name[300];
    int rc;  /* 0 created (or already there), else the API's answer; -2 not tried */
    herr e;
};

struct create_list {
    struct create_job *items;
    int n, cap;
};

int ctl_creates_add(struct create_list *l, enum api_op op, cJSON *obj, const char *name);
void ctl_creates_free(struct create_list *l);
/* Sends the creates not sent yet; 0, or the first error (in e). */
int ctl_creates_run(struct controller *c, const char *ns, struct create_list *l, herr *e);

/* controller_gang.c */
extern const struct kube_resource CTL_VOLCANO_PODGROUPS, CTL_COSCHED_PODGROUPS;
/* The PodGroup resource of a gang scheduler; NULL for none and kueue. */
const struct kube_resource *ctl_podgroup_resource(enum tj_gang gang);

/* controller_render.c */
/* {metadata: {name, namespace, labels: {holmes.dev/job}, ownerReferences: [the job, controller]}} */
cJSON *ctl_base_object(const cJSON *job, const char *name);
char *ctl_spec_hash(const cJSON *job);
void ctl_changed_fields(const char *a, const char *b, char *out, size_t n);
cJSON *ctl_build_secret(const cJSON *job);
/* The job's Secret with ca.crt (ca NULL: the token alone). */
cJSON *ctl_build_secret_ca(const cJSON *job, const char *ca);
/* The merge patch that makes a cached Secret's ca.crt the given CA; NULL when it already is. */
cJSON *ctl_secret_ca_patch(const cJSON *secret, const char *ca);
cJSON *ctl_build_service(const cJSON *job);

/* controller_api.c: the coordinator's status feed, taken by the job's reconcile (the one
 * status writer), applied to the status it writes, and returned when the write failed. */
cJSON *ctl_feed_take(struct controller *c, const char *key);
void ctl_feed_apply(const cJSON *feed, cJSON *status, const char *now);
void ctl_feed_return(struct controller *c, const char *key, cJSON *feed);

/* One job's reconcile (controller.c), what its steps share. */
struct reconcile {
    struct controller *c;
    const cJSON *job;
    const char *ns, *name;
    cJSON *st;          /* new status (copy of old, edited) */
    const cJSON *old;   /* old status */
    char now[48];
    double requeue_s;   /* > 0: look again after this */
    int deleted;        /* the job was deleted (spec.ttlSecondsAfterFinished): no status to write */
    struct create_list creates; /* objects to create, sent together with the pods */
    struct memo *memo;
    double t;           /* now, seconds */
    /* The spec, parsed once per reconcile by the spec module (common/trainingjob.h), with its
     * defaults from there; te: every error, what this version cannot run included. */
    struct tj_job tj;
    struct tj_errors te;
};

/* controller_calls.c: calls through the table, their time added to ctl_tl_api_s. */
/* Seconds this thread spent waiting for the API (the reconcile's own work is the rest). */
extern __thread double ctl_tl_api_s;
/* A merge patch; out (may be NULL): the object as the API left it. */
int ctl_call_patch(struct controller *c, enum api_op op, const char *ns, const char *name,
                   const cJSON *patch, cJSON **out, herr *e);
/* Deletes in the background; the API's answer (404: gone already). */
int ctl_call_delete(struct controller *c, enum api_op op, const char *ns, const char *name,
                    herr *e);
/* An Event about the job, sent off the reconcile path (kube_recorder.h). */
void ctl_emit(struct controller *c, const cJSON *job, const char *type, const char *reason,
              const char *msg);

/* controller_status.c */
/* The condition of `type` in a conditions array (NULL when absent or not an array). */
cJSON *ctl_find_condition(const cJSON *conds, const char *type);
/* Sets a condition; returns 1 when its status, reason or message changed. */
int ctl_set_condition(cJSON *status, const char *type, int ok, const char *reason,
                      const char *msg, const char *now);
/* The message of condition `type` of a status; NULL when absent. */
const char *ctl_condition_message(const cJSON *status, const char *type);
/* 1 when status holds condition `type` with `reason`. */
int ctl_condition_is(const cJSON *status, const char *type, const char *reason);
void ctl_set_phase(struct reconcile *r, const char *phase);
/* 1 when phase p (may be NULL) is want. */
int ctl_is_phase(const char *p, const char *want);
/* status.workers: ready, and "ready/total" for the printer column of `kubectl get tj`. */
void ctl_set_workers_ready(cJSON *st, int ready);
/* Patches the job's status with what differs from old (nothing when nothing does), on the
 * condition that the job is still at resourceVersion base_rv, the version old was read from: a
 * merge patch replaces arrays (status.conditions) whole, so a patch computed from an older
 * status would drop what was written since. The memo remembers what was written and the
 * version it made. 0, or the API's answer with e (409: the job moved on since base_rv). */
int ctl_write_status(struct controller *c, const cJSON *job, const char *base_rv, const cJSON *old,
                     const cJSON *st, struct memo *m, herr *e);

/* controller_pods.c */
/* Status from the pods: readiness, scheduling (and the gang timeout), completion; the pods of
 * an elastic job's lost workers (lost[i], nlost of the `all`) count for none of it. */
void ctl_status_from_pods(struct reconcile *r, const cJSON *pods, int all, const char *lost,
                          int nlost, const char *phase);
/* The cached pods of a job (of its incarnation uid, when given), sorted by worker index. */
cJSON *ctl_pods_of(struct controller *c, const char *ns, const char *job, const char *uid);
/* Deletes the pods not being deleted yet (only_active: not those Failed or Succeeded). */
int ctl_delete_pods(struct controller *c, struct memo *m, const cJSON *pods, int only_active,
                    herr *e);
/* The job's pods as this controller knows them: the cache, less the pods it deleted. */
cJSON *ctl_live_pods(struct reconcile *r);
/* Replaces failed or evicted pods (after spec.restartPolicy.backoffSeconds); 1 when one had
 * failed, *rc the first error. */
int ctl_replace_failed(struct reconcile *r, const cJSON *pods, int *rc, herr *e);
/* spec.elastic: the workers counted as lost (status.elastic.lostWorkers) into lost[]; their
 * count. */
int ctl_lost_workers(const struct reconcile *r, int workers, char *lost);
/* Pods beyond spec.workers deleted; the missing ones created (not a lost worker's without
 * scaleUp), with the reconcile's other objects, in slow-start batches. */
int ctl_create_missing(struct reconcile *r, const cJSON *pods, int workers, const char *lost,
                       herr *e);

#endif
