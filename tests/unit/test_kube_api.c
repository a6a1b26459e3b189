/* The REST client and the informer against the fake API server (tests/fakeapi). */
#include "test.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fakeapi_proc.h"
#include "kube_client.h"
#include "kube_informer.h"

static cJSON *pod(const char *name, const char *job, const char *owner_uid)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"holmes.dev/job\":\"%s\"}%s%s%s},"
             "\"spec\":{\"containers\":[{\"name\":\"w\",\"image\":\"img\"}]}}",
             name, job, owner_uid ? ",\"ownerReferences\":[{\"apiVersion\":\"holmes.dev/v1alpha1\","
                                    "\"kind\":\"TrainingJob\",\"name\":\"j\",\"controller\":true,\"uid\":\"" : "",
             owner_uid ? owner_uid : "", owner_uid ? "\"}]" : "");
    return cJSON_Parse(buf);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until cond() holds (polling); returns 1 when it did. */
#define WAIT_FOR(cond, ms) ({ int ok_ = 0; for (int i_ = 0; i_ < (ms) / 20; i_++) { \
        if (cond) { ok_ = 1; break; } sleep_ms(20); } ok_; })

static void count_429(int code, unsigned long n, void *u)
{
    if (code == 429)
        *(int *)u = (int)n;
}

static struct kube_config *cfg_of_test;

