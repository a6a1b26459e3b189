/* The planner's choice of the 1F1B warm-up depth (plan.warmup_extra, common/pipe_order.h), on
 * make bench-hetero's six-worker, three-fabric job (tests/fixtures/planner/hetero-3fab6-*): the
 * Ethernet stage's data-parallel reduce-scatter ends the step under the standard warm-up; a
 * deeper one lets it overlap the other stages' last backwards. Checked: the plan beats every
 * split of its placement under the standard warm-up, its step is what the cost model gives its
 * split and depth, the depth reaches the plan document and its JSON, the memory it costs is
 * counted and a depth that does not fit is not chosen, and the naive policy and GPipe keep the
 * standard order. */
#include <math.h>
#include <stdlib.h>

#include "cluster.h"
#include "cost_model.h"
#include "plan_doc.h"
#include "planner.h"
#include "planner_job.h"
#include "test.h"

struct fixture {
    struct cluster cl;
    struct tj_job tj;
    struct plan_job job;
};

static int load(struct fixture *f)
{
    herr e = {0};
    if (planner_load_job("tests/fixtures/planner/hetero-3fab6-job.yaml", &f->tj, &e) ||
        cluster_from_emulation(&f->tj.spec, 0.1, &f->cl, &e) ||
        cluster_load_calibration("tests/fixtures/planner/hetero-3fab6-links.json", &f->cl.links, &e) ||
        planner_apply_spec(&f->tj.spec, f->cl.workers, f->cl.n_workers, &f->cl.links, &e)) {
        TEST_FAIL("warm-up: fixtures load", "%s", e.msg);
        return -1;
    }
    planner_job_from_spec(&f->tj.spec, &f->job);
    return 0;
}

static void unload(struct fixture *f)
{
    cluster_free(&f->cl);
    tj_job_free(&f->tj);
}

/* The plan's placement: stage_units[s * data + d] = the worker of (s, d) (one block a worker). */
static void placement(const struct plan *p, int *units, int *layers)
{
    for (int s = 0; s < p->pipeline; s++) {
        layers[s] = p->stages[s].last_layer - p->stages[s].first_layer;
        for (int d = 0; d < p->data; d++)
            units[s * p->data + d] = p->ranks[plan_rank_of(p, s, d, 0)].worker;
    }
}

/* The shortest step of any split of 8 layers into 3 stages on the placement, at depth x. */
static double best_split(struct plan_eval *ev, const int *units, int x, int *best_layers)
{
    double best = INFINITY;
    plan_eval_set_warmup(ev, x);
    for (int a = 1; a <= 6; a++)
        for (int b = 1; a + b <= 7; b++) {
            int layers[3] = {a, b, 8 - a - b};
            double t = plan_eval_step(ev, units, layers);
            if (t < best) {
                best = t;
                memcpy(best_layers, layers, sizeof layers);
            }
        }
    plan_eval_set_warmup(ev, 0);
    return best;
}

