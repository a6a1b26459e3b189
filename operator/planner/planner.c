#include "planner.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

void plan_job_init(struct plan_job *j)
{
    memset(j, 0, sizeof *j);
    j->tensor = 1;
    j->micro_batches = 1;
    j->micro_batch_size = 1;
    j->precision = DTYPE_BF16;
    j->pipeline_dtype = DTYPE_FP32;
    j->param_gather_dtype = DTYPE_FP32;
    j->schedule = SCHED_1F1B;
    j->policy = POLICY_HOLMES;
}

/* ---- input checks ---- */

static int worker_devices(const struct plan_worker *w)
{
    return w->gpus > 0 ? w->gpus : 1;
}

long plan_devices(const struct plan_worker *workers, int n_workers)
{
    long d = 0;
    for (int i = 0; i < n_workers; i++)
        d += worker_devices(&workers[i]);
    return d;
}

static int cmp_str_idx(const void *a, const void *b, void *ctx)
{
    const struct plan_worker *w = ctx;
    return strcmp(w[*(const int *)a].name, w[*(const int *)b].name);
}

int plan_check_input(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
                     herr *e)
{
    if (n_workers < 1)
        return herr_set(e, "workers: at least one worker is required");
    if (n_workers > (1 << 20))
        return herr_set(e, "workers: at most %d workers are supported", 1 << 20);
    for (int i = 0; i < n_workers; i++) {
        const struct plan_worker *w = &workers[i];
        if (!w->name[0])
            return herr_set(e, "workers[%d].name: must be a non-empty string", i);
        if (w->gpus < 0 || w->gpus > 1024)
            return herr_set(e, "workers[%d] (%s).gpus: must be an integer in [0, 1024]", i, w->name);
        if (!isfinite(w->tflops) || w->tflops <= 0 || w->tflops > 1e6)
            return herr_set(e, "workers[%d] (%s).gpu_tflops: must be a number in (0, 1000000]", i,
                            w->name);
        if (!w->nic.fabric[0])
            return herr_set(e, "workers[%d] (%s).nic: a NIC report with a fabric is required", i,
                            w->name);
        if (!isfinite(w->nic.gbps) || w->nic.gbps <= 0)
            return herr_set(e, "workers[%d] (%s).nic.gbps: bandwidth must be > 0", i, w->name);
    }
    int *idx = malloc(sizeof(int) * (size_t)n_workers);
    if (!idx)
        return herr_set(e, "planner: out of memory");
    for (int i = 0; i < n_workers; i++)
        idx[i] = i;
    qsort_r(idx, (size_t)n_workers, sizeof(int), cmp_str_idx, (void *)workers);
    for (int i = 1; i < n_workers; i++) {
        if (!strcmp(workers[idx[i]].name, workers[idx[i - 1]].name)) {
            int a = idx[i - 1] < idx[i] ? idx[i - 1] : idx[i], b = idx[i - 1] ^ idx[i] ^ a;
            herr_set(e, "workers[%d].name: duplicate name \"%s\" (also workers[%d]); names must "
                     "be unique", b, workers[b].name, a);
            free(idx);
            return -1;
        }
    }
    free(idx);

    const struct plan_model *m = &job->model;
    if (m->layers < 1 || m->layers > 100000)
        return herr_set(e, "model.layers: must be an integer in [1, 100000]");
    if (m->hidden < 1 || m->heads < 1 || m->vocab < 1 || m->seq < 1)
        return herr_set(e, "model: layers, hidden, heads, vocab and seq must all be >= 1");
    if (m->hidden % m->heads)
        return herr_set(e, "model.hidden: %d is not divisible by model.heads %d", m->hidden,
                        m->heads);
    if (job->tensor < 1)
        return herr_set(e, "parallelism.tensor: must be >= 1");
    if (m->heads % job->tensor)
        return herr_set(e, "parallelism.tensor: %d does not divide model heads %d", job->tensor,
                        m->heads);
    if (job->pipeline < 0 || job->data < 0)
        return herr_set(e, "parallelism: pipeline and data must be >= 1 or auto");
    if (job->pipeline > m->layers)
        return herr_set(e, "parallelism.pipeline: %d stages exceed model layers %d (every stage "
                        "needs at least one layer)", job->pipeline, m->layers);
    if (job->micro_batches < 1 || job->micro_batch_size < 1)
        return herr_set(e, "parallelism: microBatches and microBatchSize must be >= 1");
    if (job->schedule == SCHED_1F1B && job->pipeline && job->micro_batches < job->pipeline)
        return herr_set(e, "parallelism.microBatches: %d is fewer than pipeline %d stages (1f1b "
                        "needs at least one micro-batch per stage)", job->micro_batches,
                        job->pipeline);
    if (job->micro_batches > 65536 || job->micro_batch_size > 65536)
        return herr_set(e, "parallelism: microBatches and microBatchSize must be <= 65536");
    for (int i = 0; i < n_workers; i++)
        if (worker_devices(&workers[i]) % job->tensor)
            return herr_set(e, "parallelism.tensor: %d does not divide the %d device(s) of worker "
                            "%s (tensor groups stay inside one worker)", job->tensor,
                            worker_devices(&workers[i]), workers[i].name);
    long dev = plan_devices(workers, n_workers);
    if (dev > (1L << 24))
        return herr_set(e, "workers: %ld devices; the planner handles at most %ld", dev, 1L << 24);
    long units = dev / job->tensor;
    if (job->pipeline && job->data && (long)job->tensor * job->pipeline * job->data != dev)
        return herr_set(e, "parallelism: tensor %d x pipeline %d x data %d = %ld must equal the "
                        "cluster's %ld devices", job->tensor, job->pipeline, job->data,
                        (long)job->tensor * job->pipeline * job->data, dev);
    if (job->pipeline && units % job->pipeline)
        return herr_set(e, "parallelism.pipeline: %d does not divide the %ld tensor groups (%ld "
                        "devices / tensor %d)", job->pipeline, units, dev, job->tensor);
    if (job->data && units % job->data)
        return herr_set(e, "parallelism.data: %d does not divide the %ld tensor groups (%ld "
                        "devices / tensor %d)", job->data, units, dev, job->tensor);
    if (job->data && !job->pipeline && units / job->data > m->layers)
        return herr_set(e, "parallelism.data: %d leaves %ld stages, more than model layers %d",
                        job->data, units / job->data, m->layers);
    if (job->pinned) {
        long sum = 0;
        if (job->pipeline && job->n_pinned != job->pipeline)
            return herr_set(e, "placement.partition: %d stages pinned but pipeline is %d",
                            job->n_pinned, job->pipeline);
        if (!job->pipeline && (job->n_pinned < 1 || units % job->n_pinned))
            return herr_set(e, "placement.partition: %d stages pinned do not divide the %ld "
                            "tensor groups", job->n_pinned, units);
        for (int s = 0; s < job->n_pinned; s++) {
            if (job->pinned[s] < 1)
                return herr_set(e, "placement.partition[%d]: every stage needs at least one "
                                "layer", s);
            sum += job->pinned[s];
        }
        if (sum != m->layers)
            return herr_set(e, "placement.partition: pinned layers sum to %ld, model has %d",
                            sum, m->layers);
    }
    return 0;
}

/* ---- evaluation of one placement ---- */

struct unit {
    int worker, local;   /* first device */
    int fabric;          /* index into ev->fabric_names */
    int cls;             /* enum nic_class */
    int node;            /* node index */
    int klass;           /* interchangeable units share a class */
    double gbps, tflops;
    double mem;          /* bytes per device, INFINITY when unknown */
};

struct plan_eval {
    const struct plan_worker *workers;
    int n_workers;
    struct cost_links links;
    struct cost_job cj;
    enum policy policy;
    int P, D, t, L;
    int capP;              /* stages the buffers hold */
    int fast;              /* partition by the dynamic programme only (no refinement) */
    int n_units, n_fabrics, n_classes;
    struct unit *units;
    const char **fabric_names;
    int *fabric_rank;      /* preference order of each fabric (0 = best) */
    int *worker_count;     /* scratch: units of a worker in the current stage */
    int *gw_in;            /* scratch, n_fabrics: ring flows entering each fabric's gateway */
    int *gw_a, *gw_b;      /* scratch, n_fabrics: pair flows entering each fabric (a, b side) */
    struct cost_stage *stages;
    struct cost_link tie;
    struct cost_sim sim;
    double *table;         /* partition table: P * (L + 1) */
    int *choice;           /* P * (L + 1) */
    int *layers;           /* P */
    int *best_layers;      /* P */
};

