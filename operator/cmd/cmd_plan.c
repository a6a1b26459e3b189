/* holmes-operator plan --cluster CLUSTER.yaml JOB.yaml [--policy P] [--json] [--calibration F] */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cluster.h"
#include "commands.h"
#include "planner.h"
#include "pipe_order.h"
#include "planner_job.h"
#include "pipe_order.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: holmes-operator plan [--cluster CLUSTER.yaml] JOB.yaml [--policy holmes|naive|ethernet]\n"
            "                            [--calibration LINKS.yaml] [--partition N,N,...] [--json]\n"
            "                            [--tflops T] [--memory-gbps B] [--warmup N]\n"
            "Plans JOB (a TrainingJob manifest) on the workers of CLUSTER (default: the workers the\n"
            "job's spec.emulation block describes) and prints the placement:\n"
            "stages with their fabric, workers and layers, the transport of every communicator, the\n"
            "predicted step time with its breakdown, and the naive and ethernet baselines.\n"
            "  --cluster FILE      workers with their NIC reports (YAML or JSON; docs/planner.md)\n"
            "  --policy P          holmes (default: the job's), naive or ethernet\n"
            "  --calibration FILE  link constants measured on real runs (override the cluster's)\n"
            "  --partition N,N,..  pin the layers per stage instead of the cost model's split\n"
            "  --tflops T          TFLOPS per device of the spec.emulation workers (default 0.05\n"
            "                      per CPU worker, 100 per GPU); what they declare to the\n"
            "                      coordinator (HOLMES_DECLARED_TFLOPS) for the same plan\n"
            "  --memory-gbps B     memory bandwidth per device of the spec.emulation workers, GB/s\n"
            "                      (default 5 for CPU processes, as holmes-operator local's workers\n"
            "                      declare it; real GPUs: links.memory_gbps); what they declare\n"
            "                      (HOLMES_MEMORY_GBPS) for the same plan\n"
            "  --warmup N          pin the 1F1B warm-up depth (micro-batches beyond the standard\n"
            "                      on every stage but the last; 0: the standard schedule) instead\n"
            "                      of the planner's choice\n"
            "  --json              one JSON document instead of the table\n");
}

/* A figure of the emulated workers (--tflops, --memory-gbps): a number in (0, 1e6]; -1 after
 * saying so, naming the flag. */
static int parse_figure(const char *flag, const char *what, const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0 && v <= 1e6)) {
        fprintf(stderr, "holmes-operator plan: %s: \"%s\" must be %s in (0, 1e6]\n", flag, s, what);
        return -1;
    }
    *out = v;
    return 0;
}

static void print_workers(const struct plan *p, int s)
{
    int shown = 0, total = 0, prev = -1;
    for (int d = 0; d < p->data; d++)
        for (int r = 0; r < p->tensor; r++) {
            int w = p->ranks[plan_rank_of(p, s, d, r)].worker;
            if (w == prev)
                continue;
            prev = w;
            total++;
            if (shown < 6) {
                printf("%s%s", shown ? " " : "", p->workers[w].name);
                shown++;
            }
        }
    if (total > shown)
        printf(" ... (%d workers)", total);
}

/* Each fabric-blind policy planned on its own, with the same job (so with its own best shape
 * when the shape is auto): what `--policy naive` would give. step_s INFINITY when it cannot plan. */
struct own_best {
    enum policy policy;
    double step_s, tokens_per_s; /* shapes differ in tokens per step: compare tokens/s */
    int pipeline, data, micro_batches, micro_batch_size;
};

static void own_best(const struct plan_worker *w, int n, const struct plan_job *job,
                     const struct cost_links *l, enum policy pol, struct own_best *out)
{
    struct plan_job j = *job;
    struct plan q;
    herr e = {0};
    j.policy = pol;
    *out = (struct own_best){.policy = pol, .step_s = INFINITY};
    if (plan_make(w, n, &j, l, &q, &e) == 0) {
        *out = (struct own_best){pol, q.step_s, q.tokens_per_s, q.pipeline, q.data,
                                 q.micro_batches, q.micro_batch_size};
        plan_free(&q);
    }
}

