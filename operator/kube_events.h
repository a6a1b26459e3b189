/* core/v1 Events about an object, for what users must see in `kubectl describe`. */
#ifndef HOLMES_KUBE_EVENTS_H
#define HOLMES_KUBE_EVENTS_H

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

#endif
