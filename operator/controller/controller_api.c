/* Metrics, and the API the coordinator calls: status and conditions, pod labels, events, the
 * job's pods and token. Every call reads the informer caches and is thread-safe. */
#include "controller_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "json.h"
#include "base64.h"
#include "kube_events.h"

/* ---- metrics */

#define N_PHASES 8 /* the phases below, "Unknown" (anything else) after them */
struct phase_count {
    const char *names[N_PHASES + 1];
    unsigned long n[N_PHASES + 1];
};

static int count_phase(const cJSON *job, void *user)
{
    struct phase_count *pc = user;
    const char *ph = json_str_at(job, "status.phase");
    if (!ph)
        ph = "Pending";
    for (int i = 0; i <= N_PHASES; i++)
        if (!strcmp(pc->names[i], ph)) {
            pc->n[i]++;
            break;
        }
    return 0;
}

/* holmes_job_phase: each job's phase (one series at 1 per job), so an alert can hold on how
 * long a job stays in one. */
static int job_phase(const cJSON *job, void *user)
{
    const char *ph = json_str_at(job, "status.phase");
    metrics_printf(user, "holmes_job_phase{namespace=\"%s\",job=\"%s\",phase=\"%s\"} 1\n",
                   json_str_at(job, "metadata.namespace") ? json_str_at(job, "metadata.namespace") : "",
                   json_str_at(job, "metadata.name") ? json_str_at(job, "metadata.name") : "",
                   ph ? ph : "Pending");
    return 0;
}

struct summaries {
    cJSON *jobs;
    int oom;
};

/* One job's summary added to the page's list; out of memory: 1 (stop), oom set. */
static int job_summary(const cJSON *job, void *user)
{
    struct summaries *sm = user;
    sm->oom = 1;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(sm->jobs, o)) {
        cJSON_Delete(o);
        return 1;
    }
    const char *ns = json_str_at(job, "metadata.namespace"), *name = json_str_at(job, "metadata.name");
    const char *ph = json_str_at(job, "status.phase"), *msg = json_str_at(job, "status.message");
    const cJSON *r = json_at(job, "status.restarts");
    if (!cJSON_AddStringToObject(o, "namespace", ns ? ns : "") ||
        !cJSON_AddStringToObject(o, "name", name ? name : "") ||
        !cJSON_AddStringToObject(o, "phase", ph ? ph : "Pending") ||
        !cJSON_AddStringToObject(o, "message", msg ? msg : "") ||
        !cJSON_AddNumberToObject(o, "restarts", cJSON_IsNumber(r) ? r->valuedouble : 0))
        return 1;
    static const char *const keys[] = {"conditions", "plan"};
    static const char *const paths[] = {"status.conditions", "status.plan"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = json_at(job, paths[k]);
        cJSON *copy = v ? cJSON_Duplicate(v, 1) : k == 0 ? cJSON_CreateArray() : cJSON_CreateNull();
        if (!copy || !cJSON_AddItemToObject(o, keys[k], copy)) {
            cJSON_Delete(copy);
            return 1;
        }
    }
    sm->oom = 0;
    return 0;
}

cJSON *controller_jobs_json(struct controller *c)
{
    struct summaries sm = {cJSON_CreateArray(), 0};
    if (sm.jobs)
        kube_informer_each(c->inf[INF_JOBS], job_summary, &sm);
    if (sm.oom) {
        cJSON_Delete(sm.jobs);
        return NULL;
    }
    return sm.jobs;
}

static void put_error(int code, unsigned long n, void *user)
{
    metrics_printf(user, "holmes_api_errors_total{code=\"%d\"} %lu\n", code, n);
}

