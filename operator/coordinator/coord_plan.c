#include "coord_plan.h"

#include "planner_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_assignment(const struct coord_plan *cp, const struct plan *p, int worker,
                          const cJSON *plan_json, const cJSON *spec_json, cJSON **out)
{
    int rank = -1;
    for (int r = 0; r < p->n_ranks; r++)
        if (p->ranks[r].worker == worker && p->ranks[r].local == 0)
            rank = r;
    if (rank < 0)
        return -1;
    const struct plan_rank *pr = &p->ranks[rank];
    const struct plan_stage *st = &p->stages[pr->stage];
    cJSON *a = cJSON_CreateObject();
    if (!a)
        return -1;
    *out = a;
    cJSON *layers = cJSON_CreateIntArray((const int[]){st->first_layer, st->last_layer}, 2);
    cJSON *pj = cJSON_Duplicate(plan_json, 1), *sj = cJSON_Duplicate(spec_json, 1);
    if (!layers || !pj || !sj) {
        cJSON_Delete(layers);
        cJSON_Delete(pj);
        cJSON_Delete(sj);
        return -1;
    }
    cJSON_AddItemToObject(a, "layers", layers);
    cJSON_AddItemToObject(a, "plan", pj);
    cJSON_AddItemToObject(a, "spec", sj);
    const struct tj_emulation *em = &cp->job->spec.emulation;
    if (em->enabled) {
        cJSON *emj = cJSON_AddObjectToObject(a, "emulation");
        if (!emj || !cJSON_AddNumberToObject(emj, "bandwidth_scale", em->bandwidth_scale) ||
            !cJSON_AddNumberToObject(emj, "cross_fabric_gbps", em->cross_fabric_gbps))
            return -1;
    }
    if (!cJSON_AddNumberToObject(a, "rank", rank) ||
        !cJSON_AddNumberToObject(a, "stage", pr->stage) ||
        !cJSON_AddNumberToObject(a, "stages", p->n_stages) ||
        !cJSON_AddNumberToObject(a, "dp_rank", pr->dp_rank) ||
        !cJSON_AddNumberToObject(a, "tp_rank", pr->tp_rank) ||
        !cJSON_AddStringToObject(a, "fabric", st->fabric) ||
        !cJSON_AddStringToObject(a, "job", cp->job->name))
        return -1;
    return 0;
}

int coord_plan_hook(void *user, const struct coord_worker *workers, int n, cJSON **assignments,
                    herr *e)
{
    struct coord_plan *cp = user;
    const struct tj_spec *s = &cp->job->spec;
    /* the jobs validation refuses as not runnable yet (tj_spec_runnable), for the same reason */
    struct tj_errors *run = calloc(1, sizeof *run);
    if (!run)
        return herr_set(e, "plan: out of memory");
    if (tj_spec_runnable(s, "spec", run)) {
        tj_errors_to_herr(run, e);
        free(run);
        return herr_wrap(e, "plan");
    }
    free(run);
    struct plan_worker *pw = calloc((size_t)n, sizeof *pw);
    if (!pw)
        return herr_set(e, "plan: out of memory");
    for (int i = 0; i < n; i++) {
        snprintf(pw[i].name, sizeof pw[i].name, "%.*s", (int)sizeof pw[i].name - 1, workers[i].pod);
        /* An emulated worker has a NIC of its own even when the processes share a machine
         * (holmes-operator local: every node is "localhost"); as one node, all groups would
         * be costed over shared memory. */
        if (!s->emulation.enabled)
            snprintf(pw[i].node, sizeof pw[i].node, "%.*s", (int)sizeof pw[i].node - 1,
                     workers[i].node);
        pw[i].gpus = workers[i].gpus > 0 ? s->gpus_per_worker : 0;
        if (workers[i].tflops > 0) /* measured or declared by the worker */
            pw[i].tflops = workers[i].tflops;
        else
            pw[i].tflops = pw[i].gpus ? (cp->gpu_tflops > 0 ? cp->gpu_tflops : 100)
                                      : (cp->cpu_tflops > 0 ? cp->cpu_tflops : 0.05);
        pw[i].nic = workers[i].nic;
    }
    struct plan_job job;
    planner_job_from_spec(s, &job);
    struct cost_links links;
    planner_links_from_spec(s, &links);
    if (planner_apply_spec(s, pw, n, &links, e)) {
        free(pw);
        return herr_wrap(e, "planner");
    }
    if (cp->calibration && cluster_load_calibration(cp->calibration, &links, e)) {
        free(pw);
        return herr_wrap(e, "planner");
    }
    if (cp->planned)
        plan_free(&cp->plan);
    cp->planned = 0;
    int rc = plan_make(pw, n, &job, &links, &cp->plan, e);
    free(pw);
    if (rc)
        return herr_wrap(e, "planner");
    cp->planned = 1;
    cJSON *plan_json = plan_to_json(&cp->plan);
    cJSON *spec_json = tj_spec_to_json(s);
    rc = 0;
    if (!plan_json || !spec_json)
        rc = herr_set(e, "plan: out of memory");
    /* The template is for pods, not for workers. */
    cJSON_DeleteItemFromObjectCaseSensitive(spec_json, "template");
    for (int i = 0; !rc && i < n; i++)
        if (add_assignment(cp, &cp->plan, i, plan_json, spec_json, &assignments[i]))
            rc = herr_set(e, "plan: worker %d (%s) got no rank, or out of memory", i,
                          workers[i].pod);
    cJSON_Delete(plan_json);
    cJSON_Delete(spec_json);
    return rc;
}

void coord_plan_free(struct coord_plan *cp)
{
    if (cp && cp->planned) {
        plan_free(&cp->plan);
        cp->planned = 0;
    }
}
