/* The planner's pipeline links (issue 34): link groups in the plan and its document, each link
 * priced as the runtime sends it (1/t of the activation per tensor rank, the NICs it shares, RDMA
 * only inside one RDMA fabric, the receiver's all-gather, blocking or asynchronous sends),
 * checked against numbers computed by hand; ties in the layer split going to the most balanced
 * split (against every split of a small case); the memory a stage needs and the refusal that
 * names it; and the three-fabric case of the issue (tests/fixtures/planner). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "cluster.h"
#include "cost_model.h"
#include "pipe_order.h"
#include "planner.h"
#include "planner_job.h"
#include "test.h"

static void worker(struct plan_worker *w, const char *name, int gpus, enum nic_class cls,
                   const char *fabric, double gbps)
{
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->gpus = gpus;
    w->tflops = 100;
    w->nic.cls = cls;
    w->nic.gbps = gbps;
    w->nic.gid_index = cls == NIC_ROCE ? 3 : -1;
    snprintf(w->nic.fabric, sizeof w->nic.fabric, "%s", fabric);
}

/* A job of two layers of 512 (8 heads, vocabulary 1,000, T 256) in two stages, one replica */
static void two_stage_job(struct plan_job *job, int tensor, int micro_batches)
{
    plan_job_init(job);
    job->model = (struct tj_model){.layers = 2, .hidden = 512, .heads = 8, .vocab = 1000, .seq_len = 256};
    job->tensor = tensor;
    job->pipeline = 2;
    job->data = 1;
    job->micro_batches = micro_batches;
}

/* Busy time per micro-batch of stage s (of P) with `layers` on devices of `tflops`: compute,
 * tensor all-reduces, the all-gathers of what it receives. */
static double busy(const struct cost_job *j, const struct cost_links *l, int layers, double tflops,
                   int s, int P)
{
    struct cost_stage st = {.layers = layers, .tflops = tflops, .mem_bytes = INFINITY,
                            .dp = {INFINITY, 0}, .next = {INFINITY, 0}};
    struct cost_stage_terms t;
    cost_stage_terms(j, l, &st, s == 0, s == P - 1, NULL, &t);
    return t.fwd + t.bwd + t.tp_fwd + t.tp_bwd + (s > 0 ? t.gather : 0) + (s < P - 1 ? t.gather : 0);
}

/* ---- link groups in the plan ---- */

