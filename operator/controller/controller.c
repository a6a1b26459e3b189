#include "controller_impl.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "clock.h"
#include "json.h"
#include "kube_events.h"
#include "kube_recorder.h"
#include "kube_informer.h"
#include "kube_map.h"
#include "kube_queue.h"
#include "log.h"
#include "tls_keeper.h"
#include "trainingjob.h"

static const struct kube_resource CTL_TOKEN_REVIEWS = {"authentication.k8s.io", "v1",
                                                       "tokenreviews", "TokenReview"};
static const struct kube_resource CTL_ACCESS_REVIEWS = {"authorization.k8s.io", "v1",
                                                        "subjectaccessreviews",
                                                        "SubjectAccessReview"};

const struct api_call controller_api_calls[API_OP_COUNT] = {
    [API_LIST_JOBS] = {"list", &KUBE_TRAININGJOBS, NULL, TJ_GANG_DEFAULT},
    [API_WATCH_JOBS] = {"watch", &KUBE_TRAININGJOBS, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_JOB_STATUS] = {"patch", &KUBE_TRAININGJOBS, "status", TJ_GANG_DEFAULT},
    [API_LIST_PODS] = {"list", &KUBE_PODS, NULL, TJ_GANG_DEFAULT},
    [API_WATCH_PODS] = {"watch", &KUBE_PODS, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_POD] = {"create", &KUBE_PODS, NULL, TJ_GANG_DEFAULT},
    [API_DELETE_POD] = {"delete", &KUBE_PODS, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_POD] = {"patch", &KUBE_PODS, NULL, TJ_GANG_DEFAULT},
    [API_LIST_SECRETS] = {"list", &KUBE_SECRETS, NULL, TJ_GANG_DEFAULT},
    [API_WATCH_SECRETS] = {"watch", &KUBE_SECRETS, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_SECRET] = {"create", &KUBE_SECRETS, NULL, TJ_GANG_DEFAULT},
    /* the operator's own TLS Secret (in its namespace: tls_keeper.c), and a job Secret's ca.crt
     * kept equal to the coordinator's CA */
    [API_GET_SECRET] = {"get", &KUBE_SECRETS, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_SECRET] = {"patch", &KUBE_SECRETS, NULL, TJ_GANG_DEFAULT},
    [API_LIST_SERVICES] = {"list", &KUBE_SERVICES, NULL, TJ_GANG_DEFAULT},
    [API_WATCH_SERVICES] = {"watch", &KUBE_SERVICES, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_SERVICE] = {"create", &KUBE_SERVICES, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_EVENT] = {"create", &KUBE_EVENTS, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_EVENT] = {"patch", &KUBE_EVENTS, NULL, TJ_GANG_DEFAULT}, /* a repeat: count + 1 (kube_recorder.h) */
    /* --metrics-secure: who reads /metrics and the job page (http_auth.c) */
    [API_CREATE_TOKEN_REVIEW] = {"create", &CTL_TOKEN_REVIEWS, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_ACCESS_REVIEW] = {"create", &CTL_ACCESS_REVIEWS, NULL, TJ_GANG_DEFAULT},
    [API_GET_LEASE] = {"get", &KUBE_LEASES, NULL, TJ_GANG_DEFAULT},
    [API_CREATE_LEASE] = {"create", &KUBE_LEASES, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_LEASE] = {"patch", &KUBE_LEASES, NULL, TJ_GANG_DEFAULT},
    /* spec.elastic: whether a missing worker's node is NotReady or gone (nodes: cluster-scoped) */
    [API_GET_NODE] = {"get", &KUBE_NODES, NULL, TJ_GANG_DEFAULT},
    /* A job's PodGroup: cached, created, deleted on suspend (deletion with the job is left to
     * ownerReferences). */
    [API_LIST_VOLCANO_PG] = {"list", &CTL_VOLCANO_PODGROUPS, NULL, TJ_GANG_VOLCANO},
    [API_WATCH_VOLCANO_PG] = {"watch", &CTL_VOLCANO_PODGROUPS, NULL, TJ_GANG_VOLCANO},
    [API_CREATE_VOLCANO_PG] = {"create", &CTL_VOLCANO_PODGROUPS, NULL, TJ_GANG_VOLCANO},
    [API_DELETE_VOLCANO_PG] = {"delete", &CTL_VOLCANO_PODGROUPS, NULL, TJ_GANG_VOLCANO},
    [API_LIST_COSCHED_PG] = {"list", &CTL_COSCHED_PODGROUPS, NULL, TJ_GANG_COSCHEDULING},
    [API_WATCH_COSCHED_PG] = {"watch", &CTL_COSCHED_PODGROUPS, NULL, TJ_GANG_COSCHEDULING},
    [API_CREATE_COSCHED_PG] = {"create", &CTL_COSCHED_PODGROUPS, NULL, TJ_GANG_COSCHEDULING},
    [API_DELETE_COSCHED_PG] = {"delete", &CTL_COSCHED_PODGROUPS, NULL, TJ_GANG_COSCHEDULING},
};

const unsigned controller_api_call_needs[API_OP_COUNT] = {
    [API_GET_SECRET] = API_NEEDS_TLS_SECRET,
    [API_PATCH_SECRET] = API_NEEDS_TLS_SECRET | API_NEEDS_CA,
    [API_CREATE_TOKEN_REVIEW] = API_NEEDS_AUTH,
    [API_CREATE_ACCESS_REVIEW] = API_NEEDS_AUTH,
};

void controller_print_api_calls(FILE *f, unsigned gang_enabled)
{
    controller_print_api_calls_for(f, gang_enabled, ~0u);
}

