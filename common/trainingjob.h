/* The TrainingJob API (holmes.dev/v1alpha1): the spec as one resolved C struct.
 *
 * Parsing reads the JSON the API server returns (or a YAML manifest turned into cJSON by
 * yaml_json.h), applies the same defaults as crds/trainingjob.yaml, resolves model presets and
 * validates every rule, the CRD's and the cross-field ones it cannot express. Every error is
 * collected, not just the first: "spec.parallelism.pipeline: 12 exceeds model layers 8".
 * docs/api.md describes each field, its default and its rules. */
#ifndef HOLMES_TRAININGJOB_H
#define HOLMES_TRAININGJOB_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "names.h"

#define TJ_AUTO 0              /* parallelism.pipeline / parallelism.data: chosen by the planner */
#define TJ_MAX_ERRORS 64
#define TJ_MAX_NIC_GROUPS 16
#define TJ_MAX_FABRICS 16
#define TJ_MAX_SOURCES 16      /* spec.training.data.sources */
#define TJ_MAX_HOLDOUT 0.5     /* spec.training.eval.holdout */
#define TJ_TTL_MAX_S 31536000  /* spec.ttlSecondsAfterFinished, activeDeadlineSeconds: a year */
#define TJ_PATH_MAX 1024
#define TJ_NAME_MAX 64         /* metadata.name: a DNS-1123 label of at most 52 characters */
#define TJ_DEMO_CORPUS "examples/data/corpus.txt" /* used when training.data is omitted */
#define TJ_TEXT_VOCAB 256      /* text data is tokenized byte by byte: model.vocab must be >= 256 */

enum tj_lr_schedule { TJ_LR_COSINE = 0, TJ_LR_CONSTANT = 1, TJ_LR_LINEAR = 2, TJ_LR_WSD = 3 };
enum tj_data_format { TJ_DATA_LLMC = 0, TJ_DATA_TEXT = 1 };

struct tj_model {
    char preset[16];  /* "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", or "" (custom) */
    int layers;       /* L */
    int hidden;       /* C */
    int heads;        /* NH */
    int vocab;        /* V */
    int seq_len;      /* T, the training sequence length */
};

struct tj_parallelism {
    int tensor;           /* >= 1; a tensor group stays inside one worker */
    int pipeline;         /* >= 1 or TJ_AUTO */
    int data;             /* >= 1 or TJ_AUTO */
    int micro_batches;    /* per optimizer step, per data-parallel replica */
    int micro_batch_size; /* sequences per micro-batch */
    /* TeraPipe: pieces each sequence is cut into along its tokens, pipelined like micro-batches
     * (1: unsliced), or TJ_AUTO: the planner chooses how many and their lengths */
    int token_slices;
    enum schedule schedule;
    /* element type of the activations and activation gradients sent between pipeline stages:
     * DTYPE_FP32 (exact) or DTYPE_BF16 (half the bytes, values rounded to bfloat16) */
    enum dtype pipeline_dtype;
    /* element type in which a stage's data-parallel replicas all-gather their updated parameter
     * shards: DTYPE_FP32 (exact) or DTYPE_BF16 (half the bytes; every replica computes with its
     * parameters rounded to bfloat16, the optimizer keeps the fp32 values of its shard) */
    enum dtype param_gather_dtype;
};

struct tj_fabric_bw {
    char fabric[128];     /* fabric identity as NIC discovery names it */
    double gbps;          /* replaces the measured/nominal bandwidth of that fabric */
};

struct tj_placement {
    enum policy policy;
    int n_fabrics;
    struct tj_fabric_bw fabrics[TJ_MAX_FABRICS];
    double cross_fabric_gbps; /* 0: the planner's default for TCP between fabrics */
};

struct tj_optimizer {
    double lr;            /* peak learning rate */
    int warmup_steps;
    enum tj_lr_schedule schedule;
    double min_lr_ratio;  /* the decay ends at lr * min_lr_ratio */
    int decay_steps;      /* wsd: the last steps, decaying; -1 = a fifth of the steps after the
                             warm-up (tj_lr_decay_steps) */
    double beta1, beta2, eps, weight_decay;
    double grad_clip;     /* global-norm clip; 0 disables */
};