static int cmp_fabric_pref(const void *a, const void *b, void *ctx)
{
    const struct plan_eval *ev = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    /* best class first, then the fastest NIC of the fabric, then the name */
    const struct unit *ux = NULL, *uy = NULL;
    for (int u = 0; u < ev->n_units && (!ux || !uy); u++) {
        if (ev->units[u].fabric == x && !ux)
            ux = &ev->units[u];
        if (ev->units[u].fabric == y && !uy)
            uy = &ev->units[u];
    }
    if (ux->cls != uy->cls)
        return uy->cls - ux->cls;
    if (ux->gbps != uy->gbps)
        return ux->gbps < uy->gbps ? 1 : -1;
    return strcmp(ev->fabric_names[x], ev->fabric_names[y]);
}

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
    const char **names = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(names[x], names[y]);
    return c ? c : x - y;
}

/* ids[i] for names[0..n): equal names share an id, ids numbered in order of first appearance.
 * O(n log n). Returns -1 on out-of-memory. */
static int ids_by_name(const char **names, int n, int *ids, int *n_ids)
{
    int *idx = malloc(sizeof(int) * (size_t)n), *leader = malloc(sizeof(int) * (size_t)n);
    if (!idx || !leader) {
        free(idx);
        free(leader);
        return -1;
    }
    for (int i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof(int), cmp_name_idx, (void *)names);
    for (int k = 0; k < n; k++)
        leader[idx[k]] = (k > 0 && !strcmp(names[idx[k]], names[idx[k - 1]])) ? leader[idx[k - 1]]
                                                                             : idx[k];
    *n_ids = 0;
    for (int i = 0; i < n; i++)
        ids[i] = leader[i] == i ? (*n_ids)++ : ids[leader[i]];
    free(idx);
    free(leader);
    return 0;
}

void plan_eval_free(struct plan_eval *ev)
{
    if (!ev)
        return;
    free(ev->units);
    free(ev->fabric_names);
    free(ev->fabric_rank);
    free(ev->worker_count);
    free(ev->gw_in);
    free(ev->gw_a);
    free(ev->gw_b);
    free(ev->stages);
    free(ev->table);
    free(ev->choice);
    free(ev->layers);
    free(ev->best_layers);
    cost_sim_free(&ev->sim);
    free(ev);
}

/* Sets up the units (tensor blocks) and fabrics; P/D/micro-batches are set by eval_shape. */
static struct plan_eval *eval_new(const struct plan_worker *workers, int n_workers,
                                  const struct plan_job *job, const struct cost_links *links,
                                  herr *e)
{
    struct plan_eval *ev = calloc(1, sizeof *ev);
    if (!ev) {
        herr_set(e, "planner: out of memory");
        return NULL;
    }
    ev->workers = workers;
    ev->n_workers = n_workers;
    ev->links = *links;
    ev->policy = job->policy;
    ev->t = job->tensor;
    ev->L = job->model.layers;
    long dev = plan_devices(workers, n_workers);
    ev->n_units = (int)(dev / job->tensor);
    ev->units = calloc((size_t)ev->n_units, sizeof *ev->units);
    ev->fabric_names = calloc((size_t)n_workers, sizeof *ev->fabric_names);
    ev->worker_count = calloc((size_t)n_workers, sizeof *ev->worker_count);
    const char **nodes = calloc((size_t)n_workers, sizeof *nodes);
    int *wfab = calloc((size_t)n_workers, sizeof *wfab), *wnode = calloc((size_t)n_workers,
                                                                           sizeof *wnode);
    if (!ev->units || !ev->fabric_names || !ev->worker_count || !nodes || !wfab || !wnode) {
        herr_set(e, "planner: out of memory for %d workers", n_workers);
        goto fail;
    }
    for (int w = 0; w < n_workers; w++)
        ev->fabric_names[w] = workers[w].nic.fabric;
    for (int w = 0; w < n_workers; w++)
        nodes[w] = workers[w].node[0] ? workers[w].node : workers[w].name;
    int n_nodes = 0;
    if (ids_by_name(nodes, n_workers, wnode, &n_nodes) ||
        ids_by_name(ev->fabric_names, n_workers, wfab, &ev->n_fabrics)) {
        herr_set(e, "planner: out of memory for %d workers", n_workers);
        goto fail;
    }
    /* fabric_names[f]: the name of fabric f */
    for (int w = 0; w < n_workers; w++)
        ev->fabric_names[wfab[w]] = workers[w].nic.fabric;
    int u = 0;
    for (int w = 0; w < n_workers; w++) {
        for (int l = 0; l < worker_devices(&workers[w]); l += job->tensor) {
            struct unit *x = &ev->units[u++];
            x->worker = w;
            x->local = l;
            x->fabric = wfab[w];
            x->cls = (int)workers[w].nic.cls;
            x->node = wnode[w];
            x->gbps = workers[w].nic.gbps;
            x->tflops = workers[w].tflops;
            x->mem = workers[w].memory_gb > 0 ? workers[w].memory_gb * 1e9 * 0.9 : INFINITY;
        }
    }
    /* classes: same fabric, class, Gb/s, TFLOPS and devices per worker */
    for (int i = 0; i < ev->n_units; i++) {
        struct unit *x = &ev->units[i];
        x->klass = -1;
        for (int k = i - 1; k >= 0 && k >= i - 64; k--) {
            const struct unit *y = &ev->units[k];
            if (y->fabric == x->fabric && y->cls == x->cls && y->gbps == x->gbps &&
                y->tflops == x->tflops &&
                worker_devices(&workers[y->worker]) == worker_devices(&workers[x->worker])) {
                x->klass = y->klass;
                break;
            }
        }
        if (x->klass < 0)
            x->klass = ev->n_classes++;
    }
    ev->fabric_rank = calloc((size_t)ev->n_fabrics, sizeof *ev->fabric_rank);
    ev->gw_in = calloc((size_t)ev->n_fabrics, sizeof *ev->gw_in);
    ev->gw_a = calloc((size_t)ev->n_fabrics, sizeof *ev->gw_a);
    ev->gw_b = calloc((size_t)ev->n_fabrics, sizeof *ev->gw_b);
    int *order = calloc((size_t)ev->n_fabrics, sizeof *order);
    if (!ev->fabric_rank || !ev->gw_in || !ev->gw_a || !ev->gw_b || !order) {
        free(order);
        herr_set(e, "planner: out of memory");
        goto fail;
    }
    for (int f = 0; f < ev->n_fabrics; f++)
        order[f] = f;
    qsort_r(order, (size_t)ev->n_fabrics, sizeof(int), cmp_fabric_pref, ev);
    for (int r = 0; r < ev->n_fabrics; r++)
        ev->fabric_rank[order[r]] = r;
    free(order);
    free(nodes);
    free(wfab);
    free(wnode);
    ev->cj.layers = job->model.layers;
    ev->cj.hidden = job->model.hidden;
    ev->cj.heads = job->model.heads;
    ev->cj.vocab = job->model.vocab;
    ev->cj.seq = job->model.seq;
    ev->cj.tensor = job->tensor;
    ev->cj.elem_bytes = job->precision == DTYPE_FP32 ? 4 : 2;
    ev->cj.act_elem_bytes = job->pipeline_dtype == DTYPE_BF16 ? 2 : ev->cj.elem_bytes;
    ev->cj.gather_elem_bytes = job->param_gather_dtype == DTYPE_BF16 ? 2 : ev->cj.elem_bytes;
    ev->cj.schedule = job->schedule;
    return ev;
fail:
    free(nodes);
    free(wfab);
    free(wnode);
    plan_eval_free(ev);
    return NULL;
}

