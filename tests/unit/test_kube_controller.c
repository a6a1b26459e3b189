/* Controller pieces without a server: the pod built from a TrainingJob, spec errors, the API
 * call table, events and times, latency quantiles, the metrics/health HTTP server. */
#include "test.h"

#include <curl/curl.h>
#include <stdlib.h>

#include "controller.h"
#include "controller_impl.h"
#include "json.h"
#include "http_server.h"
#include "kube_events.h"
#include "metrics.h"

static const char *env_value(const cJSON *c, const char *name, int *count)
{
    const cJSON *e;
    const char *v = NULL;
    *count = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "env")) {
        const cJSON *n = cJSON_GetObjectItem(e, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
            (*count)++;
            const cJSON *val = cJSON_GetObjectItem(e, "value");
            v = cJSON_IsString(val) ? val->valuestring : "(valueFrom)";
        }
    }
    return v;
}

/* The worker pod's security defaults, the template's overrides, RDMA's IPC_LOCK, the writable
 * volumes, the coordinator's CA; the job Secret's ca.crt kept equal to the CA. */
static void test_pod_security(void)
{
    cJSON *job = cJSON_Parse(
        "{\"metadata\":{\"name\":\"sec\",\"namespace\":\"ml\"},\"spec\":{\"workers\":2,"
        "\"gpusPerWorker\":0,\"training\":{\"checkpoint\":{\"path\":\"/ckpt/sec\"}}}}");
    herr e;
    cJSON *pod = controller_build_pod(job, 0, "wss://c:8443", "img", &e);
    char *txt = pod ? cJSON_PrintUnformatted(pod) : NULL;
    const cJSON *psc = json_at(pod, "spec.securityContext");
    const cJSON *w = cJSON_GetArrayItem(json_at(pod, "spec.containers"), 0);
    const cJSON *csc = cJSON_GetObjectItem(w, "securityContext");
    CHECK("defaults: non-root 65532, fsGroup, seccomp RuntimeDefault",
          cJSON_IsTrue(cJSON_GetObjectItem(psc, "runAsNonRoot")) && json_num_at(psc, "runAsUser", 0) == 65532 &&
              json_num_at(psc, "runAsGroup", 0) == 65532 && json_num_at(psc, "fsGroup", 0) == 65532 &&
              json_str_at(psc, "seccompProfile.type") && !strcmp(json_str_at(psc, "seccompProfile.type"), "RuntimeDefault"));
    CHECK("defaults: no escalation, read-only root, ALL dropped, nothing added",
          cJSON_IsFalse(cJSON_GetObjectItem(csc, "allowPrivilegeEscalation")) &&
              cJSON_IsTrue(cJSON_GetObjectItem(csc, "readOnlyRootFilesystem")) &&
              txt && strstr(txt, "\"capabilities\":{\"drop\":[\"ALL\"]}"));
    CHECK("writable /tmp, /dev/shm in memory, the checkpoint path",
          txt && strstr(txt, "{\"name\":\"holmes-tmp\",\"mountPath\":\"/tmp\"}") &&
              strstr(txt, "{\"name\":\"holmes-shm\",\"emptyDir\":{\"medium\":\"Memory\"}}") &&
              strstr(txt, "{\"name\":\"holmes-checkpoints\",\"mountPath\":\"/ckpt/sec\"}") &&
              strstr(txt, "{\"name\":\"holmes-checkpoints\",\"emptyDir\":{}}"));
    free(txt);
    CHECK_INT("the CA from the job's Secret", controller_pod_trust_ca(pod, "sec"), 0);
    txt = pod ? cJSON_PrintUnformatted(pod) : NULL;
    int n;
    const char *v = env_value(w, "HOLMES_COORDINATOR_CA", &n);
    CHECK("... only its ca.crt, read-only, HOLMES_COORDINATOR_CA",
          txt && strstr(txt, "\"secret\":{\"secretName\":\"sec-token\",\"defaultMode\":292,\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}") &&
              strstr(txt, "{\"name\":\"holmes-coordinator-ca\",\"mountPath\":\"/var/run/holmes/coordinator\",\"readOnly\":true}") &&
              v && !strcmp(v, "/var/run/holmes/coordinator/ca.crt") && n == 1);
    free(txt);
    cJSON_Delete(pod);
    cJSON_Delete(job);

    /* the template overrides each default it sets; RDMA keeps IPC_LOCK */
    job = cJSON_Parse(
        "{\"metadata\":{\"name\":\"rd\",\"namespace\":\"ml\"},\"spec\":{\"workers\":1,\"gpusPerWorker\":8,"
        "\"template\":{\"spec\":{\"securityContext\":{\"runAsUser\":1000,\"seccompProfile\":{\"type\":\"Unconfined\"}},"
        "\"volumes\":[{\"name\":\"dshm\",\"emptyDir\":{\"medium\":\"Memory\",\"sizeLimit\":\"64Gi\"}}],"
        "\"containers\":[{\"name\":\"worker\",\"securityContext\":{\"readOnlyRootFilesystem\":false},"
        "\"volumeMounts\":[{\"name\":\"dshm\",\"mountPath\":\"/dev/shm\"}],"
        "\"resources\":{\"limits\":{\"rdma/hca_shared_devices_a\":1}}}]}}}}");
    pod = controller_build_pod(job, 0, "ws://c", "img", &e);
    txt = pod ? cJSON_PrintUnformatted(pod) : NULL;
    psc = json_at(pod, "spec.securityContext");
    csc = json_at(cJSON_GetArrayItem(json_at(pod, "spec.containers"), 0), "securityContext");
    CHECK("template's runAsUser, seccomp and readOnlyRootFilesystem win",
          json_num_at(psc, "runAsUser", 0) == 1000 && !strcmp(json_str_at(psc, "seccompProfile.type"), "Unconfined") &&
              cJSON_IsFalse(cJSON_GetObjectItem(csc, "readOnlyRootFilesystem")) &&
              cJSON_IsTrue(cJSON_GetObjectItem(psc, "runAsNonRoot")));
    CHECK("an RDMA device keeps IPC_LOCK, ALL else dropped",
          txt && strstr(txt, "\"capabilities\":{\"drop\":[\"ALL\"],\"add\":[\"IPC_LOCK\"]}"));
    CHECK("the template's /dev/shm is kept, no second one",
          txt && !strstr(txt, "holmes-shm") && strstr(txt, "\"sizeLimit\":\"64Gi\""));
    CHECK("no checkpoint path, no checkpoint volume", txt && !strstr(txt, "holmes-checkpoints"));
    free(txt);
    cJSON_Delete(pod);
    cJSON_Delete(job);
    CHECK("RDMA resources told apart", controller_is_rdma_resource("rdma/rdma_shared_device_a") &&
          controller_is_rdma_resource("mellanox.com/cx6") && controller_is_rdma_resource("nvidia.com/hostdev") &&
          !controller_is_rdma_resource("nvidia.com/gpu") && !controller_is_rdma_resource("memory"));

    /* root, or privileged, in the template: no combination the API refuses */
    job = cJSON_Parse(
        "{\"metadata\":{\"name\":\"pr\",\"namespace\":\"ml\"},\"spec\":{\"workers\":1,\"gpusPerWorker\":0,"
        "\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\",\"securityContext\":"
        "{\"privileged\":true,\"runAsUser\":0}}]}}}}");
    pod = controller_build_pod(job, 0, "ws://c", "img", &e);
    psc = json_at(pod, "spec.securityContext");
    csc = json_at(cJSON_GetArrayItem(json_at(pod, "spec.containers"), 0), "securityContext");
    CHECK("privileged and uid 0 from the template: no allowPrivilegeEscalation, no runAsNonRoot",
          pod && !cJSON_GetObjectItem(csc, "allowPrivilegeEscalation") && !cJSON_GetObjectItem(psc, "runAsNonRoot") &&
              !cJSON_GetObjectItem(psc, "runAsUser"));
    cJSON_Delete(pod);

    /* the job Secret: made with the CA; an old one (no ca.crt, or another) patched */
    cJSON *sec = ctl_build_secret_ca(job, "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n");
    CHECK("the Secret carries the token and ca.crt",
          json_str_at(sec, "stringData.token") &&
              cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(sec, "stringData"), "ca.crt")));
    cJSON *have = cJSON_Parse("{\"data\":{\"token\":\"eA==\"}}");
    cJSON *patch = ctl_secret_ca_patch(have, "CA1");
    const char *got = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(patch, "data"), "ca.crt"));
    CHECK("no ca.crt: patched in, base64", got && !strcmp(got, "Q0Ex"));
    cJSON_Delete(patch);
    cJSON_ReplaceItemInObject(have, "data", cJSON_Parse("{\"token\":\"eA==\",\"ca.crt\":\"Q0Ex\"}"));
    CHECK("the same CA: nothing to patch", !ctl_secret_ca_patch(have, "CA1"));
    patch = ctl_secret_ca_patch(have, "CA2");
    CHECK("a renewed CA: patched", patch != NULL);
    cJSON_Delete(patch);
    cJSON_Delete(have);
    cJSON_Delete(sec);
    cJSON_Delete(job);
}

