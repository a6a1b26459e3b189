#include "kube_informer.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kube_map.h"
#include "log.h"

struct kube_informer {
    struct kube_client *kc;
    struct kube_informer_opts o;
    char *ns, *selector;
    pthread_rwlock_t lock;       /* guards cache, index and rv */
    struct kube_map *cache;      /* key -> struct entry */
    struct kube_map *index;      /* "ns/<label value>" -> cJSON object used as a set of keys */
    char rv[64];
    pthread_t thread;
    int started;
    volatile int stop;
    pthread_mutex_t sync_lock;
    pthread_cond_t sync_cond;
    int synced;
    struct kube_informer_stats stats;
    char *index_label;
};

/* A cached object, kept as compact JSON text: a parsed cJSON tree costs about five times
 * the memory, and 8,000 pods must fit in a few MB. */
struct entry {
    char *json;
    char *rv;
    char *idx; /* index key or NULL */
};

static void entry_free(void *v)
{
    struct entry *e = v;
    if (!e)
        return;
    free(e->json);
    free(e->rv);
    free(e->idx);
    free(e);
}

static cJSON *entry_parse(const struct entry *e)
{
    return e ? cJSON_Parse(e->json) : NULL;
}

/* The index key of obj ("ns/<value of the index label>") into buf; 0 when it has one. */
static int index_key(const struct kube_informer *inf, const cJSON *obj, char *buf, size_t n)
{
    if (!inf->index_label)
        return -1;
    const char *v = kube_label(obj, inf->index_label), *ns = kube_meta_str(obj, "namespace");
    if (!v)
        return -1;
    snprintf(buf, n, "%s/%s", ns ? ns : "", v);
    return 0;
}

static void index_del(struct kube_informer *inf, const char *idx, const char *key)
{
    if (!idx)
        return;
    cJSON *set = kube_map_get(inf->index, idx);
    if (!set)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(set, key);
    if (!set->child)
        cJSON_Delete(kube_map_remove(inf->index, idx));
}

static void index_add(struct kube_informer *inf, const char *idx, const char *key)
{
    if (!idx)
        return;
    cJSON *set = kube_map_get(inf->index, idx);
    if (!set) {
        set = cJSON_CreateObject();
        if (!set || kube_map_put(inf->index, idx, set, NULL) != 0) {
            cJSON_Delete(set);
            return;
        }
    }
    if (!cJSON_GetObjectItemCaseSensitive(set, key))
        cJSON_AddItemToObject(set, key, cJSON_CreateTrue());
}

const char *kube_meta_str(const cJSON *obj, const char *field)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, field);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

const char *kube_label(const cJSON *obj, const char *key)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(md, "labels");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int kube_object_key(const cJSON *obj, char *buf, size_t n)
{
    const char *ns = kube_meta_str(obj, "namespace"), *name = kube_meta_str(obj, "name");
    if (!name)
        return -1;
    snprintf(buf, n, "%s/%s", ns ? ns : "", name);
    return 0;
}

/* The options with their defaults where unset (kube_informer.h). */
static struct kube_informer_opts informer_opts(struct kube_informer_opts d)
{
    d.list_limit = d.list_limit > 0 ? d.list_limit : 500;
    d.watch_timeout_s = d.watch_timeout_s > 0 ? d.watch_timeout_s : 300;
    d.backoff_max_s = d.backoff_max_s > 0 ? d.backoff_max_s : 30;
    return d;
}

struct kube_informer *kube_informer_new(struct kube_client *kc,
                                        const struct kube_informer_opts *o, herr *e)
{
    struct kube_informer_opts opts = informer_opts(*o);
    struct kube_informer *inf = calloc(1, sizeof *inf);
    if (!inf) {
        herr_set(e, "informer: out of memory");
        return NULL;
    }
    inf->kc = kc;
    inf->o = opts;
    inf->ns = o->ns ? strdup(o->ns) : NULL;
    inf->selector = o->label_selector ? strdup(o->label_selector) : NULL;
    inf->cache = kube_map_new();
    inf->index = kube_map_new();
    inf->index_label = o->index_label ? strdup(o->index_label) : NULL;
    if (!inf->cache || !inf->index || (o->ns && !inf->ns) || (o->label_selector && !inf->selector) ||
        (o->index_label && !inf->index_label)) {
        kube_map_free(inf->cache, NULL);
        kube_map_free(inf->index, NULL);
        free(inf->index_label);
        free(inf->ns);
        free(inf->selector);
        free(inf);
        herr_set(e, "informer: out of memory");
        return NULL;
    }
    inf->o.ns = inf->ns;
    inf->o.label_selector = inf->selector;
    inf->o.index_label = inf->index_label;
    pthread_rwlock_init(&inf->lock, NULL);
    pthread_mutex_init(&inf->sync_lock, NULL);
    pthread_cond_init(&inf->sync_cond, NULL);
    return inf;
}