static void test_chosen(void)
{
    struct fixture f;
    if (load(&f))
        return;
    struct plan p;
    herr e = {0};
    int rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK_INT("warm-up: plan", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        unload(&f);
        return;
    }
    int units[6], layers[3], l0[3] = {0};
    placement(&p, units, layers);
    char sched[256];
    plan_schedule_text(&p, sched, sizeof sched);
    printf("  # %s; layers %d %d %d; step %.4f s\n", sched, layers[0], layers[1], layers[2],
           p.step_s);
    CHECK("warm-up: a deeper warm-up chosen", p.warmup_extra > 0);
    struct plan_eval *ev = plan_eval_new(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &e);
    CHECK("warm-up: evaluator", ev != NULL);
    if (ev) {
        double standard = best_split(ev, units, 0, l0);
        printf("  # the standard warm-up's best split on that placement: %d %d %d, %.4f s\n",
               l0[0], l0[1], l0[2], standard);
        CHECK("warm-up: the plan beats every split under the standard warm-up by 0.5 %",
              p.step_s < standard * (1 - 0.005));
        plan_eval_set_warmup(ev, p.warmup_extra);
        CHECK_NEAR("warm-up: the plan's step is the cost model's for its split and depth",
                   plan_eval_step(ev, units, layers), p.step_s, 1e-9);
        plan_eval_set_warmup(ev, 0);
        CHECK("warm-up: the same split with the standard warm-up is slower",
              plan_eval_step(ev, units, layers) > p.step_s * (1 + 0.005));
        plan_eval_free(ev);
    }
    CHECK("warm-up: the schedule names it", strstr(sched, "warm-up +") != NULL);
    /* the memory: stage 0 holds the deeper warm-up's activations */
    struct cost_job cj = {.model = f.job.model, .tensor = 1, .data = p.data,
                          .micro_batches = p.micro_batches, .micro_batch_size = p.micro_batch_size,
                          .elem_bytes = 4, .act_elem_bytes = 2, .gather_elem_bytes = 2,
                          .gather_masters = 1, .schedule = SCHED_1F1B}; /* bf16 wire and gather */
    double m0 = cost_stage_memory(&cj, layers[0], 0, 3);
    cj.warmup_extra = p.warmup_extra;
    double mx = cost_stage_memory(&cj, layers[0], 0, 3);
    CHECK("warm-up: stage 0's memory counts the deeper warm-up", mx > m0);
    CHECK_NEAR("warm-up: the plan reports that memory", p.stages[0].memory_gb, mx / 1e9, 1e-12);
    /* the document the workers get, and its JSON */
    struct plan_doc d, back;
    rc = plan_to_doc(&p, &d, &e);
    CHECK_INT("warm-up: plan_to_doc", rc, 0);
    if (rc == 0) {
        CHECK_INT("warm-up: the document carries it", d.warmup_extra, p.warmup_extra);
        cJSON *j = plan_doc_to_json(&d);
        rc = j ? plan_doc_from_json(j, "test", &back, &e) : -1;
        CHECK("warm-up: and its JSON round-trips", rc == 0 && back.warmup_extra == p.warmup_extra);
        if (rc == 0)
            plan_doc_free(&back);
        cJSON_ReplaceItemInObjectCaseSensitive(j, "warmup_extra", cJSON_CreateNumber(-1));
        rc = plan_doc_from_json(j, "test", &back, &e);
        CHECK("warm-up: a negative warmup_extra is refused naming it",
              rc != 0 && strstr(e.msg, "warmup_extra"));
        if (rc == 0)
            plan_doc_free(&back);
        cJSON_Delete(j);
        plan_doc_free(&d);
    }
    cJSON *pj = plan_to_json(&p);
    const cJSON *wx = pj ? cJSON_GetObjectItemCaseSensitive(pj, "warmup_extra") : NULL;
    CHECK("warm-up: plan --json has it", cJSON_IsNumber(wx) && wx->valueint == p.warmup_extra);
    cJSON_Delete(pj);
    plan_free(&p);

    /* GPUs that hold the chosen split with the standard warm-up but not with the chosen depth
     * on stage 0: the planner must take a shallower depth or another split, and fit */
    cj.warmup_extra = 0;
    double need0 = 0;
    for (int s = 0; s < 3; s++)
        need0 = fmax(need0, cost_stage_memory(&cj, layers[s], s, 3));
    if (need0 < mx) {
        for (int w = 0; w < f.cl.n_workers; w++)
            f.cl.workers[w].memory_gb = (0.6 * need0 + 0.4 * mx) / 0.9 / 1e9;
        double have = f.cl.workers[0].memory_gb * 0.9e9;
        rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
        CHECK_INT("warm-up: with less memory, still planned", rc, 0);
        if (rc == 0) {
            int fits = 1;
            for (int s = 0; s < 3; s++)
                fits &= p.stages[s].memory.total <= have * (1 + 1e-12);
            printf("  # with %.0f bytes a GPU: warm-up +%d, stage 0 %d layers\n", have,
                   p.warmup_extra, p.stages[0].last_layer);
            CHECK("warm-up: every stage fits with the depth chosen", fits);
            plan_free(&p);
        }
        for (int w = 0; w < f.cl.n_workers; w++)
            f.cl.workers[w].memory_gb = 0;
    } else {
        TEST_FAIL("warm-up: the deeper warm-up needs more memory than the standard one", "%g %g",
                  need0, mx);
    }

    /* a pinned depth (plan --warmup): 0 is the standard schedule, slower here; out of range and
     * GPipe refused naming it */
    f.job.warmup_pinned = 1;
    f.job.warmup = 0;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: pinned to 0, the standard schedule", rc == 0 && p.warmup_extra == 0);
    double pinned0 = rc == 0 ? p.step_s : 0;
    if (rc == 0)
        plan_free(&p);
    f.job.warmup = 2;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: pinned to 2, kept", rc == 0 && p.warmup_extra == 2);
    if (rc == 0)
        plan_free(&p);
    f.job.warmup_pinned = 0;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: the chosen depth beats the standard schedule's plan",
          rc == 0 && pinned0 > p.step_s * (1 + 0.005));
    if (rc == 0)
        plan_free(&p);
    f.job.warmup_pinned = 1;
    f.job.warmup = -1;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: a negative depth refused naming it", rc != 0 && strstr(e.msg, "warm-up depth -1"));
    if (rc == 0)
        plan_free(&p);
    f.job.warmup = 1;
    f.job.schedule = SCHED_GPIPE;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: a depth with GPipe refused naming the schedule",
          rc != 0 && strstr(e.msg, "gpipe, which has no warm-up"));
    if (rc == 0)
        plan_free(&p);
    f.job.schedule = SCHED_1F1B;
    f.job.warmup_pinned = 0;

    /* the naive policy and GPipe keep the standard order */
    f.job.policy = POLICY_NAIVE;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: naive keeps the standard warm-up", rc == 0 && p.warmup_extra == 0);
    if (rc == 0)
        plan_free(&p);
    f.job.policy = POLICY_HOLMES;
    f.job.schedule = SCHED_GPIPE;
    rc = plan_make(f.cl.workers, f.cl.n_workers, &f.job, &f.cl.links, &p, &e);
    CHECK("warm-up: GPipe has none", rc == 0 && p.warmup_extra == 0);
    if (rc == 0)
        plan_free(&p);
    unload(&f);
}