/* Sets pipeline, data and micro-batching; (re)allocates the per-stage buffers. */
static int eval_shape(struct plan_eval *ev, int P, int D, int m, int b, herr *e)
{
    ev->cj.data = D;
    ev->cj.micro_batches = m;
    ev->cj.micro_batch_size = b;
    if ((double)P * (ev->L + 1) > 5e7 || (double)P * m > 5e7)
        return herr_set(e, "planner: %d stages x %d layers x %d micro-batches is beyond what "
                        "the planner handles (stages x layers and stages x micro-batches must "
                        "stay under 50 million)", P, ev->L, m);
    if (P > ev->capP || m > ev->sim.cap_mb) {
        int cap = P > ev->capP ? P : ev->capP;
        int capm = m > ev->sim.cap_mb ? m : ev->sim.cap_mb;
        free(ev->stages);
        free(ev->table);
        free(ev->choice);
        free(ev->layers);
        free(ev->best_layers);
        cost_sim_free(&ev->sim);
        ev->stages = calloc((size_t)cap, sizeof *ev->stages);
        ev->table = malloc(sizeof(double) * (size_t)cap * (size_t)(ev->L + 1));
        ev->choice = malloc(sizeof(int) * (size_t)cap * (size_t)(ev->L + 1));
        ev->layers = calloc((size_t)cap, sizeof(int));
        ev->best_layers = calloc((size_t)cap, sizeof(int));
        if (!ev->stages || !ev->table || !ev->choice || !ev->layers || !ev->best_layers)
            return herr_set(e, "planner: out of memory for %d stages", cap);
        if (cost_sim_init(&ev->sim, cap, capm, e))
            return -1;
        ev->capP = cap;
    }
    ev->P = P;
    ev->D = D;
    return 0;
}

/* The link between two units for an activation or gradient transfer. `flows`: transfers that
 * share the NICs; `gw`: transfers that enter b's fabric through its gateway at the same time
 * (links.gateway_gbps, cross-fabric only). */
static struct cost_link nic_link(const struct plan_eval *ev, const struct unit *a,
                                 const struct unit *b, double flows, int gw)
{
    const struct cost_links *l = &ev->links;
    double g = a->gbps < b->gbps ? a->gbps : b->gbps;
    int cls = a->cls < b->cls ? a->cls : b->cls;
    if (a->fabric == b->fabric && cls != NIC_ETHERNET && ev->policy != POLICY_ETHERNET)
        return cost_link_make(g * l->rdma_efficiency,
                              cls == NIC_INFINIBAND ? l->ib_latency_us : l->roce_latency_us, flows);
    g *= l->tcp_efficiency;
    if (a->fabric != b->fabric && l->tcp_gbps < g)
        g = l->tcp_gbps;
    struct cost_link k = cost_link_make(g, l->tcp_latency_us, flows);
    if (a->fabric != b->fabric && l->gateway_gbps > 0) {
        struct cost_link share = cost_link_make(l->gateway_gbps, l->tcp_latency_us, gw);
        if (share.bw < k.bw)
            k.bw = share.bw;
    }
    return k;
}

static struct cost_link pair_link(const struct plan_eval *ev, const struct unit *a,
                                  const struct unit *b, double flows, int gw)
{
    if (a->node == b->node)
        return cost_link_make(ev->links.intra_node_gbps, ev->links.intra_node_latency_us, 1);
    return nic_link(ev, a, b, flows, gw);
}

/* Counts in ev->gw_in the flows that cross into each fabric during the step's data-parallel
 * phase, when every stage's gradient ring runs at once: each ring hop d -> d+1 between
 * fabrics. (The embedding tie, small, is charged its share but not counted against the rings.) */
static void count_dp_gateway_flows(struct plan_eval *ev, int P, const int *stage_units)
{
    int D = ev->D;
    memset(ev->gw_in, 0, sizeof *ev->gw_in * (size_t)ev->n_fabrics);
    for (int s = 0; s < P && D > 1; s++) {
        const int *su = stage_units + (size_t)s * D;
        for (int d = 0; d < D; d++) {
            const struct unit *a = &ev->units[su[d]], *b = &ev->units[su[(d + 1) % D]];
            if (a->fabric != b->fabric && a->node != b->node)
                ev->gw_in[b->fabric]++;
        }
    }
}

/* Transfers between the units a[d] and b[d] (d < D) that cross fabrics all at once: counts in
 * ev->gw_a (ev->gw_b) those entering each fabric of an a (b) unit, i.e. b -> a (a -> b). */
static void count_pair_gateway_flows(struct plan_eval *ev, const int *a, const int *b)
{
    memset(ev->gw_a, 0, sizeof *ev->gw_a * (size_t)ev->n_fabrics);
    memset(ev->gw_b, 0, sizeof *ev->gw_b * (size_t)ev->n_fabrics);
    for (int d = 0; d < ev->D; d++) {
        const struct unit *x = &ev->units[a[d]], *y = &ev->units[b[d]];
        if (x->fabric == y->fabric || x->node == y->node)
            continue;
        ev->gw_a[x->fabric]++;
        ev->gw_b[y->fabric]++;
    }
}

/* The busier direction of the pair a -> b, plus `extra[f]` flows already on each gateway. */
static int pair_gateway_share(const struct plan_eval *ev, const struct unit *a,
                              const struct unit *b, const int *extra)
{
    int in_b = ev->gw_b[b->fabric] + (extra ? extra[b->fabric] : 0);
    int in_a = ev->gw_a[a->fabric] + (extra ? extra[a->fabric] : 0);
    return in_a > in_b ? in_a : in_b;
}

static struct cost_link min_link(struct cost_link a, struct cost_link b)
{
    struct cost_link r;
    r.bw = a.bw < b.bw ? a.bw : b.bw;
    r.lat = a.lat > b.lat ? a.lat : b.lat;
    return r;
}

/* Most units of one worker in the stage: they share its NIC. */
static int stage_flows(struct plan_eval *ev, const int *su)
{
    int mx = 1;
    for (int d = 0; d < ev->D; d++) {
        int c = ++ev->worker_count[ev->units[su[d]].worker];
        if (c > mx)
            mx = c;
    }
    for (int d = 0; d < ev->D; d++)
        ev->worker_count[ev->units[su[d]].worker] = 0;
    return mx;
}

/* Fills ev->stages[0..P) (all but layers) from stage_units. */
static void eval_links(struct plan_eval *ev, int P, const int *stage_units)
{
    int D = ev->D;
    int gateway = ev->links.gateway_gbps > 0;
    if (gateway)
        count_dp_gateway_flows(ev, P, stage_units);
    for (int s = 0; s < P; s++) {
        const int *su = stage_units + (size_t)s * D;
        struct cost_stage *st = &ev->stages[s];
        const struct unit *u0 = &ev->units[su[0]];
        double tf = u0->tflops, mem = u0->mem;
        int same_node = 1;
        struct cost_link dp = {INFINITY, 0};
        for (int d = 0; d < D; d++) {
            const struct unit *x = &ev->units[su[d]];
            if (x->tflops < tf)
                tf = x->tflops;
            if (x->mem < mem)
                mem = x->mem;
            if (x->node != u0->node)
                same_node = 0;
        }
        if (D > 1 && same_node) {
            dp = pair_link(ev, u0, u0, 1, 1);
        } else if (D > 1) {
            /* ring in replica order; every hop is costed at the NICs (a hop inside a node is
             * faster, but the ring still leaves each node once) */
            for (int d = 0; d < D; d++) {
                const struct unit *b = &ev->units[su[(d + 1) % D]];
                dp = min_link(dp, nic_link(ev, &ev->units[su[d]], b, ev->t,
                                           gateway ? ev->gw_in[b->fabric] : 1));
            }
        }
        st->tflops = tf;
        st->mem_bytes = mem;
        st->dp = dp;
        if (s < P - 1) {
            const int *sn = su + D;
            double flows = stage_flows(ev, su);
            struct cost_link nx = {INFINITY, 0};
            if (gateway)
                count_pair_gateway_flows(ev, su, sn);
            for (int d = 0; d < D; d++) {
                const struct unit *x = &ev->units[su[d]], *y = &ev->units[sn[d]];
                nx = min_link(nx, pair_link(ev, x, y, flows,
                                            gateway ? pair_gateway_share(ev, x, y, NULL) : 1));
            }
            st->next = nx;
        } else {
            st->next.bw = INFINITY;
            st->next.lat = 0;
        }
    }
    struct cost_link tie = {INFINITY, 0};
    if (P > 1) {
        const int *a = stage_units, *b = stage_units + (size_t)(P - 1) * D;
        double flows = stage_flows(ev, a);
        if (gateway)
            count_pair_gateway_flows(ev, a, b);
        for (int d = 0; d < D; d++) {
            const struct unit *x = &ev->units[a[d]], *y = &ev->units[b[d]];
            /* the tie runs with the rings: it shares their gateways too */
            tie = min_link(tie, pair_link(ev, x, y, flows,
                                          gateway ? pair_gateway_share(ev, x, y, ev->gw_in) : 1));
        }
    }
    ev->tie = tie;
}

