#include "kube_lease.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kube_events.h"
#include "log.h"

struct kube_lease {
    struct kube_client *kc;
    struct kube_lease_opts o;
    char *ns, *name, *id;
    atomic_int leader;
    char observed[512];      /* holder + renewTime last seen */
    double observed_at;      /* monotonic time we first saw it */
    double last_renew;       /* monotonic time of our last successful renew */
    pthread_t thread;
    int running;
    volatile int stop;
    void (*on_lost)(void *);
    void *user;
};

static void nap(struct kube_lease *l, const volatile int *stop, double s)
{
    while (s > 0 && !l->stop && !(stop && *stop)) {
        double step = s < 0.05 ? s : 0.05;
        struct timespec ts = {0, (long)(step * 1e9)};
        nanosleep(&ts, NULL);
        s -= step;
    }
}

/* The options with their defaults where unset (kube_lease.h). */
static struct kube_lease_opts lease_opts(struct kube_lease_opts d)
{
    d.duration_s = d.duration_s > 0 ? d.duration_s : 15;
    d.renew_deadline_s = d.renew_deadline_s > 0 ? d.renew_deadline_s : 10;
    d.retry_s = d.retry_s > 0 ? d.retry_s : 2;
    return d;
}

struct kube_lease *kube_lease_new(struct kube_client *kc, const struct kube_lease_opts *o, herr *e)
{
    if (!o->ns || !o->name || !o->identity || !*o->identity) {
        herr_set(e, "leader election: lease namespace, name and identity are required");
        return NULL;
    }
    struct kube_lease *l = calloc(1, sizeof *l);
    if (!l) {
        herr_set(e, "leader election: out of memory");
        return NULL;
    }
    l->o = lease_opts(*o);
    l->kc = kc;
    l->ns = strdup(o->ns);
    l->name = strdup(o->name);
    l->id = strdup(o->identity);
    if (!l->ns || !l->name || !l->id) {
        kube_lease_free(l);
        herr_set(e, "leader election: out of memory");
        return NULL;
    }
    return l;
}

static const char *sget(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *lease_spec(struct kube_lease *l, const char *holder, int transitions, int acquire)
{
    char now[48];
    kube_time_now(now, sizeof now, 1);
    cJSON *spec = cJSON_CreateObject();
    if (!spec)
        return NULL;
    cJSON_AddStringToObject(spec, "holderIdentity", holder);
    cJSON_AddNumberToObject(spec, "leaseDurationSeconds", (int)(l->o.duration_s + 0.5));
    if (acquire)
        cJSON_AddStringToObject(spec, "acquireTime", now);
    cJSON_AddStringToObject(spec, "renewTime", now);
    if (transitions >= 0)
        cJSON_AddNumberToObject(spec, "leaseTransitions", transitions);
    return spec;
}

static int patch_lease(struct kube_lease *l, const char *rv, cJSON *spec, herr *e)
{
    cJSON *patch = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(patch, "metadata");
    if (!md || !spec) {
        cJSON_Delete(patch);
        cJSON_Delete(spec);
        return herr_set(e, "out of memory");
    }
    cJSON_AddStringToObject(md, "resourceVersion", rv);
    cJSON_AddItemToObject(patch, "spec", spec);
    int rc = kube_patch(l->kc, &KUBE_LEASES, l->ns, l->name, NULL, patch, NULL, e);
    cJSON_Delete(patch);
    return rc;
}

int kube_lease_try(struct kube_lease *l, herr *e)
{
    cJSON *lease = NULL;
    int rc = kube_get(l->kc, &KUBE_LEASES, l->ns, l->name, &lease, e);
    if (rc == 404) {
        cJSON *obj = cJSON_CreateObject();
        cJSON *md = cJSON_AddObjectToObject(obj, "metadata");
        cJSON *spec = lease_spec(l, l->id, 0, 1);
        if (!md || !spec) {
            cJSON_Delete(obj);
            cJSON_Delete(spec);
            return herr_set(e, "out of memory");
        }
        cJSON_AddStringToObject(md, "name", l->name);
        cJSON_AddItemToObject(obj, "spec", spec);
        rc = kube_create(l->kc, &KUBE_LEASES, l->ns, obj, NULL, e);
        cJSON_Delete(obj);
        if (rc == 0) {
            l->last_renew = clock_mono_s();
            return 1;
        }
        return rc == 409 ? 0 : -1;
    }
    if (rc != 0)
        return -1;
    const char *rv = sget(lease, "metadata", "resourceVersion");
    const char *holder = sget(lease, "spec", "holderIdentity");
    const char *renew = sget(lease, "spec", "renewTime");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(lease, "spec"),
                                                      "leaseTransitions");
    int transitions = cJSON_IsNumber(tr) ? tr->valueint : 0;
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(lease, "spec"),
                                                       "leaseDurationSeconds");
    double duration = cJSON_IsNumber(dur) ? dur->valuedouble : l->o.duration_s;
    int result;
    if (holder && !strcmp(holder, l->id)) {
        /* Renew. */
        rc = patch_lease(l, rv ? rv : "", lease_spec(l, l->id, -1, 0), e);
        result = rc == 0 ? 1 : rc == 409 ? 0 : -1;
    } else {
        char seen[512];
        snprintf(seen, sizeof seen, "%s|%s", holder ? holder : "", renew ? renew : "");
        double now = clock_mono_s();
        if (strcmp(seen, l->observed) != 0) {
            snprintf(l->observed, sizeof l->observed, "%s", seen);
            l->observed_at = now;
        }
        int free_now = !holder || !*holder;
        if (!free_now && now - l->observed_at < duration) {
            result = 0;
        } else {
            rc = patch_lease(l, rv ? rv : "", lease_spec(l, l->id, transitions + 1, 1), e);
            result = rc == 0 ? 1 : rc == 409 ? 0 : -1;
        }
    }
    if (result == 1)
        l->last_renew = clock_mono_s();
    cJSON_Delete(lease);
    return result;
}

