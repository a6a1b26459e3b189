/* make bench-plan: planning time, peak memory and the schedule simulations the search ran.
 *
 *   bench_plan N [repeats]
 *       a cluster of N workers (8 GPUs each, four fabrics: two InfiniBand, one RoCE, one
 *       Ethernet; two GPU generations; 80 GB), GPT-3 175B shape (96 layers, hidden 12288),
 *       tensor 8, pipeline and data auto. One size per process so the peak RSS is that size's.
 *   bench_plan --cluster CLUSTER.yaml JOB.yaml [repeats]
 *       a cluster file and a TrainingJob, as `holmes-operator plan` reads them.
 *   bench_plan --sweep NODES CASES [seed]
 *       CASES random clusters of 1 to NODES nodes (1 to 4 fabrics of random class, Gb/s and NICs,
 *       1 to 8 GPUs per node, two GPU speeds) and random jobs (tensor, layers, micro-batches,
 *       schedule; pipeline and data auto, or pipeline given): the slowest plan and its case.
 *
 * Times are the best of the repeats (CPU time of this process, and wall). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cluster.h"
#include "planner.h"
#include "../unit/planner_testutil.h"
#include "planner_job.h"

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Plans `reps` times: the best CPU and wall seconds; the last plan stays in *p. 0, or -1. */
static int time_plan(const struct plan_worker *w, int n, const struct plan_job *job,
                     const struct cost_links *links, int reps, struct plan *p, double *cpu,
                     double *wall, herr *e)
{
    *cpu = *wall = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (plan_make(w, n, job, links, p, e))
            return -1;
        double dt = now(CLOCK_MONOTONIC) - t0, dc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        *wall = dt < *wall ? dt : *wall;
        *cpu = dc < *cpu ? dc : *cpu;
        if (r < reps - 1)
            plan_free(p);
    }
    return 0;
}

static void print_result(const char *label, long gpus, const struct plan *p, double cpu,
                         double wall)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%-26s gpus %6ld  plan cpu %6.3f s  wall %7.3f s  peak RSS %7.1f MB  sims %7ld "
           "(%.2g ops)  -> pipeline %d x data %d, step %.3f s (naive %.3f s, ethernet %.3f s)\n",
           label, gpus, cpu, wall, ru.ru_maxrss / 1024.0, p->sim_runs, p->sim_ops, p->pipeline,
           p->data, p->step_s, p->baseline_naive_s, p->baseline_ethernet_s);
}

static int synthetic(int n, int reps)
{
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
    struct plan p;
    herr e = {0};
    double cpu, wall;
    if (time_plan(w, n, &job, &links, reps, &p, &cpu, &wall, &e)) {
        fprintf(stderr, "bench_plan: %s\n", e.msg);
        free(w);
        return 1;
    }
    char label[64];
    snprintf(label, sizeof label, "workers %d x 8 GPUs", n);
    print_result(label, (long)n * 8, &p, cpu, wall);
    plan_free(&p);
    free(w);
    return 0;
}

static int from_files(const char *cluster_path, const char *job_path, int reps)
{
    herr e = {0};
    struct cluster cl;
    struct tj_job tj;
    struct plan_job job;
    if (planner_load_job(job_path, &tj, &e)) {
        fprintf(stderr, "bench_plan: %s\n", e.msg);
        return 1;
    }
    if (cluster_load(cluster_path, &cl, &e)) {
        fprintf(stderr, "bench_plan: %s\n", e.msg);
        tj_job_free(&tj);
        return 1;
    }
    planner_job_from_spec(&tj.spec, &job);
    int rc = 1;
    struct plan p;
    double cpu, wall;
    if (planner_apply_spec(&tj.spec, cl.workers, cl.n_workers, &cl.links, &e) ||
        time_plan(cl.workers, cl.n_workers, &job, &cl.links, reps, &p, &cpu, &wall, &e)) {
        fprintf(stderr, "bench_plan: %s: %s\n", job_path, e.msg);
    } else {
        const char *base = strrchr(job_path, '/');
        print_result(base ? base + 1 : job_path, plan_devices(cl.workers, cl.n_workers), &p,
                     cpu, wall);
        plan_free(&p);
        rc = 0;
    }
    cluster_free(&cl);
    tj_job_free(&tj);
    return rc;
}


