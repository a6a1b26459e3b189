#include "kube_recorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "json.h"
#include "log.h"

#define QUEUE_MAX 1000

struct kube_recorder {
    struct kube_client *kc;
    struct kube_event_correlator *corr;
    pthread_mutex_t send_lock; /* the correlator, and one event on the wire at a time */
    pthread_mutex_t lock;      /* the queue */
    pthread_cond_t more, idle;
    cJSON *queue[QUEUE_MAX];
    int head, len, busy, stopping;
    pthread_t thread;
    int started;
    struct kube_recorder_counts counts;
};

static void count(struct kube_recorder *r, unsigned long *field)
{
    pthread_mutex_lock(&r->lock);
    (*field)++;
    pthread_mutex_unlock(&r->lock);
}

/* POST ev; on success remembers the new Event's name under d's key. */
static int create(struct kube_recorder *r, struct kube_event_decision *d, const cJSON *ev,
                  const char *ns, double t, herr *e)
{
    cJSON *out = NULL;
    int rc = kube_create(r->kc, &KUBE_EVENTS, ns, ev, &out, e);
    if (rc == 0) {
        kube_event_correlator_sent(r->corr, d, ev, json_str_at(out, "metadata.name"), t);
        count(r, &r->counts.created);
    }
    cJSON_Delete(out);
    return rc;
}

int kube_recorder_send(struct kube_recorder *r, cJSON *ev, herr *e)
{
    const char *ns = json_str_at(ev, "metadata.namespace");
    if (!ns || !*ns)
        ns = json_str_at(ev, "involvedObject.namespace");
    if (!ns || !*ns) {
        cJSON_Delete(ev);
        return herr_set(e, "event: involvedObject.namespace is empty");
    }
    char nsbuf[256];
    snprintf(nsbuf, sizeof nsbuf, "%s", ns);
    pthread_mutex_lock(&r->send_lock);
    double t = clock_wall_s();
    struct kube_event_decision d;
    int rc = 0;
    if (kube_event_correlate(r->corr, ev, t, &d) != 0) {
        rc = herr_set(e, "event: out of memory");
    } else if (d.action == KUBE_EVENT_DROP) {
        count(r, &r->counts.dropped_spam);
    } else if (d.action == KUBE_EVENT_CREATE) {
        rc = create(r, &d, ev, nsbuf, t, e);
    } else {
        cJSON *patch = kube_event_patch(ev);
        rc = patch ? kube_patch(r->kc, &KUBE_EVENTS, nsbuf, d.name, NULL, patch, NULL, e)
                   : herr_set(e, "event: out of memory");
        cJSON_Delete(patch);
        if (rc == 0) {
            kube_event_correlator_sent(r->corr, &d, ev, d.name, t);
            count(r, &r->counts.patched);
        } else if (rc == 404) {
            /* The Event expired (or was deleted): start a new one. */
            kube_event_correlator_forget(r->corr, &d);
            d.count = 1;
            cJSON_ReplaceItemInObjectCaseSensitive(ev, "count", cJSON_CreateNumber(1));
            cJSON_ReplaceItemInObjectCaseSensitive(ev, "firstTimestamp",
                cJSON_CreateString(json_str_at(ev, "lastTimestamp") ? json_str_at(ev, "lastTimestamp") : ""));
            rc = create(r, &d, ev, nsbuf, t, e);
        }
    }
    if (rc != 0)
        count(r, &r->counts.failed);
    kube_event_decision_clear(&d);
    pthread_mutex_unlock(&r->send_lock);
    cJSON_Delete(ev);
    return rc;
}

static void *sender(void *arg)
{
    struct kube_recorder *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (r->len == 0 && !r->stopping)
            pthread_cond_wait(&r->more, &r->lock);
        if (r->len == 0)
            break;
        cJSON *ev = r->queue[r->head];
        r->head = (r->head + 1) % QUEUE_MAX;
        r->len--;
        r->busy = 1;
        pthread_mutex_unlock(&r->lock);
        herr e;
        char reason[128];
        const char *why = json_str_at(ev, "reason");
        snprintf(reason, sizeof reason, "%s", why ? why : "");
        if (kube_recorder_send(r, ev, &e) != 0)
            log_warn("event %s: %s", reason, e.msg);
        pthread_mutex_lock(&r->lock);
        r->busy = 0;
        if (r->len == 0)
            pthread_cond_broadcast(&r->idle);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

struct kube_recorder *kube_recorder_new(struct kube_client *kc,
                                        const struct kube_event_correlator_opts *o, herr *e)
{
    struct kube_recorder *r = calloc(1, sizeof *r);
    struct kube_event_correlator *corr = kube_event_correlator_new(o);
    if (!r || !corr) {
        free(r);
        kube_event_correlator_free(corr);
        herr_set(e, "event recorder: out of memory");
        return NULL;
    }
    r->kc = kc;
    r->corr = corr;
    pthread_mutex_init(&r->send_lock, NULL);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->more, NULL);
    pthread_cond_init(&r->idle, NULL);
    int err = pthread_create(&r->thread, NULL, sender, r);
    if (err != 0) {
        herr_set(e, "event recorder: cannot start its thread: %s", strerror(err));
        kube_recorder_free(r);
        return NULL;
    }
    r->started = 1;
    return r;
}

void kube_recorder_free(struct kube_recorder *r)
{
    if (!r)
        return;
    if (r->started) {
        kube_recorder_flush(r, 5000);
        pthread_mutex_lock(&r->lock);
        r->stopping = 1;
        /* What is still queued after the flush timeout is dropped. */
        for (; r->len > 0; r->len--, r->head = (r->head + 1) % QUEUE_MAX)
            cJSON_Delete(r->queue[r->head]);
        pthread_cond_broadcast(&r->more);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
    }
    kube_event_correlator_free(r->corr);
    pthread_cond_destroy(&r->more);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->send_lock);
    free(r);
}

int kube_recorder_emit(struct kube_recorder *r, cJSON *ev)
{
    if (!ev)
        return -1;
    pthread_mutex_lock(&r->lock);
    if (r->len >= QUEUE_MAX || r->stopping) {
        r->counts.dropped_full++;
        pthread_mutex_unlock(&r->lock);
        cJSON_Delete(ev);
        return -1;
    }
    r->queue[(r->head + r->len) % QUEUE_MAX] = ev;
    r->len++;
    pthread_cond_signal(&r->more);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int kube_recorder_flush(struct kube_recorder *r, int timeout_ms)
{
    struct timespec until = clock_deadline(CLOCK_REALTIME, timeout_ms / 1000.0);
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    while ((r->len > 0 || r->busy) && rc == 0)
        if (pthread_cond_timedwait(&r->idle, &r->lock, &until) == ETIMEDOUT)
            rc = -1;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void kube_recorder_counts(struct kube_recorder *r, struct kube_recorder_counts *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->counts;
    pthread_mutex_unlock(&r->lock);
}