/* The pipeline's links, one line per stage boundary: the transport of its tensor x data links
 * (each carrying its 1/tensor share), one micro-batch's transfer on the slowest, and why TCP. */
static void print_links(const struct plan *p)
{
    if (p->pipeline < 2)
        return;
    printf("pipeline links (tensor x data = %d per boundary, each carrying 1/%d of an "
           "activation):\n", p->tensor * p->data, p->tensor);
    for (int s = 0; s + 1 < p->pipeline; s++) {
        struct plan_boundary b;
        plan_boundary_links(p, s, &b);
        char what[96] = "";
        size_t used = 0;
        for (int k = 0; k < TRANSPORT_COUNT; k++) {
            int c = b.n[k] ? snprintf(what + used, sizeof what - used, "%s%d %s", used ? ", " : "",
                                      b.n[k], transport_name((enum transport)k)) : 0;
            if (c > 0 && (size_t)c < sizeof what - used)
                used += (size_t)c;
        }
        printf("  %d -> %-3d %-16.16s -> %-16.16s %-22s %8.3f ms at %.4g Gb/s%s%s%s\n", s, s + 1,
               p->stages[s].fabric, p->stages[s + 1].fabric, what, b.seconds * 1e3, b.gbps,
               b.intra_node ? " (inside a node)" : "", b.reason[0] ? " - " : "", b.reason);
    }
}

