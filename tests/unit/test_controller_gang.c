/* Gang admission without a server (operator/controller/controller_gang.c): the worker pod and
 * the PodGroup rendered for each gang scheduler (none, kueue, volcano, coscheduling), the
 * operator's default and enabled schedulers, what it refuses, Kueue's admission gate. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

#include "controller.h"
#include "json.h"
#include "manifest_testutil.h"
#include "trainingjob.h"

#define ALL_GANGS (1u << TJ_GANG_KUEUE | 1u << TJ_GANG_VOLCANO | 1u << TJ_GANG_COSCHEDULING)

/* A job with 4 workers of 8 GPUs; `extra` is more spec members ("" or ",\"scheduling\":..."). */
static cJSON *job_with(const char *extra)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"gpt\","
             "\"namespace\":\"ml\",\"uid\":\"u-1\"},\"spec\":{\"workers\":4,\"gpusPerWorker\":8,"
             "\"model\":{\"preset\":\"gpt2-124m\"},\"training\":{\"steps\":10}%s}}", extra);
    return cJSON_Parse(buf);
}

static const char *label(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json_at(o, "metadata.labels"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *annotation(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json_at(o, "metadata.annotations"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* The PodGroup's owner: the job, as controller, blocking its deletion. */
static int owned_by_job(const cJSON *o)
{
    const cJSON *refs = json_at(o, "metadata.ownerReferences");
    const cJSON *r = cJSON_GetArrayItem(refs, 0);
    return cJSON_GetArraySize(refs) == 1 && streq(json_str_at(r, "kind"), "TrainingJob") &&
           streq(json_str_at(r, "apiVersion"), "holmes.dev/v1alpha1") && streq(json_str_at(r, "name"), "gpt") &&
           streq(json_str_at(r, "uid"), "u-1") && cJSON_IsTrue(cJSON_GetObjectItem(r, "controller")) &&
           cJSON_IsTrue(cJSON_GetObjectItem(r, "blockOwnerDeletion"));
}

static void test_parse_list(void)
{
    unsigned en = 99;
    herr e;
    CHECK("gang list: kueue,volcano", controller_gang_parse_list("kueue,volcano", &en, &e) == 0 &&
          en == (1u << TJ_GANG_KUEUE | 1u << TJ_GANG_VOLCANO));
    CHECK("gang list: empty", controller_gang_parse_list("", &en, &e) == 0 && en == 0);
    CHECK("gang list: none enables nothing", controller_gang_parse_list("none", &en, &e) == 0 && en == 0);
    CHECK("gang list: unknown refused, named", controller_gang_parse_list("kueue,slurm", &en, &e) != 0 &&
          strstr(e.msg, "\"slurm\""));
}

static void test_none(void)
{
    struct controller_gang g = {.enabled = ALL_GANGS};
    cJSON *job = job_with(",\"template\":{\"spec\":{\"schedulerName\":\"mine\"}}");
    struct tj_spec s;
    CHECK("none: spec parses", spec_of_job(job, &s) == 0);
    CHECK_INT("none: the default without --gang-default", controller_gang_of(&s, &g), TJ_GANG_NONE);
    herr e;
    cJSON *pod = controller_build_gang_pod(job, &s, 1, "ws://c", "img", &g, &e);
    CHECK("none: pod built", pod != NULL);
    CHECK("none: no gang labels or annotations",
          !label(pod, "kueue.x-k8s.io/queue-name") && !label(pod, "scheduling.x-k8s.io/pod-group") &&
          !annotation(pod, "scheduling.k8s.io/group-name") && !annotation(pod, "kueue.x-k8s.io/pod-group-total-count"));
    CHECK("none: the template's schedulerName kept", streq(json_str_at(pod, "spec.schedulerName"), "mine"));
    CHECK("none: no PodGroup", controller_build_podgroup(job, &s, &g) == NULL);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);
}

static void test_kueue(void)
{
    struct controller_gang g = {.enabled = ALL_GANGS, .default_gang = TJ_GANG_KUEUE};
    cJSON *job = job_with(",\"scheduling\":{\"queue\":\"team-a\"},\"template\":{\"metadata\":{\"labels\":"
                          "{\"kueue.x-k8s.io/queue-name\":\"spoof\",\"team\":\"a\"}},\"spec\":{"
                          "\"priorityClassName\":\"low\"}}");
    struct tj_spec s;
    CHECK("kueue: spec parses", spec_of_job(job, &s) == 0);
    CHECK_INT("kueue: the operator's default applies", controller_gang_of(&s, &g), TJ_GANG_KUEUE);
    struct tj_errors errs = {0};
    CHECK("kueue: accepted", controller_gang_check(&s, &g, &errs) == 0);
    herr e;
    cJSON *pod = controller_build_gang_pod(job, &s, 2, "ws://c", "img", &g, &e);
    CHECK("kueue: pod built", pod != NULL);
    CHECK("kueue: queue-name label is the LocalQueue (ours win)", streq(label(pod, "kueue.x-k8s.io/queue-name"), "team-a"));
    CHECK("kueue: pod-group-name label is the job", streq(label(pod, "kueue.x-k8s.io/pod-group-name"), "gpt"));
    CHECK("kueue: pod-group-total-count annotation is the workers",
          streq(annotation(pod, "kueue.x-k8s.io/pod-group-total-count"), "4"));
    CHECK("kueue: template labels and holmes labels kept", streq(label(pod, "team"), "a") &&
          streq(label(pod, "holmes.dev/job"), "gpt") && streq(label(pod, "holmes.dev/worker-index"), "2"));
    CHECK("kueue: scheduler left alone", json_at(pod, "spec.schedulerName") == NULL);
    CHECK("kueue: priority class passed through", streq(json_str_at(pod, "spec.priorityClassName"), "low"));
    CHECK("kueue: no PodGroup object (Kueue groups the pods)", controller_build_podgroup(job, &s, &g) == NULL);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);
}

static void test_volcano(void)
{
    struct controller_gang g = {.enabled = ALL_GANGS};
    cJSON *job = job_with(",\"scheduling\":{\"gang\":\"volcano\",\"queue\":\"research\"},\"template\":{\"spec\":"
                          "{\"priorityClassName\":\"high\"}}");
    struct tj_spec s;
    CHECK("volcano: spec parses", spec_of_job(job, &s) == 0);
    herr e;
    cJSON *pod = controller_build_gang_pod(job, &s, 0, "ws://c", "img", &g, &e);
    CHECK("volcano: pod built", pod != NULL);
    CHECK("volcano: group-name annotation", streq(annotation(pod, "scheduling.k8s.io/group-name"), "gpt"));
    CHECK("volcano: schedulerName volcano by default", streq(json_str_at(pod, "spec.schedulerName"), "volcano"));
    CHECK("volcano: no Kueue labels", !label(pod, "kueue.x-k8s.io/queue-name"));
    cJSON *pg = controller_build_podgroup(job, &s, &g);
    CHECK("volcano: PodGroup built", pg != NULL);
    CHECK("volcano: PodGroup apiVersion and kind", streq(json_str_at(pg, "apiVersion"), "scheduling.volcano.sh/v1beta1") &&
          streq(json_str_at(pg, "kind"), "PodGroup"));
    CHECK("volcano: PodGroup name and namespace", streq(json_str_at(pg, "metadata.name"), "gpt") &&
          streq(json_str_at(pg, "metadata.namespace"), "ml") && streq(label(pg, "holmes.dev/job"), "gpt"));
    CHECK("volcano: PodGroup owned by the job", owned_by_job(pg));
    CHECK_INT("volcano: minMember = workers", (int)json_num_at(pg, "spec.minMember", -1), 4);
    CHECK("volcano: queue passed through", streq(json_str_at(pg, "spec.queue"), "research"));
    CHECK("volcano: priority class passed through", streq(json_str_at(pg, "spec.priorityClassName"), "high"));
    CHECK("volcano: minResources = the gang's GPUs",
          streq(cJSON_GetStringValue(cJSON_GetObjectItem(json_at(pg, "spec.minResources"), "nvidia.com/gpu")), "32"));
    CHECK("volcano: no coscheduling timeout", json_at(pg, "spec.scheduleTimeoutSeconds") == NULL);
    cJSON_Delete(pg);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);

    /* the chart's scheduler name, and the spec's over it; no queue: Volcano's default */
    g.volcano_scheduler = "volcano-prod";
    job = job_with(",\"scheduling\":{\"gang\":\"volcano\"}");
    CHECK("volcano: spec without queue parses", spec_of_job(job, &s) == 0);
    pod = controller_build_gang_pod(job, &s, 0, "ws://c", "img", &g, &e);
    pg = controller_build_podgroup(job, &s, &g);
    CHECK("volcano: the operator's scheduler name", pod && streq(json_str_at(pod, "spec.schedulerName"), "volcano-prod"));
    CHECK("volcano: no queue, no priority class when not given", pg && !json_at(pg, "spec.queue") &&
          !json_at(pg, "spec.priorityClassName"));
    cJSON_Delete(pg);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);
    job = job_with(",\"scheduling\":{\"gang\":\"volcano\",\"schedulerName\":\"vc2\"}");
    CHECK("volcano: spec with schedulerName parses", spec_of_job(job, &s) == 0);
    pod = controller_build_gang_pod(job, &s, 0, "ws://c", "img", &g, &e);
    CHECK("volcano: the spec's scheduler name wins", pod && streq(json_str_at(pod, "spec.schedulerName"), "vc2"));
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);
}

