/* Reads the planner's job from a TrainingJob manifest (apiVersion holmes.dev/v1alpha1):
 * spec.model (preset or layers/hidden/heads/vocab/seqLen), spec.parallelism (tensor, pipeline,
 * data — `auto` allowed for pipeline and data —, microBatches, microBatchSize, schedule),
 * spec.placement (policy, optional partition: layers per stage) and spec.training.precision.
 * Only the fields the planner needs are read; `holmes-operator validate` checks the rest. */
#ifndef HOLMES_PLANNER_JOB_H
#define HOLMES_PLANNER_JOB_H

#include <cjson/cJSON.h>

#include "error.h"
#include "planner.h"

struct planner_job {
    struct plan_job job;
    int *pinned;        /* owned storage behind job.pinned */
    int workers;        /* spec.workers, 0 when absent */
    int gpus_per_worker;
};

/* Model presets: "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b". Returns -1 if unknown. */
int planner_model_preset(const char *name, struct plan_model *m);
int planner_job_from_json(const cJSON *manifest, const char *where, struct planner_job *out,
                          herr *e);
int planner_job_load(const char *path, struct planner_job *out, herr *e);
void planner_job_free(struct planner_job *j);

#endif
