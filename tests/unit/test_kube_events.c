/* Event aggregation (client-go's EventCorrelator): the correlator's decisions, pure, with a
 * given clock; then the recorder against the fake API server: a repeat is one Event with a
 * count, similar events are combined, the spam filter drops, an expired Event is recreated. */
#include "test.h"

#include <stdlib.h>

#include "fakeapi_proc.h"
#include "kube_client.h"
#include "kube_events.h"
#include "kube_recorder.h"

static cJSON *job_obj(const char *name, const char *uid)
{
    char buf[512];
    snprintf(buf, sizeof buf, "{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\",\"uid\":\"%s\"}}", name, uid);
    return cJSON_Parse(buf);
}

static cJSON *event(const char *job, const char *reason, const char *msg)
{
    cJSON *o = job_obj(job, job);
    cJSON *ev = kube_event_build(o, "Warning", reason, msg, NULL);
    cJSON_Delete(o);
    return ev;
}

static const char *msg_of(const cJSON *ev)
{
    const cJSON *m = cJSON_GetObjectItem(ev, "message");
    return cJSON_IsString(m) ? m->valuestring : "";
}

/* Decides about one event at time t; records a CREATE as "ev-<n>" like the API would. */
static enum kube_event_action decide(struct kube_event_correlator *c, cJSON *ev, double t,
                                     struct kube_event_decision *d, int *names)
{
    if (kube_event_correlate(c, ev, t, d) != 0)
        return (enum kube_event_action)-1;
    if (d->action == KUBE_EVENT_CREATE) {
        char name[32];
        snprintf(name, sizeof name, "ev-%d", (*names)++);
        kube_event_correlator_sent(c, d, ev, name, t);
    } else if (d->action == KUBE_EVENT_PATCH) {
        kube_event_correlator_sent(c, d, ev, d->name, t);
    }
    return d->action;
}

/* decide() about a new event (about job, with reason and msg) at time t, then forgotten. */
static enum kube_event_action decide_new(struct kube_event_correlator *c, const char *job,
                                         const char *reason, const char *msg, double t, int *names)
{
    struct kube_event_decision d;
    cJSON *ev = event(job, reason, msg);
    enum kube_event_action a = decide(c, ev, t, &d, names);
    kube_event_decision_clear(&d);
    cJSON_Delete(ev);
    return a;
}

