/* The planner's entry point: plan_make searches the (pipeline, data, micro-batch) shapes and
 * builds the chosen plan (ranks, stages, communicators and their transports). */
#include "planner_impl.h"
#include "pipe_order.h"

#include <math.h>
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
    j->token_slices = 1;
}

/* ---- shapes of the auto search ---- */

/* Shapes whose quick estimate reaches this fraction of the best estimate get the full search. */
#define SHAPE_KEEP 0.8

/* (pipeline, data, micro-batches, micro-batch size) candidates of the auto search. */
struct shape {
    int P, D, m, b;
};

/* Tokens one step of shape `sh` trains (sequences of `seq` tokens). */
static double tokens_per_step(const struct shape *sh, int seq)
{
    return (double)sh->m * sh->b * sh->D * seq;
}

/* Tokens per second of shape `sh` at `step_s` seconds per step. */
static double tokens_per_s(const struct shape *sh, int seq, double step_s)
{
    return tokens_per_step(sh, seq) / step_s;
}

static int list_shapes(const struct plan_job *job, int units, struct shape **out, int *n, herr *e)
{
    int cap = 64, k = 0;
    struct shape *v = malloc(sizeof *v * (size_t)cap);
    if (!v)
        return herr_set(e, "planner: out of memory");
    /* The micro-batching is the job's: the workers run microBatches of microBatchSize
     * (trainer_config_from_spec), so that is what is priced. (A smaller size would always look
     * faster here, more micro-batches shrinking the bubble, as the cost model does not price a
     * device's lower efficiency on smaller products.) */
    int b = job->micro_batch_size, m = job->micro_batches;
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
        v[k++] = (struct shape){P, D, m, b};
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
    int cpu = 0; /* a CPU rank among the members, on real NICs */
    for (int i = 0; i < n && !p->emulated; i++)
        cpu |= p->workers[p->ranks[members[i]].worker].gpus == 0;
    t->intra_node = same_node;
    if (p->policy == POLICY_ETHERNET && !same_node) {
        t->kind = TRANSPORT_SOCKET;
        snprintf(t->reason, sizeof t->reason, "ethernet baseline: every group on TCP");
    } else if (cpu && !same_node) {
        t->kind = TRANSPORT_SOCKET;
        snprintf(t->reason, sizeof t->reason, "CPU ranks send over holmes' TCP transport (no "
                 "RDMA on the CPU path)");
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

/* What the cost model priced each link and embedding group at (its Gb/s and NIC share), and
 * each boundary's slowest link (stages[].link_s). 0, or -1 out of memory. */
static int price_links(struct plan *p, struct plan_eval *ev, const int *stage_units, int emb0,
                       int link0, herr *e)
{
    int P = p->pipeline, D = p->data, t = p->tensor;
    size_t n = (size_t)D * t;
    struct cost_link *lk = malloc(n * sizeof *lk);
    double *share = malloc(n * sizeof *share);
    if (!lk || !share) {
        free(lk);
        free(share);
        return herr_set(e, "planner: out of memory for the links");
    }
    double bytes = cost_link_bytes(&ev->cj);
    for (int s = 0; s < P; s++) {
        int to = s + 1 < P ? s + 1 : 0; /* the last: the embedding tie, back to the first */
        enum group_kind kind = s + 1 < P ? GROUP_LINK : GROUP_EMBEDDING;
        int from = kind == GROUP_LINK ? s : 0, other = kind == GROUP_LINK ? to : P - 1;
        pl_boundary_links(ev, stage_units + (size_t)from * D, stage_units + (size_t)other * D,
                          kind == GROUP_EMBEDDING && ev->links.gateway_gbps > 0 ? ev->gw_in : NULL,
                          lk, share);
        for (int d = 0; d < D; d++)
            for (int r = 0; r < t; r++) {
                /* build_plan's order: embedding by (replica, tensor rank), links by (stage,
                 * replica, tensor rank) */
                struct plan_group *g = &p->groups[kind == GROUP_LINK
                                                      ? link0 + ((size_t)s * D + d) * t + r
                                                      : emb0 + (size_t)d * t + r];
                g->gbps = lk[(size_t)d * t + r].bw * 8 / 1e9;
                g->nic_share = share[(size_t)d * t + r];
            }
        if (kind == GROUP_LINK) {
            struct cost_link w = ev->stages[s].next;
            p->stages[s].link_s = bytes / w.bw + w.lat;
        }
    }
    free(lk);
    free(share);
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
    long ng = (long)(t > 1 ? P * D : 0) + (D > 1 ? P * t : 0) + (P > 1 ? 2L * D * t : 0) +
              (long)(P - 1) * D * t;
    p->groups = calloc((size_t)(ng > 0 ? ng : 1), sizeof *p->groups);
    if (!p->ranks || !p->stages || !p->groups)
        return herr_set(e, "planner: out of memory for %d ranks", p->n_ranks);
    pl_eval_links(ev, P, stage_units);
    ev->cj.warmup_extra = p->warmup_extra; /* the memory, the step and the slicing with it */
    struct cost_stage_terms terms;
    int first = 0;
    for (int s = 0; s < P; s++) {
        struct plan_stage *st = &p->stages[s];
        st->first_layer = first;
        st->last_layer = first + layers[s];
        first += layers[s];
        ev->stages[s].layers = layers[s];
        st->tflops = ev->stages[s].tflops;
        st->memory_gbps = ev->stages[s].memory_gbps;
        cost_stage_terms(&ev->cj, &ev->links, &ev->stages[s], s == 0, s == P - 1,
                         P > 1 ? &ev->tie : NULL, &terms);
        st->fwd_s = terms.fwd + terms.tp_fwd;
        st->bwd_s = terms.bwd + terms.tp_bwd;
        st->dp_s = terms.dp_exposed;
        st->optimizer_s = terms.optimizer + terms.param_copies;
        st->gather_s = terms.gather;
        cost_stage_memory_parts(&ev->cj, layers[s], s, P, &st->memory);
        st->memory_gb = st->memory.total / 1e9;
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
    int emb0 = p->n_groups;
    for (int d = 0; d < D && P > 1; d++)
        for (int r = 0; r < t; r++) {
            if (add_group(p, GROUP_EMBEDDING, -1, 2, e))
                return -1;
            p->groups[p->n_groups - 1].members[0] = plan_rank_of(p, 0, d, r);
            p->groups[p->n_groups - 1].members[1] = plan_rank_of(p, P - 1, d, r);
        }
    /* the pipeline's point-to-point links: stage s -> s + 1, one per replica and tensor rank
     * (after the collectives, so their indices stay what they were) */
    int link0 = p->link_group0 = p->n_groups;
    for (int s = 0; s + 1 < P; s++)
        for (int d = 0; d < D; d++)
            for (int r = 0; r < t; r++) {
                if (add_group(p, GROUP_LINK, s, 2, e))
                    return -1;
                p->groups[p->n_groups - 1].members[0] = plan_rank_of(p, s, d, r);
                p->groups[p->n_groups - 1].members[1] = plan_rank_of(p, s + 1, d, r);
            }
    p->n_socket_groups = 0;
    for (int g = 0; g < p->n_groups; g++) {
        struct plan_group *gr = &p->groups[g];
        transport_of(p, gr->members, gr->n, &gr->transport);
        if ((gr->kind == GROUP_DP || gr->kind == GROUP_TP) &&
            gr->transport.kind == TRANSPORT_SOCKET && !gr->transport.intra_node)
            p->n_socket_groups++;
    }
    if (P > 1 && price_links(p, ev, stage_units, emb0, link0, e))
        return -1;
    p->step_s = pl_eval_sim(ev, P, layers, &p->breakdown);
    if (ev->token_slices != 1 && pl_slices(ev, P, layers, ev->token_slices, p, e) != 0)
        return -1;
    if (!isfinite(p->step_s))
        return herr_set(e, "planner: nothing fits in the GPUs' memory with %d token slices "
                        "(pipeline %d x data %d): each slot holds the sliced backward's "
                        "accumulators", p->slices > 1 ? p->slices : ev->token_slices, P, D);
    if (p->slices > 1) { /* the stages hold what the slices need (cost_stage_memory_parts) */
        ev->cj.slices = p->slices;
        ev->cj.slice_bounds = p->slice_bounds;
        for (int s = 0; s < P; s++) {
            cost_stage_memory_parts(&ev->cj, layers[s], s, P, &p->stages[s].memory);
            p->stages[s].memory_gb = p->stages[s].memory.total / 1e9;
        }
        ev->cj.slices = 0;
        ev->cj.slice_bounds = NULL;
    }
    struct shape sh = {P, D, p->micro_batches, p->micro_batch_size};
    p->tokens_per_s = tokens_per_s(&sh, ev->cj.model.seq_len, p->step_s);
    return 0;
}

void plan_schedule_text(const struct plan *p, char *buf, size_t cap)
{
    if (p->schedule != SCHED_1F1B || p->warmup_extra <= 0) {
        snprintf(buf, cap, "%s", schedule_name(p->schedule));
        return;
    }
    int S = p->slices > 1 ? p->slices : 1, n_last = p->pipeline - 2;
    char stages[32], slots[160] = "";
    if (n_last > 0)
        snprintf(stages, sizeof stages, "stages 0-%d", n_last);
    else
        snprintf(stages, sizeof stages, "stage 0");
    size_t at = 0;
    for (int s = 0; s < p->pipeline && at < sizeof slots; s++) {
        int k = snprintf(slots + at, sizeof slots - at, "%s%d", s ? ", " : "",
                         pipe_slots(p->schedule, s, p->pipeline, p->micro_batches, S,
                                    p->warmup_extra));
        if (k < 0)
            break;
        at += (size_t)k;
    }
    snprintf(buf, cap, "1f1b, warm-up +%d micro-batch%s on %s (micro-batches in flight per stage: %s)",
             p->warmup_extra, p->warmup_extra == 1 ? "" : "es", stages, slots);
}

void plan_boundary_links(const struct plan *p, int s, struct plan_boundary *out)
{
    memset(out, 0, sizeof *out);
    out->reason = "";
    out->gbps = INFINITY;
    if (s < 0 || s + 1 >= p->pipeline)
        return;
    int per = p->data * p->tensor, intra = 0;
    for (int i = 0; i < per; i++) {
        const struct plan_group *g = &p->groups[p->link_group0 + (size_t)s * per + i];
        out->n[g->transport.kind]++;
        intra += g->transport.intra_node;
        out->gbps = g->gbps < out->gbps ? g->gbps : out->gbps;
        if (g->transport.kind == TRANSPORT_SOCKET && !out->reason[0])
            out->reason = g->transport.reason;
    }
    out->intra_node = intra == per;
    for (int k = 0; k < TRANSPORT_COUNT; k++)
        if (out->n[k]) {
            out->mixed |= out->n[k] != per;
            out->kind = (enum transport)k;
        }
    out->seconds = p->stages[s].link_s;
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
    free(p->slice_bounds);
    memset(p, 0, sizeof *p);
}

/* ---- plan_make ---- */

/* The auto search's state: the shapes, their quick estimates and the best plan found so far. */
struct auto_search {
    const struct plan_job *job;
    struct plan_eval *ev;
    struct shape *shapes;
    int n_shapes;
    double *quick;        /* per shape: the quick estimate in tokens/s, 0 when none */
    double quick_best;
    int *best_units, *naive_units, *best_layers;
    int best_warmup;
    struct shape best_shape;
    double best_tps;
    int to_search;        /* shapes the full search has still to do */
    double work_end;      /* the simulated-ops count PLAN_WORK ends at */
};

/* Does shape i get the full search (else its quick estimate stands)? */
static int full_search(const struct auto_search *A, int i)
{
    return A->job->policy == POLICY_HOLMES &&
           (A->n_shapes == 1 || A->quick[i] >= SHAPE_KEEP * A->quick_best);
}

static int auto_search_init(struct auto_search *A, herr *e)
{
    int n_units = A->ev->n_units;
    A->best_units = malloc(sizeof(int) * (size_t)n_units);
    A->naive_units = malloc(sizeof(int) * (size_t)n_units);
    if (!A->best_units || !A->naive_units)
        return herr_set(e, "planner: out of memory");
    if (list_shapes(A->job, n_units, &A->shapes, &A->n_shapes, e))
        return -1;
    A->best_layers = malloc(sizeof(int) * (size_t)A->job->model.layers);
    if (!A->best_layers)
        return herr_set(e, "planner: out of memory");
    A->quick = calloc((size_t)A->n_shapes, sizeof(double));
    if (!A->quick)
        return herr_set(e, "planner: out of memory");
    return 0;
}

static void auto_search_free(struct auto_search *A)
{
    free(A->shapes);
    free(A->best_units);
    free(A->naive_units);
    free(A->best_layers);
    free(A->quick);
    plan_eval_free(A->ev);
}

/* auto search: a quick estimate of every shape first; the full search only for shapes
 * within SHAPE_KEEP of the best estimate (the others keep their estimate) */
static int estimate_shapes(struct auto_search *A, herr *e)
{
    const struct plan_job *job = A->job;
    for (int i = 0; i < A->n_shapes && A->n_shapes > 1 && job->policy == POLICY_HOLMES; i++) {
        struct shape sh = A->shapes[i];
        struct search S;
        if (pl_eval_shape(A->ev, sh.P, sh.D, sh.m, sh.b, e))
            return -1;
        int rc_init = pl_search_init(&S, A->ev, job, sh.P, sh.D, e);
        S.quick = 1;
        if (rc_init || pl_holmes_search(&S, e)) {
            pl_search_free(&S);
            return -1;
        }
        if (isfinite(S.best_t) && S.best_t > 0)
            A->quick[i] = tokens_per_s(&sh, job->model.seq_len, S.best_t);
        if (A->quick[i] > A->quick_best)
            A->quick_best = A->quick[i];
        pl_search_free(&S);
    }
    return 0;
}

/* Takes the result of a full search of shape `sh` (step time t, placement `units`, split
 * `layers`, 1F1B warm-up depth `warmup`): among the top candidates, and as the plan when it is
 * the fastest so far. */
static void take_result(struct plan *out, struct auto_search *A, struct shape sh, double t,
                        const int *units, const int *layers, int warmup)
{
    if (!isfinite(t) || t <= 0)
        return;
    double tps = tokens_per_s(&sh, A->job->model.seq_len, t);
    struct plan_candidate c = {sh.P, sh.D, sh.m, sh.b, t, tps};
    keep_top(out, &c);
    if (tps > A->best_tps) {
        A->best_tps = tps;
        A->best_shape = sh;
        memcpy(A->best_units, units, sizeof(int) * (size_t)A->ev->n_units);
        memcpy(A->best_layers, layers, sizeof(int) * (size_t)sh.P);
        A->best_warmup = warmup;
    }
}

/* Shape i: the full holmes search, or the naive placement; a holmes shape whose quick estimate
 * is below SHAPE_KEEP of the best only lists that estimate among the top candidates. */
static int search_shape(struct plan *out, struct auto_search *A, int i, herr *e)
{
    const struct plan_job *job = A->job;
    struct plan_eval *ev = A->ev;
    struct shape sh = A->shapes[i];
    if (pl_eval_shape(ev, sh.P, sh.D, sh.m, sh.b, e))
        return -1;
    if (job->policy == POLICY_HOLMES && !full_search(A, i)) {
        if (A->quick[i] > 0) {
            struct plan_candidate c = {sh.P, sh.D, sh.m, sh.b,
                                       tokens_per_step(&sh, job->model.seq_len) / A->quick[i],
                                       A->quick[i]};
            keep_top(out, &c);
        }
        return 0;
    }
    if (job->policy != POLICY_HOLMES) {
        double t = pl_naive_eval(ev, job, sh.P, A->naive_units, 0);
        take_result(out, A, sh, t, A->naive_units, ev->best_layers, ev->best_warmup);
        return 0;
    }
    struct search S;
    int rc_init = pl_search_init(&S, ev, job, sh.P, sh.D, e);
    /* PLAN_WORK shared among the shapes still to search */
    double left = A->work_end - ev->sim.work;
    S.budget = left > 0 ? left / (A->to_search > 0 ? A->to_search : 1) : 0;
    if (S.budget < PLAN_SEARCH_WORK / 16)
        S.budget = PLAN_SEARCH_WORK / 16;
    A->to_search--;
    if (rc_init || pl_holmes_search(&S, e)) {
        pl_search_free(&S);
        return -1;
    }
    take_result(out, A, sh, S.best_t, S.best, S.best_layers, S.best_warmup);
    pl_search_free(&S);
    return 0;
}

/* Whether a fabric-homogeneous placement of D replicas exists, in *possible. */
static int homogeneous_for(const struct plan_eval *ev, int D, int *possible, herr *e)
{
    int *fs = calloc((size_t)ev->n_fabrics + 1, sizeof(int));
    if (!fs)
        return herr_set(e, "planner: out of memory");
    for (int u = 0; u < ev->n_units; u++)
        fs[ev->units[u].fabric + 1]++;
    for (int f = 0; f < ev->n_fabrics; f++)
        fs[f + 1] += fs[f];
    *possible = pl_homogeneous_possible(ev, fs, D);
    free(fs);
    return 0;
}

/* Fills `out` with the best shape: the job's settings, a copy of the workers, the naive and
 * ethernet baselines, and the plan itself. */
static int fill_plan(struct plan *out, struct auto_search *A, const struct plan_worker *workers,
                     int n_workers, const struct cost_links *links, herr *e)
{
    const struct plan_job *job = A->job;
    struct plan_eval *ev = A->ev;
    struct shape best_shape = A->best_shape;
    out->policy = job->policy;
    out->emulated = job->emulated;
    out->tensor = job->tensor;
    out->pipeline = best_shape.P;
    out->data = best_shape.D;
    out->micro_batches = best_shape.m;
    out->micro_batch_size = best_shape.b;
    out->schedule = job->schedule;
    out->warmup_extra = A->best_warmup;
    out->links = *links;
    out->n_workers = n_workers;
    out->workers = malloc(sizeof *out->workers * (size_t)n_workers);
    if (!out->workers)
        return herr_set(e, "planner: out of memory");
    memcpy(out->workers, workers, sizeof *out->workers * (size_t)n_workers);
    if (pl_eval_shape(ev, best_shape.P, best_shape.D, best_shape.m, best_shape.b, e) ||
        homogeneous_for(ev, best_shape.D, &out->homogeneous_possible, e))
        return -1;
    /* baselines on the same shape */
    ev->policy = POLICY_NAIVE;
    out->baseline_naive_s = pl_naive_eval(ev, job, best_shape.P, A->naive_units, 1);
    ev->policy = POLICY_ETHERNET;
    out->baseline_ethernet_s = pl_naive_eval(ev, job, best_shape.P, A->naive_units, 1);
    ev->policy = job->policy;
    return build_plan(out, ev, A->best_units, A->best_layers, e);
}

/* Nothing could be planned: when memory is why, names the stage of the shape that comes closest
 * to fitting (its placement with the workers as listed, its split the one that needs the least
 * memory, or the pinned one), the bytes it needs, part by part, and the bytes its GPUs have.
 * Always -1. */
static int memory_refusal(struct auto_search *A, herr *e)
{
    struct plan_eval *ev = A->ev;
    const struct plan_job *job = A->job;
    double best = INFINITY;
    int bi = -1;
    /* the standard warm-up needs the least memory; a pinned one is what was asked for */
    ev->cj.warmup_extra = job->warmup_pinned ? job->warmup : 0;
    herr ignore;
    for (int i = 0; i < A->n_shapes; i++) {
        struct shape sh = A->shapes[i];
        if (pl_eval_shape(ev, sh.P, sh.D, sh.m, sh.b, &ignore))
            continue;
        for (int u = 0; u < sh.P * sh.D; u++)
            A->naive_units[u] = u;
        pl_canonical(ev, sh.P, A->naive_units);
        pl_eval_links(ev, sh.P, A->naive_units);
        double r;
        if (job->pinned && job->n_pinned == sh.P) {
            r = 0;
            for (int s = 0; s < sh.P; s++) {
                double q = cost_stage_memory(&ev->cj, job->pinned[s], s, sh.P) / ev->stages[s].mem_bytes;
                r = q > r ? q : r;
            }
        } else {
            r = pl_memory_split(ev, sh.P);
        }
        if (r < best) {
            best = r;
            bi = i;
        }
    }
    if (bi < 0 || !(best > 1) || !isfinite(best))
        return herr_set(e, "planner: no placement fits: no (pipeline, data, micro-batch) shape "
                        "has a feasible layer split");
    struct shape sh = A->shapes[bi];
    if (pl_eval_shape(ev, sh.P, sh.D, sh.m, sh.b, &ignore))
        return herr_set(e, "%s", ignore.msg);
    for (int u = 0; u < sh.P * sh.D; u++)
        A->naive_units[u] = u;
    pl_canonical(ev, sh.P, A->naive_units);
    pl_eval_links(ev, sh.P, A->naive_units);
    int pinned = job->pinned && job->n_pinned == sh.P;
    if (pinned)
        memcpy(ev->best_layers, job->pinned, sizeof(int) * (size_t)sh.P);
    else
        pl_memory_split(ev, sh.P);
    int worst = 0, first = 0, first_worst = 0;
    double wr = 0;
    for (int s = 0; s < sh.P; s++) {
        double q = cost_stage_memory(&ev->cj, ev->best_layers[s], s, sh.P) / ev->stages[s].mem_bytes;
        if (q > wr) {
            wr = q;
            worst = s;
            first_worst = first;
        }
        first += ev->best_layers[s];
    }
    struct cost_memory m;
    int k = ev->best_layers[worst];
    cost_stage_memory_parts(&ev->cj, k, worst, sh.P, &m);
    double have = ev->stages[worst].mem_bytes;
    const struct unit *u = &ev->units[A->naive_units[(size_t)worst * sh.D]];
    return herr_set(e, "planner: nothing fits in the GPUs' memory: %s (pipeline %d x data %d, %d "
                    "micro-batches of %d, %s split), stage %d (layers [%d, %d) on fabric %s) needs "
                    "%.2f GB per GPU (%.0f bytes: weights and gradients %.2f GB, optimizer state "
                    "%.2f GB sharded over data %d, activations %.2f GB of %d micro-batches in "
                    "flight, logits %.2f GB, workspace and pipeline buffers %.2f GB; tensor %d), "
                    "and its GPUs have %.2f GB (%.0f bytes: 90 %% of the %g GB each holds)",
                    A->n_shapes > 1 ? "at the shape closest to fitting" : "at this shape", sh.P,
                    sh.D, sh.m, sh.b, pinned ? "the pinned" : "the least memory-hungry", worst,
                    first_worst, first_worst + k, ev->fabric_names[u->fabric], m.total / 1e9,
                    m.total, m.weights_grads / 1e9, m.optimizer / 1e9, sh.D,
                    m.activations / 1e9, m.slots, m.logits / 1e9, (m.scratch + m.pipeline) / 1e9,
                    ev->t, have / 1e9, have,
                    have / 0.9 / 1e9);
}

int plan_make(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
              const struct cost_links *links, struct plan *out, herr *e)
{
    memset(out, 0, sizeof *out);
    if (plan_check_input(workers, n_workers, job, e) || cost_links_check(links, e))
        return -1;
    struct auto_search A = {.job = job, .best_tps = -1};
    A.ev = pl_eval_new(workers, n_workers, job, links, e);
    if (!A.ev)
        return -1;
    int rc = -1;
    if (auto_search_init(&A, e) || estimate_shapes(&A, e))
        goto done;
    A.work_end = A.ev->sim.work + PLAN_WORK;
    for (int i = 0; i < A.n_shapes; i++)
        A.to_search += full_search(&A, i);
    for (int i = 0; i < A.n_shapes; i++)
        if (search_shape(out, &A, i, e))
            goto done;
    if (A.best_tps <= 0) {
        memory_refusal(&A, e);
        goto done;
    }
    if (fill_plan(out, &A, workers, n_workers, links, e))
        goto done;
    out->sim_runs = A.ev->sim.runs;
    out->sim_ops = A.ev->sim.work;
    rc = 0;
done:
    if (rc)
        plan_free(out);
    auto_search_free(&A);
    return rc;
}