void controller_print_api_calls_for(FILE *f, unsigned gang_enabled, unsigned features)
{
    for (int i = 0; i < API_OP_COUNT; i++) {
        const struct api_call *a = &controller_api_calls[i];
        if (a->gang != TJ_GANG_DEFAULT && !(gang_enabled & (1u << a->gang)))
            continue;
        if (controller_api_call_needs[i] && !(controller_api_call_needs[i] & features))
            continue;
        fprintf(f, "%s %s %s%s%s\n", a->verb, a->res->group[0] ? a->res->group : "core",
                a->res->resource, a->sub ? "/" : "", a->sub ? a->sub : "");
    }
}


/* status.workers: ready, total, and "ready/total" for the printer column of `kubectl get tj`. */
static void set_workers_ready(cJSON *st, int ready)
{
    cJSON *w = json_child_object(st, "workers");
    cJSON *total = cJSON_GetObjectItem(w, "total");
    char summary[48];
    snprintf(summary, sizeof summary, "%d/%d", ready, cJSON_IsNumber(total) ? total->valueint : 0);
    json_set_num(w, "ready", ready);
    json_set_str(w, "summary", summary);
}

/* ---- API calls through the table */

/* Seconds this thread spent waiting for the API (the reconcile's own work is the rest). */
__thread double ctl_tl_api_s;

static int call_delete(struct controller *c, enum api_op op, const char *ns, const char *name, herr *e)
{
    double t0 = clock_mono_s();
    int rc = kube_delete(c->kc, controller_api_calls[op].res, ns, name, "Background", e);
    ctl_tl_api_s += clock_mono_s() - t0;
    return rc;
}

int ctl_call_patch(struct controller *c, enum api_op op, const char *ns, const char *name,
                   const cJSON *patch, herr *e)
{
    const struct api_call *a = &controller_api_calls[op];
    double t0 = clock_mono_s();
    int rc = kube_patch(c->kc, a->res, ns, name, a->sub, patch, NULL, e);
    ctl_tl_api_s += clock_mono_s() - t0;
    return rc;
}

static void emit(struct controller *c, const cJSON *job, const char *type, const char *reason,
                 const char *msg)
{
    cJSON *copy = cJSON_Duplicate(job, 0);
    if (!copy)
        return;
    if (!cJSON_GetObjectItem(copy, "apiVersion"))
        cJSON_AddStringToObject(copy, "apiVersion", JOB_API_VERSION);
    if (!cJSON_GetObjectItem(copy, "kind"))
        cJSON_AddStringToObject(copy, "kind", "TrainingJob");
    cJSON_AddItemToObject(copy, "metadata", cJSON_Duplicate(cJSON_GetObjectItem(job, "metadata"), 1));
    cJSON *ev = kube_event_build(copy, type, reason, msg, "holmes-operator");
    cJSON_Delete(copy);
    if (kube_recorder_emit(c->events, ev) != 0)
        log_warn("event %s for %s dropped (out of memory or the event queue is full)", reason,
                 json_str_at(job, "metadata.name"));
}

/* ---- status */

/* The condition of `type` in a conditions array (NULL when absent or not an array). */
static cJSON *find_condition(const cJSON *conds, const char *type)
{
    cJSON *it;
    cJSON_ArrayForEach(it, conds) {
        const char *t = json_str_at(it, "type");
        if (t && !strcmp(t, type))
            return it;
    }
    return NULL;
}

/* Sets a condition; returns 1 when its status, reason or message changed. */
int ctl_set_condition(cJSON *status, const char *type, int ok, const char *reason,
                      const char *msg, const char *now)
{
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    if (!cJSON_IsArray(conds)) {
        cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
        conds = cJSON_AddArrayToObject(status, "conditions");
    }
    const char *st = ok ? "True" : "False";
    cJSON *cnd = find_condition(conds, type);
    if (cnd) {
        const char *os = json_str_at(cnd, "status"), *orr = json_str_at(cnd, "reason"), *om = json_str_at(cnd, "message");
        int same_status = os && !strcmp(os, st);
        if (same_status && orr && !strcmp(orr, reason) && om && !strcmp(om, msg))
            return 0;
        if (!same_status)
            json_set_str(cnd, "lastTransitionTime", now);
        json_set_str(cnd, "status", st);
        json_set_str(cnd, "reason", reason);
        json_set_str(cnd, "message", msg);
        return 1;
    }
    cnd = cJSON_CreateObject();
    cJSON_AddStringToObject(cnd, "type", type);
    cJSON_AddStringToObject(cnd, "status", st);
    cJSON_AddStringToObject(cnd, "reason", reason);
    cJSON_AddStringToObject(cnd, "message", msg);
    cJSON_AddStringToObject(cnd, "lastTransitionTime", now);
    cJSON_AddItemToArray(conds, cnd);
    return 1;
}

static const char *condition_message(const cJSON *status, const char *type)
{
    const cJSON *c = find_condition(cJSON_GetObjectItemCaseSensitive(status, "conditions"), type);
    return c ? json_str_at(c, "message") : NULL;
}

/* 1 when status holds condition `type` with `reason`. */
static int condition_is(const cJSON *status, const char *type, const char *reason)
{
    const cJSON *c = find_condition(cJSON_GetObjectItemCaseSensitive(status, "conditions"), type);
    const char *r = c ? json_str_at(c, "reason") : NULL;
    return r && !strcmp(r, reason);
}