static void test_link_groups(void)
{
    /* 4 workers x 2 GPUs: two on IB (one per GPU: two HCAs), two on Ethernet; tensor 2,
     * pipeline 4, data 1: boundaries ib -> ib (RDMA), ib -> eth (TCP), eth -> eth (TCP) */
    struct plan_worker w[4];
    worker(&w[0], "ib0", 2, NIC_INFINIBAND, "ib-a", 200);
    worker(&w[1], "ib1", 2, NIC_INFINIBAND, "ib-a", 200);
    worker(&w[2], "eth0", 2, NIC_ETHERNET, "eth-c", 25);
    worker(&w[3], "eth1", 2, NIC_ETHERNET, "eth-c", 25);
    snprintf(w[0].nic.ib_hca, sizeof w[0].nic.ib_hca, "mlx5_0:1,mlx5_1:1");
    snprintf(w[1].nic.ib_hca, sizeof w[1].nic.ib_hca, "mlx5_0:1,mlx5_1:1");
    struct plan_job job;
    plan_job_init(&job);
    job.model = (struct tj_model){.layers = 8, .hidden = 512, .heads = 8, .vocab = 1000, .seq_len = 256};
    job.tensor = 2;
    job.pipeline = 4;
    job.data = 1;
    job.micro_batches = 4;
    struct cost_links l;
    cost_links_default(&l);
    struct plan p;
    herr e = {0};
    int rc = plan_make(w, 4, &job, &l, &p, &e);
    CHECK_INT("links: plan", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        return;
    }
    CHECK_INT("links: nics from the HCA list (2) and Ethernet (1)",
              plan_worker_nics(&w[0]) * 10 + plan_worker_nics(&w[2]), 21);
    int links = 0, bad = 0, ib = 0, socket = 0;
    for (int g = 0; g < p.n_groups; g++) {
        const struct plan_group *gr = &p.groups[g];
        if (gr->kind != GROUP_LINK)
            continue;
        links++;
        int a = gr->members[0], b = gr->members[1];
        bad += gr->n != 2 || p.ranks[a].stage != gr->stage || p.ranks[b].stage != gr->stage + 1 ||
               p.ranks[a].dp_rank != p.ranks[b].dp_rank || p.ranks[a].tp_rank != p.ranks[b].tp_rank ||
               g != p.link_group0 + gr->stage * p.data * p.tensor + p.ranks[a].dp_rank * p.tensor +
                        p.ranks[a].tp_rank;
        int same = !strcmp(p.workers[p.ranks[a].worker].nic.fabric, p.workers[p.ranks[b].worker].nic.fabric);
        int rdma = same && p.workers[p.ranks[a].worker].nic.cls != NIC_ETHERNET;
        bad += rdma != (gr->transport.kind != TRANSPORT_SOCKET) ||
               strcmp(gr->transport.nccl_net, rdma ? "IB" : "Socket") != 0;
        ib += gr->transport.kind == TRANSPORT_IB;
        socket += gr->transport.kind == TRANSPORT_SOCKET;
    }
    CHECK_INT("links: one per boundary, replica and tensor rank", links, 3 * 1 * 2);
    CHECK_INT("links: [s, s+1], same dp and tp, in order; IB exactly inside the IB fabric", bad, 0);
    CHECK("links: the IB boundary on IB, the others on TCP", ib == 2 && socket == 4);
    int bounds_ok = 1, ib_b = -1, cross_b = -1;
    for (int s = 0; s + 1 < p.pipeline; s++) {
        struct plan_boundary b;
        plan_boundary_links(&p, s, &b);
        int ib_ib = !strcmp(p.stages[s].fabric, "ib-a") && !strcmp(p.stages[s + 1].fabric, "ib-a");
        int cross = strcmp(p.stages[s].fabric, p.stages[s + 1].fabric) != 0;
        ib_b = ib_ib ? s : ib_b;
        cross_b = cross ? s : cross_b;
        if (ib_ib)
            bounds_ok &= b.n[TRANSPORT_IB] == 2 && !b.mixed && b.kind == TRANSPORT_IB && !b.reason[0];
        else
            bounds_ok &= b.n[TRANSPORT_SOCKET] == 2 && b.kind == TRANSPORT_SOCKET &&
                         strstr(b.reason, cross ? "span" : "Ethernet") != NULL;
    }
    CHECK("links: per boundary, 2 ib between the IB stages, else 2 socket with the reason",
          bounds_ok && ib_b >= 0 && cross_b >= 0);
    /* the document: link groups with their transports; it completes and round-trips */
    struct plan_doc d;
    rc = plan_to_doc(&p, &d, &e);
    CHECK_INT("links: plan_to_doc", rc, 0);
    if (rc == 0) {
        int l0 = plan_doc_find_link(&d, plan_rank_of(&p, ib_b, 0, 1), 1);
        int l1 = plan_doc_find_link(&d, plan_rank_of(&p, cross_b + 1, 0, 1), -1);
        CHECK("links: the document's link groups carry the plan's transports",
              l0 >= 0 && d.groups[l0].transport == TRANSPORT_IB && !strcmp(d.groups[l0].nccl_net, "IB") &&
                  l1 >= 0 && d.groups[l1].transport == TRANSPORT_SOCKET &&
                  d.groups[l1].members[0] == plan_rank_of(&p, cross_b, 0, 1));
        cJSON *j = plan_doc_to_json(&d);
        struct plan_doc back;
        rc = j ? plan_doc_from_json(j, "doc", &back, &e) : -1;
        CHECK("links: the document round-trips", rc == 0 && back.ngroups == d.ngroups);
        if (rc == 0)
            plan_doc_free(&back);
        cJSON_Delete(j);
        plan_doc_free(&d);
    }
    /* the --json report lists each boundary */
    cJSON *j = plan_to_json(&p);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(j, "pipeline_links");
    const cJSON *b1 = cJSON_GetArrayItem(pl, cross_b);
    CHECK("links: --json pipeline_links per boundary",
          cJSON_GetArraySize(pl) == 3 &&
              !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b1, "transport")), "socket") &&
              cJSON_GetObjectItemCaseSensitive(b1, "socket")->valueint == 2);
    cJSON_Delete(j);
    plan_free(&p);
}

/* ---- one link's price, by hand ---- */

