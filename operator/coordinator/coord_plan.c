#include "coord_plan.h"

#include "planner_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP_LATENCY_US 50.0 /* emulated latency of a cross-fabric TCP message */

static struct plan_pacing pacing_at(double gbps, double scale, double latency_us)
{
    return (struct plan_pacing){gbps * scale * 1e9 / 8.0, latency_us * 1e-6};
}

/* spec.emulation: every link paced as its NICs would carry it. Each group at the slowest member
 * NIC's Gb/s; groups that span fabrics, and links between fabrics, at cross_fabric_gbps; all
 * times bandwidth_scale; socket links with a TCP message's latency. A pipeline link (or an
 * embedding link) at its share of the NIC, as the planner priced it (the NIC's Gb/s over the
 * links through it at once), capped at cross_fabric_gbps between fabrics. */
/* The worker a group member (global rank) runs in. */
static int worker_of(const struct plan *p, int rank) { return p->ranks[rank].worker; }

/* Links between fabrics of the same boundary (the link groups of stage s) that leave worker `w`
 * (end 0) or enter it (end 1): they share the worker's path to the other fabrics, as the cost
 * model prices them (links.tcp_gbps per worker). */
static int cross_links(const struct plan *p, int s, int w, int end)
{
    int k = 0;
    for (int g = 0; g < p->n_groups; g++) {
        const struct plan_group *gr = &p->groups[g];
        if (gr->kind == GROUP_LINK && gr->stage == s && gr->n == 2 &&
            strstr(gr->transport.reason, "span") && worker_of(p, gr->members[end]) == w)
            k++;
    }
    return k;
}

static void emulate_links(const struct tj_emulation *em, const struct plan *p, struct plan_doc *d)
{
    double cross = em->cross_fabric_gbps > 0 ? em->cross_fabric_gbps : 25.0;
    double scale = em->bandwidth_scale > 0 ? em->bandwidth_scale : 1.0;
    d->cross_fabric = pacing_at(cross, scale, TCP_LATENCY_US);
    for (int g = 0; g < p->n_groups; g++) {
        const struct plan_group *gr = &p->groups[g];
        double gbps = 0;
        for (int i = 0; i < gr->n; i++) {
            double b = p->workers[p->ranks[gr->members[i]].worker].nic.gbps;
            if (b > 0 && (gbps == 0 || b < gbps))
                gbps = b;
        }
        int p2p = gr->kind == GROUP_LINK || gr->kind == GROUP_EMBEDDING;
        if (p2p && gr->nic_share > 0 && gbps > 0)
            gbps *= gr->nic_share;
        if (gbps <= 0) {
            gbps = cross;
        } else if (strstr(gr->transport.reason, "span")) {
            /* between fabrics: a pipeline link at its share of its workers' paths there */
            double c = cross;
            if (gr->kind == GROUP_LINK && gr->n == 2) {
                int a = cross_links(p, gr->stage, worker_of(p, gr->members[0]), 0);
                int b = cross_links(p, gr->stage, worker_of(p, gr->members[1]), 1);
                int k = a > b ? a : b;
                c = cross / (k > 1 ? k : 1);
            }
            gbps = p2p && gbps < c ? gbps : c;
        }
        d->groups[g].pacing = pacing_at(gbps, scale, gr->transport.kind == TRANSPORT_SOCKET
                                                          ? TCP_LATENCY_US : 0);
    }
}

/* The assignment of worker `worker` into *a (zeroed): its ranks (device order), a copy of the
 * plan document and of the spec. 0, or -1 when it got no rank or out of memory. */
static int make_assignment(const struct coord_plan *cp, const struct plan *p, int worker,
                           const struct plan_doc *doc, const struct tj_spec *spec,
                           struct plan_assignment *a)
{
    int rank = -1;
    for (int r = 0; r < p->n_ranks; r++)
        if (p->ranks[r].worker == worker && p->ranks[r].local == 0)
            rank = r;
    if (rank < 0)
        return -1;
    const struct plan_rank *pr = &p->ranks[rank];
    *a = (struct plan_assignment){.rank = rank, .stage = pr->stage, .stages = p->n_stages,
                                  .dp_rank = pr->dp_rank, .tp_rank = pr->tp_rank};
    for (int r = 0; r < p->n_ranks; r++) /* the worker's ranks by device index */
        if (p->ranks[r].worker == worker) {
            if (p->ranks[r].local >= PLAN_MAX_LOCAL_RANKS)
                return -1;
            a->ranks[p->ranks[r].local] = r;
            a->nranks = p->ranks[r].local + 1 > a->nranks ? p->ranks[r].local + 1 : a->nranks;
        }
    snprintf(a->fabric, sizeof a->fabric, "%s", p->stages[pr->stage].fabric);
    snprintf(a->job, sizeof a->job, "%s", cp->job->name);
    if (plan_doc_copy(&a->plan, doc, NULL))
        return -1;
    a->has_plan = 1;
    if (tj_spec_copy(&a->spec, spec))
        return -1;
    a->has_spec = 1;
    return 0;
}