/* One data set of a blend: its files and its share of the micro-batches. */
struct tj_data_source {
    char path[TJ_PATH_MAX];
    double weight;          /* > 0; the shares are the weights over their sum */
};

struct tj_data {
    char path[TJ_PATH_MAX]; /* file or glob; TJ_DEMO_CORPUS when training.data was omitted;
                               "" with sources */
    enum tj_data_format format;
    int is_demo;            /* 1 when training.data was omitted and the demo corpus is used */
    int n_sources;          /* a blend instead of path (0: none), every source of `format` */
    struct tj_data_source sources[TJ_MAX_SOURCES];
};

struct tj_checkpoint {
    char path[TJ_PATH_MAX]; /* "" = no checkpoints */
    int every_steps;        /* 0 = only at the end (when path is set) */
    int keep;               /* newest checkpoints kept */
};

/* Evaluation on held-out data: the mean loss of `batches` micro-batches in all, shared among the
 * data-parallel replicas (the same windows every time, whatever the data degree), after every
 * `every_steps` steps and after the last. The data is its own files (path), or a share of
 * training.data kept out of training (holdout). */
struct tj_eval {
    char path[TJ_PATH_MAX]; /* file or glob; "" = none (holdout, or no evaluation) */
    double holdout;         /* (0, TJ_MAX_HOLDOUT]: the share of training.data's windows (of each
                               source's, for a blend) held out, the last in file order; 0: none */
    enum tj_data_format format; /* path's; holdout reads training.data's */
    int every_steps;        /* 0 = only after the last step */
    int batches;            /* micro-batches in all (each of microBatchSize sequences) */
};

struct tj_training {
    long steps;
    struct tj_optimizer opt;
    enum dtype precision;
    unsigned long long seed;
    struct tj_data data;
    struct tj_checkpoint checkpoint;
    struct tj_eval eval;
    char init_from[TJ_PATH_MAX]; /* "" = random init; a Holmes checkpoint or llm.c GPT-2 .bin */
    int log_every_steps;
    int max_nonfinite_steps; /* steps in a row skipped for a non-finite loss or gradient norm
                                before the job fails (0: the first fails it) */
};

struct tj_restart_policy {
    int max_restarts;
    int backoff_seconds;
};

/* Emulated NICs for `holmes-operator local` and the fabric benchmark: workers, in order,
 * pretend to have these NICs on one machine. */
struct tj_nic_group {
    char cls[16];        /* "infiniband", "roce", "ethernet" (nic_class_parse accepts these) */
    char fabric[128];
    double gbps;
    int count;           /* workers in this group */
};

struct tj_emulation {
    int enabled;         /* 1 when spec.emulation was given */
    int n_groups;
    struct tj_nic_group groups[TJ_MAX_NIC_GROUPS];
    double cross_fabric_gbps; /* TCP between fabrics */
    double bandwidth_scale;   /* pacing multiplies every Gb/s by this */
    int gpus;                 /* emulation.gpus: a worker's gpusPerWorker ranks run as CPU processes */
};

/* spec.scheduling.gang: who admits the worker pods, all or none. TJ_GANG_DEFAULT (the field
 * omitted) leaves the choice to the operator (--gang-scheduler, the chart's
 * scheduling.default). */
enum tj_gang { TJ_GANG_DEFAULT = 0, TJ_GANG_NONE, TJ_GANG_KUEUE, TJ_GANG_VOLCANO, TJ_GANG_COSCHEDULING };
#define TJ_GANG_COUNT 5
#define TJ_SCHED_NAME_MAX 64  /* queue and scheduler names: at most 63 characters */

struct tj_scheduling {
    enum tj_gang gang;
    char queue[TJ_SCHED_NAME_MAX];          /* kueue: the LocalQueue (required); volcano: the Queue
                                             * ("" = Volcano's default queue) */
    char scheduler_name[TJ_SCHED_NAME_MAX]; /* volcano, coscheduling: the pods' schedulerName
                                             * ("" = the operator's) */
    int schedule_timeout_seconds;           /* coscheduling: the PodGroup's scheduleTimeoutSeconds
                                             * (0 = gangTimeoutSeconds) */
};