static void test_link_price(void)
{
    /* worker a on IB (100 Gb/s, one NIC), worker b on Ethernet (40 Gb/s, one NIC), 2 GPUs each;
     * tensor 2, pipeline 2, data 1, fp32, 1 micro-batch of 1 x 256 tokens x 512 */
    struct plan_worker w[2];
    worker(&w[0], "a", 2, NIC_INFINIBAND, "ib-a", 100);
    worker(&w[1], "b", 2, NIC_ETHERNET, "eth-b", 40);
    struct plan_job job;
    two_stage_job(&job, 2, 1);
    job.precision = DTYPE_FP32;
    job.schedule = SCHED_GPIPE;
    int pin[2] = {1, 1};
    job.pinned = pin;
    job.n_pinned = 2;
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 100; /* not the limit here */
    l.send_buffers = 0; /* sends hold their stage: the step by hand below */
    struct plan p;
    herr e = {0};
    int rc = plan_make(w, 2, &job, &l, &p, &e);
    CHECK_INT("price: plan", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        return;
    }
    /* each of the 2 tensor ranks sends 1/2 of 256 x 512 fp32 = 262144 bytes; the 2 links share
     * each NIC: a's 100 / 2 = 50 Gb/s, b's 40 / 2 = 20 Gb/s, the slower end, over TCP (two
     * fabrics) at tcp_efficiency 0.8: 16 Gb/s = 2e9 bytes/s, plus a TCP message's 50 us */
    int a_first = !strcmp(p.workers[p.ranks[0].worker].name, "a");
    double bytes = 256.0 * 512 * 4 / 2, bw = 16e9 / 8;
    double x = bytes / bw + 50e-6;
    const struct plan_group *g = &p.groups[p.link_group0];
    CHECK_NEAR("price: a link at 16 Gb/s (its NIC share, TCP efficiency)", g->gbps, 16, 1e-12);
    CHECK_NEAR("price: its share of the slower NIC is 1/2", g->nic_share, 0.5, 1e-12);
    CHECK_NEAR("price: one micro-batch's 1/t on the link: 262144 B / 2e9 B/s + 50 us",
               p.stages[0].link_s, x, 1e-12);
    /* the receiver all-gathers the 2 chunks inside its node: (t-1)/t x 524288 B at 2400 Gb/s,
     * plus one 5 us hop */
    double g_s = 0.5 * 524288 / (2400e9 / 8) + 5e-6;
    CHECK_NEAR("price: the receiver's all-gather", p.stages[1].gather_s, g_s, 1e-12);
    /* one micro-batch, sends blocking (send_buffers 0): stage 0's forward, the transfer, stage
     * 1's gather + forward + backward, the gradient's transfer, stage 0's gather + backward;
     * the tie's shards (first <-> last: V h / t x 4 bytes over the same kind of link) start
     * stage 1 and end stage 0 */
    struct cost_job cj = {.model = job.model, .tensor = 2, .data = 1, .micro_batches = 1,
                          .micro_batch_size = 1, .elem_bytes = 4, .schedule = SCHED_GPIPE};
    struct cost_stage st = {.layers = 1, .tflops = 100, .mem_bytes = INFINITY, .dp = {INFINITY, 0},
                            .next = {bw, 50e-6}};
    struct cost_link tie = {bw, 50e-6};
    struct cost_stage_terms t0, t1;
    cost_stage_terms(&cj, &l, &st, 1, 0, &tie, &t0);
    cost_stage_terms(&cj, &l, &st, 0, 1, &tie, &t1);
    double tie_s = 1024.0 * 512 / 2 * 4 / bw + 50e-6; /* the vocabulary padded to 1024 rows */
    CHECK_NEAR("price: the tie's shard by hand", t0.tie, tie_s, 1e-12);
    double F0 = t0.fwd + t0.tp_fwd, B0 = t0.bwd + t0.tp_bwd, F1 = t1.fwd + t1.tp_fwd,
           B1 = t1.bwd + t1.tp_bwd;
    double arrive = t0.optimizer + F0 + x;
    double back = fmax(fmax(t1.optimizer, tie_s), arrive) + g_s + F1 + B1 + x;
    /* then the norm's all-reduces: the tensor pair's (2 hops of 5 us), the pipeline pair's over
     * TCP (2 of 50 us) */
    double norm = 2 * 5e-6 + 2 * 50e-6;
    double want = fmax(back + g_s + B0, back + tie_s) + norm;
    CHECK_NEAR("price: the step, by hand", p.step_s, want, 1e-9);
    CHECK("price: (stage a first)", a_first);
    plan_free(&p);

    /* one link only (tensor 1, 1 GPU each) on a worker with two NICs: it goes through one of
     * them, so it gets half the worker's Gb/s; with one NIC, all of it */
    worker(&w[0], "a", 1, NIC_ROCE, "roce-a", 100);
    worker(&w[1], "b", 1, NIC_ROCE, "roce-a", 100);
    job.tensor = 1;
    job.micro_batches = 2;
    double gb[2];
    for (int k = 0; k < 2; k++) {
        w[0].nics = w[1].nics = k + 1;
        rc = plan_make(w, 2, &job, &l, &p, &e);
        gb[k] = rc ? -1 : p.groups[p.link_group0].gbps;
        if (!rc)
            plan_free(&p);
    }
    CHECK_NEAR("price: one NIC, one link: 100 x rdma_efficiency 0.9", gb[0], 90, 1e-12);
    CHECK_NEAR("price: two NICs, one link: one NIC's 50 x 0.9", gb[1], 45, 1e-12);
}

/* ---- TCP between fabrics: a worker's path, shared by its links there ---- */

/* The Gb/s the plan priced link group k (of the first boundary) at, or -1 when it does not plan. */
static double link_gbps(struct plan_worker *w, int n, struct plan_job *job,
                        const struct cost_links *l, int k)
{
    struct plan p;
    herr e = {0};
    if (plan_make(w, n, job, l, &p, &e)) {
        printf("  %s\n", e.msg);
        return -1;
    }
    double g = k < p.tensor * p.data ? p.groups[p.link_group0 + k].gbps : -1;
    plan_free(&p);
    return g;
}