static void bump(struct kube_informer *inf, unsigned long *counter)
{
    pthread_rwlock_wrlock(&inf->lock);
    (*counter)++;
    pthread_rwlock_unlock(&inf->lock);
}

static cJSON *transform(struct kube_informer *inf, cJSON *obj)
{
    return inf->o.transform ? inf->o.transform(obj) : obj;
}

static void set_rv(struct kube_informer *inf, const char *rv)
{
    if (rv)
        snprintf(inf->rv, sizeof inf->rv, "%s", rv);
}

/* Applies one change to the cache and calls the handler. Takes ownership of obj. */
static void apply(struct kube_informer *inf, enum kube_event_type t, cJSON *obj)
{
    char key[512], idx[512];
    const char *rv = kube_meta_str(obj, "resourceVersion");
    if (kube_object_key(obj, key, sizeof key) != 0) {
        cJSON_Delete(obj);
        return;
    }
    char rvbuf[64];
    snprintf(rvbuf, sizeof rvbuf, "%s", rv ? rv : "");
    cJSON *kept = t == KUBE_DELETED ? obj : transform(inf, obj);
    struct entry *ne = NULL, *old = NULL;
    if (t != KUBE_DELETED && kept) {
        ne = calloc(1, sizeof *ne);
        if (ne) {
            ne->json = cJSON_PrintUnformatted(kept);
            ne->rv = strdup(rvbuf);
            if (index_key(inf, kept, idx, sizeof idx) == 0)
                ne->idx = strdup(idx);
        }
        if (!ne || !ne->json || !ne->rv) {
            entry_free(ne);
            cJSON_Delete(kept);
            return;
        }
    }
    pthread_rwlock_wrlock(&inf->lock);
    if (t == KUBE_DELETED) {
        old = kube_map_remove(inf->cache, key);
    } else if (ne) {
        if (kube_map_put(inf->cache, key, ne, (void **)&old) != 0) {
            pthread_rwlock_unlock(&inf->lock);
            entry_free(ne);
            cJSON_Delete(kept);
            return;
        }
    }
    if (old)
        index_del(inf, old->idx, key);
    if (ne)
        index_add(inf, ne->idx, key);
    set_rv(inf, rvbuf);
    inf->stats.events++;
    pthread_rwlock_unlock(&inf->lock);
    if (inf->o.handler) {
        cJSON *oldobj = old ? entry_parse(old) : NULL;
        if (t == KUBE_DELETED)
            inf->o.handler(inf->o.user, t, oldobj ? oldobj : obj, NULL);
        else if (kept)
            inf->o.handler(inf->o.user, old ? KUBE_MODIFIED : KUBE_ADDED, kept, oldobj);
        cJSON_Delete(oldobj);
    }
    if (t == KUBE_DELETED)
        cJSON_Delete(obj);
    else
        cJSON_Delete(kept);
    entry_free(old);
}

struct relist_ctx {
    struct kube_map *seen;
    struct kube_informer *inf;
    cJSON *gone; /* array of keys to delete */
};

static int collect_gone(const char *key, void *value, void *user)
{
    struct relist_ctx *c = user;
    (void)value;
    if (!kube_map_get(c->seen, key))
        cJSON_AddItemToArray(c->gone, cJSON_CreateString(key));
    return 0;
}