void controller_metrics(struct controller *c, struct metrics_buf *b)
{
    struct phase_count pc = {{"Pending", "Queued", "Discovering", "Planning", "Running",
                              "Succeeded", "Failed", "Suspended", "Unknown"}, {0}};
    kube_informer_each(c->inf[INF_JOBS], count_phase, &pc);
    metrics_printf(b, "# HELP holmes_jobs TrainingJobs by phase.\n# TYPE holmes_jobs gauge\n");
    for (int i = 0; i < N_PHASES; i++)
        metrics_printf(b, "holmes_jobs{phase=\"%s\"} %lu\n", pc.names[i], pc.n[i]);
    metrics_printf(b, "# HELP holmes_job_phase Each TrainingJob's phase (1).\n"
                      "# TYPE holmes_job_phase gauge\n");
    kube_informer_each(c->inf[INF_JOBS], job_phase, b);
    metrics_printf(b, "# HELP holmes_reconciles_total Reconciles run.\n# TYPE holmes_reconciles_total counter\n"
                      "holmes_reconciles_total %lu\n", atomic_load(&c->reconciles));
    metrics_printf(b, "# HELP holmes_reconcile_errors_total Reconciles that failed.\n"
                      "# TYPE holmes_reconcile_errors_total counter\nholmes_reconcile_errors_total %lu\n",
                   atomic_load(&c->reconcile_errors));
    metrics_printf(b, "# HELP holmes_status_conflicts_total Status writes refused because the job "
                      "changed since the reconcile read it (read again and retried).\n"
                      "# TYPE holmes_status_conflicts_total counter\nholmes_status_conflicts_total %lu\n",
                   atomic_load(&c->status_conflicts));
    metrics_hist_render(&c->latency, b, "holmes_reconcile_duration_seconds", "Reconcile latency.");
    metrics_printf(b, "# HELP holmes_reconcile_latency_seconds Reconcile latency quantiles "
                      "(from 7.5%%-wide buckets).\n# TYPE holmes_reconcile_latency_seconds gauge\n");
    static const double qs[] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3; i++)
        metrics_printf(b, "holmes_reconcile_latency_seconds{quantile=\"%g\"} %.6f\n", qs[i],
                       metrics_hist_quantile(&c->latency, qs[i]));
    metrics_printf(b, "# HELP holmes_reconcile_own_latency_seconds Reconcile latency without the "
                      "time spent waiting for API answers.\n"
                      "# TYPE holmes_reconcile_own_latency_seconds gauge\n");
    for (int i = 0; i < 3; i++)
        metrics_printf(b, "holmes_reconcile_own_latency_seconds{quantile=\"%g\"} %.6f\n", qs[i],
                       metrics_hist_quantile(&c->own_latency, qs[i]));
    metrics_printf(b, "# HELP holmes_api_errors_total Kubernetes API errors by HTTP status (0: no answer).\n"
                      "# TYPE holmes_api_errors_total counter\n");
    kube_client_error_counts(c->kc, put_error, b);
    metrics_printf(b, "# HELP holmes_api_requests_total Kubernetes API requests sent.\n"
                      "# TYPE holmes_api_requests_total counter\nholmes_api_requests_total %lu\n",
                   kube_client_request_count(c->kc));
    metrics_hist_render(kube_client_latency(c->kc), b, "holmes_api_request_duration_seconds",
                        "Kubernetes API request latency (sent until answered).");
    metrics_printf(b, "# HELP holmes_api_request_latency_seconds API request latency quantiles "
                      "(from 7.5%%-wide buckets).\n# TYPE holmes_api_request_latency_seconds gauge\n");
    for (int i = 0; i < 3; i++)
        metrics_printf(b, "holmes_api_request_latency_seconds{quantile=\"%g\"} %.6f\n", qs[i],
                       metrics_hist_quantile(kube_client_latency(c->kc), qs[i]));
    metrics_printf(b, "# HELP holmes_api_throttled_seconds_total Time spent waiting for the "
                      "client-side rate limiter.\n# TYPE holmes_api_throttled_seconds_total counter\n"
                      "holmes_api_throttled_seconds_total %.6f\n", kube_client_throttled_seconds(c->kc));
    metrics_printf(b, "# HELP holmes_pod_replacements_total Failed or evicted worker pods replaced.\n"
                      "# TYPE holmes_pod_replacements_total counter\nholmes_pod_replacements_total %lu\n",
                   atomic_load(&c->pod_replacements));
    metrics_printf(b, "# HELP holmes_pods_created_total Worker pods created.\n"
                      "# TYPE holmes_pods_created_total counter\nholmes_pods_created_total %lu\n",
                   atomic_load(&c->pods_created));
    metrics_printf(b, "# HELP holmes_status_writes_total Status patches written.\n"
                      "# TYPE holmes_status_writes_total counter\nholmes_status_writes_total %lu\n",
                   atomic_load(&c->status_writes));
    struct kube_recorder_counts ec;
    kube_recorder_counts(c->events, &ec);
    metrics_printf(b, "# HELP holmes_events_total Events by outcome: created, patched (a repeat "
                      "counted on the Event it repeats), dropped (spam filter or full queue), "
                      "failed.\n# TYPE holmes_events_total counter\n"
                      "holmes_events_total{outcome=\"created\"} %lu\n"
                      "holmes_events_total{outcome=\"patched\"} %lu\n"
                      "holmes_events_total{outcome=\"dropped\"} %lu\n"
                      "holmes_events_total{outcome=\"failed\"} %lu\n",
                   ec.created, ec.patched, ec.dropped_spam + ec.dropped_full, ec.failed);
}

