/* Gang admission: what each gang scheduler needs so that a job's worker pods are admitted all
 * or none. kueue: the pods form one Kueue pod group in a LocalQueue (labels and an annotation;
 * Kueue's webhook gates them until the group is admitted). volcano and coscheduling: a PodGroup
 * owned by the job with minMember = workers, and pods that name it and the scheduler that reads
 * it. none: nothing (the pods go to the default scheduler one by one). */
#include "controller_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

const struct kube_resource CTL_VOLCANO_PODGROUPS = {"scheduling.volcano.sh", "v1beta1", "podgroups",
                                                    "PodGroup"};
const struct kube_resource CTL_COSCHED_PODGROUPS = {"scheduling.x-k8s.io", "v1alpha1", "podgroups",
                                                    "PodGroup"};

#define KUEUE_QUEUE_LABEL "kueue.x-k8s.io/queue-name"
#define KUEUE_GROUP_LABEL "kueue.x-k8s.io/pod-group-name"
#define KUEUE_COUNT_ANN "kueue.x-k8s.io/pod-group-total-count"
#define VOLCANO_GROUP_ANN "scheduling.k8s.io/group-name"
#define COSCHED_GROUP_LABEL "scheduling.x-k8s.io/pod-group"
#define DEFAULT_VOLCANO_SCHEDULER "volcano"
#define DEFAULT_COSCHED_SCHEDULER "scheduler-plugins-scheduler"

int controller_gang_parse_list(const char *list, unsigned *enabled, herr *e)
{
    *enabled = 0;
    char *copy = strdup(list ? list : "");
    if (!copy)
        return herr_set(e, "out of memory");
    int rc = 0;
    for (char *save, *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        enum tj_gang g;
        if (tj_gang_parse(tok, &g) != 0)
            rc = herr_set(e, "\"%s\" is not none, kueue, volcano or coscheduling", tok);
        else if (g != TJ_GANG_NONE)
            *enabled |= 1u << g;
    }
    free(copy);
    return rc;
}

enum tj_gang controller_gang_of(const struct tj_spec *s, const struct controller_gang *g)
{
    if (s->scheduling.gang != TJ_GANG_DEFAULT)
        return s->scheduling.gang;
    return g->default_gang != TJ_GANG_DEFAULT ? g->default_gang : TJ_GANG_NONE;
}

int controller_gang_check(const struct tj_spec *s, const struct controller_gang *g, struct tj_errors *errs)
{
    int before = errs->count;
    enum tj_gang gang = controller_gang_of(s, g);
    if (gang != TJ_GANG_NONE && !(g->enabled & (1u << gang)))
        tj_errors_add(errs, "spec.scheduling.gang: %s is not enabled in this operator (Helm value "
                      "scheduling.%s.enabled, flag --gang-schedulers)%s", tj_gang_name(gang), tj_gang_name(gang),
                      s->scheduling.gang == TJ_GANG_DEFAULT ? " and it is the operator's default" : "");
    else if (s->scheduling.gang == TJ_GANG_DEFAULT) /* a given gang was checked by tj_spec_validate */
        tj_scheduling_check(s, gang, "spec", errs);
    return errs->count == before ? 0 : -1;
}

static const char *scheduler_name(const struct tj_spec *s, enum tj_gang gang, const struct controller_gang *g)
{
    if (s->scheduling.scheduler_name[0])
        return s->scheduling.scheduler_name;
    if (gang == TJ_GANG_VOLCANO)
        return g->volcano_scheduler && *g->volcano_scheduler ? g->volcano_scheduler : DEFAULT_VOLCANO_SCHEDULER;
    return g->cosched_scheduler && *g->cosched_scheduler ? g->cosched_scheduler : DEFAULT_COSCHED_SCHEDULER;
}

