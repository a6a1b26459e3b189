/* The objects the controller makes for a TrainingJob: worker pods (from its parsed spec), the
 * token Secret, the headless Service, and the spec hash that notices immutable changes. */
#include "controller_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base64.h"
#include "json.h"
#include "trainingjob.h"

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}


/* Spec fields that may change while pods run; everything else is immutable then. */
static int mutable_field(const char *k)
{
    return !strcmp(k, "suspend") || !strcmp(k, "restartPolicy") || !strcmp(k, "gangTimeoutSeconds") ||
           !strcmp(k, "ttlSecondsAfterFinished") || !strcmp(k, "activeDeadlineSeconds");
}

/* "field=hash,field=hash" of the immutable spec fields, sorted by name. */
char *ctl_spec_hash(const cJSON *job)
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
void ctl_changed_fields(const char *a, const char *b, char *out, size_t n)
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

cJSON *ctl_base_object(const cJSON *job, const char *name)
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

/* The pod spec's worker container: the one named "worker", else the first, else a new one
 * (spec.containers made an array first when it is not one). */
static cJSON *worker_container(cJSON *spec)
{
    cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    if (!cJSON_IsArray(containers)) {
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "containers");
        containers = cJSON_AddArrayToObject(spec, "containers");
    }
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
    return c;
}

static void set_emulated_nic(cJSON *env, const struct tj_emulation *em, int index)
{
    /* spec.emulation: the worker reports its group's NIC, as holmes-operator local's workers do
     * (groups in worker order, `count` workers each). */
    for (int g = 0, first = 0; em->enabled && g < em->n_groups; first += em->groups[g++].count) {
        const struct tj_nic_group *ng = &em->groups[g];
        if (index >= first && index < first + ng->count) {
            char nic[300];
            snprintf(nic, sizeof nic, "%s:%s:%g", ng->cls, ng->fabric, ng->gbps);
            env_set(env, "HOLMES_EMULATE_NIC", nic, NULL);
            return;
        }
    }
}

/* ---- worker pods' security (docs/operator.md, "Worker pods' security") */

int controller_is_rdma_resource(const char *name)
{
    return !strncmp(name, "rdma/", 5) || !strncmp(name, "mellanox.com/", 13) ||
           !strncmp(name, "nvidia.com/hostdev", 18) || strstr(name, "rdma") != NULL;
}

/* Whether the container asks for an RDMA device (limits or requests). */
static int wants_rdma(const cJSON *c)
{
    const char *const kinds[] = {"limits", "requests"};
    for (int k = 0; k < 2; k++) {
        const cJSON *r;
        cJSON_ArrayForEach(r, json_at(cJSON_GetObjectItemCaseSensitive(c, "resources"), kinds[k]))
            if (r->string && controller_is_rdma_resource(r->string))
                return 1;
    }
    return 0;
}

/* name -> value in o unless o has it (the template's wins). */
static void default_bool(cJSON *o, const char *name, int v)
{
    if (!cJSON_GetObjectItemCaseSensitive(o, name))
        cJSON_AddBoolToObject(o, name, v);
}

static void default_num(cJSON *o, const char *name, double v)
{
    if (!cJSON_GetObjectItemCaseSensitive(o, name))
        cJSON_AddNumberToObject(o, name, v);
}

static int has_string(const cJSON *arr, const char *s)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (cJSON_IsString(it) && !strcmp(it->valuestring, s))
            return 1;
    }
    return 0;
}

#define WORKER_UID 65532 /* the worker image's user (images/Dockerfile.node) */

/* The pod's and the worker container's securityContext: each field the template leaves unset.
 * Combinations the API refuses are avoided: a template that runs as uid 0 gets no runAsNonRoot,
 * a privileged one (or one adding CAP_SYS_ADMIN) no allowPrivilegeEscalation: false. */
