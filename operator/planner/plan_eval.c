/* The evaluation of one placement: the units (tensor blocks) and fabrics, the links between
 * units, the layer partition and the simulated step time; the plan_eval_* entry points. */
#include "planner_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- evaluation of one placement ---- */

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

/* The buffers sized by a shape (stages, partition tables, the simulator). */
static void free_shape_buffers(struct plan_eval *ev)
{
    void *bufs[] = {ev->stages, ev->table, ev->choice, ev->layers, ev->best_layers};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    cost_sim_free(&ev->sim);
}

void plan_eval_free(struct plan_eval *ev)
{
    if (!ev)
        return;
    free(ev->units);
    free(ev->fabric_names);
    free(ev->fabric_rank);
    free(ev->gw_in);
    free(ev->gw_a);
    free(ev->gw_b);
    free(ev->nic_base);
    free(ev->nic_out);
    free(ev->nic_in);
    free(ev->tcp_out);
    free(ev->tcp_in);
    free_shape_buffers(ev);
    free(ev);
}

/* Sets up the units (tensor blocks) and fabrics; P/D/micro-batches are set by pl_eval_shape. */
struct plan_eval *pl_eval_new(const struct plan_worker *workers, int n_workers,
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
    ev->token_slices = job->token_slices;
    ev->warmup_pinned = job->warmup_pinned;
    /* a deeper warm-up holds more activations: on GPUs only where their memory is known */
    for (int w = 0; w < n_workers; w++)
        if (workers[w].gpus > 0 && !(workers[w].memory_gb > 0))
            ev->warmup_unknown_memory = 1;
    ev->t = job->tensor;
    ev->L = job->model.layers;
    long dev = plan_devices(workers, n_workers);
    ev->n_units = (int)(dev / job->tensor);
    ev->units = calloc((size_t)ev->n_units, sizeof *ev->units);
    ev->fabric_names = calloc((size_t)n_workers, sizeof *ev->fabric_names);
    const char **nodes = calloc((size_t)n_workers, sizeof *nodes);
    int *wfab = calloc((size_t)n_workers, sizeof *wfab), *wnode = calloc((size_t)n_workers,
                                                                           sizeof *wnode);
    if (!ev->units || !ev->fabric_names || !nodes || !wfab || !wnode) {
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
            /* a CPU rank on real NICs sends over TCP whatever its NIC (plan_job.emulated) */
            x->cls = workers[w].gpus == 0 && !job->emulated ? (int)NIC_ETHERNET
                                                            : (int)workers[w].nic.cls;
            x->node = wnode[w];
            x->cpu = workers[w].gpus == 0;
            x->gbps = workers[w].nic.gbps;
            x->tflops = workers[w].tflops;
            x->mem = workers[w].memory_gb > 0 ? workers[w].memory_gb * 1e9 * 0.9 : INFINITY;
            x->membw = workers[w].memory_gbps > 0 ? workers[w].memory_gbps : links->memory_gbps;
            x->nics = plan_worker_nics(&workers[w]);
            x->devs = worker_devices(&workers[w]);
        }
    }
    /* classes: same fabric, class, CPU or GPU, Gb/s, TFLOPS, memory, memory bandwidth and
     * devices per worker (GPUs of one speed and two memory sizes, A100 40 and 80 GB, are not
     * interchangeable: the first stage of 1F1B holds the most activations; nor are two memory
     * bandwidths: the stages with the embedding have the most to update) */
    for (int i = 0; i < ev->n_units; i++) {
        struct unit *x = &ev->units[i];
        x->klass = -1;
        for (int k = i - 1; k >= 0 && k >= i - 64; k--) {
            const struct unit *y = &ev->units[k];
            if (y->fabric == x->fabric && y->cls == x->cls && y->cpu == x->cpu && y->gbps == x->gbps &&
                y->tflops == x->tflops && y->mem == x->mem && y->membw == x->membw &&
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
    ev->nic_base = calloc((size_t)n_workers + 1, sizeof *ev->nic_base);
    if (!ev->nic_base) {
        herr_set(e, "planner: out of memory");
        goto fail;
    }
    for (int w = 0; w < n_workers; w++)
        ev->nic_base[w + 1] = ev->nic_base[w] + plan_worker_nics(&workers[w]);
    for (int i = 0; i < ev->n_units; i++)
        ev->units[i].nic_base = ev->nic_base[ev->units[i].worker];
    ev->nic_out = calloc((size_t)ev->nic_base[n_workers], sizeof *ev->nic_out);
    ev->nic_in = calloc((size_t)ev->nic_base[n_workers], sizeof *ev->nic_in);
    ev->tcp_out = calloc((size_t)n_workers, sizeof *ev->tcp_out);
    ev->tcp_in = calloc((size_t)n_workers, sizeof *ev->tcp_in);
    if (!ev->nic_out || !ev->nic_in || !ev->tcp_out || !ev->tcp_in) {
        herr_set(e, "planner: out of memory for %d NICs", ev->nic_base[n_workers]);
        goto fail;
    }
    free(nodes);
    free(wfab);
    free(wnode);
    ev->cj.model = job->model;
    ev->cj.tensor = job->tensor;
    ev->cj.elem_bytes = job->precision == DTYPE_FP32 ? 4 : 2;
    ev->cj.act_elem_bytes = job->pipeline_dtype == DTYPE_BF16 ? 2 : ev->cj.elem_bytes;
    ev->cj.gather_elem_bytes = job->param_gather_dtype == DTYPE_BF16 ? 2 : 4; /* fp32 otherwise */
    ev->cj.gather_masters = job->param_gather_dtype == DTYPE_BF16;
    ev->cj.schedule = job->schedule;
    /* an explicit slice count is what every stage will hold in memory, whatever the split */
    ev->cj.mem_slices = job->token_slices > 1 ? job->token_slices : 0;
    ev->refine_work = INFINITY;
    return ev;
fail:
    free(nodes);
    free(wfab);
    free(wnode);
    plan_eval_free(ev);
    return NULL;
}

/* Sets pipeline, data and micro-batching; (re)allocates the per-stage buffers. */
int pl_eval_shape(struct plan_eval *ev, int P, int D, int m, int b, herr *e)
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
        double work = ev->sim.work; /* the counts go on across re-allocations */
        long runs = ev->sim.runs;
        free_shape_buffers(ev);
        ev->stages = calloc((size_t)cap, sizeof *ev->stages);
        ev->table = malloc(sizeof(double) * (size_t)cap * (size_t)(ev->L + 1));
        ev->choice = malloc(sizeof(int) * (size_t)cap * (size_t)(ev->L + 1));
        ev->layers = calloc((size_t)cap, sizeof(int));
        ev->best_layers = calloc((size_t)cap, sizeof(int));
        if (!ev->stages || !ev->table || !ev->choice || !ev->layers || !ev->best_layers)
            return herr_set(e, "planner: out of memory for %d stages", cap);
        if (cost_sim_init(&ev->sim, cap, capm, e))
            return -1;
        ev->sim.work = work;
        ev->sim.runs = runs;
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

/* a and b on one node: NVLink / shared memory between GPUs, loopback TCP between CPU ranks
 * (two CPU workers' processes; the transport is the same TCP one as between nodes) */
static struct cost_link node_link(const struct cost_links *l, const struct unit *a,
                                  const struct unit *b)
{
    if (a->cpu && b->cpu)
        return cost_link_make(l->loopback_gbps, l->loopback_latency_us, 1);
    return cost_link_make(l->intra_node_gbps, l->intra_node_latency_us, 1);
}

static struct cost_link pair_link(const struct plan_eval *ev, const struct unit *a,
                                  const struct unit *b, double flows, int gw)
{
    if (a->node == b->node)
        return node_link(&ev->links, a, b);
    return nic_link(ev, a, b, flows, gw);
}

/* Counts in ev->gw_in the flows that cross into each fabric during the step's data-parallel
 * phase, when every stage's gradient ring runs at once: each ring hop d -> d+1 between
 * fabrics, once per tensor rank (each of a unit's t ranks has its own data-parallel ring, and
 * all of them cross there at once). (The embedding tie, small, is charged its share but not
 * counted against the rings.) */
static void count_dp_gateway_flows(struct plan_eval *ev, int P, const int *stage_units)
{
    int D = ev->D;
    memset(ev->gw_in, 0, sizeof *ev->gw_in * (size_t)ev->n_fabrics);
    for (int s = 0; s < P && D > 1; s++) {
        const int *su = stage_units + (size_t)s * D;
        for (int d = 0; d < D; d++) {
            const struct unit *a = &ev->units[su[d]], *b = &ev->units[su[(d + 1) % D]];
            if (a->fabric != b->fabric && a->node != b->node)
                ev->gw_in[b->fabric] += ev->t;
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

/* The busier direction of the pair a -> b with `per` flows each (their links), plus
 * `extra[f]` flows already on each gateway. */
static int pair_gateway_share(const struct plan_eval *ev, const struct unit *a,
                              const struct unit *b, int per, const int *extra)
{
    int in_b = per * ev->gw_b[b->fabric] + (extra ? extra[b->fabric] : 0);
    int in_a = per * ev->gw_a[a->fabric] + (extra ? extra[a->fabric] : 0);
    return in_a > in_b ? in_a : in_b;
}

static struct cost_link min_link(struct cost_link a, struct cost_link b)
{
    struct cost_link r;
    r.bw = a.bw < b.bw ? a.bw : b.bw;
    r.lat = a.lat > b.lat ? a.lat : b.lat;
    return r;
}

/* The NIC (index into nic_out / nic_in) tensor rank r of unit x goes through: a worker's NICs
 * serve equal runs of consecutive devices (plan_worker_nic_of). */
static inline int nic_index(const struct unit *x, int r)
{
    return x->nic_base + (x->nics == 1 ? 0 : (int)((long)(x->local + r) * x->nics / x->devs));
}

/* Adds `k` per link to the counters of the NICs the links a[d] -> b[d] that leave their node go
 * through, and to their workers' counters of links to other fabrics (tcp_out, tcp_in). */
static void count_link_flows(struct plan_eval *ev, const int *a, const int *b, int k)
{
    int t = ev->t;
    for (int d = 0; d < ev->D; d++) {
        const struct unit *x = &ev->units[a[d]], *y = &ev->units[b[d]];
        if (x->node == y->node)
            continue;
        if (x->fabric != y->fabric) {
            ev->tcp_out[x->worker] += k * t;
            ev->tcp_in[y->worker] += k * t;
        }
        if (x->nics == 1)
            ev->nic_out[x->nic_base] += k * t;
        else
            for (int r = 0; r < t; r++)
                ev->nic_out[nic_index(x, r)] += k;
        if (y->nics == 1)
            ev->nic_in[y->nic_base] += k * t;
        else
            for (int r = 0; r < t; r++)
                ev->nic_in[nic_index(y, r)] += k;
    }
}

/* One link x -> y (tensor rank r of each) at its share of the NICs (count_link_flows done): the
 * NIC's Gb/s over its NICs and the links through it, the slower end; over RDMA inside one RDMA
 * fabric, else over TCP (between fabrics capped by tcp_gbps, a worker's path to the other
 * fabrics, shared by all its links to other fabrics at this boundary, whichever fabric they go
 * to: a tensor group's t links share it; and by the gateway's share). *share: that NIC share. */
static struct cost_link one_link(const struct plan_eval *ev, const struct unit *x,
                                 const struct unit *y, int r, int gw, double *share)
{
    const struct cost_links *l = &ev->links;
    if (x->node == y->node) {
        *share = 1;
        return node_link(l, x, y);
    }
    int fo = ev->nic_out[nic_index(x, r)], fi = ev->nic_in[nic_index(y, r)];
    double sx = 1.0 / (x->nics * (fo > 1 ? fo : 1)), sy = 1.0 / (y->nics * (fi > 1 ? fi : 1));
    double gx = x->gbps * sx, gy = y->gbps * sy;
    double g = gx < gy ? gx : gy;
    *share = gx < gy ? sx : sy;
    int cls = x->cls < y->cls ? x->cls : y->cls;
    if (x->fabric == y->fabric && cls != NIC_ETHERNET && ev->policy != POLICY_ETHERNET)
        return cost_link_make(g * l->rdma_efficiency,
                              cls == NIC_INFINIBAND ? l->ib_latency_us : l->roce_latency_us, 1);
    g *= l->tcp_efficiency;
    if (x->fabric != y->fabric) { /* a worker's path to the other fabrics, shared by its links
                                     there: the busier end */
        int f = ev->tcp_out[x->worker], fy = ev->tcp_in[y->worker];
        f = f > fy ? f : fy;
        double cap = l->tcp_gbps / (f > 1 ? f : 1);
        if (cap < g)
            g = cap;
    }
    struct cost_link k = cost_link_make(g, l->tcp_latency_us, 1);
    if (x->fabric != y->fabric && l->gateway_gbps > 0) {
        struct cost_link sh = cost_link_make(l->gateway_gbps, l->tcp_latency_us, gw);
        if (sh.bw < k.bw)
            k.bw = sh.bw;
    }
    return k;
}

struct cost_link pl_boundary_links(struct plan_eval *ev, const int *a, const int *b,
                                   const int *gw_extra, struct cost_link *link, double *share)
{
    int gateway = ev->links.gateway_gbps > 0, t = ev->t;
    struct cost_link worst = {INFINITY, 0};
    count_link_flows(ev, a, b, 1);
    if (gateway)
        count_pair_gateway_flows(ev, a, b);
    for (int d = 0; d < ev->D; d++) {
        const struct unit *x = &ev->units[a[d]], *y = &ev->units[b[d]];
        int gw = gateway ? pair_gateway_share(ev, x, y, t, gw_extra) : 1;
        /* the unit's links differ only in their NICs: with one NIC (or one link) every link is
         * alike */
        int alike = !link && !share && x->nics == 1 && y->nics == 1;
        for (int r = 0; r < (alike ? 1 : t); r++) {
            double sh;
            struct cost_link k = one_link(ev, x, y, r, gw, &sh);
            worst = min_link(worst, k);
            if (link)
                link[(size_t)d * t + r] = k;
            if (share)
                share[(size_t)d * t + r] = sh;
        }
    }
    count_link_flows(ev, a, b, -1);
    return worst;
}

/* Fills ev->stages[0..P) (all but layers) from stage_units. */
void pl_eval_links(struct plan_eval *ev, int P, const int *stage_units)
{
    int D = ev->D;
    ev->sim.work += UNIT_WORK * (double)P * D; /* the budget counts this too */
    int gateway = ev->links.gateway_gbps > 0;
    if (gateway)
        count_dp_gateway_flows(ev, P, stage_units);
    for (int s = 0; s < P; s++) {
        const int *su = stage_units + (size_t)s * D;
        struct cost_stage *st = &ev->stages[s];
        const struct unit *u0 = &ev->units[su[0]];
        double tf = u0->tflops, mem = u0->mem, membw = u0->membw;
        int same_node = 1;
        struct cost_link dp = {INFINITY, 0};
        for (int d = 0; d < D; d++) {
            const struct unit *x = &ev->units[su[d]];
            if (x->tflops < tf)
                tf = x->tflops;
            if (x->mem < mem)
                mem = x->mem;
            if (x->membw < membw)
                membw = x->membw;
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
        st->memory_gbps = membw;
        st->mem_bytes = mem;
        st->dp = dp;
        if (s < P - 1) {
            st->next = pl_boundary_links(ev, su, su + D, NULL, NULL, NULL);
        } else {
            st->next.bw = INFINITY;
            st->next.lat = 0;
        }
    }
    struct cost_link tie = {INFINITY, 0};
    /* the tie's shards go over the same kind of links, first <-> last stage; they run with the
     * gradient rings: they share their gateways too */
    if (P > 1)
        tie = pl_boundary_links(ev, stage_units, stage_units + (size_t)(P - 1) * D,
                                gateway ? ev->gw_in : NULL, NULL, NULL);
    ev->tie = tie;
}

static int stage_fits(const struct plan_eval *ev, int s, int P, int k)
{
    return isinf(ev->stages[s].mem_bytes) ||
           cost_stage_memory(&ev->cj, k, s, P) <= ev->stages[s].mem_bytes;
}

double pl_eval_sim(struct plan_eval *ev, int P, const int *layers, struct cost_breakdown *br)
{
    for (int s = 0; s < P; s++) {
        ev->stages[s].layers = layers[s];
        if (!stage_fits(ev, s, P, layers[s]))
            return INFINITY;
    }
    return cost_simulate(&ev->cj, &ev->links, ev->stages, P, &ev->tie, &ev->sim, br);
}

/* Stage s with k layers: its busy time per micro-batch (*op: compute, tensor all-reduces, the
 * all-gathers of what it receives) and the split's bound (*bound): m times the larger of that
 * (plus its sends when they block: links.send_buffers 0) and each link direction it feeds (the
 * simulation queues each direction on its own), plus what follows the last backward. INFINITY
 * when k layers do not fit in its devices' memory. */
static void stage_costs(struct plan_eval *ev, int s, int P, int k, double *bound, double *op)
{
    struct cost_stage st = ev->stages[s];
    struct cost_stage_terms t;
    ev->sim.work += STAGE_COST_WORK;
    if (!stage_fits(ev, s, P, k)) {
        *bound = *op = INFINITY;
        return;
    }
    st.layers = k;
    cost_stage_terms(&ev->cj, &ev->links, &st, s == 0, s == P - 1, P > 1 ? &ev->tie : NULL, &t);
    double bytes = cost_link_bytes(&ev->cj);
    double out = s < P - 1 ? bytes / st.next.bw : 0;                  /* activations forward */
    double back = s > 0 ? bytes / ev->stages[s - 1].next.bw : 0;     /* gradients back */
    *op = t.fwd + t.bwd + t.tp_fwd + t.tp_bwd + (s > 0 ? t.gather : 0) + (s < P - 1 ? t.gather : 0);
    double per_mb = *op;
    if (ev->links.send_buffers == 0) {
        per_mb += (s < P - 1 ? out + st.next.lat : 0) + (s > 0 ? back + ev->stages[s - 1].next.lat : 0);
    } else {
        per_mb = out > per_mb ? out : per_mb;
        per_mb = back > per_mb ? back : per_mb;
    }
    *bound = ev->cj.micro_batches * per_mb + t.dp_exposed + t.optimizer + t.param_copies;
}

static void equal_split(int L, int P, int *layers)
{
    for (int s = 0; s < P; s++)
        layers[s] = L / P + (s < L % P ? 1 : 0);
}

/* How balanced a split is: its largest stage's busy time per micro-batch (smaller is better). */
static double split_balance(struct plan_eval *ev, int P, const int *layers)
{
    double worst = 0, b, op;
    for (int s = 0; s < P; s++) {
        stage_costs(ev, s, P, layers[s], &b, &op);
        worst = op > worst ? op : worst;
    }
    return worst;
}

#define TIE_REL 1e-9 /* step times this close are equal: the more balanced split wins */

/* Is (t, bal) better than (best_t, best_bal): a shorter step, or as short and more balanced. */
static int better(double t, double bal, double best_t, double best_bal)
{
    if (t < best_t * (1 - TIE_REL))
        return 1;
    return t <= best_t * (1 + TIE_REL) && bal < best_bal * (1 - TIE_REL);
}

/* Minimax dynamic programme over contiguous splits into ev->layers: the largest per-stage
 * `bound` (cap -1), or the largest per-stage busy time among the splits whose every stage's
 * bound is at most `cap` (the most balanced of the optimal ones), or (cap SPLIT_MEMORY) the
 * largest ratio of a stage's memory to its devices'. All are monotone in a stage's layers, so
 * each step is a binary search: O(P L log L). Returns the optimum. */
#define SPLIT_MEMORY -2.0
static double minimax_split(struct plan_eval *ev, int P, double cap, double *cost)
{
    int memory = cap == SPLIT_MEMORY;
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
    for (int s = 0; s < P; s++) {
        for (int k = 1; k <= maxk; k++) {
            double b, op;
            if (memory) {
                cost[k] = cost_stage_memory(&ev->cj, k, s, P) / ev->stages[s].mem_bytes;
                continue;
            }
            stage_costs(ev, s, P, k, &b, &op);
            cost[k] = cap < 0 ? b : b <= cap ? op : INFINITY;
        }
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
    int j = L;
    for (int s = P - 1; s >= 0; s--) {
        int k = C[(size_t)s * W + (size_t)j];
        ev->layers[s] = k > 0 ? k : 1;
        j -= ev->layers[s];
    }
    return T[(size_t)(P - 1) * W + (size_t)L];
}

/* Moves one layer from stage a to stage b while the simulated step improves, or stays equal and
 * the split gets more balanced (every pair for short pipelines, neighbours otherwise), until
 * ev->sim.work reaches `stop`; the split in ev->layers, its step and balance in *best, *bal. */
/* The split in ev->layers simulated: 1 when it is better than *best (then *best and *bal are
 * its), else 0. */
static int take_split(struct plan_eval *ev, int P, double *best, double *bal)
{
    double v = pl_eval_sim(ev, P, ev->layers, NULL);
    double vb = v <= *best * (1 + TIE_REL) ? split_balance(ev, P, ev->layers) : INFINITY;
    if (!better(v, vb, *best, *bal))
        return 0;
    *best = v;
    *bal = vb;
    return 1;
}

/* Two one-layer moves at once (a to b and c to d, four distinct stages' counts changing or
 * one stage's by two), on short pipelines where single moves stop: the layers of the two stages
 * whose optimizer is slowest (low memory bandwidth) may belong on one stage two boundaries
 * away, and each single move on the way is worse (2,2,2,2 to 2,1,1,4 at 1.2x found so). The
 * first that is better is kept: 1, else 0. O(P^4) simulations. */
#define REFINE_PAIRS_MAX_P 6
static int refine_pairs(struct plan_eval *ev, int P, double *best, double *bal, double stop)
{
    for (int a = 0; a < P; a++)
        for (int b = 0; b < P; b++) {
            if (a == b || ev->layers[a] <= 1)
                continue;
            for (int c = a; c < P; c++)
                for (int d = 0; d < P; d++) {
                    /* each unordered pair of moves once; none that nets to one move or none */
                    if (c == d || (c == a && d <= b) || c == b || d == a)
                        continue;
                    if (ev->sim.work >= stop)
                        return 0;
                    ev->layers[a]--;
                    ev->layers[b]++;
                    if (ev->layers[c] <= 1) {
                        ev->layers[a]++;
                        ev->layers[b]--;
                        continue;
                    }
                    ev->layers[c]--;
                    ev->layers[d]++;
                    if (take_split(ev, P, best, bal))
                        return 1;
                    ev->layers[c]++;
                    ev->layers[d]--;
                    ev->layers[a]++;
                    ev->layers[b]--;
                }
        }
    return 0;
}

static void refine(struct plan_eval *ev, int P, double *best, double *bal, double stop)
{
    int all_pairs = P <= 16, L = ev->L;
    for (int iter = 0; iter < 4 * L && !ev->fast && isfinite(*best); iter++) {
        int improved = 0;
        for (int a = 0; a < P && ev->sim.work < stop; a++) {
            for (int b = 0; b < P && ev->sim.work < stop; b++) {
                if (a == b || ev->layers[a] <= 1 || (!all_pairs && abs(a - b) != 1))
                    continue;
                ev->layers[a]--;
                ev->layers[b]++;
                if (take_split(ev, P, best, bal)) {
                    improved = 1;
                } else {
                    ev->layers[a]++;
                    ev->layers[b]--;
                }
            }
        }
        if (!improved && P <= REFINE_PAIRS_MAX_P && ev->sim.work < stop)
            improved = refine_pairs(ev, P, best, bal, stop);
        if (!improved)
            break;
    }
}

/* The 1F1B warm-up depth (common/pipe_order.h) for the split in ev->best_layers (step t0 with
 * the standard warm-up): x = 1, 2, 4, ... extra micro-batches on every stage but the last, until
 * the first stage warms up with all of them; with `resplit`, each x's split refined again from
 * the standard one's (a deeper warm-up gives the later stages time to hide their data-parallel
 * reduce-scatter, which may make a different split the best). A deeper warm-up holds more
 * activations, so it is kept only when it shortens the best step so far by WARMUP_MIN_GAIN; a
 * stage it does not fit in memory makes the step INFINITY, and GPU workers whose memory is not
 * known (no gpu_memory_gb) keep the standard warm-up: there the planner could not tell a depth
 * that runs out of device memory from one that fits. Leaves the choice in
 * ev->best_warmup (and its split in ev->best_layers) and cj.warmup_extra 0. */
#define WARMUP_MIN_GAIN 0.005
static double choose_warmup(struct plan_eval *ev, int P, double t0, int resplit)
{
    int M = ev->cj.micro_batches;
    double best = t0;
    ev->best_warmup = 0;
    if (ev->cj.schedule != SCHED_1F1B || P < 2 || P - 1 >= M || !isfinite(t0) ||
        ev->warmup_unknown_memory)
        return t0;
    int *base = malloc(sizeof(int) * 2 * (size_t)P);
    if (!base)
        return t0;
    int *keep = base + P;
    memcpy(base, ev->best_layers, sizeof(int) * (size_t)P);
    for (int x = 1;; x *= 2) {
        if (P - 1 + x > M)
            x = M - (P - 1);
        ev->cj.warmup_extra = x;
        memcpy(ev->layers, base, sizeof(int) * (size_t)P);
        double t = pl_eval_sim(ev, P, ev->layers, NULL);
        if (resplit && isfinite(t)) {
            double bal = split_balance(ev, P, ev->layers);
            refine(ev, P, &t, &bal, ev->sim.work + ev->refine_work);
        }
        if (t < best * (1 - WARMUP_MIN_GAIN)) {
            best = t;
            ev->best_warmup = x;
            memcpy(keep, ev->layers, sizeof(int) * (size_t)P);
        }
        if (P - 1 + x >= M)
            break;
    }
    ev->cj.warmup_extra = 0;
    if (ev->best_warmup > 0)
        memcpy(ev->best_layers, keep, sizeof(int) * (size_t)P);
    free(base);
    return best;
}

/* The layer split of the placement pl_eval_links filled, into ev->best_layers: the dynamic
 * programme's most balanced optimal split and the equal split, the better by simulation; then
 * (unless ev->fast) one-layer moves across boundaries while the simulated step improves, or stays
 * equal and the split gets more balanced, within ev->refine_work simulated ops. */
static double partition(struct plan_eval *ev, int P)
{
    int L = ev->L;
    ev->cj.warmup_extra = ev->warmup_pin;
    ev->best_warmup = ev->warmup_pin;
    double *cost = malloc(sizeof(double) * (size_t)(L + 2));
    if (!cost)
        return INFINITY;
    double opt = minimax_split(ev, P, -1, cost);
    if (isfinite(opt))
        minimax_split(ev, P, opt * (1 + TIE_REL), cost);
    free(cost);
    double best = pl_eval_sim(ev, P, ev->layers, NULL);
    double bal = split_balance(ev, P, ev->layers);
    /* the equal split is a second starting point */
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    equal_split(L, P, ev->layers);
    double eq = pl_eval_sim(ev, P, ev->layers, NULL), eq_bal = split_balance(ev, P, ev->layers);
    if (better(eq, eq_bal, best, bal)) {
        best = eq;
        bal = eq_bal;
    } else {
        memcpy(ev->layers, ev->best_layers, sizeof(int) * (size_t)P);
    }
    refine(ev, P, &best, &bal, ev->sim.work + ev->refine_work);
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    ev->cj.warmup_extra = 0;
    return ev->warmup_search && !ev->warmup_pinned ? choose_warmup(ev, P, best, 1) : best;
}

double pl_memory_split(struct plan_eval *ev, int P)
{
    double *cost = malloc(sizeof(double) * (size_t)(ev->L + 2));
    if (!cost)
        return INFINITY;
    double r = minimax_split(ev, P, SPLIT_MEMORY, cost);
    free(cost);
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    return r;
}

/* Step time of a placement with the policy's partition (or the pin); split in best_layers. */
double pl_eval_placement(struct plan_eval *ev, int P, const int *stage_units,
                         const struct plan_job *job, int equal)
{
    pl_eval_links(ev, P, stage_units);
    /* the baselines (equal 2) keep the standard warm-up */
    ev->warmup_pin = equal != 2 && ev->warmup_pinned ? job->warmup : 0;
    ev->cj.warmup_extra = ev->best_warmup = ev->warmup_pin;
    double t;
    if (equal != 2 && job->pinned && job->n_pinned == P) {
        memcpy(ev->best_layers, job->pinned, sizeof(int) * (size_t)P);
        t = pl_eval_sim(ev, P, ev->best_layers, NULL);
        if (ev->warmup_search && !equal && !ev->warmup_pinned)
            t = choose_warmup(ev, P, t, 0);
    } else if (equal) {
        equal_split(ev->L, P, ev->best_layers);
        t = pl_eval_sim(ev, P, ev->best_layers, NULL);
    } else {
        t = partition(ev, P);
    }
    ev->cj.warmup_extra = 0;
    return t;
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

void pl_canonical(struct plan_eval *ev, int P, int *stage_units)
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
    struct plan_eval *ev = pl_eval_new(workers, n_workers, job, links, e);
    if (!ev)
        return NULL;
    if (pl_eval_shape(ev, job->pipeline, job->data, job->micro_batches, job->micro_batch_size, e)) {
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
    pl_eval_links(ev, ev->P, stage_units);
    return pl_eval_sim(ev, ev->P, layers, NULL);
}

double plan_eval_step_canonical(struct plan_eval *ev, int *stage_units, const int *layers)
{
    pl_canonical(ev, ev->P, stage_units);
    return plan_eval_step(ev, stage_units, layers);
}

void plan_eval_set_warmup(struct plan_eval *ev, int warmup_extra)
{
    ev->cj.warmup_extra = warmup_extra;
}