/* LIST into the cache: ADDED/MODIFIED for what is listed, DELETED for what is gone. */
static int relist(struct kube_informer *inf, herr *e)
{
    cJSON *items = NULL;
    char *rv = NULL;
    int rc = kube_list(inf->kc, inf->o.resource, inf->ns, inf->selector, NULL, inf->o.list_limit,
                       &items, &rv, e);
    if (rc != 0)
        return rc;
    bump(inf, &inf->stats.lists);
    struct kube_map *seen = kube_map_new();
    cJSON *gone = cJSON_CreateArray();
    if (!seen || !gone) {
        kube_map_free(seen, NULL);
        cJSON_Delete(gone);
        cJSON_Delete(items);
        free(rv);
        return herr_set(e, "informer: out of memory");
    }
    cJSON *it;
    while ((it = cJSON_DetachItemFromArray(items, 0))) {
        char key[512];
        if (kube_object_key(it, key, sizeof key) != 0) {
            cJSON_Delete(it);
            continue;
        }
        kube_map_put(seen, key, (void *)1, NULL);
        /* Unchanged objects (same resourceVersion) are not re-announced. */
        pthread_rwlock_rdlock(&inf->lock);
        const struct entry *cur = kube_map_get(inf->cache, key);
        const char *a = cur ? cur->rv : NULL;
        const char *b = kube_meta_str(it, "resourceVersion");
        int same = a && b && strcmp(a, b) == 0;
        pthread_rwlock_unlock(&inf->lock);
        if (same)
            cJSON_Delete(it);
        else
            apply(inf, KUBE_MODIFIED, it);
    }
    cJSON_Delete(items);
    struct relist_ctx c = {seen, inf, gone};
    pthread_rwlock_rdlock(&inf->lock);
    kube_map_each(inf->cache, collect_gone, &c);
    pthread_rwlock_unlock(&inf->lock);
    cJSON *k;
    cJSON_ArrayForEach(k, gone) {
        pthread_rwlock_rdlock(&inf->lock);
        cJSON *copy = entry_parse(kube_map_get(inf->cache, k->valuestring));
        pthread_rwlock_unlock(&inf->lock);
        if (copy)
            apply(inf, KUBE_DELETED, copy);
    }
    cJSON_Delete(gone);
    kube_map_free(seen, NULL);
    pthread_rwlock_wrlock(&inf->lock);
    set_rv(inf, rv);
    pthread_rwlock_unlock(&inf->lock);
    free(rv);
    pthread_mutex_lock(&inf->sync_lock);
    inf->synced = 1;
    pthread_cond_broadcast(&inf->sync_cond);
    pthread_mutex_unlock(&inf->sync_lock);
    return 0;
}

#define GONE 410

static int on_event(enum kube_event_type t, cJSON *obj, void *user)
{
    struct kube_informer *inf = user;
    if (t == KUBE_ERROR) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
        int c = cJSON_IsNumber(code) ? code->valueint : 500;
        cJSON_Delete(obj);
        return c == GONE ? GONE : (c ? c : 500);
    }
    if (t == KUBE_BOOKMARK) {
        const char *rv = kube_meta_str(obj, "resourceVersion");
        pthread_rwlock_wrlock(&inf->lock);
        set_rv(inf, rv);
        pthread_rwlock_unlock(&inf->lock);
        cJSON_Delete(obj);
        return 0;
    }
    apply(inf, t, obj);
    return 0;
}

/* Sleeps up to s seconds, waking early when stopping. */
static void nap(struct kube_informer *inf, double s)
{
    while (s > 0 && !inf->stop) {
        double step = s < 0.1 ? s : 0.1;
        struct timespec ts = {0, (long)(step * 1e9)};
        nanosleep(&ts, NULL);
        s -= step;
    }
}

static void *run(void *arg)
{
    struct kube_informer *inf = arg;
    int need_list = 1;
    double backoff = 0.1;
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)inf;
    while (!inf->stop) {
        herr e = {0};
        int rc;
        if (need_list) {
            rc = relist(inf, &e);
            if (rc != 0) {
                log_warn("informer %s: list failed (retrying): %s", inf->o.resource->resource, e.msg);
                goto backoff;
            }
            need_list = 0;
        }
        char rv[64];
        pthread_rwlock_rdlock(&inf->lock);
        snprintf(rv, sizeof rv, "%s", inf->rv);
        pthread_rwlock_unlock(&inf->lock);
        struct kube_watch_opts wo = {.ns = inf->ns, .label_selector = inf->selector,
                                     .resource_version = rv, .timeout_s = inf->o.watch_timeout_s,
                                     .bookmarks = 1, .stop = &inf->stop};
        bump(inf, &inf->stats.watches);
        rc = kube_watch(inf->kc, inf->o.resource, &wo, on_event, inf, &e);
        if (rc == 0) {
            backoff = 0.1;
            continue;
        }
        if (rc == GONE) {
            bump(inf, &inf->stats.gone);
            log_info("informer %s: resourceVersion %s is too old (410 Gone); relisting",
                     inf->o.resource->resource, rv);
            need_list = 1;
            backoff = 0.1;
            continue;
        }
        bump(inf, &inf->stats.watch_errors);
        log_warn("informer %s: watch failed (reconnecting): %s", inf->o.resource->resource, e.msg);
    backoff:
        if (inf->stop)
            break;
        {
            /* Full jitter in [backoff/2, backoff]. */
            double j = backoff * (0.5 + 0.5 * (double)rand_r(&seed) / RAND_MAX);
            nap(inf, j);
            backoff *= 2;
            if (backoff > inf->o.backoff_max_s)
                backoff = inf->o.backoff_max_s;
        }
    }
    return NULL;
}

