/* The coordinator's plan hook on examples/local-tiny.yaml (two emulated fabrics) and the rank
 * table a worker builds from its assignment and the peers' endpoints. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "cluster.h"
#include "coord_plan.h"
#include "planner_job.h"
#include "worker_train.h"

static void fill_workers(const struct tj_job *job, struct coord_worker *w, int n)
{
    int k = 0;
    for (int g = 0; g < job->spec.emulation.n_groups; g++) {
        const struct tj_nic_group *ng = &job->spec.emulation.groups[g];
        for (int c = 0; c < ng->count && k < n; c++, k++) {
            memset(&w[k], 0, sizeof w[k]);
            w[k].index = k;
            snprintf(w[k].pod, sizeof w[k].pod, "local-tiny-worker-%d", k);
            snprintf(w[k].node, sizeof w[k].node, "localhost");
            nic_class_parse(ng->cls, &w[k].nic.cls);
            snprintf(w[k].nic.fabric, sizeof w[k].nic.fabric, "%s", ng->fabric);
            w[k].nic.gbps = ng->gbps;
            w[k].nic.gid_index = -1;
        }
    }
}

/* What `holmes-operator plan JOB [--calibration F]` computes for the same job. */
static int plan_like_cmd_plan(const struct tj_job *job, const char *calib, struct plan *out,
                              herr *e)
{
    struct cluster cl;
    struct plan_job pj;
    if (cluster_from_emulation(&job->spec, 0, &cl, e))
        return -1;
    planner_job_from_spec(&job->spec, &pj);
    int rc = planner_apply_spec(&job->spec, cl.workers, cl.n_workers, &cl.links, e);
    if (!rc && calib)
        rc = cluster_load_calibration(calib, &cl.links, e);
    if (!rc)
        rc = plan_make(cl.workers, cl.n_workers, &pj, &cl.links, out, e);
    cluster_free(&cl);
    return rc;
}

/* The coordinator's plan equals `plan`'s: same layers per stage, fabrics and step time. */
static void check_same_plan(const char *what, const struct plan *c, const struct plan *p)
{
    char name[160];
    int same = c->n_stages == p->n_stages;
    for (int s = 0; same && s < c->n_stages; s++)
        same = c->stages[s].first_layer == p->stages[s].first_layer &&
               c->stages[s].last_layer == p->stages[s].last_layer &&
               strcmp(c->stages[s].fabric, p->stages[s].fabric) == 0;
    snprintf(name, sizeof name, "%s: coordinator's split and fabrics = plan's", what);
    CHECK(name, same);
    snprintf(name, sizeof name, "%s: coordinator's predicted step = plan's", what);
    CHECK_NEAR(name, c->step_s, p->step_s, 1e-12);
}

static int num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -999;
}

static void free_assignments(struct plan_assignment *a, int n)
{
    for (int i = 0; i < n; i++)
        plan_assignment_free(&a[i]);
}

