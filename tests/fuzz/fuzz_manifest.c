/* libFuzzer target: the files a user hands the operator's commands - a TrainingJob manifest
 * (`holmes-operator validate`, `local`, `plan`), a cluster file and a calibration file
 * (`holmes-operator plan --cluster --calibration`) - and, for the small ones, the plan made
 * from them. The first byte picks the file the rest of the input is:
 *   0: the manifest (YAML or JSON, several documents, Lists): tj_load_file; each job's
 *      tj_spec_runnable and tj_spec_describe; its resolved spec printed (validate --print)
 *      must read back to the same spec; a one-job manifest is planned on its spec.emulation
 *      workers (cluster_from_emulation), as `holmes-operator plan JOB` does;
 *   1: a cluster file: cluster_load, then the plan of tests/fuzz/seeds' tiny job on it;
 *   2: a calibration file: cluster_load_calibration over the tiny job's emulated cluster, then
 *      its plan;
 *   3: a kubeconfig (the operator out of a cluster): kube_config_from_kubeconfig, its current
 *      context and the context named "other".
 * A plan made must go through the document the workers receive (plan_to_doc, plan_doc_to_json,
 * plan_doc_from_json) unrefused. Every rejection names the file and line or the field
 * (fuzz_check.h). The files are named as a user would name them (job.yaml, cluster.yaml,
 * calibration.yaml, kubeconfig; fuzz_files.h). Seeds: tests/fuzz/seeds/manifest (examples/,
 * tests/fixtures and a kubeconfig, the kind byte in front: fuzz_seeds.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "fuzz_check.h"
#include "fuzz_files.h"
#include "kube_config.h"
#include "plan_doc.h"
#include "planner.h"
#include "planner_job.h"
#include "trainingjob.h"

/* A job small enough to plan within the target's time: its emulated cluster and plan stand in
 * for the job when the input is a cluster or calibration file. */
static const char TINY_JOB[] =
    "apiVersion: holmes.dev/v1alpha1\n"
    "kind: TrainingJob\n"
    "metadata: {name: fuzz-tiny}\n"
    "spec:\n"
    "  workers: 4\n"
    "  gpusPerWorker: 0\n"
    "  model: {layers: 4, hidden: 64, heads: 4, vocab: 256, seqLen: 32}\n"
    "  parallelism: {microBatches: 4, microBatchSize: 1}\n"
    "  training:\n"
    "    steps: 10\n"
    "    data: {path: corpus.txt, format: text}\n"
    "  emulation:\n"
    "    nics:\n"
    "    - {class: infiniband, fabric: ib-a, gbps: 100, count: 2}\n"
    "    - {class: roce, fabric: roce-b, gbps: 50, count: 2}\n";

/* plans are made only below these (the search grows with the cluster and the model) */
#define FUZZ_MAX_WORKERS 16
#define FUZZ_MAX_RANKS 64
#define FUZZ_MAX_LAYERS 96

/* into the private directory, with the tiny job written there the first time */
static void enter_workdir(void)
{
    static int tiny_written;
    fuzz_enter_workdir("manifest");
    if (!tiny_written &&
        fuzz_write_file("tiny.yaml", (const uint8_t *)TINY_JOB, sizeof TINY_JOB - 1) != 0) {
        perror("fuzz_manifest: tiny.yaml");
        abort();
    }
    tiny_written = 1;
}

static void check_errors(const char *what, const struct tj_errors *te)
{
    int kept = te->count < TJ_MAX_ERRORS ? te->count : TJ_MAX_ERRORS;
    for (int i = 0; i < kept; i++) {
        herr e = {0};
        snprintf(e.msg, sizeof e.msg, "%s", te->msg[i]);
        fuzz_check_rejection(what, &e);
    }
}

static int small_enough(const struct tj_spec *s, const struct cluster *cl)
{
    int ranks = 0;
    for (int i = 0; i < cl->n_workers; i++)
        ranks += cl->workers[i].gpus > 0 ? cl->workers[i].gpus : 1;
    return cl->n_workers <= FUZZ_MAX_WORKERS && ranks <= FUZZ_MAX_RANKS &&
           s->model.layers <= FUZZ_MAX_LAYERS;
}

/* holmes-operator plan's path from the job on to the workers' document */
static void plan_and_hand_over(const struct tj_spec *s, struct cluster *cl)
{
    if (!small_enough(s, cl))
        return;
    herr e = {0};
    struct plan_job job;
    planner_job_from_spec(s, &job);
    if (planner_apply_spec(s, cl->workers, cl->n_workers, &cl->links, &e) != 0) {
        fuzz_check_rejection("planner_apply_spec", &e);
        return;
    }
    struct plan p;
    memset(&p, 0, sizeof p);
    if (plan_make(cl->workers, cl->n_workers, &job, &cl->links, &p, &e) != 0) {
        fuzz_check_rejection("plan_make", &e);
        plan_free(&p);
        return;
    }
    cJSON *pj = plan_to_json(&p); /* `plan --json` */
    cJSON_Delete(pj);
    struct plan_doc d, back;
    memset(&d, 0, sizeof d);
    memset(&back, 0, sizeof back);
    if (plan_to_doc(&p, &d, &e) != 0) {
        fprintf(stderr, "plan_to_doc refused a plan the planner made: %s\n", e.msg);
        abort();
    }
    cJSON *dj = plan_doc_to_json(&d);
    if (!dj)
        abort();
    if (plan_doc_from_json(dj, "plan", &back, &e) != 0) {
        fprintf(stderr, "the workers refuse a plan the planner made: %s\n", e.msg);
        abort();
    }
    cJSON_Delete(dj);
    plan_doc_free(&back);
    plan_doc_free(&d);
    plan_free(&p);
}