static void test_tcp_per_worker(void)
{
    /* two workers on two fabrics, 4 GPUs with a NIC each (400 Gb/s: 100 a link, 80 over TCP);
     * tensor 4, pipeline 2: the 4 tensor ranks' links between the fabrics share the sending
     * worker's tcp_gbps 20 (its node's path to the other fabrics), 5 Gb/s each, not 20 each */
    struct plan_worker w[3];
    worker(&w[0], "a", 4, NIC_INFINIBAND, "ib-a", 400);
    worker(&w[1], "b", 4, NIC_ROCE, "roce-b", 400);
    w[0].nics = w[1].nics = 4;
    struct plan_job job;
    two_stage_job(&job, 4, 2);
    struct cost_links l;
    cost_links_default(&l);
    l.tcp_gbps = 20;
    int ok = 1;
    for (int k = 0; k < 4; k++)
        ok &= link_gbps(w, 2, &job, &l, k) == 5;
    CHECK("tcp: a tensor group's 4 links between fabrics share one worker's 20 Gb/s: 5 each", ok);
    /* a path faster than the NIC shares leaves them the limit */
    l.tcp_gbps = 1000;
    CHECK_NEAR("tcp: tcp_gbps 1000: the NIC share, 100 x tcp_efficiency 0.8",
               link_gbps(w, 2, &job, &l, 0), 80, 1e-12);
    /* one GPU a worker, tensor 1: the one link has the whole path */
    l.tcp_gbps = 20;
    w[0].gpus = w[1].gpus = 1;
    w[0].nics = w[1].nics = 1;
    job.tensor = 1;
    CHECK_NEAR("tcp: tensor 1, one link: all of tcp_gbps 20", link_gbps(w, 2, &job, &l, 0), 20,
               1e-12);

    /* worker a (2 GPUs, tensor 1: two blocks, both in stage 0) sends to b on one fabric and to
     * c on another (the workers as listed: policy naive; pipeline 2 x data 2): its two links
     * go to two fabrics and share its 20 Gb/s, 10 each (its NICs give each 2 x 400 / 2 x 0.8) */
    worker(&w[0], "a", 2, NIC_INFINIBAND, "ib-a", 800);
    worker(&w[1], "b", 1, NIC_ROCE, "roce-b", 400);
    worker(&w[2], "c", 1, NIC_ETHERNET, "eth-c", 400);
    w[0].nics = 2;
    job.policy = POLICY_NAIVE;
    job.data = 2;
    CHECK("tcp: one worker's links to two fabrics share its 20 Gb/s: 10 each",
          link_gbps(w, 3, &job, &l, 0) == 10 && link_gbps(w, 3, &job, &l, 1) == 10);
    /* a link inside its fabric (RDMA to b on ib-a) takes no share of the path: the one to c has
     * all of it */
    worker(&w[1], "b", 1, NIC_INFINIBAND, "ib-a", 400);
    CHECK("tcp: a link inside the fabric takes no share: the link to c at 20, the one to b on IB",
          link_gbps(w, 3, &job, &l, 0) == 360 && link_gbps(w, 3, &job, &l, 1) == 20);
}

/* ---- blocking and asynchronous sends in the schedule, closed forms ---- */

static void test_send_modes(void)
{
    struct cost_links l;
    cost_links_default(&l);
    l.compute_efficiency = 1;
    l.memory_gbps = 1e12; /* optimizer ~ 0 */
    struct cost_job j = {.model = {.layers = 4, .hidden = 256, .heads = 4, .vocab = 1, .seq_len = 64},
                         .tensor = 2, .data = 1, .micro_batches = 4, .micro_batch_size = 1,
                         .elem_bytes = 4, .schedule = SCHED_GPIPE};
    struct cost_stage st[2];
    for (int s = 0; s < 2; s++)
        st[s] = (struct cost_stage){.layers = 2, .tflops = 1, .mem_bytes = INFINITY,
                                    .dp = {INFINITY, 0}, .next = {INFINITY, 0}};
    double xfer = 0.05e-3; /* a link's share of one micro-batch, and 0.02 ms of latency */
    st[0].next = (struct cost_link){cost_link_bytes(&j) / xfer, 0.02e-3};
    double x = xfer + 0.02e-3;
    struct cost_link tie = {INFINITY, 0};
    struct cost_stage_terms t0, t1;
    cost_stage_terms(&j, &l, &st[0], 1, 0, &tie, &t0);
    cost_stage_terms(&j, &l, &st[1], 0, 1, &tie, &t1);
    /* F1', B0': the ops that receive start with the tensor group's all-gather */
    double F0 = t0.fwd + t0.tp_fwd, B0 = t0.bwd + t0.tp_bwd + t0.gather;
    double F1 = t1.fwd + t1.tp_fwd + t1.gather, B1 = t1.bwd + t1.tp_bwd;
    double start = fmax(t0.optimizer, t1.optimizer), m = 4;
    /* every step ends with the norm's all-reduces: the tensor pair's (2 hops of the intra-node
     * latency), the pipeline pair's over TCP */
    double norm = 2 * l.intra_node_latency_us * 1e-6 + 2 * l.tcp_latency_us * 1e-6;
    struct cost_sim sim;
    herr e;
    CHECK_INT("sends: sim init", cost_sim_init(&sim, 2, 4, &e), 0);
    CHECK("sends: transfers shorter than the ops (the closed forms' regime)", x < F0 && x < B1);
    /* blocking: stage 0's forwards and sends come every F0 + x, stage 1 forwards each as it
     * arrives (or after the last); then stage 1's backwards and sends every B1 + x, stage 0
     * backwards each (GPipe, one stage's units after another) */
    l.send_buffers = 0;
    double T = x + F0 + F1 + (m - 1) * fmax(F0 + x, F1);
    double blocking = cost_simulate(&j, &l, st, 2, &tie, &sim, NULL);
    CHECK_NEAR("sends: blocking GPipe, by hand", blocking,
               start + T + (B1 + x) + B0 + (m - 1) * fmax(B1 + x, B0) + norm, 1e-9);
    /* asynchronous, two buffers: the transfers hide behind the ops, but the first each way */
    l.send_buffers = 2;
    T = x + F0 + F1 + (m - 1) * fmax(F0, F1);
    double async = cost_simulate(&j, &l, st, 2, &tie, &sim, NULL);
    CHECK_NEAR("sends: asynchronous GPipe, by hand", async,
               start + T + (B1 + x) + B0 + (m - 1) * fmax(B1, B0) + norm, 1e-9);
    CHECK("sends: blocking costs the sender its transfers", blocking > async + (m - 1) * x * 0.9);
    /* one buffer: the next op writes into the buffer the last send still reads, so it waits
     * for that send's arrival: as a blocking send, here */
    l.send_buffers = 1;
    CHECK_NEAR("sends: one buffer: the next op waits for the last send, as if it blocked",
               cost_simulate(&j, &l, st, 2, &tie, &sim, NULL), blocking, 1e-9);
    /* a link slower than the ops: asynchronous sends queue on it (each direction its own), so
     * m transfers per direction, not 2m, bound the step */
    st[0].next = (struct cost_link){cost_link_bytes(&j) / (10 * F0), 0};
    l.send_buffers = 16;
    double slow = cost_simulate(&j, &l, st, 2, &tie, &sim, NULL);
    /* forward: m transfers of 10 F0 back to back after stage 0's first op; backward likewise
     * after stage 1's last forward and first backward; then stage 0's last backward */
    CHECK_NEAR("sends: a slow link queues each direction on its own (m transfers each way)",
               slow, start + F0 + m * 10 * F0 + F1 + B1 + m * 10 * F0 + B0 + norm, 1e-9);
    cost_links_default(&l);
    l.send_buffers = 1.5;
    CHECK("sends: send_buffers must be an integer",
          cost_links_check(&l, &e) != 0 && strstr(e.msg, "links.send_buffers: must be an integer"));
    cost_sim_free(&sim);
}

