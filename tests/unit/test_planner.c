/* Planner: cost-model formulas and schedule simulation, plan properties (every device once,
 * layers sum, no empty stage, fabric-homogeneous groups, determinism), transports, the JSON
 * document, the cluster file and bad input. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "cluster.h"
#include "cost_model.h"
#include "planner.h"
#include "planner_job.h"
#include "test.h"

static void worker(struct plan_worker *w, const char *name, int gpus, double tflops,
                   enum nic_class cls, const char *fabric, double gbps)
{
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->gpus = gpus;
    w->tflops = tflops;
    w->nic.cls = cls;
    w->nic.gbps = gbps;
    w->nic.gid_index = -1;
    snprintf(w->nic.fabric, sizeof w->nic.fabric, "%s", fabric);
}

static void small_job(struct plan_job *j, int layers, int P, int D)
{
    plan_job_init(j);
    j->model = (struct tj_model){.layers = layers, .hidden = 512, .heads = 8, .vocab = 8000, .seq_len = 256};
    j->pipeline = P;
    j->data = D;
    j->micro_batches = 8;
    j->micro_batch_size = 2;
}

/* ---- cost model ---- */

static void test_formulas(void)
{
    struct cost_job j = {.model = {.layers = 2, .hidden = 64, .heads = 4, .vocab = 100, .seq_len = 16},
                         .tensor = 1, .data = 1, .micro_batches = 4, .micro_batch_size = 2,
                         .elem_bytes = 2};
    CHECK_NEAR("layer flops 24bsh^2+4bs^2h", cost_layer_fwd_flops(&j),
               24.0 * 2 * 16 * 64 * 64 + 4.0 * 2 * 16 * 16 * 64, 1e-12);
    CHECK_NEAR("head flops 2bshV", cost_head_fwd_flops(&j), 2.0 * 2 * 16 * 64 * 100, 1e-12);
    CHECK_NEAR("layer params 12h^2+13h", cost_layer_params(&j), 12.0 * 64 * 64 + 13 * 64, 1e-12);
    CHECK_NEAR("embedding params (V+T)h", cost_embedding_params(&j), (100.0 + 16) * 64, 1e-12);
    CHECK_NEAR("activation bytes bsh*elem", cost_activation_bytes(&j), 2.0 * 16 * 64 * 2, 1e-12);
    struct cost_link k = cost_link_make(100, 5, 4);
    CHECK_NEAR("link bytes/s shared by flows", k.bw, 100e9 / 8 / 4, 1e-12);
    CHECK_NEAR("link latency seconds", k.lat, 5e-6, 1e-12);
}

/* Equal stages, no transfers, no data parallelism: both schedules take (m + P - 1)(f + b). */
static void test_schedule_closed_form(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.compute_efficiency = 1;
    l.memory_gbps = 1e12; /* optimizer ~ 0 */
    struct cost_job j = {.model = {.layers = 8, .hidden = 256, .heads = 4, .vocab = 1, .seq_len = 64},
                         .tensor = 1, .data = 1, .micro_batches = 6, .micro_batch_size = 1,
                         .elem_bytes = 2};
    struct cost_stage st[4];
    memset(st, 0, sizeof st);
    for (int s = 0; s < 4; s++) {
        st[s].layers = 2;
        st[s].tflops = 1;
        st[s].dp.bw = INFINITY;
        st[s].dp.lat = 0;
        st[s].next.bw = INFINITY;
        st[s].next.lat = 0;
    }
    struct cost_link tie = {INFINITY, 0};
    struct cost_sim sim;
    herr e;
    CHECK_INT("sim init", cost_sim_init(&sim, 4, 6, &e), 0);
    double f = 2 * cost_layer_fwd_flops(&j) / 1e12, head = cost_head_fwd_flops(&j) / 1e12;
    /* the norm's all-reduce on the pipeline group (TCP) pays 2 (P - 1) latencies a step:
     * test_norm_latency; none here */
    l.tcp_latency_us = 0;
    /* the last stage carries the (tiny, V=1) head: account for it exactly */
    struct cost_breakdown br;
    for (int sch = 0; sch < 2; sch++) {
        j.schedule = sch ? SCHED_GPIPE : SCHED_1F1B;
        double t = cost_simulate(&j, &l, st, 4, &tie, &sim, &br);
        double want = (6 + 4 - 1) * 3 * f + 6 * 3 * head;
        CHECK_NEAR(sch ? "gpipe (m+P-1)(f+b)" : "1f1b (m+P-1)(f+b)", t, want, 1e-6);
        CHECK_NEAR("breakdown sums to total",
                   br.compute + br.tp_comm + br.pp_comm + br.bubble + br.dp_comm + br.optimizer,
                   br.total, 1e-9);
        CHECK_NEAR("bubble (P-1)(f+b)", br.bubble, 3 * 3 * f, 1e-3);
    }
    /* one stage: no bubble, m (f + b) */
    j.micro_batches = 3;
    double t1 = cost_simulate(&j, &l, st, 1, NULL, &sim, &br);
    struct cost_stage_terms terms;
    cost_stage_terms(&j, &l, &st[0], 1, 1, NULL, &terms);
    CHECK_NEAR("single stage m(f+b)+optimizer", t1,
               3 * (terms.fwd + terms.bwd) + terms.optimizer + terms.param_copies, 1e-9);
    /* the stage's own memory bandwidth prices its optimizer (0: the links') */
    struct cost_stage_terms own;
    st[0].memory_gbps = 1e12 / 1e3;
    cost_stage_terms(&j, &l, &st[0], 1, 1, NULL, &own);
    st[0].memory_gbps = 0;
    CHECK_NEAR("a stage's memory bandwidth prices its optimizer", own.optimizer,
               1e3 * terms.optimizer, 1e-12 + 1e-9 * own.optimizer);
    /* a slow link adds its transfers: 2 stages, m = 1: f0 + x + f1 + b1 + x + b0 */
    st[0].next.bw = cost_activation_bytes(&j) / 0.5; /* 0.5 s per transfer */
    j.micro_batches = 1;
    double t2 = cost_simulate(&j, &l, st, 2, &tie, &sim, &br);
    cost_stage_terms(&j, &l, &st[0], 1, 0, &tie, &terms);
    double a = terms.fwd + terms.bwd;
    cost_stage_terms(&j, &l, &st[1], 0, 1, &tie, &terms);
    CHECK_NEAR("transfers on the critical path", t2, a + terms.fwd + terms.bwd + 1.0, 1e-6);
    CHECK_NEAR("pp_comm is the transfer time", br.pp_comm, 1.0, 1e-6);
    /* data parallel: reduce-scatter + all-gather; with overlap, all but one block's share hides
     * behind the other blocks' backward (reduce-scatter) and forward (all-gather) */
    st[0].dp = cost_link_make(8, 0, 1); /* 1 GB/s */
    st[0].next.bw = INFINITY;
    j.data = 4;
    l.overlap = 0;
    cost_stage_terms(&j, &l, &st[0], 0, 0, NULL, &terms);
    /* fp32 gradients and (without paramGatherDtype bf16) fp32 parameters on the wire, whatever
     * the engine computes in (bf16 here) */
    double grad = 2 * cost_layer_params(&j) * 4;
    CHECK_NEAR("dp exposed = 2 x 3/4 x fp32 bytes / bw", terms.dp_exposed, 2 * 0.75 * grad / 1e9,
               1e-9);
    j.gather_elem_bytes = 2; /* paramGatherDtype bf16: the all-gather halves */
    cost_stage_terms(&j, &l, &st[0], 0, 0, NULL, &terms);
    CHECK_NEAR("bf16 gather: reduce-scatter fp32, all-gather bf16", terms.dp_exposed,
               1.5 * 0.75 * grad / 1e9, 1e-9);
    j.gather_elem_bytes = 0;
    l.overlap = 1;
    cost_stage_terms(&j, &l, &st[0], 0, 0, NULL, &terms);
    double rs = 0.75 * grad / 1e9;
    /* 2 blocks: the first block's reduce-scatter waits for nothing after the backward... */
    double want = fmax(rs / 2, rs - terms.bwd / 2) + fmax(rs / 2, rs - terms.fwd / 2);
    CHECK_NEAR("overlap hides all but one block's share", terms.dp_exposed, want, 1e-9);
    CHECK_NEAR("reduce-scatter part", terms.rs_exposed, fmax(rs / 2, rs - terms.bwd / 2), 1e-9);
    CHECK_NEAR("all-gather part", terms.ag_exposed, fmax(rs / 2, rs - terms.fwd / 2), 1e-9);
    /* a slow ring: both mostly exposed, the other block's compute hides its share */
    st[0].dp = cost_link_make(0.008, 0, 1);
    cost_stage_terms(&j, &l, &st[0], 0, 0, NULL, &terms);
    rs = 0.75 * grad / 1e6;
    CHECK("slow ring: reduce-scatter longer than a backward", rs > terms.bwd);
    CHECK_NEAR("slow ring exposed", terms.dp_exposed, 2 * rs - terms.bwd / 2 - terms.fwd / 2, 1e-9);
    /* the step is a cycle between gradient-norm all-reduces: one stage of a data-parallel
     * group starts its forward as its parameters arrive and ends with the reduce-scatter */
    j.micro_batches = 3;
    double t3 = cost_simulate(&j, &l, st, 1, NULL, &sim, &br);
    cost_stage_terms(&j, &l, &st[0], 1, 1, NULL, &terms);
    CHECK_NEAR("one stage: optimizer + gather + m(f+b) + reduce-scatter", t3,
               terms.optimizer + terms.param_copies + terms.ag_exposed +
                   3 * (terms.fwd + terms.bwd) + terms.rs_exposed,
               1e-9);
    CHECK_NEAR("one stage: breakdown sums to total",
               br.compute + br.tp_comm + br.pp_comm + br.bubble + br.dp_comm + br.optimizer,
               br.total, 1e-9);
    CHECK_NEAR("one stage: dp_comm is gather + reduce-scatter", br.dp_comm,
               terms.ag_exposed + terms.rs_exposed, 1e-9);
    /* the embedding tie: the updated shard must reach the last stage's head, and the head's
     * gradient shard the first stage before the norm; on a tie link this slow both transfers are
     * on the critical path, so a slower one adds its extra time twice (vocab 1: a shard is
     * 128 padded rows x hidden x 4 B / d: fp32 gradients) */
    st[0].dp = cost_link_make(8, 0, 1);
    st[1] = st[0];
    struct cost_link slow_tie = cost_link_make(8e-6, 0, 1), slower_tie = cost_link_make(4e-6, 0, 1);
    double t4 = cost_simulate(&j, &l, st, 2, &slow_tie, &sim, &br);
    double t5 = cost_simulate(&j, &l, st, 2, &slower_tie, &sim, &br);
    double tie_bytes = 128.0 * 256 * 4 / 4; /* the 1/d shard of the padded vocabulary's 128 rows, fp32 */
    CHECK_NEAR("tie on the critical path: two transfers of the shard", t5 - t4,
               2 * (tie_bytes / 500.0 - tie_bytes / 1000.0), 1e-6);
    CHECK_INT("tie critical: the first stage", br.critical_stage, 0);
    cost_sim_free(&sim);
}