double controller_latency_quantile(struct controller *c, double q)
{
    return metrics_hist_quantile(&c->latency, q);
}

unsigned long controller_reconciles(struct controller *c) { return atomic_load(&c->reconciles); }

/* ---- coordinator API */

/* The coordinator's status feed. The controller is the one writer of a job's status: what the
 * coordinator reports waits here, merged, until the job's next reconcile takes it into the
 * status it writes (ctl_feed_take). A feed is {"fields": merge patch, "conditions": [...]}. */
static cJSON *feed_new(void)
{
    cJSON *f = cJSON_CreateObject();
    if (f && (!cJSON_AddObjectToObject(f, "fields") || !cJSON_AddArrayToObject(f, "conditions"))) {
        cJSON_Delete(f);
        return NULL;
    }
    return f;
}

/* Runs add(feed, a cleaned copy of arg) on the job's feed (made when absent) under the lock, then
 * queues the job. Messages made of others cut to a buffer's size can end inside a character: what
 * enters the status is well-formed UTF-8 without control characters, as Events and the history
 * are (a server may refuse the write, and the feed would keep the bytes). */
static int feed_update(struct controller *c, const char *ns, const char *job,
                       int (*add)(cJSON *feed, const void *arg), const cJSON *arg, herr *e)
{
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns, job);
    cJSON *clean = cJSON_Duplicate(arg, 1);
    if (!clean)
        return herr_set(e, "status of %s: out of memory", key);
    json_clean_strings(clean);
    pthread_mutex_lock(&c->feed_lock);
    cJSON *f = kube_map_get(c->feeds, key);
    int made = 0, rc = 0;
    if (!f) {
        f = feed_new();
        made = f != NULL;
    }
    if (!f || add(f, clean) != 0 || (made && kube_map_put(c->feeds, key, f, NULL) != 0)) {
        if (made)
            cJSON_Delete(f);
        rc = herr_set(e, "status of %s: out of memory", key);
    }
    pthread_mutex_unlock(&c->feed_lock);
    cJSON_Delete(clean);
    if (rc == 0)
        kube_queue_add(c->queue, key);
    return rc;
}

static int add_fields(cJSON *feed, const void *arg)
{
    return json_merge_patch(cJSON_GetObjectItemCaseSensitive(feed, "fields"), arg, 1);
}

int controller_patch_job_status(struct controller *c, const char *ns, const char *job,
                                const cJSON *fields, herr *e)
{
    return feed_update(c, ns, job, add_fields, fields, e);
}

