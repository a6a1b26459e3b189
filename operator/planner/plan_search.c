/* The holmes placement search: candidate placements (fabric-first, speed-first, striped, in
 * every stage order), a hill-climb from the best few, and the naive placement. */
#include "planner_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- holmes placement search ---- */

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

/* How far S->cur is from fitting, on the split pl_memory_split left in ev->best_layers: over
 * every device, what its stage needs beyond what it has, over what the stage needs. Unlike the
 * largest stage's ratio, every device short of memory counts, so one swap that moves a device
 * with room into a stage short of it scores better. */
static double memory_deficit(const struct search *S)
{
    const struct plan_eval *ev = S->ev;
    double sum = 0;
    for (int s = 0; s < S->P; s++) {
        double need = cost_stage_memory(&ev->cj, ev->best_layers[s], s, S->P);
        for (int d = 0; d < S->D; d++) {
            double have = ev->units[S->cur[s * S->D + d]].mem;
            if (have < need)
                sum += (need - have) / need;
        }
    }
    return sum;
}

/* Evaluates S->cur (after putting each stage in canonical order); keeps the global best and
 * the SEARCH_TOP best distinct starting points, and of the placements that do not fit in their
 * devices' memory the closest (S->near). Returns the step time (INFINITY: does not fit; with
 * S->penalize, INFEASIBLE_STEP times 1 + its memory deficit instead, so that a climb can head
 * for placements that fit). */
