/* The pods of a job: read from the cache, deleted, replaced when failed, created when missing,
 * and what they say of the job's status. */
#include "controller_impl.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json.h"

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

const cJSON *pod_condition(const cJSON *pod, const char *type)
{
    return ctl_find_condition(json_at(pod, "status.conditions"), type);
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

int ctl_delete_pods(struct controller *c, struct memo *m, const cJSON *pods, int only_active,
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
        int r = ctl_call_delete(c, API_DELETE_POD, kube_meta_str(p, "namespace"), kube_meta_str(p, "name"), e);
        if (r != 0 && r != 404)
            rc = r;
        else if (m)
            ctl_memo_mark(m->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
    }
    return rc;
}

/* The job's pods as this controller knows them: the cache, less the pods it deleted. */
cJSON *ctl_live_pods(struct reconcile *r)
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

/* A failed or evicted pod is replaced, alone: its worker's supervisor gave up, or the pod or
 * its node is gone. The other pods keep running; the coordinator restarts the gang in place
 * and is the one that counts restarts (status.restarts) and fails the job when they are spent.
 * A pod is replaced no sooner than spec.restartPolicy.backoffSeconds after it was created, so a
 * pod that fails at start is replaced at that rate at most. 1 when a pod had failed. */
int ctl_replace_failed(struct reconcile *r, const cJSON *pods, int *rc, herr *e)
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
        int d = ctl_call_delete(c, API_DELETE_POD, kube_meta_str(p, "namespace"), kube_meta_str(p, "name"), e);
        if (d != 0 && d != 404) {
            *rc = d;
            continue;
        }
        ctl_memo_mark(r->memo->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
        ctl_emit(c, job, "Warning", "PodReplaced", msg);
        atomic_fetch_add(&c->pod_replacements, 1);
    }
    return any;
}

/* spec.elastic: the workers the coordinator counted as lost (status.elastic.lostWorkers, their
 * pod names) into lost[0..workers); their count. 0 for a job that is not elastic. */
int ctl_lost_workers(const struct reconcile *r, int workers, char *lost)
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
int ctl_create_missing(struct reconcile *r, const cJSON *pods, int workers, const char *lost,
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
                int d = ctl_call_delete(c, API_DELETE_POD, r->ns, kube_meta_str(p, "name"), e);
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
        ctl_emit(c, job, "Normal", "PodsCreated", "created the worker pods");

    if (pending_creates)
        r->requeue_s = 1; /* look again if the cache has not shown them by then */

    return rc;
}

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
        int i = pod_index(p);
        if (i < 0 || i >= all || lost[i] || json_at(p, "metadata.deletionTimestamp"))
            continue;
        const char *ph = json_str_at(p, "status.phase");
        if (ctl_is_phase(ph, "Succeeded"))
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
            int i = pod_index(p);
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