static void test_links_json(void)
{
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    cJSON *j = cJSON_Parse("{\"tcp_gbps\": 5, \"overlap\": 0.5}");
    CHECK_INT("links override ok", cost_links_apply_json(&l, j, "links", &e), 0);
    CHECK_NEAR("tcp_gbps overridden", l.tcp_gbps, 5, 0);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"tcp_gbps\": 0}");
    CHECK_INT("zero bandwidth rejected", cost_links_apply_json(&l, j, "links", &e), -1);
    CHECK_STR("zero bandwidth message", e.msg, "links.tcp_gbps: must be a number in (0, 1e+06]");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"warp_speed\": 9}");
    CHECK_INT("unknown constant rejected", cost_links_apply_json(&l, j, "links", &e), -1);
    CHECK("unknown constant named", strstr(e.msg, "links.warp_speed: unknown") != NULL);
    cJSON_Delete(j);
}

/* ---- shared inter-fabric gateway (links.gateway_gbps) ---- */

/* The bench's clusters: IB, RoCE, IB, X (X = RoCE or Ethernet) listed interleaved, CPU
 * workers, pipeline 2 x data 2; overlap and TCP latency 0 so the data-parallel term is
 * exactly the bytes over the link's bandwidth. */
/* The 4-worker clusters of test_gateway (`tensor` GPUs each, a tensor group of that size); `m`
 * micro-batches (1: gpipe, 2: 1f1b), what travels between the stages and what the
 * data-parallel rings all-gather as given. */
static int gateway_plan_tp(enum policy pol, int three, double gateway, int m, int tensor,
                           enum dtype pipeline_dtype, enum dtype param_gather_dtype,
                           struct plan *p)
{
    struct plan_worker w[4];
    int g = tensor > 1 ? tensor : 0;
    worker(&w[0], "w0", g, 0.05, NIC_INFINIBAND, "ib-a", 0.4);
    worker(&w[1], "w1", g, 0.05, NIC_ROCE, "roce-b", 0.2);
    worker(&w[2], "w2", g, 0.05, NIC_INFINIBAND, "ib-a", 0.4);
    if (three)
        worker(&w[3], "w3", g, 0.05, NIC_ETHERNET, "eth-c", 0.05);
    else
        worker(&w[3], "w3", g, 0.05, NIC_ROCE, "roce-b", 0.2);
    struct plan_job job;
    plan_job_init(&job);
    /* vocab 8: the embedding tie (first <-> last stage, also on the gateway) is small: the
     * checks below allow it 1 % */
    job.model = (struct tj_model){.layers = 4, .hidden = 192, .heads = 4, .vocab = 8, .seq_len = 32};
    job.pipeline = 2;
    job.data = 2;
    job.tensor = tensor;
    job.micro_batches = m;
    job.schedule = m < 2 ? SCHED_GPIPE : SCHED_1F1B;
    job.micro_batch_size = 4;
    job.precision = DTYPE_FP32;
    job.pipeline_dtype = pipeline_dtype;
    job.param_gather_dtype = param_gather_dtype;
    job.policy = pol;
    job.emulated = 1; /* bench-hetero's CPU workers on emulated NICs: priced as their class */
    static const int pin[2] = {2, 2};
    job.pinned = pin;
    job.n_pinned = 2;
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 0.05;
    l.tcp_efficiency = 1;
    l.tcp_latency_us = 0;
    l.overlap = 0;
    l.gateway_gbps = gateway;
    herr e = {0};
    memset(p, 0, sizeof *p);
    int rc = plan_make(w, 4, &job, &l, p, &e);
    if (rc)
        TEST_FAIL("gateway plan", "%s", e.msg);
    return rc;
}

static int gateway_plan_with(enum policy pol, int three, double gateway, int m,
                             enum dtype pipeline_dtype, enum dtype param_gather_dtype,
                             struct plan *p)
{
    return gateway_plan_tp(pol, three, gateway, m, 1, pipeline_dtype, param_gather_dtype, p);
}

static int gateway_plan(enum policy pol, int three, double gateway, struct plan *p)
{
    return gateway_plan_with(pol, three, gateway, 2, DTYPE_FP32, DTYPE_FP32, p);
}

/* parallelism.pipelineDtype bf16: the activations between stages weigh half as much. */
static void test_pipeline_dtype(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.compute_efficiency = 1;
    l.memory_gbps = 1e12;
    struct cost_job j = {.model = {.layers = 4, .hidden = 192, .heads = 4, .vocab = 1, .seq_len = 32},
                         .tensor = 1, .data = 1, .micro_batches = 1, .micro_batch_size = 4,
                         .elem_bytes = 4, .schedule = SCHED_GPIPE};
    CHECK_NEAR("fp32 activation: 4 bytes per value", cost_activation_bytes(&j), 4 * 32 * 192 * 4.0,
               1e-9);
    struct cost_stage st[2];
    for (int s = 0; s < 2; s++)
        st[s] = (struct cost_stage){.layers = 2, .tflops = 1, .dp = {INFINITY, 0},
                                    .next = {INFINITY, 0}};
    st[0].next.bw = cost_activation_bytes(&j) / 0.5; /* fp32: 0.5 s per transfer */
    struct cost_link tie = {INFINITY, 0};
    struct cost_sim sim;
    struct cost_breakdown br;
    herr e;
    CHECK_INT("sim init", cost_sim_init(&sim, 2, 1, &e), 0);
    /* one micro-batch: f0 + x + f1 + b1 + x + b0, both transfers on the critical path */
    double t32 = cost_simulate(&j, &l, st, 2, &tie, &sim, &br);
    CHECK_NEAR("fp32 wire: two transfers of 0.5 s", br.pp_comm, 1.0, 1e-6);
    j.act_elem_bytes = 2;
    CHECK_NEAR("bf16 wire: 2 bytes per value", cost_activation_bytes(&j), 4 * 32 * 192 * 2.0, 1e-9);
    double t16 = cost_simulate(&j, &l, st, 2, &tie, &sim, &br);
    CHECK_NEAR("bf16 wire: two transfers of 0.25 s", br.pp_comm, 0.5, 1e-6);
    CHECK_NEAR("bf16 wire: the step is 0.5 s shorter", t32 - t16, 0.5, 1e-6);
    cost_sim_free(&sim);
    /* through the planner: job.pipeline_dtype reaches the cost model; the rings are the same */
    struct plan a, b;
    if (!gateway_plan_with(POLICY_HOLMES, 0, 0.05, 1, DTYPE_FP32, DTYPE_FP32, &a) &&
        !gateway_plan_with(POLICY_HOLMES, 0, 0.05, 1, DTYPE_BF16, DTYPE_FP32, &b)) {
        CHECK("planner, bf16 wire: a shorter step", b.step_s < a.step_s);
        for (int s = 0; s < 2; s++)
            CHECK_NEAR("planner, bf16 wire: the rings are untouched", b.stages[s].dp_s,
                       a.stages[s].dp_s, 1e-12);
    }
    plan_free(&a);
    plan_free(&b);
}

/* parallelism.paramGatherDtype bf16: the data-parallel parameter all-gather weighs half as
 * much; the gradient reduce-scatter and the activations between stages do not change. */
static void test_param_gather_dtype(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.compute_efficiency = 1;
    l.memory_gbps = 1e12;
    l.overlap = 0; /* nothing hides the ring */
    struct cost_job j = {.model = {.layers = 4, .hidden = 192, .heads = 4, .vocab = 1, .seq_len = 32},
                         .tensor = 1, .data = 2, .micro_batches = 1, .micro_batch_size = 4,
                         .elem_bytes = 4, .schedule = SCHED_GPIPE};
    struct cost_stage st = {.layers = 2, .tflops = 1, .mem_bytes = INFINITY,
                            .dp = cost_link_make(8, 0, 1), /* 1 GB/s */
                            .next = {INFINITY, 0}};
    /* one stage, first and last: blocks, embeddings, final norm */
    /* (the vocabulary of 1 padded to 128 rows, as the engine holds it) */
    double params = 2 * cost_layer_params(&j) + (128.0 + 32) * 192 + 2.0 * 192;
    struct cost_stage_terms t32, t16;
    cost_stage_terms(&j, &l, &st, 1, 1, NULL, &t32);
    CHECK_NEAR("fp32 all-gather: 1/2 x 4 bytes per parameter / bw", t32.ag_exposed,
               0.5 * params * 4 / 1e9, 1e-12);
    CHECK_NEAR("fp32 all-gather = reduce-scatter", t32.ag_exposed, t32.rs_exposed, 1e-15);
    j.gather_elem_bytes = 4;
    cost_stage_terms(&j, &l, &st, 1, 1, NULL, &t16);
    CHECK_NEAR("gather_elem_bytes 4 = elem_bytes", t16.ag_exposed, t32.ag_exposed, 1e-15);
    double act32 = cost_activation_bytes(&j);
    j.gather_elem_bytes = 2;
    cost_stage_terms(&j, &l, &st, 1, 1, NULL, &t16);
    CHECK_NEAR("bf16 all-gather: 1/2 x 2 bytes per parameter / bw", t16.ag_exposed,
               0.5 * params * 2 / 1e9, 1e-12);
    CHECK_NEAR("bf16 all-gather: exactly half", t16.ag_exposed, t32.ag_exposed / 2, 1e-15);
    CHECK_NEAR("bf16 all-gather: the reduce-scatter stays fp32", t16.rs_exposed, t32.rs_exposed,
               1e-15);
    CHECK_NEAR("bf16 all-gather: dp total = ag + rs", t16.dp_exposed,
               t16.ag_exposed + t16.rs_exposed, 1e-15);
    CHECK_NEAR("bf16 all-gather: compute untouched", t16.fwd + t16.bwd, t32.fwd + t32.bwd, 1e-15);
    CHECK_NEAR("bf16 all-gather: activations untouched", cost_activation_bytes(&j), act32, 1e-9);
    /* one stage: the step starts when the parameters have arrived, so it is shorter by what
     * the all-gather saves */
    struct cost_sim sim;
    struct cost_breakdown br32, br16;
    herr e;
    CHECK_INT("sim init", cost_sim_init(&sim, 1, 1, &e), 0);
    j.gather_elem_bytes = 0;
    double s32 = cost_simulate(&j, &l, &st, 1, NULL, &sim, &br32);
    j.gather_elem_bytes = 2;
    double s16 = cost_simulate(&j, &l, &st, 1, NULL, &sim, &br16);
    CHECK_NEAR("bf16 all-gather: the step is shorter by half the all-gather", s32 - s16,
               t32.ag_exposed / 2, 1e-12);
    CHECK_NEAR("bf16 all-gather: dp_comm likewise", br32.dp_comm - br16.dp_comm,
               t32.ag_exposed / 2, 1e-12);
    cost_sim_free(&sim);
    /* through the planner: job.param_gather_dtype reaches the cost model. fp32: ag = rs and
     * the tie (vocab 8) is below rs, so each ring's exposed time 2 rs becomes 1.5 rs (up to
     * the rings' latency, one a bucket, which does not halve); the placement and the stages' compute stay.
     * (The breakdown's pp_comm may change: a stage that starts sooner no longer hides the
     * activation transfer it used to wait for.) */
    struct plan a, b;
    if (!gateway_plan_with(POLICY_HOLMES, 0, 0.05, 1, DTYPE_FP32, DTYPE_FP32, &a) &&
        !gateway_plan_with(POLICY_HOLMES, 0, 0.05, 1, DTYPE_FP32, DTYPE_BF16, &b)) {
        CHECK("planner, bf16 all-gather: a shorter step", b.step_s < a.step_s);
        for (int s = 0; s < 2; s++) {
            CHECK_NEAR("planner, bf16 all-gather: each ring's exposed time x 3/4",
                       b.stages[s].dp_s, 0.75 * a.stages[s].dp_s, 5e-4);
            CHECK_STR("planner, bf16 all-gather: same placement", b.stages[s].fabric,
                      a.stages[s].fabric);
            CHECK_NEAR("planner, bf16 all-gather: same compute",
                       b.stages[s].fwd_s + b.stages[s].bwd_s,
                       a.stages[s].fwd_s + a.stages[s].bwd_s, 1e-15);
        }
    }
    plan_free(&a);
    plan_free(&b);
}