/* Measured figures within this fraction of each other are one kind of device to the planner. */
#define SAME_KIND_SPREAD 0.05

static int cmp_figure(const void *a, const void *b, void *ctx)
{
    const double *v = ctx;
    double x = v[*(const int *)a], y = v[*(const int *)b];
    return x < y ? -1 : x > y;
}

/* Figures the workers measured (probes: a matrix product, an optimizer step) vary by a few per
 * cent between identical devices; left so, every device would be a kind of its own to the
 * planner (none interchangeable: a wider search, a plan that follows noise). Of v[0..n), those
 * measured (measured[i]) and within SAME_KIND_SPREAD of the least of their run, in order, become
 * that least, as a stage of them would be priced. `idx`: scratch for n ints. */
static void same_kind(double *v, const int *measured, int n, int *idx)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (measured[i] && v[i] > 0)
            idx[m++] = i;
    qsort_r(idx, (size_t)m, sizeof *idx, cmp_figure, v);
    for (int a = 0; a < m;) {
        double least = v[idx[a]];
        int b = a;
        while (b < m && v[idx[b]] <= least * (1 + SAME_KIND_SPREAD))
            v[idx[b++]] = least;
        a = b;
    }
}

/* The planner's input for `workers` under spec s, planned into *out. */
static int make_plan(const struct coord_plan *cp, const struct tj_spec *s,
                     const struct coord_worker *workers, int n, struct plan *out, herr *e)
{
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
        /* Emulated GPUs: the worker runs gpusPerWorker CPU ranks whatever it has. */
        pw[i].gpus = workers[i].gpus > 0 || s->emulation.gpus ? s->gpus_per_worker : 0;
        if (workers[i].tflops > 0) /* measured or declared by the worker */
            pw[i].tflops = workers[i].tflops;
        else
            pw[i].tflops = pw[i].gpus && !s->emulation.gpus ? (cp->gpu_tflops > 0 ? cp->gpu_tflops : 100)
                                      : (cp->cpu_tflops > 0 ? cp->cpu_tflops : 0.05);
        /* what the worker's GPUs hold (read from the device or declared): the planner refuses
         * a plan that does not fit it and sizes the 1F1B warm-up by it; 0 = not checked */
        pw[i].memory_gb = workers[i].gpu_memory_gb;
        /* the bandwidth its optimizer step moves data at (measured or declared); else a CPU
         * core's, or for a GPU the links' memory_gbps (0) */
        pw[i].memory_gbps = workers[i].memory_gbps > 0 ? workers[i].memory_gbps
                            : pw[i].gpus && !s->emulation.gpus ? 0 : PLAN_CPU_MEMORY_GBPS;
        pw[i].nic = workers[i].nic;
    }
    /* measured figures of one kind of device made equal (same_kind) */
    int *idx = calloc((size_t)n, sizeof *idx), *meas = calloc((size_t)n, sizeof *meas);
    double *v = calloc((size_t)n, sizeof *v);
    if (!idx || !meas || !v) {
        free(idx);
        free(meas);
        free(v);
        free(pw);
        return herr_set(e, "plan: out of memory");
    }
    for (int i = 0; i < n; i++)
        v[i] = pw[i].tflops, meas[i] = workers[i].tflops_measured;
    same_kind(v, meas, n, idx);
    for (int i = 0; i < n; i++)
        pw[i].tflops = v[i], v[i] = pw[i].memory_gbps, meas[i] = workers[i].memory_gbps_measured;
    same_kind(v, meas, n, idx);
    for (int i = 0; i < n; i++)
        pw[i].memory_gbps = v[i];
    free(idx);
    free(meas);
    free(v);
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
    int rc = plan_make(pw, n, &job, &links, out, e);
    free(pw);
    if (rc && strncmp(e->msg, "planner", 7) != 0) /* most of its errors name it already */
        herr_wrap(e, "planner");
    return rc ? -1 : 0;
}