static void test_rest(struct fakeapi *f, struct kube_client *kc)
{
    herr e;
    cJSON *out = NULL;
    cJSON *job = cJSON_Parse("{\"metadata\":{\"name\":\"j\"},\"spec\":{\"workers\":2},"
                             "\"status\":{\"phase\":\"Bogus\"}}");
    int rc = kube_create(kc, &KUBE_TRAININGJOBS, "default", job, &out, &e);
    CHECK_INT("create job", rc, 0);
    const char *uid = kube_meta_str(out, "uid");
    char uidbuf[64];
    snprintf(uidbuf, sizeof uidbuf, "%s", uid ? uid : "");
    CHECK("create ignores status (status subresource)", !cJSON_GetObjectItem(out, "status"));
    cJSON_Delete(out);
    rc = kube_create(kc, &KUBE_TRAININGJOBS, "default", job, NULL, &e);
    CHECK("create twice -> 409 AlreadyExists with the API message",
          rc == 409 && strstr(e.msg, "AlreadyExists") && strstr(e.msg, "already exists"));
    cJSON_Delete(job);

    rc = kube_get(kc, &KUBE_PODS, "default", "nope", &out, &e);
    CHECK("get missing -> 404 NotFound", rc == 404 && strstr(e.msg, "NotFound") && strstr(e.msg, "\"nope\""));
    cJSON *bad = cJSON_Parse("{\"metadata\":{\"name\":\"Bad_Name\"},\"spec\":{\"containers\":[]}}");
    rc = kube_create(kc, &KUBE_PODS, "default", bad, NULL, &e);
    CHECK("invalid pod -> 422 Invalid naming the field", rc == 422 && strstr(e.msg, "metadata.name"));
    cJSON_Delete(bad);

    char name[32];
    int created = 0;
    for (int i = 0; i < 7; i++) {
        snprintf(name, sizeof name, "j-worker-%d", i);
        cJSON *p = pod(name, i < 5 ? "j" : "other", i < 5 ? uidbuf : NULL);
        created += kube_create(kc, &KUBE_PODS, "default", p, NULL, &e) == 0;
        cJSON_Delete(p);
    }
    CHECK_INT("create 7 pods", created, 7);
    cJSON *items = NULL;
    char *rv = NULL;
    rc = kube_list(kc, &KUBE_PODS, "default", "holmes.dev/job=j", NULL, 2, &items, &rv, &e);
    CHECK("list with label selector and limit 2 follows continue",
          rc == 0 && cJSON_GetArraySize(items) == 5 && rv && atoi(rv) > 100);
    cJSON_Delete(items);
    free(rv);
    rc = kube_list(kc, &KUBE_PODS, NULL, NULL, "metadata.name=j-worker-6", 0, &items, &rv, &e);
    CHECK("list all namespaces with field selector", rc == 0 && cJSON_GetArraySize(items) == 1);
    cJSON_Delete(items);
    free(rv);

    cJSON *patch = cJSON_Parse("{\"status\":{\"phase\":\"Pending\"},\"spec\":{\"workers\":9}}");
    rc = kube_patch(kc, &KUBE_TRAININGJOBS, "default", "j", "status", patch, &out, &e);
    const cJSON *st = cJSON_GetObjectItem(out, "status");
    const cJSON *sp = cJSON_GetObjectItem(out, "spec");
    CHECK("patch /status changes only status",
          rc == 0 && cJSON_IsObject(st) && !strcmp(cJSON_GetObjectItem(st, "phase")->valuestring, "Pending") &&
              cJSON_GetObjectItem(sp, "workers")->valueint == 2);
    cJSON_Delete(out);
    rc = kube_patch(kc, &KUBE_TRAININGJOBS, "default", "j", NULL, patch, &out, &e);
    st = cJSON_GetObjectItem(out, "status");
    sp = cJSON_GetObjectItem(out, "spec");
    CHECK("patch main resource changes spec, not status",
          rc == 0 && cJSON_GetObjectItem(sp, "workers")->valueint == 9 &&
              !strcmp(cJSON_GetObjectItem(st, "phase")->valuestring, "Pending"));
    cJSON_Delete(out);
    cJSON_Delete(patch);
    patch = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"1\"},\"spec\":{\"workers\":3}}");
    rc = kube_patch(kc, &KUBE_TRAININGJOBS, "default", "j", NULL, patch, NULL, &e);
    CHECK("patch with a stale resourceVersion -> 409 Conflict", rc == 409 && strstr(e.msg, "Conflict"));
    cJSON_Delete(patch);

    /* 500 then success; 429 honoured with Retry-After and retried. */
    fakeapi_control(f, "POST", "/_fake/faults", "{\"status\":500,\"count\":1}", NULL, 0);
    rc = kube_get(kc, &KUBE_TRAININGJOBS, "default", "j", &out, &e);
    CHECK("500 is returned to the caller", rc == 500 && strstr(e.msg, "injected"));
    cJSON_Delete(out);
    fakeapi_control(f, "POST", "/_fake/faults", "{\"status\":429,\"count\":2,\"retryAfter\":0.2}", NULL, 0);
    rc = kube_get(kc, &KUBE_TRAININGJOBS, "default", "j", &out, &e);
    CHECK("429 x2 with Retry-After is retried to success", rc == 0 && out);
    cJSON_Delete(out);
    int n429 = 0;
    kube_client_error_counts(kc, count_429, &n429);
    CHECK_INT("429s counted by code", n429, 2);

    /* A slow answer: the client gives up after its timeout with a clear error. */
    struct kube_client_opts slow = {.qps = 100, .burst = 100, .timeout_ms = 200};
    struct kube_client *kc3 = kube_client_new(cfg_of_test, &slow, &e);
    fakeapi_control(f, "POST", "/_fake/faults", "{\"delayMs\":1000}", NULL, 0);
    rc = kube_get(kc3, &KUBE_TRAININGJOBS, "default", "j", NULL, &e);
    CHECK("a delayed answer times out with the curl error", rc == -1 && strstr(e.msg, "imeout"));
    fakeapi_control(f, "POST", "/_fake/faults", "{}", NULL, 0);
    kube_client_free(kc3);
    rc = kube_request(kc, "GET", "/api/v1/namespaces/default/pods?resourceVersion=999999999", NULL,
                      NULL, NULL, &e);
    CHECK("LIST at a future resourceVersion -> 504 Too large resource version",
          rc == 504 && strstr(e.msg, "Too large resource version"));

    rc = kube_delete(kc, &KUBE_TRAININGJOBS, "default", "j", "Background", &e);
    CHECK_INT("delete job", rc, 0);
    rc = kube_list(kc, &KUBE_PODS, "default", NULL, NULL, 0, &items, &rv, &e);
    CHECK("delete cascades to owned pods only", rc == 0 && cJSON_GetArraySize(items) == 2);
    cJSON_Delete(items);
    free(rv);
    rc = kube_delete(kc, &KUBE_TRAININGJOBS, "default", "j", NULL, &e);
    CHECK_INT("delete missing -> 404", rc, 404);

    /* No token: 401. */
    struct kube_config anon = {0};
    anon.server = f->url;
    pthread_mutex_init(&anon.lock, NULL);
    struct kube_client *kc2 = kube_client_new(&anon, NULL, &e);
    rc = kube_get(kc2, &KUBE_PODS, "default", "x", NULL, &e);
    CHECK("no bearer token -> 401 Unauthorized", rc == 401 && strstr(e.msg, "Unauthorized"));
    kube_client_free(kc2);
    pthread_mutex_destroy(&anon.lock);
}

