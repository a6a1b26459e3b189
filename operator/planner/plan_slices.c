/* TeraPipe token slicing for a chosen placement (spec.parallelism.tokenSlices): an integer N is
 * cut evenly and priced; `auto` runs TeraPipe's dynamic programme (Li et al., ICML 2021, sec. 4)
 * over the cost model's slice prices, then the full schedule simulation of the slicing it found
 * against the unsliced one, and keeps slicing only when it pays.
 *
 * The programme: a slice [a, b) costs t(a, b) on the slowest stage = its share of that stage's
 * micro-batch compute (cost_slice_compute_share: later slices attend to more context) plus the
 * two messages it adds at each boundary (activations forward, gradients back: their latency and
 * their share of the transfer). With M micro-batches of slices t_1 .. t_S on P stages the step
 * is about M * sum(t_i) + (P - 1) * max(t_i). For every candidate bound on max(t_i), a DP over
 * token positions (in granules of T / G tokens) finds the slicing with the smallest sum whose
 * slices all stay under it; the best total over the candidates wins. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner_impl.h"

#define SLICE_GRANULES 64   /* token positions the DP may cut at (at most) */
#define SLICE_CANDIDATES 256 /* bounds on the largest slice tried */
#define SLICE_MIN_GAIN 0.01 /* slicing must predict a step at least 1 % shorter */

/* The slowest stage's compute of one micro-batch and the pipeline's slowest link. */
struct slice_price {
    double compute;   /* forward + backward seconds of a micro-batch on the slowest stage */
    double xfer;      /* seconds to send one micro-batch's share of the activations (1/tensor)
                         over the slowest link */
    double lat;       /* that link's latency */
    double ovh;       /* links.op_overhead_us: a forward and a backward of a slice each pay it */
    double tp_lat;    /* the tensor all-reduces' latency of a forward and a backward, which every
                         slice pays (the per-row sums once per sequence; the slowest stage's) */
    int T;
};

static double price(const struct plan_eval *ev, const struct slice_price *sp, int a, int b)
{
    double share = cost_slice_compute_share(&ev->cj, a, b);
    return sp->compute * share + sp->tp_lat + 2 * (sp->xfer * (b - a) / sp->T + sp->lat + sp->ovh);
}