/* The spec of an elastic job on `n` of its workers (indices from workers[].index): workers n,
 * and each emulated NIC group counting the workers of it that remain. */
static int survivors_spec(const struct tj_spec *s, const struct coord_worker *workers, int n,
                          struct tj_spec *ds, herr *e)
{
    if (tj_spec_copy(ds, s))
        return herr_set(e, "plan: out of memory");
    ds->workers = n;
    if (ds->elastic.min_workers > n)
        ds->elastic.min_workers = n;
    struct tj_emulation *em = &ds->emulation;
    if (!em->enabled)
        return 0;
    int kept = 0;
    for (int g = 0, first = 0; g < s->emulation.n_groups; g++) {
        int count = s->emulation.groups[g].count, left = 0;
        for (int i = 0; i < n; i++)
            left += workers[i].index >= first && workers[i].index < first + count;
        first += count;
        if (left > 0) {
            em->groups[kept] = s->emulation.groups[g];
            em->groups[kept++].count = left;
        }
    }
    em->n_groups = kept;
    return 0;
}

/* An elastic job's plan on its survivors: every (pipeline, data) of their ranks whose data
 * degree divides the global batch (kept: more micro-batches per replica), the fastest the
 * planner predicts; when none plans, pipeline and data auto with the spec's micro-batches
 * (the global batch changes, and cp->batch_note says so). ds gets the spec planned for. */
static int replan(struct coord_plan *cp, const struct coord_worker *workers, int n,
                  struct tj_spec *ds, herr *e)
{
    const struct tj_spec *s = &cp->job->spec;
    if (survivors_spec(s, workers, n, ds, e))
        return -1;
    int units = n * tj_ranks_per_worker(s) / (s->par.tensor > 0 ? s->par.tensor : 1);
    int G = cp->global_mb, best = 0;
    struct plan p;
    herr last = {0};
    snprintf(last.msg, sizeof last.msg, "no data degree of %d tensor groups divides the global "
             "batch of %d micro-batches", units, G);
    for (int D = 1; G > 0 && D <= units; D++) {
        int P = units / D, M = G / D;
        if (units % D || G % D || P > s->model.layers ||
            (s->par.schedule == SCHED_1F1B && M < P))
            continue;
        struct tj_spec try = *ds;
        try.par.pipeline = P;
        try.par.data = D;
        try.par.micro_batches = M;
        herr pe = {0};
        if (make_plan(cp, &try, workers, n, &p, &pe) != 0) {
            last = pe;
            continue;
        }
        if (!best || p.step_s < cp->plan.step_s) {
            if (best)
                plan_free(&cp->plan);
            cp->plan = p;
            ds->par = try.par;
            best = 1;
        } else {
            plan_free(&p);
        }
    }
    int B = s->par.micro_batch_size;
    if (best) {
        snprintf(cp->batch_note, sizeof cp->batch_note, "global batch kept: %d sequences (%d "
                 "micro-batches of %d a replica)", G * B, ds->par.micro_batches, B);
        return 0;
    }
    ds->par.pipeline = TJ_AUTO;
    ds->par.data = TJ_AUTO;
    ds->par.micro_batches = s->par.micro_batches;
    if (make_plan(cp, ds, workers, n, &cp->plan, e) != 0)
        return herr_wrap(e, "%d workers left (%s)", n, last.msg);
    ds->par.pipeline = cp->plan.pipeline;
    ds->par.data = cp->plan.data;
    int now = cp->plan.data * ds->par.micro_batches * B;
    if (G > 0)
        snprintf(cp->batch_note, sizeof cp->batch_note, "global batch changed from %d to %d "
                 "sequences: %.150s; the data goes on at the new shape's sample of the step",
                 G * B, now, last.msg);
    else
        snprintf(cp->batch_note, sizeof cp->batch_note, "global batch %d sequences (the full "
                 "plan's was not known to this coordinator)", now);
    return 0;
}

