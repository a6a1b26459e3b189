/* Private to operator/planner/: what the planner's files share.
 *   planner_check.c  the input checks (plan_check_input, plan_devices)
 *   plan_eval.c      the evaluation of one placement (units, links, partition, step time) and
 *                    the plan_eval_* entry points
 *   plan_search.c    the holmes placement search and the naive placement
 *   planner.c        plan_make: the shapes of the auto search, and the plan built */
#ifndef HOLMES_PLANNER_IMPL_H
#define HOLMES_PLANNER_IMPL_H

#include "planner.h"

static inline int worker_devices(const struct plan_worker *w)
{
    return w->gpus > 0 ? w->gpus : 1;
}

/* ---- plan_eval.c ---- */

struct unit {
    int worker, local;   /* first device */
    int fabric;          /* index into ev->fabric_names */
    int cls;             /* enum nic_class */
    int node;            /* node index */
    int cpu;             /* its worker has no GPU: its sends to a unit on its node go over
                            loopback TCP, not NVLink or shared memory */
    int klass;           /* interchangeable units share a class */
    double gbps, tflops;
    double mem;          /* bytes per device, INFINITY when unknown */
    double membw;        /* memory GB/s per device (the worker's, else the links') */
    int nics, devs;      /* its worker's NICs and devices */
    int nic_base;        /* its worker's first NIC in plan_eval.nic_out / nic_in */
};

struct plan_eval {
    const struct plan_worker *workers;
    int n_workers;
    struct cost_links links;
    struct cost_job cj;
    enum policy policy;
    int token_slices;      /* the job's tokenSlices (1, N, TJ_AUTO) */
    int P, D, t, L;
    int capP;              /* stages the buffers hold */
    int fast;              /* partition by the dynamic programme only (no refinement) */
    double refine_work;    /* simulated ops one partition's refinement may spend */
    int warmup_search;     /* partitions also choose the 1F1B warm-up depth (best_warmup) */
    int best_warmup;       /* the warm-up depth of best_layers (cost_job.warmup_extra) */
    int warmup_unknown_memory; /* a GPU worker without gpu_memory_gb: no deeper warm-up */
    int warmup_pinned;     /* the job pins the depth (plan_job.warmup_pinned) ... */
    int warmup_pin;        /* ... to this for the placement being evaluated (0: baselines) */
    int n_units, n_fabrics, n_classes;
    struct unit *units;
    const char **fabric_names;
    int *fabric_rank;      /* preference order of each fabric (0 = best) */
    int *gw_in;            /* scratch, n_fabrics: ring flows entering each fabric's gateway */
    int *gw_a, *gw_b;      /* scratch, n_fabrics: pair flows entering each fabric (a, b side) */
    int *nic_base;         /* n_workers + 1: worker w's NICs are nic_base[w] .. nic_base[w+1]-1 */
    int *nic_out, *nic_in; /* scratch, per NIC: the links of a boundary leaving / entering it */
    int *tcp_out, *tcp_in; /* scratch, per worker: the links of a boundary leaving / entering it
                              to / from other fabrics (they share its tcp_gbps) */
    struct cost_stage *stages;
    struct cost_link tie;
    struct cost_sim sim;
    double *table;         /* partition table: P * (L + 1) */
    int *choice;           /* P * (L + 1) */
    int *layers;           /* P */
    int *best_layers;      /* P */
};

/* Sets up the units (tensor blocks) and fabrics; P/D/micro-batches are set by pl_eval_shape. */
struct plan_eval *pl_eval_new(const struct plan_worker *workers, int n_workers,
                              const struct plan_job *job, const struct cost_links *links,
                              herr *e);
/* Sets pipeline, data and micro-batching; (re)allocates the per-stage buffers. */
int pl_eval_shape(struct plan_eval *ev, int P, int D, int m, int b, herr *e);
/* Fills ev->stages[0..P) (all but layers) from stage_units. */
void pl_eval_links(struct plan_eval *ev, int P, const int *stage_units);
/* The point-to-point links from the units a[0..D) to b[0..D) (t links each: tensor rank r of
 * a[d] to tensor rank r of b[d]), each at its share of the NICs at both ends; `gw_extra[f]`
 * (or NULL): other flows on fabric f's gateway meanwhile. Returns the slowest; fills link[d*t+r]
 * and share[d*t+r] (the NIC share, 1 inside a node) when not NULL. */
struct cost_link pl_boundary_links(struct plan_eval *ev, const int *a, const int *b,
                                   const int *gw_extra, struct cost_link *link, double *share);
