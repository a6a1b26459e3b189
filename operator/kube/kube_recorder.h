/* An event recorder in the style of client-go's: events go through the correlator
 * (kube_events.h: spam filter, aggregation, de-duplication) and are then created, or patched
 * on the Event they repeat (count + 1). kube_recorder_emit only queues: a background thread
 * talks to the API, so a reconcile never waits for an Event (client-go's broadcaster is
 * asynchronous too). The queue holds at most 1000 events; beyond that new ones are dropped
 * and counted. Thread-safe. */
#ifndef HOLMES_KUBE_RECORDER_H
#define HOLMES_KUBE_RECORDER_H

#include <cjson/cJSON.h>

#include "error.h"
#include "kube_client.h"
#include "kube_events.h"

struct kube_recorder;

/* kc is borrowed; o may be NULL (client-go's defaults). Starts the sending thread. */
struct kube_recorder *kube_recorder_new(struct kube_client *kc,
                                        const struct kube_event_correlator_opts *o, herr *e);
/* Sends what is queued (waiting at most ~5 s), stops the thread, frees everything. */
void kube_recorder_free(struct kube_recorder *r);
/* Queues ev (built by kube_event_build; taken over, also on error). -1 when the queue is
 * full or the recorder stops: the event is dropped and counted. */
int kube_recorder_emit(struct kube_recorder *r, cJSON *ev);
/* Sends ev now, from the calling thread, through the same correlator. 0 when created,
 * patched or dropped by the spam filter; otherwise the API's answer (kube_client.h). */
int kube_recorder_send(struct kube_recorder *r, cJSON *ev, herr *e);
/* Waits until every queued event is sent; 0, or -1 after timeout_ms. */
int kube_recorder_flush(struct kube_recorder *r, int timeout_ms);

struct kube_recorder_counts {
    unsigned long created, patched, dropped_spam, dropped_full, failed;
};
void kube_recorder_counts(struct kube_recorder *r, struct kube_recorder_counts *out);

#endif