/* ---- ties in the split go to the most balanced ---- */

struct split_search {
    struct plan_eval *ev;
    int *units, P, L;
    int cur[8];
    double best_t, best_busy;
    const struct cost_job *cj;
    const struct cost_links *l;
    const double *tflops;
    int ties;
};

static double max_busy(const struct split_search *x, const int *layers)
{
    double worst = 0;
    for (int s = 0; s < x->P; s++) {
        double b = busy(x->cj, x->l, layers[s], x->tflops[s], s, x->P);
        worst = b > worst ? b : worst;
    }
    return worst;
}

/* Every split of the layers: the shortest step, and the most balanced among those as short. */
static void all_splits(struct split_search *x, int s, int left)
{
    if (s == x->P - 1) {
        x->cur[s] = left;
        double t = plan_eval_step(x->ev, x->units, x->cur);
        if (!isfinite(t))
            return;
        double b = max_busy(x, x->cur);
        if (t < x->best_t * (1 - 1e-9)) {
            x->best_t = t;
            x->best_busy = b;
            x->ties = 1;
        } else if (t <= x->best_t * (1 + 1e-9)) {
            x->ties++;
            x->best_busy = b < x->best_busy ? b : x->best_busy;
        }
        return;
    }
    for (int k = 1; k <= left - (x->P - 1 - s); k++) {
        x->cur[s] = k;
        all_splits(x, s + 1, left - k);
    }
}

static void test_balanced_ties(void)
{
    /* three fabrics of two alike GPUs each, TCP between them, asynchronous sends, GPipe: the
     * links bound the step, and many splits are equally fast */
    struct plan_worker w[6];
    worker(&w[0], "a", 1, NIC_INFINIBAND, "ib", 200);
    worker(&w[1], "b", 1, NIC_INFINIBAND, "ib", 200);
    worker(&w[2], "c", 1, NIC_ROCE, "roce", 200);
    worker(&w[3], "d", 1, NIC_ROCE, "roce", 200);
    worker(&w[4], "e", 1, NIC_INFINIBAND, "ib2", 200);
    worker(&w[5], "f", 1, NIC_INFINIBAND, "ib2", 200);
    struct plan_job job;
    plan_job_init(&job);
    job.model = (struct tj_model){.layers = 12, .hidden = 256, .heads = 4, .vocab = 64, .seq_len = 128};
    job.pipeline = 6;
    job.data = 1;
    job.micro_batches = 8;
    job.precision = DTYPE_FP32;
    job.schedule = SCHED_GPIPE;
    struct cost_links l;
    cost_links_default(&l);
    l.send_buffers = 2;
    l.tcp_gbps = 1;
    struct plan p;
    herr e = {0};
    int rc = plan_make(w, 6, &job, &l, &p, &e);
    CHECK_INT("ties: plan", rc, 0);
    if (rc) {
        printf("  %s\n", e.msg);
        return;
    }
    struct plan_eval *ev = plan_eval_new(w, 6, &job, &l, &e);
    int units[6], layers[6];
    double tflops[6];
    for (int s = 0; s < 6; s++) {
        units[s] = p.ranks[plan_rank_of(&p, s, 0, 0)].worker; /* one block per worker */
        layers[s] = p.stages[s].last_layer - p.stages[s].first_layer;
        tflops[s] = p.stages[s].tflops;
    }
    struct cost_job cj = {.model = job.model, .tensor = 1, .data = 1, .micro_batches = 8,
                          .micro_batch_size = 1, .elem_bytes = 4, .schedule = SCHED_GPIPE};
    struct split_search x = {.ev = ev, .units = units, .P = 6, .L = 12, .best_t = INFINITY,
                             .cj = &cj, .l = &l, .tflops = tflops};
    all_splits(&x, 0, 12);
    double mine = max_busy(&x, layers);
    printf("  # %d splits share the shortest step %.6f s; the plan's: %d %d %d %d %d %d\n", x.ties,
           x.best_t, layers[0], layers[1], layers[2], layers[3], layers[4], layers[5]);
    CHECK("ties: some splits are equally fast (the case tests something)", x.ties > 3);
    CHECK_NEAR("ties: the plan's step is the shortest of every split", p.step_s, x.best_t, 1e-9);
    CHECK("ties: among the equally fast, the plan's largest stage is the smallest",
          mine <= x.best_busy * (1 + 1e-9));
    plan_eval_free(ev);
    plan_free(&p);
}

