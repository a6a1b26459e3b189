/* The controller's work queue and lifecycle, and the reconcile of one job: its spec checked,
 * its Secret, Service and PodGroup ensured, its pods (controller_pods.c) and status
 * (controller_status.c) brought to what the spec and the coordinator's feed say. */
#include "controller_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "kube_events.h"
#include "kube_informer.h"
#include "kube_map.h"
#include "kube_queue.h"
#include "log.h"
#include "tls_keeper.h"
#include "trainingjob.h"

/* ---- reconcile */

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
            rc = ctl_call_patch(r->c, API_PATCH_SECRET, r->ns, name, patch, NULL, e);
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
    int rc = ctl_call_delete(r->c, del, r->ns, r->name, e);
    return rc == 404 ? 0 : rc;
}

/* spec.ttlSecondsAfterFinished: a finished job is deleted this long after its completionTime, its
 * pods, Secret and Service with it (owner references: the garbage collector); until then the
 * reconcile comes back when it is due. 0, or the API's answer with e. */
static int ttl_after_finished(struct reconcile *r, herr *e)
{
    int ttl = r->tj.spec.ttl_after_finished_s;
    if (ttl < 0)
        return 0;
    if (kube_time_parse(json_str_at(r->st, "completionTime")) < 0) /* absent or not a time: */
        json_set_str(r->st, "completionTime", r->now);               /* counted from now on */
    const char *done = json_str_at(r->st, "completionTime");
    double t_done = kube_time_parse(done);
    if (t_done < 0)
        return 0;
    double left = t_done + ttl - clock_wall_s();
    if (left > 0) {
        r->requeue_s = left + 0.05;
        return 0;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "finished at %s; spec.ttlSecondsAfterFinished %d has passed: the job, "
             "its pods, Secret and Service are deleted", done, ttl);
    int rc = ctl_call_delete(r->c, API_DELETE_JOB, r->ns, r->name, e);
    if (rc == 0 || rc == 404) {
        if (rc == 0) {
            log_info("job %s/%s: %s", r->ns, r->name, msg);
            ctl_emit(r->c, r->job, "Normal", "Deleted", msg);
        }
        r->deleted = 1;
        return 0;
    }
    return rc;
}

/* spec.activeDeadlineSeconds: a job not finished that long after status.startTime fails
 * (DeadlineExceeded) and its pods are deleted, so that their workers checkpoint on SIGTERM as on
 * preemption; before that, *due is the seconds left. 1 when the deadline has passed. */
