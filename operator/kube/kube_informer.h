/* An informer: LIST then WATCH one resource, keeping a cache keyed "namespace/name" and
 * calling a handler for every change. resourceVersion tracking, watch bookmarks, 410 Gone ->
 * relist (with DELETED for objects that vanished meanwhile), reconnect with jittered
 * exponential backoff. One thread per informer; the cache is safe to read from any thread.
 * Objects are cached as compact JSON text (memory), parsed on every read. */
#ifndef HOLMES_KUBE_INFORMER_H
#define HOLMES_KUBE_INFORMER_H

#include <cjson/cJSON.h>

#include "error.h"
#include "kube_client.h"
#include "kube_watch.h"

/* Takes ownership of obj and returns what the cache keeps (e.g. a trimmed copy; NULL = drop). */
typedef cJSON *(*kube_transform_fn)(cJSON *obj);
/* Called on the informer thread after the cache changed. For DELETED, obj is the last known
 * state; old is the previous state for MODIFIED (else NULL). Must not block for long. */
typedef void (*kube_handler_fn)(void *user, enum kube_event_type t, const cJSON *obj,
                                const cJSON *old);

struct kube_informer_opts {
    const struct kube_resource *resource;
    const char *ns;             /* NULL = all namespaces */
    const char *label_selector;
    kube_transform_fn transform;
    kube_handler_fn handler;
    void *user;
    int list_limit;             /* page size (default 500) */
    int watch_timeout_s;        /* default 300 */
    double backoff_max_s;       /* reconnect backoff cap (default 30) */
    const char *index_label;    /* objects are also indexed by ns + this label's value */
};

struct kube_informer_stats {
    unsigned long lists, watches, watch_errors, gone, events;
};

struct kube_informer;

struct kube_informer *kube_informer_new(struct kube_client *kc,
                                        const struct kube_informer_opts *o, herr *e);
int kube_informer_start(struct kube_informer *inf, herr *e);
/* Stops the thread (within about a second) and frees everything. */
void kube_informer_free(struct kube_informer *inf);
/* Waits until the first LIST is in the cache; returns 0, or -1 after timeout_ms. */
int kube_informer_wait_synced(struct kube_informer *inf, int timeout_ms);
/* A deep copy of the cached object (caller frees), or NULL. */
cJSON *kube_informer_get(struct kube_informer *inf, const char *ns, const char *name);
/* Copies of the cached objects in namespace ns whose index_label has value (a JSON array,
 * caller frees; empty when none or no index_label). */
cJSON *kube_informer_list_indexed(struct kube_informer *inf, const char *ns, const char *value);
/* Calls fn on (a parsed copy of) every cached object; read lock held: fn must not call back
 * into the informer. fn returns non-zero to stop. */
void kube_informer_each(struct kube_informer *inf, int (*fn)(const cJSON *obj, void *user),
                        void *user);
size_t kube_informer_size(struct kube_informer *inf);
void kube_informer_stats(struct kube_informer *inf, struct kube_informer_stats *out);
/* The last resourceVersion seen (copied into buf). */
void kube_informer_resource_version(struct kube_informer *inf, char *buf, size_t n);

/* "namespace/name" of an object into buf; returns -1 when metadata.name is missing. */
int kube_object_key(const cJSON *obj, char *buf, size_t n);
/* Small accessors for API objects (NULL when absent). */
const char *kube_meta_str(const cJSON *obj, const char *field);
const char *kube_label(const cJSON *obj, const char *key);

#endif
