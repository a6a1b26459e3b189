/* A job's status as the reconcile writes it: conditions, phase, workers ready, the status from
 * the job's pods, and the one status patch of a reconcile. */
#include "controller_impl.h"

#include <string.h>

#include "clock.h"
#include "json.h"

/* The condition of `type` in a conditions array (NULL when absent or not an array). */
cJSON *ctl_find_condition(const cJSON *conds, const char *type)
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
    cJSON *cnd = ctl_find_condition(conds, type);
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

const char *ctl_condition_message(const cJSON *status, const char *type)
{
    const cJSON *c = ctl_find_condition(cJSON_GetObjectItemCaseSensitive(status, "conditions"), type);
    return c ? json_str_at(c, "message") : NULL;
}

/* 1 when status holds condition `type` with `reason`. */
int ctl_condition_is(const cJSON *status, const char *type, const char *reason)
{
    const cJSON *c = ctl_find_condition(cJSON_GetObjectItemCaseSensitive(status, "conditions"), type);
    const char *r = c ? json_str_at(c, "reason") : NULL;
    return r && !strcmp(r, reason);
}

/* Patches status with the top-level fields that differ from old. */
int ctl_write_status(struct controller *c, const cJSON *job, const cJSON *old, const cJSON *st,
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

/* status.workers: ready, total, and "ready/total" for the printer column of `kubectl get tj`. */
void ctl_set_workers_ready(cJSON *st, int ready)
{
    cJSON *w = json_child_object(st, "workers");
    cJSON *total = cJSON_GetObjectItem(w, "total");
    char summary[48];
    snprintf(summary, sizeof summary, "%d/%d", ready, cJSON_IsNumber(total) ? total->valueint : 0);
    json_set_num(w, "ready", ready);
    json_set_str(w, "summary", summary);
}

void ctl_set_phase(struct reconcile *r, const char *phase)
{
    json_set_str(r->st, "phase", phase);
}

int ctl_is_phase(const char *p, const char *want) { return p && !strcmp(p, want); }

/* Status from the pods: readiness, scheduling (and the gang timeout), completion. The pods of
 * an elastic job's lost workers count for none of it: the job trains without them. */
void ctl_status_from_pods(struct reconcile *r, const cJSON *pods, int all, const char *lost,
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
        int i = ctl_pod_index(p);
        if (i < 0 || i >= all || lost[i] || json_at(p, "metadata.deletionTimestamp"))
            continue;
        const char *ph = json_str_at(p, "status.phase");
        if (ctl_is_phase(ph, "Succeeded"))
            succeeded++;
        if (ctl_pod_condition_true(p, "Ready"))
            ready++;
        if (ctl_pod_condition_true(p, "PodScheduled") || json_str_at(p, "spec.nodeName"))
            scheduled++;
        const cJSON *ps = ctl_pod_condition(p, "PodScheduled");
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
    ctl_set_workers_ready(r->st, ready);
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
            !ctl_condition_is(r->old, "PodsScheduled", "WaitingForAdmission"))
            ctl_emit(c, job, "Normal", "WaitingForAdmission", msg);
    } else if (oldest_unsched > 0 && clock_wall_s() - oldest_unsched >= gang) {
        snprintf(msg, sizeof msg, "pods %s unschedulable for more than %gs "
                 "(spec.gangTimeoutSeconds): %s", unsched_names, gang,
                 sched_msg[0] ? sched_msg : "no reason given");
        if (ctl_set_condition(r->st, "PodsScheduled", 0, "GangTimeout", msg, r->now))
            ctl_emit(c, job, "Warning", "GangTimeout", msg);
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
            int i = ctl_pod_index(p);
            herr de = {0};
            if (i >= 0 && i < all && lost[i] && !json_at(p, "metadata.deletionTimestamp") &&
                ctl_call_delete(c, API_DELETE_POD, r->ns, kube_meta_str(p, "name"), &de) == 0)
                ctl_memo_mark(r->memo->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
        }
        ctl_set_phase(r, "Succeeded");
        ctl_set_condition(r->st, "Complete", 1, "AllWorkersSucceeded", "every worker finished", r->now);
        if (!json_at(r->st, "completionTime"))
            json_set_str(r->st, "completionTime", r->now);
        ctl_emit(c, job, "Normal", "Succeeded", "every worker finished");
    } else if (ready == workers) {
        if (!phase || ctl_is_phase(phase, "Pending") || ctl_is_phase(phase, "Queued") ||
            ctl_is_phase(phase, "Suspended"))
            ctl_set_phase(r, "Discovering");
    } else {
        /* Queued: a gang scheduler (Kueue) holds the pods until it admits them all */
        ctl_set_phase(r, gated > 0 ? "Queued" : "Pending");
    }
}

