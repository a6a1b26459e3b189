/* The coordinator's plan hook: turns the workers' hellos (NIC summaries) and a TrainingJob spec
 * into the planner's input (each worker's TFLOPS from its hello, else the defaults below), runs the planner, and makes one assignment per worker.
 * The input is the one `holmes-operator plan JOB` builds for the same job (docs/planner.md,
 * "One computation"): link constants from planner_links_from_spec, spec.placement, then `calibration`, and, when the
 * job emulates NICs, every worker is its own node (the emulation gives each worker its own
 * NIC, whatever machine the processes share), so the same workers get the same plan and the
 * same predicted step time. Each assignment (common/plan_doc.h) holds the worker's ranks and
 * the first one's place, the plan document (plan_to_doc; with spec.emulation, every group's and
 * every cross-fabric link's pacing) and the spec planned for. The worker completes the plan
 * with every rank's endpoint from the start message. */
#ifndef HOLMES_COORD_PLAN_H
#define HOLMES_COORD_PLAN_H

#include "cluster.h"
#include "coordinator.h"
#include "planner.h"
#include "trainingjob.h"

struct coord_plan {
    const struct tj_job *job;   /* not owned; must outlive the coordinator's job */
    double cpu_tflops;          /* TFLOPS of a CPU worker that sent none in hello (0 = 0.05) */
    double gpu_tflops;          /* per GPU, for workers that sent none in hello (0 = 100) */
    const char *calibration;    /* a link-constants file applied last, as with
                                   `holmes-operator plan --calibration`; NULL = none */
    int planned;
    struct plan plan;           /* valid when planned */
    /* spec.elastic: a plan for fewer workers than spec.workers (some lost) is made for the job
     * as if it had those workers: pipeline and data chosen for them, the global batch kept
     * (more micro-batches per replica) where a data degree divides it, else changed and said. */
    int global_mb;              /* micro-batches of microBatchSize sequences a step keeps: the
                                   full plan's data x microBatches (0: not known yet) */
    int workers;                /* workers of the last plan */
    int global_seqs;            /* sequences per step under the last plan */
    char shape[200];            /* the last plan's shape, "pipeline 2 x data 2 (4 workers), ..." */
    char prev_shape[200];       /* the plan's before it ("" for the first) */
    char batch_note[400];       /* how the last re-plan kept or changed the global batch */
};

/* The hook (user = struct coord_plan *). CPU workers (gpus 0) hold one rank each. With fewer
 * workers than spec.workers (an elastic job's survivors; coord_worker.index says which) the
 * assignments carry the spec the plan was made for (workers, pipeline, data, microBatches,
 * emulation.nics for those workers). */
int coord_plan_hook(void *user, const struct coord_worker *workers, int n,
                    struct plan_assignment *assignments, herr *e);
void coord_plan_free(struct coord_plan *cp);

/* The plan as status.plan shows it (and the job page draws it): {policy, tensor, pipeline,
 * data, predictedStepSeconds, warmupExtra, stages: [{index, fabric, layers, firstLayer, tflops,
 * tflopsSource, workers: [pod]}]}. NULL out of memory. */
cJSON *coord_plan_status_json(const struct plan *p, const struct coord_worker *w);

#endif