static void test_build_pod(void)
{
    cJSON *job = cJSON_Parse(
        "{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"gpt\","
        "\"namespace\":\"ml\",\"uid\":\"u-1\"},\"spec\":{\"workers\":4,\"gpusPerWorker\":8,"
        "\"template\":{\"metadata\":{\"labels\":{\"team\":\"a\",\"holmes.dev/job\":\"spoof\"}},"
        "\"spec\":{\"tolerations\":[{\"key\":\"gpu\"}],\"containers\":[{\"name\":\"sidecar\",\"image\":\"s\"},"
        "{\"name\":\"worker\",\"command\":[\"x\"],\"env\":[{\"name\":\"HOLMES_JOB_NAME\",\"value\":\"old\"}],"
        "\"resources\":{\"limits\":{\"nvidia.com/gpu\":4}}}]}}}}");
    herr e;
    cJSON *pod = controller_build_pod(job, 3, "ws://c:8443", "holmes-node:default", &e);
    CHECK("build pod", pod != NULL);
    if (!pod)
        return;
    const cJSON *md = cJSON_GetObjectItem(pod, "metadata");
    CHECK_STR("pod name", cJSON_GetObjectItem(md, "name")->valuestring, "gpt-worker-3");
    const cJSON *labels = cJSON_GetObjectItem(md, "labels");
    CHECK_STR("job label cannot be spoofed by the template",
              cJSON_GetObjectItem(labels, "holmes.dev/job")->valuestring, "gpt");
    CHECK_STR("index label", cJSON_GetObjectItem(labels, "holmes.dev/worker-index")->valuestring, "3");
    CHECK_STR("template label kept", cJSON_GetObjectItem(labels, "team")->valuestring, "a");
    const cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItem(md, "ownerReferences"), 0);
    CHECK("owner reference controller: true with the job uid",
          cJSON_IsTrue(cJSON_GetObjectItem(ref, "controller")) &&
              !strcmp(cJSON_GetObjectItem(ref, "uid")->valuestring, "u-1"));
    const cJSON *spec = cJSON_GetObjectItem(pod, "spec");
    const cJSON *cs = cJSON_GetObjectItem(spec, "containers");
    CHECK_INT("sidecar kept", cJSON_GetArraySize(cs), 2);
    const cJSON *side = cJSON_GetArrayItem(cs, 0), *w = cJSON_GetArrayItem(cs, 1);
    CHECK_STR("sidecar untouched", cJSON_GetObjectItem(side, "image")->valuestring, "s");
    CHECK_STR("worker container gets the default image", cJSON_GetObjectItem(w, "image")->valuestring,
              "holmes-node:default");
    char *cmd = cJSON_PrintUnformatted(cJSON_GetObjectItem(w, "command"));
    CHECK_STR("command replaced", cmd, "[\"holmes-node\",\"worker\"]");
    free(cmd);
    int n;
    const char *v = env_value(w, "HOLMES_JOB_NAME", &n);
    CHECK("env from the template overridden once", v && !strcmp(v, "gpt") && n == 1);
    v = env_value(w, "HOLMES_TOKEN", &n);
    CHECK("token from the secret", v && !strcmp(v, "(valueFrom)") && n == 1);
    v = env_value(w, "HOLMES_COORDINATOR", &n);
    CHECK_STR("coordinator env", v, "ws://c:8443");
    const cJSON *lim = cJSON_GetObjectItem(cJSON_GetObjectItem(w, "resources"), "limits");
    CHECK_INT("template GPU limit wins", cJSON_GetObjectItem(lim, "nvidia.com/gpu")->valueint, 4);
    CHECK("tolerations kept", cJSON_GetArraySize(cJSON_GetObjectItem(spec, "tolerations")) == 1);
    CHECK_STR("restartPolicy Never", cJSON_GetObjectItem(spec, "restartPolicy")->valuestring, "Never");
    cJSON_Delete(pod);

    pod = controller_build_pod(job, 0, "ws://c", NULL, &e);
    CHECK("no image anywhere -> error naming spec.image", !pod && strstr(e.msg, "spec.image"));
    cJSON_Delete(pod);
    cJSON_Delete(job);

    /* spec.emulation: each pod's worker reports its group's NIC (groups in worker order). */
    job = cJSON_Parse(
        "{\"metadata\":{\"name\":\"em\",\"namespace\":\"ml\"},\"spec\":{\"workers\":3,"
        "\"gpusPerWorker\":0,\"emulation\":{\"nics\":[{\"class\":\"infiniband\",\"fabric\":\"ib-a\","
        "\"gbps\":200,\"count\":2},{\"class\":\"roce\",\"fabric\":\"roce-b\",\"gbps\":100,\"count\":1}]}}}");
    const char *want[3] = {"infiniband:ib-a:200", "infiniband:ib-a:200", "roce:roce-b:100"};
    for (int i = 0; i < 3; i++) {
        pod = controller_build_pod(job, i, "ws://c", "img", &e);
        const cJSON *wc = pod ? cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"),
                                                                       "containers"), 0) : NULL;
        v = wc ? env_value(wc, "HOLMES_EMULATE_NIC", &n) : NULL;
        char name[96];
        snprintf(name, sizeof name, "spec.emulation: worker %d's pod emulates %s", i, want[i]);
        CHECK(name, v && !strcmp(v, want[i]) && n == 1);
        cJSON_Delete(pod);
    }
    cJSON_Delete(job);

    job = cJSON_Parse("{\"metadata\":{\"name\":\"j\",\"namespace\":\"n\"},\"spec\":{\"workers\":1,"
                      "\"image\":\"i\",\"gpusPerWorker\":2}}");
    pod = controller_build_pod(job, 0, "ws://c", NULL, &e);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "containers"), 0);
    CHECK("no template -> a worker container asking for the GPUs",
          c0 && !strcmp(cJSON_GetObjectItem(c0, "name")->valuestring, "worker") &&
              cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "resources"), "limits"),
                                  "nvidia.com/gpu")->valueint == 2);
    cJSON_Delete(pod);
    cJSON_Delete(job);
}