static int stage_fits(const struct plan_eval *ev, int s, int P, int k)
{
    return isinf(ev->stages[s].mem_bytes) ||
           cost_stage_memory(&ev->cj, k, s, P) <= ev->stages[s].mem_bytes;
}

static double eval_sim(struct plan_eval *ev, int P, const int *layers, struct cost_breakdown *br)
{
    for (int s = 0; s < P; s++) {
        ev->stages[s].layers = layers[s];
        if (!stage_fits(ev, s, P, layers[s]))
            return INFINITY;
    }
    return cost_simulate(&ev->cj, &ev->links, ev->stages, P, &ev->tie, &ev->sim, br);
}

/* Per-stage cost with k layers: the steady-state bound m*(F+B) plus what follows the last
 * backward. The partition minimises the largest of these, then refines by simulation. */
static double stage_bound(struct plan_eval *ev, int s, int P, int k)
{
    struct cost_stage st = ev->stages[s];
    struct cost_stage_terms t;
    if (!stage_fits(ev, s, P, k))
        return INFINITY;
    st.layers = k;
    cost_stage_terms(&ev->cj, &ev->links, &st, s == 0, s == P - 1, P > 1 ? &ev->tie : NULL, &t);
    double xfer = s < P - 1 ? cost_activation_bytes(&ev->cj) / st.next.bw : 0;
    double per_mb = t.fwd + t.bwd + t.tp_fwd + t.tp_bwd;
    if (2 * xfer > per_mb)
        per_mb = 2 * xfer;
    return ev->cj.micro_batches * per_mb + t.dp_exposed + t.optimizer;
}

static void equal_split(int L, int P, int *layers)
{
    for (int s = 0; s < P; s++)
        layers[s] = L / P + (s < L % P ? 1 : 0);
}

/* Minimax dynamic programme over contiguous splits, then one-layer moves across boundaries
 * while the simulated step time improves. Leaves the split in ev->best_layers. */
static double partition(struct plan_eval *ev, int P)
{
    int L = ev->L;
    size_t W = (size_t)L + 1;
    double *T = ev->table;
    int *C = ev->choice;
    int maxk = L - P + 1;
    /* T[s][j]: best bottleneck placing the first j layers on stages 0..s */
    for (int s = 0; s < P; s++) {
        for (int j = 0; j <= L; j++) {
            T[s * W + j] = INFINITY;
            C[s * W + j] = 0;
        }
    }
    double *cost = malloc(sizeof(double) * (size_t)(maxk + 1));
    if (!cost)
        return INFINITY;
    for (int s = 0; s < P; s++) {
        for (int k = 1; k <= maxk; k++)
            cost[k] = stage_bound(ev, s, P, k);
        int jmin = s + 1, jmax = L - (P - 1 - s);
        for (int j = jmin; j <= jmax; j++) {
            if (s == 0) {
                T[j] = cost[j];
                C[j] = j;
                continue;
            }
            /* prev(k) = T[s-1][j-k] falls with k, cost[k] rises: the best k is where they
             * cross; binary search for the first k with cost[k] >= prev(k) */
            int kmax = j - s < maxk ? j - s : maxk;
            int lo = 1, hi = kmax;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (cost[mid] >= T[(s - 1) * W + (size_t)(j - mid)])
                    hi = mid;
                else
                    lo = mid + 1;
            }
            double best = INFINITY;
            int bk = lo;
            for (int k = lo > 1 ? lo - 1 : 1; k <= lo; k++) {
                double prev = T[(s - 1) * W + (size_t)(j - k)];
                double v = prev > cost[k] ? prev : cost[k];
                if (v < best) {
                    best = v;
                    bk = k;
                }
            }
            T[s * W + j] = best;
            C[s * W + j] = bk;
        }
    }
    free(cost);
    int j = L;
    for (int s = P - 1; s >= 0; s--) {
        int k = C[(size_t)s * W + (size_t)j];
        ev->layers[s] = k;
        j -= k;
    }
    double best = eval_sim(ev, P, ev->layers, NULL);
    /* the equal split is a second starting point */
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    equal_split(L, P, ev->layers);
    double eq = eval_sim(ev, P, ev->layers, NULL);
    if (eq < best)
        best = eq;
    else
        memcpy(ev->layers, ev->best_layers, sizeof(int) * (size_t)P);
    /* move one layer from stage a to stage b: every pair for short pipelines, neighbours
     * otherwise */
    int all_pairs = P <= 16;
    for (int iter = 0; iter < 4 * L && !ev->fast; iter++) {
        int improved = 0;
        for (int a = 0; a < P; a++) {
            for (int b = 0; b < P; b++) {
                if (a == b || ev->layers[a] <= 1 || (!all_pairs && abs(a - b) != 1))
                    continue;
                ev->layers[a]--;
                ev->layers[b]++;
                double v = eval_sim(ev, P, ev->layers, NULL);
                if (v < best * (1 - 1e-12)) {
                    best = v;
                    improved = 1;
                } else {
                    ev->layers[a]++;
                    ev->layers[b]--;
                }
            }
        }
        if (!improved)
            break;
    }
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    return best;
}

/* Step time of a placement with the policy's partition (or the pin); split in best_layers. */
static double eval_placement(struct plan_eval *ev, int P, const int *stage_units,
                             const struct plan_job *job, int equal)
{
    eval_links(ev, P, stage_units);
    if (equal != 2 && job->pinned && job->n_pinned == P) {
        memcpy(ev->best_layers, job->pinned, sizeof(int) * (size_t)P);
        return eval_sim(ev, P, ev->best_layers, NULL);
    }
    if (equal) {
        equal_split(ev->L, P, ev->best_layers);
        return eval_sim(ev, P, ev->best_layers, NULL);
    }
    return partition(ev, P);
}

/* ---- canonical replica order ---- */

static int cmp_units(const void *a, const void *b, void *ctx)
{
    const struct plan_eval *ev = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    const struct unit *ux = &ev->units[x], *uy = &ev->units[y];
    if (ux->fabric != uy->fabric)
        return ev->fabric_rank[ux->fabric] - ev->fabric_rank[uy->fabric];
    if (ux->gbps != uy->gbps)
        return ux->gbps < uy->gbps ? 1 : -1;
    if (ux->tflops != uy->tflops)
        return ux->tflops < uy->tflops ? 1 : -1;
    return x - y;
}

static void canonical(struct plan_eval *ev, int P, int *stage_units)
{
    for (int s = 0; s < P; s++) {
        int *su = stage_units + (size_t)s * ev->D;
        int sorted = 1;
        for (int d = 1; d < ev->D && sorted; d++)
            sorted = cmp_units(&su[d - 1], &su[d], ev) < 0;
        if (!sorted)
            qsort_r(su, (size_t)ev->D, sizeof(int), cmp_units, ev);
    }
}

/* ---- public evaluation entry points ---- */

struct plan_eval *plan_eval_new(const struct plan_worker *workers, int n_workers,
                                const struct plan_job *job, const struct cost_links *links,
                                herr *e)
{
    if (plan_check_input(workers, n_workers, job, e) || cost_links_check(links, e))
        return NULL;
    if (!job->pipeline || !job->data)
        return herr_set(e, "planner: evaluation needs explicit pipeline and data"), NULL;
    struct plan_eval *ev = eval_new(workers, n_workers, job, links, e);
    if (!ev)
        return NULL;
    if (eval_shape(ev, job->pipeline, job->data, job->micro_batches, job->micro_batch_size, e)) {
        plan_eval_free(ev);
        return NULL;
    }
    return ev;
}