/* spec.elastic: a worker lost for good (its pod unschedulable, its node NotReady or gone, for
 * replaceTimeoutSeconds) is re-planned around while at least minWorkers remain (docs/api.md). */
struct tj_elastic {
    int enabled;                 /* 1 when spec.elastic was given */
    int min_workers;             /* default: workers (not elastic) */
    int replace_timeout_seconds; /* default 300 */
    int scale_up;                /* default 1: a lost worker's capacity back is used again */
};

struct tj_spec {
    int workers;              /* pods / worker processes */
    int gpus_per_worker;      /* 0 = CPU worker with exactly one rank */
    char image[512];          /* "" = the operator's default (holmes-node:<version>, -cpu for CPU) */
    struct tj_model model;
    struct tj_parallelism par;
    struct tj_placement placement;
    struct tj_training training;
    int gang_timeout_seconds;
    int ttl_after_finished_s;  /* spec.ttlSecondsAfterFinished; -1: the finished job is kept */
    int active_deadline_s;     /* spec.activeDeadlineSeconds; -1: no limit */
    struct tj_restart_policy restart;
    int suspend;
    struct tj_emulation emulation;
    struct tj_scheduling scheduling;
    struct tj_elastic elastic;
    cJSON *pod_template;      /* spec.template (a PodTemplateSpec) as given, or NULL; owned */
};

/* The job asked for elastic re-planning: spec.elastic with minWorkers below workers. Without
 * it nothing elastic happens to the job. */
int tj_is_elastic(const struct tj_spec *s);

/* The job evaluates (spec.training.eval: path or holdout). */
int tj_eval_on(const struct tj_eval *ev);

/* A whole TrainingJob object: metadata plus the resolved spec. */
struct tj_job {
    char name[TJ_NAME_MAX];
    char namespace_[TJ_NAME_MAX]; /* "" when the manifest names none */
    char uid[64];
    long long generation;
    struct tj_spec spec;
};

/* All errors found, each "field.path: rule broken". */
struct tj_errors {
    int count;                    /* errors found (may exceed the number kept) */
    char msg[TJ_MAX_ERRORS][256];
};

/* The spec with every CRD default and nothing else set (workers 0, model empty). */
void tj_spec_defaults(struct tj_spec *s);

/* Parses `spec` (the object under "spec"), applies defaults, resolves the model preset and
 * validates. Returns 0 when valid; -1 with every error in `errs` otherwise (`out` then holds
 * what could be read and must still be freed). Errors are prefixed with `path` ("spec").
 * A cross-field rule whose inputs failed to parse is not reported (see docs/api.md). */
int tj_spec_from_json(const cJSON *spec, const char *path, struct tj_spec *out, struct tj_errors *errs);

/* Parses a whole object {apiVersion, kind, metadata, spec}; checks apiVersion, kind and
 * metadata.name as well. Same return convention as tj_spec_from_json. */
int tj_job_from_json(const cJSON *obj, struct tj_job *out, struct tj_errors *errs);

/* Re-checks every rule on a filled struct (tj_spec_from_json already does this). Appends to
 * `errs`; returns 0 when valid. */
int tj_spec_validate(const struct tj_spec *s, const char *path, struct tj_errors *errs);

/* The learning-rate schedule's rules alone (warmupSteps, decaySteps against steps and the
 * schedule), for callers that build a training spec without the rest (holmes-node train's
 * flags). Appends to `errs` under `path`; returns 0 when valid. */
int tj_schedule_check(const struct tj_training *t, const char *path, struct tj_errors *errs);

/* What this version cannot run yet although the API (and tj_spec_validate) accepts it, each with
 * its reason, appended to `errs` ("spec.training.precision: bf16 is not supported by the workers
 * yet ..."); 0 when the job can run. `holmes-operator validate`,
 * `holmes-operator local`, the operator's admission of a job and the coordinator's plan hook all
 * apply it, so they refuse the same jobs for the same reason. `holmes-operator plan` does not:
 * planning such a job is still a valid what-if. docs/api.md lists the rules (marked **run**). */