static int add_condition(cJSON *feed, const void *arg)
{
    const cJSON *cond = arg;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(feed, "conditions"), *it;
    const char *type = json_str_at(cond, "type");
    cJSON_ArrayForEach(it, list) {
        const char *t = json_str_at(it, "type");
        if (t && type && !strcmp(t, type)) {
            cJSON *v = cJSON_Duplicate(cond, 1);
            return v && cJSON_ReplaceItemViaPointer(list, it, v) ? 0 : -1;
        }
    }
    cJSON *v = cJSON_Duplicate(cond, 1);
    return v && cJSON_AddItemToArray(list, v) ? 0 : -1;
}

int controller_set_job_condition(struct controller *c, const char *ns, const char *job,
                                 const char *type, int ok, const char *reason,
                                 const char *message, herr *e)
{
    cJSON *cond = cJSON_CreateObject();
    if (!cond || !cJSON_AddStringToObject(cond, "type", type) ||
        !cJSON_AddBoolToObject(cond, "ok", ok) ||
        !cJSON_AddStringToObject(cond, "reason", reason ? reason : "") ||
        !cJSON_AddStringToObject(cond, "message", message ? message : "")) {
        cJSON_Delete(cond);
        return herr_set(e, "condition %s: out of memory", type);
    }
    int rc = feed_update(c, ns, job, add_condition, cond, e);
    cJSON_Delete(cond);
    return rc;
}

cJSON *ctl_feed_take(struct controller *c, const char *key)
{
    pthread_mutex_lock(&c->feed_lock);
    cJSON *f = kube_map_remove(c->feeds, key);
    pthread_mutex_unlock(&c->feed_lock);
    return f;
}

void ctl_feed_apply(const cJSON *feed, cJSON *status, const char *now)
{
    const cJSON *it, *fields = cJSON_GetObjectItemCaseSensitive(feed, "fields");
    /* Succeeded and Failed are final: a report that comes after (a progress line still on its
     * way when the pods finished) keeps its other fields but not its phase */
    const char *was = json_str_at(status, "phase");
    cJSON *kept = NULL;
    if ((ctl_is_phase(was, "Succeeded") || ctl_is_phase(was, "Failed")) &&
        cJSON_GetObjectItemCaseSensitive(fields, "phase")) {
        kept = cJSON_Duplicate(fields, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(kept, "phase");
        fields = kept;
    }
    json_merge_patch(status, fields, 0);
    cJSON_Delete(kept);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(feed, "conditions"))
        ctl_set_condition(status, json_str_at(it, "type"), cJSON_IsTrue(cJSON_GetObjectItem(it, "ok")),
                          json_str_at(it, "reason"), json_str_at(it, "message"), now);
}

void ctl_feed_return(struct controller *c, const char *key, cJSON *feed)
{
    if (!feed)
        return;
    /* What came meanwhile is newer: it goes on top of what is returned. */
    pthread_mutex_lock(&c->feed_lock);
    cJSON *newer = kube_map_remove(c->feeds, key);
    if (newer) {
        json_merge_patch(cJSON_GetObjectItemCaseSensitive(feed, "fields"),
                         cJSON_GetObjectItemCaseSensitive(newer, "fields"), 1);
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(newer, "conditions"))
            add_condition(feed, it);
        cJSON_Delete(newer);
    }
    if (kube_map_put(c->feeds, key, feed, NULL) != 0)
        cJSON_Delete(feed);
    pthread_mutex_unlock(&c->feed_lock);
}

cJSON *controller_merge_condition(const cJSON *status, const char *type, int ok,
                                  const char *reason, const char *message, const char *now,
                                  int *changed)
{
    cJSON *st = cJSON_CreateObject();
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    cJSON *conds = cJSON_IsArray(old) ? cJSON_Duplicate(old, 1) : cJSON_CreateArray();
    if (!st || !conds || !cJSON_AddItemToObject(st, "conditions", conds)) {
        cJSON_Delete(st);
        cJSON_Delete(conds);
        return NULL;
    }
    *changed = ctl_set_condition(st, type, ok, reason, message ? message : "", now);
    return st;
}

