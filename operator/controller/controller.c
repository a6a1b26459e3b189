#include "controller.h"

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
#include "trainingjob.h"

#define LABEL_JOB "holmes.dev/job"
#define LABEL_INDEX "holmes.dev/worker-index"
#define ANN_SPEC "holmes.dev/spec-hash"
#define JOB_API_VERSION "holmes.dev/v1alpha1"
#define MAX_WORKERS 4096
#define POD_GRACE_S 300 /* terminationGracePeriodSeconds unless the template sets it */

const struct api_call controller_api_calls[API_OP_COUNT] = {
    [API_LIST_JOBS] = {"list", &KUBE_TRAININGJOBS, NULL},
    [API_WATCH_JOBS] = {"watch", &KUBE_TRAININGJOBS, NULL},
    [API_PATCH_JOB_STATUS] = {"patch", &KUBE_TRAININGJOBS, "status"},
    [API_LIST_PODS] = {"list", &KUBE_PODS, NULL},
    [API_WATCH_PODS] = {"watch", &KUBE_PODS, NULL},
    [API_CREATE_POD] = {"create", &KUBE_PODS, NULL},
    [API_DELETE_POD] = {"delete", &KUBE_PODS, NULL},
    [API_PATCH_POD] = {"patch", &KUBE_PODS, NULL},
    [API_LIST_SECRETS] = {"list", &KUBE_SECRETS, NULL},
    [API_WATCH_SECRETS] = {"watch", &KUBE_SECRETS, NULL},
    [API_CREATE_SECRET] = {"create", &KUBE_SECRETS, NULL},
    [API_LIST_SERVICES] = {"list", &KUBE_SERVICES, NULL},
    [API_WATCH_SERVICES] = {"watch", &KUBE_SERVICES, NULL},
    [API_CREATE_SERVICE] = {"create", &KUBE_SERVICES, NULL},
    [API_CREATE_EVENT] = {"create", &KUBE_EVENTS, NULL},
    [API_PATCH_EVENT] = {"patch", &KUBE_EVENTS, NULL}, /* a repeat: count + 1 (kube_recorder.h) */
    [API_GET_LEASE] = {"get", &KUBE_LEASES, NULL},
    [API_CREATE_LEASE] = {"create", &KUBE_LEASES, NULL},
    [API_PATCH_LEASE] = {"patch", &KUBE_LEASES, NULL},
};

void controller_print_api_calls(FILE *f)
{
    for (int i = 0; i < API_OP_COUNT; i++) {
        const struct api_call *a = &controller_api_calls[i];
        fprintf(f, "%s %s %s%s%s\n", a->verb, a->res->group[0] ? a->res->group : "core",
                a->res->resource, a->sub ? "/" : "", a->sub ? a->sub : "");
    }
}

enum { INF_JOBS, INF_PODS, INF_SECRETS, INF_SERVICES, INF_COUNT };

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
    atomic_ulong reconciles, reconcile_errors, restarts, pods_created, status_writes;
    atomic_int stopping;
    pthread_mutex_t memo_lock;
    struct kube_map *memos; /* job key -> struct memo */
    struct kube_recorder *events; /* Events: aggregated, sent off the reconcile path */
};

/* ---- small JSON helpers */

static cJSON *obj_child(cJSON *o, const char *k)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsObject(c))
        return c;
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    return cJSON_AddObjectToObject(o, k);
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON *s = cJSON_CreateString(v);
    if (!s)
        return;
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, s);
    else
        cJSON_AddItemToObject(o, k, s);
}

static void set_num(cJSON *o, const char *k, double v)
{
    cJSON *s = cJSON_CreateNumber(v);
    if (!s)
        return;
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, s);
    else
        cJSON_AddItemToObject(o, k, s);
}

/* status.workers: ready, total, and "ready/total" for the printer column of `kubectl get tj`. */
static void set_workers_ready(cJSON *st, int ready)
{
    cJSON *w = obj_child(st, "workers");
    cJSON *total = cJSON_GetObjectItem(w, "total");
    char summary[48];
    snprintf(summary, sizeof summary, "%d/%d", ready, cJSON_IsNumber(total) ? total->valueint : 0);
    set_num(w, "ready", ready);
    set_str(w, "summary", summary);
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* ---- spec */

static void add_err(cJSON *errs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_err(cJSON *errs, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cJSON_AddItemToArray(errs, cJSON_CreateString(buf));
}

/* Every error of the spec module (common/trainingjob.h), each "field.path: rule". */
cJSON *controller_spec_errors(const cJSON *job)
{
    cJSON *errs = cJSON_CreateArray();
    struct tj_errors te;
    memset(&te, 0, sizeof te);
    struct tj_job tj;
    memset(&tj, 0, sizeof tj);
    if (!errs)
        return NULL;
    /* what the API accepts but this version cannot run is refused too, with its reason */
    if (tj_job_from_json(job, &tj, &te) == 0)
        tj_spec_runnable(&tj.spec, "spec", &te);
    int kept = te.count < TJ_MAX_ERRORS ? te.count : TJ_MAX_ERRORS;
    for (int i = 0; i < kept; i++)
        cJSON_AddItemToArray(errs, cJSON_CreateString(te.msg[i]));
    if (te.count > kept)
        add_err(errs, "and %d more errors", te.count - kept);
    tj_job_free(&tj);
    return errs;
}

/* Spec fields that may change while pods run; everything else is immutable then. */
static int mutable_field(const char *k)
{
    return !strcmp(k, "suspend") || !strcmp(k, "restartPolicy") || !strcmp(k, "gangTimeoutSeconds");
}

/* "field=hash,field=hash" of the immutable spec fields, sorted by name. */
static char *spec_hash(const cJSON *job)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(job, "spec");
    const char *names[64];
    int n = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, spec) {
        if (!mutable_field(f->string) && n < 64)
            names[n++] = f->string;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    size_t cap = 64 + (size_t)n * 64, len = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        char *txt = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(spec, names[i]));
        uint64_t h = txt ? fnv(txt) : 0;
        cJSON_free(txt);
        len += (size_t)snprintf(out + len, cap - len, "%s%.40s=%08x", i ? "," : "", names[i],
                                (unsigned)(h ^ (h >> 32)));
    }
    return out;
}