static void test_coscheduling(void)
{
    struct controller_gang g = {.enabled = ALL_GANGS};
    cJSON *job = job_with(",\"gangTimeoutSeconds\":90,\"scheduling\":{\"gang\":\"coscheduling\"}");
    struct tj_spec s;
    CHECK("coscheduling: spec parses", spec_of_job(job, &s) == 0);
    herr e;
    cJSON *pod = controller_build_gang_pod(job, &s, 3, "ws://c", "img", &g, &e);
    CHECK("coscheduling: pod built", pod != NULL);
    CHECK("coscheduling: pod-group label", streq(label(pod, "scheduling.x-k8s.io/pod-group"), "gpt"));
    CHECK("coscheduling: default schedulerName",
          streq(json_str_at(pod, "spec.schedulerName"), "scheduler-plugins-scheduler"));
    CHECK("coscheduling: no Volcano annotation", !annotation(pod, "scheduling.k8s.io/group-name"));
    cJSON *pg = controller_build_podgroup(job, &s, &g);
    CHECK("coscheduling: PodGroup built", pg != NULL);
    CHECK("coscheduling: PodGroup apiVersion", streq(json_str_at(pg, "apiVersion"), "scheduling.x-k8s.io/v1alpha1") &&
          streq(json_str_at(pg, "kind"), "PodGroup"));
    CHECK("coscheduling: PodGroup owned by the job", owned_by_job(pg));
    CHECK_INT("coscheduling: minMember = workers", (int)json_num_at(pg, "spec.minMember", -1), 4);
    CHECK_INT("coscheduling: scheduleTimeoutSeconds defaults to gangTimeoutSeconds",
              (int)json_num_at(pg, "spec.scheduleTimeoutSeconds", -1), 90);
    CHECK("coscheduling: no Volcano queue", !json_at(pg, "spec.queue"));
    cJSON_Delete(pg);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);

    g.cosched_scheduler = "sp-sched";
    job = job_with(",\"scheduling\":{\"gang\":\"coscheduling\",\"scheduleTimeoutSeconds\":30}");
    CHECK("coscheduling: spec with a timeout parses", spec_of_job(job, &s) == 0);
    pod = controller_build_gang_pod(job, &s, 0, "ws://c", "img", &g, &e);
    pg = controller_build_podgroup(job, &s, &g);
    CHECK("coscheduling: the operator's scheduler name", pod && streq(json_str_at(pod, "spec.schedulerName"), "sp-sched"));
    CHECK_INT("coscheduling: the spec's scheduleTimeoutSeconds", (int)json_num_at(pg, "spec.scheduleTimeoutSeconds", -1), 30);
    cJSON_Delete(pg);
    cJSON_Delete(pod);
    tj_spec_free(&s);
    cJSON_Delete(job);
}

