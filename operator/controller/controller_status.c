/* A job's status as the reconcile writes it: conditions, phase, workers ready, and the one
 * status patch of a reconcile. */
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
int ctl_write_status(struct controller *c, const cJSON *job, const char *base_rv, const cJSON *old,
                     const cJSON *st, struct memo *m, herr *e)
{
    /* Only what changed, removals included (a merge patch of the difference), and the
     * version it was computed from as the precondition. */
    cJSON *patch = cJSON_CreateObject(), *ps = json_merge_diff(old, st);
    cJSON *md = patch ? cJSON_AddObjectToObject(patch, "metadata") : NULL;
    if (!md || !ps || !cJSON_AddItemToObject(patch, "status", ps)) {
        cJSON_Delete(patch);
        cJSON_Delete(ps);
        return herr_set(e, "out of memory");
    }
    int rc = 0;
    if (ps->child) {
        if (base_rv && *base_rv && !cJSON_AddStringToObject(md, "resourceVersion", base_rv)) {
            cJSON_Delete(patch);
            return herr_set(e, "out of memory");
        }
        cJSON *out = NULL;
        rc = ctl_call_patch(c, API_PATCH_JOB_STATUS, json_str_at(job, "metadata.namespace"),
                            json_str_at(job, "metadata.name"), patch, &out, e);
        if (rc == 0) {
            atomic_fetch_add(&c->status_writes, 1);
            if (m) {
                const char *rv = kube_meta_str(out, "resourceVersion");
                snprintf(m->written_rv, sizeof m->written_rv, "%s", rv ? rv : "");
                cJSON_Delete(m->status);
                m->status = rv ? cJSON_Duplicate(st, 1) : NULL;
            }
        } else if (m) { /* moved on (409) or unknown: the next reconcile reads the cache */
            cJSON_Delete(m->status);
            m->status = NULL;
        }
        cJSON_Delete(out);
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