static void test_gateway(void)
{
    struct plan a, b;
    /* naive, 2 fabrics: both stages' rings cross (IB <-> RoCE) at once: 2 flows enter each
     * fabric, each gets half the gateway, so the data-parallel term doubles. */
    if (!gateway_plan(POLICY_NAIVE, 0, 0, &a) && !gateway_plan(POLICY_NAIVE, 0, 0.05, &b)) {
        for (int s = 0; s < 2; s++)
            CHECK_NEAR("naive: two crossing rings share the gateway (dp term x2)",
                       b.stages[s].dp_s, 2 * a.stages[s].dp_s, 0.01);
        CHECK("naive: slower with a shared gateway", b.step_s > a.step_s);
    }
    plan_free(&a);
    plan_free(&b);
    /* naive, tensor 2: each worker's 2 ranks have a ring each, so 4 rings cross into each
     * fabric at once (2 stages x 2 tensor ranks): a quarter of the gateway each, where without
     * it each has half its NIC (tcp_gbps = gateway): the data-parallel term doubles again (it
     * did not when the gateway counted workers, not ranks: bench-hetero's 2fab-naive-t2 ran 34 %
     * slower than priced) */
    if (!gateway_plan_tp(POLICY_NAIVE, 0, 0, 2, 2, DTYPE_FP32, DTYPE_FP32, &a) &&
        !gateway_plan_tp(POLICY_NAIVE, 0, 0.05, 2, 2, DTYPE_FP32, DTYPE_FP32, &b)) {
        for (int s = 0; s < 2; s++)
            CHECK_NEAR("naive, tensor 2: four crossing rings share the gateway (dp term x2)",
                       b.stages[s].dp_s, 2 * a.stages[s].dp_s, 0.01);
    }
    plan_free(&a);
    plan_free(&b);
    /* holmes, 2 fabrics: the rings stay inside the fabrics, untouched by the gateway; the
     * stage boundary's two activation flows enter one fabric together and share it. */
    if (!gateway_plan(POLICY_HOLMES, 0, 0, &a) && !gateway_plan(POLICY_HOLMES, 0, 0.05, &b)) {
        for (int s = 0; s < 2; s++)
            CHECK_NEAR("holmes: rings inside fabrics ignore the gateway", b.stages[s].dp_s,
                       a.stages[s].dp_s, 0.01);
        CHECK("holmes: the boundary's flows share it", b.step_s > a.step_s);
    }
    plan_free(&a);
    plan_free(&b);
    /* holmes, 3 fabrics: one ring crosses (RoCE <-> Ethernet), alone on both gateways: the
     * same link as without sharing. */
    if (!gateway_plan(POLICY_HOLMES, 1, 0, &a) && !gateway_plan(POLICY_HOLMES, 1, 0.05, &b)) {
        CHECK("3 fabrics: one ring crosses", b.n_socket_groups == 1);
        for (int s = 0; s < 2; s++)
            CHECK_NEAR("3 fabrics: a lone crossing ring keeps the whole gateway", b.stages[s].dp_s,
                       a.stages[s].dp_s, 0.01);
    }
    plan_free(&a);
    plan_free(&b);
    /* naive, 3 fabrics: rings IB<->RoCE and IB<->Ethernet: 2 flows enter IB, so each ring's
     * IB-bound hop gets half: the dp term doubles again. */
    if (!gateway_plan(POLICY_NAIVE, 1, 0, &a) && !gateway_plan(POLICY_NAIVE, 1, 0.05, &b))
        CHECK_NEAR("3 fabrics naive: two flows into IB share it", b.breakdown.dp_comm,
                   2 * a.breakdown.dp_comm, 0.01);
    plan_free(&a);
    plan_free(&b);
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    cJSON *j = cJSON_Parse("{\"gateway_gbps\": -1}");
    CHECK_INT("negative gateway rejected", cost_links_apply_json(&l, j, "links", &e), -1);
    CHECK_STR("negative gateway message", e.msg, "links.gateway_gbps: must be a number in [0, 1e+06]");
    cJSON_Delete(j);
}

/* ---- shared cores (links.shared_cores): processor sharing in the schedule simulation ---- */

static int shared_pinned;  /* links.pinned_cores for shared_step */
static int shared_layers = 4;

/* These cases want the transfers inside one node negligible beside compute: loopback priced as
 * NVLink (CPU workers' loopback TCP is links.loopback_gbps, 10 Gb/s by default) */
static void shared_fast_loopback(struct cost_links *l)
{
    l->loopback_gbps = l->intra_node_gbps;
    l->loopback_latency_us = l->intra_node_latency_us;
}

static double shared_step(int P, int D, double cores, int same_node, struct cost_breakdown *br)
{
    struct plan_worker w[4];
    for (int i = 0; i < P * D; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 0, 0.1, NIC_INFINIBAND, "ib-a", 100);
        if (same_node)
            snprintf(w[i].node, sizeof w[i].node, "box");
    }
    struct plan_job job;
    plan_job_init(&job);
    job.model = (struct tj_model){.layers = shared_layers, .hidden = 192, .heads = 4, .vocab = 256, .seq_len = 32};
    job.pipeline = P;
    job.data = D;
    job.micro_batches = 4;
    job.micro_batch_size = 4;
    job.precision = DTYPE_FP32;
    struct cost_links l;
    cost_links_default(&l);
    l.shared_cores = cores;
    l.pinned_cores = shared_pinned;
    shared_fast_loopback(&l);
    struct plan p;
    herr e = {0};
    if (plan_make(w, P * D, &job, &l, &p, &e)) {
        TEST_FAIL("shared-cores plan", "%s", e.msg);
        return -1;
    }
    double step = p.step_s;
    if (br)
        *br = p.breakdown;
    plan_free(&p);
    return step;
}

static void test_shared_cores(void)
{
    struct cost_breakdown a, b;
    /* Enough cores for every device: the same as no sharing. */
    CHECK_NEAR("shared_cores >= devices changes nothing", shared_step(2, 2, 4, 0, NULL),
               shared_step(2, 2, 0, 0, NULL), 1e-9);
    /* One stage, 2 replicas on 1 core: each computes at half speed all along, so the step
     * grows by exactly its compute (the data-parallel term does not use the core). */
    double s0 = shared_step(1, 2, 0, 0, &a), s1 = shared_step(1, 2, 1, 0, &b);
    CHECK_NEAR("1 stage, 2 devices on 1 core: compute counted twice", s1 - s0, a.compute, 1e-9);
    /* Two stages, one replica, one core, every transfer inside one node (negligible): the core
     * is never idle, so the schedule takes exactly the total work of both stages (no bubble). */
    double work = 0;
    {
        /* total work = sum over stages of m (fwd + bwd), from the plan's stage times */
        struct plan_worker w[2];
        worker(&w[0], "w0", 0, 0.1, NIC_INFINIBAND, "ib-a", 100);
        worker(&w[1], "w1", 0, 0.1, NIC_INFINIBAND, "ib-a", 100);
        snprintf(w[0].node, sizeof w[0].node, "box");
        snprintf(w[1].node, sizeof w[1].node, "box");
        struct plan_job job;
        plan_job_init(&job);
        job.model = (struct tj_model){.layers = 4, .hidden = 192, .heads = 4, .vocab = 256, .seq_len = 32};
        job.pipeline = 2;
        job.data = 1;
        job.micro_batches = 4;
        job.micro_batch_size = 4;
        job.precision = DTYPE_FP32;
        struct cost_links l;
        cost_links_default(&l);
        l.shared_cores = 1;
        shared_fast_loopback(&l);
        struct plan p;
        herr e = {0};
        if (!plan_make(w, 2, &job, &l, &p, &e)) {
            for (int s = 0; s < 2; s++)
                work += job.micro_batches * (p.stages[s].fwd_s + p.stages[s].bwd_s);
            CHECK_NEAR("2 stages on 1 core: the schedule is the total work (core never idle)",
                       p.step_s - p.breakdown.dp_comm - p.breakdown.optimizer, work, 1e-3);
            CHECK("2 stages on 1 core: slower than on 2 cores",
                  p.step_s > shared_step(2, 1, 0, 1, NULL));
            plan_free(&p);
        } else {
            TEST_FAIL("shared-cores plan 2x1", "%s", e.msg);
        }
    }
    herr e = {0};
    struct cost_links l;
    cost_links_default(&l);
    cJSON *j = cJSON_Parse("{\"shared_cores\": -2}");
    CHECK_INT("negative shared_cores rejected", cost_links_apply_json(&l, j, "links", &e), -1);
    CHECK_STR("negative shared_cores message", e.msg,
              "links.shared_cores: must be a number in [0, 1e+06]");
    cJSON_Delete(j);
}

/* links.pinned_cores: each rank on the core cpu_spread gives it, as the local workers pin. */
static void test_pinned_cores(void)
{
    /* Enough cores: every rank has its own, as without sharing. */
    shared_pinned = 1;
    double p4 = shared_step(2, 2, 4, 0, NULL);
    shared_pinned = 0;
    CHECK_NEAR("pinned, cores >= ranks: as unshared", p4, shared_step(2, 2, 0, 0, NULL), 1e-9);
    /* One core: pinned or not, every running rank shares it. */
    double u1 = shared_step(2, 2, 1, 0, NULL);
    shared_pinned = 1;
    CHECK_NEAR("pinned on 1 core: as shared", shared_step(2, 2, 1, 0, NULL), u1, 1e-9);
    /* 3 stages of one layer on 2 cores: stages 0 and 2 are pinned to one core (cpu_spread keeps
     * neighbours apart), stage 1 has the other. When all three run, 0 and 2 go at half speed
     * while stage 1 runs alone; shared, each would go at 2/3. Pinning is slower. */
    shared_layers = 3;
    double pin3 = shared_step(3, 1, 2, 1, NULL);
    shared_pinned = 0;
    double sh3 = shared_step(3, 1, 2, 1, NULL);
    shared_layers = 4;
    CHECK("3 stages on 2 pinned cores: slower than the cores shared", pin3 > sh3 * 1.01);
    herr e = {0};
    struct cost_links l;
    cost_links_default(&l);
    cJSON *j = cJSON_Parse("{\"pinned_cores\": 0.5}");
    CHECK_INT("pinned_cores 0.5 rejected", cost_links_apply_json(&l, j, "links", &e), -1);
    CHECK_STR("pinned_cores message", e.msg, "links.pinned_cores: must be 0 or 1");
    cJSON_Delete(j);
    /* pinned to cores that are not given: refused, not silently ignored */
    cost_links_default(&l);
    l.pinned_cores = 1;
    CHECK_INT("pinned_cores without shared_cores refused", cost_links_check(&l, &e), -1);
    CHECK_STR("pinned_cores without shared_cores: message", e.msg,
              "links.pinned_cores: 1 needs links.shared_cores >= 1 (the cores the ranks are "
              "pinned to; got 0)");
    l.shared_cores = 2;
    CHECK_INT("pinned_cores with shared_cores 2 accepted", cost_links_check(&l, &e), 0);
}