/* The errors of controller_gang_check for a job under options g; "" when accepted. */
static void check_errors(const char *extra, const struct controller_gang *g, char *out, size_t n)
{
    cJSON *job = job_with(extra);
    struct tj_spec s;
    struct tj_errors errs = {0};
    out[0] = '\0';
    if (tj_spec_from_json(json_at(job, "spec"), "spec", &s, &errs) != 0)
        snprintf(out, n, "parse: %s", errs.msg[0]);
    else if (controller_gang_check(&s, g, &errs) != 0)
        snprintf(out, n, "%s", errs.msg[0]);
    tj_spec_free(&s);
    cJSON_Delete(job);
}

static void test_refusals(void)
{
    char msg[512];
    struct controller_gang off = {0};
    check_errors(",\"scheduling\":{\"gang\":\"volcano\"}", &off, msg, sizeof msg);
    CHECK("refused: volcano not enabled, naming the field and the chart value",
          strstr(msg, "spec.scheduling.gang: volcano is not enabled") && strstr(msg, "scheduling.volcano.enabled"));
    printf("    %s\n", msg);
    check_errors(",\"scheduling\":{\"gang\":\"kueue\",\"queue\":\"q\"}", &off, msg, sizeof msg);
    CHECK("refused: kueue not enabled", strstr(msg, "spec.scheduling.gang: kueue is not enabled") != NULL);
    struct controller_gang kueue_default = {.enabled = 1u << TJ_GANG_KUEUE, .default_gang = TJ_GANG_KUEUE};
    check_errors("", &kueue_default, msg, sizeof msg);
    CHECK("refused: the default kueue needs a queue", strstr(msg, "spec.scheduling.queue: required when gang is kueue") != NULL);
    struct controller_gang volcano_default = {.enabled = 1u << TJ_GANG_VOLCANO, .default_gang = TJ_GANG_VOLCANO};
    check_errors(",\"template\":{\"spec\":{\"schedulerName\":\"x\"}}", &volcano_default, msg, sizeof msg);
    CHECK("refused: template schedulerName under the default volcano",
          strstr(msg, "spec.template.spec.schedulerName: gang volcano sets the pods' scheduler") != NULL);
    check_errors(",\"scheduling\":{\"scheduleTimeoutSeconds\":5}", &volcano_default, msg, sizeof msg);
    CHECK("refused: a coscheduling field under the default volcano",
          strstr(msg, "spec.scheduling.scheduleTimeoutSeconds: applies only to gang coscheduling") != NULL);
    check_errors(",\"scheduling\":{\"queue\":\"q\"}", &off, msg, sizeof msg);
    CHECK("refused: a queue under the default none", strstr(msg, "spec.scheduling.queue: applies only") != NULL);
    check_errors(",\"scheduling\":{\"gang\":\"none\"}", &off, msg, sizeof msg);
    CHECK("accepted: none needs nothing enabled", msg[0] == '\0');
    check_errors("", &volcano_default, msg, sizeof msg);
    CHECK("accepted: the default volcano when enabled", msg[0] == '\0');
}

static void test_gated(void)
{
    cJSON *pods = cJSON_Parse("[{\"spec\":{\"schedulingGates\":[{\"name\":\"other\"},{\"name\":\"kueue.x-k8s.io/admission\"}]}},"
                              "{\"spec\":{\"schedulingGates\":[{\"name\":\"other\"}]}},{\"spec\":{}},{},"
                              "{\"spec\":{\"schedulingGates\":[{\"name\":\"x\"},{\"name\":\"y\"}]}},"
                              "{\"spec\":{\"schedulingGates\":[{\"name\":\"kueue.x-k8s.io/admission\"}]}}]");
    CHECK_INT("gated: pods carrying Kueue's admission gate", controller_pods_gated(pods), 2);
    cJSON_Delete(pods);
}

int main(void)
{
    test_parse_list();
    test_none();
    test_kueue();
    test_volcano();
    test_coscheduling();
    test_refusals();
    test_gated();
    TEST_MAIN_END();
}