int coord_plan_hook(void *user, const struct coord_worker *workers, int n,
                    struct plan_assignment *assignments, herr *e)
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
    if (cp->planned)
        plan_free(&cp->plan);
    cp->planned = 0;
    cp->batch_note[0] = '\0';
    struct tj_spec ds; /* the spec planned for: the job's, or its survivors' */
    int rc, survivors = n != s->workers && tj_is_elastic(s);
    if (!survivors) { /* (any other count: planner_apply_spec refuses it, naming spec.workers) */
        if (tj_spec_copy(&ds, s))
            return herr_set(e, "plan: out of memory");
        rc = make_plan(cp, s, workers, n, &cp->plan, e);
    } else {
        rc = replan(cp, workers, n, &ds, e);
    }
    if (rc) {
        tj_spec_free(&ds);
        return -1;
    }
    cp->planned = 1;
    const struct plan *p = &cp->plan;
    if (!survivors)
        cp->global_mb = p->data * s->par.micro_batches;
    cp->workers = n;
    cp->global_seqs = p->data * ds.par.micro_batches * ds.par.micro_batch_size;
    snprintf(cp->prev_shape, sizeof cp->prev_shape, "%s", cp->shape);
    snprintf(cp->shape, sizeof cp->shape, "pipeline %d x data %d%s on %d workers, %d "
             "micro-batches of %d a replica", p->pipeline, p->data, p->tensor > 1 ? " (tensor)" : "",
             n, ds.par.micro_batches, ds.par.micro_batch_size);
    struct plan_doc doc;
    if (plan_to_doc(&cp->plan, &doc, e)) {
        tj_spec_free(&ds);
        return herr_wrap(e, "plan");
    }
    /* The group order is the planner's: plan_to_doc derives only what the planner leaves out. */
    if (ds.emulation.enabled)
        emulate_links(&ds.emulation, &cp->plan, &doc);
    for (int i = 0; !rc && i < n; i++)
        if (make_assignment(cp, &cp->plan, i, &doc, &ds, &assignments[i]))
            rc = herr_set(e, "plan: worker %d (%s) got no rank, or out of memory", i,
                          workers[i].pod);
    plan_doc_free(&doc);
    tj_spec_free(&ds);
    return rc;
}

void coord_plan_free(struct coord_plan *cp)
{
    if (cp && cp->planned) {
        plan_free(&cp->plan);
        cp->planned = 0;
    }
}

/* Where a worker's compute figure came from: its own probe, its declaration (--tflops), or
 * the planner's default for its kind (it sent none). */
static const char *tflops_source(const struct coord_worker *w)
{
    return w->tflops <= 0 ? "assumed" : w->tflops_measured ? "measured" : "declared";
}

/* Where stage s's memory bandwidth (its least) came from: the worker of the stage that said the
 * least (measured or declared), when the stage's figure is its (or, measured, its kind's:
 * same_kind); else a default ("assumed": a CPU's PLAN_CPU_MEMORY_GBPS, a GPU's
 * links.memory_gbps). */
static const char *memory_gbps_source(const struct plan *p, const struct coord_worker *w, int s)
{
    const struct coord_worker *least = NULL;
    for (int r = 0; r < p->n_ranks; r++) {
        const struct coord_worker *x = &w[p->ranks[r].worker];
        if (p->ranks[r].stage == s && x->memory_gbps > 0 &&
            (!least || x->memory_gbps < least->memory_gbps))
            least = x;
    }
    double g = p->stages[s].memory_gbps;
    if (least && least->memory_gbps >= g &&
        least->memory_gbps <= g * (1 + (least->memory_gbps_measured ? SAME_KIND_SPREAD : 0)))
        return least->memory_gbps_measured ? "measured" : "declared";
    return "assumed";
}

/* The worker of stage s with the least GPU memory; -1 when one of them did not say it. */
static int least_gpu_memory(const struct plan *p, const struct coord_worker *w, int s)
{
    int least = -1;
    for (int r = 0; r < p->n_ranks; r++) {
        int wi = p->ranks[r].worker;
        if (p->ranks[r].stage != s)
            continue;
        if (!(w[wi].gpu_memory_gb > 0))
            return -1;
        if (least < 0 || w[wi].gpu_memory_gb < w[least].gpu_memory_gb)
            least = wi;
    }
    return least;
}

