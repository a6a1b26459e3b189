/* The controller's informers: what each one watches, what it keeps of an object (small cache,
 * small RSS), and the job key an event queues for reconcile. */
#include "controller_impl.h"

#include <stdio.h>
#include <string.h>

#include "json.h"

/* Keep what the controller reads of a pod: small cache, small RSS. */
static cJSON *trim_pod(cJSON *pod)
{
    cJSON *out = cJSON_CreateObject();
    if (!out) {
        cJSON_Delete(pod);
        return NULL;
    }
    cJSON *md = cJSON_DetachItemFromObjectCaseSensitive(pod, "metadata");
    if (md) {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
        cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
        cJSON *keep = cJSON_CreateObject();
        const cJSON *it;
        cJSON_ArrayForEach(it, ann) {
            if (!strncmp(it->string, "holmes.dev/", 11))
                cJSON_AddItemToObject(keep, it->string, cJSON_Duplicate(it, 1));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(md, "annotations");
        cJSON_AddItemToObject(md, "annotations", keep);
        cJSON_AddItemToObject(out, "metadata", md);
    }
    const char *node = json_str_at(pod, "spec.nodeName");
    cJSON *gates = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "spec"),
                                                           "schedulingGates");
    if (node || gates) {
        cJSON *sp = cJSON_AddObjectToObject(out, "spec");
        if (node)
            cJSON_AddStringToObject(sp, "nodeName", node);
        if (gates)
            cJSON_AddItemToObject(sp, "schedulingGates", gates); /* Kueue's admission gate */
    }
    cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(pod, "status");
    if (st) {
        cJSON *keep = cJSON_CreateObject();
        static const char *const fields[] = {"phase", "reason", "message", "conditions", "podIP"};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(st, fields[i]);
            if (v)
                cJSON_AddItemToObject(keep, fields[i], v);
        }
        cJSON_AddItemToObject(out, "status", keep);
        cJSON_Delete(st);
    }
    cJSON_Delete(pod);
    return out;
}

static cJSON *trim_meta(cJSON *obj)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    cJSON_DeleteItemFromObjectCaseSensitive(ann, "kubectl.kubernetes.io/last-applied-configuration");
    return obj;
}

/* Services and PodGroups: the controller reads only their metadata. */
static cJSON *trim_service(cJSON *obj)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    return trim_meta(obj);
}

static void enqueue_obj_job(struct controller *c, const cJSON *obj)
{
    const char *job = kube_label(obj, LABEL_JOB), *ns = kube_meta_str(obj, "namespace");
    if (!job || !ns)
        return;
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns, job);
    kube_queue_add(c->queue, key);
}

static void on_job(void *user, enum kube_event_type t, const cJSON *obj, const cJSON *old)
{
    struct controller *c = user;
    char key[512];
    (void)t;
    (void)old;
    if (kube_object_key(obj, key, sizeof key) == 0)
        kube_queue_add(c->queue, key);
}

static void on_owned(void *user, enum kube_event_type t, const cJSON *obj, const cJSON *old)
{
    (void)t;
    (void)old;
    enqueue_obj_job(user, obj);
}

/* Makes c->inf[]: the TrainingJobs, and the pods, Secrets and Services labelled with a job.
 * 0, or -1 with e set (the informers made so far stay in c->inf for controller_free). */
int ctl_informers_new(struct controller *c, herr *e)
{
    static const struct {
        const struct kube_resource *res;
        const char *selector;
        kube_transform_fn tf;
        int jobs;
        enum tj_gang gang; /* made only when this gang scheduler is enabled */
    } spec[INF_COUNT] = {
        [INF_JOBS] = {&KUBE_TRAININGJOBS, NULL, trim_meta, 1, TJ_GANG_DEFAULT},
        [INF_PODS] = {&KUBE_PODS, LABEL_JOB, trim_pod, 0, TJ_GANG_DEFAULT},
        [INF_SECRETS] = {&KUBE_SECRETS, LABEL_JOB, trim_meta, 0, TJ_GANG_DEFAULT},
        [INF_SERVICES] = {&KUBE_SERVICES, LABEL_JOB, trim_service, 0, TJ_GANG_DEFAULT},
        [INF_VOLCANO_PG] = {&CTL_VOLCANO_PODGROUPS, LABEL_JOB, trim_service, 0, TJ_GANG_VOLCANO},
        [INF_COSCHED_PG] = {&CTL_COSCHED_PODGROUPS, LABEL_JOB, trim_service, 0, TJ_GANG_COSCHEDULING},
    };
    int ok = 1;
    for (int i = 0; ok && i < INF_COUNT; i++) {
        if (spec[i].gang != TJ_GANG_DEFAULT && !(c->o.gang.enabled & (1u << spec[i].gang)))
            continue;
        struct kube_informer_opts io = {.resource = spec[i].res, .ns = c->ns,
                                        .label_selector = spec[i].selector,
                                        .transform = spec[i].tf,
                                        .handler = spec[i].jobs ? on_job : on_owned, .user = c,
                                        .index_label = i == INF_PODS ? LABEL_JOB : NULL};
        c->inf[i] = kube_informer_new(c->kc, &io, e);
        ok = c->inf[i] != NULL;
    }
    return ok ? 0 : -1;
}