static void test_spec_errors(void)
{
    cJSON *job = cJSON_Parse("{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                             "\"metadata\":{\"name\":\"x\"},\"spec\":{\"workers\":0,\"gpusPerWorker\":0,"
                             "\"model\":{\"preset\":\"gpt2-124m\"},\"training\":{\"steps\":-1}}}");
    cJSON *errs = controller_spec_errors(job);
    char *txt = cJSON_PrintUnformatted(errs);
    CHECK("spec errors: every field named", txt && strstr(txt, "spec.workers") && strstr(txt, "spec.training.steps"));
    free(txt);
    cJSON_Delete(errs);
    cJSON_Delete(job);
}

static void test_api_table(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    controller_print_api_calls(f, 0);
    fclose(f);
    CHECK("api calls: status subresource", strstr(buf, "patch holmes.dev trainingjobs/status\n") != NULL);
    CHECK("api calls: pods", strstr(buf, "create core pods\n") && strstr(buf, "delete core pods\n"));
    CHECK("api calls: leases", strstr(buf, "get coordination.k8s.io leases\n") != NULL);
    int lines = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    CHECK_INT("api calls: one line per table entry without gang schedulers", lines, API_OP_COUNT - 8);
    CHECK("api calls: no PodGroups without gang schedulers", !strstr(buf, "podgroups"));
    free(buf);
    buf = NULL;
    f = open_memstream(&buf, &len);
    controller_print_api_calls(f, 1u << TJ_GANG_VOLCANO | 1u << TJ_GANG_COSCHEDULING | 1u << TJ_GANG_KUEUE);
    fclose(f);
    lines = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    CHECK_INT("api calls: one line per table entry with every gang scheduler", lines, API_OP_COUNT);
    CHECK("api calls: volcano PodGroups", strstr(buf, "create scheduling.volcano.sh podgroups\n") &&
          strstr(buf, "delete scheduling.volcano.sh podgroups\n"));
    CHECK("api calls: coscheduling PodGroups", strstr(buf, "watch scheduling.x-k8s.io podgroups\n") != NULL);
    free(buf);
}

