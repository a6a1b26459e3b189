/* The TrainingJob spec module: presets, defaults, every-error reporting, round trip. */
#include "test.h"

#include <stdlib.h>

#include "manifest_testutil.h"
#include "trainingjob.h"
#include "yaml_json.h"

static const char *MINIMAL =
    "apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
    "spec:\n  workers: 2\n  gpusPerWorker: 0\n  model: {preset: gpt2-124m}\n  training: {steps: 10}\n";

/* Parses one YAML document as a job; returns the parse result, errors in *errs. */
static int parse_job(const char *yaml, struct tj_job *job, struct tj_errors *errs)
{
    herr e;
    memset(errs, 0, sizeof *errs);
    cJSON *docs = yaml_parse_documents(yaml, strlen(yaml), "t.yaml", &e);
    if (!docs) {
        tj_errors_add(errs, "%s", e.msg);
        memset(job, 0, sizeof *job);
        return -1;
    }
    int rc = tj_job_from_json(cJSON_GetArrayItem(docs, 0), job, errs);
    cJSON_Delete(docs);
    return rc;
}

/* The two element-type fields of a job whose spec.parallelism is `par`, as parsed and after
 * tj_spec_to_json / tj_spec_from_json; ok: 0 nothing parsed, 1 parsed, 2 also round-tripped. */
struct dtypes {
    int ok;
    enum dtype pipe, gather, pipe_again, gather_again;
};

static int dtype_round_trip(const char *par, struct dtypes *d)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
             "spec:\n  workers: 2\n  gpusPerWorker: 0\n  model: {preset: gpt2-124m}\n"
             "  parallelism: %s\n  training: {steps: 10}\n", par);
    struct tj_job job;
    struct tj_errors errs;
    memset(&errs, 0, sizeof errs);
    memset(d, 0, sizeof *d);
    if (parse_job(yaml, &job, &errs)) {
        tj_errors_print(&errs, "  error: ");
        tj_job_free(&job);
        return 0;
    }
    d->ok = 1;
    d->pipe = job.spec.par.pipeline_dtype;
    d->gather = job.spec.par.param_gather_dtype;
    cJSON *j = tj_spec_to_json(&job.spec);
    struct tj_spec again;
    memset(&errs, 0, sizeof errs);
    if (j && tj_spec_from_json(j, "spec", &again, &errs) == 0) {
        d->ok = 2;
        d->pipe_again = again.par.pipeline_dtype;
        d->gather_again = again.par.param_gather_dtype;
        tj_spec_free(&again);
    }
    cJSON_Delete(j);
    tj_job_free(&job);
    return d->ok;
}

/* The first section in which two specs differ, or NULL when they are the same (pod_template
 * aside: tj_spec_to_json leaves it out). */
static const char *spec_diff(const struct tj_spec *a, const struct tj_spec *b)
{
#define SAME(f) (memcmp(&a->f, &b->f, sizeof a->f) == 0)
    if (!SAME(workers) || !SAME(gpus_per_worker) || !SAME(image)) return "workers, gpusPerWorker or image";
    if (!SAME(model)) return "model";
    if (!SAME(par)) return "parallelism";
    if (!SAME(placement)) return "placement";
    if (!SAME(training)) return "training";
    if (!SAME(gang_timeout_seconds) || !SAME(restart) || !SAME(suspend)) return "gang timeout, restart or suspend";
    if (!SAME(emulation)) return "emulation";
    if (!SAME(scheduling)) return "scheduling";
    if (!SAME(elastic)) return "elastic";
#undef SAME
    return NULL;
}

static int round_trips;

/* Every job of a manifest: tj_spec_to_json, then tj_spec_from_json, gives the same spec. */
static void check_round_trip(const char *path)
{
    struct tj_job *jobs = NULL;
    int n = 0;
    static struct tj_errors errs;
    memset(&errs, 0, sizeof errs);
    if (tj_load_file(path, &jobs, &n, &errs)) {
        TEST_FAIL(path, "does not load: %s", errs.msg[0]);
        return;
    }
    for (int i = 0; i < n; i++) {
        char name[1100];
        snprintf(name, sizeof name, "round trip %s[%d]", path, i);
        cJSON *j = tj_spec_to_json(&jobs[i].spec);
        struct tj_spec again;
        memset(&errs, 0, sizeof errs);
        int rc = j ? tj_spec_from_json(j, "spec", &again, &errs) : -1;
        const char *diff = rc == 0 ? spec_diff(&jobs[i].spec, &again) : "no spec back";
        if (!diff && !cJSON_GetObjectItemCaseSensitive(j, "template") && !again.pod_template)
            TEST_PASS(name);
        else
            TEST_FAIL(name, "%s%s%s", diff ? diff : "template written", rc ? ": " : "",
                      rc ? errs.msg[0] : "");
        round_trips++;
        cJSON_Delete(j);
        if (rc == 0 || j)
            tj_spec_free(&again);
        tj_job_free(&jobs[i]);
    }
    free(jobs);
}

