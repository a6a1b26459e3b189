#include "kube_events.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "error.h"
#include "kube_map.h"

void kube_time_now(char *buf, size_t n, int micro)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (micro)
        snprintf(buf, n, "%s.%06ldZ", base, (long)tv.tv_usec);
    else
        snprintf(buf, n, "%sZ", base);
}

double kube_time_parse(const char *s)
{
    if (!s)
        return -1;
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        return -1;
    double frac = 0;
    if (*rest == '.') {
        char *end;
        frac = strtod(rest, &end);
        rest = end;
    }
    if (*rest != 'Z')
        return -1;
    return (double)timegm(&tm) + frac;
}

static const char *meta(const cJSON *obj, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *top(const cJSON *obj, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

cJSON *kube_event_build(const cJSON *obj, const char *type, const char *reason,
                        const char *message, const char *component)
{
    char now[48], gen[300], msg[1025];
    kube_time_now(now, sizeof now, 0);
    snprintf(gen, sizeof gen, "%s.", meta(obj, "name"));
    snprintf(msg, sizeof msg, "%s", message);
    herr_clean(msg); /* a message cut inside a character: well-formed UTF-8 still */
    cJSON *ev = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(ev, "metadata");
    cJSON *inv = cJSON_AddObjectToObject(ev, "involvedObject");
    cJSON *src = cJSON_AddObjectToObject(ev, "source");
    if (!md || !inv || !src || !cJSON_AddStringToObject(md, "generateName", gen) ||
        !cJSON_AddStringToObject(md, "namespace", meta(obj, "namespace")) ||
        !cJSON_AddStringToObject(inv, "apiVersion", top(obj, "apiVersion")) ||
        !cJSON_AddStringToObject(inv, "kind", top(obj, "kind")) ||
        !cJSON_AddStringToObject(inv, "name", meta(obj, "name")) ||
        !cJSON_AddStringToObject(inv, "namespace", meta(obj, "namespace")) ||
        !cJSON_AddStringToObject(inv, "uid", meta(obj, "uid")) ||
        !cJSON_AddStringToObject(inv, "resourceVersion", meta(obj, "resourceVersion")) ||
        !cJSON_AddStringToObject(ev, "type", type) || !cJSON_AddStringToObject(ev, "reason", reason) ||
        !cJSON_AddStringToObject(ev, "message", msg) ||
        !cJSON_AddStringToObject(ev, "firstTimestamp", now) ||
        !cJSON_AddStringToObject(ev, "lastTimestamp", now) || !cJSON_AddNumberToObject(ev, "count", 1) ||
        !cJSON_AddStringToObject(src, "component", component ? component : "holmes-operator") ||
        !cJSON_AddStringToObject(ev, "reportingComponent", component ? component : "holmes-operator")) {
        cJSON_Delete(ev);
        return NULL;
    }
    return ev;
}

/* ---- the correlator */

struct spam_bucket {
    double tokens, last;
};
struct similar {
    uint64_t *msgs; /* hashes of the distinct messages seen, at most max_similar */
    int n;
    double last;
};
struct observed {
    char name[256];
    char first[48];
    int count;
    double last;
};

struct kube_event_correlator {
    struct kube_event_correlator_opts o;
    struct kube_map *spam;    /* object key -> spam_bucket */
    struct kube_map *similar; /* aggregate key -> similar */
    struct kube_map *seen;    /* de-duplication key -> observed */
};

static void similar_free(void *v)
{
    struct similar *s = v;
    if (s)
        free(s->msgs);
    free(s);
}

/* The options with their defaults where unset (kube_events.h). */
static struct kube_event_correlator_opts correlator_opts(struct kube_event_correlator_opts d)
{
    d.max_similar = d.max_similar > 0 ? d.max_similar : 10;
    d.window_s = d.window_s > 0 ? d.window_s : 600;
    d.spam_burst = d.spam_burst > 0 ? d.spam_burst : 25;
    d.spam_qps = d.spam_qps > 0 ? d.spam_qps : 1.0 / 300;
    d.max_entries = d.max_entries ? d.max_entries : 4096;
    return d;
}

struct kube_event_correlator *kube_event_correlator_new(const struct kube_event_correlator_opts *o)
{
    struct kube_event_correlator *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->o = correlator_opts(o ? *o : (struct kube_event_correlator_opts){0});
    c->spam = kube_map_new();
    c->similar = kube_map_new();
    c->seen = kube_map_new();
    if (!c->spam || !c->similar || !c->seen) {
        kube_event_correlator_free(c);
        return NULL;
    }
    return c;
}

void kube_event_correlator_free(struct kube_event_correlator *c)
{
    if (!c)
        return;
    kube_map_free(c->spam, free);
    kube_map_free(c->similar, similar_free);
    kube_map_free(c->seen, free);
    free(c);
}

void kube_event_decision_clear(struct kube_event_decision *d)
{
    free(d->key);
    d->key = NULL;
}

/* ---- bounded caches: when a map is full, entries not seen within the window go; when
 * that is not enough, all of them (the cost is only a lost count). */

struct prune {
    double before;
    double (*last)(const void *v);
    char **keys;
    size_t n, cap;
};

static int collect_old(const char *key, void *value, void *user)
{
    struct prune *p = user;
    if (p->last(value) >= p->before || p->n >= p->cap)
        return 0;
    p->keys[p->n] = strdup(key);
    if (p->keys[p->n])
        p->n++;
    return 0;
}

static double spam_last(const void *v) { return ((const struct spam_bucket *)v)->last; }
static double similar_last(const void *v) { return ((const struct similar *)v)->last; }
static double observed_last(const void *v) { return ((const struct observed *)v)->last; }

static void make_room(struct kube_event_correlator *c, struct kube_map **m, double now,
                      double (*last)(const void *), void (*free_value)(void *))
{
    size_t size = kube_map_size(*m);
    if (size < c->o.max_entries)
        return;
    struct prune p = {.before = now - c->o.window_s, .last = last, .cap = size};
    p.keys = calloc(size, sizeof *p.keys);
    if (p.keys)
        kube_map_each(*m, collect_old, &p);
    for (size_t i = 0; i < p.n; i++) {
        free_value(kube_map_remove(*m, p.keys[i]));
        free(p.keys[i]);
    }
    free(p.keys);
    if (kube_map_size(*m) >= c->o.max_entries) {
        struct kube_map *fresh = kube_map_new();
        if (fresh) {
            kube_map_free(*m, free_value);
            *m = fresh;
        }
    }
}

static const char *field(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static uint64_t fnv64(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Takes a token from the object's bucket; 0 when there is none (or out of memory: the
 * event goes through). */
static int spam_allow(struct kube_event_correlator *c, const char *key, double now)
{
    struct spam_bucket *b = kube_map_get(c->spam, key);
    if (!b) {
        make_room(c, &c->spam, now, spam_last, free);
        b = malloc(sizeof *b);
        if (!b)
            return 1;
        b->tokens = c->o.spam_burst;
        b->last = now;
        if (kube_map_put(c->spam, key, b, NULL) != 0) {
            free(b);
            return 1;
        }
    }
    b->tokens += (now - b->last) * c->o.spam_qps;
    if (b->tokens > c->o.spam_burst)
        b->tokens = c->o.spam_burst;
    b->last = now;
    if (b->tokens < 1)
        return 0;
    b->tokens -= 1;
    return 1;
}

/* Counts msg among the distinct messages of agg_key; 1 when there are now max_similar. */
static int similar_full(struct kube_event_correlator *c, const char *agg_key, const char *msg,
                        double now)
{
    struct similar *s = kube_map_get(c->similar, agg_key);
    if (!s) {
        make_room(c, &c->similar, now, similar_last, similar_free);
        s = calloc(1, sizeof *s);
        if (s)
            s->msgs = calloc((size_t)c->o.max_similar, sizeof *s->msgs);
        if (!s || !s->msgs || kube_map_put(c->similar, agg_key, s, NULL) != 0) {
            similar_free(s);
            return 0;
        }
    } else if (now - s->last > c->o.window_s) {
        s->n = 0;
    }
    s->last = now;
    uint64_t h = fnv64(msg);
    int known = 0;
    for (int i = 0; i < s->n && !known; i++)
        known = s->msgs[i] == h;
    if (!known && s->n < c->o.max_similar)
        s->msgs[s->n++] = h;
    return s->n >= c->o.max_similar;
}

#define COMBINED "(combined from similar events): "

int kube_event_correlate(struct kube_event_correlator *c, cJSON *ev, double now,
                         struct kube_event_decision *d)
{
    memset(d, 0, sizeof *d);
    char *obj_key = NULL, *agg_key = NULL;
    if (asprintf(&obj_key, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", field(ev, "source", "component"),
                 field(ev, "involvedObject", "kind"), field(ev, "involvedObject", "namespace"),
                 field(ev, "involvedObject", "name"), field(ev, "involvedObject", "uid"),
                 field(ev, "involvedObject", "apiVersion")) < 0)
        return -1;
    if (!spam_allow(c, obj_key, now)) {
        free(obj_key);
        d->action = KUBE_EVENT_DROP;
        return 0;
    }
    int n = asprintf(&agg_key, "%s\x1f%s\x1f%s", obj_key, field(ev, "type", NULL),
                     field(ev, "reason", NULL));
    free(obj_key);
    if (n < 0)
        return -1;
    const char *msg = field(ev, "message", NULL);
    if (similar_full(c, agg_key, msg, now)) {
        /* One Event for all of them, keyed without the message. */
        char combined[1025];
        if (strncmp(msg, COMBINED, strlen(COMBINED)) != 0) {
            snprintf(combined, sizeof combined, COMBINED "%s", msg);
            herr_clean(combined);
            if (!cJSON_ReplaceItemInObjectCaseSensitive(ev, "message", cJSON_CreateString(combined))) {
                free(agg_key);
                return -1;
            }
        }
        d->key = agg_key;
    } else {
        n = asprintf(&d->key, "%s\x1f%s", agg_key, msg);
        free(agg_key);
        if (n < 0) {
            d->key = NULL;
            return -1;
        }
    }
    struct observed *o = kube_map_get(c->seen, d->key);
    if (o && now - o->last <= c->o.window_s) {
        d->action = KUBE_EVENT_PATCH;
        d->count = o->count + 1;
        snprintf(d->name, sizeof d->name, "%s", o->name);
        if (!cJSON_ReplaceItemInObjectCaseSensitive(ev, "count", cJSON_CreateNumber(d->count)) ||
            !cJSON_ReplaceItemInObjectCaseSensitive(ev, "firstTimestamp", cJSON_CreateString(o->first))) {
            kube_event_decision_clear(d);
            return -1;
        }
    } else {
        d->action = KUBE_EVENT_CREATE;
        d->count = 1;
    }
    return 0;
}

int kube_event_correlator_sent(struct kube_event_correlator *c, const struct kube_event_decision *d,
                               const cJSON *ev, const char *name, double now)
{
    if (!d->key || !name)
        return 0;
    struct observed *o = kube_map_get(c->seen, d->key);
    if (!o) {
        make_room(c, &c->seen, now, observed_last, free);
        o = calloc(1, sizeof *o);
        if (!o || kube_map_put(c->seen, d->key, o, NULL) != 0) {
            free(o);
            return -1;
        }
    }
    snprintf(o->name, sizeof o->name, "%s", name);
    snprintf(o->first, sizeof o->first, "%s", field(ev, "firstTimestamp", NULL));
    o->count = d->count;
    o->last = now;
    return 0;
}

void kube_event_correlator_forget(struct kube_event_correlator *c, const struct kube_event_decision *d)
{
    if (d->key)
        free(kube_map_remove(c->seen, d->key));
}

cJSON *kube_event_patch(const cJSON *ev)
{
    cJSON *p = cJSON_CreateObject();
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(ev, "count");
    if (!p || !cJSON_AddNumberToObject(p, "count", cJSON_IsNumber(count) ? count->valuedouble : 1) ||
        !cJSON_AddStringToObject(p, "lastTimestamp", field(ev, "lastTimestamp", NULL)) ||
        !cJSON_AddStringToObject(p, "message", field(ev, "message", NULL))) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}