static void lock_down(cJSON *spec, cJSON *c)
{
    cJSON *psc = json_child_object(spec, "securityContext");
    cJSON *csc = json_child_object(c, "securityContext");
    if (!psc || !csc)
        return;
    int root = json_num_at(psc, "runAsUser", -1) == 0 || json_num_at(csc, "runAsUser", -1) == 0;
    if (!root && !cJSON_GetObjectItemCaseSensitive(csc, "runAsNonRoot"))
        default_bool(psc, "runAsNonRoot", 1);
    if (!cJSON_GetObjectItemCaseSensitive(csc, "runAsUser"))
        default_num(psc, "runAsUser", WORKER_UID);
    if (!cJSON_GetObjectItemCaseSensitive(csc, "runAsGroup"))
        default_num(psc, "runAsGroup", WORKER_UID);
    default_num(psc, "fsGroup", WORKER_UID); /* the volumes below are the worker's to write */
    if (!json_at(psc, "seccompProfile") && !json_at(csc, "seccompProfile")) {
        cJSON *sp = json_child_object(psc, "seccompProfile");
        if (sp)
            json_set_str(sp, "type", "RuntimeDefault");
    }
    cJSON *caps = cJSON_GetObjectItemCaseSensitive(csc, "capabilities");
    if (!caps)
        caps = cJSON_AddObjectToObject(csc, "capabilities");
    if (caps && !cJSON_GetObjectItemCaseSensitive(caps, "drop")) {
        cJSON *drop = cJSON_AddArrayToObject(caps, "drop");
        cJSON_AddItemToArray(drop, cJSON_CreateString("ALL"));
    }
    if (caps && !cJSON_GetObjectItemCaseSensitive(caps, "add") && wants_rdma(c)) {
        cJSON *add = cJSON_AddArrayToObject(caps, "add");
        cJSON_AddItemToArray(add, cJSON_CreateString("IPC_LOCK")); /* pinning memory for RDMA */
    }
    const cJSON *add = json_at(caps, "add");
    int escalates = cJSON_IsTrue(json_at(csc, "privileged")) || has_string(add, "SYS_ADMIN") ||
                    has_string(add, "CAP_SYS_ADMIN");
    if (!escalates)
        default_bool(csc, "allowPrivilegeEscalation", 0);
    default_bool(csc, "readOnlyRootFilesystem", 1);
}

/* Whether one of the container's volumeMounts is at path or above it. */
static int mounted(const cJSON *c, const char *path)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, json_at(c, "volumeMounts")) {
        const char *mp = json_str_at(m, "mountPath");
        size_t n = mp ? strlen(mp) : 0;
        while (n > 1 && mp[n - 1] == '/')
            n--;
        if (mp && !strncmp(path, mp, n) && (path[n] == '\0' || path[n] == '/' || n == 1))
            return 1;
    }
    return 0;
}

/* An emptyDir volume named name at path unless something is mounted there already. */
static void writable_dir(cJSON *spec, cJSON *c, const char *name, const char *path, int memory)
{
    if (mounted(c, path))
        return;
    cJSON *vols = cJSON_GetObjectItemCaseSensitive(spec, "volumes");
    if (!cJSON_IsArray(vols)) {
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "volumes");
        vols = cJSON_AddArrayToObject(spec, "volumes");
    }
    cJSON *mounts = cJSON_GetObjectItemCaseSensitive(c, "volumeMounts");
    if (!cJSON_IsArray(mounts)) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "volumeMounts");
        mounts = cJSON_AddArrayToObject(c, "volumeMounts");
    }
    cJSON *v = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON *ed = v && cJSON_AddStringToObject(v, "name", name) ? cJSON_AddObjectToObject(v, "emptyDir")
                                                               : NULL;
    if (!ed || !m || !vols || !mounts) {
        cJSON_Delete(v);
        cJSON_Delete(m);
        return;
    }
    if (memory)
        cJSON_AddStringToObject(ed, "medium", "Memory");
    cJSON_AddItemToArray(vols, v);
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddStringToObject(m, "mountPath", path);
    cJSON_AddItemToArray(mounts, m);
}