static void slice_prices(struct plan_eval *ev, int P, struct slice_price *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->T = ev->cj.model.seq_len;
    sp->ovh = ev->links.op_overhead_us * 1e-6;
    for (int s = 0; s < P; s++) {
        struct cost_stage_terms t;
        cost_stage_terms(&ev->cj, &ev->links, &ev->stages[s], s == 0, s == P - 1,
                         P > 1 ? &ev->tie : NULL, &t);
        /* compute, the tensor all-reduces' bytes, and the all-gathers of what the stage
         * receives (a slice's share of them is its tokens', close enough to its compute share
         * here); the all-reduces' latency is every slice's whole */
        double c = t.fwd + t.bwd + t.tp_fwd - t.tp_fwd_lat + t.tp_bwd - t.tp_bwd_lat +
                   (s > 0 ? t.gather : 0) + (s < P - 1 ? t.gather : 0);
        double tl = t.tp_fwd_slice_lat + t.tp_bwd_slice_lat;
        sp->compute = c > sp->compute ? c : sp->compute;
        sp->tp_lat = tl > sp->tp_lat ? tl : sp->tp_lat;
        if (s < P - 1) {
            double x = cost_link_bytes(&ev->cj) / ev->stages[s].next.bw;
            sp->xfer = x > sp->xfer ? x : sp->xfer;
            sp->lat = ev->stages[s].next.lat > sp->lat ? ev->stages[s].next.lat : sp->lat;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* TeraPipe's DP: bounds (token positions, [0 .. T]) into *out, their count - 1 into *slices.
 * 0, or -1 out of memory. */
static int terapipe_dp(struct plan_eval *ev, int P, int M, int **out, int *slices)
{
    struct slice_price sp;
    slice_prices(ev, P, &sp);
    int T = sp.T, G = T < SLICE_GRANULES ? T : SLICE_GRANULES;
    size_t n = (size_t)G + 1;
    int *pos = malloc(n * sizeof *pos), *from = malloc(n * sizeof *from);
    double *cost = malloc(n * n * sizeof *cost), *dp = malloc(n * sizeof *dp);
    double *cand = malloc(n * n * sizeof *cand);
    int *best = malloc(n * sizeof *best);
    if (!pos || !from || !cost || !dp || !cand || !best) {
        free(pos), free(from), free(cost), free(dp), free(cand), free(best);
        return -1;
    }
    for (int i = 0; i <= G; i++)
        pos[i] = (int)((long)i * T / G);
    size_t nc = 0;
    for (int a = 0; a < G; a++)
        for (int b = a + 1; b <= G; b++)
            cand[nc++] = cost[(size_t)a * n + b] = price(ev, &sp, pos[a], pos[b]);
    qsort(cand, nc, sizeof *cand, cmp_double);
    double best_total = INFINITY;
    int best_S = 1;
    best[0] = 0, best[1] = G;
    size_t stride = nc > SLICE_CANDIDATES ? nc / SLICE_CANDIDATES : 1;
    for (size_t ci = 0; ci < nc; ci += stride) {
        double tmax = cand[ci];
        dp[0] = 0;
        for (int b = 1; b <= G; b++) {
            dp[b] = INFINITY;
            for (int a = 0; a < b; a++) {
                double c = cost[(size_t)a * n + b];
                if (c <= tmax && dp[a] + c < dp[b]) {
                    dp[b] = dp[a] + c;
                    from[b] = a;
                }
            }
        }
        double total = M * dp[G] + (P - 1) * tmax;
        if (!isfinite(dp[G]) || total >= best_total)
            continue;
        best_total = total;
        int S = 0;
        for (int b = G; b > 0; b = from[b])
            S++;
        best_S = S;
        for (int b = G, k = S; b > 0; b = from[b])
            best[k--] = b;
        best[0] = 0;
    }
    int *bounds = malloc(((size_t)best_S + 1) * sizeof *bounds);
    if (bounds)
        for (int k = 0; k <= best_S; k++)
            bounds[k] = pos[best[k]];
    free(pos), free(from), free(cost), free(dp), free(cand), free(best);
    if (!bounds)
        return -1;
    *out = bounds;
    *slices = best_S;
    return 0;
}

/* The simulated step with `slices` slices at `bounds` (NULL: unsliced). */
static double slice_step(struct plan_eval *ev, int P, const int *layers, int slices,
                         const int *bounds, struct cost_breakdown *br, herr *e)
{
    long units = (long)ev->cj.micro_batches * (slices > 1 ? slices : 1);
    if (units > ev->sim.cap_mb) {
        int cap = ev->sim.cap_stages;
        double work = ev->sim.work;
        long runs = ev->sim.runs;
        cost_sim_free(&ev->sim);
        if (cost_sim_init(&ev->sim, cap, (int)units, e) != 0)
            return NAN;
        ev->sim.work = work;
        ev->sim.runs = runs;
    }
    ev->cj.slices = slices;
    ev->cj.slice_bounds = bounds;
    double t = pl_eval_sim(ev, P, layers, br);
    ev->cj.slices = 0;
    ev->cj.slice_bounds = NULL;
    return t;
}

int pl_slices(struct plan_eval *ev, int P, const int *layers, int want, struct plan *p, herr *e)
{
    int T = ev->cj.model.seq_len, S = 0, *bounds = NULL;
    p->unsliced_step_s = p->step_s;
    p->slices_auto = want == TJ_AUTO;
    if (want == TJ_AUTO) {
        if (terapipe_dp(ev, P, ev->cj.micro_batches, &bounds, &S) != 0)
            return herr_set(e, "planner: out of memory for the token slicing");
    } else if (want > 1) {
        if (want > T)
            return herr_set(e, "planner: %d token slices of a %d-token sequence", want, T);
        S = want;
        if (!(bounds = malloc(((size_t)S + 1) * sizeof *bounds)))
            return herr_set(e, "planner: out of memory for the token slicing");
        bounds[0] = 0; /* as the worker cuts a count: the first T % S slices one token longer */
        for (int k = 0; k < S; k++)
            bounds[k + 1] = bounds[k] + T / S + (k < T % S ? 1 : 0);
    }
    if (S <= 1) {
        free(bounds);
        return 0;
    }
    struct cost_breakdown br;
    double t = slice_step(ev, P, layers, S, bounds, &br, e);
    if (isnan(t)) {
        free(bounds);
        return -1;
    }
    p->sliced_step_s = t;
    /* auto keeps slicing only when the schedule simulation says it pays */
    if (want == TJ_AUTO && !(t < p->unsliced_step_s * (1 - SLICE_MIN_GAIN))) {
        p->auto_rejected_slices = S;
        free(bounds);
        return 0;
    }
    p->slices = S;
    p->slice_bounds = bounds;
    p->step_s = t;
    p->breakdown = br;
    return 0;
}