/* One random cluster of at most `max_nodes` nodes and a job for it; 0, or -1 (none fits). */
static int random_case(int max_nodes, struct plan_worker *w, int *n, struct plan_job *job,
                       struct cost_links *links, char *desc, size_t cap)
{
    static const double gbps[] = {25, 100, 200, 400, 800, 1600};
    int nodes = planner_test_pick(1, max_nodes), nf = planner_test_pick(1, 4), gpus = 1 << planner_test_pick(0, 3);
    int cls[4], nics[4];
    double g[4], tf[2] = {312, planner_test_pick(0, 1) ? 989 : 125};
    for (int f = 0; f < nf; f++) {
        cls[f] = planner_test_pick(0, 2);
        g[f] = gbps[planner_test_pick(0, 5)];
        nics[f] = cls[f] == NIC_ETHERNET ? planner_test_pick(1, 2) : 1 << planner_test_pick(0, 3);
    }
    *n = nodes;
    for (int i = 0; i < nodes; i++) {
        int f = planner_test_pick(0, nf - 1);
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].name, sizeof w[i].name, "w%d", i);
        w[i].gpus = gpus;
        w[i].tflops = tf[planner_test_pick(0, 1)];
        w[i].memory_gb = 80;
        w[i].nics = nics[f];
        w[i].nic.cls = (enum nic_class)cls[f];
        w[i].nic.gbps = g[f];
        w[i].nic.gid_index = cls[f] == NIC_ROCE ? 3 : -1;
        snprintf(w[i].nic.fabric, sizeof w[i].nic.fabric, "fab-%d", f);
    }
    plan_job_init(job);
    static const int hidden[] = {1024, 2048, 4096, 5120, 8192};
    int h = hidden[planner_test_pick(0, 4)];
    job->model = (struct tj_model){.layers = planner_test_pick(4, 128), .hidden = h, .heads = h / 128,
                                   .vocab = 50257, .seq_len = 1 << planner_test_pick(10, 12)};
    job->tensor = 1 << planner_test_pick(0, 3);
    while (job->tensor > gpus)
        job->tensor /= 2;
    job->micro_batches = 1 << planner_test_pick(2, 7);
    job->micro_batch_size = planner_test_pick(1, 4);
    job->schedule = planner_test_pick(0, 3) ? SCHED_1F1B : SCHED_GPIPE;
    cost_links_default(links);
    links->tcp_gbps = gbps[planner_test_pick(0, 3)];
    snprintf(desc, cap, "%d nodes x %d GPUs, %d fabrics, L%d h%d T%d, tensor %d, %d x %d mb, %s",
             nodes, gpus, nf, job->model.layers, h, job->model.seq_len, job->tensor,
             job->micro_batches, job->micro_batch_size, schedule_name(job->schedule));
    return 0;
}

static int sweep(int max_nodes, int cases, uint64_t seed)
{
    planner_test_seed(seed ? seed : 20261126);
    struct plan_worker *w = calloc((size_t)max_nodes, sizeof *w);
    if (!w)
        return 1;
    double worst = 0, total = 0;
    char worst_desc[256] = "", desc[256];
    int planned = 0, refused = 0;
    long sims = 0;
    for (int c = 0; c < cases; c++) {
        int n;
        struct plan_job job;
        struct cost_links links;
        random_case(max_nodes, w, &n, &job, &links, desc, sizeof desc);
        struct plan p;
        herr e = {0};
        double cpu, wall;
        double c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        int rc = time_plan(w, n, &job, &links, 1, &p, &cpu, &wall, &e);
        if (rc)
            cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        refused += rc != 0;
        planned += rc == 0;
        total += cpu;
        if (cpu > worst) {
            worst = cpu;
            sims = rc ? -1 : p.sim_runs;
            if (rc)
                snprintf(worst_desc, sizeof worst_desc, "%.120s -> refused: %.100s", desc, e.msg);
            else
                snprintf(worst_desc, sizeof worst_desc, "%.200s -> pipeline %d x data %d", desc,
                         p.pipeline, p.data);
            worst_desc[sizeof worst_desc - 1] = '\0';
        }
        if (!rc)
            plan_free(&p);
    }
    printf("sweep up to %d nodes, %d cases (%d planned, %d refused: nothing fits): plan cpu mean "
           "%.3f s, worst %.3f s (%ld sims: %s)\n", max_nodes, cases, planned, refused,
           cases ? total / cases : 0, worst, sims, worst_desc);
    free(w);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 3 && !strcmp(argv[1], "--cluster"))
        return from_files(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 3);
    if (argc > 3 && !strcmp(argv[1], "--sweep"))
        return sweep(atoi(argv[2]), atoi(argv[3]), argc > 4 ? strtoull(argv[4], NULL, 10) : 0);
    int n = argc > 1 ? atoi(argv[1]) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_plan N [repeats] | --cluster CLUSTER JOB [repeats] | "
                "--sweep NODES CASES [seed]\n");
        return 2;
    }
    return synthetic(n, reps);
}