/* The resolved spec `validate --print` shows is a spec: read back, it prints the same. */
static void check_resolved(const struct tj_spec *s)
{
    cJSON *j = tj_spec_to_json(s);
    if (!j)
        return; /* out of memory */
    struct tj_spec again;
    struct tj_errors te = {0};
    memset(&again, 0, sizeof again);
    if (tj_spec_from_json(j, "spec", &again, &te) != 0) {
        char *txt = cJSON_PrintUnformatted(j);
        fprintf(stderr, "the resolved spec does not read back: %s\n%s\n",
                te.count ? te.msg[0] : "?", txt ? txt : "");
        abort();
    }
    cJSON *j2 = tj_spec_to_json(&again);
    char *a = cJSON_PrintUnformatted(j), *b = j2 ? cJSON_PrintUnformatted(j2) : NULL;
    if (a && b && strcmp(a, b) != 0) {
        fprintf(stderr, "the resolved spec changes when read back:\n%s\n%s\n", a, b);
        abort();
    }
    free(a);
    free(b);
    cJSON_Delete(j2);
    cJSON_Delete(j);
    tj_spec_free(&again);
}

static void fuzz_job(void)
{
    struct tj_job *jobs = NULL;
    int n = 0;
    struct tj_errors te = {0};
    if (tj_load_file("job.yaml", &jobs, &n, &te) != 0) {
        check_errors("tj_load_file", &te);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct tj_errors run = {0};
        if (tj_spec_runnable(&jobs[i].spec, "spec", &run) != 0)
            check_errors("tj_spec_runnable", &run);
        char desc[512];
        tj_spec_describe(&jobs[i].spec, desc, sizeof desc);
        check_resolved(&jobs[i].spec);
    }
    if (n == 1) {
        struct cluster cl;
        herr e = {0};
        if (cluster_from_emulation(&jobs[0].spec, 0, &cl, &e) != 0) {
            fuzz_check_rejection("cluster_from_emulation", &e);
        } else {
            plan_and_hand_over(&jobs[0].spec, &cl);
            cluster_free(&cl);
        }
    }
    for (int i = 0; i < n; i++)
        tj_job_free(&jobs[i]);
    free(jobs);
}

static void fuzz_cluster(int calibration)
{
    struct tj_job tj;
    herr e = {0};
    if (planner_load_job("tiny.yaml", &tj, &e) != 0) {
        fprintf(stderr, "fuzz_manifest: the tiny job: %s\n", e.msg);
        abort();
    }
    struct cluster cl;
    int rc = calibration ? cluster_from_emulation(&tj.spec, 0, &cl, &e)
                         : cluster_load("cluster.yaml", &cl, &e);
    if (rc != 0) {
        if (calibration) {
            fprintf(stderr, "fuzz_manifest: the tiny job's cluster: %s\n", e.msg);
            abort();
        }
        fuzz_check_rejection("cluster_load", &e);
        tj_job_free(&tj);
        return;
    }
    if (calibration && cluster_load_calibration("calibration.yaml", &cl.links, &e) != 0) {
        fuzz_check_rejection("cluster_load_calibration", &e);
    } else {
        /* the file's workers must be the job's: spec.workers and gpusPerWorker follow them */
        tj.spec.workers = cl.n_workers;
        tj.spec.gpus_per_worker = cl.n_workers ? cl.workers[0].gpus : 0;
        plan_and_hand_over(&tj.spec, &cl);
    }
    cluster_free(&cl);
    tj_job_free(&tj);
}

static void fuzz_kubeconfig(void)
{
    static const char *const contexts[2] = {NULL, "other"};
    for (int i = 0; i < 2; i++) {
        struct kube_config c;
        herr e = {0};
        if (kube_config_from_kubeconfig(&c, "kubeconfig", contexts[i], &e) != 0)
            fuzz_check_rejection("kube_config_from_kubeconfig", &e);
        kube_config_free(&c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enter_workdir();
    static const char *const names[4] = {"job.yaml", "cluster.yaml", "calibration.yaml",
                                         "kubeconfig"};
    int kind = data[0] % 4;
    if (fuzz_write_file(names[kind], data + 1, size - 1) != 0) {
        perror(names[kind]);
        abort();
    }
    if (kind == 0)
        fuzz_job();
    else if (kind == 3)
        fuzz_kubeconfig();
    else
        fuzz_cluster(kind == 2);
    fuzz_leave_workdir();
    return 0;
}