/* The assignment as the worker gets it: through its encoder and decoder. */
static int sent(const struct plan_assignment *a, struct plan_assignment *out, herr *e)
{
    cJSON *j = plan_assignment_to_json(a);
    int rc = j ? plan_assignment_from_json(j, out, e) : herr_set(e, "out of memory");
    cJSON_Delete(j);
    return rc;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

int main(void)
{
    struct tj_job *jobs = NULL;
    int n = 0;
    static struct tj_errors errs;
    if (tj_load_file("examples/local-tiny.yaml", &jobs, &n, &errs) || n != 1) {
        TEST_FAIL("load example", "%s", errs.count ? errs.msg[0] : "not one job");
        TEST_MAIN_END();
    }
    struct coord_worker w[4];
    fill_workers(&jobs[0], w, 4);
    struct coord_plan cp = {.job = &jobs[0]};
    struct plan_assignment a[4] = {0};
    herr e = {0};
    CHECK_INT("plan hook", coord_plan_hook(&cp, w, 4, a, &e), 0);
    if (!a[3].has_plan) {
        TEST_FAIL("assignments", "%s", e.msg);
        TEST_MAIN_END();
    }
    /* Stages inside fabrics: workers 0,1 (ib-a) share a stage, 2,3 (roce-b) the other. */
    CHECK_INT("ib workers share a stage", a[0].stage, a[1].stage);
    CHECK_INT("roce workers share a stage", a[2].stage, a[3].stage);
    CHECK("the two fabrics hold different stages", a[0].stage != a[2].stage);
    CHECK_STR("stage fabric ib", a[0].fabric, "ib-a");
    CHECK_STR("stage fabric roce", a[3].fabric, "roce-b");
    CHECK_INT("stages", a[0].stages, 2);
    int seen = 0;
    for (int i = 0; i < 4; i++)
        seen |= 1 << a[i].rank;
    CHECK_INT("ranks distinct", seen, 15);
    CHECK("data-parallel ranks differ in a stage", a[0].dp_rank != a[1].dp_rank);
    CHECK("spec carried, without the pods' template",
          a[0].has_spec && a[0].spec.workers == 4 && !a[0].spec.pod_template);
    CHECK_STR("job name carried", a[0].job, "local-tiny");
    CHECK("planner kept the plan", cp.planned && cp.plan.n_stages == 2);
    /* status.plan.pipelineLinks: the boundary's links by transport (ib-a -> roce-b: TCP) */
    cJSON *status = coord_plan_status_json(&cp.plan, w);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(status, "pipelineLinks");
    const cJSON *b0 = cJSON_GetArrayItem(pl, 0);
    CHECK("status: pipelineLinks, one boundary, 2 links on TCP",
          cJSON_GetArraySize(pl) == 1 && num(b0, "fromStage") == 0 && num(b0, "toStage") == 1 &&
              !strcmp(str(b0, "transport"), "socket") && num(b0, "socket") == 2 &&
              num(b0, "ib") == 0 && cJSON_GetObjectItemCaseSensitive(b0, "seconds")->valuedouble > 0);
    /* status.plan.stages[]: the predicted memory always; the GPUs' only where every worker of
     * the stage said it (the smallest, with where it came from) */
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(status, "stages");
    int s_ib = a[0].stage, s_roce = a[2].stage;
    CHECK("status: no GPU memory said, none shown; predicted memory shown",
          !cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(st, s_ib), "gpuMemoryGb") &&
              cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(st, s_ib),
                                                                    "memoryGb")) > 0);
    cJSON_Delete(status);
    w[0].gpu_memory_gb = 40, w[1].gpu_memory_gb = 24, w[1].gpu_memory_measured = 1;
    w[2].gpu_memory_gb = 80;
    status = coord_plan_status_json(&cp.plan, w);
    st = cJSON_GetObjectItemCaseSensitive(status, "stages");
    const cJSON *sib = cJSON_GetArrayItem(st, s_ib), *sro = cJSON_GetArrayItem(st, s_roce);
    CHECK("status: the stage's smallest GPU memory and its source",
          num(sib, "gpuMemoryGb") == 24 && !strcmp(str(sib, "gpuMemorySource"), "measured"));
    CHECK("status: a stage with a worker that said nothing shows none",
          !cJSON_GetObjectItemCaseSensitive(sro, "gpuMemoryGb"));
    cJSON_Delete(status);
    w[0].gpu_memory_gb = w[1].gpu_memory_gb = w[2].gpu_memory_gb = 0, w[1].gpu_memory_measured = 0;

    /* The worker decodes the assignment into the same plan type. */
    struct plan_assignment pa;
    int rc = sent(&a[0], &pa, &e);
    CHECK_INT("assignment decodes", rc, 0);
    if (rc)
        printf("  %s\n", e.msg);
    if (rc == 0) {
        const struct plan_doc *d = &pa.plan;
        CHECK("the plan and the spec are carried", pa.has_plan && pa.has_spec &&
                                                       pa.spec.emulation.n_groups == 2 &&
                                                       pa.spec.model.layers == a[0].spec.model.layers);
        CHECK_INT("rank and stage agree with the plan", plan_doc_stage_of(d, pa.rank), pa.stage);
        CHECK("layers cover the model in order", d->stage_first && d->stage_first[0] == 0 &&
                                                     d->stage_last[0] == d->stage_first[1] &&
                                                     d->stage_last[1] == 4);
        CHECK_INT("no endpoints before the rendezvous", plan_doc_check_endpoints(d, "x", &e), -1);
        plan_assignment_free(&pa);
    }

    /* The rank table: the assignment's plan and the peers' endpoints. */
    struct proto_peer pp[4];
    for (int r = 0; r < 4; r++) {
        pp[r] = (struct proto_peer){.rank = r};
        snprintf(pp[r].endpoint, sizeof pp[r].endpoint, "127.0.0.1:%d", 41000 + r);
    }
    struct proto_start peers = {4, pp};
    rc = sent(&a[0], &pa, &e) || worker_plan_endpoints(&pa.plan, &peers, &e);
    CHECK_INT("rank table built", rc, 0);
    if (rc == 0) {
        const struct plan_doc *d = &pa.plan;
        CHECK_STR("rank 2 host", d->ranks[2].host, "127.0.0.1");
        CHECK_INT("rank 2 port", d->ranks[2].port, 41002);
        int checked = 0;
        for (int g = 0; g < d->ngroups; g++) {
            const struct plan_doc_group *gr = &d->groups[g];
            double bps = gr->pacing.bytes_per_sec;
            if (gr->kind == GROUP_DP && gr->transport == TRANSPORT_IB) {
                CHECK_NEAR("ib group paced at 200 Gb/s x 0.01", bps, 200 * 0.01e9 / 8, 1e-9);
                checked++;
            } else if (gr->kind == GROUP_DP) {
                CHECK_NEAR("roce group paced at 100 Gb/s x 0.01", bps, 100 * 0.01e9 / 8, 1e-9);
                checked++;
            } else if (gr->kind == GROUP_PP) {
                CHECK_NEAR("cross-fabric pp group at 10 Gb/s x 0.01", bps, 10 * 0.01e9 / 8, 1e-9);
                CHECK_NEAR("socket pp group has TCP latency", gr->pacing.latency_s, 50e-6, 1e-12);
                checked++;
            } else if (gr->kind == GROUP_LINK) {
                /* one link per worker: the whole NIC, capped at the cross-fabric 10 Gb/s */
                CHECK_NEAR("cross-fabric link at 10 Gb/s x 0.01", bps, 10 * 0.01e9 / 8, 1e-9);
                CHECK("cross-fabric link on TCP, with its latency",
                      gr->transport == TRANSPORT_SOCKET && fabs(gr->pacing.latency_s - 50e-6) < 1e-12);
                checked += 10;
            }
        }
        CHECK("dp, pp and link groups paced", checked >= 23);
        CHECK_NEAR("cross-fabric links", d->cross_fabric.bytes_per_sec, 10 * 0.01e9 / 8, 1e-9);
    }
    plan_assignment_free(&pa);
    /* HOLMES_NO_PACING=1 (bench-hetero: tc shapes the links): no pacing anywhere. */
    setenv("HOLMES_NO_PACING", "1", 1);
    rc = sent(&a[0], &pa, &e) || worker_plan_endpoints(&pa.plan, &peers, &e);
    unsetenv("HOLMES_NO_PACING");
    CHECK_INT("rank table built without pacing", rc, 0);
    if (rc == 0) {
        int paced = pa.plan.cross_fabric.bytes_per_sec > 0;
        for (int g = 0; g < pa.plan.ngroups; g++)
            paced += pa.plan.groups[g].pacing.bytes_per_sec > 0 || pa.plan.groups[g].pacing.latency_s > 0;
        CHECK_INT("HOLMES_NO_PACING=1 leaves every link unpaced", paced, 0);
    }
    plan_assignment_free(&pa);
    struct proto_peer nohost = {.rank = 0, .endpoint = "nohostport"};
    struct proto_start bad = {1, &nohost};
    rc = sent(&a[0], &pa, &e);
    CHECK("bad endpoint refused", rc == 0 && worker_plan_endpoints(&pa.plan, &bad, &e) != 0 &&
                                      strstr(e.msg, "start.peers[0]"));
    plan_assignment_free(&pa);
    peers.npeers = 3;
    rc = sent(&a[0], &pa, &e);
    CHECK("a rank without an endpoint refused", rc == 0 && worker_plan_endpoints(&pa.plan, &peers, &e) != 0 &&
                                                    strstr(e.msg, "workers[3] needs a host"));
    plan_assignment_free(&pa);
    /* {assignment, the refusal it must get} */
    static const char *const bad_ranks[][2] = {
        {"{\"rank\": 1, \"ranks\": [1, 1]}", "listed twice"},
        {"{\"rank\": 1, \"ranks\": [0, 1]}", "assignment.ranks[0] is 0, but rank is 1"},
        {"{\"rank\": 1, \"ranks\": []}", "assignment.ranks must be an array"},
        {"{\"rank\": 1, \"ranks\": [1, \"x\"]}", "assignment.ranks[1] must be a global rank"},
    };
    for (int i = 0; i < 4; i++) {
        cJSON *bj = cJSON_Parse(bad_ranks[i][0]);
        int refused = plan_assignment_from_json(bj, &pa, &e) != 0;
        CHECK(bad_ranks[i][1], refused && strstr(e.msg, bad_ranks[i][1]));
        if (!refused)
            plan_assignment_free(&pa);
        cJSON_Delete(bj);
    }
    cJSON *noplan = cJSON_Parse("{\"rank\": 0, \"stage\": 2, \"stages\": 2}");
    CHECK("an assignment's stage out of range refused",
          plan_assignment_from_json(noplan, &pa, &e) != 0 && strstr(e.msg, "assignment.stage"));
    cJSON_Delete(noplan);
    free_assignments(a, 4);

    /* One computation: the coordinator embedded in `holmes-operator local` (every worker on
     * node "localhost", 0.05 TFLOPS declared) plans what `holmes-operator plan JOB` plans. The
     * old hook took the shared node for one machine and costed every group over shared memory
     * (predicted 0.071 s whatever the fabrics). */
    for (int i = 0; i < 4; i++)
        w[i].tflops = 0.05;
    struct plan ref;
    memset(&ref, 0, sizeof ref);
    struct plan_assignment q[4] = {0};
    CHECK_INT("plan hook, local's inputs", coord_plan_hook(&cp, w, 4, q, &e), 0);
    if (plan_like_cmd_plan(&jobs[0], NULL, &ref, &e) == 0 && cp.planned) {
        check_same_plan("local-tiny", &cp.plan, &ref);
        int intra = 0;
        for (int g = 0; g < cp.plan.n_groups; g++)
            intra += cp.plan.groups[g].transport.intra_node;
        CHECK_INT("no group is costed as inside one node", intra, 0);
    } else {
        TEST_FAIL("plan like cmd_plan", "%s", e.msg);
    }
    plan_free(&ref);
    free_assignments(q, 4);
    /* ... and with a calibration file (local --calibration, plan --calibration). */
    char calib[] = "/tmp/test_coord_plan_XXXXXX";
    int fd = mkstemp(calib);
    FILE *cf = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (cf) {
        fprintf(cf, "links: {compute_efficiency: 0.2, tcp_gbps: 0.3}\n");
        fclose(cf);
        cp.calibration = calib;
        memset(&ref, 0, sizeof ref);
        CHECK_INT("plan hook with calibration", coord_plan_hook(&cp, w, 4, q, &e), 0);
        if (plan_like_cmd_plan(&jobs[0], calib, &ref, &e) == 0 && cp.planned) {
            check_same_plan("local-tiny calibrated", &cp.plan, &ref);
            CHECK_NEAR("calibration reached the coordinator", cp.plan.links.compute_efficiency,
                       0.2, 1e-12);
        } else {
            TEST_FAIL("plan like cmd_plan, calibrated", "%s", e.msg);
        }
        plan_free(&ref);
        free_assignments(q, 4);
        cp.calibration = "/nonexistent/calib.yaml";
        CHECK_INT("missing calibration file refused", coord_plan_hook(&cp, w, 4, q, &e), -1);
        CHECK("refusal names the file", strstr(e.msg, "/nonexistent/calib.yaml") != NULL);
        free_assignments(q, 4);
        cp.calibration = NULL;
        unlink(calib);
    } else {
        TEST_FAIL("temporary calibration file", "mkstemp failed");
    }
    for (int i = 0; i < 4; i++)
        w[i].tflops = 0;

    /* The planner's refusal comes back as an error naming the planner. */
    struct coord_worker three[3];
    memcpy(three, w, sizeof three);
    struct plan_assignment b[3] = {0};
    CHECK_INT("3 workers for pipeline 2 x data 2 refused", coord_plan_hook(&cp, three, 3, b, &e), -1);
    CHECK("refusal names the planner", strstr(e.msg, "planner") != NULL);
    CHECK("refusal names spec.workers (planner_apply_spec)", strstr(e.msg, "spec.workers") != NULL);
    free_assignments(b, 3);

    /* Each worker's TFLOPS from its hello reaches the planner: make the ib-a workers (0, 1)
     * four times faster than the roce-b ones and their stage gets more of the 4 layers. */
    for (int i = 0; i < 4; i++)
        w[i].tflops = i < 2 ? 0.2 : 0.05;
    struct plan_assignment f[4] = {0};
    CHECK_INT("plan with measured TFLOPS", coord_plan_hook(&cp, w, 4, f, &e), 0);
    if (f[0].has_plan && f[2].has_plan && f[0].plan.stage_first) {
        const struct plan_doc *d = &f[0].plan;
        int nfast = d->stage_last[f[0].stage] - d->stage_first[f[0].stage];
        int nslow = d->stage_last[f[2].stage] - d->stage_first[f[2].stage];
        CHECK("the faster fabric's stage holds more layers", nfast > nslow);
    }
    CHECK_NEAR("the plan's stage carries the worker's TFLOPS",
               f[0].has_plan ? cp.plan.stages[f[0].stage].tflops : -1, 0.2, 1e-12);
    free_assignments(f, 4);

    /* Measured figures a few per cent apart are one kind of device (the probes' noise between
     * identical ones): planned at the least of them. Declared ones are taken as said, and
     * measured ones further apart stay apart. */
    static const double near_tf[4] = {0.0505, 0.05, 0.051, 0.0498}, near_bw[4] = {3.08, 3.0, 2.95, 3.05};
    for (int i = 0; i < 4; i++) {
        w[i].tflops = near_tf[i], w[i].tflops_measured = 1;
        w[i].memory_gbps = near_bw[i], w[i].memory_gbps_measured = 1;
    }
    struct plan_assignment kind[4] = {0};
    int ok = coord_plan_hook(&cp, w, 4, kind, &e) == 0 && cp.planned;
    CHECK("plan with measured figures within 5 %", ok);
    for (int si = 0; ok && si < cp.plan.n_stages; si++) {
        CHECK_NEAR("measured TFLOPS within 5 %: every stage at the least", cp.plan.stages[si].tflops,
                   0.0498, 0);
        CHECK_NEAR("measured bandwidths within 5 %: every stage at the least",
                   cp.plan.stages[si].memory_gbps, 2.95, 0);
    }
    /* status says where each stage's figure came from: measured (its own, or its kind's) */
    cJSON *ks = ok ? coord_plan_status_json(&cp.plan, w) : NULL;
    const cJSON *kst = cJSON_GetObjectItem(ks, "stages");
    int sources = cJSON_GetArraySize(kst) == cp.plan.n_stages;
    for (int si = 0; sources && si < cp.plan.n_stages; si++) {
        const cJSON *src = cJSON_GetObjectItem(cJSON_GetArrayItem(kst, si), "memoryGbpsSource");
        sources = cJSON_IsString(src) && !strcmp(src->valuestring, "measured");
    }
    CHECK("status: each stage's bandwidth measured (its own or its kind's least)", sources);
    cJSON_Delete(ks);
    free_assignments(kind, 4);
    for (int i = 0; i < 4; i++)
        w[i].tflops_measured = w[i].memory_gbps_measured = 0;
    ok = coord_plan_hook(&cp, w, 4, kind, &e) == 0 && cp.planned;
    int as_said = ok;
    for (int si = 0; ok && si < cp.plan.n_stages; si++) { /* each stage's least, not the job's */
        double tf = 1e9, bw = 1e9;
        for (int r = 0; r < cp.plan.n_ranks; r++)
            if (cp.plan.ranks[r].stage == si) {
                tf = fmin(tf, near_tf[cp.plan.ranks[r].worker]);
                bw = fmin(bw, near_bw[cp.plan.ranks[r].worker]);
            }
        as_said &= cp.plan.stages[si].tflops == tf && cp.plan.stages[si].memory_gbps == bw;
    }
    CHECK("declared figures within 5 %: taken as said (each stage its own workers' least)", as_said);
    free_assignments(kind, 4);
    for (int i = 0; i < 4; i++)
        w[i].tflops = i < 2 ? 0.2 : 0.0498, w[i].tflops_measured = 1;
    ok = coord_plan_hook(&cp, w, 4, kind, &e) == 0 && cp.planned;
    int apart = ok && cp.plan.n_stages == 2 &&
                ((cp.plan.stages[0].tflops == 0.2) != (cp.plan.stages[1].tflops == 0.2));
    CHECK("measured figures 4x apart stay apart", apart);
    free_assignments(kind, 4);
    for (int i = 0; i < 4; i++)
        w[i].tflops = 0, w[i].tflops_measured = 0, w[i].memory_gbps = 0;

    /* spec.placement goes through planner_apply_spec: an override for a fabric no worker is on
     * is refused by name; a real one changes the plan's view of that fabric. */
    struct tj_placement saved = jobs[0].spec.placement;
    jobs[0].spec.placement.n_fabrics = 1;
    snprintf(jobs[0].spec.placement.fabrics[0].fabric, sizeof jobs[0].spec.placement.fabrics[0].fabric,
             "%s", "nosuch");
    jobs[0].spec.placement.fabrics[0].gbps = 50;
    struct plan_assignment c[4] = {0};
    CHECK_INT("override for an absent fabric refused", coord_plan_hook(&cp, w, 4, c, &e), -1);
    CHECK("refusal names spec.placement.fabrics[0]",
          strstr(e.msg, "spec.placement.fabrics[0].fabric") != NULL);
    free_assignments(c, 4);
    jobs[0].spec.placement = saved;

    /* Validation (tj_spec_runnable, what `validate`, `local` and the operator's admission apply)
     * and the coordinator refuse the same jobs for the same reason: every GPU count the API
     * accepts, in both precisions. */
    int agree = 1;
    char why[600] = "";
    struct tj_spec keep = jobs[0].spec;
    for (int g = 0; g <= 16; g++)
        for (int prec = 0; prec < 2; prec++) {
            jobs[0].spec.gpus_per_worker = g;
            jobs[0].spec.par.pipeline = jobs[0].spec.par.data = 0; /* auto: any device count plans */
            jobs[0].spec.training.precision = prec ? DTYPE_BF16 : DTYPE_FP32;
            for (int i = 0; i < 4; i++)
                w[i].gpus = g; /* the workers have what the job asks for */
            struct tj_errors run = {0};
            int refused = tj_spec_runnable(&jobs[0].spec, "spec", &run) != 0;
            struct plan_assignment d[4] = {0};
            herr de = {0};
            int hook_refused = coord_plan_hook(&cp, w, 4, d, &de) != 0;
            free_assignments(d, 4);
            int same = refused == hook_refused;
            for (int k = 0; same && k < run.count; k++)
                same = strstr(de.msg, run.msg[k]) != NULL;
            if (!same && agree) {
                agree = 0;
                snprintf(why, sizeof why, "gpusPerWorker %d %s: validation %s (%.200s), coordinator %s (%.200s)",
                         g, prec ? "bf16" : "fp32", refused ? "refuses" : "accepts", run.msg[0],
                         hook_refused ? "refuses" : "accepts", de.msg);
            }
        }
    jobs[0].spec = keep;
    for (int i = 0; i < 4; i++)
        w[i].gpus = 0;
    if (agree)
        TEST_PASS("validation and the coordinator refuse the same GPU counts and precisions, same reason");
    else
        TEST_FAIL("validation and the coordinator refuse the same GPU counts and precisions, same reason",
                  "%s", why);
    {
        struct tj_errors run = {0};
        /* Emulated GPUs: each worker gets gpusPerWorker ranks, all ranks once. */
        jobs[0].spec.gpus_per_worker = 2;
        jobs[0].spec.emulation.gpus = 1;
        jobs[0].spec.par.pipeline = 2;
        jobs[0].spec.par.data = 4;
        struct plan_assignment g[4] = {0};
        rc = coord_plan_hook(&cp, w, 4, g, &e);
        CHECK_INT("emulated GPUs: 4 workers x 2 planned as pipeline 2 x data 4", rc, 0);
        if (rc)
            printf("  %s\n", e.msg);
        int mask = 0, two = 1;
        for (int i = 0; rc == 0 && i < 4; i++) {
            struct plan_assignment ga;
            if (sent(&g[i], &ga, &e) != 0) {
                two = 0;
                continue;
            }
            two = two && ga.nranks == 2 && ga.plan.world == 8 &&
                  !strcmp(ga.plan.ranks[ga.ranks[0]].name, ga.plan.ranks[ga.ranks[1]].name);
            for (int k = 0; k < ga.nranks; k++)
                mask |= 1 << ga.ranks[k];
            plan_assignment_free(&ga);
        }
        CHECK("emulated GPUs: two ranks per worker, both placed on it", two);
        CHECK_INT("emulated GPUs: every rank 0..7 assigned once", mask, 255);
        free_assignments(g, 4);
        herr de = {0};
        CHECK_INT("emulated GPUs: the worker trains them", worker_check_devices(&jobs[0].spec, &de), 0);
        jobs[0].spec.emulation.gpus = 0;
        CHECK("real GPUs: this worker without the CUDA engine refuses them as a configuration error",
              worker_check_devices(&jobs[0].spec, &de) != 0 && de.kind == HERR_CONFIG &&
                  strstr(de.msg, "spec.gpusPerWorker 2: this holmes-node was built without the CUDA engine"));
        jobs[0].spec.emulation.gpus = 1;
        jobs[0].spec.training.precision = DTYPE_BF16;
        CHECK("emulated GPUs in bf16: the CPU engine refuses, naming the field",
              worker_check_devices(&jobs[0].spec, &de) != 0 && de.kind == HERR_CONFIG &&
                  strstr(de.msg, "spec.training.precision: the CPU engine trains in fp32 only"));
        jobs[0].spec.training.precision = DTYPE_FP32;
        jobs[0].spec.emulation.gpus = 0;
        jobs[0].spec.gpus_per_worker = 0;
        CHECK_INT("CPU workers: trained", worker_check_devices(&jobs[0].spec, &de), 0);
        jobs[0].spec = keep;
        jobs[0].spec.gpus_per_worker = 8;
        CHECK_INT("gpusPerWorker 8 is runnable (a rank per GPU)",
                  tj_spec_runnable(&jobs[0].spec, "spec", &run), 0);
        jobs[0].spec.training.precision = DTYPE_BF16;
        CHECK_INT("bf16 on GPUs is runnable (the CUDA engine's bf16)",
                  tj_spec_runnable(&jobs[0].spec, "spec", &run), 0);
        jobs[0].spec.emulation.gpus = 1;
        CHECK("bf16 on emulated GPUs refused, naming the field",
              tj_spec_runnable(&jobs[0].spec, "spec", &run) != 0 &&
              strstr(run.msg[0], "spec.training.precision: bf16 needs real GPUs") != NULL);
        jobs[0].spec.emulation.gpus = 0;
        jobs[0].spec.training.precision = DTYPE_FP32;
        /* the CUDA engine's tensor parallelism, its TeraPipe, and both together, fp32 and bf16 */
        static const struct {
            int tensor, slices;
            const char *name;
        } runnable[] = {{2, 1, "tensor 2 on GPUs is runnable"},
                        {1, 2, "token slices on GPUs with tensor 1 are runnable"},
                        {2, 2, "token slices on GPUs with tensor 2 are runnable"},
                        {2, TJ_AUTO, "tokenSlices auto on GPUs with tensor 2 is runnable"}};
        struct tj_errors run2 = {0};
        for (int i = 0; i < 4; i++)
            for (int bf16 = 0; bf16 < 2; bf16++) {
                jobs[0].spec.par.tensor = runnable[i].tensor;
                jobs[0].spec.par.token_slices = runnable[i].slices;
                jobs[0].spec.training.precision = bf16 ? DTYPE_BF16 : DTYPE_FP32;
                char name[128];
                snprintf(name, sizeof name, "%s (%s)", runnable[i].name, bf16 ? "bf16" : "fp32");
                CHECK_INT(name, tj_spec_runnable(&jobs[0].spec, "spec", &run2), 0);
            }
        jobs[0].spec = keep;
    }
    coord_plan_free(&cp);
    /* tensor 2 on emulated GPUs: each worker's 2 ranks send their halves over their own links
     * between the fabrics, which share the worker's path there (the cost model's tcp_gbps per
     * worker): each link paced at half the cross-fabric 10 Gb/s */
    {
        struct tj_spec keep2 = jobs[0].spec;
        jobs[0].spec.gpus_per_worker = 2;
        jobs[0].spec.emulation.gpus = 1;
        jobs[0].spec.par.tensor = 2;
        for (int i = 0; i < 4; i++)
            w[i].gpus = 2;
        struct coord_plan cp2 = {.job = &jobs[0]};
        struct plan_assignment a2[4] = {0};
        int rc2 = coord_plan_hook(&cp2, w, 4, a2, &e);
        CHECK_INT("tensor 2 x pipeline 2 x data 2 planned", rc2, 0);
        if (rc2)
            printf("  %s\n", e.msg);
        if (rc2 == 0) {
            const struct plan_doc *pd = &a2[0].plan;
            int links = 0, right = 0;
            for (int g = 0; g < pd->ngroups; g++) {
                const struct plan_doc_group *gr = &pd->groups[g];
                if (gr->kind != GROUP_LINK)
                    continue;
                links++;
                right += fabs(gr->pacing.bytes_per_sec - 5 * 0.01e9 / 8) < 1e-6;
            }
            CHECK("each of a worker's 2 links between fabrics paced at half its 10 Gb/s",
                  links == 4 && right == 4);
        }
        for (int i = 0; i < 4; i++)
            plan_assignment_free(&a2[i]);
        coord_plan_free(&cp2);
        for (int i = 0; i < 4; i++)
            w[i].gpus = 0;
        jobs[0].spec = keep2;
    }
    tj_job_free(&jobs[0]);
    free(jobs);
    TEST_MAIN_END();
}