/* ---- plans ---- */

/* 4 IB + 4 RoCE workers, listed interleaved. */
static int two_fabric_cluster(struct plan_worker *w, int gpus)
{
    char name[16];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "w%d", i);
        if (i % 2 == 0)
            worker(&w[i], name, gpus, 300, NIC_INFINIBAND, "ib-a", 200);
        else
            worker(&w[i], name, gpus, 300, NIC_ROCE, "roce-b", 100);
    }
    return 8;
}

static void check_properties(const char *label, const struct plan *p, const struct plan_job *job)
{
    char name[160];
    long dev = plan_devices(p->workers, p->n_workers);
    int ok = p->n_ranks == dev;
    /* every (worker, device) exactly once */
    int *seen = calloc((size_t)dev, sizeof(int));
    int *base = calloc((size_t)p->n_workers + 1, sizeof(int));
    for (int w = 0; w < p->n_workers; w++)
        base[w + 1] = base[w] + (p->workers[w].gpus > 0 ? p->workers[w].gpus : 1);
    for (int r = 0; r < p->n_ranks && ok; r++) {
        const struct plan_rank *rk = &p->ranks[r];
        int idx = base[rk->worker] + rk->local;
        if (idx < 0 || idx >= dev || seen[idx]++)
            ok = 0;
        if (plan_rank_of(p, rk->stage, rk->dp_rank, rk->tp_rank) != r)
            ok = 0;
    }
    snprintf(name, sizeof name, "%s: every device used exactly once", label);
    CHECK(name, ok);
    free(seen);
    free(base);
    int sum = 0, empty = 0, contiguous = 1;
    for (int s = 0; s < p->n_stages; s++) {
        int n = p->stages[s].last_layer - p->stages[s].first_layer;
        sum += n;
        empty += n < 1;
        if (s && p->stages[s].first_layer != p->stages[s - 1].last_layer)
            contiguous = 0;
    }
    snprintf(name, sizeof name, "%s: layers sum to the model's", label);
    CHECK_INT(name, sum, job->model.layers);
    snprintf(name, sizeof name, "%s: no empty stage, contiguous", label);
    CHECK(name, !empty && contiguous && p->stages[0].first_layer == 0);
    snprintf(name, sizeof name, "%s: tensor x pipeline x data = devices", label);
    CHECK_INT(name, (long)p->tensor * p->pipeline * p->data, dev);
    if (p->homogeneous_possible && p->policy == POLICY_HOLMES) {
        int homog = 1;
        for (int g = 0; g < p->n_groups; g++) {
            const struct plan_group *gr = &p->groups[g];
            if (gr->kind != GROUP_DP && gr->kind != GROUP_TP)
                continue;
            for (int i = 1; i < gr->n; i++)
                if (strcmp(p->workers[p->ranks[gr->members[i]].worker].nic.fabric,
                           p->workers[p->ranks[gr->members[0]].worker].nic.fabric))
                    homog = 0;
        }
        snprintf(name, sizeof name, "%s: dp and tp groups fabric-homogeneous", label);
        CHECK(name, homog);
    }
}

static char *plan_string(const struct plan *p)
{
    cJSON *j = plan_to_json(p);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return s;
}

static void test_two_fabrics(void)
{
    struct plan_worker w[8];
    int n = two_fabric_cluster(w, 1);
    struct plan_job job;
    small_job(&job, 12, 2, 4);
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 10;
    herr e = {0};
    struct plan p, q;
    int rc = plan_make(w, n, &job, &l, &p, &e);
    CHECK_INT("two fabrics: plan ok", rc, 0);
    if (rc) {
        printf("# %s\n", e.msg);
        return;
    }
    check_properties("two fabrics", &p, &job);
    CHECK("two fabrics: stage 0 on one fabric", !p.stages[0].mixed);
    CHECK("two fabrics: stages on different fabrics",
          strcmp(p.stages[0].fabric, p.stages[1].fabric) != 0);
    CHECK_INT("two fabrics: no dp group on TCP", p.n_socket_groups, 0);
    CHECK("two fabrics: naive slower", p.baseline_naive_s > p.step_s);
    CHECK("two fabrics: ethernet slower", p.baseline_ethernet_s > p.step_s);
    /* the IB stage (faster DP ring) gets at least as many layers as the RoCE one */
    int ib = strcmp(p.stages[0].fabric, "ib-a") == 0 ? 0 : 1;
    int lib = p.stages[ib].last_layer - p.stages[ib].first_layer;
    CHECK("two fabrics: layers from the cost model", lib >= 1 && lib <= 11);
    int dp_ib = 0, dp_roce = 0, pp_sock = 0, roce_gid = 1;
    for (int g = 0; g < p.n_groups; g++) {
        const struct plan_group *gr = &p.groups[g];
        if (gr->kind == GROUP_DP && gr->transport.kind == TRANSPORT_IB)
            dp_ib++;
        if (gr->kind == GROUP_DP && gr->transport.kind == TRANSPORT_ROCE) {
            dp_roce++;
            roce_gid &= gr->transport.gid_index == 3 && !strcmp(gr->transport.nccl_net, "IB");
        }
        if (gr->kind == GROUP_PP && gr->transport.kind == TRANSPORT_SOCKET &&
            !strcmp(gr->transport.nccl_net, "Socket") && strstr(gr->transport.reason, "span"))
            pp_sock++;
    }
    CHECK_INT("two fabrics: one ib dp group", dp_ib, 1);
    CHECK_INT("two fabrics: one roce dp group", dp_roce, 1);
    CHECK("two fabrics: roce uses GID index 3 over netName IB", roce_gid);
    CHECK_INT("two fabrics: pp groups cross on sockets", pp_sock, 4);
    /* determinism */
    CHECK_INT("two fabrics: second plan ok", plan_make(w, n, &job, &l, &q, &e), 0);
    char *a = plan_string(&p), *b = plan_string(&q);
    CHECK("deterministic JSON", a && b && !strcmp(a, b));
    free(a);
    free(b);
    plan_free(&q);
    /* the JSON document */
    cJSON *j = plan_to_json(&p);
    CHECK_STR("json policy", cJSON_GetStringValue(cJSON_GetObjectItem(j, "policy")), "holmes");
    CHECK_NEAR("json predicted_step_seconds",
               cJSON_GetNumberValue(cJSON_GetObjectItem(j, "predicted_step_seconds")), p.step_s,
               1e-12);
    cJSON *stages = cJSON_GetObjectItem(j, "stages");
    CHECK_INT("json stages", cJSON_GetArraySize(stages), 2);
    cJSON *s0 = cJSON_GetArrayItem(stages, 0);
    CHECK_INT("json stage layers [first,last)",
              cJSON_GetArraySize(cJSON_GetObjectItem(s0, "layers")), 2);
    CHECK_INT("json stage workers", cJSON_GetArraySize(cJSON_GetObjectItem(s0, "workers")), 4);
    CHECK_INT("json workers", cJSON_GetArraySize(cJSON_GetObjectItem(j, "workers")), 8);
    cJSON *g0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "groups"), 0);
    CHECK("json group kind+transport",
          cJSON_GetStringValue(cJSON_GetObjectItem(g0, "kind")) &&
          cJSON_GetStringValue(cJSON_GetObjectItem(g0, "transport")));
    cJSON *bl = cJSON_GetObjectItem(j, "baselines");
    CHECK_NEAR("json baselines naive", cJSON_GetNumberValue(cJSON_GetObjectItem(bl, "naive")),
               p.baseline_naive_s, 1e-12);
    CHECK("json breakdown compute",
          cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "breakdown"), "compute")));
    cJSON_Delete(j);
    plan_free(&p);

    /* naive: Megatron order over the workers as listed, equal layers */
    job.policy = POLICY_NAIVE;
    CHECK_INT("naive plan ok", plan_make(w, n, &job, &l, &p, &e), 0);
    check_properties("naive", &p, &job);
    CHECK("naive: rank r on the r-th worker", p.ranks[0].worker == 0 && p.ranks[5].worker == 5);
    CHECK_INT("naive: equal layers", p.stages[0].last_layer, 6);
    CHECK("naive: stage mixes fabrics", p.stages[0].mixed);
    CHECK("naive: step equals its baseline", fabs(p.step_s - p.baseline_naive_s) < 1e-12);
    CHECK("naive: dp groups on TCP", p.n_socket_groups > 0);
    plan_free(&p);
    job.policy = POLICY_ETHERNET;
    CHECK_INT("ethernet plan ok", plan_make(w, n, &job, &l, &p, &e), 0);
    int all_sock = 1;
    for (int g = 0; g < p.n_groups; g++)
        all_sock &= p.groups[g].transport.kind == TRANSPORT_SOCKET;
    CHECK("ethernet: every group on sockets", all_sock);
    plan_free(&p);
}

/* Multi-GPU workers with tensor parallelism: tp groups inside one worker, intra-node. */
static void test_tensor_and_auto(void)
{
    struct plan_worker w[8];
    int n = two_fabric_cluster(w, 4);
    struct plan_job job;
    small_job(&job, 16, 0, 0); /* auto */
    job.tensor = 4;
    job.micro_batches = 8;
    job.micro_batch_size = 4;
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    int rc = plan_make(w, n, &job, &l, &p, &e);
    CHECK_INT("auto: plan ok", rc, 0);
    if (rc) {
        printf("# %s\n", e.msg);
        return;
    }
    check_properties("auto tp4", &p, &job);
    CHECK("auto: several candidates shown", p.n_top >= 2);
    CHECK("auto: best candidate first", p.top[0].tokens_per_s >= p.top[1].tokens_per_s &&
          p.top[0].pipeline == p.pipeline && p.top[0].data == p.data);
    int tp_ok = 1;
    for (int g = 0; g < p.n_groups; g++) {
        const struct plan_group *gr = &p.groups[g];
        if (gr->kind != GROUP_TP)
            continue;
        for (int i = 0; i < gr->n; i++)
            tp_ok &= p.ranks[gr->members[i]].worker == p.ranks[gr->members[0]].worker &&
                     p.ranks[gr->members[i]].local == p.ranks[gr->members[0]].local + i;
        tp_ok &= gr->transport.intra_node;
    }
    CHECK("tp groups: consecutive devices of one worker", tp_ok);
    plan_free(&p);

    /* a pinned partition is kept */
    int pin[2] = {10, 6};
    job.pipeline = 2;
    job.data = 0;
    job.pinned = pin;
    job.n_pinned = 2;
    CHECK_INT("pin: plan ok", plan_make(w, n, &job, &l, &p, &e), 0);
    CHECK("pin: layers as pinned", p.n_stages == 2 && p.stages[0].last_layer == 10 &&
          p.stages[1].last_layer == 16);
    plan_free(&p);
}

