/* core/v1 Events about an object, for what users must see in `kubectl describe`. */
#ifndef HOLMES_KUBE_EVENTS_H
#define HOLMES_KUBE_EVENTS_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Builds an Event (to POST to the involved object's namespace) about obj (an API object with
 * apiVersion, kind and metadata). type: "Normal" or "Warning"; reason: CamelCase. Messages
 * longer than 1 KiB are cut. NULL when out of memory. */
cJSON *kube_event_build(const cJSON *obj, const char *type, const char *reason,
                        const char *message, const char *component);
/* The current time as RFC 3339 ("2024-05-01T12:00:00Z"); micro adds microseconds. */
void kube_time_now(char *buf, size_t n, int micro);
/* Parses RFC 3339 ("...Z", optional fraction); returns seconds since the epoch or -1. */
double kube_time_parse(const char *s);

/* ---- client-go's EventCorrelator: what to do with an Event before it is sent.
 * - Spam filter: a token bucket per involved object (and source): burst spam_burst, refilled
 *   at spam_qps; an event without a token is dropped.
 * - Aggregation: events alike but for the message (same source, object, type, reason) are
 *   counted by distinct message within window_s; from the max_similar-th distinct message
 *   on, the event's message becomes "(combined from similar events): <message>" and they
 *   all update one Event.
 * - De-duplication: an event identical to one sent within window_s (same object, type,
 *   reason, message) is not created again: the existing Event is patched (count + 1,
 *   lastTimestamp, message).
 * Not thread-safe (the recorder holds a lock). Its caches are bounded (max_entries each;
 * when full, entries older than the window go, and if that is not enough, all of them). */
struct kube_event_correlator_opts {
    int max_similar;    /* default 10 (client-go's maxEvents) */
    double window_s;    /* default 600 */
    double spam_burst;  /* default 25 */
    double spam_qps;    /* default 1/300 */
    size_t max_entries; /* default 4096 */
};
enum kube_event_action { KUBE_EVENT_DROP, KUBE_EVENT_CREATE, KUBE_EVENT_PATCH };
struct kube_event_decision {
    enum kube_event_action action;
    char *key;      /* de-duplication key (caller frees with kube_event_decision_clear) */
    char name[256]; /* PATCH: the Event to patch */
    int count;      /* the count the Event will have */
};
struct kube_event_correlator;

/* o may be NULL (defaults); zero fields take their defaults. NULL when out of memory. */
struct kube_event_correlator *kube_event_correlator_new(const struct kube_event_correlator_opts *o);
void kube_event_correlator_free(struct kube_event_correlator *c);
/* Decides about ev (built by kube_event_build) at time now (seconds): may rewrite its
 * message (combined) and, for a PATCH, its count and firstTimestamp. -1 when out of memory. */
int kube_event_correlate(struct kube_event_correlator *c, cJSON *ev, double now,
                         struct kube_event_decision *d);
/* After the API took a CREATE or PATCH: remembers the Event's name, count and
 * firstTimestamp under d->key, so that the next repeat patches it. */
int kube_event_correlator_sent(struct kube_event_correlator *c, const struct kube_event_decision *d,
                               const cJSON *ev, const char *name, double now);
/* Forgets the Event under d->key (e.g. its PATCH answered 404: it expired). */
void kube_event_correlator_forget(struct kube_event_correlator *c, const struct kube_event_decision *d);
void kube_event_decision_clear(struct kube_event_decision *d);
/* The merge patch of a repeat: {count, lastTimestamp, message} from ev. */
cJSON *kube_event_patch(const cJSON *ev);

#endif