/* GPUs: a deeper warm-up only where their memory is known (the 8-node three-fabric fixture,
 * gpu_memory_gb 80, slow links between fabrics) */
static void test_gpu_memory(void)
{
    struct cluster cl;
    struct tj_job tj;
    herr e = {0};
    if (cluster_load("tests/fixtures/planner/three-fabrics-8.yaml", &cl, &e) ||
        planner_load_job("tests/fixtures/planner/three-fabrics-8-job.yaml", &tj, &e)) {
        TEST_FAIL("warm-up: GPU fixtures load", "%s", e.msg);
        return;
    }
    struct plan_job job;
    planner_job_from_spec(&tj.spec, &job);
    struct plan p;
    int rc = planner_apply_spec(&tj.spec, cl.workers, cl.n_workers, &cl.links, &e) ||
             plan_make(cl.workers, cl.n_workers, &job, &cl.links, &p, &e);
    CHECK("warm-up: GPUs with known memory get a deeper warm-up", rc == 0 && p.warmup_extra > 0);
    if (rc == 0) {
        int fits = 1;
        for (int s = 0; s < p.n_stages; s++)
            fits &= p.stages[s].memory_gb <= 80 * 0.9;
        printf("  # warm-up +%d, stage 0 %.1f GB\n", p.warmup_extra, p.stages[0].memory_gb);
        CHECK("warm-up: and every stage fits in 90 % of their 80 GB", fits);
        plan_free(&p);
    }
    for (int w = 0; w < cl.n_workers; w++)
        cl.workers[w].memory_gb = 0;
    rc = plan_make(cl.workers, cl.n_workers, &job, &cl.links, &p, &e);
    CHECK("warm-up: GPUs whose memory is not known keep the standard one",
          rc == 0 && p.warmup_extra == 0);
    if (rc == 0)
        plan_free(&p);
    cluster_free(&cl);
    tj_job_free(&tj);
}

int main(void)
{
    test_chosen();
    test_gpu_memory();
    TEST_MAIN_END();
}