/* Uneven fabrics (5 + 3 with data 2): one stage must mix; the plan names its groups. */
static void test_uneven(void)
{
    struct plan_worker w[8];
    char name[16];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "n%d", i);
        worker(&w[i], name, 0, 100, i < 5 ? NIC_INFINIBAND : NIC_ROCE, i < 5 ? "ib" : "roce",
               i < 5 ? 200 : 100);
    }
    struct plan_job job;
    small_job(&job, 8, 4, 2);
    job.emulated = 1; /* CPU workers (gpus 0) on RDMA fabrics: emulated NICs */
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    CHECK_INT("uneven: plan ok", plan_make(w, 8, &job, &l, &p, &e), 0);
    check_properties("uneven", &p, &job);
    CHECK_INT("uneven: homogeneous impossible", p.homogeneous_possible, 0);
    int mixed = 0;
    for (int s = 0; s < p.n_stages; s++)
        mixed += p.stages[s].mixed;
    CHECK_INT("uneven: exactly one mixed stage", mixed, 1);
    CHECK_INT("uneven: its dp group falls back to TCP", p.n_socket_groups, 1);
    int reason = 0;
    for (int g = 0; g < p.n_groups; g++)
        if (p.groups[g].kind == GROUP_DP && p.groups[g].transport.kind == TRANSPORT_SOCKET)
            reason = strstr(p.groups[g].transport.reason, "span fabrics") != NULL;
    CHECK("uneven: the plan says why", reason);
    plan_free(&p);
}

/* Pipeline and data auto: every shape priced runs the job's micro-batching, as the workers do
 * (trainer_config_from_spec takes microBatches and microBatchSize from the spec). Before
 * 2026-11-29 the search also tried every smaller micro-batch size dividing the replica's batch,
 * and as the cost model prices no loss of efficiency on smaller products it chose one: the
 * plan predicted a shape the workers never ran. */
static void test_auto_micro_batching(void)
{
    struct plan_worker w[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 0, 100, NIC_INFINIBAND, "ib", 200);
    }
    struct plan_job job;
    small_job(&job, 8, 0, 0);
    job.micro_batches = 4;
    job.micro_batch_size = 8;
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    CHECK_INT("auto micro-batching: plan ok", plan_make(w, 4, &job, &l, &p, &e), 0);
    CHECK_INT("auto micro-batching: the job's micro-batch size", p.micro_batch_size, 8);
    CHECK_INT("auto micro-batching: the job's micro-batches", p.micro_batches, 4);
    int same = p.n_top > 0;
    for (int i = 0; i < p.n_top; i++)
        same &= p.top[i].micro_batch_size == 8 && p.top[i].micro_batches == 4;
    CHECK("auto micro-batching: every candidate runs the job's", same);
    plan_free(&p);
}

/* CPU ranks on real NICs send over holmes' TCP transport (the CPU path has no RDMA), so their
 * groups are planned and priced as TCP; on emulated NICs (spec.emulation) they are shaped, and
 * priced, as their NICs' class; GPU ranks on the same NICs keep RDMA. */
static void test_cpu_ranks_tcp(void)
{
    struct cost_links l;
    cost_links_default(&l);
    struct plan p;
    herr e = {0};
    double step[3];
    int sockets[3], reason[3];
    for (int k = 0; k < 3; k++) { /* CPU real, CPU emulated, GPU */
        struct plan_worker w[4];
        for (int i = 0; i < 4; i++) {
            char name[16];
            snprintf(name, sizeof name, "c%d", i);
            worker(&w[i], name, k == 2 ? 1 : 0, 1, NIC_INFINIBAND, "ib", 100);
        }
        struct plan_job job;
        small_job(&job, 8, 2, 2);
        job.emulated = k == 1;
        if (plan_make(w, 4, &job, &l, &p, &e)) {
            TEST_FAIL("cpu ranks: plan", "%s", e.msg);
            return;
        }
        step[k] = p.step_s;
        sockets[k] = reason[k] = 0;
        for (int g = 0; g < p.n_groups; g++) {
            if (p.groups[g].n < 2 || p.groups[g].kind == GROUP_PP)
                continue;
            sockets[k] += p.groups[g].transport.kind == TRANSPORT_SOCKET;
            reason[k] += strstr(p.groups[g].transport.reason, "TCP transport") != NULL;
        }
        plan_free(&p);
    }
    CHECK("cpu ranks, real NICs: every group on TCP, saying why", sockets[0] > 0 && reason[0] == sockets[0]);
    CHECK_INT("cpu ranks, emulated NICs: RDMA as the class", sockets[1], 0);
    CHECK_INT("gpu ranks: RDMA", sockets[2], 0);
    CHECK("cpu ranks, real NICs: priced slower than RDMA", step[0] > step[1]);
}

/* Mixed GPU generations: the faster stage gets more layers. */
static void test_mixed_speed(void)
{
    struct plan_worker w[4];
    worker(&w[0], "fast0", 0, 400, NIC_INFINIBAND, "ib", 200);
    worker(&w[1], "fast1", 0, 400, NIC_INFINIBAND, "ib", 200);
    worker(&w[2], "slow0", 0, 100, NIC_INFINIBAND, "ib", 200);
    worker(&w[3], "slow1", 0, 100, NIC_INFINIBAND, "ib", 200);
    struct plan_job job;
    small_job(&job, 20, 2, 2);
    job.model.vocab = 64;
    /* enough micro-batches that compute, not the (fp32) data-parallel traffic, sets the split */
    job.micro_batches = 64;
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    CHECK_INT("mixed speed: plan ok", plan_make(w, 4, &job, &l, &p, &e), 0);
    int fast = p.stages[0].tflops > p.stages[1].tflops ? 0 : 1;
    CHECK("mixed speed: stages do not mix generations",
          p.stages[0].tflops != p.stages[1].tflops);
    int lf = p.stages[fast].last_layer - p.stages[fast].first_layer;
    CHECK("mixed speed: faster stage has ~4x the layers", lf >= 15 && lf <= 17);
    plan_free(&p);
}

/* Two fabrics, each with one fast and one slow GPU, and a fast TCP link: mixing fabrics by
 * speed would be predicted faster, but holmes keeps every dp group on one fabric's RDMA. */
static void test_homogeneous_first(void)
{
    struct plan_worker w[4];
    worker(&w[0], "a-fast", 0, 400, NIC_INFINIBAND, "ib", 200);
    worker(&w[1], "a-slow", 0, 50, NIC_INFINIBAND, "ib", 200);
    worker(&w[2], "b-fast", 0, 400, NIC_ROCE, "roce", 200);
    worker(&w[3], "b-slow", 0, 50, NIC_ROCE, "roce", 200);
    struct plan_job job;
    small_job(&job, 8, 2, 2);
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 1000;
    l.tcp_efficiency = 1;
    herr e = {0};
    struct plan p;
    CHECK_INT("homogeneous first: plan ok", plan_make(w, 4, &job, &l, &p, &e), 0);
    check_properties("homogeneous first", &p, &job);
    CHECK("homogeneous first: no mixed stage", !p.stages[0].mixed && !p.stages[1].mixed);
    plan_free(&p);
}

/* Device memory: a shape that does not fit is never chosen; nothing fits -> a clear error. */
static void test_memory(void)
{
    struct plan_worker w[8];
    int n = two_fabric_cluster(w, 1);
    struct plan_job job;
    small_job(&job, 12, 0, 0);
    job.model.hidden = 2048;
    job.model.heads = 16;
    job.micro_batches = 8;
    struct cost_job cj = {.model = {.layers = 12, .hidden = 2048, .heads = 16, .vocab = 8000, .seq_len = 256},
                          .tensor = 1, .data = 8, .micro_batches = 8, .micro_batch_size = 2,
                          .elem_bytes = 2, .schedule = SCHED_1F1B};
    double m1 = cost_stage_memory(&cj, 12, 0, 1); /* pipeline 1, data 8 */
    cj.data = 4;
    double m2 = 0;
    for (int s = 0; s < 2; s++) {
        double v = cost_stage_memory(&cj, 6, s, 2);
        m2 = v > m2 ? v : m2;
    }
    CHECK("memory: one stage needs more than two", m1 > 1.3 * m2);
    for (int i = 0; i < n; i++)
        w[i].memory_gb = 1.2 * m2 / 0.9 / 1e9;
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 1000; /* make pipeline 1 attractive if it fitted */
    herr e = {0};
    struct plan p;
    int rc = plan_make(w, n, &job, &l, &p, &e);
    CHECK_INT("memory: plan ok", rc, 0);
    if (!rc) {
        CHECK("memory: pipeline 1 (does not fit) avoided", p.pipeline >= 2);
        int fits = 1;
        for (int s = 0; s < p.n_stages; s++)
            fits &= p.stages[s].memory_gb <= w[0].memory_gb * 0.9 + 1e-9;
        CHECK("memory: every stage fits", fits);
        plan_free(&p);
    }
    for (int i = 0; i < n; i++)
        w[i].memory_gb = 0.001;
    rc = plan_make(w, n, &job, &l, &p, &e);
    CHECK("memory: nothing fits -> error naming the stage, the bytes needed and there",
          rc == -1 && strstr(e.msg, "nothing fits in the GPUs' memory") &&
              strstr(e.msg, "needs") && strstr(e.msg, "its GPUs have 0.00 GB (900000 bytes"));
    if (rc)
        printf("  %s\n", e.msg);
    if (!rc)
        plan_free(&p);
}

/* GPUs of one speed and two memory sizes (A100 40 and 80 GB) on one fabric, listed small first
 * and interleaved: 1F1B's first stage holds P micro-batches in flight, the last one, so the
 * first stage goes on the large ones and the layers stay balanced. Were the two sizes one class
 * of interchangeable devices, the first four listed (half of them small) would take stage 0 and
 * its layers would shrink to fit them. */