/* Token slices: each slot holds the sliced backward's fp32 accumulator of the q, k, v gradients
 * and, on the first stage, the embeddings' gradient (cuda/gpt_cuda_slices.cu, gpt_pass.c); an
 * explicit tokenSlices is what the search checks memory with, before the bounds exist. Before
 * 2026-11-29 neither was counted: a GPT-2 1.5B job with 4 slices was planned on 26.5 GB GPUs
 * (23.5 GB predicted) where the runtime needs 27.46 GB, and with less memory the plan came back
 * with an infinite step. */
static void test_sliced_memory(void)
{
    struct cost_job j = {.model = {.layers = 48, .hidden = 1600, .heads = 25, .vocab = 50257, .seq_len = 1024},
                         .tensor = 1, .data = 2, .micro_batches = 8, .micro_batch_size = 4,
                         .elem_bytes = 2, .schedule = SCHED_1F1B};
    struct cost_memory whole, sliced, asked;
    cost_stage_memory_parts(&j, 25, 0, 2, &whole);
    int bounds[5] = {0, 256, 512, 768, 1024};
    j.slices = 4;
    j.slice_bounds = bounds;
    cost_stage_memory_parts(&j, 25, 0, 2, &sliced);
    j.slices = 0;
    j.slice_bounds = NULL;
    j.mem_slices = 4;
    cost_stage_memory_parts(&j, 25, 0, 2, &asked);
    double BTC = 4.0 * 1024 * 1600;
    CHECK_INT("sliced memory: 2 slots either way (this shape)", sliced.slots * 10 + whole.slots, 22);
    CHECK_NEAR("sliced memory: each slot's accumulators", sliced.activations - whole.activations,
               2 * (25 * 3 * BTC * 4 + BTC * 2), 1);
    CHECK_NEAR("sliced memory: the count asked for is what the bounds give", asked.total,
               sliced.total, 0);
    CHECK("sliced memory: as the audit's runtime count (27.46 GB)",
          fabs(sliced.total / 1e9 - 27.46) < 0.01);
    /* through the planner: four GPUs of 26.5 GB refuse it, 32 GB plan it and report it */
    struct plan_worker w[4];
    struct plan_job job;
    plan_job_init(&job);
    job.model = j.model;
    job.pipeline = 2;
    job.data = 2;
    job.micro_batches = 8;
    job.micro_batch_size = 4;
    job.token_slices = 4;
    struct cost_links l;
    cost_links_default(&l);
    struct plan p;
    herr e = {0};
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", i);
        worker(&w[i], name, 1, NIC_INFINIBAND, "ib", 200);
        w[i].memory_gb = 26.5;
    }
    int rc = plan_make(w, 4, &job, &l, &p, &e);
    CHECK("sliced memory: 26.5 GB GPUs refused, naming memory",
          rc != 0 && strstr(e.msg, "nothing fits") != NULL);
    if (rc == 0)
        plan_free(&p);
    for (int i = 0; i < 4; i++)
        w[i].memory_gb = 32;
    rc = plan_make(w, 4, &job, &l, &p, &e);
    CHECK_INT("sliced memory: 32 GB GPUs plan it", rc, 0);
    if (rc == 0) {
        CHECK("sliced memory: a finite step", isfinite(p.step_s) && p.slices == 4);
        j.mem_slices = 0;
        j.slices = 4;
        j.slice_bounds = p.slice_bounds;
        int ok = 1;
        for (int s = 0; s < 2; s++)
            ok &= fabs(p.stages[s].memory_gb * 1e9 -
                       cost_stage_memory(&j, p.stages[s].last_layer - p.stages[s].first_layer, s, 2)) < 1;
        CHECK("sliced memory: the stages report what the slices need", ok);
        plan_free(&p);
    }
}

/* ---- memory ---- */