/* Names the immutable fields whose hash differs between two spec-hash strings. */
static void changed_fields(const char *a, const char *b, char *out, size_t n)
{
    out[0] = '\0';
    size_t len = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *x = pass ? b : a, *y = pass ? a : b;
        char *copy = strdup(x);
        if (!copy)
            return;
        for (char *save, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(tok, "="), tok);
            /* changed or missing on the other side */
            char needle[128];
            snprintf(needle, sizeof needle, "%s", tok);
            int same = 0;
            const char *p = y;
            size_t tl = strlen(needle);
            while ((p = strstr(p, needle))) {
                if ((p == y || p[-1] == ',') && (p[tl] == ',' || p[tl] == '\0')) {
                    same = 1;
                    break;
                }
                p += tl;
            }
            char field[80];
            snprintf(field, sizeof field, "spec.%s", name);
            if (!same && !strstr(out, field) && len + strlen(field) + 3 < n)
                len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", field);
        }
        free(copy);
    }
}

/* ---- building objects */

static cJSON *owner_refs(const cJSON *job)
{
    cJSON *arr = cJSON_CreateArray();
    cJSON *r = cJSON_CreateObject();
    if (!arr || !r) {
        cJSON_Delete(arr);
        cJSON_Delete(r);
        return NULL;
    }
    cJSON_AddItemToArray(arr, r);
    cJSON_AddStringToObject(r, "apiVersion", JOB_API_VERSION);
    cJSON_AddStringToObject(r, "kind", "TrainingJob");
    cJSON_AddStringToObject(r, "name", json_str_at(job, "metadata.name"));
    cJSON_AddStringToObject(r, "uid", json_str_at(job, "metadata.uid") ? json_str_at(job, "metadata.uid") : "");
    cJSON_AddBoolToObject(r, "controller", 1);
    cJSON_AddBoolToObject(r, "blockOwnerDeletion", 1);
    return arr;
}

static cJSON *base_object(const cJSON *job, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    cJSON *refs = owner_refs(job);
    if (!md || !labels || !refs) {
        cJSON_Delete(refs);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", json_str_at(job, "metadata.namespace"));
    cJSON_AddStringToObject(labels, LABEL_JOB, json_str_at(job, "metadata.name"));
    cJSON_AddItemToObject(md, "ownerReferences", refs);
    return o;
}

static void env_set(cJSON *env, const char *name, const char *value, cJSON *value_from)
{
    /* Replace a same-named entry from the template: ours win. */
    int i = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, env) {
        const char *n = json_str_at(it, "name");
        if (n && !strcmp(n, name)) {
            cJSON_DeleteItemFromArray(env, i);
            break;
        }
        i++;
    }
    cJSON *e = cJSON_CreateObject();
    if (!e) {
        cJSON_Delete(value_from);
        return;
    }
    cJSON_AddStringToObject(e, "name", name);
    if (value_from)
        cJSON_AddItemToObject(e, "valueFrom", value_from);
    else
        cJSON_AddStringToObject(e, "value", value);
    cJSON_AddItemToArray(env, e);
}