int controller_pod_trust_ca(cJSON *pod, const char *job_name)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
    cJSON *c = spec ? worker_container(spec) : NULL;
    cJSON *vols = json_at(spec, "volumes") ? cJSON_GetObjectItemCaseSensitive(spec, "volumes")
                                           : cJSON_AddArrayToObject(spec, "volumes");
    cJSON *mounts = json_at(c, "volumeMounts") ? cJSON_GetObjectItemCaseSensitive(c, "volumeMounts")
                                               : cJSON_AddArrayToObject(c, "volumeMounts");
    cJSON *env = cJSON_GetObjectItemCaseSensitive(c, "env");
    char secret[300];
    snprintf(secret, sizeof secret, "%s-token", job_name);
    cJSON *v = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON *sec = v && cJSON_AddStringToObject(v, "name", "holmes-coordinator-ca")
                     ? cJSON_AddObjectToObject(v, "secret") : NULL;
    cJSON *items = sec && cJSON_AddStringToObject(sec, "secretName", secret) &&
                           cJSON_AddNumberToObject(sec, "defaultMode", 0444)
                       ? cJSON_AddArrayToObject(sec, "items") : NULL;
    cJSON *item = cJSON_CreateObject();
    if (!cJSON_IsArray(vols) || !cJSON_IsArray(mounts) || !cJSON_IsArray(env) || !items || !m ||
        !item) {
        cJSON_Delete(v);
        cJSON_Delete(m);
        cJSON_Delete(item);
        return -1;
    }
    cJSON_AddStringToObject(item, "key", "ca.crt"); /* the token stays out of the file system */
    cJSON_AddStringToObject(item, "path", "ca.crt");
    cJSON_AddItemToArray(items, item);
    cJSON_AddItemToArray(vols, v);
    cJSON_AddStringToObject(m, "name", "holmes-coordinator-ca");
    cJSON_AddStringToObject(m, "mountPath", CONTROLLER_CA_DIR);
    cJSON_AddBoolToObject(m, "readOnly", 1);
    cJSON_AddItemToArray(mounts, m);
    env_set(env, "HOLMES_COORDINATOR_CA", CONTROLLER_CA_FILE, NULL);
    return 0;
}

