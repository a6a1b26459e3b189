#include "planner_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void planner_job_from_spec(const struct tj_spec *s, struct plan_job *out)
{
    const struct tj_parallelism *par = &s->par; /* pipeline, data: TJ_AUTO == 0 == auto */
    *out = (struct plan_job){
        .model = s->model, .tensor = par->tensor, .pipeline = par->pipeline, .data = par->data,
        .micro_batches = par->micro_batches, .micro_batch_size = par->micro_batch_size,
        .token_slices = par->token_slices, .schedule = par->schedule,
        .precision = s->training.precision, .pipeline_dtype = par->pipeline_dtype,
        .param_gather_dtype = par->param_gather_dtype, .policy = s->placement.policy,
        .emulated = s->emulation.enabled};
}

int planner_apply_spec(const struct tj_spec *s, struct plan_worker *workers, int n_workers,
                       struct cost_links *links, herr *e)
{
    if (s->workers && s->workers != n_workers)
        return herr_set(e, "spec.workers: %d, but the cluster has %d workers", s->workers,
                        n_workers);
    for (int i = 0; i < n_workers; i++)
        if (workers[i].gpus != s->gpus_per_worker)
            return herr_set(e, "workers[%d] (%s).gpus: %d differs from spec.gpusPerWorker %d", i,
                            workers[i].name, workers[i].gpus, s->gpus_per_worker);
    for (int f = 0; f < s->placement.n_fabrics; f++) {
        const struct tj_fabric_bw *fb = &s->placement.fabrics[f];
        int found = 0;
        for (int i = 0; i < n_workers; i++)
            if (!strcmp(workers[i].nic.fabric, fb->fabric)) {
                workers[i].nic.gbps = fb->gbps;
                found = 1;
            }
        if (!found)
            return herr_set(e, "spec.placement.fabrics[%d].fabric: no worker is on fabric \"%s\"",
                            f, fb->fabric);
    }
    if (s->placement.cross_fabric_gbps > 0)
        links->tcp_gbps = s->placement.cross_fabric_gbps;
    return 0;
}

void planner_links_from_spec(const struct tj_spec *s, struct cost_links *out)
{
    cost_links_default(out);
    if (s->emulation.enabled && s->emulation.cross_fabric_gbps > 0)
        out->tcp_gbps = s->emulation.cross_fabric_gbps;
}

int planner_load_job(const char *path, struct tj_job *out, herr *e)
{
    struct tj_job *jobs = NULL;
    int n = 0;
    struct tj_errors errs;
    memset(&errs, 0, sizeof errs);
    memset(out, 0, sizeof *out);
    if (tj_load_file(path, &jobs, &n, &errs))
        return tj_errors_to_herr(&errs, e);
    if (n != 1) {
        for (int i = 0; i < n; i++)
            tj_job_free(&jobs[i]);
        free(jobs);
        return herr_set(e, "%s: must hold exactly one TrainingJob (found %d)", path, n);
    }
    *out = jobs[0];
    free(jobs);
    return 0;
}