int plan_eval_units(const struct plan_eval *ev)
{
    return ev->n_units;
}

int plan_eval_unit_fabric(const struct plan_eval *ev, int u)
{
    return ev->units[u].fabric;
}

double plan_eval_step(struct plan_eval *ev, const int *stage_units, const int *layers)
{
    eval_links(ev, ev->P, stage_units);
    return eval_sim(ev, ev->P, layers, NULL);
}

double plan_eval_step_canonical(struct plan_eval *ev, int *stage_units, const int *layers)
{
    canonical(ev, ev->P, stage_units);
    return plan_eval_step(ev, stage_units, layers);
}

/* ---- holmes placement search ---- */

struct search {
    struct plan_eval *ev;
    const struct plan_job *job;
    int P, D;
    int homog;            /* restrict to fabric-homogeneous stages */
    int *cur, *best;      /* P*D unit ids */
    int *best_layers;
    double best_t;
    int *fab_units;       /* units grouped by fabric */
    int *fab_start;       /* n_fabrics + 1 */
    int *perm;
    long evals, budget;
    int *top;             /* SEARCH_TOP starting points for the local search, P*D each */
    double top_t[8];
    int n_top;
    int *loc;             /* the local search's current solution */
    int *rep, *nrep;      /* per stage: a position of each distinct class (SEARCH_REPS max) */
    int quick;            /* evaluate one candidate only */
};
#define SEARCH_TOP 8
#define SEARCH_REPS 32

static int next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return 1;
}

/* Evaluates S->cur (after putting each stage in canonical order); keeps the global best and
 * the SEARCH_TOP best distinct starting points. Returns the step time. */
static double try_candidate(struct search *S)
{
    size_t n = (size_t)S->P * S->D;
    canonical(S->ev, S->P, S->cur);
    double t = eval_placement(S->ev, S->P, S->cur, S->job, 0);
    S->evals++;
    if (t < S->best_t * (1 - 1e-12)) {
        S->best_t = t;
        memcpy(S->best, S->cur, sizeof(int) * n);
        memcpy(S->best_layers, S->ev->best_layers, sizeof(int) * (size_t)S->P);
    }
    if (!S->top || !isfinite(t))
        return t;
    for (int i = 0; i < S->n_top; i++)
        if (S->top_t[i] == t && !memcmp(S->top + i * n, S->cur, sizeof(int) * n))
            return t;
    int pos = S->n_top < SEARCH_TOP ? S->n_top : SEARCH_TOP - 1;
    if (S->n_top == SEARCH_TOP && t >= S->top_t[pos])
        return t;
    while (pos > 0 && S->top_t[pos - 1] > t) {
        memcpy(S->top + (size_t)pos * n, S->top + (size_t)(pos - 1) * n, sizeof(int) * n);
        S->top_t[pos] = S->top_t[pos - 1];
        pos--;
    }
    memcpy(S->top + (size_t)pos * n, S->cur, sizeof(int) * n);
    S->top_t[pos] = t;
    if (S->n_top < SEARCH_TOP)
        S->n_top++;
    return t;
}

/* Tries S->cur with its stages in every order (short pipelines on small clusters), or in
 * its own and the reverse order. */
static void try_orders(struct search *S)
{
    int D = S->P > 0 ? S->D : 0, P = S->P;
    size_t n = (size_t)P * D;
    if (P <= 5 && S->ev->n_units <= 256) {
        int base[5 * 256], perm[5];
        memcpy(base, S->cur, sizeof(int) * n);
        for (int i = 0; i < P; i++)
            perm[i] = i;
        do {
            for (int st = 0; st < P; st++)
                memcpy(S->cur + (size_t)st * D, base + (size_t)perm[st] * D, sizeof(int) * D);
            try_candidate(S);
        } while (next_perm(perm, P));
        return;
    }
    try_candidate(S);
    for (int l = 0, r = P - 1; l < r; l++, r--)
        for (int d = 0; d < D; d++) {
            int t = S->cur[l * D + d];
            S->cur[l * D + d] = S->cur[r * D + d];
            S->cur[r * D + d] = t;
        }
    try_candidate(S);
}

static int cmp_speed_desc(const void *a, const void *b, void *ctx)
{
    const struct plan_eval *ev = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    const struct unit *ux = &ev->units[x], *uy = &ev->units[y];
    if (ux->tflops != uy->tflops)
        return ux->tflops < uy->tflops ? 1 : -1;
    if (ux->gbps != uy->gbps)
        return ux->gbps < uy->gbps ? 1 : -1;
    return x - y;
}

/* Fabric-first candidate: fabrics in `perm` order, units of each fabric by speed (descending,
 * or ascending when `asc`), cut into stages of D consecutive units. */
static void build_fabric_first(struct search *S, int asc)
{
    struct plan_eval *ev = S->ev;
    int k = 0;
    for (int i = 0; i < ev->n_fabrics; i++) {
        int f = S->perm[i];
        int a = S->fab_start[f], b = S->fab_start[f + 1];
        for (int x = a; x < b; x++)
            S->cur[k++] = S->fab_units[asc ? b - 1 - (x - a) : x];
    }
}

/* Striped: each replica's column of stages from one fabric where possible (units in fabric
 * order fill column after column), so stage boundaries stay inside fabrics and the data-parallel
 * rings cross them instead. Only when homogeneous stages are impossible. */
static void build_striped(struct search *S)
{
    struct plan_eval *ev = S->ev;
    int k = 0, P = S->P, D = S->D;
    for (int i = 0; i < ev->n_fabrics; i++) {
        int f = S->perm[i];
        for (int x = S->fab_start[f]; x < S->fab_start[f + 1]; x++, k++)
            S->cur[(k % P) * D + k / P] = S->fab_units[x];
    }
}

/* Speed-first: all units by speed, fabric order breaking ties (only when homogeneity is
 * impossible anyway). */
static void build_speed_first(struct search *S)
{
    struct plan_eval *ev = S->ev;
    int k = 0;
    for (int i = 0; i < ev->n_fabrics; i++) {
        int f = S->perm[i];
        for (int x = S->fab_start[f]; x < S->fab_start[f + 1]; x++)
            S->cur[k++] = S->fab_units[x];
    }
    /* stable by speed: insertion order is fabric order */
    for (int i = 1; i < k; i++) {
        int v = S->cur[i], j = i - 1;
        while (j >= 0 && ev->units[S->cur[j]].tflops < ev->units[v].tflops) {
            S->cur[j + 1] = S->cur[j];
            j--;
        }
        S->cur[j + 1] = v;
    }
}


/* Hill-climb from S->loc: swap two units of different classes between stages (keeping
 * stages fabric-homogeneous when required), or swap two whole stages. */
