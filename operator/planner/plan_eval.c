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
    free(ev->worker_count);
    free(ev->gw_in);
    free(ev->gw_a);
    free(ev->gw_b);
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
    ev->cj.model = job->model;
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
void pl_eval_links(struct plan_eval *ev, int P, const int *stage_units)
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

double pl_eval_sim(struct plan_eval *ev, int P, const int *layers, struct cost_breakdown *br)
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
    double best = pl_eval_sim(ev, P, ev->layers, NULL);
    /* the equal split is a second starting point */
    memcpy(ev->best_layers, ev->layers, sizeof(int) * (size_t)P);
    equal_split(L, P, ev->layers);
    double eq = pl_eval_sim(ev, P, ev->layers, NULL);
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
                double v = pl_eval_sim(ev, P, ev->layers, NULL);
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
double pl_eval_placement(struct plan_eval *ev, int P, const int *stage_units,
                         const struct plan_job *job, int equal)
{
    pl_eval_links(ev, P, stage_units);
    if (equal != 2 && job->pinned && job->n_pinned == P) {
        memcpy(ev->best_layers, job->pinned, sizeof(int) * (size_t)P);
        return pl_eval_sim(ev, P, ev->best_layers, NULL);
    }
    if (equal) {
        equal_split(ev->L, P, ev->best_layers);
        return pl_eval_sim(ev, P, ev->best_layers, NULL);
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