static void test_correlator(void)
{
    struct kube_event_correlator *c = kube_event_correlator_new(NULL);
    CHECK("correlator with defaults", c != NULL);
    if (!c)
        return;
    struct kube_event_decision d;
    int names = 0;
    double t = 1000;

    /* Repeats: created once, then patched with a growing count on the same Event. */
    cJSON *ev = event("a", "GangTimeout", "pods a-worker-0 unschedulable");
    CHECK_INT("first event is created", decide(c, ev, t, &d, &names), KUBE_EVENT_CREATE);
    kube_event_decision_clear(&d);
    cJSON_Delete(ev);
    for (int i = 2; i <= 4; i++) {
        ev = event("a", "GangTimeout", "pods a-worker-0 unschedulable");
        int act = decide(c, ev, t + i, &d, &names);
        char label[80];
        snprintf(label, sizeof label, "repeat %d patches ev-0 with count %d", i, i);
        CHECK(label, act == KUBE_EVENT_PATCH && !strcmp(d.name, "ev-0") && d.count == i &&
                         cJSON_GetObjectItem(ev, "count")->valueint == i);
        if (i == 4) {
            cJSON *p = kube_event_patch(ev);
            CHECK("the patch carries count, lastTimestamp and message only",
                  p && cJSON_GetObjectItem(p, "count")->valueint == 4 &&
                      cJSON_GetObjectItem(p, "lastTimestamp") && cJSON_GetObjectItem(p, "message") &&
                      cJSON_GetArraySize(p) == 3);
            cJSON_Delete(p);
        }
        kube_event_decision_clear(&d);
        cJSON_Delete(ev);
    }
    /* Another object, or another reason: separate Events. */
    ev = event("b", "GangTimeout", "pods a-worker-0 unschedulable");
    CHECK_INT("same message about another job: a new Event", decide(c, ev, t, &d, &names), KUBE_EVENT_CREATE);
    kube_event_decision_clear(&d);
    cJSON_Delete(ev);
    ev = event("a", "GangRestart", "pods a-worker-0 unschedulable");
    CHECK_INT("same job, other reason: a new Event", decide(c, ev, t, &d, &names), KUBE_EVENT_CREATE);
    kube_event_decision_clear(&d);
    cJSON_Delete(ev);
    /* After the window the count starts over on a new Event. */
    ev = event("a", "GangTimeout", "pods a-worker-0 unschedulable");
    CHECK_INT("a repeat after the window is a new Event", decide(c, ev, t + 700, &d, &names), KUBE_EVENT_CREATE);
    kube_event_decision_clear(&d);
    cJSON_Delete(ev);
    kube_event_correlator_free(c);

    /* Similar events: from the 10th distinct message on, one combined Event. */
    c = kube_event_correlator_new(NULL);
    names = 0;
    int creates = 0, patched_combined = 0, combined_msgs = 0;
    for (int i = 0; i < 15; i++) {
        char m[64];
        snprintf(m, sizeof m, "restart %d: pod c-worker-1 failed", i);
        ev = event("c", "GangRestart", m);
        int act = decide(c, ev, t + i, &d, &names);
        creates += act == KUBE_EVENT_CREATE;
        int comb = !strncmp(msg_of(ev), "(combined from similar events): ", 32);
        combined_msgs += comb;
        patched_combined += act == KUBE_EVENT_PATCH && comb && !strcmp(d.name, "ev-9");
        if (i == 14)
            CHECK("the combined message ends with the latest one", strstr(msg_of(ev), "restart 14:") != NULL);
        kube_event_decision_clear(&d);
        cJSON_Delete(ev);
    }
    CHECK_INT("15 distinct messages: 9 Events, then one combined Event", creates, 10);
    CHECK_INT("messages 10..15 are combined", combined_msgs, 6);
    CHECK_INT("combined repeats patch the combined Event", patched_combined, 5);
    kube_event_correlator_free(c);

    /* Spam filter: burst 3, no refill to speak of -> the 4th event about an object is dropped;
     * another object has its own bucket; the bucket refills with time. */
    struct kube_event_correlator_opts o = {.spam_burst = 3, .spam_qps = 0.5};
    c = kube_event_correlator_new(&o);
    names = 0;
    int drops = 0;
    for (int i = 0; i < 5; i++) {
        char m[32];
        snprintf(m, sizeof m, "message %d", i);
        drops += decide_new(c, "s", "Noise", m, t, &names) == KUBE_EVENT_DROP;
    }
    CHECK_INT("spam filter: 5 events at once with burst 3 -> 2 dropped", drops, 2);
    CHECK_INT("another object has its own bucket", decide_new(c, "other", "Noise", "x", t, &names),
              KUBE_EVENT_CREATE);
    CHECK_INT("2 s later (0.5 tokens/s) one more goes through",
              decide_new(c, "s", "Noise", "message 0", t + 2, &names), KUBE_EVENT_PATCH);
    kube_event_correlator_free(c);

    /* Bounded caches: 4 entries at most; old ones go first, then everything. */
    struct kube_event_correlator_opts small = {.max_entries = 4};
    c = kube_event_correlator_new(&small);
    names = 0;
    for (int i = 0; i < 50; i++) {
        char job[16];
        snprintf(job, sizeof job, "j%d", i);
        decide_new(c, job, "X", "y", t + i * 1000.0, &names);
    }
    CHECK_INT("bounded caches still de-duplicate the latest",
              decide_new(c, "j49", "X", "y", t + 49000.5, &names), KUBE_EVENT_PATCH);
    kube_event_correlator_free(c);
}

/* Events with `reason` in namespace ml on the server: how many; the count and message of
 * one of them. */
static int events_on_server(struct kube_client *kc, const char *reason, int *count, char *msg, size_t n)
{
    cJSON *items = NULL;
    char *rv = NULL;
    herr e;
    int found = 0;
    *count = 0;
    if (kube_list(kc, &KUBE_EVENTS, "ml", NULL, NULL, 0, &items, &rv, &e) == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, items) {
            const cJSON *r = cJSON_GetObjectItem(it, "reason");
            if (cJSON_IsString(r) && !strcmp(r->valuestring, reason)) {
                found++;
                /* Reports the combined Event when there is one, else any. */
                if (msg && *msg && !strncmp(msg, "(combined", 9))
                    continue;
                *count = cJSON_GetObjectItem(it, "count")->valueint;
                if (msg)
                    snprintf(msg, n, "%s", msg_of(it));
            }
        }
    }
    cJSON_Delete(items);
    free(rv);
    return found;
}

