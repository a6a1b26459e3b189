/* The controller in-process against the fake API server, through the API the coordinator
 * uses: job and pods from the caches, the token, status and label patches, events. */
#include "test.h"

#include <ctype.h>
#include <stdlib.h>
#include <time.h>

#include "controller.h"
#include "fakeapi_proc.h"
#include "kube_client.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int pods_count(struct controller *c)
{
    cJSON *p = controller_job_pods(c, "ml", "gpt");
    int n = cJSON_GetArraySize(p);
    cJSON_Delete(p);
    return n;
}

static const char *str(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItem(o, a);
    if (b)
        v = cJSON_GetObjectItem(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The controller on the fake API server (namespace ml), started and synced; label names the
 * scenario in the checks. */
static struct controller *start_controller(struct kube_client *kc, const char *label)
{
    herr e = {0};
    struct controller_opts o = {.namespace = "ml", .coordinator_url = "ws://coord:8443",
                                .default_image = "holmes-node:t"};
    struct controller *c = controller_new(kc, &o, &e);
    char what[96];
    snprintf(what, sizeof what, "%scontroller starts", label);
    CHECK(what, c && controller_start(c, &e) == 0);
    snprintf(what, sizeof what, "%scontroller syncs", label);
    CHECK_INT(what, controller_wait_synced(c, 10000), 0);
    return c;
}

/* A CPU TrainingJob of `workers` workers (GPT-2 124M, 5 steps) created in namespace ns. */
static int create_job(struct kube_client *kc, const char *ns, const char *name, int workers)
{
    herr e = {0};
    char txt[512];
    snprintf(txt, sizeof txt, "{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"%s\"},\"spec\":{\"workers\":%d,\"gpusPerWorker\":0,"
             "\"model\":{\"preset\":\"gpt2-124m\"},\"training\":{\"steps\":5}}}", name, workers);
    cJSON *job = cJSON_Parse(txt);
    int rc = kube_create(kc, &KUBE_TRAININGJOBS, ns, job, NULL, &e);
    cJSON_Delete(job);
    return rc;
}

/* The controller on the fake API server, and the calls the coordinator makes of it. */
static void with_api(struct fakeapi *f, struct kube_client *kc)
{
    herr e = {0};
    cJSON *job;
    struct controller *c = start_controller(kc, "");
    CHECK_INT("create job", create_job(kc, "ml", "gpt", 3), 0);
    create_job(kc, "other", "gpt", 2); /* a job in another namespace is not ours (--namespace ml) */
    for (int i = 0; i < 200 && pods_count(c) < 3; i++)
        sleep_ms(50);
    cJSON *pods = controller_job_pods(c, "ml", "gpt");
    CHECK_INT("controller_job_pods: 3 pods", cJSON_GetArraySize(pods), 3);
    int sorted = 1;
    for (int i = 0; i < cJSON_GetArraySize(pods); i++) {
        char want[32];
        snprintf(want, sizeof want, "gpt-worker-%d", i);
        const char *n = str(cJSON_GetArrayItem(pods, i), "metadata", "name");
        sorted &= n && !strcmp(n, want);
    }
    CHECK("controller_job_pods: sorted by worker index", sorted);
    cJSON_Delete(pods);

    char *tok = NULL;
    for (int i = 0; i < 100 && !(tok = controller_job_token(c, "ml", "gpt")); i++)
        sleep_ms(50);
    int hex = tok && strlen(tok) == 48;
    for (size_t i = 0; hex && i < 48; i++)
        hex &= isxdigit((unsigned char)tok[i]) != 0;
    CHECK("controller_job_token: 48 hex characters from the Secret", hex);
    char *tok2 = controller_job_token(c, "ml", "gpt");
    CHECK("token is stable", tok && tok2 && !strcmp(tok, tok2));
    free(tok);
    free(tok2);
    CHECK("no token for an unknown job", controller_job_token(c, "ml", "nope") == NULL);

    cJSON *labels = cJSON_Parse("{\"holmes.dev/fabric\":\"ib-a\",\"holmes.dev/nic-class\":\"infiniband\"}");
    CHECK_INT("controller_patch_pod_labels", controller_patch_pod_labels(c, "ml", "gpt-worker-1", labels, &e), 0);
    cJSON_Delete(labels);
    cJSON *pod = NULL;
    kube_get(kc, &KUBE_PODS, "ml", "gpt-worker-1", &pod, &e);
    const cJSON *pl = cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "labels");
    CHECK("labels added, ours kept", pl && !strcmp(str(pl, "holmes.dev/fabric", NULL), "ib-a") &&
                                         !strcmp(str(pl, "holmes.dev/job", NULL), "gpt"));
    cJSON_Delete(pod);

    /* Play kubelet: all pods running and ready -> Discovering. */
    fakeapi_control(f, "POST", "/_fake/kubelet",
                    "{\"namespace\":\"ml\",\"selector\":\"holmes.dev/job=gpt\",\"phase\":\"Running\",\"ready\":true}",
                    NULL, 0);
    int discovering = 0;
    for (int i = 0; i < 200 && !discovering; i++) {
        job = controller_get_job(c, "ml", "gpt");
        const char *ph = str(cJSON_GetObjectItem(job, "status"), "phase", NULL);
        discovering = ph && !strcmp(ph, "Discovering");
        cJSON_Delete(job);
        if (!discovering)
            sleep_ms(50);
    }
    CHECK("all pods ready -> phase Discovering", discovering);
    /* The coordinator's feed: fields and a condition, written by the controller's reconcile
     * (the one status writer) together with its own conditions. */
    cJSON *st = cJSON_Parse("{\"phase\":\"Running\",\"progress\":{\"step\":3,\"loss\":4.5}}");
    CHECK_INT("controller_patch_job_status", controller_patch_job_status(c, "ml", "gpt", st, &e), 0);
    cJSON_Delete(st);
    st = cJSON_Parse("{\"progress\":{\"step\":4,\"loss\":null}}");
    CHECK_INT("a second feed merges into the first", controller_patch_job_status(c, "ml", "gpt", st, &e), 0);
    cJSON_Delete(st);
    CHECK_INT("controller_set_job_condition", controller_set_job_condition(c, "ml", "gpt", "Planned", 1, "Planned", "2 stages", &e), 0);
    int written = 0;
    for (int i = 0; i < 100 && !written; i++) {
        job = NULL;
        kube_get(kc, &KUBE_TRAININGJOBS, "ml", "gpt", &job, &e);
        const cJSON *status = cJSON_GetObjectItem(job, "status");
        const cJSON *prog = cJSON_GetObjectItem(status, "progress");
        int planned = 0, ready = 0;
        const cJSON *cd;
        cJSON_ArrayForEach(cd, cJSON_GetObjectItem(status, "conditions")) {
            planned |= !strcmp(str(cd, "type", NULL), "Planned") && !strcmp(str(cd, "status", NULL), "True");
            ready |= !strcmp(str(cd, "type", NULL), "PodsReady") && !strcmp(str(cd, "status", NULL), "True");
        }
        written = str(status, "phase", NULL) && !strcmp(str(status, "phase", NULL), "Running") &&
                  cJSON_GetObjectItem(prog, "step") && cJSON_GetObjectItem(prog, "step")->valueint == 4 &&
                  !cJSON_GetObjectItem(prog, "loss") && planned && ready;
        cJSON_Delete(job);
        if (!written)
            sleep_ms(50);
    }
    CHECK("the feed is written through /status (merged; the coordinator's condition beside the "
          "controller's)", written);
    /* a message cut inside a character (a buffer's end) is written well-formed, in a condition
     * and in status.message */
    controller_set_job_condition(c, "ml", "gpt", "Elastic", 0, "BelowMinWorkers",
                                 "waiting for worker 2: \xe2\x82", &e);
    st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "message", "gang timeout: \xc3");
    controller_patch_job_status(c, "ml", "gpt", st, &e);
    cJSON_Delete(st);
    int cleaned = 0;
    for (int i = 0; i < 100 && !cleaned; i++) {
        job = NULL;
        kube_get(kc, &KUBE_TRAININGJOBS, "ml", "gpt", &job, &e);
        const cJSON *cd;
        cJSON_ArrayForEach(cd, cJSON_GetObjectItem(cJSON_GetObjectItem(job, "status"), "conditions")) {
            const char *ty = str(cd, "type", NULL), *msg = str(cd, "message", NULL);
            cleaned |= ty && msg && !strcmp(ty, "Elastic") &&
                       !strcmp(msg, "waiting for worker 2: ??");
        }
        const char *sm = str(job, "status", "message");
        cleaned &= sm && !strcmp(sm, "gang timeout: ?");
        cJSON_Delete(job);
        if (!cleaned)
            sleep_ms(50);
    }
    CHECK("a condition's and the status' message cut inside a character are written cleaned",
          cleaned);
    CHECK_INT("event about a job", controller_emit_event(c, "ml", "gpt", "Normal", "Planned",
                                                         "4 stages on 2 fabrics", &e), 0);
    CHECK("event about an unknown job is an error naming it",
          controller_emit_event(c, "ml", "nope", "Normal", "X", "y", &e) != 0 && strstr(e.msg, "ml/nope"));
    cJSON *evs = NULL;
    char *rv = NULL;
    kube_list(kc, &KUBE_EVENTS, "ml", NULL, NULL, 0, &evs, &rv, &e);
    int found = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, evs) {
        const char *r = str(ev, "reason", NULL), *n = str(ev, "involvedObject", "name");
        found += r && n && !strcmp(r, "Planned") && !strcmp(n, "gpt");
    }
    CHECK_INT("the event is stored", found, 1);
    cJSON_Delete(evs);
    free(rv);
    cJSON *j = controller_get_job(c, "other", "gpt");
    CHECK("jobs outside --namespace are not cached", j == NULL);
    cJSON_Delete(j);
    cJSON *other = NULL;
    kube_list(kc, &KUBE_PODS, "other", NULL, NULL, 0, &other, &rv, &e);
    CHECK_INT("no pods for jobs outside --namespace", cJSON_GetArraySize(other), 0);
    cJSON_Delete(other);
    free(rv);
    /* Phase Running set by the coordinator survives the controller's next reconciles. */
    sleep_ms(500);
    job = controller_get_job(c, "ml", "gpt");
    CHECK_STR("controller keeps the coordinator's phase", str(cJSON_GetObjectItem(job, "status"), "phase", NULL), "Running");
    cJSON_Delete(job);

    /* Failed is final (as Succeeded): the coordinator fails the job, and a report of its that
     * was still on its way (phase Running) adds its progress but does not move the phase back;
     * the pods, still running, would keep Running. */
    st = cJSON_Parse("{\"phase\":\"Failed\",\"message\":\"no restarts left\"}");
    controller_patch_job_status(c, "ml", "gpt", st, &e);
    cJSON_Delete(st);
    int done = 0;
    for (int i = 0; i < 200 && !done; i++) {
        job = NULL;
        kube_get(kc, &KUBE_TRAININGJOBS, "ml", "gpt", &job, &e);
        const char *ph = str(cJSON_GetObjectItem(job, "status"), "phase", NULL);
        done = ph && !strcmp(ph, "Failed");
        cJSON_Delete(job);
        if (!done)
            sleep_ms(50);
    }
    CHECK("the coordinator's Failed written", done);
    st = cJSON_Parse("{\"phase\":\"Running\",\"progress\":{\"step\":9}}");
    CHECK_INT("a late report of the coordinator's", controller_patch_job_status(c, "ml", "gpt", st, &e), 0);
    cJSON_Delete(st);
    int step9 = 0;
    const char *phase_after = NULL;
    char phase_buf[32] = "";
    for (int i = 0; i < 100 && !step9; i++) {
        job = NULL;
        kube_get(kc, &KUBE_TRAININGJOBS, "ml", "gpt", &job, &e);
        const cJSON *status = cJSON_GetObjectItem(job, "status");
        const cJSON *stp = cJSON_GetObjectItem(cJSON_GetObjectItem(status, "progress"), "step");
        step9 = cJSON_IsNumber(stp) && stp->valueint == 9;
        snprintf(phase_buf, sizeof phase_buf, "%s", str(status, "phase", NULL) ? str(status, "phase", NULL) : "");
        cJSON_Delete(job);
        if (!step9)
            sleep_ms(50);
    }
    phase_after = phase_buf;
    CHECK("the late report's progress written", step9);
    CHECK_STR("the late report's phase not taken: Failed is final", phase_after, "Failed");

    controller_free(c);
}

