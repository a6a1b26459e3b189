/* make bench-plan: planning time and peak memory for a cluster of N workers (8 GPUs each,
 * four fabrics: two InfiniBand, one RoCE, one Ethernet; two GPU generations; 80 GB), GPT-3 175B shape
 * (96 layers, hidden 12288), tensor 8, pipeline and data auto. One size per process so the
 * peak RSS is that size's. Usage: bench_plan N [repeats] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "planner.h"

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_plan N [repeats]\n");
        return 2;
    }
    struct plan_worker *w = calloc((size_t)n, sizeof *w);
    if (!w)
        return 1;
    static const struct {
        enum nic_class cls;
        const char *fabric;
        double gbps;
    } fab[4] = {{NIC_INFINIBAND, "ib-a", 400}, {NIC_INFINIBAND, "ib-b", 200},
                {NIC_ROCE, "roce-c", 200}, {NIC_ETHERNET, "eth-d", 100}};
    for (int i = 0; i < n; i++) {
        int f = (int)((long)i * 4 / n); /* four equal blocks */
        snprintf(w[i].name, sizeof w[i].name, "worker-%d", i);
        snprintf(w[i].node, sizeof w[i].node, "node-%d", i);
        w[i].gpus = 8;
        w[i].tflops = (i % 3 == 0) ? 989 : 312;
        w[i].memory_gb = 80;
        w[i].nic.cls = fab[f].cls;
        w[i].nic.gbps = fab[f].gbps;
        w[i].nic.gid_index = fab[f].cls == NIC_ROCE ? 3 : -1;
        snprintf(w[i].nic.fabric, sizeof w[i].nic.fabric, "%s", fab[f].fabric);
    }
    struct plan_job job;
    plan_job_init(&job);
    job.model = (struct tj_model){.layers = 96, .hidden = 12288, .heads = 96, .vocab = 50257, .seq_len = 2048};
    job.tensor = 8;
    job.micro_batches = 32;
    job.micro_batch_size = 1;
    struct cost_links links;
    cost_links_default(&links);
    double best = 1e30, best_cpu = 1e30;
    struct plan p;
    herr e = {0};
    for (int r = 0; r < reps; r++) {
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (plan_make(w, n, &job, &links, &p, &e)) {
            fprintf(stderr, "bench_plan: %s\n", e.msg);
            return 1;
        }
        double dt = now(CLOCK_MONOTONIC) - t0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (dt < best)
            best = dt;
        if (dc < best_cpu)
            best_cpu = dc;
        if (r < reps - 1)
            plan_free(&p);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("workers %6d  gpus %7d  plan cpu %7.3f s  wall %7.3f s  peak RSS %7.1f MB  -> "
           "pipeline %d x data %d, step %.3f s (naive %.3f s, ethernet %.3f s)\n", n, n * 8,
           best_cpu, best,
           ru.ru_maxrss / 1024.0, p.pipeline, p.data, p.step_s, p.baseline_naive_s,
           p.baseline_ethernet_s);
    plan_free(&p);
    free(w);
    return 0;
}