static void local_search(struct search *S, double loc_t, long budget)
{
    struct plan_eval *ev = S->ev;
    int P = S->P, D = S->D, n = P * D;
    long stop = S->evals + budget;
    for (int round = 0; round < 200 && S->evals < stop; round++) {
        int improved = 0;
        for (int i = 0; i < P && S->evals < stop; i++) {
            for (int j = i + 1; j < P && S->evals < stop; j++) {
                memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                for (int d = 0; d < D; d++) {
                    int t = S->cur[i * D + d];
                    S->cur[i * D + d] = S->cur[j * D + d];
                    S->cur[j * D + d] = t;
                }
                double t = try_candidate(S);
                if (t < loc_t * (1 - 1e-12)) {
                    loc_t = t;
                    memcpy(S->loc, S->cur, sizeof(int) * (size_t)n);
                    improved = 1;
                }
            }
        }
        /* unit swaps: one per (stage, class) x (stage, class) pair */
        int *rep = S->rep, *nrep = S->nrep;
        for (int st = 0; st < P; st++) {
            nrep[st] = 0;
            for (int d = 0; d < D && nrep[st] < SEARCH_REPS; d++) {
                int pos = st * D + d, c = ev->units[S->loc[pos]].klass, seen = 0;
                for (int k = 0; k < nrep[st] && !seen; k++)
                    seen = ev->units[S->loc[rep[st * SEARCH_REPS + k]]].klass == c;
                if (!seen)
                    rep[st * SEARCH_REPS + nrep[st]++] = pos;
            }
        }
        int moved = 0;
        for (int i = 0; i < P && !moved && S->evals < stop; i++)
            for (int j = i + 1; j < P && !moved && S->evals < stop; j++)
                for (int x = 0; x < nrep[i] && !moved && S->evals < stop; x++)
                    for (int y = 0; y < nrep[j] && !moved && S->evals < stop; y++) {
                        int a = rep[i * SEARCH_REPS + x], b = rep[j * SEARCH_REPS + y];
                        const struct unit *ua = &ev->units[S->loc[a]];
                        const struct unit *ub = &ev->units[S->loc[b]];
                        if (ua->klass == ub->klass || (S->homog && ua->fabric != ub->fabric))
                            continue;
                        memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                        S->cur[a] = S->loc[b];
                        S->cur[b] = S->loc[a];
                        double t = try_candidate(S);
                        if (t < loc_t * (1 - 1e-12)) {
                            loc_t = t;
                            memcpy(S->loc, S->cur, sizeof(int) * (size_t)n);
                            improved = moved = 1;
                        }
                    }
        if (!improved)
            break;
    }
}

/* Is a fabric-homogeneous placement possible: every fabric's units a multiple of D. */
static int homogeneous_possible(const struct plan_eval *ev, const int *fab_start, int D)
{
    for (int f = 0; f < ev->n_fabrics; f++)
        if ((fab_start[f + 1] - fab_start[f]) % D)
            return 0;
    return 1;
}

/* Best holmes placement for (P, D): fills S->best, S->best_layers, S->best_t. */
static int holmes_search(struct search *S, herr *e)
{
    struct plan_eval *ev = S->ev;
    int nf = ev->n_fabrics;
    S->fab_units = malloc(sizeof(int) * (size_t)ev->n_units);
    S->fab_start = calloc((size_t)nf + 1, sizeof(int));
    S->perm = malloc(sizeof(int) * (size_t)nf);
    if (!S->fab_units || !S->fab_start || !S->perm)
        return herr_set(e, "planner: out of memory");
    for (int u = 0; u < ev->n_units; u++)
        S->fab_start[ev->units[u].fabric + 1]++;
    for (int f = 0; f < nf; f++)
        S->fab_start[f + 1] += S->fab_start[f];
    int *fill = calloc((size_t)nf, sizeof(int));
    if (!fill)
        return herr_set(e, "planner: out of memory");
    for (int u = 0; u < ev->n_units; u++) {
        int f = ev->units[u].fabric;
        S->fab_units[S->fab_start[f] + fill[f]++] = u;
    }
    free(fill);
    for (int f = 0; f < nf; f++)
        qsort_r(S->fab_units + S->fab_start[f], (size_t)(S->fab_start[f + 1] - S->fab_start[f]),
                sizeof(int), cmp_speed_desc, ev);
    S->homog = homogeneous_possible(ev, S->fab_start, S->D);
    S->best_t = INFINITY;
    /* fabric orders: every permutation up to 5 fabrics, else preference order and reverse */
    for (int i = 0; i < nf; i++)
        S->perm[i] = i;
    int by_pref = nf > 5;
    if (by_pref) {
        for (int f = 0; f < nf; f++)
            S->perm[ev->fabric_rank[f]] = f;
    }
    if (S->quick) {
        /* one fabric-first candidate in preference order: a cheap estimate of the shape */
        for (int f = 0; f < nf; f++)
            S->perm[ev->fabric_rank[f]] = f;
        build_fabric_first(S, 0);
        try_candidate(S);
        return 0;
    }
    for (int round = 0;; round++) {
        for (int asc = 0; asc <= 1; asc++) {
            build_fabric_first(S, asc);
            try_orders(S);
        }
        if (!S->homog) {
            build_speed_first(S);
            try_orders(S);
            build_striped(S);
            try_orders(S);
        }
        if (by_pref) {
            if (round == 1)
                break;
            for (int l = 0, r = nf - 1; l < r; l++, r--) {
                int t = S->perm[l];
                S->perm[l] = S->perm[r];
                S->perm[r] = t;
            }
        } else if (!next_perm(S->perm, nf)) {
            break;
        }
    }
    /* the workers as listed (the naive order), when it respects the fabric constraint */
    int ok = 1;
    for (int u = 0; u < ev->n_units; u++) {
        S->cur[u] = u;
        if (S->homog && ev->units[u].fabric != ev->units[u - u % S->D].fabric)
            ok = 0;
    }
    if (ok)
        try_candidate(S);
    /* hill-climb from each of the best few starting points (the list grows while climbing,
     * so take a snapshot first) */
    size_t n = (size_t)S->P * S->D;
    int n_start = S->n_top;
    /* room for the whole top list: it is copied again below, after climbing has grown it */
    int *starts = malloc(sizeof(int) * n * SEARCH_TOP);
    double start_t[SEARCH_TOP];
    if (!starts)
        return herr_set(e, "planner: out of memory");
    memcpy(starts, S->top, sizeof(int) * n * (size_t)n_start);
    memcpy(start_t, S->top_t, sizeof start_t);
    for (int i = 0; i < n_start; i++) {
        memcpy(S->loc, starts + (size_t)i * n, sizeof(int) * n);
        local_search(S, start_t[i], S->budget / n_start);
    }
    if (ev->fast) {
        /* large clusters searched with the quick partition: refine the best few fully */
        ev->fast = 0;
        memcpy(starts, S->top, sizeof(int) * n * (size_t)S->n_top);
        n_start = S->n_top;
        S->best_t = INFINITY;
        for (int i = 0; i < n_start; i++) {
            memcpy(S->cur, starts + (size_t)i * n, sizeof(int) * n);
            try_candidate(S);
        }
        ev->fast = 1;
    }
    free(starts);
    return 0;
}

static void search_free(struct search *S)
{
    free(S->cur);
    free(S->best);
    free(S->best_layers);
    free(S->fab_units);
    free(S->fab_start);
    free(S->perm);
    free(S->top);
    free(S->loc);
    free(S->rep);
    free(S->nrep);
    memset(S, 0, sizeof *S);
}

static int search_init(struct search *S, struct plan_eval *ev, const struct plan_job *job, int P,
                       int D, herr *e)
{
    memset(S, 0, sizeof *S);
    S->ev = ev;
    S->job = job;
    S->P = P;
    S->D = D;
    S->cur = malloc(sizeof(int) * (size_t)ev->n_units);
    S->best = malloc(sizeof(int) * (size_t)ev->n_units);
    S->best_layers = malloc(sizeof(int) * (size_t)P);
    S->top = malloc(sizeof(int) * (size_t)ev->n_units * SEARCH_TOP);
    S->loc = malloc(sizeof(int) * (size_t)ev->n_units);
    S->rep = malloc(sizeof(int) * (size_t)P * SEARCH_REPS);
    S->nrep = malloc(sizeof(int) * (size_t)P);
    if (!S->cur || !S->best || !S->best_layers || !S->top || !S->loc || !S->rep || !S->nrep)
        return herr_set(e, "planner: out of memory");
    /* evaluations allowed in the local search: generous for small clusters, bounded work for
     * large ones (each evaluation is O(units + stages * micro-batches)) */
    long work = (long)ev->n_units + (long)P * ev->cj.micro_batches * 4 + (long)P * ev->L * 8;
    S->budget = 4000000L / (work > 0 ? work : 1);
    if (S->budget < 32)
        S->budget = 32;
    /* beyond small clusters, candidates are compared with the quick partition */
    ev->fast = ev->n_units > 32;
    if (S->budget > 20000)
        S->budget = 20000;
    return 0;
}

/* Naive (Megatron order over the workers as listed) placement with equal layers (or the pin,
 * unless `baseline`). */
static double naive_eval(struct plan_eval *ev, const struct plan_job *job, int P, int *stage_units,
                         int baseline)
{
    for (int u = 0; u < P * ev->D; u++)
        stage_units[u] = u;
    return eval_placement(ev, P, stage_units, job, baseline ? 2 : 1);
}

