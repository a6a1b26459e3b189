/* The planner's view of a TrainingJob: converts the resolved spec (common/trainingjob.h) into
 * a `struct plan_job`, and applies the spec's placement overrides (per-fabric Gb/s, cross-fabric
 * Gb/s) to the workers and link constants. */
#ifndef HOLMES_PLANNER_JOB_H
#define HOLMES_PLANNER_JOB_H

#include "cost_model.h"
#include "error.h"
#include "planner.h"
#include "trainingjob.h"

/* Model shape, parallelism (TJ_AUTO stays 0 = auto), schedule, precision and policy. */
void planner_job_from_spec(const struct tj_spec *s, struct plan_job *out);

/* Checks the workers against the spec (spec.workers, spec.gpusPerWorker) and applies
 * spec.placement.fabrics[].gbps to the workers of that fabric and crossFabricGbps to
 * links->tcp_gbps. Returns 0, or -1 naming the mismatch. */
int planner_apply_spec(const struct tj_spec *s, struct plan_worker *workers, int n_workers,
                       struct cost_links *links, herr *e);

/* The link constants a job is planned with before any calibration: the defaults, with
 * spec.emulation.crossFabricGbps as tcp_gbps when the job emulates NICs. `holmes-operator plan`
 * (cluster_from_emulation) and the coordinator (coord_plan) both start from this. */
void planner_links_from_spec(const struct tj_spec *s, struct cost_links *out);

/* Loads a file holding exactly one valid TrainingJob. All validation errors are reported. */
int planner_load_job(const char *path, struct tj_job *out, herr *e);

#endif