static void print_table(const struct plan *p, const struct own_best *best, int n_best)
{
    char sched[256];
    plan_schedule_text(p, sched, sizeof sched);
    printf("policy %s: tensor %d x pipeline %d x data %d, %d micro-batches of %d, %s\n",
           policy_name(p->policy), p->tensor, p->pipeline, p->data, p->micro_batches,
           p->micro_batch_size, sched);
    printf("\n%-6s %-24s %-12s %-8s %-9s %-9s %-7s %s\n", "stage", "fabric", "layers", "TFLOPS",
           "fwd ms", "opt ms", "mem GB", "workers");
    for (int s = 0; s < p->n_stages; s++) {
        const struct plan_stage *st = &p->stages[s];
        char ly[32];
        snprintf(ly, sizeof ly, "[%d,%d) %d", st->first_layer, st->last_layer,
                 st->last_layer - st->first_layer);
        printf("%-6d %-24.24s %-12s %-8.4g %-9.2f %-9.2f %-7.1f ", s, st->fabric, ly, st->tflops,
               st->fwd_s * 1e3, st->optimizer_s * 1e3, st->memory_gb);
        print_workers(p, s);
        printf("\n");
    }
    int count[GROUP_KIND_COUNT][TRANSPORT_COUNT] = {{0}};
    for (int g = 0; g < p->n_groups; g++)
        count[p->groups[g].kind][p->groups[g].transport.kind]++;
    printf("\ngroups:\n");
    for (int k = 0; k < GROUP_KIND_COUNT; k++) {
        int n = count[k][0] + count[k][1] + count[k][2];
        if (!n)
            continue;
        printf("  %-10s %5d: %d ib, %d roce, %d socket\n", group_kind_name(k), n, count[k][0],
               count[k][1], count[k][2]);
    }
    /* dp/tp groups on TCP: one line per (kind, stage) */
    int shown = 0;
    for (int g = 0; g < p->n_groups && shown < 16; g++) {
        const struct plan_group *gr = &p->groups[g];
        if (gr->transport.kind != TRANSPORT_SOCKET || gr->kind == GROUP_PP ||
            gr->kind == GROUP_EMBEDDING || gr->kind == GROUP_LINK || gr->transport.intra_node)
            continue;
        int n = 0, seen = 0;
        for (int h = 0; h < p->n_groups; h++) {
            const struct plan_group *o = &p->groups[h];
            if (o->kind == gr->kind && o->stage == gr->stage && o->transport.kind == TRANSPORT_SOCKET &&
                !o->transport.intra_node) {
                if (h < g)
                    seen = 1;
                n++;
            }
        }
        if (seen)
            continue;
        printf("  on TCP: %d %s group(s) of stage %d (%s)\n", n, group_kind_name(gr->kind),
               gr->stage, gr->transport.reason);
        shown++;
    }
    if (!p->n_socket_groups)
        printf("  every data- and tensor-parallel group stays on one fabric's RDMA%s\n",
               p->homogeneous_possible ? "" : " or one node");
    else if (!p->homogeneous_possible)
        printf("  (no fabric-homogeneous placement exists: fabric sizes are not multiples of "
               "data %d)\n", p->data);
    print_links(p);
    const struct cost_breakdown *b = &p->breakdown;
    printf("\npredicted step: %.4f s (%.0f tokens/s), critical stage %d\n", p->step_s,
           p->tokens_per_s, b->critical_stage);
    printf("  compute %.4f  tp_comm %.4f  pp_comm %.4f  bubble %.4f  dp_comm %.4f  optimizer "
           "%.4f\n", b->compute, b->tp_comm, b->pp_comm, b->bubble, b->dp_comm, b->optimizer);
    printf("baselines at this shape (pipeline %d x data %d, the paper's comparison):", p->pipeline,
           p->data);
    const double base[2] = {p->baseline_naive_s, p->baseline_ethernet_s};
    for (int i = 0; i < 2; i++) {
        if (isfinite(base[i]))
            printf(" %s %.4f s (x%.2f)%s", i ? "ethernet" : "naive", base[i], base[i] / p->step_s,
                   i ? "" : ",");
        else
            printf(" %s: equal layers do not fit in memory%s", i ? "ethernet" : "naive",
                   i ? "" : ",");
    }
    printf("\n");
    if (n_best) {
        printf("each policy at its own best shape (tokens/s; this plan %.0f):\n", p->tokens_per_s);
        for (int i = 0; i < n_best; i++) {
            if (isfinite(best[i].step_s) && best[i].tokens_per_s > 0)
                printf("  %-9s %.0f tokens/s (this plan x%.2f) at pipeline %d x data %d, %d "
                       "micro-batches of %d\n", policy_name(best[i].policy), best[i].tokens_per_s,
                       p->tokens_per_s / best[i].tokens_per_s, best[i].pipeline, best[i].data,
                       best[i].micro_batches, best[i].micro_batch_size);
            else
                printf("  %-9s no plan\n", policy_name(best[i].policy));
        }
    }
    if (p->n_top > 1) {
        printf("\nbest shapes (auto):\n  %-8s %-6s %-13s %-10s %-12s %s\n", "pipeline", "data",
               "micro-batches", "mb size", "step s", "tokens/s");
        for (int i = 0; i < p->n_top; i++)
            printf("  %-8d %-6d %-13d %-10d %-12.4f %.0f\n", p->top[i].pipeline, p->top[i].data,
                   p->top[i].micro_batches, p->top[i].micro_batch_size, p->top[i].step_s,
                   p->top[i].tokens_per_s);
    }
}

static int parse_partition(const char *s, int *out, int *n, int cap)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 100000 || *n == cap || (*end && *end != ','))
            return -1;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

/* --json: the plan document, with the fabric-blind policies' own best beside a holmes plan.
 * 0, or -1 (out of memory, said). */