struct counts {
    int added, modified, deleted;
    pthread_mutex_t lock;
};

static void handler(void *user, enum kube_event_type t, const cJSON *obj, const cJSON *old)
{
    struct counts *c = user;
    (void)obj;
    (void)old;
    pthread_mutex_lock(&c->lock);
    if (t == KUBE_ADDED)
        c->added++;
    else if (t == KUBE_MODIFIED)
        c->modified++;
    else if (t == KUBE_DELETED)
        c->deleted++;
    pthread_mutex_unlock(&c->lock);
}

static int get_count(struct counts *c, int *field)
{
    pthread_mutex_lock(&c->lock);
    int v = *field;
    pthread_mutex_unlock(&c->lock);
    return v;
}

static int has(struct kube_informer *inf, const char *name)
{
    cJSON *o = kube_informer_get(inf, "ns2", name);
    cJSON_Delete(o);
    return o != NULL;
}

static void test_informer(struct fakeapi *f, struct kube_client *kc)
{
    herr e;
    struct counts c = {0};
    pthread_mutex_init(&c.lock, NULL);
    char name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "p%d", i);
        cJSON *p = pod(name, "inf", NULL);
        kube_create(kc, &KUBE_PODS, "ns2", p, NULL, &e);
        cJSON_Delete(p);
    }
    struct kube_informer_opts o = {.resource = &KUBE_PODS, .ns = "ns2",
                                   .label_selector = "holmes.dev/job=inf", .handler = handler,
                                   .user = &c, .list_limit = 2, .watch_timeout_s = 2,
                                   .backoff_max_s = 0.5, .index_label = "holmes.dev/job"};
    struct kube_informer *inf = kube_informer_new(kc, &o, &e);
    kube_informer_start(inf, &e);
    CHECK_INT("informer syncs", kube_informer_wait_synced(inf, 5000), 0);
    CHECK_INT("informer lists existing objects", kube_informer_size(inf), 3);

    cJSON *p = pod("p3", "inf", NULL);
    kube_create(kc, &KUBE_PODS, "ns2", p, NULL, &e);
    cJSON_Delete(p);
    CHECK("informer sees a created pod via watch", WAIT_FOR(has(inf, "p3"), 5000));
    p = pod("unrelated", "zzz", NULL);
    kube_create(kc, &KUBE_PODS, "ns2", p, NULL, &e);
    cJSON_Delete(p);

    /* Events split across chunks, and a very large object. */
    fakeapi_control(f, "POST", "/_fake/faults", "{\"splitEvents\":true}", NULL, 0);
    size_t big = 2u << 20;
    char *val = malloc(big + 1);
    memset(val, 'y', big);
    val[big] = '\0';
    p = pod("p4", "inf", NULL);
    cJSON *ann = cJSON_AddObjectToObject(cJSON_GetObjectItem(p, "metadata"), "annotations");
    cJSON_AddStringToObject(ann, "big", val);
    free(val);
    int rc = kube_create(kc, &KUBE_PODS, "ns2", p, NULL, &e);
    cJSON_Delete(p);
    CHECK_INT("create 2 MB pod", rc, 0);
    CHECK("informer receives a 2 MB object split across chunks", WAIT_FOR(has(inf, "p4"), 8000));
    cJSON *got = kube_informer_get(inf, "ns2", "p4");
    const cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(got, "metadata"), "annotations"), "big");
    CHECK("large object intact", cJSON_IsString(a) && strlen(a->valuestring) == big);
    cJSON_Delete(got);
    fakeapi_control(f, "POST", "/_fake/faults", "{}", NULL, 0);

    /* Drop the watch mid-stream: the informer reconnects and keeps up. */
    struct kube_informer_stats s0, s1;
    kube_informer_stats(inf, &s0);
    fakeapi_control(f, "POST", "/_fake/faults", "{\"dropWatches\":true}", NULL, 0);
    kube_delete(kc, &KUBE_PODS, "ns2", "p0", NULL, &e);
    CHECK("after a dropped watch the informer sees a delete", WAIT_FOR(!has(inf, "p0"), 8000));
    kube_informer_stats(inf, &s1);
    CHECK("the dropped watch was reconnected", s1.watches > s0.watches);

    /* History compacted while the watch is down: 410 Gone -> relist; deletions noticed. */
    fakeapi_control(f, "POST", "/_fake/faults", "{\"status\":503,\"count\":1000,\"match\":\"watch=1\"}", NULL, 0);
    struct kube_informer_stats s2, s3;
    kube_informer_stats(inf, &s2);
    fakeapi_control(f, "POST", "/_fake/faults", "{\"status\":503,\"count\":1000,\"match\":\"watch=1\",\"dropWatches\":true}", NULL, 0);
    /* Only delete once the informer has noticed its watch is gone (a fixed sleep raced under load). */
    CHECK("the informer notices the dropped watch",
          WAIT_FOR((kube_informer_stats(inf, &s3), s3.watch_errors > s2.watch_errors), 8000));
    kube_delete(kc, &KUBE_PODS, "ns2", "p1", NULL, &e);
    p = pod("p5", "inf", NULL);
    kube_create(kc, &KUBE_PODS, "ns2", p, NULL, &e);
    cJSON_Delete(p);
    fakeapi_control(f, "POST", "/_fake/compact", "{}", NULL, 0);
    int deleted_before = get_count(&c, &c.deleted);
    fakeapi_control(f, "POST", "/_fake/faults", "{}", NULL, 0);
    CHECK("410 Gone -> relist finds the new pod", WAIT_FOR(has(inf, "p5"), 10000));
    CHECK("410 Gone -> relist drops the pod deleted meanwhile", WAIT_FOR(!has(inf, "p1"), 5000));
    CHECK("relist announces the deletion to the handler", get_count(&c, &c.deleted) == deleted_before + 1);
    kube_informer_stats(inf, &s1);
    CHECK("the informer saw 410 and relisted", s1.gone >= 1 && s1.lists >= 2);
    CHECK_INT("cache holds exactly the selected pods", kube_informer_size(inf), 4);
    cJSON *byjob = kube_informer_list_indexed(inf, "ns2", "inf");
    CHECK_INT("label index lists the job's pods", cJSON_GetArraySize(byjob), 4);
    cJSON_Delete(byjob);
    byjob = kube_informer_list_indexed(inf, "other-ns", "inf");
    CHECK_INT("label index is per namespace", cJSON_GetArraySize(byjob), 0);
    cJSON_Delete(byjob);
    kube_informer_free(inf);
    pthread_mutex_destroy(&c.lock);
}

int main(void)
{
    struct fakeapi f;
    herr e = {0};
    struct kube_config cfg;
    struct kube_client_opts o = {.qps = 500, .burst = 500};
    struct kube_client *kc = fakeapi_start_client(&f, &cfg, &o, &e);
    if (!kc) {
        TEST_FAIL("a client of the fake API server", "%s", e.msg);
        TEST_MAIN_END();
    }
    cfg_of_test = &cfg;
    test_rest(&f, kc);
    test_informer(&f, kc);
    kube_client_free(kc);
    kube_config_free(&cfg);
    fakeapi_stop(&f);
    TEST_MAIN_END();
}