int controller_patch_pod_labels(struct controller *c, const char *ns, const char *pod,
                                const cJSON *labels, herr *e)
{
    cJSON *patch = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(patch, "metadata");
    if (!md || !cJSON_AddItemToObject(md, "labels", cJSON_Duplicate(labels, 1))) {
        cJSON_Delete(patch);
        return herr_set(e, "out of memory");
    }
    int rc = ctl_call_patch(c, API_PATCH_POD, ns, pod, patch, NULL, e);
    cJSON_Delete(patch);
    return rc;
}

int controller_emit_event(struct controller *c, const char *ns, const char *job,
                          const char *type, const char *reason, const char *message, herr *e)
{
    cJSON *j = kube_informer_get(c->inf[INF_JOBS], ns, job);
    if (!j)
        return herr_set(e, "event %s: no TrainingJob %s/%s in the cache", reason, ns, job);
    /* LIST items may come without apiVersion and kind. */
    if (!cJSON_GetObjectItem(j, "apiVersion"))
        cJSON_AddStringToObject(j, "apiVersion", JOB_API_VERSION);
    if (!cJSON_GetObjectItem(j, "kind"))
        cJSON_AddStringToObject(j, "kind", "TrainingJob");
    cJSON *ev = kube_event_build(j, type, reason, message, "holmes-operator");
    cJSON_Delete(j);
    if (!ev)
        return herr_set(e, "out of memory");
    return kube_recorder_send(c->events, ev, e);
}

cJSON *controller_get_job(struct controller *c, const char *ns, const char *job)
{
    return kube_informer_get(c->inf[INF_JOBS], ns, job);
}

cJSON *controller_job_pods(struct controller *c, const char *ns, const char *job)
{
    cJSON *j = kube_informer_get(c->inf[INF_JOBS], ns, job);
    const char *uid = j ? json_str_at(j, "metadata.uid") : NULL;
    cJSON *pods = ctl_pods_of(c, ns, job, uid);
    cJSON_Delete(j);
    return pods;
}

char *controller_job_token(struct controller *c, const char *ns, const char *job)
{
    char name[300];
    snprintf(name, sizeof name, "%s-token", job);
    cJSON *s = kube_informer_get(c->inf[INF_SECRETS], ns, name);
    if (!s)
        return NULL;
    char *out = NULL;
    const char *plain = json_str_at(s, "stringData.token");
    const char *b64 = json_str_at(s, "data.token");
    if (b64) {
        herr e = {0};
        out = base64_decode(b64, NULL, "data.token", &e);
    } else if (plain) {
        out = strdup(plain);
    }
    cJSON_Delete(s);
    return out;
}

int controller_node_state(struct controller *c, const char *node, herr *e)
{
    cJSON *obj = NULL;
    int rc = kube_get(c->kc, controller_api_calls[API_GET_NODE].res, NULL, node, &obj, e);
    if (rc == 404) {
        cJSON_Delete(obj);
        return 2;
    }
    if (rc != 0) {
        cJSON_Delete(obj);
        return herr_wrap(e, "node %s", node);
    }
    int ready = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, json_at(obj, "status.conditions")) {
        const char *t = json_str_at(it, "type"), *st = json_str_at(it, "status");
        if (t && !strcmp(t, "Ready"))
            ready = st && !strcmp(st, "True");
    }
    cJSON_Delete(obj);
    return ready;
}

int controller_delete_pod(struct controller *c, const char *ns, const char *pod, herr *e)
{
    /* at once: no kubelet confirms it (the node is gone, NotReady, or there is none) */
    int rc = kube_delete_grace(c->kc, controller_api_calls[API_DELETE_POD].res, ns, pod,
                               "Background", 0, e);
    return rc == 404 ? 0 : rc;
}
