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

int cpu_threads_shared(const struct plan_doc *rt, int rank)
{
    if (rank < 0 || rank >= rt->world || !rt->ranks[rank].host[0])
        return 0;
    int here = 0;
    for (int r = 0; r < rt->world; r++)
        here += strcmp(rt->ranks[r].host, rt->ranks[rank].host) == 0;
    cpu_set_t have;
    herr e;
    if (here < 2 || usable_cpus(&have, &e) != 0)
        return 0;
    int n = CPU_COUNT(&have) / here;
    return n > 0 ? n : 1;
}