static double try_candidate(struct search *S)
{
    size_t n = (size_t)S->P * S->D;
    if (S->ev->sim.work >= S->stop)
        return INFINITY; /* the search's budget is spent */
    pl_canonical(S->ev, S->P, S->cur);
    double t = pl_eval_placement(S->ev, S->P, S->cur, S->job, 0);
    S->evals++;
    if (t < S->best_t * (1 - 1e-12)) {
        S->best_t = t;
        memcpy(S->best, S->cur, sizeof(int) * n);
        memcpy(S->best_layers, S->ev->best_layers, sizeof(int) * (size_t)S->P);
        S->best_warmup = S->ev->best_warmup;
    }
    if (!isfinite(t)) {
        double r = pl_memory_split(S->ev, S->P); /* > 1: memory is why */
        if (!(r > 1) || !isfinite(r))
            return t;
        r = 1 + memory_deficit(S);
        if (r < S->near_r) {
            S->near_r = r;
            memcpy(S->near, S->cur, sizeof(int) * n);
        }
        return S->penalize ? INFEASIBLE_STEP * r : t;
    }
    if (!S->top)
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

/* S->cur evaluated in every order of its stages on short pipelines of small clusters (P <= 5,
 * <= 256 units), else as it is: the least step time, S->cur left in that order. A move that
 * changes which units share a stage often pays only in another stage order (the fabric of the
 * first stage and the last, tied through the embedding; the first stage's warm-up
 * activations), which, tried alone, it would not improve. */
static double best_order(struct search *S)
{
    int P = S->P, D = S->D;
    size_t n = (size_t)P * D;
    if (P > 5 || S->ev->n_units > 256)
        return try_candidate(S);
    int base[5 * 256], best[5 * 256], perm[5];
    memcpy(base, S->cur, sizeof(int) * n);
    double best_t = INFINITY;
    for (int i = 0; i < P; i++)
        perm[i] = i;
    do {
        for (int st = 0; st < P; st++)
            memcpy(S->cur + (size_t)st * D, base + (size_t)perm[st] * D, sizeof(int) * D);
        double t = try_candidate(S);
        if (t < best_t || best_t == INFINITY) {
            best_t = t;
            memcpy(best, S->cur, sizeof(int) * n);
        }
    } while (next_perm(perm, P));
    memcpy(S->cur, best, sizeof(int) * n);
    return best_t;
}

/* Tries S->cur with its stages in every order (short pipelines on small clusters), or in
 * its own and the reverse order. */
static void try_orders(struct search *S)
{
    int D = S->P > 0 ? S->D : 0, P = S->P;
    if (P <= 5 && S->ev->n_units <= 256) {
        best_order(S);
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

/* The tied embedding links the first and last stages (their shards cross between them every
 * step), so the pipeline is a ring: S->cur (fabric-first) is tried again rotated by k stages,
 * its first fabric split between both ends (k of its leading stages moved to the end), for up to
 * SEARCH_ROTATIONS values of k spread over the fabric's stages. With every fabric order tried,
 * this covers every placement whose fabrics are contiguous around the ring. Not needed when
 * try_orders tries every stage order. */
static void try_rotations(struct search *S)
{
    struct plan_eval *ev = S->ev;
    int P = S->P, D = S->D;
    if ((P <= 5 && ev->n_units <= 256) || ev->n_fabrics < 2)
        return;
    /* the leading stages wholly on the first stage's fabric */
    int f = ev->units[S->cur[0]].fabric, lead = 0;
    for (int st = 0; st < P; st++, lead++) {
        int same = 1;
        for (int d = 0; d < D && same; d++)
            same = ev->units[S->cur[st * D + d]].fabric == f;
        if (!same)
            break;
    }
    if (lead < 2 || lead == P)
        return;
    size_t n = (size_t)P * D;
    memcpy(S->loc, S->cur, sizeof(int) * n);
    int tries = lead - 1 < SEARCH_ROTATIONS ? lead - 1 : SEARCH_ROTATIONS, last = 0;
    for (int i = 1; i <= tries; i++) {
        int k = (int)((long)i * lead / (tries + 1)); /* 1 .. lead - 1, evenly spread */
        if (k <= last)
            continue;
        last = k;
        memcpy(S->cur, S->loc + (size_t)k * D, sizeof(int) * (n - (size_t)k * D));
        memcpy(S->cur + (n - (size_t)k * D), S->loc, sizeof(int) * (size_t)k * D);
        try_candidate(S);
    }
    memcpy(S->cur, S->loc, sizeof(int) * n);
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
    if (ux->mem != uy->mem) /* more memory first: the first stages hold more micro-batches */
        return ux->mem < uy->mem ? 1 : -1;
    if (ux->membw != uy->membw) /* faster memory first: the first stage has the embedding */
        return ux->membw < uy->membw ? 1 : -1;
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


/* Do stages a and b of S->loc hold the same classes (in canonical order)? */
static int same_stage(const struct search *S, int a, int b)
{
    const struct unit *u = S->ev->units;
    for (int d = 0; d < S->D; d++)
        if (u[S->loc[a * S->D + d]].klass != u[S->loc[b * S->D + d]].klass)
            return 0;
    return 1;
}

/* What a stage is priced at its slowest unit in: 0 speed, 1 memory, 2 memory bandwidth. */
#define UNIT_KEYS 3
static double unit_key(const struct unit *u, int k)
{
    return k == 0 ? u->tflops : k == 1 ? u->mem : u->membw;
}

struct key_order {
    const struct unit *units;
    const int *loc;
    int k;
};

static int cmp_key_desc(const void *a, const void *b, void *ctx)
{
    const struct key_order *o = ctx;
    double x = unit_key(&o->units[o->loc[*(const int *)a]], o->k);
    double y = unit_key(&o->units[o->loc[*(const int *)b]], o->k);
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}


/* The candidate in S->cur, priced t, becomes the climb's current placement S->loc when it beats
 * *loc_t (by more than rounding): 1 then, else 0. */
static int keep_if_better(struct search *S, double t, double *loc_t)
{
    if (!(t < *loc_t * (1 - 1e-12)))
        return 0;
    *loc_t = t;
    memcpy(S->loc, S->cur, sizeof(int) * (size_t)S->P * S->D);
    return 1;
}
/* Consolidation, where the swaps of one unit stop: a stage is priced at its slowest unit in each
 * key (speed, memory, memory bandwidth), so a stage with one slow unit costs what one with all
 * slow ones does, a plateau no single swap crosses. For stages i and j and a key: every unit of
 * j as slow as i's slowest moves to i, each for i's fastest left (when stages must stay
 * homogeneous, only between stages of one fabric). The first that improves is taken: 1, else 0.
 * O(P^2 D) beside its evaluations. */
static int consolidate(struct search *S, double *loc_t, double stop)
{
    struct plan_eval *ev = S->ev;
    const struct unit *u = ev->units;
    int P = S->P, D = S->D, n = P * D;
    int *order = malloc(sizeof(int) * (size_t)D);
    if (!order)
        return 0;
    int done = 0;
    for (int k = 0; k < UNIT_KEYS && !done; k++) {
        for (int i = 0; i < P && !done && ev->sim.work < stop; i++) {
            const int *si = S->loc + (size_t)i * D;
            double worst = INFINITY, fastest = -INFINITY;
            for (int d = 0; d < D; d++) {
                worst = fmin(worst, unit_key(&u[si[d]], k));
                fastest = fmax(fastest, unit_key(&u[si[d]], k));
            }
            if (!(fastest > worst))
                continue; /* nothing faster in i to give */
            for (int d = 0; d < D; d++)
                order[d] = d;
            struct key_order ko = {u, si, k};
            qsort_r(order, (size_t)D, sizeof *order, cmp_key_desc, &ko);
            for (int j = 0; j < P && !done && ev->sim.work < stop; j++) {
                if (j == i || (S->homog && u[S->loc[(size_t)j * D]].fabric != u[si[0]].fabric))
                    continue;
                memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                /* i's units fastest first (order): each slow unit of j for the next of them */
                int moved = 0;
                for (int b = j * D; b < (j + 1) * D && moved < D; b++) {
                    if (unit_key(&u[S->loc[b]], k) > worst)
                        continue;
                    int a = order[moved];
                    if (!(unit_key(&u[si[a]], k) > worst))
                        break;
                    S->cur[(size_t)i * D + a] = S->loc[b];
                    S->cur[b] = si[a];
                    moved++;
                }
                if (!moved)
                    continue;
                double t = try_candidate(S);
                done |= keep_if_better(S, t, loc_t);
            }
        }
    }
    free(order);
    return done;
}

/* How sort_apart orders units: by key k, decreasing; with `fabric` +1 or -1, by fabric index
 * first (increasing or decreasing), the key within a fabric. */
struct unit_order {
    const struct unit *units;
    int k, fabric;
};

/* The order alone: < 0, 0 (the two tie), > 0. */
static int unit_order_cmp(const struct unit_order *o, int x, int y)
{
    const struct unit *ux = &o->units[x], *uy = &o->units[y];
    if (o->fabric && ux->fabric != uy->fabric)
        return o->fabric * (ux->fabric - uy->fabric);
    double kx = unit_key(ux, o->k), ky = unit_key(uy, o->k);
    return kx < ky ? 1 : kx > ky ? -1 : 0;
}

/* The order, then by class and index: the sort is deterministic. */
static int cmp_unit_order(const void *a, const void *b, void *ctx)
{
    const struct unit_order *o = ctx;
    int x = *(const int *)a, y = *(const int *)b, c = unit_order_cmp(o, x, y);
    if (c)
        return c;
    if (o->units[x].klass != o->units[y].klass)
        return o->units[x].klass - o->units[y].klass;
    return x - y;
}

/* Sorting two stages apart, where consolidation stops: for stages i and j and a key (speed,
 * memory, memory bandwidth), their 2D units sorted by it, the faster D in one stage and the
 * slower D in the other (both ways round); then sorted by fabric first and the key within a
 * fabric (both fabric orders; `by_fabric`), which gathers a fabric into one stage. Several swaps at once:
 * two fast-memory units among slow ones in each of two stages are two swaps from where either
 * stage gains; two stages whose data-parallel rings both cross a slow link gain only when every
 * unit of one fabric has left one of them. Plateaus that neither a single swap nor
 * consolidation (which moves only units as slow as a stage's slowest) crosses. Between stages of
 * one fabric when stages must stay homogeneous. The first that improves is taken: 1, else 0.
 * O(P^2 D log D) beside its evaluations. */
static int sort_apart(struct search *S, double *loc_t, double stop, int by_fabric)
{
    struct plan_eval *ev = S->ev;
    const struct unit *u = ev->units;
    int P = S->P, D = S->D, n = P * D;
    int *pool = malloc(sizeof(int) * 2 * (size_t)D);
    if (!pool)
        return 0;
    int done = 0;
    /* each key alone, then fabric first (both ways) and the key within a fabric */
    for (int v = 0; v < (by_fabric ? 3 : 1) * UNIT_KEYS && !done; v++) {
        struct unit_order uo = {u, v % UNIT_KEYS, v < UNIT_KEYS ? 0 : v < 2 * UNIT_KEYS ? 1 : -1};
        if (uo.fabric && S->homog)
            break; /* stages of one fabric only: the fabric-first orders are the plain ones */
        for (int i = 0; i < P && !done && ev->sim.work < stop; i++) {
            const int *si = S->loc + (size_t)i * D;
            for (int j = i + 1; j < P && !done && ev->sim.work < stop; j++) {
                const int *sj = S->loc + (size_t)j * D;
                if (S->homog && u[sj[0]].fabric != u[si[0]].fabric)
                    continue;
                memcpy(pool, si, sizeof(int) * (size_t)D);
                memcpy(pool + D, sj, sizeof(int) * (size_t)D);
                qsort_r(pool, 2 * (size_t)D, sizeof *pool, cmp_unit_order, &uo);
                /* nothing to sort apart when the split's two sides tie in the order */
                if (unit_order_cmp(&uo, pool[D - 1], pool[D]) == 0)
                    continue;
                for (int way = 0; way < 2 && !done; way++) {
                    memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                    memcpy(S->cur + (size_t)i * D, pool + (way ? D : 0), sizeof(int) * (size_t)D);
                    memcpy(S->cur + (size_t)j * D, pool + (way ? 0 : D), sizeof(int) * (size_t)D);
                    double t = best_order(S);
                    done |= keep_if_better(S, t, loc_t);
                }
            }
        }
    }
    free(pool);
    return done;
}

/* Hill-climb from S->loc: swap two units of different classes between stages (keeping
 * stages fabric-homogeneous when required), or swap two whole stages; until no swap helps or
 * `budget` simulated ops are spent. Returns the step time S->loc ends at. */
static double local_search(struct search *S, double loc_t, double budget)
{
    struct plan_eval *ev = S->ev;
    int P = S->P, D = S->D, n = P * D;
    double stop = ev->sim.work + budget;
    if (stop > S->stop)
        stop = S->stop;
    for (int round = 0; round < 200 && ev->sim.work < stop; round++) {
        int improved = 0;
        for (int i = 0; i < P && ev->sim.work < stop; i++) {
            for (int j = i + 1; j < P && ev->sim.work < stop; j++) {
                memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                for (int d = 0; d < D; d++) {
                    int t = S->cur[i * D + d];
                    S->cur[i * D + d] = S->cur[j * D + d];
                    S->cur[j * D + d] = t;
                }
                double t = try_candidate(S);
                improved |= keep_if_better(S, t, &loc_t);
            }
        }
        /* move a stage elsewhere, the stages between shifting by one (a swap of neighbours
         * is tried above): keeps fabrics contiguous where swaps would cut them, e.g. one stage
         * of the first fabric moved to the far end, next to the first stage through the tie */
        for (int i = 0; i < P && ev->sim.work < stop; i++) {
            for (int j = 0; j < P && ev->sim.work < stop; j++) {
                if (abs(i - j) < 2 || same_stage(S, i, i < j ? i + 1 : i - 1))
                    continue; /* a neighbour or, moving the like neighbour, a move tried */
                const int *src = S->loc;
                int *dst = S->cur;
                int lo = i < j ? i : j, hi = i < j ? j : i;
                memcpy(dst, src, sizeof(int) * (size_t)n);
                if (i < j)
                    memcpy(dst + (size_t)lo * D, src + (size_t)(lo + 1) * D,
                           sizeof(int) * (size_t)(hi - lo) * D);
                else
                    memcpy(dst + (size_t)(lo + 1) * D, src + (size_t)lo * D,
                           sizeof(int) * (size_t)(hi - lo) * D);
                memcpy(dst + (size_t)j * D, src + (size_t)i * D, sizeof(int) * (size_t)D);
                double t = try_candidate(S);
                improved |= keep_if_better(S, t, &loc_t);
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
        for (int i = 0; i < P && !moved && ev->sim.work < stop; i++)
            for (int j = i + 1; j < P && !moved && ev->sim.work < stop; j++)
                for (int x = 0; x < nrep[i] && !moved && ev->sim.work < stop; x++)
                    for (int y = 0; y < nrep[j] && !moved && ev->sim.work < stop; y++) {
                        int a = rep[i * SEARCH_REPS + x], b = rep[j * SEARCH_REPS + y];
                        const struct unit *ua = &ev->units[S->loc[a]];
                        const struct unit *ub = &ev->units[S->loc[b]];
                        if (ua->klass == ub->klass || (S->homog && ua->fabric != ub->fabric))
                            continue;
                        memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
                        S->cur[a] = S->loc[b];
                        S->cur[b] = S->loc[a];
                        double t = try_candidate(S);
                        if (keep_if_better(S, t, &loc_t))
                            improved = moved = 1;
                    }
        /* no swap helps: gather the slow units of a key into one stage, or sort two apart */
        if (!improved && ev->sim.work < stop)
            improved = consolidate(S, &loc_t, stop);
        if (!improved && ev->sim.work < stop)
            improved = sort_apart(S, &loc_t, stop, 0);
        if (!improved)
            break;
    }
    return loc_t;
}

/* Iterated local search: kicks the best placement found with a few random swaps of two whole
 * stages of different classes, or of units of different classes between stages (inside a
 * fabric when stages must stay homogeneous), and
 * climbs again from there; stops after SEARCH_KICKS kicks in a row found nothing better, or at
 * the budget. to_fit: kicks the placement closest to fitting instead (S->near, with
 * S->penalize on), until one fits or SEARCH_KICKS kicks in a row came no closer.
 * Deterministic (a fixed seed). */
static void kick_and_climb(struct search *S, int to_fit)
{
    struct plan_eval *ev = S->ev;
    int P = S->P, D = S->D, n = P * D;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int fails = 0; fails < SEARCH_KICKS && ev->sim.work < S->stop &&
                        (to_fit ? isfinite(S->near_r) : isfinite(S->best_t));) {
        memcpy(S->loc, to_fit ? S->near : S->best, sizeof(int) * (size_t)n);
        int swaps = 0;
        for (int tries = 0; tries < 64 && swaps < 2 + (int)(rng % 3); tries++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int a = (int)(rng % (uint64_t)n), b = (int)((rng >> 20) % (uint64_t)n);
            if (a / D == b / D)
                continue;
            if ((rng >> 40) & 1) { /* two whole stages */
                if (same_stage(S, a / D, b / D))
                    continue;
                for (int d = 0; d < D; d++) {
                    int t = S->loc[a / D * D + d];
                    S->loc[a / D * D + d] = S->loc[b / D * D + d];
                    S->loc[b / D * D + d] = t;
                }
                swaps++;
                continue;
            }
            const struct unit *ua = &ev->units[S->loc[a]], *ub = &ev->units[S->loc[b]];
            if (ua->klass == ub->klass || (S->homog && ua->fabric != ub->fabric))
                continue;
            int t = S->loc[a];
            S->loc[a] = S->loc[b];
            S->loc[b] = t;
            swaps++;
        }
        if (!swaps)
            return; /* nothing to swap: every stage alike */
        memcpy(S->cur, S->loc, sizeof(int) * (size_t)n);
        double before = S->best_t, near = S->near_r, t = try_candidate(S);
        memcpy(S->loc, S->cur, sizeof(int) * (size_t)n);
        local_search(S, t, (S->stop - ev->sim.work) / (to_fit ? 4 : 1));
        int better = S->best_t < before * (1 - 1e-12) ||
                     (to_fit && S->near_r < near * (1 - 1e-12));
        fails = better ? 0 : fails + 1;
    }
}

/* Is a fabric-homogeneous placement possible: every fabric's units a multiple of D. */
int pl_homogeneous_possible(const struct plan_eval *ev, const int *fab_start, int D)
{
    for (int f = 0; f < ev->n_fabrics; f++)
        if ((fab_start[f + 1] - fab_start[f]) % D)
            return 0;
    return 1;
}

/* Best holmes placement for (P, D): fills S->best, S->best_layers, S->best_t. */
int pl_holmes_search(struct search *S, herr *e)
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
    S->homog = pl_homogeneous_possible(ev, S->fab_start, S->D);
    S->best_t = INFINITY;
    /* the budget: candidates and the hill-climb compare placements with the dynamic
     * programme's split (ev->fast); the best few are refined by simulation at the end, each
     * within the same budget */
    double begin = ev->sim.work;
    S->stop = begin + S->budget * (1 - SEARCH_REFINE_SHARE);
    int fast = ev->fast;
    ev->refine_work = S->budget / SEARCH_REFINE_EVALS;
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
            try_rotations(S);
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
    /* some candidate did not fit: climb and kick from the one closest to fitting, towards less
     * memory short per device; what fits on the way joins the starting points below */
    size_t n = (size_t)S->P * S->D;
    if (isfinite(S->near_r)) {
        S->penalize = 1;
        memcpy(S->loc, S->near, sizeof(int) * n);
        local_search(S, INFEASIBLE_STEP * S->near_r, (S->stop - ev->sim.work) / 4);
        kick_and_climb(S, 1);
        S->penalize = 0;
    }
    /* hill-climb from each of the best few starting points (the list grows while climbing,
     * so take a snapshot first) */
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
        double left = S->stop - ev->sim.work;
        local_search(S, start_t[i], left / (n_start - i));
    }
    kick_and_climb(S, 0);
    /* the best placement's stages sorted apart by fabric first too, climbing again from each
     * that improves on it (after the climbs, not in them: taken there, the first such regrouping
     * led the search elsewhere and missed optima it had found, 2 of 3,000 random clusters) */
    if (isfinite(S->best_t)) {
        double t = S->best_t;
        memcpy(S->loc, S->best, sizeof(int) * n);
        while (ev->sim.work < S->stop && sort_apart(S, &t, S->stop, 1))
            t = local_search(S, t, S->stop - ev->sim.work);
    }
    /* the best few, their splits refined by simulation and their 1F1B warm-up depth chosen; the
     * budget left shared among them */
    ev->fast = 0;
    ev->warmup_search = 1;
    memcpy(starts, S->top, sizeof(int) * n * (size_t)S->n_top);
    n_start = S->n_top;
    S->best_t = INFINITY;
    S->stop = INFINITY;
    double end = begin + S->budget;
    for (int i = 0; i < n_start; i++) {
        memcpy(S->cur, starts + (size_t)i * n, sizeof(int) * n);
        double left = end - ev->sim.work;
        ev->refine_work = left > 0 ? left / (n_start - i) : 0;
        try_candidate(S);
    }
    ev->fast = fast;
    ev->warmup_search = 0;
    free(starts);
    return 0;
}

void pl_search_free(struct search *S)
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
    free(S->near);
    memset(S, 0, sizeof *S);
}

int pl_search_init(struct search *S, struct plan_eval *ev, const struct plan_job *job, int P,
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
    S->near = malloc(sizeof(int) * (size_t)ev->n_units);
    S->near_r = INFINITY;
    if (!S->cur || !S->best || !S->best_layers || !S->top || !S->loc || !S->rep || !S->nrep ||
        !S->near)
        return herr_set(e, "planner: out of memory");
    S->budget = PLAN_SEARCH_WORK;
    /* beyond small clusters, placements are compared with the dynamic programme's split (the
     * best few are refined at the end of the search) */
    ev->fast = ev->n_units > 32;
    return 0;
}

/* Naive (Megatron order over the workers as listed) placement with equal layers (or the pin,
 * unless `baseline`). */
double pl_naive_eval(struct plan_eval *ev, const struct plan_job *job, int P, int *stage_units,
                     int baseline)
{
    for (int u = 0; u < P * ev->D; u++)
        stage_units[u] = u;
    return pl_eval_placement(ev, P, stage_units, job, baseline ? 2 : 1);
}