/* ---- building the plan ---- */

static void transport_of(const struct plan *p, const int *members, int n,
                         struct plan_transport_spec *t)
{
    memset(t, 0, sizeof *t);
    t->gid_index = -1;
    const struct plan_worker *w0 = &p->workers[p->ranks[members[0]].worker];
    int same_fabric = 1, same_node = 1, gid = -1;
    const char *other = NULL;
    enum nic_class cls = w0->nic.cls;
    for (int i = 0; i < n; i++) {
        const struct plan_worker *w = &p->workers[p->ranks[members[i]].worker];
        if (strcmp(w->nic.fabric, w0->nic.fabric)) {
            same_fabric = 0;
            if (!other)
                other = w->nic.fabric;
        }
        const char *na = w->node[0] ? w->node : w->name;
        const char *nb = w0->node[0] ? w0->node : w0->name;
        if (strcmp(na, nb))
            same_node = 0;
        if (w->nic.cls < cls)
            cls = w->nic.cls;
        if (w->nic.gid_index >= 0 && gid < 0)
            gid = w->nic.gid_index;
    }
    t->intra_node = same_node;
    if (p->policy == POLICY_ETHERNET && !same_node) {
        t->kind = TRANSPORT_SOCKET;
        snprintf(t->reason, sizeof t->reason, "ethernet baseline: every group on TCP");
    } else if (!same_fabric) {
        t->kind = TRANSPORT_SOCKET;
        snprintf(t->reason, sizeof t->reason, "members span fabrics %.80s and %.80s",
                 w0->nic.fabric, other);
    } else if (cls == NIC_ETHERNET) {
        t->kind = TRANSPORT_SOCKET;
        snprintf(t->reason, sizeof t->reason, "fabric %.120s is Ethernet (no RDMA)",
                 w0->nic.fabric);
    } else if (cls == NIC_INFINIBAND) {
        t->kind = TRANSPORT_IB;
    } else {
        t->kind = TRANSPORT_ROCE;
        t->gid_index = gid >= 0 ? gid : 3;
    }
    t->nccl_net = t->kind == TRANSPORT_SOCKET ? "Socket" : "IB";
}

static int add_group(struct plan *p, enum group_kind kind, int stage, int n, herr *e)
{
    struct plan_group *g = &p->groups[p->n_groups];
    g->kind = kind;
    g->stage = stage;
    g->n = n;
    g->members = malloc(sizeof(int) * (size_t)n);
    if (!g->members)
        return herr_set(e, "planner: out of memory for groups");
    p->n_groups++;
    return 0;
}

static int build_plan(struct plan *p, struct plan_eval *ev, const int *stage_units,
                      const int *layers, herr *e)
{
    int P = p->pipeline, D = p->data, t = p->tensor;
    p->n_ranks = P * D * t;
    p->n_stages = P;
    p->ranks = calloc((size_t)p->n_ranks, sizeof *p->ranks);
    p->stages = calloc((size_t)P, sizeof *p->stages);
    long ng = (long)(t > 1 ? P * D : 0) + (D > 1 ? P * t : 0) + (P > 1 ? 2L * D * t : 0);
    p->groups = calloc((size_t)(ng > 0 ? ng : 1), sizeof *p->groups);
    if (!p->ranks || !p->stages || !p->groups)
        return herr_set(e, "planner: out of memory for %d ranks", p->n_ranks);
    eval_links(ev, P, stage_units);
    struct cost_stage_terms terms;
    int first = 0;
    for (int s = 0; s < P; s++) {
        struct plan_stage *st = &p->stages[s];
        st->first_layer = first;
        st->last_layer = first + layers[s];
        first += layers[s];
        ev->stages[s].layers = layers[s];
        st->tflops = ev->stages[s].tflops;
        cost_stage_terms(&ev->cj, &ev->links, &ev->stages[s], s == 0, s == P - 1,
                         P > 1 ? &ev->tie : NULL, &terms);
        st->fwd_s = terms.fwd + terms.tp_fwd;
        st->bwd_s = terms.bwd + terms.tp_bwd;
        st->dp_s = terms.dp_exposed;
        st->memory_gb = cost_stage_memory(&ev->cj, layers[s], s, P) / 1e9;
        const struct unit *u0 = &ev->units[stage_units[(size_t)s * D]];
        snprintf(st->fabric, sizeof st->fabric, "%s", ev->fabric_names[u0->fabric]);
        for (int d = 0; d < D; d++) {
            const struct unit *u = &ev->units[stage_units[(size_t)s * D + d]];
            if (u->fabric != u0->fabric)
                st->mixed = 1;
            for (int r = 0; r < t; r++) {
                struct plan_rank *rk = &p->ranks[plan_rank_of(p, s, d, r)];
                rk->worker = u->worker;
                rk->local = u->local + r;
                rk->stage = s;
                rk->dp_rank = d;
                rk->tp_rank = r;
            }
        }
        if (st->mixed)
            snprintf(st->fabric, sizeof st->fabric, "mixed");
    }
    for (int s = 0; s < P && t > 1; s++)
        for (int d = 0; d < D; d++) {
            if (add_group(p, GROUP_TP, s, t, e))
                return -1;
            for (int r = 0; r < t; r++)
                p->groups[p->n_groups - 1].members[r] = plan_rank_of(p, s, d, r);
        }
    for (int s = 0; s < P && D > 1; s++)
        for (int r = 0; r < t; r++) {
            if (add_group(p, GROUP_DP, s, D, e))
                return -1;
            for (int d = 0; d < D; d++)
                p->groups[p->n_groups - 1].members[d] = plan_rank_of(p, s, d, r);
        }
    for (int d = 0; d < D && P > 1; d++)
        for (int r = 0; r < t; r++) {
            if (add_group(p, GROUP_PP, -1, P, e))
                return -1;
            for (int s = 0; s < P; s++)
                p->groups[p->n_groups - 1].members[s] = plan_rank_of(p, s, d, r);
        }
    for (int d = 0; d < D && P > 1; d++)
        for (int r = 0; r < t; r++) {
            if (add_group(p, GROUP_EMBEDDING, -1, 2, e))
                return -1;
            p->groups[p->n_groups - 1].members[0] = plan_rank_of(p, 0, d, r);
            p->groups[p->n_groups - 1].members[1] = plan_rank_of(p, P - 1, d, r);
        }
    p->n_socket_groups = 0;
    for (int g = 0; g < p->n_groups; g++) {
        struct plan_group *gr = &p->groups[g];
        transport_of(p, gr->members, gr->n, &gr->transport);
        if ((gr->kind == GROUP_DP || gr->kind == GROUP_TP) &&
            gr->transport.kind == TRANSPORT_SOCKET && !gr->transport.intra_node)
            p->n_socket_groups++;
    }
    p->step_s = eval_sim(ev, P, layers, &p->breakdown);
    p->tokens_per_s = (double)p->micro_batches * p->micro_batch_size * D * ev->cj.seq / p->step_s;
    return 0;
}

/* Shapes whose quick estimate reaches this fraction of the best estimate get the full search. */
#define SHAPE_KEEP 0.8

/* (pipeline, data, micro-batches, micro-batch size) candidates of the auto search. */
struct shape {
    int P, D, m, b;
};

