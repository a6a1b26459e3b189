/* WATCH streams: a streaming splitter that finds each top-level JSON value in a byte stream
 * however the bytes are cut into reads (events split across chunks, objects of any size up to
 * a limit), and the watch call that feeds it from a chunked HTTP answer. */
#ifndef HOLMES_KUBE_WATCH_H
#define HOLMES_KUBE_WATCH_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "kube_client.h"

/* ---- JSON stream splitter */
struct kube_json_stream;
/* max_value: the largest single value accepted, in bytes. */
struct kube_json_stream *kube_json_stream_new(size_t max_value);
void kube_json_stream_free(struct kube_json_stream *s);
/* Called once per complete value; the callback owns v. A non-zero return stops feeding and
 * is returned by kube_json_stream_feed. */
typedef int (*kube_json_value_fn)(cJSON *v, void *user);
/* Feeds n bytes. Returns 0, the callback's non-zero value, or -1 with e set when the stream
 * is not JSON or a value exceeds max_value. */
int kube_json_stream_feed(struct kube_json_stream *s, const char *data, size_t n,
                          kube_json_value_fn fn, void *user, herr *e);
/* Bytes held for an unfinished value. */
size_t kube_json_stream_pending(const struct kube_json_stream *s);

/* ---- WATCH */
enum kube_event_type { KUBE_ADDED, KUBE_MODIFIED, KUBE_DELETED, KUBE_BOOKMARK, KUBE_ERROR };
const char *kube_event_name(enum kube_event_type t);

/* One value of a watch stream, {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}},
 * taken: its type and its object (the caller's). -1 naming the field when v is not an event. */
int kube_watch_event_decode(cJSON *v, enum kube_event_type *t, cJSON **obj, herr *e);

/* Called per event with the event's object (owned by the callee: free it or keep it).
 * Return 0 to go on, non-zero to stop the watch (kube_watch returns that value). */
typedef int (*kube_watch_fn)(enum kube_event_type t, cJSON *obj, void *user);

struct kube_watch_opts {
    const char *ns;             /* NULL = all namespaces */
    const char *label_selector; /* NULL = none */
    const char *field_selector;
    const char *resource_version;
    int timeout_s;              /* asks the server to end the stream after this (default 300) */
    int bookmarks;              /* allowWatchBookmarks */
    const volatile int *stop;   /* polled; non-zero ends the watch (returns 0) */
};

/* Streams events until the server ends the stream (returns 0), the callback stops it (its
 * value), *stop is set (0), or an error: the HTTP status when the server refused the watch,
 * -1 when the connection broke or the stream was not JSON. */
int kube_watch(struct kube_client *kc, const struct kube_resource *r,
               const struct kube_watch_opts *o, kube_watch_fn fn, void *user, herr *e);

#endif