int kube_informer_start(struct kube_informer *inf, herr *e)
{
    int rc = pthread_create(&inf->thread, NULL, run, inf);
    if (rc != 0)
        return herr_set(e, "informer %s: pthread_create: %s", inf->o.resource->resource,
                        strerror(rc));
    inf->started = 1;
    return 0;
}

static void free_json(void *v) { cJSON_Delete(v); }

void kube_informer_free(struct kube_informer *inf)
{
    if (!inf)
        return;
    inf->stop = 1;
    if (inf->started)
        pthread_join(inf->thread, NULL);
    kube_map_free(inf->cache, entry_free);
    kube_map_free(inf->index, free_json);
    free(inf->index_label);
    pthread_rwlock_destroy(&inf->lock);
    pthread_mutex_destroy(&inf->sync_lock);
    pthread_cond_destroy(&inf->sync_cond);
    free(inf->ns);
    free(inf->selector);
    free(inf);
}

int kube_informer_wait_synced(struct kube_informer *inf, int timeout_ms)
{
    struct timespec dl = clock_deadline(CLOCK_REALTIME, timeout_ms / 1000.0);
    pthread_mutex_lock(&inf->sync_lock);
    int rc = 0;
    while (!inf->synced && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&inf->sync_cond, &inf->sync_lock, &dl);
    int ok = inf->synced;
    pthread_mutex_unlock(&inf->sync_lock);
    return ok ? 0 : -1;
}

cJSON *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name)
{
    char key[512];
    snprintf(key, sizeof key, "%s/%s", ns ? ns : "", name);
    pthread_rwlock_rdlock(&inf->lock);
    cJSON *copy = entry_parse(kube_map_get(inf->cache, key));
    pthread_rwlock_unlock(&inf->lock);
    return copy;
}

struct each_ctx {
    int (*fn)(const cJSON *obj, void *user);
    void *user;
};

static int each_one(const char *key, void *value, void *user)
{
    struct each_ctx *c = user;
    (void)key;
    cJSON *o = entry_parse(value);
    if (!o)
        return 0;
    int rc = c->fn(o, c->user);
    cJSON_Delete(o);
    return rc;
}

cJSON *kube_informer_list_indexed(struct kube_informer *inf, const char *ns, const char *value)
{
    char idx[512];
    snprintf(idx, sizeof idx, "%s/%s", ns ? ns : "", value);
    cJSON *out = cJSON_CreateArray();
    if (!out)
        return NULL;
    pthread_rwlock_rdlock(&inf->lock);
    const cJSON *set = kube_map_get(inf->index, idx), *k;
    cJSON_ArrayForEach(k, set) {
        cJSON *o = entry_parse(kube_map_get(inf->cache, k->string));
        if (o)
            cJSON_AddItemToArray(out, o);
    }
    pthread_rwlock_unlock(&inf->lock);
    return out;
}

void kube_informer_each(struct kube_informer *inf, int (*fn)(const cJSON *obj, void *user),
                        void *user)
{
    struct each_ctx c = {fn, user};
    pthread_rwlock_rdlock(&inf->lock);
    kube_map_each(inf->cache, each_one, &c);
    pthread_rwlock_unlock(&inf->lock);
}

size_t kube_informer_size(struct kube_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = kube_map_size(inf->cache);
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out)
{
    pthread_rwlock_rdlock(&inf->lock);
    *out = inf->stats;
    pthread_rwlock_unlock(&inf->lock);
}

void kube_informer_resource_version(struct kube_informer *inf, char *buf, size_t n)
{
    pthread_rwlock_rdlock(&inf->lock);
    snprintf(buf, n, "%s", inf->rv);
    pthread_rwlock_unlock(&inf->lock);
}
