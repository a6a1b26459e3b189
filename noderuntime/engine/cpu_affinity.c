#include "cpu_affinity.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

int cpu_affinity_parse(const char *s, enum cpu_affinity *out)
{
    if (strcmp(s, "none") == 0)
        *out = CPU_AFFINITY_NONE;
    else if (strcmp(s, "spread") == 0)
        *out = CPU_AFFINITY_SPREAD;
    else
        return -1;
    return 0;
}

/* Does core c hold a rank of a stage next to `st` (ranks placed so far: placed[0..k))? */
static int holds_neighbour(const int *stage, const int *order, int k, const int *first, int c,
                           int st)
{
    for (int i = 0; stage && i < k; i++) {
        int r = order[i];
        if (first[r] == c && (stage[r] == st - 1 || stage[r] == st + 1))
            return 1;
    }
    return 0;
}

int cpu_spread(const double *load, const int *stage, int n, int ncpu, int *first, int *count,
               herr *e)
{
    if (n < 1 || ncpu < 1)
        return herr_set(e, "cpu spread: %d ranks over %d cores (both must be at least 1)", n, ncpu);
    for (int i = 0; i < n; i++)
        if (!(load[i] >= 0))
            return herr_set(e, "cpu spread: rank %d's load %g must be a number >= 0", i, load[i]);
    if (ncpu >= n) {
        int per = ncpu / n;
        for (int i = 0; i < n; i++) {
            first[i] = i * per;
            count[i] = per;
        }
        return 0;
    }
    int *order = malloc((size_t)n * sizeof *order);
    double *core = calloc((size_t)ncpu, sizeof *core);
    if (!order || !core) {
        free(order);
        free(core);
        return herr_set(e, "cpu spread: out of memory for %d ranks", n);
    }
    /* heaviest first, ties by rank (insertion sort: n is a job's rank count) */
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && load[order[j - 1]] < load[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int k = 0; k < n; k++) {
        int r = order[k], best = 0;
        for (int c = 1; c < ncpu; c++)
            if (core[c] < core[best])
                best = c;
        /* among the equally loaded, one without a neighbouring stage */
        for (int c = 0; stage && c < ncpu; c++)
            if (core[c] == core[best] &&
                !holds_neighbour(stage, order, k, first, c, stage[r]) &&
                holds_neighbour(stage, order, k, first, best, stage[r])) {
                best = c;
                break;
            }
        core[best] += load[r];
        first[r] = best;
        count[r] = 1;
    }
    free(order);
    free(core);
    return 0;
}

/* The cores the calling thread may use now. */
static int usable_cpus(cpu_set_t *have, herr *e)
{
    CPU_ZERO(have);
    if (sched_getaffinity(0, sizeof *have, have) != 0)
        return herr_set(e, "sched_getaffinity: %s", strerror(errno));
    return 0;
}

int cpu_pin_thread(int first, int count, char *desc, size_t cap, herr *e)
{
    cpu_set_t have, want;
    if (usable_cpus(&have, e) != 0)
        return -1;
    int usable = CPU_COUNT(&have);
    if (first < 0 || count < 1 || first + count > usable)
        return herr_set(e, "cpu pin: cores %d..%d of the %d this thread may use", first,
                        first + count - 1, usable);
    CPU_ZERO(&want);
    int k = 0, lo = -1, hi = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && k < first + count; cpu++) {
        if (!CPU_ISSET(cpu, &have))
            continue;
        if (k >= first) {
            CPU_SET(cpu, &want);
            if (lo < 0)
                lo = cpu;
            hi = cpu;
        }
        k++;
    }
    if (sched_setaffinity(0, sizeof want, &want) != 0)
        return herr_set(e, "sched_setaffinity: %s", strerror(errno));
    /* the usable cores need not be contiguous: name the range only when they are */
    if (hi - lo + 1 == count && count > 1)
        snprintf(desc, cap, "%d-%d", lo, hi);
    else if (count == 1)
        snprintf(desc, cap, "%d", lo);
    else
        snprintf(desc, cap, "%d cores from %d to %d", count, lo, hi);
    return 0;
}

int cpu_spread_rank(const struct plan_doc *rt, int layers, int rank, char *desc, size_t cap,
                    herr *e)
{
    if (rank < 0 || rank >= rt->world)
        return herr_set(e, "cpu spread: rank %d outside 0..%d", rank, rt->world - 1);
    cpu_set_t have;
    if (usable_cpus(&have, e) != 0)
        return -1;
    double *load = malloc((size_t)rt->world * sizeof *load);
    int *first = malloc((size_t)rt->world * sizeof *first);
    int *count = malloc((size_t)rt->world * sizeof *count);
    int *stage = malloc((size_t)rt->world * sizeof *stage);
    int rc = -1;
    if (!load || !first || !count || !stage) {
        herr_set(e, "cpu spread: out of memory for %d ranks", rt->world);
        goto out;
    }
    for (int r = 0; r < rt->world; r++) {
        int lo, hi;
        trainer_stage_layers(rt, layers, plan_doc_stage_of(rt, r), &lo, &hi);
        load[r] = hi - lo;
        stage[r] = plan_doc_stage_of(rt, r);
    }
    if (cpu_spread(load, stage, rt->world, CPU_COUNT(&have), first, count, e) == 0 &&
        cpu_pin_thread(first[rank], count[rank], desc, cap, e) == 0)
        rc = count[rank];
out:
    free(load);
    free(first);
    free(count);
    free(stage);
    return rc;
}