static void test_mixed_memory(void)
{
    struct plan_worker w[8];
    char name[16];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 1, 300, NIC_INFINIBAND, "ib-a", 200);
    }
    struct plan_job job;
    small_job(&job, 12, 2, 4); /* activations weigh: long sequences, large micro-batches */
    job.model.hidden = 1024;
    job.model.heads = 16;
    job.model.seq_len = 1024;
    job.micro_batch_size = 8;
    struct cost_job cj = {.model = job.model, .tensor = 1, .data = job.data,
                          .micro_batches = job.micro_batches,
                          .micro_batch_size = job.micro_batch_size, .elem_bytes = 2,
                          .schedule = SCHED_1F1B};
    double m0 = cost_stage_memory(&cj, 6, 0, 2), m1 = cost_stage_memory(&cj, 6, 1, 2);
    CHECK("mixed memory: the first stage of 1F1B needs more", m0 > 1.2 * m1);
    double small = (m0 + m1) / 2 / 0.9 / 1e9, big = 2 * m0 / 0.9 / 1e9; /* GB a GPU */
    for (int i = 0; i < 8; i++)
        w[i].memory_gb = i % 2 ? big : small;
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    int rc = plan_make(w, 8, &job, &l, &p, &e);
    CHECK_INT("mixed memory: plan ok", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        return;
    }
    int first_big = 1, fits = 1;
    for (int d = 0; d < p.data; d++)
        first_big &= w[p.ranks[plan_rank_of(&p, 0, d, 0)].worker].memory_gb == big;
    for (int s = 0; s < p.n_stages; s++)
        for (int d = 0; d < p.data; d++)
            fits &= p.stages[s].memory_gb <=
                    w[p.ranks[plan_rank_of(&p, s, d, 0)].worker].memory_gb * 0.9 + 1e-9;
    int l0 = p.stages[0].last_layer - p.stages[0].first_layer;
    CHECK("mixed memory: stage 0 on the four large GPUs", p.pipeline == 2 && first_big);
    CHECK("mixed memory: every stage fits its own GPUs", fits);
    CHECK("mixed memory: stage 0 keeps at least half the layers (equal speeds)", l0 >= 6);
    if (!first_big || l0 < 6)
        printf("  stage 0: layers %d, %.2f GB; small %.2f GB, big %.2f GB\n", l0,
               p.stages[0].memory_gb, small, big);
    plan_free(&p);
}

/* GPUs of one speed and memory size whose memory bandwidths differ a hundredfold (listed slow
 * and fast in turn) on one fabric, with a model whose optimizer step outweighs its compute at the
 * slow rate. Each stage is priced at its slowest device (its ranks wait for one another at the
 * norm), so the four slow devices share one stage, and that stage takes fewer layers: it has
 * the longer optimizer step for each of them. With the bandwidths neither in the devices'
 * classes nor in the search's order by speed (tried), the first four listed take stage 0: the
 * stages mix and the layers split evenly. */
static void test_mixed_memory_bandwidth(void)
{
    struct plan_worker w[8];
    char name[16];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 1, 300, NIC_INFINIBAND, "ib-a", 200);
        w[i].memory_gbps = i % 2 ? 2000 : 20;
    }
    struct plan_job job;
    small_job(&job, 12, 2, 4);
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p;
    int rc = plan_make(w, 8, &job, &l, &p, &e);
    CHECK_INT("memory bandwidth: plan ok", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        return;
    }
    int uniform = 1, priced = 1;
    for (int s = 0; s < p.n_stages; s++)
        for (int d = 0; d < p.data; d++) {
            double bw = w[p.ranks[plan_rank_of(&p, s, d, 0)].worker].memory_gbps;
            uniform &= bw == w[p.ranks[plan_rank_of(&p, s, 0, 0)].worker].memory_gbps;
            priced &= p.stages[s].memory_gbps == bw;
        }
    CHECK("memory bandwidth: each stage's devices share one bandwidth", uniform);
    CHECK("memory bandwidth: each stage priced at its devices'", priced);
    int slow = p.stages[0].memory_gbps < p.stages[1].memory_gbps ? 0 : 1;
    int ls = p.stages[slow].last_layer - p.stages[slow].first_layer;
    int lf = p.stages[!slow].last_layer - p.stages[!slow].first_layer;
    CHECK("memory bandwidth: the slow stage takes fewer layers", p.pipeline == 2 && ls < lf);
    /* its optimizer, as priced: its shard's parameters, 32 bytes each, at 20 GB/s, then the
     * bf16 copy of the stage's parameters refreshed (6 bytes each) */
    struct cost_job cj = {.model = job.model, .tensor = 1, .data = 4};
    double params = ls * cost_layer_params(&cj) + ceil(job.model.vocab / 128.0) * 128 * job.model.hidden +
                    (slow == 0 ? (double)job.model.seq_len * job.model.hidden : 2.0 * job.model.hidden);
    CHECK_NEAR("memory bandwidth: the slow stage's optimizer is its shard at 20 GB/s",
               p.stages[slow].optimizer_s, params / 4 * 32 / 20e9 + params * 6 / 20e9, 1e-9);
    if (ls >= lf)
        printf("  slow stage %d: %d layers, optimizer %.3f ms; fast: %d layers, %.3f ms\n", slow,
               ls, p.stages[slow].optimizer_s * 1e3, lf, p.stages[!slow].optimizer_s * 1e3);
    plan_free(&p);
}

/* ---- bad input ---- */

static void expect_error(const char *label, const struct plan_worker *w, int n,
                         const struct plan_job *job, const struct cost_links *l, const char *want)
{
    herr e = {0};
    struct plan p;
    int rc = plan_make(w, n, job, l, &p, &e);
    char name[160];
    snprintf(name, sizeof name, "bad input: %s", label);
    if (rc == -1 && strstr(e.msg, want))
        TEST_PASS(name);
    else
        TEST_FAIL(name, "rc %d, message \"%s\", want \"%s\"", rc, e.msg, want);
    if (!rc)
        plan_free(&p);
}

static void test_bad_input(void)
{
    struct plan_worker w[8];
    int n = two_fabric_cluster(w, 1);
    struct plan_job job;
    struct cost_links l;
    cost_links_default(&l);
    small_job(&job, 12, 2, 3);
    expect_error("t x p x d != devices", w, n, &job, &l, "must equal the cluster's 8 devices");
    small_job(&job, 4, 8, 1);
    expect_error("more stages than layers", w, n, &job, &l, "8 stages exceed model layers 4");
    small_job(&job, 12, 2, 4);
    l.tcp_gbps = 0;
    expect_error("zero bandwidth", w, n, &job, &l, "links.tcp_gbps");
    cost_links_default(&l);
    struct plan_worker bad[8];
    memcpy(bad, w, sizeof bad);
    bad[3].nic.fabric[0] = '\0';
    expect_error("worker without NIC report", bad, n, &job, &l, "w3).nic: a NIC report");
    memcpy(bad, w, sizeof bad);
    bad[4].memory_gbps = -1;
    expect_error("negative memory bandwidth", bad, n, &job, &l, "w4).memory_gbps: must be a number");
    memcpy(bad, w, sizeof bad);
    snprintf(bad[5].name, sizeof bad[5].name, "w2");
    expect_error("duplicate names", bad, n, &job, &l, "duplicate name \"w2\"");
    int pin[2] = {6, 7};
    job.pinned = pin;
    job.n_pinned = 2;
    expect_error("pin does not sum", w, n, &job, &l, "pinned layers sum to 13, model has 12");
    int pin3[3] = {4, 4, 4};
    job.pinned = pin3;
    job.n_pinned = 3;
    expect_error("pin with wrong stage count", w, n, &job, &l, "3 stages pinned but pipeline is 2");
    int pin0[2] = {12, 0};
    job.pinned = pin0;
    job.n_pinned = 2;
    expect_error("pin with an empty stage", w, n, &job, &l, "partition[1]: every stage needs");
    small_job(&job, 12, 2, 4);
    job.tensor = 3;
    job.data = 0;
    expect_error("tensor across workers", w, n, &job, &l, "tensor: 3 does not divide");
    small_job(&job, 12, 2, 4);
    job.model.heads = 7;
    expect_error("heads do not divide hidden", w, n, &job, &l, "not divisible by model.heads");
    expect_error("no workers", w, 0, &job, &l, "at least one worker");
    small_job(&job, 12, 3, 0);
    expect_error("pipeline does not divide", w, n, &job, &l, "pipeline: 3 does not divide");
}

/* ---- cluster file and job manifest ---- */

static void test_cluster_file(void)
{
    const char *yaml =
        "workers:\n"
        "- {name: ib, node: nd, count: 3, gpus: 8, gpu_tflops: 312,\n"
        "   nic: {summary: {class: infiniband, fabric: ib-a, gbps: 200,\n"
        "                   nccl: {NCCL_IB_HCA: 'mlx5_0:1'}}}}\n"
        "- {name: eth, gpu_tflops: 10, memory_gbps: 40,\n"
        "   nic: {class: ethernet, fabric: lan, gbps: 10}}\n"
        "links: {tcp_gbps: 7}\n";
    char path[] = "/tmp/holmes-test-cluster-XXXXXX";
    int fd = mkstemp(path);
    CHECK("temp file", fd >= 0);
    if (fd < 0)
        return;
    FILE *f = fdopen(fd, "w");
    fputs(yaml, f);
    fclose(f);
    struct cluster c;
    herr e = {0};
    int rc = cluster_load(path, &c, &e);
    CHECK_INT("cluster file parses", rc, 0);
    if (!rc) {
        CHECK_INT("count expands", c.n_workers, 4);
        CHECK_STR("expanded name", c.workers[2].name, "ib-2");
        CHECK_STR("expanded node", c.workers[1].node, "nd-1");
        CHECK_STR("full NIC report accepted", c.workers[0].nic.ib_hca, "mlx5_0:1");
        CHECK_INT("cpu worker", c.workers[3].gpus, 0);
        CHECK_NEAR("memory bandwidth said", c.workers[3].memory_gbps, 40, 0);
        CHECK_NEAR("memory bandwidth not said: 0 (the links')", c.workers[0].memory_gbps, 0, 0);
        CHECK_NEAR("links override", c.links.tcp_gbps, 7, 0);
        cluster_free(&c);
    }
    unlink(path);

    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1}]}", "workers[0].nic: required"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"nic\": {\"class\": \"ib\", "
         "\"fabric\": \"f\", \"gbps\": 0}}]}", "workers[0].nic.gbps"},
        {"{\"workers\": []}", "workers: must be a non-empty list"},
        {"{\"workers\": [{\"name\": \"a\", \"nic\": {}}]}", "gpu_tflops: required"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"gpus\": -1, \"nic\": {}}]}",
         "gpus: must be an integer"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"colour\": 3}]}",
         "workers[0].colour: unknown field"},
        /* a key from outside quoted, so that the message says where it ends (fuzz_manifest) */
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"a \\\"b\\\": c\": 3}]}",
         "workers[0][\"a \\\"b\\\": c\"]: unknown field"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"nic\": {\"class\": \"ib\", "
         "\"fabric\": \"f\", \"gbps\": 1}}], \"links\": {\"tcp gbps\": 2}}",
         "cluster.links[\"tcp gbps\"]: unknown link constant"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"nic\": {\"class\": \"ib\", "
         "\"fabric\": \"f\", \"gbps\": 1}}], \"links\": {\"rdma_efficiency\": 2}}",
         "links.rdma_efficiency"},
        {"[1, 2]", "must be an object"},
        {"{\"workers\": [{\"name\": \"a\", \"gpu_tflops\": 1, \"memory_gbps\": 0, \"nic\": "
         "{\"class\": \"ib\", \"fabric\": \"f\", \"gbps\": 1}}]}",
         "workers[0].memory_gbps: must be a number in (0, 1000000] (GB/s)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i].json);
        char name[96];
        snprintf(name, sizeof name, "bad cluster %zu: %s", i, bad[i].want);
        rc = cluster_from_json(j, "cluster", &c, &e);
        if (rc == -1 && strstr(e.msg, bad[i].want))
            TEST_PASS(name);
        else
            TEST_FAIL(name, "rc %d, message \"%s\"", rc, e.msg);
        if (!rc)
            cluster_free(&c);
        cJSON_Delete(j);
    }
}