cJSON *controller_build_pod(const cJSON *job, int index, const char *coordinator_url,
                            const char *default_image, herr *e)
{
    const char *job_name = json_str_at(job, "metadata.name");
    const char *ns = json_str_at(job, "metadata.namespace");
    const char *uid = json_str_at(job, "metadata.uid");
    if (!job_name || !ns) {
        herr_set(e, "job without metadata.name/namespace");
        return NULL;
    }
    const char *image = json_str_at(job, "spec.image");
    if (!image)
        image = default_image;
    if (!image || !*image) {
        herr_set(e, "%s/%s: spec.image is not set and the operator has no --node-image", ns, job_name);
        return NULL;
    }
    char name[128], idx[16];
    tj_worker_pod_name(name, sizeof name, job_name, index);
    snprintf(idx, sizeof idx, "%d", index);
    cJSON *pod = base_object(job, name);
    if (!pod) {
        herr_set(e, "out of memory");
        return NULL;
    }
    cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    /* Template labels and annotations first, ours on top. */
    const cJSON *tl = json_at(job, "spec.template.metadata.labels"), *it;
    cJSON_ArrayForEach(it, tl) {
        if (cJSON_IsString(it) && strcmp(it->string, LABEL_JOB) && strcmp(it->string, LABEL_INDEX))
            cJSON_AddStringToObject(labels, it->string, it->valuestring);
    }
    cJSON_AddStringToObject(labels, LABEL_INDEX, idx);
    cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
    const cJSON *ta = json_at(job, "spec.template.metadata.annotations");
    cJSON_ArrayForEach(it, ta) {
        if (cJSON_IsString(it))
            cJSON_AddStringToObject(ann, it->string, it->valuestring);
    }
    char *hash = spec_hash(job);
    set_str(ann, ANN_SPEC, hash ? hash : "");
    free(hash);

    const cJSON *tspec = json_at(job, "spec.template.spec");
    cJSON *spec = cJSON_IsObject(tspec) ? cJSON_Duplicate(tspec, 1) : cJSON_CreateObject();
    if (!spec) {
        cJSON_Delete(pod);
        herr_set(e, "out of memory");
        return NULL;
    }
    cJSON_AddItemToObject(pod, "spec", spec);
    set_str(spec, "restartPolicy", "Never");
    /* On SIGTERM (eviction, drain, preemption) a worker finishes its step and every rank
     * checkpoints before leaving: Kubernetes' 30 s default is short for that on a large model.
     * A template's own value wins. */
    if (!cJSON_GetObjectItemCaseSensitive(spec, "terminationGracePeriodSeconds"))
        cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", POD_GRACE_S);
    set_str(spec, "hostname", name);
    set_str(spec, "subdomain", job_name);
    cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    if (!cJSON_IsArray(containers)) {
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "containers");
        containers = cJSON_AddArrayToObject(spec, "containers");
    }
    /* The worker container: the one named "worker", else the first, else a new one. */
    cJSON *c = NULL, *ci;
    cJSON_ArrayForEach(ci, containers) {
        const char *n = json_str_at(ci, "name");
        if (n && !strcmp(n, "worker")) {
            c = ci;
            break;
        }
    }
    if (!c)
        c = cJSON_GetArrayItem(containers, 0);
    if (!c) {
        c = cJSON_CreateObject();
        cJSON_AddItemToArray(containers, c);
    }
    if (!json_str_at(c, "name"))
        set_str(c, "name", "worker");
    set_str(c, "image", image);
    cJSON *cmd = cJSON_CreateArray();
    cJSON_AddItemToArray(cmd, cJSON_CreateString("holmes-node"));
    cJSON_AddItemToArray(cmd, cJSON_CreateString("worker"));
    cJSON_DeleteItemFromObjectCaseSensitive(c, "command");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "args");
    cJSON_AddItemToObject(c, "command", cmd);
    cJSON *env = cJSON_GetObjectItemCaseSensitive(c, "env");
    if (!cJSON_IsArray(env)) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "env");
        env = cJSON_AddArrayToObject(c, "env");
    }
    env_set(env, "HOLMES_JOB_NAME", job_name, NULL);
    env_set(env, "HOLMES_JOB_NAMESPACE", ns, NULL);
    env_set(env, "HOLMES_JOB_UID", uid ? uid : "", NULL);
    env_set(env, "HOLMES_WORKER_INDEX", idx, NULL);
    env_set(env, "HOLMES_COORDINATOR", coordinator_url ? coordinator_url : "", NULL);
    cJSON *vf = cJSON_CreateObject();
    cJSON *ref = cJSON_AddObjectToObject(vf, "secretKeyRef");
    char secret[160];
    snprintf(secret, sizeof secret, "%s-token", job_name);
    cJSON_AddStringToObject(ref, "name", secret);
    cJSON_AddStringToObject(ref, "key", "token");
    env_set(env, "HOLMES_TOKEN", NULL, vf);
    /* spec.emulation: the worker reports its group's NIC, as holmes-operator local's workers do
     * (groups in worker order, `count` workers each). */
    const cJSON *g;
    int first = 0;
    cJSON_ArrayForEach(g, json_at(job, "spec.emulation.nics")) {
        int count = (int)json_num_at(g, "count", 0);
        const char *cls = json_str_at(g, "class"), *fabric = json_str_at(g, "fabric");
        if (index >= first && index < first + count && cls && fabric) {
            char nic[300];
            snprintf(nic, sizeof nic, "%s:%s:%g", cls, fabric, json_num_at(g, "gbps", 0));
            env_set(env, "HOLMES_EMULATE_NIC", nic, NULL);
            break;
        }
        first += count;
    }
    /* GPUs: ask for them unless the template already does. */
    int gpus = (int)json_num_at(job, "spec.gpusPerWorker", 0);
    if (gpus > 0) {
        cJSON *res = obj_child(c, "resources");
        cJSON *lim = obj_child(res, "limits");
        if (!cJSON_GetObjectItemCaseSensitive(lim, "nvidia.com/gpu"))
            cJSON_AddNumberToObject(lim, "nvidia.com/gpu", gpus);
    }
    return pod;
}

static cJSON *build_secret(const cJSON *job)
{
    char name[160];
    snprintf(name, sizeof name, "%s-token", json_str_at(job, "metadata.name"));
    cJSON *s = base_object(job, name);
    unsigned char raw[24];
    if (!s || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        cJSON_Delete(s);
        return NULL;
    }
    /* 48 hex characters, sent as stringData so the server encodes it. */
    char hex[49];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    cJSON_AddStringToObject(s, "type", "Opaque");
    cJSON *sd = cJSON_AddObjectToObject(s, "stringData");
    cJSON_AddStringToObject(sd, "token", hex);
    return s;
}

static cJSON *build_service(const cJSON *job)
{
    cJSON *s = base_object(job, json_str_at(job, "metadata.name"));
    if (!s)
        return NULL;
    cJSON *spec = cJSON_AddObjectToObject(s, "spec");
    cJSON_AddStringToObject(spec, "clusterIP", "None");
    cJSON_AddBoolToObject(spec, "publishNotReadyAddresses", 1);
    cJSON *sel = cJSON_AddObjectToObject(spec, "selector");
    cJSON_AddStringToObject(sel, LABEL_JOB, json_str_at(job, "metadata.name"));
    cJSON *ports = cJSON_AddArrayToObject(spec, "ports");
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "rendezvous");
    cJSON_AddNumberToObject(p, "port", 29500);
    cJSON_AddItemToArray(ports, p);
    return s;
}