static void test_recorder(struct fakeapi *f, struct kube_client *kc)
{
    herr e;
    struct kube_recorder *r = kube_recorder_new(kc, NULL, &e);
    CHECK("recorder starts", r != NULL);
    if (!r)
        return;
    for (int i = 0; i < 5; i++)
        kube_recorder_emit(r, event("g", "GangTimeout", "pods g-worker-0 unschedulable for more than 1s"));
    CHECK_INT("flush", kube_recorder_flush(r, 10000), 0);
    int count = 0;
    CHECK_INT("5 repeats -> one Event on the server", events_on_server(kc, "GangTimeout", &count, NULL, 0), 1);
    CHECK_INT("... with count 5", count, 5);
    struct kube_recorder_counts rc;
    kube_recorder_counts(r, &rc);
    CHECK("1 created, 4 patched", rc.created == 1 && rc.patched == 4 && rc.failed == 0);

    /* The Event is deleted on the server (expired): the next repeat creates it again. */
    cJSON *items = NULL;
    char *rv = NULL;
    kube_list(kc, &KUBE_EVENTS, "ml", NULL, NULL, 0, &items, &rv, &e);
    const cJSON *name = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "metadata"), "name");
    CHECK("the Event has a name", cJSON_IsString(name));
    if (cJSON_IsString(name))
        kube_delete(kc, &KUBE_EVENTS, "ml", name->valuestring, NULL, &e);
    cJSON_Delete(items);
    free(rv);
    cJSON *ev = event("g", "GangTimeout", "pods g-worker-0 unschedulable for more than 1s");
    CHECK_INT("a repeat of an expired Event is sent (synchronously)", kube_recorder_send(r, ev, &e), 0);
    CHECK_INT("... as a new Event", events_on_server(kc, "GangTimeout", &count, NULL, 0), 1);
    CHECK_INT("... whose count starts over", count, 1);

    /* Similar messages: 12 distinct -> 9 Events plus one combined with count 3. */
    for (int i = 0; i < 12; i++) {
        char m[64];
        snprintf(m, sizeof m, "pod h-worker-%d failed", i);
        kube_recorder_emit(r, event("h", "GangRestart", m));
    }
    kube_recorder_flush(r, 10000);
    char msg[256] = "";
    int n = events_on_server(kc, "GangRestart", &count, msg, sizeof msg);
    CHECK_INT("12 similar events -> 10 Events", n, 10);
    CHECK("the last is the combined one with count 3",
          count == 3 && !strcmp(msg, "(combined from similar events): pod h-worker-11 failed"));

    /* A bad event is refused with a clear error, not sent. */
    cJSON *bad = cJSON_Parse("{\"reason\":\"X\",\"involvedObject\":{}}");
    CHECK("an event without a namespace is refused naming the field",
          kube_recorder_send(r, bad, &e) != 0 && strstr(e.msg, "involvedObject.namespace"));
    kube_recorder_free(r);
}

/* A message longer than an Event keeps (1,024 bytes), cut where a two-byte character stands
 * across the limit: the Event's message is well-formed UTF-8 (the API server would otherwise see
 * half a character). */
static void test_long_message(void)
{
    char long_msg[2048] = "x";
    for (int i = 0; i < 700; i++)
        strcat(long_msg, "\xc3\xa9"); /* byte 1,024 (the last kept) starts a character */
    cJSON *ev = event("long", "Test", long_msg);
    const char *m = msg_of(ev);
    char cleaned[2048];
    snprintf(cleaned, sizeof cleaned, "%s", m);
    herr_clean(cleaned);
    CHECK("a long message cut on a character's boundary", strlen(m) == 1024 && !strcmp(m, cleaned));
    cJSON_Delete(ev);
}

int main(void)
{
    if (fakeapi_run(test_recorder))
        return 1;
    test_correlator();
    test_long_message();
    TEST_MAIN_END();
}