static void test_job_manifest(void)
{
    cJSON *j = cJSON_Parse(
        "{\"apiVersion\": \"holmes.dev/v1alpha1\", \"kind\": \"TrainingJob\", \"metadata\": "
        "{\"name\": \"t\"}, \"spec\": {\"workers\": 4, \"gpusPerWorker\": 2, \"model\": "
        "{\"preset\": \"gpt2-350m\"}, \"parallelism\": {\"tensor\": 2, \"pipeline\": \"auto\", "
        "\"data\": 2, \"microBatches\": 6, \"microBatchSize\": 3, \"schedule\": \"gpipe\", "
        "\"paramGatherDtype\": \"bf16\"}, "
        "\"placement\": {\"policy\": \"naive\", \"crossFabricGbps\": 3}, "
        "\"training\": {\"steps\": 10, \"precision\": \"fp32\"}}}");
    struct tj_job tj;
    struct tj_errors errs;
    memset(&errs, 0, sizeof errs);
    int rc = tj_job_from_json(j, &tj, &errs);
    CHECK_INT("job manifest parses", rc, 0);
    if (rc) {
        for (int i = 0; i < errs.count && i < TJ_MAX_ERRORS; i++)
            printf("# %s\n", errs.msg[i]);
        cJSON_Delete(j);
        return;
    }
    struct plan_job pj;
    planner_job_from_spec(&tj.spec, &pj);
    CHECK_INT("preset layers", pj.model.layers, 24);
    CHECK_INT("preset hidden", pj.model.hidden, 1024);
    CHECK_INT("pipeline auto", pj.pipeline, 0);
    CHECK_INT("data", pj.data, 2);
    CHECK_INT("tensor", pj.tensor, 2);
    CHECK_INT("micro-batches", pj.micro_batches, 6);
    CHECK_INT("schedule", pj.schedule, SCHED_GPIPE);
    CHECK_INT("policy", pj.policy, POLICY_NAIVE);
    CHECK_INT("precision", pj.precision, DTYPE_FP32);
    CHECK_INT("pipelineDtype", pj.pipeline_dtype, DTYPE_FP32);
    CHECK_INT("paramGatherDtype", pj.param_gather_dtype, DTYPE_BF16);
    struct plan_worker w[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 2, 100, NIC_ROCE, "r", 100);
    }
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    CHECK_INT("spec applies to cluster", planner_apply_spec(&tj.spec, w, 4, &l, &e), 0);
    CHECK_NEAR("crossFabricGbps sets tcp_gbps", l.tcp_gbps, 3, 0);
    CHECK_INT("worker count mismatch", planner_apply_spec(&tj.spec, w, 3, &l, &e), -1);
    CHECK("worker count message", strstr(e.msg, "spec.workers: 4, but the cluster has 3") != NULL);
    w[1].gpus = 4;
    CHECK_INT("gpus mismatch", planner_apply_spec(&tj.spec, w, 4, &l, &e), -1);
    CHECK("gpus mismatch message", strstr(e.msg, "w1).gpus: 4 differs from spec.gpusPerWorker 2") != NULL);
    w[1].gpus = 2;
    struct plan p;
    rc = plan_make(w, 4, &pj, &l, &p, &e);
    CHECK_INT("plan from a TrainingJob", rc, 0);
    if (!rc) {
        CHECK_INT("auto pipeline resolved", p.pipeline, 2);
        plan_free(&p);
    }
    tj_job_free(&tj);
    cJSON_Delete(j);
}

/* ---- TeraPipe token slices ---- */

/* One stage, tensor 2, m micro-batches in S token slices, every transfer free: each slice runs
 * all of its stage's tensor all-reduces, so each pays their latency whole while their bytes, and
 * the compute, divide among the slices: sliced - unsliced = m (S - 1) (latency of a forward's
 * and a backward's all-reduces). Scaling that latency by a slice's share, as the model did
 * before 2026-11-28, priced slicing with tensor parallelism as free of it. */
static void test_slices_tensor_latency(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.compute_efficiency = 1;
    l.memory_gbps = 1e12;
    l.intra_node_latency_us = 1000; /* large beside the compute, so the difference shows */
    struct cost_job j = {.model = {.layers = 4, .hidden = 256, .heads = 4, .vocab = 1, .seq_len = 64},
                         .tensor = 2, .data = 1, .micro_batches = 3, .micro_batch_size = 1,
                         .elem_bytes = 2, .schedule = SCHED_GPIPE};
    struct cost_stage st;
    memset(&st, 0, sizeof st);
    st.layers = 4;
    st.tflops = 1;
    st.dp.bw = st.next.bw = INFINITY;
    struct cost_sim sim;
    herr e;
    CHECK_INT("slices x tensor: sim init", cost_sim_init(&sim, 1, 3 * 4, &e), 0);
    double whole = cost_simulate(&j, &l, &st, 1, NULL, &sim, NULL);
    int bounds[5] = {0, 16, 32, 48, 64};
    j.slices = 4;
    j.slice_bounds = bounds;
    double sliced = cost_simulate(&j, &l, &st, 1, NULL, &sim, NULL);
    struct cost_stage_terms t;
    cost_stage_terms(&j, &l, &st, 1, 1, NULL, &t);
    CHECK("slices x tensor: the all-reduces' latency is part of their time",
          t.tp_fwd_lat > 0 && t.tp_fwd_lat < t.tp_fwd && t.tp_bwd_lat > 0 && t.tp_bwd_lat < t.tp_bwd);
    CHECK_NEAR("slices x tensor: every slice pays the all-reduces' latency",
               sliced - whole, 3 * (4 - 1) * (t.tp_fwd_lat + t.tp_bwd_lat), 1e-6);
    /* two sequences a micro-batch: a slice sums each sequence's rows apart (gpt_pass.c's row
     * blocks, cuda/gpt_cuda_slices.cu), so the blocks' sums pay their latency twice a slice;
     * the loss statistics and the embedding once */
    j.micro_batch_size = 2;
    j.slices = 0;
    j.slice_bounds = NULL;
    whole = cost_simulate(&j, &l, &st, 1, NULL, &sim, NULL);
    j.slices = 4;
    j.slice_bounds = bounds;
    sliced = cost_simulate(&j, &l, &st, 1, NULL, &sim, NULL);
    cost_stage_terms(&j, &l, &st, 1, 1, NULL, &t);
    double ar = 2 * (2 - 1) * 1000e-6; /* one ring all-reduce of 2 ranks */
    CHECK_NEAR("slices x tensor, b = 2: a forward slice's latency", t.tp_fwd_slice_lat,
               (2 * 4 * 2 + 1 + 1) * ar, 1e-12);
    CHECK_NEAR("slices x tensor, b = 2: a backward slice's latency", t.tp_bwd_slice_lat,
               (2 * 4 + 1) * 2 * ar, 1e-12);
    CHECK_NEAR("slices x tensor, b = 2: every slice pays each sequence's latency",
               sliced - whole,
               3 * (4 * (t.tp_fwd_slice_lat + t.tp_bwd_slice_lat) - (t.tp_fwd_lat + t.tp_bwd_lat)),
               1e-6);
    cost_sim_free(&sim);
}

/* A stage of `layers` layers at `tflops`, every link free (infinite, no latency). */
static struct cost_stage free_stage(int layers, double tflops)
{
    struct cost_stage st;
    memset(&st, 0, sizeof st);
    st.layers = layers;
    st.tflops = tflops;
    st.dp.bw = st.next.bw = INFINITY;
    return st;
}

/* Ring all-reduce of `bytes` over n ranks on link k (the cost model's). */
static double ring_ar(double bytes, int n, struct cost_link k)
{
    return 2.0 * (n - 1) / n * bytes / k.bw + 2.0 * (n - 1) * k.lat;
}

/* What the tensor group runs is what is priced (noderuntime/engine/gpt_pass.c, cuda/): the
 * sums are over fp32 buffers whatever the engine's type; the first stage sums its embedding,
 * the last its loss statistics (forward) and its head's input gradient (backward). */
static void test_tensor_terms(void)
{
    struct cost_links l;
    cost_links_default(&l);
    int t = 4, L = 3;
    struct cost_job j = {.model = {.layers = 8, .hidden = 256, .heads = 4, .vocab = 1000, .seq_len = 64},
                         .tensor = t, .data = 1, .micro_batches = 2, .micro_batch_size = 3,
                         .elem_bytes = 2};
    struct cost_stage st = free_stage(L, 100);
    struct cost_link in = cost_link_make(l.intra_node_gbps, l.intra_node_latency_us, 1);
    double BT = 3.0 * 64, act = BT * 256 * 4, stats = BT * (2 * t + 1) * 4;
    struct cost_stage_terms mid, first, last;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &mid);
    cost_stage_terms(&j, &l, &st, 1, 0, NULL, &first);
    cost_stage_terms(&j, &l, &st, 0, 1, NULL, &last);
    CHECK_NEAR("tensor: a middle stage's forward sums, fp32", mid.tp_fwd, 2 * L * ring_ar(act, t, in),
               1e-15);
    CHECK_NEAR("tensor: a middle stage's backward sums, fp32", mid.tp_bwd, 2 * L * ring_ar(act, t, in),
               1e-15);
    CHECK_NEAR("tensor: the first stage's embedding sum", first.tp_fwd - mid.tp_fwd,
               ring_ar(act, t, in), 1e-15);
    CHECK_NEAR("tensor: the first stage's backward has none more", first.tp_bwd, mid.tp_bwd, 1e-15);
    CHECK_NEAR("tensor: the last stage's loss statistics", last.tp_fwd - mid.tp_fwd,
               ring_ar(stats, t, in), 1e-15);
    CHECK_NEAR("tensor: the last stage's head input gradient", last.tp_bwd - mid.tp_bwd,
               ring_ar(act, t, in), 1e-15);
    CHECK_NEAR("tensor: latency of the last stage's forward", last.tp_fwd_lat,
               (2 * L + 1) * 2 * (t - 1) * in.lat, 1e-15);
    CHECK_NEAR("tensor: the gather of a received unit is in the engine's type", mid.gather,
               (t - 1.0) / t * act / 2 / in.bw + (t - 1) * in.lat, 1e-15);
    /* the copies after an update: a bf16 engine's copy of the stage's parameters (4 read, 2
     * written); with a bf16 all-gather the gathered bf16 widened first (2 read, 4 written) */
    /* a rank's share of a block: the split tensors' quarter, the replicated 6 h whole */
    double C = 256, membw = l.memory_gbps * 1e9, per_rank = L * ((12 * C * C + 7 * C) / t + 6 * C);
    CHECK_NEAR("copies: a bf16 engine refreshes its copy", mid.param_copies, per_rank * 6 / membw,
               1e-15);
    j.data = 2;
    j.gather_masters = 1;
    j.gather_elem_bytes = 2;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &mid);
    CHECK_NEAR("copies: a bf16 gather widens, then the copy", mid.param_copies,
               per_rank * 12 / membw, 1e-15);
    j.elem_bytes = 4;
    j.gather_masters = 0;
    j.gather_elem_bytes = 0;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &mid);
    CHECK_NEAR("copies: none for an fp32 engine", mid.param_copies, 0, 0);
}