static void test_events_time(void)
{
    CHECK_NEAR("time parse", kube_time_parse("2024-01-02T03:04:05Z"), 1704164645.0, 1e-12);
    CHECK_NEAR("time parse micro", kube_time_parse("2024-01-02T03:04:05.250000Z"), 1704164645.25, 1e-12);
    CHECK("time parse rejects junk", kube_time_parse("yesterday") < 0);
    char now[48];
    kube_time_now(now, sizeof now, 1);
    CHECK("time now round-trips", kube_time_parse(now) > 1.7e9);
    cJSON *job = cJSON_Parse("{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                             "\"metadata\":{\"name\":\"j\",\"namespace\":\"n\",\"uid\":\"u\"}}");
    cJSON *ev = kube_event_build(job, "Warning", "InvalidSpec", "spec.workers: bad", NULL);
    const cJSON *inv = cJSON_GetObjectItem(ev, "involvedObject");
    CHECK("event names the object", !strcmp(cJSON_GetObjectItem(inv, "kind")->valuestring, "TrainingJob") &&
                                        !strcmp(cJSON_GetObjectItem(inv, "uid")->valuestring, "u"));
    CHECK_STR("event type", cJSON_GetObjectItem(ev, "type")->valuestring, "Warning");
    cJSON_Delete(ev);
    cJSON_Delete(job);
}