/* ---- informer plumbing */

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
    if (node) {
        cJSON *sp = cJSON_AddObjectToObject(out, "spec");
        cJSON_AddStringToObject(sp, "nodeName", node);
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

/* ---- what the caches cannot know yet (client-go's "expectations")
 * The informers lag behind our own writes: right after a status patch the cached job still
 * has the old status, right after deleting pods the cache still lists them, right after
 * creating pods it does not. A memo per job bridges that gap so reconciles do not act twice. */

struct memo {
    char base_rv[64];  /* the job's resourceVersion our last status write was based on */
    cJSON *status;     /* what we wrote */
    cJSON *gone;       /* pod uid -> expiry (deleted by us, maybe still cached) */
    cJSON *made;       /* pod name -> expiry (created by us, maybe not cached yet) */
};

static void memo_free(void *v)
{
    struct memo *m = v;
    if (!m)
        return;
    cJSON_Delete(m->status);
    cJSON_Delete(m->gone);
    cJSON_Delete(m->made);
    free(m);
}

static struct memo *memo_take(struct controller *c, const char *key)
{
    pthread_mutex_lock(&c->memo_lock);
    struct memo *m = kube_map_remove(c->memos, key);
    pthread_mutex_unlock(&c->memo_lock);
    if (!m) {
        m = calloc(1, sizeof *m);
        if (m) {
            m->gone = cJSON_CreateObject();
            m->made = cJSON_CreateObject();
            if (!m->gone || !m->made) {
                memo_free(m);
                m = NULL;
            }
        }
    }
    return m;
}

/* Drops expired entries; keeps the memo only when it still says something. */
static void memo_put(struct controller *c, const char *key, struct memo *m, double now)
{
    if (!m)
        return;
    for (int pass = 0; pass < 2; pass++) {
        cJSON *set = pass ? m->made : m->gone, *it = set->child;
        while (it) {
            cJSON *next = it->next;
            if (it->valuedouble < now)
                cJSON_Delete(cJSON_DetachItemViaPointer(set, it));
            it = next;
        }
    }
    if (!m->status && !m->gone->child && !m->made->child) {
        memo_free(m);
        return;
    }
    pthread_mutex_lock(&c->memo_lock);
    struct memo *old = NULL;
    if (kube_map_put(c->memos, key, m, (void **)&old) != 0)
        memo_free(m);
    memo_free(old);
    pthread_mutex_unlock(&c->memo_lock);
}

static void memo_mark(cJSON *set, const char *k, double expiry)
{
    if (!k)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(set, k);
    cJSON_AddNumberToObject(set, k, expiry);
}

/* ---- API calls through the table */

/* Seconds this thread spent waiting for the API (the reconcile's own work is the rest). */
static __thread double tl_api_s;

static int call_delete(struct controller *c, enum api_op op, const char *ns, const char *name, herr *e)
{
    double t0 = clock_mono_s();
    int rc = kube_delete(c->kc, controller_api_calls[op].res, ns, name, "Background", e);
    tl_api_s += clock_mono_s() - t0;
    return rc;
}

static int call_patch(struct controller *c, enum api_op op, const char *ns, const char *name,
                      const cJSON *patch, herr *e)
{
    const struct api_call *a = &controller_api_calls[op];
    double t0 = clock_mono_s();
    int rc = kube_patch(c->kc, a->res, ns, name, a->sub, patch, NULL, e);
    tl_api_s += clock_mono_s() - t0;
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
static int set_condition(cJSON *status, const char *type, int ok, const char *reason,
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
            set_str(cnd, "lastTransitionTime", now);
        set_str(cnd, "status", st);
        set_str(cnd, "reason", reason);
        set_str(cnd, "message", msg);
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

/* Patches status with the top-level fields that differ from old. */
static int write_status(struct controller *c, const cJSON *job, const cJSON *old, const cJSON *st,
                        struct memo *m, herr *e)
{
    cJSON *patch = cJSON_CreateObject();
    cJSON *ps = cJSON_AddObjectToObject(patch, "status");
    if (!ps) {
        cJSON_Delete(patch);
        return herr_set(e, "out of memory");
    }
    const cJSON *it;
    int n = 0;
    cJSON_ArrayForEach(it, st) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(old, it->string);
        if (!o || !cJSON_Compare(o, it, 1)) {
            cJSON_AddItemToObject(ps, it->string, cJSON_Duplicate(it, 1));
            n++;
        }
    }
    int rc = 0;
    if (n) {
        rc = call_patch(c, API_PATCH_JOB_STATUS, json_str_at(job, "metadata.namespace"),
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

static cJSON *pods_of(struct controller *c, const char *ns, const char *job, const char *uid)
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

static double restart_backoff(struct controller *c, const cJSON *job, int restarts)
{
    double base = json_num_at(job, "spec.restartPolicy.backoffSeconds", 30);
    double d = base * pow(2.0, restarts > 0 ? restarts - 1 : 0);
    return d > c->o.backoff_cap_s ? c->o.backoff_cap_s : d;
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
            memo_mark(m->gone, kube_meta_str(p, "uid"), clock_wall_s() + 60);
    }
    return rc;
}

static int is_phase(const char *p, const char *want) { return p && !strcmp(p, want); }

/* ---- creating a job's objects: concurrently, in slow-start batches (as the Kubernetes Job
 * and ReplicaSet controllers do): 2, then 4, 8, 16 ... at once, stopping after a batch with
 * an error, so a namespace where creates fail costs 2 requests, not one per worker, and a
 * healthy gang costs a few round trips instead of one per object. The first batch holds the
 * Secret and the Service, so they exist before the pods that use them. */

#define SLOW_START_INITIAL 2

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

static int creates_add(struct create_list *l, enum api_op op, cJSON *obj, const char *name)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        struct create_job *it = realloc(l->items, (size_t)cap * sizeof *it);
        if (!it)
            return -1;
        l->items = it;
        l->cap = cap;
    }
    struct create_job *j = &l->items[l->n++];
    memset(j, 0, sizeof *j);
    j->op = op;
    j->obj = obj;
    j->rc = -2;
    snprintf(j->name, sizeof j->name, "%s", name);
    return 0;
}

static void creates_free(struct create_list *l)
{
    for (int i = 0; i < l->n; i++)
        cJSON_Delete(l->items[i].obj);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* Sends the creates not sent yet; 0, or the first error (in e). */
static int creates_run(struct controller *c, const char *ns, struct create_list *l, herr *e)
{
    int first = 0;
    while (first < l->n && l->items[first].rc != -2)
        first++;
    int rc = 0;
    double t0 = clock_mono_s();
    for (int batch = SLOW_START_INITIAL, i = first; i < l->n && rc == 0; i += batch, batch *= 2) {
        int m = l->n - i < batch ? l->n - i : batch;
        struct kube_call *calls = calloc((size_t)m, sizeof *calls);
        char **paths = calloc((size_t)m, sizeof *paths);
        int ok = calls && paths;
        for (int k = 0; ok && k < m; k++) {
            paths[k] = kube_path(controller_api_calls[l->items[i + k].op].res, ns, NULL, NULL);
            ok = paths[k] != NULL;
            calls[k] = (struct kube_call){.method = "POST", .path_query = paths[k],
                                          .content_type = "application/json",
                                          .body = l->items[i + k].obj};
        }
        if (ok)
            kube_calls(c->kc, calls, m);
        for (int k = 0; k < m; k++) {
            struct create_job *j = &l->items[i + k];
            if (!ok) {
                j->rc = herr_set(&j->e, "%s/%s: out of memory", ns, j->name);
            } else {
                j->rc = calls[k].rc == 409 ? 0 : calls[k].rc; /* AlreadyExists: it is there */
                j->e = calls[k].e;
            }
            if (j->rc != 0 && rc == 0) {
                rc = j->rc;
                *e = j->e;
            }
            free(paths ? paths[k] : NULL);
        }
        free(paths);
        free(calls);
    }
    tl_api_s += clock_mono_s() - t0; /* the batches' wall time, counted once */
    return rc;
}

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
};

static void set_phase(struct reconcile *r, const char *phase)
{
    set_str(r->st, "phase", phase);
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
    if (!obj || creates_add(&r->creates, op, obj, name) != 0) {
        cJSON_Delete(obj);
        return herr_set(e, "%s/%s: cannot build %s", r->ns, name, controller_api_calls[op].res->resource);
    }
    return 0;
}

static int reconcile_job(struct reconcile *r, herr *e)
{
    struct controller *c = r->c;
    const cJSON *job = r->job;
    const char *phase = json_str_at(r->st, "phase");
    double gen = json_num_at(job, "metadata.generation", 1);
    int workers = (int)json_num_at(job, "spec.workers", 0);
    set_num(r->st, "observedGeneration", gen);

    cJSON *errs = controller_spec_errors(job);
    if (!errs)
        return herr_set(e, "out of memory");
    if (cJSON_GetArraySize(errs) > 0) {
        char msg[2048] = "";
        size_t len = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, errs)
            len += (size_t)snprintf(msg + len, len < sizeof msg ? sizeof msg - len : 0, "%s%s",
                                    len ? "; " : "", it->valuestring);
        cJSON_Delete(errs);
        const char *before = condition_message(r->old, "Valid");
        if (set_condition(r->st, "Valid", 0, "InvalidSpec", msg, r->now) || !before)
            emit(c, job, "Warning", "InvalidSpec", msg);
        if (!phase)
            set_phase(r, "Pending");
        return 0;
    }
    cJSON_Delete(errs);

    const char *uid = json_str_at(job, "metadata.uid");
    cJSON *pods = pods_of(c, r->ns, r->name, uid);
    if (!pods)
        return herr_set(e, "out of memory");
    /* Pods we deleted are gone even if the cache still lists them; pods we created exist. */
    for (cJSON *pp = pods->child; pp;) {
        cJSON *next = pp->next;
        const char *pu = kube_meta_str(pp, "uid");
        cJSON_DeleteItemFromObjectCaseSensitive(r->memo->made, kube_meta_str(pp, "name"));
        if (pu && cJSON_GetObjectItemCaseSensitive(r->memo->gone, pu))
            cJSON_Delete(cJSON_DetachItemViaPointer(pods, pp));
        pp = next;
    }
    int rc = 0;

    /* Immutable fields changed while pods exist: refuse, disturb nothing. */
    char *hash = spec_hash(job);
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
    if (hash && pod_hash && strcmp(hash, pod_hash) != 0 && !cJSON_IsTrue(json_at(job, "spec.suspend"))) {
        char fields[512], msg[1024];
        changed_fields(pod_hash, hash, fields, sizeof fields);
        snprintf(msg, sizeof msg, "refused: %s changed while the job has pods; these fields are "
                 "immutable while the job runs (suspend it first, or revert the change)", fields);
        if (set_condition(r->st, "Valid", 0, "ImmutableFieldChanged", msg, r->now))
            emit(c, job, "Warning", "ImmutableFieldChanged", msg);
        free(hash);
        cJSON_Delete(pods);
        return 0;
    }
    free(hash);
    set_condition(r->st, "Valid", 1, "SpecValid", "the spec passed validation", r->now);

    if (is_phase(phase, "Succeeded") || is_phase(phase, "Failed")) {
        cJSON_Delete(pods);
        return 0; /* terminal */
    }

    char secret[300];
    snprintf(secret, sizeof secret, "%s-token", r->name);
    if ((rc = ensure_owned(r, INF_SECRETS, API_CREATE_SECRET, secret, build_secret, e)) != 0 ||
        (rc = ensure_owned(r, INF_SERVICES, API_CREATE_SERVICE, r->name, build_service, e)) != 0) {
        cJSON_Delete(pods);
        return rc;
    }

    set_num(obj_child(r->st, "workers"), "total", workers);
    if (cJSON_IsTrue(json_at(job, "spec.suspend"))) {
        rc = delete_pods(c, r->memo, pods, 0, e);
        set_workers_ready(r->st, 0);
        if (!is_phase(phase, "Suspended"))
            emit(c, job, "Normal", "Suspended", "spec.suspend is true: worker pods deleted");
        set_phase(r, "Suspended");
        set_condition(r->st, "PodsReady", 0, "Suspended", "the job is suspended", r->now);
        cJSON_Delete(pods);
        return rc;
    }

    /* Failed or evicted pods: restart the whole gang, or give up. */
    const cJSON *failed = NULL;
    cJSON_ArrayForEach(p, pods) {
        if (pod_failed(p) && !json_at(p, "metadata.deletionTimestamp")) {
            failed = p;
            break;
        }
    }
    int restarts = (int)json_num_at(r->st, "restarts", 0);
    if (failed) {
        int max = (int)json_num_at(job, "spec.restartPolicy.maxRestarts", 3);
        const char *why = json_str_at(failed, "status.reason"), *wmsg = json_str_at(failed, "status.message");
        char msg[1024];
        if (restarts >= max) {
            snprintf(msg, sizeof msg, "pod %s failed (%s%s%s) and the job has used all %d restarts "
                     "(spec.restartPolicy.maxRestarts)", kube_meta_str(failed, "name"),
                     why ? why : "Error", wmsg ? ": " : "", wmsg ? wmsg : "", max);
            rc = delete_pods(c, r->memo, pods, 1, e);
            set_phase(r, "Failed");
            set_condition(r->st, "Failed", 1, "RestartLimitExceeded", msg, r->now);
            set_str(r->st, "completionTime", r->now);
            emit(c, job, "Warning", "RestartLimitExceeded", msg);
        } else {
            snprintf(msg, sizeof msg, "pod %s failed (%s%s%s): restarting all %d workers (restart "
                     "%d of %d)", kube_meta_str(failed, "name"), why ? why : "Error",
                     wmsg ? ": " : "", wmsg ? wmsg : "", workers, restarts + 1, max);
            rc = delete_pods(c, r->memo, pods, 0, e);
            if (rc == 0) {
                set_num(r->st, "restarts", restarts + 1);
                set_str(r->st, "lastRestartTime", r->now);
                set_phase(r, "Pending");
                set_condition(r->st, "PodsReady", 0, "GangRestart", msg, r->now);
                emit(c, job, "Warning", "GangRestart", msg);
                atomic_fetch_add(&c->restarts, 1);
                r->requeue_s = restart_backoff(c, job, restarts + 1);
            }
        }
        cJSON_Delete(pods);
        return rc;
    }

    /* After a restart, wait out the backoff before recreating pods. */
    if (restarts > 0 && cJSON_GetArraySize(pods) == 0) {
        double since = kube_time_parse(json_str_at(r->st, "lastRestartTime"));
        double wait = since > 0 ? since + restart_backoff(c, job, restarts) - clock_wall_s() : 0;
        if (wait > 0) {
            r->requeue_s = wait;
            cJSON_Delete(pods);
            return 0;
        }
    }

    /* Pods beyond spec.workers (left from an earlier size) go. */
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
        if (have[i])
            continue;
        cJSON *pod = controller_build_pod(job, i, c->coordinator, c->image, e);
        if (!pod) {
            rc = -1;
            break;
        }
        if (creates_add(&r->creates, API_CREATE_POD, pod, pname) != 0) {
            cJSON_Delete(pod);
            rc = herr_set(e, "out of memory");
        }
    }
    if (rc == 0)
        rc = creates_run(c, r->ns, &r->creates, e);
    for (int k = first_pod; k < r->creates.n; k++) {
        if (r->creates.items[k].rc == 0) {
            created++;
            memo_mark(r->memo->made, r->creates.items[k].name, r->t + 30);
            atomic_fetch_add(&c->pods_created, 1);
        }
    }
    if (created && !json_at(r->st, "startTime"))
        set_str(r->st, "startTime", r->now);
    if (created == workers)
        emit(c, job, "Normal", "PodsCreated", "created the worker pods");
    if (pending_creates)
        r->requeue_s = 1; /* look again if the cache has not shown them by then */

    /* Status from the pods. */
    int ready = 0, scheduled = 0, succeeded = 0;
    double oldest_unsched = 0;
    char unsched_names[512] = "", sched_msg[512] = "";
    size_t ul = 0;
    cJSON_ArrayForEach(p, pods) {
        int i = pod_index(p);
        if (i < 0 || i >= workers || json_at(p, "metadata.deletionTimestamp"))
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
    double gang = json_num_at(job, "spec.gangTimeoutSeconds", 600);
    if (scheduled == workers) {
        set_condition(r->st, "PodsScheduled", 1, "AllScheduled", "every worker pod is scheduled", r->now);
    } else if (oldest_unsched > 0 && clock_wall_s() - oldest_unsched >= gang) {
        snprintf(msg, sizeof msg, "pods %s unschedulable for more than %gs "
                 "(spec.gangTimeoutSeconds): %s", unsched_names, gang,
                 sched_msg[0] ? sched_msg : "no reason given");
        if (set_condition(r->st, "PodsScheduled", 0, "GangTimeout", msg, r->now))
            emit(c, job, "Warning", "GangTimeout", msg);
    } else {
        snprintf(msg, sizeof msg, "%d of %d worker pods scheduled", scheduled, workers);
        set_condition(r->st, "PodsScheduled", 0, "Scheduling", msg, r->now);
        if (oldest_unsched > 0) {
            double left = oldest_unsched + gang - clock_wall_s();
            r->requeue_s = left > 0.05 ? left : 0.05;
        }
    }
    if (ready == workers) {
        set_condition(r->st, "PodsReady", 1, "AllReady", "every worker pod is ready", r->now);
    } else {
        snprintf(msg, sizeof msg, "%d of %d worker pods ready", ready, workers);
        set_condition(r->st, "PodsReady", 0, "Waiting", msg, r->now);
    }
    if (succeeded == workers && workers > 0) {
        set_phase(r, "Succeeded");
        set_condition(r->st, "Complete", 1, "AllWorkersSucceeded", "every worker finished", r->now);
        if (!json_at(r->st, "completionTime"))
            set_str(r->st, "completionTime", r->now);
        emit(c, job, "Normal", "Succeeded", "every worker finished");
    } else if (ready == workers) {
        if (!phase || is_phase(phase, "Pending") || is_phase(phase, "Suspended"))
            set_phase(r, "Discovering");
    } else {
        set_phase(r, "Pending");
    }
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
    struct memo *m = memo_take(c, key);
    if (!job || json_at(job, "metadata.deletionTimestamp") || !m) {
        cJSON_Delete(job);
        memo_free(m);
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
    int rc = r.st ? reconcile_job(&r, e) : herr_set(e, "out of memory");
    if (rc == 0) /* the Secret and Service of a reconcile that wanted no pod */
        rc = creates_run(c, ns, &r.creates, e);
    creates_free(&r.creates);
    herr we;
    if (r.st) {
        int wrc = write_status(c, job, old, r.st, m, &we);
        if (wrc != 0 && rc == 0) {
            *e = we;
            rc = wrc;
        }
    }
    *requeue = r.requeue_s;
    memo_put(c, key, m, r.t);
    cJSON_Delete(r.st);
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
        tl_api_s = 0;
        int rc = reconcile_key(c, key, &requeue, &e);
        double took = clock_mono_s() - t0;
        metrics_hist_observe(&c->latency, took);
        metrics_hist_observe(&c->own_latency, took - tl_api_s > 0 ? took - tl_api_s : 0);
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
    if (c->o.backoff_cap_s <= 0)
        c->o.backoff_cap_s = 600;
    c->ns = o->namespace && *o->namespace ? strdup(o->namespace) : NULL;
    c->coordinator = strdup(o->coordinator_url ? o->coordinator_url : "");
    c->image = o->default_image ? strdup(o->default_image) : NULL;
    c->queue = kube_queue_new(0.05, 60);
    c->memos = kube_map_new();
    pthread_mutex_init(&c->memo_lock, NULL);
    metrics_hist_init(&c->latency);
    metrics_hist_init(&c->own_latency);
    static const struct {
        const struct kube_resource *res;
        const char *selector;
        kube_transform_fn tf;
        int jobs;
    } spec[INF_COUNT] = {
        [INF_JOBS] = {&KUBE_TRAININGJOBS, NULL, trim_meta, 1},
        [INF_PODS] = {&KUBE_PODS, LABEL_JOB, trim_pod, 0},
        [INF_SECRETS] = {&KUBE_SECRETS, LABEL_JOB, trim_meta, 0},
        [INF_SERVICES] = {&KUBE_SERVICES, LABEL_JOB, trim_service, 0},
    };
    c->events = kube_recorder_new(kc, NULL, e);
    int ok = c->coordinator && c->queue && c->memos && c->events;
    for (int i = 0; ok && i < INF_COUNT; i++) {
        struct kube_informer_opts io = {.resource = spec[i].res, .ns = c->ns,
                                        .label_selector = spec[i].selector,
                                        .transform = spec[i].tf,
                                        .handler = spec[i].jobs ? on_job : on_owned, .user = c,
                                        .index_label = i == INF_PODS ? LABEL_JOB : NULL};
        c->inf[i] = kube_informer_new(kc, &io, e);
        ok = c->inf[i] != NULL;
    }
    if (!ok) {
        controller_free(c);
        return NULL;
    }
    return c;
}

int controller_start(struct controller *c, herr *e)
{
    for (int i = 0; i < INF_COUNT; i++)
        if (kube_informer_start(c->inf[i], e) != 0)
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
        if (kube_informer_wait_synced(c->inf[i], timeout_ms) != 0)
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
    kube_map_free(c->memos, memo_free);
    pthread_mutex_destroy(&c->memo_lock);
    free(c->ns);
    free(c->coordinator);
    free(c->image);
    free(c);
}

/* ---- metrics */

struct phase_count {
    const char *names[8];
    unsigned long n[8];
};

static int count_phase(const cJSON *job, void *user)
{
    struct phase_count *pc = user;
    const char *ph = json_str_at(job, "status.phase");
    if (!ph)
        ph = "Pending";
    for (int i = 0; i < 8; i++)
        if (!strcmp(pc->names[i], ph)) {
            pc->n[i]++;
            break;
        }
    return 0;
}

static void put_error(int code, unsigned long n, void *user)
{
    metrics_printf(user, "holmes_api_errors_total{code=\"%d\"} %lu\n", code, n);
}

void controller_metrics(struct controller *c, struct metrics_buf *b)
{
    struct phase_count pc = {{"Pending", "Discovering", "Planning", "Running", "Succeeded",
                              "Failed", "Suspended", "Unknown"}, {0}};
    kube_informer_each(c->inf[INF_JOBS], count_phase, &pc);
    metrics_printf(b, "# HELP holmes_jobs TrainingJobs by phase.\n# TYPE holmes_jobs gauge\n");
    for (int i = 0; i < 7; i++)
        metrics_printf(b, "holmes_jobs{phase=\"%s\"} %lu\n", pc.names[i], pc.n[i]);
    metrics_printf(b, "# HELP holmes_reconciles_total Reconciles run.\n# TYPE holmes_reconciles_total counter\n"
                      "holmes_reconciles_total %lu\n", atomic_load(&c->reconciles));
    metrics_printf(b, "# HELP holmes_reconcile_errors_total Reconciles that failed.\n"
                      "# TYPE holmes_reconcile_errors_total counter\nholmes_reconcile_errors_total %lu\n",
                   atomic_load(&c->reconcile_errors));
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
    metrics_printf(b, "# HELP holmes_gang_restarts_total Gang restarts after failed pods.\n"
                      "# TYPE holmes_gang_restarts_total counter\nholmes_gang_restarts_total %lu\n",
                   atomic_load(&c->restarts));
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

int controller_patch_job_status(struct controller *c, const char *ns, const char *job,
                                const cJSON *fields, herr *e)
{
    cJSON *patch = cJSON_CreateObject();
    if (!patch || !cJSON_AddItemToObject(patch, "status", cJSON_Duplicate(fields, 1))) {
        cJSON_Delete(patch);
        return herr_set(e, "out of memory");
    }
    int rc = call_patch(c, API_PATCH_JOB_STATUS, ns, job, patch, e);
    cJSON_Delete(patch);
    return rc;
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
    *changed = set_condition(st, type, ok, reason, message ? message : "", now);
    return st;
}

int controller_set_job_condition(struct controller *c, const char *ns, const char *job,
                                 const char *type, int ok, const char *reason,
                                 const char *message, herr *e)
{
    /* The patch carries the cached resourceVersion: a list changed meanwhile (by the
     * controller) answers 409 and is merged again once the cache has caught up. */
    for (int attempt = 0;; attempt++) {
        cJSON *j = kube_informer_get(c->inf[INF_JOBS], ns, job);
        if (!j)
            return herr_set(e, "condition %s: no TrainingJob %s/%s in the cache", type, ns, job);
        char now[48];
        kube_time_now(now, sizeof now, 0);
        int changed = 0;
        cJSON *st = controller_merge_condition(cJSON_GetObjectItemCaseSensitive(j, "status"), type,
                                               ok, reason, message, now, &changed);
        const char *rv = json_str_at(j, "metadata.resourceVersion");
        cJSON *patch = st && changed ? cJSON_CreateObject() : NULL;
        cJSON *md = patch ? cJSON_AddObjectToObject(patch, "metadata") : NULL;
        int rc = 0;
        if (st && changed) {
            if (!md || (rv && !cJSON_AddStringToObject(md, "resourceVersion", rv)) ||
                !cJSON_AddItemToObject(patch, "status", st))
                rc = herr_set(e, "out of memory");
            else
                rc = call_patch(c, API_PATCH_JOB_STATUS, ns, job, patch, e);
            if (!patch || !cJSON_GetObjectItem(patch, "status"))
                cJSON_Delete(st);
        } else if (!st) {
            rc = herr_set(e, "out of memory");
        } else {
            cJSON_Delete(st);
        }
        cJSON_Delete(patch);
        cJSON_Delete(j);
        if (rc == 0 || attempt >= 20 || !strstr(e->msg, ": 409 "))
            return rc ? herr_wrap(e, "condition %s of %s/%s", type, ns, job) : 0;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
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
    int rc = call_patch(c, API_PATCH_POD, ns, pod, patch, e);
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
    cJSON *pods = pods_of(c, ns, job, uid);
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
        size_t n = strlen(b64);
        unsigned char *buf = malloc(n + 1);
        if (buf) {
            /* Minimal base64 decoding (the API server always pads). */
            static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            size_t o = 0;
            unsigned v = 0;
            int bits = 0;
            for (size_t i = 0; i < n && b64[i] != '='; i++) {
                const char *pos = strchr(tbl, b64[i]);
                if (!pos || !b64[i])
                    continue;
                v = (v << 6) | (unsigned)(pos - tbl);
                bits += 6;
                if (bits >= 8) {
                    bits -= 8;
                    buf[o++] = (unsigned char)(v >> bits);
                }
            }
            buf[o] = '\0';
            out = (char *)buf;
        }
    } else if (plain) {
        out = strdup(plain);
    }
    cJSON_Delete(s);
    return out;
}