int main(void)
{
    struct tj_job job;
    struct tj_errors errs;

    /* Presets. */
    struct tj_model m;
    CHECK("preset 124m", tj_model_preset("gpt2-124m", &m) == 0 && m.layers == 12 && m.hidden == 768 &&
                             m.heads == 12 && m.vocab == 50257 && m.seq_len == 1024);
    CHECK("preset 350m", tj_model_preset("gpt2-350m", &m) == 0 && m.layers == 24 && m.hidden == 1024 && m.heads == 16);
    CHECK("preset 774m", tj_model_preset("gpt2-774m", &m) == 0 && m.layers == 36 && m.hidden == 1280 && m.heads == 20);
    CHECK("preset 1.5b", tj_model_preset("gpt2-1.5b", &m) == 0 && m.layers == 48 && m.hidden == 1600 && m.heads == 25);
    CHECK("unknown preset", tj_model_preset("gpt2-7b", &m) == -1);
    tj_model_preset("gpt2-124m", &m);
    /* GPT-2 124M has 124,439,808 parameters with vocab 50257 and tied embeddings (llm.c pads the
     * vocabulary to 50304 and reports 124,475,904). */
    CHECK_INT("124m parameter count", tj_model_params(&m), 124439808);

    /* Minimal job: defaults applied. */
    int rc = parse_job(MINIMAL, &job, &errs);
    if (rc) tj_errors_print(&errs, "  error: ");
    CHECK("minimal job valid", rc == 0);
    CHECK_STR("name", job.name, "t");
    CHECK_STR("no image by default (the operator picks)", job.spec.image, "");
    CHECK_INT("default tensor", job.spec.par.tensor, 1);
    CHECK_INT("default pipeline auto", job.spec.par.pipeline, TJ_AUTO);
    CHECK_INT("default data auto", job.spec.par.data, TJ_AUTO);
    CHECK_INT("default microBatches", job.spec.par.micro_batches, 8);
    CHECK_INT("default schedule", job.spec.par.schedule, SCHED_1F1B);
    CHECK_INT("default pipelineDtype fp32", job.spec.par.pipeline_dtype, DTYPE_FP32);
    CHECK_INT("default paramGatherDtype fp32", job.spec.par.param_gather_dtype, DTYPE_FP32);
    CHECK_NEAR("default lr", job.spec.training.opt.lr, 6e-4, 1e-12);
    CHECK_INT("default seed", job.spec.training.seed, 1337);
    CHECK("default demo corpus", job.spec.training.data.is_demo &&
                                     !strcmp(job.spec.training.data.path, TJ_DEMO_CORPUS) &&
                                     job.spec.training.data.format == TJ_DATA_TEXT);
    CHECK_INT("default gang timeout", job.spec.gang_timeout_seconds, 600);
    CHECK_INT("default maxRestarts", job.spec.restart.max_restarts, 3);
    CHECK_INT("no ttlSecondsAfterFinished by default (-1: kept)", job.spec.ttl_after_finished_s, -1);
    CHECK_INT("no activeDeadlineSeconds by default (-1: no limit)", job.spec.active_deadline_s, -1);
    CHECK_INT("world size cpu", tj_world_size(&job.spec), 2);
    CHECK("no template", job.spec.pod_template == NULL);
    char desc[512];
    tj_spec_describe(&job.spec, desc, sizeof desc);
    CHECK_STR("describe", desc, "2 CPU workers, gpt2-124m (L12 C768 NH12 V50257 T1024, 124.4M params), tensor 1 "
                                "pipeline auto data auto, 8 x 1 micro-batches 1f1b, fp32, 10 steps");

    /* Round trip: to_json then from_json gives the same struct. */
    cJSON *j = tj_spec_to_json(&job.spec);
    struct tj_spec again;
    memset(&errs, 0, sizeof errs);
    rc = tj_spec_from_json(j, "spec", &again, &errs);
    if (rc) tj_errors_print(&errs, "  error: ");
    CHECK("round trip parses", rc == 0);
    CHECK("round trip identical", memcmp(&again, &job.spec, sizeof again) == 0);
    cJSON_Delete(j);
    tj_spec_free(&again);
    tj_job_free(&job);

    /* ttlSecondsAfterFinished: 0 (delete at once) is a value; both kept by the round trip */
    rc = parse_job("apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
                   "spec:\n  workers: 2\n  gpusPerWorker: 0\n  model: {preset: gpt2-124m}\n"
                   "  training: {steps: 10}\n  ttlSecondsAfterFinished: 0\n  activeDeadlineSeconds: 7\n",
                   &job, &errs);
    CHECK("ttlSecondsAfterFinished 0 parses", rc == 0 && job.spec.ttl_after_finished_s == 0);
    CHECK_INT("activeDeadlineSeconds parses", job.spec.active_deadline_s, 7);
    j = tj_spec_to_json(&job.spec);
    memset(&errs, 0, sizeof errs);
    CHECK("ttlSecondsAfterFinished 0 round trip",
          j && tj_spec_from_json(j, "spec", &again, &errs) == 0 && again.ttl_after_finished_s == 0);
    CHECK_INT("activeDeadlineSeconds round trip", again.active_deadline_s, 7);
    cJSON_Delete(j);
    tj_spec_free(&again);
    tj_job_free(&job);

    /* pipelineDtype and paramGatherDtype: parsed, independent of each other, and kept by the
     * round trip (what workers receive). */
    struct dtypes d;
    CHECK("pipelineDtype bf16 parses",
          dtype_round_trip("{pipeline: 2, pipelineDtype: bf16}", &d) >= 1 && d.pipe == DTYPE_BF16);
    CHECK("pipelineDtype bf16 round trip", d.ok == 2 && d.pipe_again == DTYPE_BF16);
    CHECK("paramGatherDtype bf16 parses",
          dtype_round_trip("{data: 2, paramGatherDtype: bf16}", &d) >= 1 &&
              d.gather == DTYPE_BF16 && d.pipe == DTYPE_FP32);
    CHECK("paramGatherDtype bf16 round trip",
          d.ok == 2 && d.gather_again == DTYPE_BF16 && d.pipe_again == DTYPE_FP32);

    /* The example error and several errors at once. */
    rc = parse_job("apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
                   "spec:\n  workers: 12\n  gpusPerWorker: 0\n"
                   "  model: {layers: 8, hidden: 100, heads: 3, vocab: 256, seqLen: 64}\n"
                   "  parallelism: {pipeline: 12, microBatches: 4}\n  training: {steps: 10}\n",
                   &job, &errs);
    CHECK("cross-field errors make it invalid", rc == -1);
    CHECK("pipeline exceeds layers message",
          tj_errors_have(&errs, "spec.parallelism.pipeline: 12 exceeds model layers 8"));
    CHECK("hidden not divisible by heads", tj_errors_have(&errs, "spec.model.hidden: 100 is not divisible by heads 3"));
    CHECK("1f1b microBatches", tj_errors_have(&errs, "spec.parallelism.microBatches: 4 is fewer than pipeline 12"));
    CHECK_INT("all three reported", errs.count, 3);
    tj_job_free(&job);

    /* A field error and an unrelated cross-field error are both reported; a cross-field rule on
     * a field that failed to parse is not (it would report a consequence). */
    rc = parse_job("apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
                   "spec:\n  workers: 12\n  gpusPerWorker: 0\n"
                   "  model: {layers: 8, hidden: 64, heads: 4, vocab: 256, seqLen: 64}\n"
                   "  parallelism: {pipeline: 12, microBatches: 12}\n"
                   "  training: {steps: 10, precision: bf16, optimizer: {lr: fast}}\n",
                   &job, &errs);
    if (errs.count != 2) tj_errors_print(&errs, "  error: ");
    CHECK("field and cross-field errors together", rc == -1 && errs.count == 2 &&
          tj_errors_have(&errs, "spec.training.optimizer.lr: must be a number, got a string") &&
          tj_errors_have(&errs, "spec.parallelism.pipeline: 12 exceeds model layers 8"));
    CHECK("cross-field rule of a section with a field error is skipped", !tj_errors_have(&errs, "bf16 needs GPU workers"));
    tj_job_free(&job);
    rc = parse_job("apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: t}\n"
                   "spec:\n  workers: many\n  gpusPerWorker: 0\n  model: {preset: gpt2-124m}\n"
                   "  parallelism: {pipeline: 2, data: 2}\n  training: {steps: 10}\n", &job, &errs);
    CHECK("no cascade from a bad workers field", rc == -1 && errs.count == 1);
    tj_job_free(&job);

    /* Field-level errors are all reported together, with paths. */
    rc = parse_job("apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\n"
                   "spec:\n  workers: eight\n  gpusPerWorker: -1\n  model: {preset: gpt3}\n"
                   "  parallelism: {schedule: zigzag, pipeline: sometimes}\n  training: {steps: 0}\n  colour: red\n",
                   &job, &errs);
    CHECK("field errors invalid", rc == -1);
    static const char *const field_errors[] = {
        "apiVersion: must be holmes.dev/v1alpha1",
        "kind: must be TrainingJob",
        "metadata.name: \"Bad_Name\"",
        "spec.workers: must be an integer, got a string",
        "spec.gpusPerWorker: -1 is below the minimum 0",
        "spec.model.preset: \"gpt3\" is not one of",
        "spec.parallelism.schedule: \"zigzag\" is not one of 1f1b, gpipe",
        "spec.parallelism.pipeline: must be a positive integer or \"auto\"",
        "spec.training.steps: 0 is below the minimum 1",
        "spec.colour: unknown field",
    };
    for (size_t i = 0; i < sizeof field_errors / sizeof *field_errors; i++)
        CHECK(field_errors[i], tj_errors_have(&errs, field_errors[i]));
    CHECK_INT("ten errors", errs.count, 10);
    tj_job_free(&job);

    /* Emulation and a template. */
    rc = parse_job("apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: e}\n"
                   "spec:\n  workers: 4\n  gpusPerWorker: 0\n  model: {preset: gpt2-124m, layers: 4, seqLen: 64}\n"
                   "  training: {steps: 3, data: {path: corpus.txt, format: text}}\n"
                   "  emulation:\n    nics:\n    - {class: infiniband, fabric: ib-a, gbps: 200, count: 2}\n"
                   "    - {class: roce, fabric: roce-b, gbps: 100, count: 2}\n"
                   "    crossFabricGbps: 25\n    bandwidthScale: 0.001\n"
                   "  template: {spec: {containers: [{name: worker}]}}\n",
                   &job, &errs);
    if (rc) tj_errors_print(&errs, "  error: ");
    CHECK("emulation job valid", rc == 0);
    CHECK_INT("preset override layers", job.spec.model.layers, 4);
    CHECK_INT("preset override seqLen", job.spec.model.seq_len, 64);
    CHECK_INT("preset keeps hidden", job.spec.model.hidden, 768);
    CHECK_INT("two nic groups", job.spec.emulation.n_groups, 2);
    CHECK_STR("group class", job.spec.emulation.groups[1].cls, "roce");
    CHECK_NEAR("bandwidth scale", job.spec.emulation.bandwidth_scale, 0.001, 1e-12);
    CHECK("template kept", job.spec.pod_template && cJSON_GetObjectItem(job.spec.pod_template, "spec"));
    j = tj_spec_to_json(&job.spec);
    memset(&errs, 0, sizeof errs);
    rc = tj_spec_from_json(j, "spec", &again, &errs);
    CHECK("emulation round trip", rc == 0 && again.emulation.n_groups == 2 &&
                                      again.emulation.groups[0].count == 2);
    CHECK("the template stays out of the spec's JSON (the pods' business)",
          !cJSON_GetObjectItemCaseSensitive(j, "template") && !again.pod_template);
    struct tj_spec copy;
    CHECK("copy", tj_spec_copy(&copy, &job.spec) == 0 && copy.pod_template != job.spec.pod_template);
    tj_spec_free(&copy);
    cJSON_Delete(j);
    tj_spec_free(&again);
    tj_job_free(&job);

    /* Joining errors into one herr. */
    struct tj_errors two = {0};
    tj_errors_add(&two, "a: x");
    tj_errors_add(&two, "b: y");
    herr e;
    CHECK("errors to herr", tj_errors_to_herr(&two, &e) == -1 && !strcmp(e.msg, "a: x; b: y"));
    /* Joined past the message's end, the cut falls inside a two-byte character (errors of 204
     * bytes, each "eN: " and 100 x U+00E9: the 1,023rd byte is the middle of one): what is left
     * is still well-formed UTF-8 (found by fuzz_worker_message, 2026-11-28). */
    struct tj_errors many = {0};
    char accents[201] = "";
    for (int i = 0; i < 100; i++)
        strcat(accents, "\xc3\xa9");
    for (int i = 0; i < 8; i++)
        tj_errors_add(&many, "e%d: %s", i, accents);
    tj_errors_to_herr(&many, &e);
    char cleaned[sizeof e.msg];
    snprintf(cleaned, sizeof cleaned, "%s", e.msg);
    herr_clean(cleaned);
    CHECK("errors to herr: cut on a character's boundary",
          strlen(e.msg) >= 1000 && strcmp(cleaned, e.msg) == 0);
    /* The spec's own encoder and decoder, on every valid manifest and example. */
    CHECK("valid manifests read", for_each_manifest("tests/manifests/valid", check_round_trip) >= 5);
    CHECK("examples read", for_each_manifest("examples", check_round_trip) >= 3);
    CHECK("a job of each manifest round-tripped", round_trips >= 10);
    TEST_MAIN_END();
}