cJSON *controller_build_gang_pod(const cJSON *job, const struct tj_spec *s, int index,
                                 const char *coordinator_url, const char *default_image,
                                 const struct controller_gang *g, herr *e)
{
    cJSON *pod = controller_build_pod(job, s, index, coordinator_url, default_image, e);
    if (!pod)
        return NULL;
    enum tj_gang gang = controller_gang_of(s, g);
    const char *name = json_str_at(job, "metadata.name");
    cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    cJSON *labels = json_child_object(md, "labels"), *ann = json_child_object(md, "annotations");
    cJSON *spec = json_child_object(pod, "spec");
    if (!labels || !ann || !spec) {
        cJSON_Delete(pod);
        herr_set(e, "out of memory");
        return NULL;
    }
    char count[16];
    snprintf(count, sizeof count, "%d", s->workers);
    switch (gang) {
    case TJ_GANG_KUEUE:
        json_set_str(labels, KUEUE_QUEUE_LABEL, s->scheduling.queue);
        json_set_str(labels, KUEUE_GROUP_LABEL, name);
        json_set_str(ann, KUEUE_COUNT_ANN, count);
        break;
    case TJ_GANG_VOLCANO:
        json_set_str(ann, VOLCANO_GROUP_ANN, name);
        json_set_str(spec, "schedulerName", scheduler_name(s, gang, g));
        break;
    case TJ_GANG_COSCHEDULING:
        json_set_str(labels, COSCHED_GROUP_LABEL, name);
        json_set_str(spec, "schedulerName", scheduler_name(s, gang, g));
        break;
    default:
        break;
    }
    return pod;
}

const struct kube_resource *ctl_podgroup_resource(enum tj_gang gang)
{
    return gang == TJ_GANG_VOLCANO ? &CTL_VOLCANO_PODGROUPS
         : gang == TJ_GANG_COSCHEDULING ? &CTL_COSCHED_PODGROUPS : NULL;
}

cJSON *controller_build_podgroup(const cJSON *job, const struct tj_spec *s, const struct controller_gang *g)
{
    enum tj_gang gang = controller_gang_of(s, g);
    const struct kube_resource *res = ctl_podgroup_resource(gang);
    if (!res)
        return NULL;
    cJSON *pg = ctl_base_object(job, json_str_at(job, "metadata.name"));
    cJSON *spec = pg ? cJSON_AddObjectToObject(pg, "spec") : NULL;
    if (!spec) {
        cJSON_Delete(pg);
        return NULL;
    }
    char api[128];
    snprintf(api, sizeof api, "%s/%s", res->group, res->version);
    int ok = cJSON_AddStringToObject(pg, "apiVersion", api) && cJSON_AddStringToObject(pg, "kind", res->kind) &&
             cJSON_AddNumberToObject(spec, "minMember", s->workers);
    /* What the whole gang asks of the queue: its GPUs (CPU workers leave it to the template). */
    if (ok && tj_real_gpus(s)) {
        char gpus[32];
        snprintf(gpus, sizeof gpus, "%lld", (long long)s->workers * s->gpus_per_worker);
        cJSON *mr = cJSON_AddObjectToObject(spec, "minResources");
        ok = mr && cJSON_AddStringToObject(mr, "nvidia.com/gpu", gpus);
    }
    if (ok && gang == TJ_GANG_VOLCANO) {
        const char *prio = json_str_at(job, "spec.template.spec.priorityClassName");
        if (s->scheduling.queue[0])
            ok = cJSON_AddStringToObject(spec, "queue", s->scheduling.queue) != NULL;
        if (ok && prio)
            ok = cJSON_AddStringToObject(spec, "priorityClassName", prio) != NULL;
    } else if (ok) {
        int timeout = s->scheduling.schedule_timeout_seconds ? s->scheduling.schedule_timeout_seconds
                                                             : s->gang_timeout_seconds;
        ok = cJSON_AddNumberToObject(spec, "scheduleTimeoutSeconds", timeout) != NULL;
    }
    if (!ok) {
        cJSON_Delete(pg);
        return NULL;
    }
    return pg;
}

int controller_pods_gated(const cJSON *pods)
{
    int n = 0;
    const cJSON *p, *gate;
    cJSON_ArrayForEach(p, pods) {
        cJSON_ArrayForEach(gate, json_at(p, "spec.schedulingGates")) {
            const char *gn = json_str_at(gate, "name");
            if (gn && !strcmp(gn, KUEUE_ADMISSION_GATE)) {
                n++;
                break;
            }
        }
    }
    return n;
}