/* 1 when the job's status on the server has a condition of each type in types (NULL-ended). */
static int server_has_conditions(struct kube_client *kc, const char *name, const char *const *types)
{
    herr e = {0};
    cJSON *job = NULL;
    if (kube_get(kc, &KUBE_TRAININGJOBS, "ml", name, &job, &e) != 0)
        return 0;
    int all = 1;
    for (const char *const *t = types; *t; t++) {
        int found = 0;
        const cJSON *cd;
        cJSON_ArrayForEach(cd, cJSON_GetObjectItem(cJSON_GetObjectItem(job, "status"), "conditions")) {
            const char *ty = str(cd, "type", NULL);
            found |= ty && !strcmp(ty, *t);
        }
        all &= found;
    }
    cJSON_Delete(job);
    return all;
}

static int wait_conditions(struct kube_client *kc, const char *name, const char *const *types, int ms)
{
    for (int i = 0; i < ms / 50; i++) {
        if (server_has_conditions(kc, name, types))
            return 1;
        sleep_ms(50);
    }
    return server_has_conditions(kc, name, types);
}

/* The job cache one write behind: a merge patch replaces status.conditions whole, so a status
 * computed from the cache's older version would drop the conditions written since. With the
 * watch 800 ms late, the first condition's write (version B) reaches the cache while the
 * second's (C) has not: a third condition set then must not lose the second. A write by
 * someone else that the cache has not seen must not be lost either. */