int tj_spec_runnable(const struct tj_spec *s, const char *path, struct tj_errors *errs);

/* The rules of spec.scheduling for gang scheduler `gang` (the spec's own, or the operator's
 * default when the spec names none): kueue needs a queue; queue, schedulerName and
 * scheduleTimeoutSeconds only where that scheduler uses them; no template schedulerName where
 * the gang scheduler sets it. tj_spec_validate applies it when spec.scheduling.gang is given.
 * Appends to `errs`; returns 0 when valid. */
int tj_scheduling_check(const struct tj_spec *s, enum tj_gang gang, const char *path,
                        struct tj_errors *errs);

/* The resolved spec as JSON in the API's field names (pipeline/data "auto" for TJ_AUTO; the
 * model with preset AND layers/hidden/...), without spec.template: what a worker trains on
 * (the assignment's spec, common/plan_doc.h). tj_spec_from_json of the result gives the same
 * struct, pod_template NULL. NULL when out of memory. */
cJSON *tj_spec_to_json(const struct tj_spec *s);

/* Deep copy (duplicates pod_template). Returns -1 on out of memory. */
int tj_spec_copy(struct tj_spec *dst, const struct tj_spec *src);
void tj_spec_free(struct tj_spec *s);
void tj_job_free(struct tj_job *j);

/* Reads every TrainingJob document of a YAML/JSON file ("-": standard input). On success *jobs
 * holds *n jobs (free each with tj_job_free, then free(*jobs)). Errors are prefixed
 * "FILE[#doc]: ". List/TrainingJobList documents (kubectl get -o yaml) count as their items.
 * A document of another kind is an error. */
int tj_load_file(const char *path, struct tj_job **jobs, int *n, struct tj_errors *errs);

/* Helpers. */
void tj_errors_add(struct tj_errors *errs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* All errors joined by "; " into one herr (returns -1), e.g. for a library caller. */
int tj_errors_to_herr(const struct tj_errors *errs, herr *e);
/* Ranks per worker: gpus_per_worker, or 1 for CPU workers. */
int tj_ranks_per_worker(const struct tj_spec *s);
/* Total ranks: workers * ranks per worker. */
int tj_world_size(const struct tj_spec *s);
/* Whether the workers train on real GPUs: gpusPerWorker without spec.emulation.gpus (which runs
 * a CPU rank per GPU). */
int tj_real_gpus(const struct tj_spec *s);
/* One line for logs: "8 workers x 8 GPUs, gpt2-1.5b (L48 C1600 NH25 V50257 T1024, 1.56B params),
 * tensor 1 pipeline auto data auto, 16 x 4 micro-batches 1f1b, bf16, 10000 steps". */
void tj_spec_describe(const struct tj_spec *s, char *buf, size_t n);
/* Model presets by name; returns 0 and fills `m`, or -1 for an unknown name. */
int tj_model_preset(const char *name, struct tj_model *m);
/* Parameter count of the GPT-2 architecture (tied embeddings), for reports and planning. */
long long tj_model_params(const struct tj_model *m);

/* The name of worker `index`'s pod: "<job>-worker-<index>" (also its hostname, and its log's
 * name in local mode). Returns the length snprintf would write. */
int tj_worker_pod_name(char *out, size_t cap, const char *job, int index);

const char *tj_lr_schedule_name(enum tj_lr_schedule s); /* "cosine", "constant", "linear", "wsd" */
/* wsd: the steps of the decay (optimizer.decaySteps, or a fifth of the steps after the warm-up);
 * 0 for the other schedules. */
long tj_lr_decay_steps(const struct tj_training *t);
const char *tj_data_format_name(enum tj_data_format f); /* "llmc", "text" */
/* "" (TJ_GANG_DEFAULT), "none", "kueue", "volcano", "coscheduling" */
const char *tj_gang_name(enum tj_gang g);
/* A name tj_gang_name gives (not ""); 0, or -1 for an unknown name. */
int tj_gang_parse(const char *name, enum tj_gang *out);

#endif
