/* Discovery time on a recorded tree: bench_nic ROOT [RUNS]. Prints the first (cold) run and
 * min / median / max of the rest, in milliseconds. Used by `make bench-nic`. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nic_discover.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_nic ROOT [RUNS]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 50;
    if (runs < 2 || runs > 100000) {
        fprintf(stderr, "bench_nic: RUNS must be 2..100000\n");
        return 2;
    }
    double *t = malloc((size_t)runs * sizeof *t);
    if (!t)
        return 1;
    struct nic_report r;
    herr e;
    int devs = 0, gpus = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        if (nic_discover(&(struct nic_discover_opts){.sysfs_root = argv[1]}, &r, &e) != 0) {
            fprintf(stderr, "bench_nic: %s\n", e.msg);
            free(t);
            return 1;
        }
        t[i] = now_ms() - t0;
        devs = r.ndevs;
        gpus = r.ngpus;
        nic_report_free(&r);
    }
    double cold = t[0];
    qsort(t + 1, (size_t)runs - 1, sizeof *t, cmp);
    printf("nic discovery: %d RDMA devices, %d GPUs; cold %.2f ms; %d warm runs: min %.2f ms, "
           "median %.2f ms, max %.2f ms (goal < 50 ms)\n", devs, gpus, cold, runs - 1, t[1],
           t[1 + (runs - 1) / 2], t[runs - 1]);
    free(t);
    return 0;
}