cJSON *coord_plan_status_json(const struct plan *p, const struct coord_worker *w)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "policy", policy_name(p->policy));
    cJSON_AddNumberToObject(o, "tensor", p->tensor);
    cJSON_AddNumberToObject(o, "pipeline", p->pipeline);
    cJSON_AddNumberToObject(o, "data", p->data);
    cJSON_AddNumberToObject(o, "predictedStepSeconds", p->step_s);
    cJSON_AddNumberToObject(o, "warmupExtra", p->warmup_extra);
    if (p->slices > 1 || p->slices_auto) {
        cJSON *ts = cJSON_AddObjectToObject(o, "tokenSlices");
        if (ts) {
            cJSON_AddNumberToObject(ts, "count", p->slices > 1 ? p->slices : 1);
            cJSON *len = cJSON_AddArrayToObject(ts, "lengths");
            for (int k = 0; len && k < p->slices; k++)
                cJSON_AddItemToArray(len, cJSON_CreateNumber(p->slice_bounds[k + 1] -
                                                             p->slice_bounds[k]));
            cJSON_AddStringToObject(ts, "chosenBy", p->slices_auto ? "planner" : "spec");
            cJSON_AddNumberToObject(ts, "unslicedStepSeconds", p->unsliced_step_s);
        }
    }
    cJSON *links = p->pipeline > 1 ? cJSON_AddArrayToObject(o, "pipelineLinks") : NULL;
    for (int s = 0; links && s + 1 < p->pipeline; s++) {
        struct plan_boundary b;
        plan_boundary_links(p, s, &b);
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        cJSON_AddItemToArray(links, x);
        cJSON_AddNumberToObject(x, "fromStage", s);
        cJSON_AddNumberToObject(x, "toStage", s + 1);
        cJSON_AddStringToObject(x, "transport", b.mixed ? "mixed" : transport_name(b.kind));
        cJSON_AddNumberToObject(x, "ib", b.n[TRANSPORT_IB]);
        cJSON_AddNumberToObject(x, "roce", b.n[TRANSPORT_ROCE]);
        cJSON_AddNumberToObject(x, "socket", b.n[TRANSPORT_SOCKET]);
        cJSON_AddNumberToObject(x, "seconds", b.seconds);
    }
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; stages && s < p->n_stages; s++) {
        cJSON *st = cJSON_CreateObject();
        if (!st)
            break;
        cJSON_AddItemToArray(stages, st);
        cJSON_AddNumberToObject(st, "index", s);
        cJSON_AddStringToObject(st, "fabric", p->stages[s].fabric);
        cJSON_AddNumberToObject(st, "layers", p->stages[s].last_layer - p->stages[s].first_layer);
        cJSON_AddNumberToObject(st, "firstLayer", p->stages[s].first_layer);
        cJSON_AddNumberToObject(st, "tflops", p->stages[s].tflops); /* its slowest worker's */
        int slowest = -1;
        for (int r = 0; r < p->n_ranks; r++) {
            int wi = p->ranks[r].worker;
            if (p->ranks[r].stage == s && (slowest < 0 || w[wi].tflops < w[slowest].tflops))
                slowest = wi;
        }
        if (slowest >= 0)
            cJSON_AddStringToObject(st, "tflopsSource", tflops_source(&w[slowest]));
        cJSON_AddNumberToObject(st, "memoryGbps", p->stages[s].memory_gbps);
        cJSON_AddStringToObject(st, "memoryGbpsSource", memory_gbps_source(p, w, s));
        cJSON_AddNumberToObject(st, "optimizerSeconds", p->stages[s].optimizer_s);
        cJSON_AddNumberToObject(st, "memoryGb", p->stages[s].memory_gb);
        int smallest = least_gpu_memory(p, w, s);
        if (smallest >= 0) {
            cJSON_AddNumberToObject(st, "gpuMemoryGb", w[smallest].gpu_memory_gb);
            cJSON_AddStringToObject(st, "gpuMemorySource",
                                    w[smallest].gpu_memory_measured ? "measured" : "declared");
        }
        cJSON *ws = cJSON_AddArrayToObject(st, "workers");
        for (int r = 0; ws && r < p->n_ranks; r++)
            if (p->ranks[r].stage == s && p->ranks[r].local == 0)
                cJSON_AddItemToArray(ws, cJSON_CreateString(w[p->ranks[r].worker].pod));
    }
    return o;
}
