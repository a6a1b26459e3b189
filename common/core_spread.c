#include "core_spread.h"

#include <stdlib.h>

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