/* Simulated step time of the split `layers` on the links pl_eval_links filled; INFINITY when a
 * stage does not fit in its devices' memory. */
double pl_eval_sim(struct plan_eval *ev, int P, const int *layers, struct cost_breakdown *br);
/* Step time of a placement with the policy's partition (or the pin); split in best_layers. */
double pl_eval_placement(struct plan_eval *ev, int P, const int *stage_units,
                         const struct plan_job *job, int equal);
/* The split (into best_layers) of the placement pl_eval_links filled that needs the least
 * memory relative to each stage's devices: returns its largest need / have (> 1: none fits). */
double pl_memory_split(struct plan_eval *ev, int P);
/* Puts each stage's units in the canonical replica order. */
void pl_canonical(struct plan_eval *ev, int P, int *stage_units);

/* ---- plan_slices.c ---- */

/* TeraPipe's token slicing of the plan p built on ev (P stages of `layers`; p->step_s the
 * unsliced step): `want` 1 nothing, N an even cut, TJ_AUTO TeraPipe's DP over the cost model,
 * kept only when the simulated step is shorter. Fills p's slice fields (and step_s, breakdown).
 * 0, or -1 with `e`. */
int pl_slices(struct plan_eval *ev, int P, const int *layers, int want, struct plan *p, herr *e);

/* ---- plan_search.c ---- */

struct search {
    struct plan_eval *ev;
    const struct plan_job *job;
    int P, D;
    int homog;            /* restrict to fabric-homogeneous stages */
    int *cur, *best;      /* P*D unit ids */
    int *best_layers;
    int best_warmup;      /* best_layers' 1F1B warm-up depth (cost_job.warmup_extra) */
    double best_t;
    int *fab_units;       /* units grouped by fabric */
    int *fab_start;       /* n_fabrics + 1 */
    int *perm;
    long evals;
    double budget;        /* simulated ops the search may spend (cost_sim.work) */
    double stop;          /* ... until the ops count reaches this */
    int *top;             /* SEARCH_TOP starting points for the local search, P*D each */
    double top_t[8];
    int n_top;
    int *loc;             /* the local search's current solution */
    int *rep, *nrep;      /* per stage: a position of each distinct class (SEARCH_REPS max) */
    int quick;            /* evaluate one candidate only */
    int *near;            /* the placement closest to fitting of those that do not fit */
    double near_r;        /* how far it is: 1 + its devices' memory deficit (plan_search.c's
                             memory_deficit; INFINITY: none seen) */
    int penalize;         /* try_candidate scores a placement that does not fit by that measure
                             (INFEASIBLE_STEP x it) instead of INFINITY */
};
/* a score above any step time: placements that do not fit, ordered by how far they are off */
#define INFEASIBLE_STEP 1e30
#define SEARCH_TOP 8
#define SEARCH_REPS 32
/* The search's budget, in simulated ops (a schedule simulation of P stages and m micro-batches
 * is 2 P m of them; a stage's cost in the split's dynamic programme counts as STAGE_COST_WORK, a
 * placement's links UNIT_WORK per tensor block).
 * plan_make shares PLAN_WORK among the shapes it searches; a search keeps SEARCH_REFINE_SHARE of
 * its budget to refine the split of its best few placements. */
#define PLAN_WORK 1.2e7
#define PLAN_SEARCH_WORK 4e6
#define SEARCH_REFINE_SHARE 0.25
#define SEARCH_REFINE_EVALS 64 /* small clusters: one placement's split refinement, at most
                                  budget / SEARCH_REFINE_EVALS */
#define STAGE_COST_WORK 4
#define UNIT_WORK 4 /* a placement's links, per tensor block */
#define SEARCH_ROTATIONS 8 /* ring rotations tried per fabric-first candidate */
#define SEARCH_KICKS 32 /* the iterated local search stops after this many kicks found nothing
                          (the budget stops it first on large clusters) */

/* Is a fabric-homogeneous placement possible: every fabric's units a multiple of D. */
int pl_homogeneous_possible(const struct plan_eval *ev, const int *fab_start, int D);
int pl_search_init(struct search *S, struct plan_eval *ev, const struct plan_job *job, int P,
                   int D, herr *e);
void pl_search_free(struct search *S);
/* Best holmes placement for (P, D): fills S->best, S->best_layers, S->best_t. */
int pl_holmes_search(struct search *S, herr *e);
/* Naive (Megatron order over the workers as listed) placement with equal layers (or the pin,
 * unless `baseline`). */
double pl_naive_eval(struct plan_eval *ev, const struct plan_job *job, int P, int *stage_units,
                     int baseline);

#endif