/* Patches status with the top-level fields that differ from old. */
static int write_status(struct controller *c, const cJSON *job, const cJSON *old, const cJSON *st,
                        struct memo *m, herr *e)
{
    /* Only what changed, removals included (a merge patch of the difference). */
    cJSON *patch = cJSON_CreateObject(), *ps = json_merge_diff(old, st);
    if (!patch || !ps || !cJSON_AddItemToObject(patch, "status", ps)) {
        cJSON_Delete(patch);
        cJSON_Delete(ps);
        return herr_set(e, "out of memory");
    }
    int rc = 0;
    if (ps->child) {
        rc = ctl_call_patch(c, API_PATCH_JOB_STATUS, json_str_at(job, "metadata.namespace"),
                        json_str_at(job, "metadata.name"), patch, e);
        if (rc == 0) {
            atomic_fetch_add(&c->status_writes, 1);
            if (m) {
                snprintf(m->base_rv, sizeof m->base_rv, "%s", kube_meta_str(job, "resourceVersion") ?
                         kube_meta_str(job, "resourceVersion") : "");
                cJSON_Delete(m->status);
                m->status = cJSON_Duplicate(st, 1);
            }
        }
    }
    cJSON_Delete(patch);
    return rc;
}

/* ---- pods of a job */

struct pod_scan {
    const char *ns, *job, *uid;
    cJSON *pods; /* copies */
};

static int scan_pod(const cJSON *pod, void *user)
{
    struct pod_scan *s = user;
    const char *job = kube_label(pod, LABEL_JOB), *ns = kube_meta_str(pod, "namespace");
    if (!job || !ns || strcmp(job, s->job) || strcmp(ns, s->ns))
        return 0;
    if (s->uid) {
        /* Only pods this incarnation of the job owns. */
        const cJSON *r;
        int mine = 0;
        cJSON_ArrayForEach(r, json_at(pod, "metadata.ownerReferences")) {
            const char *u = json_str_at(r, "uid");
            if (u && !strcmp(u, s->uid))
                mine = 1;
        }
        if (!mine)
            return 0;
    }
    cJSON_AddItemToArray(s->pods, cJSON_Duplicate(pod, 1));
    return 0;
}

static int pod_index(const cJSON *pod)
{
    const char *v = kube_label(pod, LABEL_INDEX);
    if (!v)
        return -1;
    char *end;
    long i = strtol(v, &end, 10);
    return *end || i < 0 || i > MAX_WORKERS ? -1 : (int)i;
}

static int cmp_index(const void *a, const void *b)
{
    return pod_index(*(cJSON *const *)a) - pod_index(*(cJSON *const *)b);
}

cJSON *ctl_pods_of(struct controller *c, const char *ns, const char *job, const char *uid)
{
    cJSON *all = kube_informer_list_indexed(c->inf[INF_PODS], ns, job);
    struct pod_scan s = {ns, job, uid, cJSON_CreateArray()};
    if (!all || !s.pods) {
        cJSON_Delete(all);
        cJSON_Delete(s.pods);
        return NULL;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, all)
        scan_pod(p, &s);
    cJSON_Delete(all);
    int n = cJSON_GetArraySize(s.pods);
    if (n > 1) {
        cJSON **v = malloc((size_t)n * sizeof *v);
        if (v) {
            for (int i = 0; i < n; i++)
                v[i] = cJSON_DetachItemFromArray(s.pods, 0);
            qsort(v, (size_t)n, sizeof *v, cmp_index);
            for (int i = 0; i < n; i++)
                cJSON_AddItemToArray(s.pods, v[i]);
            free(v);
        }
    }
    return s.pods;
}

static const cJSON *pod_condition(const cJSON *pod, const char *type)
{
    return find_condition(json_at(pod, "status.conditions"), type);
}

static int pod_condition_true(const cJSON *pod, const char *type)
{
    const char *s = json_str_at(pod_condition(pod, type), "status");
    return s && !strcmp(s, "True");
}

static int pod_failed(const cJSON *pod)
{
    const char *ph = json_str_at(pod, "status.phase"), *r = json_str_at(pod, "status.reason");
    return (ph && !strcmp(ph, "Failed")) || (r && !strcmp(r, "Evicted"));
}