static void *renew_loop(void *arg)
{
    struct kube_lease *l = arg;
    while (!l->stop) {
        nap(l, NULL, l->o.retry_s);
        if (l->stop)
            break;
        herr e = {0};
        int r = kube_lease_try(l, &e);
        if (r == 1)
            continue;
        if (r == 0 || clock_mono_s() - l->last_renew > l->o.renew_deadline_s) {
            log_error("leader election: lost lease %s/%s%s%s", l->ns, l->name, r < 0 ? ": " : "",
                      r < 0 ? e.msg : "");
            atomic_store(&l->leader, 0);
            if (l->on_lost)
                l->on_lost(l->user);
            break;
        }
        log_warn("leader election: renew failed, retrying: %s", e.msg);
    }
    return NULL;
}

int kube_lease_run(struct kube_lease *l, const volatile int *stop, void (*on_lost)(void *),
                   void *user)
{
    int logged = 0;
    while (!(stop && *stop) && !l->stop) {
        herr e = {0};
        int r = kube_lease_try(l, &e);
        if (r == 1) {
            atomic_store(&l->leader, 1);
            log_info("leader election: %s holds lease %s/%s", l->id, l->ns, l->name);
            l->on_lost = on_lost;
            l->user = user;
            if (pthread_create(&l->thread, NULL, renew_loop, l) != 0)
                return -1;
            l->running = 1;
            return 0;
        }
        if (r < 0)
            log_warn("leader election: %s", e.msg);
        else if (!logged++)
            log_info("leader election: lease %s/%s is held by another; waiting", l->ns, l->name);
        nap(l, stop, l->o.retry_s);
    }
    return -1;
}

int kube_lease_is_leader(struct kube_lease *l) { return atomic_load(&l->leader); }

void kube_lease_release(struct kube_lease *l)
{
    l->stop = 1;
    if (l->running) {
        pthread_join(l->thread, NULL);
        l->running = 0;
    }
    if (!atomic_load(&l->leader))
        return;
    atomic_store(&l->leader, 0);
    herr e;
    cJSON *lease = NULL;
    if (kube_get(l->kc, &KUBE_LEASES, l->ns, l->name, &lease, &e) == 0) {
        const char *holder = sget(lease, "spec", "holderIdentity");
        const char *rv = sget(lease, "metadata", "resourceVersion");
        if (holder && !strcmp(holder, l->id)) {
            cJSON *spec = cJSON_CreateObject();
            cJSON_AddStringToObject(spec, "holderIdentity", "");
            cJSON_AddNumberToObject(spec, "leaseDurationSeconds", 1);
            if (patch_lease(l, rv ? rv : "", spec, &e) != 0)
                log_warn("leader election: release failed: %s", e.msg);
            else
                log_info("leader election: released lease %s/%s", l->ns, l->name);
        }
    }
    cJSON_Delete(lease);
}

void kube_lease_free(struct kube_lease *l)
{
    if (!l)
        return;
    if (l->running) {
        l->stop = 1;
        pthread_join(l->thread, NULL);
    }
    free(l->ns);
    free(l->name);
    free(l->id);
    free(l);
}