cJSON *controller_build_pod(const cJSON *job, const struct tj_spec *s, int index,
                            const char *coordinator_url, const char *default_image, herr *e)
{
    const char *job_name = json_str_at(job, "metadata.name");
    const char *ns = json_str_at(job, "metadata.namespace");
    const char *uid = json_str_at(job, "metadata.uid");
    if (!job_name || !ns) {
        herr_set(e, "job without metadata.name/namespace");
        return NULL;
    }
    const char *image = s->image[0] ? s->image : default_image;
    if (!image || !*image) {
        herr_set(e, "%s/%s: spec.image is not set and the operator has no --node-image", ns, job_name);
        return NULL;
    }
    char name[128], idx[16];
    tj_worker_pod_name(name, sizeof name, job_name, index);
    snprintf(idx, sizeof idx, "%d", index);
    cJSON *pod = ctl_base_object(job, name);
    if (!pod) {
        herr_set(e, "out of memory");
        return NULL;
    }
    cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    /* Template labels and annotations first, ours on top. */
    const cJSON *tl = json_at(s->pod_template, "metadata.labels"), *it;
    cJSON_ArrayForEach(it, tl) {
        if (cJSON_IsString(it) && strcmp(it->string, LABEL_JOB) && strcmp(it->string, LABEL_INDEX))
            cJSON_AddStringToObject(labels, it->string, it->valuestring);
    }
    cJSON_AddStringToObject(labels, LABEL_INDEX, idx);
    cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
    const cJSON *ta = json_at(s->pod_template, "metadata.annotations");
    cJSON_ArrayForEach(it, ta) {
        if (cJSON_IsString(it))
            cJSON_AddStringToObject(ann, it->string, it->valuestring);
    }
    char *hash = ctl_spec_hash(job);
    json_set_str(ann, ANN_SPEC, hash ? hash : "");
    free(hash);

    const cJSON *tspec = json_at(s->pod_template, "spec");
    cJSON *spec = cJSON_IsObject(tspec) ? cJSON_Duplicate(tspec, 1) : cJSON_CreateObject();
    if (!spec) {
        cJSON_Delete(pod);
        herr_set(e, "out of memory");
        return NULL;
    }
    cJSON_AddItemToObject(pod, "spec", spec);
    json_set_str(spec, "restartPolicy", "Never");
    /* On SIGTERM (eviction, drain, preemption) a worker finishes its step and every rank
     * checkpoints before leaving: Kubernetes' 30 s default is short for that on a large model.
     * A template's own value wins. */
    if (!cJSON_GetObjectItemCaseSensitive(spec, "terminationGracePeriodSeconds"))
        cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", POD_GRACE_S);
    json_set_str(spec, "hostname", name);
    json_set_str(spec, "subdomain", job_name);
    cJSON *c = worker_container(spec);
    if (!json_str_at(c, "name"))
        json_set_str(c, "name", "worker");
    json_set_str(c, "image", image);
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
    set_emulated_nic(env, &s->emulation, index);
    /* GPUs: ask for them unless the template already does, or they are emulated by CPU ranks. */
    if (tj_real_gpus(s)) {
        cJSON *res = json_child_object(c, "resources");
        cJSON *lim = json_child_object(res, "limits");
        if (!cJSON_GetObjectItemCaseSensitive(lim, "nvidia.com/gpu"))
            cJSON_AddNumberToObject(lim, "nvidia.com/gpu", s->gpus_per_worker);
    }
    lock_down(spec, c);
    /* the root file system is read-only: scratch, shared memory (NCCL) and checkpoints get
     * writable volumes unless the template mounts its own there */
    writable_dir(spec, c, "holmes-tmp", "/tmp", 0);
    writable_dir(spec, c, "holmes-shm", "/dev/shm", 1);
    const char *ckpt = s->training.checkpoint.path;
    if (ckpt[0] == '/' && strcmp(ckpt, "/") != 0)
        writable_dir(spec, c, "holmes-checkpoints", ckpt, 0);
    return pod;
}

cJSON *ctl_build_secret_ca(const cJSON *job, const char *ca)
{
    cJSON *s = ctl_build_secret(job);
    if (s && ca && !cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(s, "stringData"),
                                            "ca.crt", ca)) {
        cJSON_Delete(s);
        return NULL;
    }
    return s;
}

cJSON *ctl_secret_ca_patch(const cJSON *secret, const char *ca)
{
    char *want = base64_encode(ca);
    /* "ca.crt" holds a dot: a key, not a path (json_str_at would read ca, then crt) */
    const char *have = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(json_at(secret, "data"), "ca.crt"));
    const char *plain = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(json_at(secret, "stringData"), "ca.crt"));
    int same = want && ((have && !strcmp(have, want)) || (plain && !strcmp(plain, ca)));
    cJSON *p = NULL;
    if (want && !same) {
        p = cJSON_CreateObject();
        cJSON *data = p ? cJSON_AddObjectToObject(p, "data") : NULL;
        if (!data || !cJSON_AddStringToObject(data, "ca.crt", want)) {
            cJSON_Delete(p);
            p = NULL;
        }
    }
    free(want);
    return p;
}

cJSON *ctl_build_secret(const cJSON *job)
{
    char name[160];
    snprintf(name, sizeof name, "%s-token", json_str_at(job, "metadata.name"));
    cJSON *s = ctl_base_object(job, name);
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

cJSON *ctl_build_service(const cJSON *job)
{
    cJSON *s = ctl_base_object(job, json_str_at(job, "metadata.name"));
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