static int delete_pods(struct controller *c, struct memo *m, const cJSON *pods, int only_active,
                       herr *e)
{
    const cJSON *p;
    int rc = 0;
    cJSON_ArrayForEach(p, pods) {
        if (json_at(p, "metadata.deletionTimestamp"))
            continue;
        const char *ph = json_str_at(p, "status.phase");
        if (only_active && ph && (!strcmp(ph, "Failed") || !strcmp(ph, "Succeeded")))
            continue;
        int r = call_delete(c, API_DELETE_POD, kube_meta_str(p, "namespace"), kube_meta_str(p, "name"), e);
        if (r != 0 && r != 404)
            rc = r;
        else if (m)
            ctl_memo_mark(m->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
    }
    return rc;
}

static int is_phase(const char *p, const char *want) { return p && !strcmp(p, want); }

/* ---- reconcile */

struct reconcile {
    struct controller *c;
    const cJSON *job;
    const char *ns, *name;
    cJSON *st;          /* new status (copy of old, edited) */
    const cJSON *old;   /* old status */
    char now[48];
    double requeue_s;   /* > 0: look again after this */
    struct create_list creates; /* objects to create, sent together with the pods */
    struct memo *memo;
    double t;           /* now, seconds */
    /* The spec, parsed once per reconcile by the spec module (common/trainingjob.h), with its
     * defaults from there; te: every error, what this version cannot run included. */
    struct tj_job tj;
    struct tj_errors te;
};

static void set_phase(struct reconcile *r, const char *phase)
{
    json_set_str(r->st, "phase", phase);
}

/* Queues the creation of an owned object the cache does not hold; it is sent in the first
 * batch with the pods (or at the end of the reconcile when no pod is wanted). */
static int ensure_owned(struct reconcile *r, int inf, enum api_op op, const char *name,
                        cJSON *(*build)(const cJSON *), herr *e)
{
    cJSON *have = kube_informer_get(r->c->inf[inf], r->ns, name);
    if (have) {
        cJSON_Delete(have);
        return 0;
    }
    cJSON *obj = build(r->job);
    if (!obj || ctl_creates_add(&r->creates, op, obj, name) != 0) {
        cJSON_Delete(obj);
        return herr_set(e, "%s/%s: cannot build %s", r->ns, name, controller_api_calls[op].res->resource);
    }
    return 0;
}

/* The job's Secret: its token, and the coordinator's CA as ca.crt when the operator has one
 * (patched in when the cached Secret holds another, or none: a CA renewed, an operator
 * upgraded). */
static int ensure_secret(struct reconcile *r, herr *e)
{
    char name[300];
    snprintf(name, sizeof name, "%s-token", r->name);
    char *ca = r->c->o.tls ? tls_keeper_ca(r->c->o.tls) : NULL;
    cJSON *have = kube_informer_get(r->c->inf[INF_SECRETS], r->ns, name);
    int rc = 0;
    if (have) {
        cJSON *patch = ca ? ctl_secret_ca_patch(have, ca) : NULL;
        if (patch)
            rc = ctl_call_patch(r->c, API_PATCH_SECRET, r->ns, name, patch, e);
        cJSON_Delete(patch);
    } else {
        cJSON *obj = ctl_build_secret_ca(r->job, ca);
        if (!obj || ctl_creates_add(&r->creates, API_CREATE_SECRET, obj, name) != 0) {
            cJSON_Delete(obj);
            rc = herr_set(e, "%s/%s: cannot build secrets", r->ns, name);
        }
    }
    cJSON_Delete(have);
    free(ca);
    return rc;
}

/* The cache index and API calls of the job's PodGroup; -1 when its gang scheduler has none. */
static int podgroup_ops(const struct reconcile *r, enum api_op *create, enum api_op *del)
{
    switch (controller_gang_of(&r->tj.spec, &r->c->o.gang)) {
    case TJ_GANG_VOLCANO:
        *create = API_CREATE_VOLCANO_PG;
        *del = API_DELETE_VOLCANO_PG;
        return INF_VOLCANO_PG;
    case TJ_GANG_COSCHEDULING:
        *create = API_CREATE_COSCHED_PG;
        *del = API_DELETE_COSCHED_PG;
        return INF_COSCHED_PG;
    default:
        return -1;
    }
}

/* Queues the creation of the job's PodGroup (volcano, coscheduling) when the cache lacks it;
 * it goes out in the first batch, before the pods that name it. An existing one (409) is fine. */
static int ensure_podgroup(struct reconcile *r, herr *e)
{
    enum api_op create, del;
    int inf = podgroup_ops(r, &create, &del);
    if (inf < 0 || r->tj.spec.suspend)
        return 0;
    if (!r->c->inf[inf])
        return herr_set(e, "%s/%s: the %s informer is not running", r->ns, r->name,
                        controller_api_calls[create].res->group);
    cJSON *have = kube_informer_get(r->c->inf[inf], r->ns, r->name);
    if (have) {
        cJSON_Delete(have);
        return 0;
    }
    cJSON *pg = controller_build_podgroup(r->job, &r->tj.spec, &r->c->o.gang);
    if (!pg || ctl_creates_add(&r->creates, create, pg, r->name) != 0) {
        cJSON_Delete(pg);
        return herr_set(e, "%s/%s: cannot build the PodGroup", r->ns, r->name);
    }
    return 0;
}

/* A suspended job holds no PodGroup: the gang scheduler releases what it reserved for it. */
static int delete_podgroup(struct reconcile *r, herr *e)
{
    enum api_op create, del;
    int inf = podgroup_ops(r, &create, &del);
    if (inf < 0 || !r->c->inf[inf])
        return 0;
    cJSON *have = kube_informer_get(r->c->inf[inf], r->ns, r->name);
    int cached = have && !json_at(have, "metadata.deletionTimestamp");
    cJSON_Delete(have);
    if (!cached)
        return 0;
    int rc = call_delete(r->c, del, r->ns, r->name, e);
    return rc == 404 ? 0 : rc;
}

/* spec errors -> Valid=False with every error and a Warning Event. 1 when the spec is invalid. */
static int refuse_invalid_spec(struct reconcile *r, const char *phase)
{
    if (r->te.count == 0)
        return 0;
    char msg[2048] = "";
    size_t len = 0;
    int kept = r->te.count < TJ_MAX_ERRORS ? r->te.count : TJ_MAX_ERRORS;
    for (int i = 0; i < kept; i++)
        len += (size_t)snprintf(msg + len, len < sizeof msg ? sizeof msg - len : 0, "%s%s",
                                len ? "; " : "", r->te.msg[i]);
    if (r->te.count > kept)
        snprintf(msg + len, len < sizeof msg ? sizeof msg - len : 0, "; and %d more errors",
                 r->te.count - kept);
    const char *before = condition_message(r->old, "Valid");
    if (ctl_set_condition(r->st, "Valid", 0, "InvalidSpec", msg, r->now) || !before)
        emit(r->c, r->job, "Warning", "InvalidSpec", msg);
    if (!phase)
        set_phase(r, "Pending");
    return 1;
}

/* The job's pods as this controller knows them: the cache, less the pods it deleted. */
static cJSON *live_pods(struct reconcile *r)
{
    cJSON *pods = ctl_pods_of(r->c, r->ns, r->name, json_str_at(r->job, "metadata.uid"));
    if (!pods)
        return NULL;
    /* Pods we deleted are gone even if the cache still lists them; pods we created exist. */
    for (cJSON *pp = pods->child; pp;) {
        cJSON *next = pp->next;
        const char *pu = kube_meta_str(pp, "uid");
        cJSON_DeleteItemFromObjectCaseSensitive(r->memo->made, kube_meta_str(pp, "name"));
        if (pu && cJSON_GetObjectItemCaseSensitive(r->memo->gone, pu))
            cJSON_Delete(cJSON_DetachItemViaPointer(pods, pp));
        pp = next;
    }
    return pods;
}

/* Immutable fields changed while pods exist: refuse, disturb nothing. 1 when refused. */
static int refuse_immutable_change(struct reconcile *r, const cJSON *pods)
{
    char *hash = ctl_spec_hash(r->job);
    const cJSON *p;
    const char *pod_hash = NULL;
    cJSON_ArrayForEach(p, pods) {
        const cJSON *hv = cJSON_GetObjectItemCaseSensitive(json_at(p, "metadata.annotations"), ANN_SPEC);
        const char *h = cJSON_IsString(hv) ? hv->valuestring : NULL;
        if (h && !json_at(p, "metadata.deletionTimestamp")) {
            pod_hash = h;
            break;
        }
    }
    int refused = hash && pod_hash && strcmp(hash, pod_hash) != 0 &&
                  !r->tj.spec.suspend;
    if (refused) {
        char fields[512], msg[1024];
        ctl_changed_fields(pod_hash, hash, fields, sizeof fields);
        snprintf(msg, sizeof msg, "refused: %s changed while the job has pods; these fields are "
                 "immutable while the job runs (suspend it first, or revert the change)", fields);
        if (ctl_set_condition(r->st, "Valid", 0, "ImmutableFieldChanged", msg, r->now))
            emit(r->c, r->job, "Warning", "ImmutableFieldChanged", msg);
    }
    free(hash);
    return refused;
}

/* A failed or evicted pod is replaced, alone: its worker's supervisor gave up, or the pod or
 * its node is gone. The other pods keep running; the coordinator restarts the gang in place
 * and is the one that counts restarts (status.restarts) and fails the job when they are spent.
 * A pod is replaced no sooner than spec.restartPolicy.backoffSeconds after it was created, so a
 * pod that fails at start is replaced at that rate at most. 1 when a pod had failed. */
static int replace_failed(struct reconcile *r, const cJSON *pods, int *rc, herr *e)
{
    struct controller *c = r->c;
    const cJSON *job = r->job, *p;
    double backoff = r->tj.spec.restart.backoff_seconds;
    int any = 0;
    cJSON_ArrayForEach(p, pods) {
        if (!pod_failed(p) || json_at(p, "metadata.deletionTimestamp"))
            continue;
        any = 1;
        double born = kube_time_parse(kube_meta_str(p, "creationTimestamp"));
        double wait = born > 0 ? born + backoff - clock_wall_s() : 0;
        if (wait > 0) {
            if (r->requeue_s <= 0 || wait < r->requeue_s)
                r->requeue_s = wait;
            continue;
        }
        const char *why = json_str_at(p, "status.reason"), *wmsg = json_str_at(p, "status.message");
        char msg[1024];
        snprintf(msg, sizeof msg, "pod %s failed (%s%s%s): replacing it; the other workers' pods "
                 "stay, and the gang restarts in place from its last checkpoint",
                 kube_meta_str(p, "name"), why ? why : "Error", wmsg ? ": " : "", wmsg ? wmsg : "");
        int d = call_delete(c, API_DELETE_POD, kube_meta_str(p, "namespace"), kube_meta_str(p, "name"), e);
        if (d != 0 && d != 404) {
            *rc = d;
            continue;
        }
        ctl_memo_mark(r->memo->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
        emit(c, job, "Warning", "PodReplaced", msg);
        atomic_fetch_add(&c->pod_replacements, 1);
    }
    return any;
}

/* spec.elastic: the workers the coordinator counted as lost (status.elastic.lostWorkers, their
 * pod names) into lost[0..workers); their count. 0 for a job that is not elastic. */
static int lost_workers(const struct reconcile *r, int workers, char *lost)
{
    memset(lost, 0, (size_t)workers);
    if (!tj_is_elastic(&r->tj.spec))
        return 0;
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, json_at(r->st, "elastic.lostWorkers")) {
        if (!cJSON_IsString(it))
            continue;
        for (int i = 0; i < workers; i++) {
            char pname[300];
            tj_worker_pod_name(pname, sizeof pname, r->name, i);
            if (!strcmp(pname, it->valuestring) && !lost[i]) {
                lost[i] = 1;
                n++;
            }
        }
    }
    return n;
}

/* Pods beyond spec.workers go; missing ones are created (in slow-start batches), but not those
 * of lost workers of an elastic job without scaleUp (the job re-planned without them for good). */
static int create_missing(struct reconcile *r, const cJSON *pods, int workers, const char *lost,
                          herr *e)
{
    struct controller *c = r->c;
    const cJSON *job = r->job, *p;
    int rc = 0;
    char have[MAX_WORKERS + 1];
    memset(have, 0, sizeof have);
    cJSON_ArrayForEach(p, pods) {
        int i = pod_index(p);
        if (i < 0 || i >= workers) {
            if (!json_at(p, "metadata.deletionTimestamp")) {
                int d = call_delete(c, API_DELETE_POD, r->ns, kube_meta_str(p, "name"), e);
                if (d != 0 && d != 404)
                    rc = d;
            }
        } else {
            have[i] = 1;
        }
    }
    int created = 0, pending_creates = 0;
    int first_pod = r->creates.n;
    for (int i = 0; i < workers && rc == 0; i++) {
        char pname[300];
        tj_worker_pod_name(pname, sizeof pname, r->name, i);
        if (!have[i] && cJSON_GetObjectItemCaseSensitive(r->memo->made, pname)) {
            pending_creates++;
            continue;
        }
        if (have[i] || (lost[i] && !r->tj.spec.elastic.scale_up))
            continue;
        cJSON *pod = controller_build_gang_pod(job, &r->tj.spec, i, c->coordinator, c->image, &c->o.gang, e);
        if (!pod) {
            rc = -1;
            break;
        }
        if (c->o.tls && controller_pod_trust_ca(pod, r->name) != 0) {
            cJSON_Delete(pod);
            rc = herr_set(e, "out of memory");
            break;
        }
        if (ctl_creates_add(&r->creates, API_CREATE_POD, pod, pname) != 0) {
            cJSON_Delete(pod);
            rc = herr_set(e, "out of memory");
        }
    }
    if (rc == 0)
        rc = ctl_creates_run(c, r->ns, &r->creates, e);
    for (int k = first_pod; k < r->creates.n; k++) {
        if (r->creates.items[k].rc == 0) {
            created++;
            ctl_memo_mark(r->memo->made, r->creates.items[k].name, r->t + 30);
            atomic_fetch_add(&c->pods_created, 1);
        }
    }
    if (created && !json_at(r->st, "startTime"))
        json_set_str(r->st, "startTime", r->now);
    if (created == workers)
        emit(c, job, "Normal", "PodsCreated", "created the worker pods");

    if (pending_creates)
        r->requeue_s = 1; /* look again if the cache has not shown them by then */

    return rc;
}

/* Status from the pods: readiness, scheduling (and the gang timeout), completion. The pods of
 * an elastic job's lost workers count for none of it: the job trains without them. */
static void status_from_pods(struct reconcile *r, const cJSON *pods, int all, const char *lost,
                             int nlost, const char *phase)
{
    struct controller *c = r->c;
    const cJSON *job = r->job, *p;
    int workers = all - nlost;
    int ready = 0, scheduled = 0, succeeded = 0;
    double oldest_unsched = 0;
    char unsched_names[512] = "", sched_msg[512] = "";
    size_t ul = 0;
    cJSON_ArrayForEach(p, pods) {
        int i = pod_index(p);
        if (i < 0 || i >= all || lost[i] || json_at(p, "metadata.deletionTimestamp"))
            continue;
        const char *ph = json_str_at(p, "status.phase");
        if (is_phase(ph, "Succeeded"))
            succeeded++;
        if (pod_condition_true(p, "Ready"))
            ready++;
        if (pod_condition_true(p, "PodScheduled") || json_str_at(p, "spec.nodeName"))
            scheduled++;
        const cJSON *ps = pod_condition(p, "PodScheduled");
        const char *reason = json_str_at(ps, "reason");
        if (ps && reason && !strcmp(reason, "Unschedulable")) {
            double since = kube_time_parse(json_str_at(ps, "lastTransitionTime"));
            if (since <= 0)
                since = kube_time_parse(kube_meta_str(p, "creationTimestamp"));
            if (since > 0 && (oldest_unsched == 0 || since < oldest_unsched))
                oldest_unsched = since;
            if (ul + 80 < sizeof unsched_names)
                ul += (size_t)snprintf(unsched_names + ul, sizeof unsched_names - ul, "%s%s",
                                       ul ? ", " : "", kube_meta_str(p, "name"));
            if (!sched_msg[0] && json_str_at(ps, "message"))
                snprintf(sched_msg, sizeof sched_msg, "%s", json_str_at(ps, "message"));
        }
    }
    set_workers_ready(r->st, ready);
    char msg[2048];
    double gang = r->tj.spec.gang_timeout_seconds;
    int gated = controller_pods_gated(pods);
    if (scheduled == workers) {
        ctl_set_condition(r->st, "PodsScheduled", 1, "AllScheduled", "every worker pod is scheduled", r->now);
    } else if (gated > 0) {
        /* Kueue holds the gang until its LocalQueue admits all of it: not a gang timeout. */
        snprintf(msg, sizeof msg, "waiting for Kueue admission in LocalQueue %s: %d of %d worker pods "
                 "carry the scheduling gate %s", r->tj.spec.scheduling.queue, gated, workers,
                 KUEUE_ADMISSION_GATE);
        if (ctl_set_condition(r->st, "PodsScheduled", 0, "WaitingForAdmission", msg, r->now) &&
            !condition_is(r->old, "PodsScheduled", "WaitingForAdmission"))
            emit(c, job, "Normal", "WaitingForAdmission", msg);
    } else if (oldest_unsched > 0 && clock_wall_s() - oldest_unsched >= gang) {
        snprintf(msg, sizeof msg, "pods %s unschedulable for more than %gs "
                 "(spec.gangTimeoutSeconds): %s", unsched_names, gang,
                 sched_msg[0] ? sched_msg : "no reason given");
        if (ctl_set_condition(r->st, "PodsScheduled", 0, "GangTimeout", msg, r->now))
            emit(c, job, "Warning", "GangTimeout", msg);
    } else {
        snprintf(msg, sizeof msg, "%d of %d worker pods scheduled", scheduled, workers);
        ctl_set_condition(r->st, "PodsScheduled", 0, "Scheduling", msg, r->now);
        if (oldest_unsched > 0) {
            double left = oldest_unsched + gang - clock_wall_s();
            r->requeue_s = left > 0.05 ? left : 0.05;
        }
    }
    if (ready == workers) {
        ctl_set_condition(r->st, "PodsReady", 1, "AllReady", "every worker pod is ready", r->now);
    } else {
        snprintf(msg, sizeof msg, "%d of %d worker pods ready", ready, workers);
        ctl_set_condition(r->st, "PodsReady", 0, "Waiting", msg, r->now);
    }
    if (succeeded == workers && workers > 0) {
        /* a lost worker's pod waiting for capacity (scaleUp) is not needed any more */
        cJSON_ArrayForEach(p, pods) {
            int i = pod_index(p);
            herr de = {0};
            if (i >= 0 && i < all && lost[i] && !json_at(p, "metadata.deletionTimestamp") &&
                call_delete(c, API_DELETE_POD, r->ns, kube_meta_str(p, "name"), &de) == 0)
                ctl_memo_mark(r->memo->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
        }
        set_phase(r, "Succeeded");
        ctl_set_condition(r->st, "Complete", 1, "AllWorkersSucceeded", "every worker finished", r->now);
        if (!json_at(r->st, "completionTime"))
            json_set_str(r->st, "completionTime", r->now);
        emit(c, job, "Normal", "Succeeded", "every worker finished");
    } else if (ready == workers) {
        if (!phase || is_phase(phase, "Pending") || is_phase(phase, "Queued") ||
            is_phase(phase, "Suspended"))
            set_phase(r, "Discovering");
    } else {
        /* Queued: a gang scheduler (Kueue) holds the pods until it admits them all */
        set_phase(r, gated > 0 ? "Queued" : "Pending");
    }
}

static int reconcile_job(struct reconcile *r, herr *e)
{
    struct controller *c = r->c;
    const cJSON *job = r->job;
    const char *phase = json_str_at(r->st, "phase");
    double gen = json_num_at(job, "metadata.generation", 1);
    int workers = r->tj.spec.workers;
    json_set_num(r->st, "observedGeneration", gen);

    if (refuse_invalid_spec(r, phase))
        return 0;
    cJSON *pods = live_pods(r);
    if (!pods)
        return herr_set(e, "out of memory");
    int rc = 0;
    if (refuse_immutable_change(r, pods))
        goto out;
    ctl_set_condition(r->st, "Valid", 1, "SpecValid", "the spec passed validation", r->now);
    if (is_phase(phase, "Succeeded") || is_phase(phase, "Failed"))
        goto out; /* terminal */

    if ((rc = ensure_secret(r, e)) != 0 ||
        (rc = ensure_owned(r, INF_SERVICES, API_CREATE_SERVICE, r->name, ctl_build_service, e)) != 0)
        goto out;

    if ((rc = ensure_podgroup(r, e)) != 0)
        goto out;

    json_set_num(json_child_object(r->st, "workers"), "total", workers);
    if (r->tj.spec.suspend) {
        rc = delete_pods(c, r->memo, pods, 0, e);
        if (rc == 0)
            rc = delete_podgroup(r, e);
        set_workers_ready(r->st, 0);
        if (!is_phase(phase, "Suspended"))
            emit(c, job, "Normal", "Suspended", "spec.suspend is true: worker pods deleted");
        set_phase(r, "Suspended");
        ctl_set_condition(r->st, "PodsReady", 0, "Suspended", "the job is suspended", r->now);
        goto out;
    }
    if (replace_failed(r, pods, &rc, e) && rc)
        goto out;
    char *lost = calloc((size_t)workers + 1, 1);
    if (!lost) {
        rc = herr_set(e, "out of memory");
        goto out;
    }
    int nlost = lost_workers(r, workers, lost);
    rc = create_missing(r, pods, workers, lost, e);
    status_from_pods(r, pods, workers, lost, nlost, phase);
    free(lost);
out:
    cJSON_Delete(pods);
    return rc;
}

static int reconcile_key(struct controller *c, const char *key, double *requeue, herr *e)
{
    char ns[256], name[256];
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof ns)
        return 0;
    snprintf(ns, sizeof ns, "%.*s", (int)(slash - key), key);
    snprintf(name, sizeof name, "%s", slash + 1);
    cJSON *job = kube_informer_get(c->inf[INF_JOBS], ns, name);
    struct memo *m = ctl_memo_take(c, key);
    cJSON *feed = ctl_feed_take(c, key);
    if (!job || json_at(job, "metadata.deletionTimestamp") || !m) {
        cJSON_Delete(job);
        cJSON_Delete(feed);
        ctl_memo_free(m);
        return 0; /* gone: ownerReferences take the rest */
    }
    /* The cache still holds the version our last status write was based on: use what we
     * wrote. Any other version (ours arrived, or someone else wrote) supersedes the memo. */
    const char *rv = kube_meta_str(job, "resourceVersion");
    if (m->status && rv && !strcmp(rv, m->base_rv)) {
        cJSON_DeleteItemFromObjectCaseSensitive(job, "status");
        cJSON_AddItemToObject(job, "status", m->status);
        m->status = NULL;
    } else {
        cJSON_Delete(m->status);
        m->status = NULL;
    }
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(job, "status");
    struct reconcile r = {.c = c, .job = job, .ns = ns, .name = name, .old = old, .memo = m,
                          .t = clock_wall_s()};
    r.st = cJSON_IsObject(old) ? cJSON_Duplicate(old, 1) : cJSON_CreateObject();
    kube_time_now(r.now, sizeof r.now, 0);
    if (tj_job_from_json(job, &r.tj, &r.te) == 0) { /* what the API takes but this version */
        tj_spec_runnable(&r.tj.spec, "spec", &r.te);  /* cannot run is refused too, and what */
        controller_gang_check(&r.tj.spec, &c->o.gang, &r.te); /* this operator's gang */
    }                                                             /* schedulers refuse */
    /* What the coordinator reported since (phase, plan, progress, its conditions) first: the
     * reconcile then sees a phase it set (Failed is final) and writes everything at once. */
    if (r.st && feed)
        ctl_feed_apply(feed, r.st, r.now);
    int rc = r.st ? reconcile_job(&r, e) : herr_set(e, "out of memory");
    if (rc == 0) /* the Secret and Service of a reconcile that wanted no pod */
        rc = ctl_creates_run(c, ns, &r.creates, e);
    ctl_creates_free(&r.creates);
    herr we;
    int wrc = -1;
    if (r.st) {
        wrc = write_status(c, job, old, r.st, m, &we);
        if (wrc != 0 && rc == 0) {
            *e = we;
            rc = wrc;
        }
    }
    if (wrc != 0)
        ctl_feed_return(c, key, feed); /* not written: the next try writes it */
    else
        cJSON_Delete(feed);
    *requeue = r.requeue_s;
    ctl_memo_put(c, key, m, r.t);
    cJSON_Delete(r.st);
    tj_job_free(&r.tj);
    cJSON_Delete(job);
    return rc;
}

static void *worker(void *arg)
{
    struct controller *c = arg;
    char *key;
    /* Act only on complete caches: a job reconciled before its pods are listed would
     * create pods that exist already. */
    while (controller_wait_synced(c, 200) != 0)
        if (atomic_load(&c->stopping))
            return NULL;
    while ((key = kube_queue_get(c->queue))) {
        herr e = {0};
        double requeue = 0, t0 = clock_mono_s();
        ctl_tl_api_s = 0;
        int rc = reconcile_key(c, key, &requeue, &e);
        double took = clock_mono_s() - t0;
        metrics_hist_observe(&c->latency, took);
        metrics_hist_observe(&c->own_latency, took - ctl_tl_api_s > 0 ? took - ctl_tl_api_s : 0);
        atomic_fetch_add(&c->reconciles, 1);
        if (rc != 0) {
            atomic_fetch_add(&c->reconcile_errors, 1);
            double d = kube_queue_add_rate_limited(c->queue, key);
            log_warn("reconcile %s failed (retry in %.2fs): %s", key, d, e.msg);
        } else {
            kube_queue_forget(c->queue, key);
            if (requeue > 0)
                kube_queue_add_after(c->queue, key, requeue);
        }
        kube_queue_done(c->queue, key);
        free(key);
    }
    return NULL;
}

/* ---- lifecycle */

static void feed_free(void *v) { cJSON_Delete(v); }

struct controller *controller_new(struct kube_client *kc, const struct controller_opts *o, herr *e)
{
    struct controller *c = calloc(1, sizeof *c);
    if (!c) {
        herr_set(e, "controller: out of memory");
        return NULL;
    }
    c->kc = kc;
    c->o = *o;
    if (c->o.threads <= 0)
        c->o.threads = 2;
    c->ns = o->namespace && *o->namespace ? strdup(o->namespace) : NULL;
    c->coordinator = strdup(o->coordinator_url ? o->coordinator_url : "");
    c->image = o->default_image ? strdup(o->default_image) : NULL;
    c->queue = kube_queue_new(0.05, 60);
    c->memos = kube_map_new();
    pthread_mutex_init(&c->memo_lock, NULL);
    c->feeds = kube_map_new();
    pthread_mutex_init(&c->feed_lock, NULL);
    metrics_hist_init(&c->latency);
    metrics_hist_init(&c->own_latency);
    c->events = kube_recorder_new(kc, NULL, e);
    int ok = c->coordinator && c->queue && c->memos && c->feeds && c->events;
    if (ok)
        ok = ctl_informers_new(c, e) == 0;
    if (!ok) {
        controller_free(c);
        return NULL;
    }
    return c;
}

int controller_start(struct controller *c, herr *e)
{
    for (int i = 0; i < INF_COUNT; i++)
        if (c->inf[i] && kube_informer_start(c->inf[i], e) != 0)
            return -1;
    c->threads = calloc((size_t)c->o.threads, sizeof *c->threads);
    if (!c->threads)
        return herr_set(e, "controller: out of memory");
    for (int i = 0; i < c->o.threads; i++) {
        int rc = pthread_create(&c->threads[i], NULL, worker, c);
        if (rc != 0)
            return herr_set(e, "controller: pthread_create: %s", strerror(rc));
        c->nthreads++;
    }
    return 0;
}

int controller_wait_synced(struct controller *c, int timeout_ms)
{
    for (int i = 0; i < INF_COUNT; i++)
        if (c->inf[i] && kube_informer_wait_synced(c->inf[i], timeout_ms) != 0)
            return -1;
    return 0;
}

int controller_synced(struct controller *c) { return controller_wait_synced(c, 0) == 0; }

void controller_free(struct controller *c)
{
    if (!c)
        return;
    atomic_store(&c->stopping, 1);
    if (c->queue)
        kube_queue_shutdown(c->queue);
    for (int i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    free(c->threads);
    for (int i = 0; i < INF_COUNT; i++)
        kube_informer_free(c->inf[i]);
    kube_recorder_free(c->events);
    kube_queue_free(c->queue);
    kube_map_free(c->memos, ctl_memo_free);
    kube_map_free(c->feeds, feed_free);
    pthread_mutex_destroy(&c->memo_lock);
    pthread_mutex_destroy(&c->feed_lock);
    free(c->ns);
    free(c->coordinator);
    free(c->image);
    free(c);
}