static void test_memory(void)
{
    CHECK_INT("memory: GPipe holds every micro-batch", pipe_slots(SCHED_GPIPE, 1, 4, 16, 1, 0), 16);
    CHECK_INT("memory: 1F1B holds P - s", pipe_slots(SCHED_1F1B, 1, 4, 16, 1, 0), 3);
    CHECK_INT("memory: 1F1B, fewer micro-batches than stages", pipe_slots(SCHED_1F1B, 0, 8, 4, 1, 0), 4);
    /* S = 4 slices, stage 0 of 4: warm-up 3 + 3 = 6 units, ceil((6 + 7) / 4) = 3 slots */
    CHECK_INT("memory: 1F1B with token slices (pipeline.c's rule)", pipe_slots(SCHED_1F1B, 0, 4, 16, 4, 0), 3);
    CHECK_INT("memory: last stage, slices", pipe_slots(SCHED_1F1B, 3, 4, 16, 4, 0), 2);
    struct cost_job j = {.model = {.layers = 8, .hidden = 1024, .heads = 16, .vocab = 32000, .seq_len = 512},
                         .tensor = 2, .data = 4, .micro_batches = 8, .micro_batch_size = 2,
                         .elem_bytes = 2, .schedule = SCHED_1F1B};
    struct cost_memory m;
    cost_stage_memory_parts(&j, 3, 0, 2, &m);
    /* the split tensors halve (the matrices, qkv's and fc's biases, wte); the LayerNorms, the
     * row-parallel biases and wpe are whole on each rank (gpt.c build_layout) */
    double params = (3 * (12.0 * 1024 * 1024 + 7 * 1024) + 32000.0 * 1024) / 2 +
                    3 * 6.0 * 1024 + 512.0 * 1024;
    CHECK_NEAR("memory: parameters per GPU (the tensor split)", m.params, params, 1e-12);
    /* the engine's allocation (gpt_cuda.cu; memory_model.py holds the engine part against its own
     * count): fp32 parameters and gradients and the bf16 copy, the trainer's moments of its shard */
    CHECK_NEAR("memory: fp32 weights and gradients and the bf16 copy, 10 bytes a parameter",
               m.weights_grads, 10 * params, 1e-12);
    CHECK_NEAR("memory: the moments of the shard, 8 bytes a parameter over data 4", m.optimizer,
               8 * params / 4, 1e-12);
    /* per layer: 4 + 12/t activations of B x T x C in bf16, the LayerNorm statistics and flash
     * attention's (head size 64: no T x T scores); per micro-batch the input and the tokens */
    double BT = 2.0 * 512, BTC = BT * 1024;
    double act = BTC * (4 + 12.0 / 2) * 2 + 16 * BT + 16.0 / 2 * BT * 4;
    CHECK_NEAR("memory: activations of min(P - s, m) = 2 micro-batches, 3 layers", m.activations,
               2 * (3 * act + BTC * 2 + 20 * BT), 1e-12);
    CHECK("memory: the parts make the total",
          m.slots == 2 && m.logits == 0 && m.scratch > 32 << 20 &&
              m.pipeline == 3 * BTC * 2 + 32000.0 * 1024 / 2 * 4 * 2 && /* + the tie's out, in */
              fabs(m.total - (m.weights_grads + m.optimizer + m.activations + m.scratch +
                              m.pipeline)) < 1);
    j.gather_masters = 1;
    struct cost_memory mg;
    cost_stage_memory_parts(&j, 3, 0, 2, &mg);
    CHECK_NEAR("memory: a bf16 parameter gather adds the shard's fp32 masters and a bf16 wire",
               mg.optimizer - m.optimizer, 4 * params / 4 + 2 * params, 1e-12);
    j.model.heads = 32, j.model.hidden = 1536; /* head size 48: no flash attention, T x T kept */
    cost_stage_memory_parts(&j, 3, 0, 2, &mg);
    double scores = 16.0 * 2 * 512 * 512 * 2; /* heads / t x B x T x T, bf16 */
    CHECK("memory: head size 48 keeps each layer's T x T scores", mg.activations > 2 * 3 * scores);
    j.model.hidden = 1024, j.model.heads = 16, j.gather_masters = 0;

    /* a pinned split that does not fit: refused naming the stage and both byte counts */
    struct plan_worker w[2];
    worker(&w[0], "a", 1, NIC_INFINIBAND, "ib-a", 100);
    worker(&w[1], "b", 1, NIC_INFINIBAND, "ib-a", 100);
    struct plan_job job;
    plan_job_init(&job);
    job.model = (struct tj_model){.layers = 24, .hidden = 2048, .heads = 16, .vocab = 50257, .seq_len = 2048};
    job.pipeline = 2;
    job.data = 1;
    job.micro_batches = 8;
    int pin[2] = {20, 4};
    job.pinned = pin;
    job.n_pinned = 2;
    struct cost_links l;
    cost_links_default(&l);
    struct cost_job cj = {.model = job.model, .tensor = 1, .data = 1, .micro_batches = 8,
                          .micro_batch_size = 1, .elem_bytes = 2, .schedule = SCHED_1F1B};
    /* GPUs that hold 12 + 12 layers (the larger stage with 5 % to spare), not 20 + 4 */
    double need12 = fmax(cost_stage_memory(&cj, 12, 0, 2), cost_stage_memory(&cj, 12, 1, 2));
    w[0].memory_gb = w[1].memory_gb = round(need12 * 1.05 / 0.9 / 1e9);
    double have = w[0].memory_gb * 0.9e9;
    CHECK("memory: (20 layers on stage 0 need more than there is)",
          cost_stage_memory(&cj, 20, 0, 2) > have && need12 < have);
    struct plan p;
    herr e = {0};
    int rc = plan_make(w, 2, &job, &l, &p, &e);
    char want[96], there[96];
    snprintf(want, sizeof want, "(%.0f bytes:", cost_stage_memory(&cj, 20, 0, 2));
    snprintf(there, sizeof there, "its GPUs have %.2f GB (%.0f bytes", have / 1e9, have);
    CHECK("memory: a pinned split too big is refused naming stage 0, its bytes and the GPUs'",
          rc != 0 && strstr(e.msg, "stage 0 (layers [0, 20)") && strstr(e.msg, want) &&
              strstr(e.msg, there));
    if (rc == 0)
        plan_free(&p);
    else
        printf("  %s\n", e.msg);
    job.pinned = NULL;
    job.n_pinned = 0;
    rc = plan_make(w, 2, &job, &l, &p, &e);
    CHECK_INT("memory: unpinned, a split that fits is found", rc, 0);
    if (rc == 0) {
        int fits = 1;
        for (int s = 0; s < 2; s++)
            fits &= p.stages[s].memory_gb * 1e9 <= have;
        CHECK("memory: every stage fits", fits);
        plan_free(&p);
    }
}