static void test_hist(void)
{
    struct metrics_hist h;
    metrics_hist_init(&h);
    for (int i = 1; i <= 1000; i++)
        metrics_hist_observe(&h, i / 1000.0); /* 1 ms .. 1 s */
    CHECK_NEAR("p50 within a bucket", metrics_hist_quantile(&h, 0.5), 0.5, 0.08);
    CHECK_NEAR("p99 within a bucket", metrics_hist_quantile(&h, 0.99), 0.99, 0.08);
    struct metrics_buf b = {0};
    metrics_hist_render(&h, &b, "x_seconds", "help");
    CHECK("histogram le=0.5 counts half", strstr(b.data, "x_seconds_bucket{le=\"0.5\"} 500\n") != NULL);
    CHECK("histogram count", strstr(b.data, "x_seconds_count 1000\n") != NULL);
    free(b.data);
}

static int handler(void *user, const struct http_request *req, struct metrics_buf *b,
                   const char **type)
{
    (void)user, (void)type;
    if (strcmp(req->path, "/metrics"))
        return 404;
    metrics_printf(b, "up 1\n");
    return 200;
}

static size_t sink(char *p, size_t s, size_t n, void *ud)
{
    strncat(ud, p, s * n < 200 ? s * n : 200);
    return s * n;
}

static void test_http(void)
{
    herr e;
    struct http_server *s = http_server_start("127.0.0.1:0", handler, NULL, NULL, &e);
    CHECK("http server starts on port 0", s && http_server_port(s) > 0);
    if (!s)
        return;
    char url[64], body[512] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics?x=1", http_server_port(s));
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    CHECK("GET /metrics 200 with the body", code == 200 && !strcmp(body, "up 1\n"));
    snprintf(url, sizeof url, "http://127.0.0.1:%d/nope", http_server_port(s));
    curl_easy_setopt(h, CURLOPT_URL, url);
    code = 0;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    CHECK_INT("unknown path 404", code, 404);
    curl_easy_cleanup(h);
    http_server_stop(s);
    CHECK("bad address is an error naming it", !http_server_start("nohost", handler, NULL, NULL, &e) &&
                                                   strstr(e.msg, "nohost"));
}

int main(void)
{
    test_build_pod();
    test_pod_security();
    test_spec_errors();
    test_api_table();
    test_events_time();
    test_hist();
    test_http();
    TEST_MAIN_END();
}