static int deadline_passed(struct reconcile *r, const cJSON *pods, double *due, int *rc, herr *e)
{
    int dl = r->tj.spec.active_deadline_s;
    const char *since = json_str_at(r->st, "startTime");
    double t0 = kube_time_parse(since);
    if (dl <= 0 || t0 < 0)
        return 0;
    double left = t0 + dl - clock_wall_s();
    if (left > 0) {
        *due = left + 0.05;
        return 0;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "running since %s, longer than spec.activeDeadlineSeconds %d: the job "
             "failed and its pods are deleted (their workers checkpoint on SIGTERM)", since, dl);
    *rc = ctl_delete_pods(r->c, r->memo, pods, 0, e);
    if (*rc != 0)
        return 1; /* not failed yet: Failed is final, the next try deletes the pods first */
    ctl_set_workers_ready(r->st, 0);
    ctl_set_phase(r, "Failed");
    json_set_str(r->st, "message", msg);
    if (!json_at(r->st, "completionTime"))
        json_set_str(r->st, "completionTime", r->now);
    if (ctl_set_condition(r->st, "Failed", 1, "DeadlineExceeded", msg, r->now))
        ctl_emit(r->c, r->job, "Warning", "DeadlineExceeded", msg);
    return 1;
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
    const char *before = ctl_condition_message(r->old, "Valid");
    if (ctl_set_condition(r->st, "Valid", 0, "InvalidSpec", msg, r->now) || !before)
        ctl_emit(r->c, r->job, "Warning", "InvalidSpec", msg);
    if (!phase)
        ctl_set_phase(r, "Pending");
    return 1;
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
            ctl_emit(r->c, r->job, "Warning", "ImmutableFieldChanged", msg);
    }
    free(hash);
    return refused;
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
    cJSON *pods = ctl_live_pods(r);
    if (!pods)
        return herr_set(e, "out of memory");
    int rc = 0;
    if (refuse_immutable_change(r, pods))
        goto out;
    ctl_set_condition(r->st, "Valid", 1, "SpecValid", "the spec passed validation", r->now);
    if (ctl_is_phase(phase, "Succeeded") || ctl_is_phase(phase, "Failed")) {
        rc = ttl_after_finished(r, e); /* terminal: only the clean-up is left */
        goto out;
    }

    if ((rc = ensure_secret(r, e)) != 0 ||
        (rc = ensure_owned(r, INF_SERVICES, API_CREATE_SERVICE, r->name, ctl_build_service, e)) != 0)
        goto out;

    if ((rc = ensure_podgroup(r, e)) != 0)
        goto out;

    json_set_num(json_child_object(r->st, "workers"), "total", workers);
    if (r->tj.spec.suspend) {
        rc = ctl_delete_pods(c, r->memo, pods, 0, e);
        if (rc == 0)
            rc = delete_podgroup(r, e);
        ctl_set_workers_ready(r->st, 0);
        if (!ctl_is_phase(phase, "Suspended"))
            ctl_emit(c, job, "Normal", "Suspended", "spec.suspend is true: worker pods deleted");
        ctl_set_phase(r, "Suspended");
        ctl_set_condition(r->st, "PodsReady", 0, "Suspended", "the job is suspended", r->now);
        goto out;
    }
    double due = 0;
    if (deadline_passed(r, pods, &due, &rc, e)) {
        if (rc == 0)
            rc = delete_podgroup(r, e);
        goto out;
    }
    if (ctl_replace_failed(r, pods, &rc, e) && rc)
        goto out;
    char *lost = calloc((size_t)workers + 1, 1);
    if (!lost) {
        rc = herr_set(e, "out of memory");
        goto out;
    }
    int nlost = ctl_lost_workers(r, workers, lost);
    rc = ctl_create_missing(r, pods, workers, lost, e);
    ctl_status_from_pods(r, pods, workers, lost, nlost, phase);
    free(lost);
    if (due > 0 && (r->requeue_s <= 0 || due < r->requeue_s))
        r->requeue_s = due; /* back when the deadline comes */
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
    /* The cache lags behind our own status writes: until it holds the version our last write
     * made, what that write left is the status to start from (a copy: a reconcile that writes
     * nothing keeps the memo), and that version is the precondition of this one's write. When
     * someone else wrote since, the precondition fails (409) and the memo is dropped. */
    const char *rv = kube_meta_str(job, "resourceVersion");
    char base_rv[64];
    snprintf(base_rv, sizeof base_rv, "%s", rv ? rv : "");
    if (m->status && rv && strcmp(rv, m->written_rv) != 0) {
        cJSON *memo_st = cJSON_Duplicate(m->status, 1);
        if (memo_st) {
            cJSON_DeleteItemFromObjectCaseSensitive(job, "status");
            cJSON_AddItemToObject(job, "status", memo_st);
            snprintf(base_rv, sizeof base_rv, "%s", m->written_rv);
        }
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
    if (r.st && r.deleted) {
        wrc = 0; /* nothing to write to */
    } else if (r.st) {
        wrc = ctl_write_status(c, job, base_rv, old, r.st, m, &we);
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
        if (rc == 409) { /* the status write's precondition: the job moved on, read again */
            atomic_fetch_add(&c->status_conflicts, 1);
            double d = kube_queue_add_rate_limited(c->queue, key);
            log_debug("reconcile %s: the job changed since it was read (retry in %.2fs)", key, d);
        } else if (rc != 0) {
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

