/* The API calls the controller makes (controller_api_calls: `run --print-api-calls`, the Helm
 * chart's RBAC), and the calls through that table that reconciles make, timed. */
#include "controller_impl.h"

#include <string.h>

#include "clock.h"
#include "json.h"
#include "kube_events.h"
#include "log.h"

static const struct kube_resource CTL_TOKEN_REVIEWS = {"authentication.k8s.io", "v1",
                                                       "tokenreviews", "TokenReview"};
static const struct kube_resource CTL_ACCESS_REVIEWS = {"authorization.k8s.io", "v1",
                                                        "subjectaccessreviews",
                                                        "SubjectAccessReview"};

const struct api_call controller_api_calls[API_OP_COUNT] = {
    [API_LIST_JOBS] = {"list", &KUBE_TRAININGJOBS, NULL, TJ_GANG_DEFAULT},
    [API_WATCH_JOBS] = {"watch", &KUBE_TRAININGJOBS, NULL, TJ_GANG_DEFAULT},
    [API_PATCH_JOB_STATUS] = {"patch", &KUBE_TRAININGJOBS, "status", TJ_GANG_DEFAULT},
    /* a finished job whose spec.ttlSecondsAfterFinished ran out */
    [API_DELETE_JOB] = {"delete", &KUBE_TRAININGJOBS, NULL, TJ_GANG_DEFAULT},
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


/* Seconds this thread spent waiting for the API (the reconcile's own work is the rest). */
__thread double ctl_tl_api_s;

int ctl_call_delete(struct controller *c, enum api_op op, const char *ns, const char *name, herr *e)
{
    double t0 = clock_mono_s();
    int rc = kube_delete(c->kc, controller_api_calls[op].res, ns, name, "Background", e);
    ctl_tl_api_s += clock_mono_s() - t0;
    return rc;
}

int ctl_call_patch(struct controller *c, enum api_op op, const char *ns, const char *name,
                   const cJSON *patch, cJSON **out, herr *e)
{
    const struct api_call *a = &controller_api_calls[op];
    double t0 = clock_mono_s();
    int rc = kube_patch(c->kc, a->res, ns, name, a->sub, patch, out, e);
    ctl_tl_api_s += clock_mono_s() - t0;
    return rc;
}

void ctl_emit(struct controller *c, const cJSON *job, const char *type, const char *reason,
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