static int list_shapes(const struct plan_job *job, int units, struct shape **out, int *n, herr *e)
{
    int cap = 64, k = 0;
    struct shape *v = malloc(sizeof *v * (size_t)cap);
    if (!v)
        return herr_set(e, "planner: out of memory");
    long per_replica = (long)job->micro_batches * job->micro_batch_size;
    int auto_mode = !job->pipeline || !job->data;
    for (int P = 1; P <= units && P <= job->model.layers; P++) {
        if (units % P)
            continue;
        int D = units / P;
        if (job->pipeline && P != job->pipeline)
            continue;
        if (job->data && D != job->data)
            continue;
        if (job->pinned && job->n_pinned != P)
            continue;
        for (int b = 1; b <= job->micro_batch_size; b++) {
            if (!auto_mode && b != job->micro_batch_size)
                continue;
            if (per_replica % b)
                continue;
            long m = per_replica / b;
            if (m > 4096 && b != job->micro_batch_size)
                continue;
            if (job->schedule == SCHED_1F1B && m < P)
                continue;
            if (k == cap) {
                cap *= 2;
                struct shape *nv = realloc(v, sizeof *v * (size_t)cap);
                if (!nv) {
                    free(v);
                    return herr_set(e, "planner: out of memory");
                }
                v = nv;
            }
            v[k++] = (struct shape){P, D, (int)m, b};
        }
    }
    if (!k) {
        free(v);
        return herr_set(e, "parallelism: no (pipeline, data) with pipeline <= layers %d (and, "
                        "for 1f1b, <= micro-batches) divides the %d tensor groups",
                        job->model.layers, units);
    }
    *out = v;
    *n = k;
    return 0;
}

static void keep_top(struct plan *p, const struct plan_candidate *c)
{
    int pos = p->n_top;
    while (pos > 0 && p->top[pos - 1].tokens_per_s < c->tokens_per_s)
        pos--;
    if (pos >= PLAN_TOP_MAX)
        return;
    int last = p->n_top < PLAN_TOP_MAX ? p->n_top : PLAN_TOP_MAX - 1;
    for (int i = last; i > pos; i--)
        p->top[i] = p->top[i - 1];
    p->top[pos] = *c;
    if (p->n_top < PLAN_TOP_MAX)
        p->n_top++;
}

void plan_free(struct plan *p)
{
    if (!p)
        return;
    for (int g = 0; g < p->n_groups; g++)
        free(p->groups[g].members);
    free(p->groups);
    free(p->ranks);
    free(p->stages);
    free(p->workers);
    memset(p, 0, sizeof *p);
}

int plan_make(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
              const struct cost_links *links, struct plan *out, herr *e)
{
    memset(out, 0, sizeof *out);
    if (plan_check_input(workers, n_workers, job, e) || cost_links_check(links, e))
        return -1;
    struct plan_eval *ev = eval_new(workers, n_workers, job, links, e);
    if (!ev)
        return -1;
    struct shape *shapes = NULL;
    int n_shapes = 0, rc = -1;
    int *best_units = malloc(sizeof(int) * (size_t)ev->n_units);
    int *naive_units = malloc(sizeof(int) * (size_t)ev->n_units);
    int *best_layers = NULL;
    struct shape best_shape = {0, 0, 0, 0};
    double best_tps = -1;
    if (!best_units || !naive_units) {
        herr_set(e, "planner: out of memory");
        goto done;
    }
    if (list_shapes(job, ev->n_units, &shapes, &n_shapes, e))
        goto done;
    best_layers = malloc(sizeof(int) * (size_t)job->model.layers);
    if (!best_layers) {
        herr_set(e, "planner: out of memory");
        goto done;
    }
    /* auto search: a quick estimate of every shape first; the full search only for shapes
     * within SHAPE_KEEP of the best estimate (the others keep their estimate) */
    double *quick = calloc((size_t)n_shapes, sizeof(double));
    double quick_best = 0;
    if (!quick) {
        herr_set(e, "planner: out of memory");
        goto done;
    }
    for (int i = 0; i < n_shapes && n_shapes > 1 && job->policy == POLICY_HOLMES; i++) {
        struct shape sh = shapes[i];
        struct search S;
        if (eval_shape(ev, sh.P, sh.D, sh.m, sh.b, e)) {
            free(quick);
            goto done;
        }
        int rc_init = search_init(&S, ev, job, sh.P, sh.D, e);
        S.quick = 1;
        if (rc_init || holmes_search(&S, e)) {
            search_free(&S);
            free(quick);
            goto done;
        }
        if (isfinite(S.best_t) && S.best_t > 0)
            quick[i] = (double)sh.m * sh.b * sh.D * job->model.seq / S.best_t;
        if (quick[i] > quick_best)
            quick_best = quick[i];
        search_free(&S);
    }
    for (int i = 0; i < n_shapes; i++) {
        struct shape sh = shapes[i];
        if (eval_shape(ev, sh.P, sh.D, sh.m, sh.b, e)) {
            free(quick);
            goto done;
        }
        double t;
        if (job->policy == POLICY_HOLMES && n_shapes > 1 && quick[i] < SHAPE_KEEP * quick_best) {
            if (quick[i] > 0) {
                struct plan_candidate c = {sh.P, sh.D, sh.m, sh.b,
                                           (double)sh.m * sh.b * sh.D * job->model.seq / quick[i],
                                           quick[i]};
                keep_top(out, &c);
            }
            continue;
        }
        if (job->policy == POLICY_HOLMES) {
            struct search S;
            if (search_init(&S, ev, job, sh.P, sh.D, e) || holmes_search(&S, e)) {
                free(quick);
                search_free(&S);
                goto done;
            }
            t = S.best_t;
            if (isfinite(t) && t > 0) {
                double tps = (double)sh.m * sh.b * sh.D * job->model.seq / t;
                struct plan_candidate c = {sh.P, sh.D, sh.m, sh.b, t, tps};
                keep_top(out, &c);
                if (tps > best_tps) {
                    best_tps = tps;
                    best_shape = sh;
                    memcpy(best_units, S.best, sizeof(int) * (size_t)ev->n_units);
                    memcpy(best_layers, S.best_layers, sizeof(int) * (size_t)sh.P);
                }
            }
            search_free(&S);
        } else {
            t = naive_eval(ev, job, sh.P, naive_units, 0);
            if (isfinite(t) && t > 0) {
                double tps = (double)sh.m * sh.b * sh.D * job->model.seq / t;
                struct plan_candidate c = {sh.P, sh.D, sh.m, sh.b, t, tps};
                keep_top(out, &c);
                if (tps > best_tps) {
                    best_tps = tps;
                    best_shape = sh;
                    memcpy(best_units, naive_units, sizeof(int) * (size_t)ev->n_units);
                    memcpy(best_layers, ev->best_layers, sizeof(int) * (size_t)sh.P);
                }
            }
        }
    }
    free(quick);
    if (best_tps <= 0) {
        herr_set(e, "planner: no placement fits: every (pipeline, data, micro-batch) shape "
                 "needs more device memory than the workers' gpu_memory_gb, or no layer split "
                 "is feasible");
        goto done;
    }
    out->policy = job->policy;
    out->tensor = job->tensor;
    out->pipeline = best_shape.P;
    out->data = best_shape.D;
    out->micro_batches = best_shape.m;
    out->micro_batch_size = best_shape.b;
    out->schedule = job->schedule;
    out->links = *links;
    out->n_workers = n_workers;
    out->workers = malloc(sizeof *out->workers * (size_t)n_workers);
    if (!out->workers) {
        herr_set(e, "planner: out of memory");
        goto done;
    }
    memcpy(out->workers, workers, sizeof *out->workers * (size_t)n_workers);
    if (eval_shape(ev, best_shape.P, best_shape.D, best_shape.m, best_shape.b, e))
        goto done;
    {
        int *fs = calloc((size_t)ev->n_fabrics + 1, sizeof(int));
        if (!fs) {
            herr_set(e, "planner: out of memory");
            goto done;
        }
        for (int u = 0; u < ev->n_units; u++)
            fs[ev->units[u].fabric + 1]++;
        for (int f = 0; f < ev->n_fabrics; f++)
            fs[f + 1] += fs[f];
        out->homogeneous_possible = homogeneous_possible(ev, fs, best_shape.D);
        free(fs);
    }
    /* baselines on the same shape */
    ev->policy = POLICY_NAIVE;
    out->baseline_naive_s = naive_eval(ev, job, best_shape.P, naive_units, 1);
    ev->policy = POLICY_ETHERNET;
    out->baseline_ethernet_s = naive_eval(ev, job, best_shape.P, naive_units, 1);
    ev->policy = job->policy;
    if (build_plan(out, ev, best_units, best_layers, e))
        goto done;
    rc = 0;
done:
    if (rc)
        plan_free(out);
    free(shapes);
    free(best_units);
    free(naive_units);
    free(best_layers);
    plan_eval_free(ev);
    return rc;
}