static void lagging_cache(struct fakeapi *f, struct kube_client *kc)
{
    herr e = {0};
    struct controller *c = start_controller(kc, "lagging cache: ");
    CHECK_INT("lagging cache: create job", create_job(kc, "ml", "lag", 1), 0);
    static const char *const valid[] = {"Valid", NULL};
    CHECK("lagging cache: the controller wrote the job's status", wait_conditions(kc, "lag", valid, 10000));
    sleep_ms(500); /* the cache holds that status */
    CHECK_INT("watch events 800 ms late", fakeapi_control(f, "POST", "/_fake/faults", "{\"watchDelayMs\":800}", NULL, 0), 200);
    controller_set_job_condition(c, "ml", "lag", "First", 1, "A", "first", &e);
    sleep_ms(250);
    controller_set_job_condition(c, "ml", "lag", "Second", 1, "B", "second", &e);
    sleep_ms(850); /* the cache now holds First's version, not Second's */
    controller_set_job_condition(c, "ml", "lag", "Third", 1, "C", "third", &e);
    static const char *const three[] = {"Valid", "First", "Second", "Third", NULL};
    static const char *const third[] = {"Third", NULL};
    CHECK("lagging cache: the third condition written", wait_conditions(kc, "lag", third, 5000));
    sleep_ms(2000); /* every reconcile the late events trigger has run */
    CHECK("lagging cache: no condition lost (Valid, First, Second, Third)",
          server_has_conditions(kc, "lag", three));

    /* Someone else adds a condition (the whole array, as merge patches go); the controller,
     * its cache now 2 s behind (a wide window even on a loaded machine), sets another at once:
     * its write, computed from a version without the other writer's, is refused (409). */
    fakeapi_control(f, "POST", "/_fake/faults", "{\"watchDelayMs\":2000}", NULL, 0);
    sleep_ms(100);
    cJSON *now = NULL;
    kube_get(kc, &KUBE_TRAININGJOBS, "ml", "lag", &now, &e);
    cJSON *conds = cJSON_Duplicate(cJSON_GetObjectItem(cJSON_GetObjectItem(now, "status"), "conditions"), 1);
    cJSON_Delete(now);
    cJSON_AddItemToArray(conds, cJSON_Parse("{\"type\":\"Foreign\",\"status\":\"True\",\"reason\":\"X\","
                                            "\"message\":\"someone else\",\"lastTransitionTime\":\"2026-01-01T00:00:00Z\"}"));
    cJSON *patch = cJSON_CreateObject();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(patch, "status"), "conditions", conds);
    CHECK_INT("another writer patches status.conditions",
              kube_patch(kc, &KUBE_TRAININGJOBS, "ml", "lag", "status", patch, NULL, &e), 0);
    cJSON_Delete(patch);
    controller_set_job_condition(c, "ml", "lag", "Fourth", 1, "D", "fourth", &e);
    static const char *const fourth[] = {"Fourth", NULL};
    static const char *const five[] = {"Valid", "First", "Second", "Third", "Foreign", "Fourth", NULL};
    CHECK("lagging cache: the fourth condition written", wait_conditions(kc, "lag", fourth, 10000));
    sleep_ms(2000);
    CHECK("lagging cache: the other writer's condition kept beside ours", server_has_conditions(kc, "lag", five));
    struct metrics_buf b = {0};
    controller_metrics(c, &b);
    const char *m = b.data ? strstr(b.data, "\nholmes_status_conflicts_total ") : NULL;
    CHECK("the refused write counted (holmes_status_conflicts_total > 0)", m && atol(m + 31) > 0);
    free(b.data);
    fakeapi_control(f, "POST", "/_fake/faults", "{}", NULL, 0);
    controller_free(c);
}

int main(void)
{
    if (fakeapi_run(with_api) || fakeapi_run(lagging_cache))
        return 1;
    TEST_MAIN_END();
}