/* The step ends with the norm's all-reduces of four floats (trainer.c global_sq_norm), on the
 * tensor group, the pipeline group (TCP) and the data-parallel ring one after another: their
 * latency is every step's. */
static void test_norm_latency(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.memory_gbps = 1e12;
    struct cost_job j = {.model = {.layers = 8, .hidden = 64, .heads = 4, .vocab = 1, .seq_len = 16},
                         .tensor = 2, .data = 3, .micro_batches = 4, .micro_batch_size = 1,
                         .elem_bytes = 4, .schedule = SCHED_GPIPE};
    struct cost_stage st[3];
    memset(st, 0, sizeof st);
    for (int s = 0; s < 3; s++) {
        st[s].layers = 2;
        st[s].tflops = 1;
        st[s].dp = (struct cost_link){INFINITY, 0};
        st[s].next = (struct cost_link){INFINITY, 0};
    }
    struct cost_link tie = {INFINITY, 0};
    struct cost_sim sim;
    herr e;
    CHECK_INT("norm: sim init", cost_sim_init(&sim, 3, 4, &e), 0);
    struct cost_breakdown br0, br1;
    /* tensor 1: nothing else in the step pays the TCP latency (the links are given) */
    j.tensor = 1;
    l.tcp_latency_us = 0;
    double t0 = cost_simulate(&j, &l, st, 3, &tie, &sim, &br0);
    l.tcp_latency_us = 50;
    double t1 = cost_simulate(&j, &l, st, 3, &tie, &sim, &br1);
    /* the 3-stage pipeline ring's 4 hops of 50 us */
    CHECK_NEAR("norm: the step pays the pipeline ring's latency", t1 - t0, 4 * 50e-6, 1e-12);
    CHECK_NEAR("norm: counted in dp_comm", br1.dp_comm - br0.dp_comm, 4 * 50e-6, 1e-12);
    /* tensor 2: the tensor pair's 2 hops of 5 us (the ops' own sums pay theirs inside the
     * schedule: only dp_comm shows the norm's alone) */
    j.tensor = 2;
    l.intra_node_latency_us = 0;
    cost_simulate(&j, &l, st, 3, &tie, &sim, &br0);
    l.intra_node_latency_us = 5;
    cost_simulate(&j, &l, st, 3, &tie, &sim, &br1);
    CHECK_NEAR("norm: with tensor 2, the tensor pair's too", br1.dp_comm - br0.dp_comm, 2 * 5e-6,
               1e-12);
    cost_sim_free(&sim);
}

/* ZeRO's buckets (zero.c: at most PLAN_ZERO_BUCKET_FLOATS, 16 Mi floats, never across a block or
 * the embedding) are a collective each: a ring's latency per bucket, on the reduce-scatter and on
 * the all-gather. */
static void test_bucket_latency(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.overlap = 0;
    struct cost_job j = {.model = {.layers = 8, .hidden = 2048, .heads = 16, .vocab = 50000, .seq_len = 64},
                         .tensor = 1, .data = 4, .micro_batches = 2, .micro_batch_size = 1,
                         .elem_bytes = 2};
    struct cost_stage st = free_stage(3, 100);
    st.dp.lat = 10e-6;
    struct cost_stage_terms t;
    /* a block of hidden 2048: 50,358,272 parameters, 4 buckets (3 of 16 Mi and the rest); 3
     * rings of 4 members' latency */
    CHECK("buckets: the constant is zero.c's 16 Mi floats", PLAN_ZERO_BUCKET_FLOATS == 16777216);
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &t);
    CHECK_NEAR("buckets: 3 blocks of 4 buckets", t.rs_exposed, 3 * 4 * 3 * 10e-6, 1e-15);
    CHECK_NEAR("buckets: the all-gather too", t.ag_exposed, 3 * 4 * 3 * 10e-6, 1e-15);
    /* tensor 4: a block's quarter (12.6 M) is one bucket */
    j.tensor = 4;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &t);
    CHECK_NEAR("buckets: tensor 4, a bucket a block", t.rs_exposed, 3 * 1 * 3 * 10e-6, 1e-15);
    /* the first stage: wte's 102.4 M / 4 = 25.6 M floats, 2 buckets; wpe one */
    cost_stage_terms(&j, &l, &st, 1, 0, NULL, &t);
    CHECK_NEAR("buckets: the first stage's embeddings", t.rs_exposed, (3 + 2 + 1) * 3 * 10e-6,
               1e-15);
}

/* ZeRO's overlap with token slices: a block's reduce-scatter starts at the backward of the slice
 * that reaches t0 = 0 (the backward hook, gpt.h), the last of the micro-batch, and the next
 * step's first slice needs the blocks' parameters: only the first slice's compute hides them. */
static void test_slices_zero_overlap(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.overlap = 1;
    struct cost_job j = {.model = {.layers = 8, .hidden = 256, .heads = 4, .vocab = 100, .seq_len = 64},
                         .tensor = 1, .data = 4, .micro_batches = 2, .micro_batch_size = 1,
                         .elem_bytes = 2};
    struct cost_stage st = free_stage(4, 0.05);
    st.dp = cost_link_make(1, 0, 1); /* slow enough that neither hides whole */
    struct cost_stage_terms whole, sliced;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &whole);
    int bounds[3] = {0, 32, 64};
    j.slices = 2;
    j.slice_bounds = bounds;
    cost_stage_terms(&j, &l, &st, 0, 0, NULL, &sliced);
    double rs = 0.75 * 4 * cost_layer_params(&j) * 4 / (1e9 / 8), cw0 = cost_slice_compute_share(&j, 0, 32);
    CHECK("zero x slices: the first slice is less than the whole", cw0 > 0 && cw0 < 0.5);
    CHECK_NEAR("zero x slices: whole micro-batch hides behind 3 blocks' backward", whole.rs_exposed,
               fmax(rs / 4, rs - whole.bwd * 3 / 4), 1e-12);
    CHECK_NEAR("zero x slices: only the first slice's backward hides it", sliced.rs_exposed,
               fmax(rs / 4, rs - sliced.bwd * cw0 * 3 / 4), 1e-12);
    CHECK("zero x slices: more exposed", sliced.rs_exposed > whole.rs_exposed);
    CHECK_NEAR("zero x slices: the gather behind the first slice's forward", sliced.ag_exposed,
               fmax(rs / 4, rs - sliced.fwd * cw0 * 3 / 4), 1e-12);
}

static void test_token_slices(void)
{
    struct plan_job job;
    small_job(&job, 8, 4, 1);
    job.model.seq_len = 1024;
    job.micro_batches = 1;
    job.micro_batch_size = 1;
    job.schedule = SCHED_GPIPE;
    struct cost_job cj = {.model = job.model, .tensor = 1, .data = 1, .micro_batches = 1,
                          .micro_batch_size = 1, .elem_bytes = 4};
    /* compute shares: they add up to the whole; a later slice of the same length costs more */
    double sum = 0;
    for (int k = 0; k < 8; k++)
        sum += cost_slice_compute_share(&cj, k * 128, (k + 1) * 128);
    CHECK_NEAR("slice shares add up to 1", sum, 1.0, 1e-12);
    CHECK("a later slice of the same length costs more (it attends to more context)",
          cost_slice_compute_share(&cj, 896, 1024) > 1.5 * cost_slice_compute_share(&cj, 0, 128));
    struct plan_worker w[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        worker(&w[i], name, 0, 0.05, i < 2 ? NIC_INFINIBAND : NIC_ROCE, i < 2 ? "ib-a" : "roce-b",
               i < 2 ? 200 : 100);
    }
    struct cost_links l;
    cost_links_default(&l);
    herr e = {0};
    struct plan p0, p4, pa, pn;
    job.token_slices = 1;
    int ok = plan_make(w, 4, &job, &l, &p0, &e) == 0;
    job.token_slices = 4;
    ok = ok && plan_make(w, 4, &job, &l, &p4, &e) == 0;
    job.token_slices = TJ_AUTO;
    ok = ok && plan_make(w, 4, &job, &l, &pa, &e) == 0;
    CHECK("token slices: plans made", ok);
    if (!ok) {
        printf("# %s\n", e.msg);
        return;
    }
    CHECK("1 slice: no slicing, nothing recorded", p0.slices == 0 && !p0.slices_auto);
    int even = p4.slices == 4;
    for (int k = 0; even && k < 4; k++)
        even = p4.slice_bounds[k + 1] - p4.slice_bounds[k] == 256;
    CHECK("4 slices: cut evenly (256 tokens each)", even);
    CHECK("4 slices: predicted faster than unsliced on 4 stages, one sequence (GPipe)",
          p4.step_s < p4.unsliced_step_s && p4.unsliced_step_s == p0.step_s);
    CHECK("auto: the DP's slicing beats the even 4", pa.slices > 1 && pa.slices_auto &&
                                                        pa.step_s <= p4.step_s);
    int rising = pa.slices > 1 && pa.slice_bounds[0] == 0 && pa.slice_bounds[pa.slices] == 1024;
    for (int k = 0; rising && k < pa.slices; k++)
        rising = pa.slice_bounds[k + 1] > pa.slice_bounds[k];
    CHECK("auto: bounds rise from 0 to seqLen", rising);
    CHECK("auto: the first slice is the longest (later ones attend to more)",
          pa.slices > 1 && pa.slice_bounds[1] - pa.slice_bounds[0] >=
                               pa.slice_bounds[pa.slices] - pa.slice_bounds[pa.slices - 1]);
    /* one stage: nothing to overlap, slicing only adds overhead; auto keeps the sequence whole */
    l.op_overhead_us = 100;
    job.pipeline = 1;
    ok = plan_make(w, 1, &job, &l, &pn, &e) == 0;
    CHECK("auto on one stage: unsliced", ok && pn.slices == 0 && pn.slices_auto &&
                                             pn.step_s == pn.unsliced_step_s);
    plan_free(&p0);
    plan_free(&p4);
    plan_free(&pa);
    if (ok)
        plan_free(&pn);
}

int main(void)
{
    test_token_slices();
    test_formulas();
    test_schedule_closed_form();
    test_slices_tensor_latency();
    test_auto_micro_batching();
    test_cpu_ranks_tcp();
    test_tensor_terms();
    test_bucket_latency();
    test_norm_latency();
    test_slices_zero_overlap();
    test_links_json();
    test_gateway();
    test_pipeline_dtype();
    test_param_gather_dtype();
    test_shared_cores();
    test_pinned_cores();
    test_two_fabrics();
    test_tensor_and_auto();
    test_uneven();
    test_mixed_speed();
    test_homogeneous_first();
    test_memory();
    test_mixed_memory();
    test_mixed_memory_bandwidth();
    test_bad_input();
    test_cluster_file();
    test_job_manifest();
    TEST_MAIN_END();
}