/* ---- the three-fabric case ---- */

static void test_three_fabrics(void)
{
    struct cluster cl;
    struct tj_job tj;
    herr e = {0};
    if (cluster_load("tests/fixtures/planner/three-fabrics-8.yaml", &cl, &e) ||
        planner_load_job("tests/fixtures/planner/three-fabrics-8-job.yaml", &tj, &e)) {
        TEST_FAIL("three fabrics: fixtures load", "%s", e.msg);
        return;
    }
    struct plan_job job;
    planner_job_from_spec(&tj.spec, &job);
    struct plan p;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = planner_apply_spec(&tj.spec, cl.workers, cl.n_workers, &cl.links, &e) ||
             plan_make(cl.workers, cl.n_workers, &job, &cl.links, &p, &e);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_INT("three fabrics: plan", rc, 0);
    if (rc == 0) {
        printf("  # planned in %.3f s (by eye: < 1 s)\n",
               (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
        int most = 0, ib_links = 0;
        for (int s = 0; s < p.n_stages; s++) {
            int k = p.stages[s].last_layer - p.stages[s].first_layer;
            most = k > most ? k : most;
            printf("  # stage %d: %s, %d layers\n", s, p.stages[s].fabric, k);
        }
        CHECK("three fabrics: pipeline 8 x data 1", p.pipeline == 8 && p.data == 1);
        /* every GPU alike: the balanced split has 5 layers a stage */
        CHECK("three fabrics: the largest stage within one layer of the balanced 5", most <= 6);
        for (int s = 0; s + 1 < p.pipeline; s++) {
            struct plan_boundary b;
            plan_boundary_links(&p, s, &b);
            int ib = !strcmp(p.stages[s].fabric, "ib-a") && !strcmp(p.stages[s + 1].fabric, "ib-a");
            if (ib)
                ib_links += b.n[TRANSPORT_IB] == 8;
        }
        CHECK_INT("three fabrics: the links between the IB stages go over IB, all 8 each", ib_links, 2);
        plan_free(&p);
    } else {
        printf("  %s\n", e.msg);
    }
    cluster_free(&cl);
    tj_job_free(&tj);
}

/* ---- two workers on one node: loopback TCP between CPU ranks, NVLink between GPUs ---- */

/* The Gb/s and seconds of the first boundary's link for two workers named a and b with `gpus`
 * each, on nodes na and nb; -1 when it does not plan */
static double node_pair_link(int gpus, const char *na, const char *nb, const struct cost_links *l,
                             double *link_s)
{
    struct plan_worker w[2];
    worker(&w[0], "a", gpus, NIC_ETHERNET, "eth", 25);
    worker(&w[1], "b", gpus, NIC_ETHERNET, "eth", 25);
    snprintf(w[0].node, sizeof w[0].node, "%s", na);
    snprintf(w[1].node, sizeof w[1].node, "%s", nb);
    struct plan_job job;
    two_stage_job(&job, 1, 1);
    job.precision = DTYPE_FP32;
    job.schedule = SCHED_GPIPE;
    struct plan p;
    herr e = {0};
    if (plan_make(w, 2, &job, l, &p, &e)) {
        printf("  %s\n", e.msg);
        return -1;
    }
    double g = p.groups[p.link_group0].gbps;
    *link_s = p.stages[0].link_s;
    plan_free(&p);
    return g;
}

static void test_node_links(void)
{
    struct cost_links l;
    cost_links_default(&l);
    double bytes = 256.0 * 512 * 4, s;
    /* two CPU workers' processes on one node send over loopback TCP: loopback_gbps and its
     * latency, not the 2,400 Gb/s of NVLink */
    double g = node_pair_link(0, "n1", "n1", &l, &s);
    CHECK_NEAR("node: CPU workers on one node priced at loopback_gbps", g, l.loopback_gbps, 1e-12);
    CHECK_NEAR("node: a micro-batch over loopback: bytes / 10 Gb/s + 100 us", s,
               bytes / (l.loopback_gbps * 1e9 / 8) + l.loopback_latency_us * 1e-6, 1e-12);
    l.loopback_gbps = 40;
    g = node_pair_link(0, "n1", "n1", &l, &s);
    CHECK_NEAR("node: loopback_gbps is what prices it (40)", g, 40, 1e-12);
    /* GPU workers on one node: NVLink / shared memory */
    g = node_pair_link(1, "n1", "n1", &l, &s);
    CHECK_NEAR("node: GPU workers on one node at intra_node_gbps", g, l.intra_node_gbps, 1e-12);
    /* CPU workers on two nodes: their NICs over TCP (25 Gb/s x tcp_efficiency 0.8) */
    g = node_pair_link(0, "n1", "n2", &l, &s);
    CHECK_NEAR("node: CPU workers on two nodes at their NICs over TCP", g, 25 * l.tcp_efficiency, 1e-12);
}

int main(void)
{
    test_link_groups();
    test_link_price();
    test_tcp_per_worker();
    test_send_modes();
    test_balanced_ties();
    test_memory();
    test_sliced_memory();
    test_three_fabrics();
    test_node_links();
    TEST_MAIN_END();
}