static int print_json(const struct plan *p, const struct own_best *best, int n_best)
{
    cJSON *j = plan_to_json(p);
    cJSON *ob = j && n_best ? cJSON_AddObjectToObject(j, "baselines_own_best") : NULL;
    for (int i = 0; ob && i < n_best; i++) {
        cJSON *x = cJSON_AddObjectToObject(ob, policy_name(best[i].policy));
        if (x && isfinite(best[i].step_s)) {
            cJSON_AddNumberToObject(x, "step_seconds", best[i].step_s);
            cJSON_AddNumberToObject(x, "tokens_per_second", best[i].tokens_per_s);
            cJSON_AddNumberToObject(x, "pipeline", best[i].pipeline);
            cJSON_AddNumberToObject(x, "data", best[i].data);
            cJSON_AddNumberToObject(x, "micro_batches", best[i].micro_batches);
            cJSON_AddNumberToObject(x, "micro_batch_size", best[i].micro_batch_size);
        }
    }
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!s) {
        fprintf(stderr, "holmes-operator plan: out of memory\n");
        return -1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

static int cmp_memory(const void *a, const void *b)
{
    double x = ((const struct plan_worker *)a)->memory_gb, y = ((const struct plan_worker *)b)->memory_gb;
    return (x > y) - (x < y);
}

/* spec.elastic with a cluster that says how much device memory its workers have: the job must
 * still fit on the minWorkers of them with the least (pipeline and data chosen for them, as the
 * coordinator's re-plan does). 0, or -1 with the planner's reason. */
static int elastic_fits(const struct tj_spec *s, const struct cluster *cl, const struct plan_job *job,
                        herr *e)
{
    int k = s->elastic.min_workers, known = 0;
    for (int i = 0; i < cl->n_workers; i++)
        known |= cl->workers[i].memory_gb > 0;
    if (!tj_is_elastic(s) || !known || k < 1 || k >= cl->n_workers)
        return 0;
    struct plan_worker *w = malloc((size_t)cl->n_workers * sizeof *w);
    if (!w)
        return herr_set(e, "out of memory");
    memcpy(w, cl->workers, (size_t)cl->n_workers * sizeof *w);
    qsort(w, (size_t)cl->n_workers, sizeof *w, cmp_memory); /* unknown (0) first: unchecked */
    struct plan_job j = *job;
    j.pipeline = TJ_AUTO;
    j.data = TJ_AUTO;
    j.pinned = NULL;
    j.n_pinned = 0;
    struct plan p;
    herr pe = {0};
    int rc = plan_make(w, k, &j, &cl->links, &p, &pe);
    if (rc == 0)
        plan_free(&p);
    else
        herr_set(e, "spec.elastic.minWorkers %d: the job cannot run on the %d of these workers "
                 "with the least device memory (%.0f GB a GPU): %s", k, k, w[k - 1].memory_gb, pe.msg);
    free(w);
    return rc;
}

int cmd_plan(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    static const struct option opts[] = {
        {"cluster", required_argument, 0, 'c'}, {"policy", required_argument, 0, 'p'},
        {"calibration", required_argument, 0, 'k'}, {"json", no_argument, 0, 'j'},
        {"partition", required_argument, 0, 'P'}, {"tflops", required_argument, 0, 't'},
        {"warmup", required_argument, 0, 'w'}, {"memory-gbps", required_argument, 0, 'm'},
        {0, 0, 0, 0},
    };
    const char *cluster_path = NULL, *policy = NULL, *calib = NULL, *partition = NULL;
    double tflops = 0, membw = 0;
    int json = 0, c, warmup = -1;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:p:k:jP:t:w:m:", opts, NULL)) != -1) {
        switch (c) {
        case 'c': cluster_path = optarg; break;
        case 'p': policy = optarg; break;
        case 'k': calib = optarg; break;
        case 'j': json = 1; break;
        case 'P': partition = optarg; break;
        case 't':
            if (parse_figure("--tflops", "a number", optarg, &tflops))
                return 2;
            break;
        case 'm':
            if (parse_figure("--memory-gbps", "a number of GB/s", optarg, &membw))
                return 2;
            break;
        case 'w': {
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 0 || v > PIPE_WARMUP_EXTRA_MAX) {
                fprintf(stderr, "holmes-operator plan: --warmup: \"%s\" must be an integer in "
                        "[0, %d]\n", optarg, PIPE_WARMUP_EXTRA_MAX);
                return 2;
            }
            warmup = (int)v;
            break;
        }
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "holmes-operator plan: need one JOB file\n");
        usage(stderr);
        return 2;
    }
    herr e = {0};
    struct cluster cl;
    struct tj_job tj;
    struct plan_job job;
    struct plan p;
    int pin[1024], n_pin = 0;
    memset(&p, 0, sizeof p);
    if (partition && parse_partition(partition, pin, &n_pin, 1024)) {
        fprintf(stderr, "holmes-operator plan: --partition: must be a comma-separated list of "
                "layer counts >= 1 (at most 1024)\n");
        return 2;
    }
    if (tflops > 0 && cluster_path) {
        fprintf(stderr, "holmes-operator plan: --tflops is for the spec.emulation workers; with "
                "--cluster the file's gpu_tflops count\n");
        return 2;
    }
    if (membw > 0 && cluster_path) {
        fprintf(stderr, "holmes-operator plan: --memory-gbps is for the spec.emulation workers; "
                "with --cluster the file's memory_gbps count\n");
        return 2;
    }
    if (planner_load_job(argv[optind], &tj, &e)) {
        fprintf(stderr, "holmes-operator plan: %s\n", e.msg);
        return 1;
    }
    if (cluster_path ? cluster_load(cluster_path, &cl, &e)
                     : cluster_from_emulation(&tj.spec, tflops, &cl, &e)) {
        fprintf(stderr, "holmes-operator plan: %s%s%s\n", cluster_path ? "" : argv[optind],
                cluster_path ? "" : ": ", e.msg);
        tj_job_free(&tj);
        return 1;
    }
    for (int i = 0; membw > 0 && i < cl.n_workers; i++)
        cl.workers[i].memory_gbps = membw;
    int rc = 1;
    planner_job_from_spec(&tj.spec, &job);
    if (n_pin) {
        job.pinned = pin;
        job.n_pinned = n_pin;
    }
    if (warmup >= 0) {
        job.warmup_pinned = 1;
        job.warmup = warmup;
    }
    if (policy && policy_parse(policy, &job.policy)) {
        fprintf(stderr, "holmes-operator plan: --policy: must be holmes, naive or ethernet\n");
        rc = 2;
        goto out;
    }
    if (planner_apply_spec(&tj.spec, cl.workers, cl.n_workers, &cl.links, &e)) {
        fprintf(stderr, "holmes-operator plan: %s: %s\n", argv[optind], e.msg);
        goto out;
    }
    if (calib && cluster_load_calibration(calib, &cl.links, &e)) {
        fprintf(stderr, "holmes-operator plan: %s\n", e.msg);
        goto out;
    }
    if (plan_make(cl.workers, cl.n_workers, &job, &cl.links, &p, &e)) {
        fprintf(stderr, "holmes-operator plan: %s\n", e.msg);
        goto out;
    }
    if (elastic_fits(&tj.spec, &cl, &job, &e)) {
        fprintf(stderr, "holmes-operator plan: %s: %s\n", argv[optind], e.msg);
        goto out;
    }
    /* Beside a holmes plan: what each fabric-blind policy does at its own best shape. */
    struct own_best best[2];
    int n_best = 0;
    if (p.policy == POLICY_HOLMES) {
        own_best(cl.workers, cl.n_workers, &job, &cl.links, POLICY_NAIVE, &best[n_best++]);
        own_best(cl.workers, cl.n_workers, &job, &cl.links, POLICY_ETHERNET, &best[n_best++]);
    }
    if (json) {
        if (print_json(&p, best, n_best) != 0)
            goto out;
    } else {
        print_table(&p, best, n_best);
    }
    rc = 0;
out:
    plan_free(&p);
    tj_job_free(&tj);
    cluster_free(&cl);
    return rc;
}
