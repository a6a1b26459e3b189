/* The holmes policy against an exhaustive search on 200 seeded random heterogeneous clusters
 * of at most 12 workers: every assignment of workers to (stage, replica) — up to the symmetry
 * of interchangeable workers (same fabric, NIC, GPU speed and memory) — and every contiguous
 * layer split. Like the policy, the search keeps every stage inside one fabric whenever the
 * cluster allows it. Half the clusters have a shared inter-fabric gateway (links.gateway_gbps);
 * half say their GPUs' memory, sized so that it binds (what does not fit is skipped).
 * Checks: holmes <= 1.01 x optimum; neither baseline beats holmes; holmes refuses ("nothing
 * fits") only where the exhaustive search finds nothing either. */
#include <stdint.h>
#include <stdlib.h>

#include "planner.h"
#include "planner_testutil.h"
#include "test.h"

#define MAXW 12
#define MAXC 12


struct ex {
    struct plan_eval *ev;
    int P, D, L, n;
    int n_classes;
    int cls_fabric[MAXC];
    int cls_count[MAXC];
    int cls_units[MAXC][MAXW];
    int homog;
    int comp[MAXC * 4];      /* per stage, count of each class */
    int stage_units[MAXW];
    int layers[MAXW];
    double best;
    int best_units[MAXW], best_layers[MAXW];
    long evaluated;
};

/* every contiguous split of L layers into P non-empty stages */
static void splits(struct ex *x, int s, int left)
{
    if (s == x->P - 1) {
        x->layers[s] = left;
        int su[MAXW];
        memcpy(su, x->stage_units, sizeof su);
        double t = plan_eval_step_canonical(x->ev, su, x->layers);
        x->evaluated++;
        if (t < x->best) {
            x->best = t;
            memcpy(x->best_units, su, sizeof su);
            memcpy(x->best_layers, x->layers, sizeof x->layers);
        }
        return;
    }
    for (int k = 1; k <= left - (x->P - 1 - s); k++) {
        x->layers[s] = k;
        splits(x, s + 1, left - k);
    }
}

static void assign_units(struct ex *x)
{
    int used[MAXC] = {0};
    for (int s = 0; s < x->P; s++) {
        int d = 0;
        for (int c = 0; c < x->n_classes; c++)
            for (int k = 0; k < x->comp[s * MAXC + c]; k++)
                x->stage_units[s * x->D + d++] = x->cls_units[c][used[c]++];
    }
    splits(x, 0, x->L);
}

/* stage s, choosing counts for class c, `need` units still to place in this stage */
static void compose(struct ex *x, int s, int c, int need, int fabric)
{
    if (s == x->P) {
        assign_units(x);
        return;
    }
    if (need == 0) {
        for (int k = c; k < x->n_classes; k++)
            x->comp[s * MAXC + k] = 0;
        compose(x, s + 1, 0, x->D, -1);
        return;
    }
    if (c == x->n_classes)
        return;
    int max = x->cls_count[c] < need ? x->cls_count[c] : need;
    for (int k = max; k >= 0; k--) {
        if (k > 0 && x->homog && fabric >= 0 && x->cls_fabric[c] != fabric)
            continue;
        x->comp[s * MAXC + c] = k;
        x->cls_count[c] -= k;
        compose(x, s, c + 1, need - k, k > 0 && fabric < 0 ? x->cls_fabric[c] : fabric);
        x->cls_count[c] += k;
    }
}

int main(void)
{
    int cases = 0, within = 0, naive_ok = 0, eth_ok = 0, homog_cases = 0, nothing_fits = 0,
        mem_cases = 0, bw_cases = 0;
    double worst = 0;
    long total_evals = 0;
    static const double gbps_choices[] = {25, 100, 200, 400};
    static const double tflops_choices[] = {40, 100, 150, 300};
    int want = getenv("PLAN_CASES") ? atoi(getenv("PLAN_CASES")) : 200;
    int seed0 = getenv("PLAN_SEED") ? atoi(getenv("PLAN_SEED")) : 1; /* e.g. one case again */
    /* then seeds that once missed (the search's plateaus: 450 with memory bandwidths, 2128
     * with memory, found by its consolidation; 1842 with memory, two swaps and a new stage
     * order away, found by sorting two stages apart; 6585, 1.93x, both stages' data-parallel
     * rings across a 2 Gb/s link, found by sorting them apart by fabric; 8214, 1.20x, two
     * layers to move at once, found by the split's paired moves; 8924, 1.03x, three units to
     * trade between two stages, found by the iterated search's 32 kicks, 16 before), unless one
     * seed is asked for */
    static const int regress[] = {450, 2128, 1842, 6585, 8214, 8924};
    int n_regress = getenv("PLAN_SEED") ? 0 : (int)(sizeof regress / sizeof regress[0]);
    int total = want + n_regress;
    for (int k = 0; cases < total && k < total + 1000; k++) {
        int seed = cases < want ? seed0 + k : regress[cases - want];
        planner_test_seed(0x9E3779B97F4A7C15ull * (uint64_t)seed + 12345);
        int nf = planner_test_pick(1, 3);
        struct { int cls; double gbps; char name[16]; } fab[3];
        for (int f = 0; f < nf; f++) {
            fab[f].cls = planner_test_pick(0, 2);
            fab[f].gbps = gbps_choices[planner_test_pick(0, 3)];
            snprintf(fab[f].name, sizeof fab[f].name, "fab%d", f);
        }
        int n = planner_test_pick(2, MAXW);
        struct plan_worker w[MAXW];
        memset(w, 0, sizeof w);
        int fab_of[MAXW];
        for (int i = 0; i < n; i++) {
            snprintf(w[i].name, sizeof w[i].name, "w%d", i);
            int f = planner_test_pick(0, nf - 1);
            fab_of[i] = f;
            w[i].gpus = planner_test_pick(0, 1);
            w[i].tflops = tflops_choices[planner_test_pick(0, 1) + (f % 2) * 2 * planner_test_pick(0, 1)];
            w[i].nic.cls = (enum nic_class)fab[f].cls;
            w[i].nic.gbps = fab[f].gbps;
            w[i].nic.gid_index = -1;
            snprintf(w[i].nic.fabric, sizeof w[i].nic.fabric, "%s", fab[f].name);
        }
        /* pipeline: a divisor of n, at most 4 */
        int divs[MAXW], nd = 0;
        for (int p = 1; p <= 4 && p <= n; p++)
            if (n % p == 0)
                divs[nd++] = p;
        struct plan_job job;
        plan_job_init(&job);
        job.pipeline = divs[planner_test_pick(0, nd - 1)];
        job.data = n / job.pipeline;
        job.model.layers = planner_test_pick(job.pipeline, job.pipeline + 4 < 8 ? job.pipeline + 4 : 8);
        job.model.heads = 4;
        job.model.hidden = 128 * planner_test_pick(2, 12);
        job.model.vocab = planner_test_pick(1000, 60000);
        job.model.seq_len = 128 * planner_test_pick(1, 8);
        job.schedule = planner_test_pick(0, 1) ? SCHED_GPIPE : SCHED_1F1B;
        job.micro_batches = planner_test_pick(job.schedule == SCHED_1F1B ? job.pipeline : 1, 8);
        job.micro_batch_size = planner_test_pick(1, 4);
        job.precision = planner_test_pick(0, 1) ? DTYPE_BF16 : DTYPE_FP32;
        struct cost_links links;
        cost_links_default(&links);
        links.tcp_gbps = (double)planner_test_pick(1, 40);
        links.compute_efficiency = 0.05 * planner_test_pick(2, 12);
        links.overlap = planner_test_pick(0, 1);
        /* half the clusters have a shared inter-fabric gateway (flows entering a fabric at once
         * split it) */
        links.gateway_gbps = planner_test_pick(0, 1) ? (double)planner_test_pick(1, 40) : 0;

        /* half the clusters say their GPUs' memory: sizes around what the heaviest stage of an
         * even split needs, so that it binds (a stage fits some GPUs and not others) */
        if (planner_test_pick(0, 1)) {
            mem_cases++;
            struct cost_job cj = {.model = job.model, .tensor = 1, .data = job.data,
                                  .micro_batches = job.micro_batches,
                                  .micro_batch_size = job.micro_batch_size,
                                  .elem_bytes = job.precision == DTYPE_BF16 ? 2 : 4,
                                  .schedule = job.schedule};
            int even = (job.model.layers + job.pipeline - 1) / job.pipeline;
            double need = cost_stage_memory(&cj, even, 0, job.pipeline) / 0.9 / 1e9;
            static const double factor[] = {0.7, 1.0, 1.3, 3.0};
            for (int i = 0; i < n; i++)
                if (w[i].gpus > 0)
                    w[i].memory_gb = need * factor[planner_test_pick(0, 3)];
        }
        /* a third say their devices' memory bandwidth (0: not said, the links' 1500 GB/s), low
         * enough that the optimizer weighs beside these small models' compute: the devices of a
         * stage are priced at the slowest one's, the first stage's optimizer delays every
         * stage's forward. Drawn last: the cases before it keep their clusters. */
        if (planner_test_pick(0, 2) == 0) {
            bw_cases++;
            static const double bw[] = {0, 2, 20, 2000};
            for (int i = 0; i < n; i++)
                w[i].memory_gbps = bw[planner_test_pick(0, 3)];
        }
        herr e = {0};
        struct plan p;
        int made = plan_make(w, n, &job, &links, &p, &e) == 0;
        struct ex x;
        memset(&x, 0, sizeof x);
        x.ev = plan_eval_new(w, n, &job, &links, &e);
        if (!x.ev) {
            TEST_FAIL("plan_eval_new", "seed %d: %s", seed, e.msg);
            if (made)
                plan_free(&p);
            continue;
        }
        x.P = job.pipeline;
        x.D = job.data;
        x.L = job.model.layers;
        x.n = n;
        x.best = INFINITY;
        /* classes of interchangeable workers */
        int cls_of[MAXW];
        for (int i = 0; i < n; i++) {
            cls_of[i] = -1;
            for (int j = 0; j < i; j++)
                if (fab_of[j] == fab_of[i] && w[j].tflops == w[i].tflops &&
                    w[j].memory_gb == w[i].memory_gb && w[j].memory_gbps == w[i].memory_gbps) {
                    cls_of[i] = cls_of[j];
                    break;
                }
            if (cls_of[i] < 0) {
                cls_of[i] = x.n_classes++;
                x.cls_fabric[cls_of[i]] = fab_of[i];
            }
            int c = cls_of[i];
            x.cls_units[c][x.cls_count[c]++] = i;
        }
        int fcount[3] = {0};
        for (int i = 0; i < n; i++)
            fcount[fab_of[i]]++;
        x.homog = 1;
        for (int f = 0; f < nf; f++)
            if (fcount[f] % x.D)
                x.homog = 0;
        homog_cases += x.homog;
        compose(&x, 0, 0, x.D, -1);
        total_evals += x.evaluated;
        cases++;
        if (!made) { /* refused: right only when nothing fits anywhere */
            nothing_fits++;
            if (isfinite(x.best)) {
                TEST_FAIL("holmes finds a plan when one fits", "seed %d: %s; the exhaustive "
                          "search's best: %.6g s", seed, e.msg, x.best);
                for (int i = 0; getenv("PLAN_DEBUG") && i < n; i++)
                    printf("#  %s fab %d gpus %d tflops %g memory %.3f GB %g GB/s\n", w[i].name,
                           fab_of[i], w[i].gpus, w[i].tflops, w[i].memory_gb, w[i].memory_gbps);
                for (int st = 0; getenv("PLAN_DEBUG") && st < x.P; st++) {
                    printf("#  best stage %d: layers %d:", st, x.best_layers[st]);
                    for (int d = 0; d < x.D; d++)
                        printf(" w%d", x.best_units[st * x.D + d]);
                    printf("\n");
                }
            }
            else
                within++, naive_ok++, eth_ok++;
            plan_eval_free(x.ev);
            continue;
        }
        double ratio = p.step_s / x.best;
        if (ratio > worst)
            worst = ratio;
        if (ratio <= 1.01)
            within++;
        else
            TEST_FAIL("holmes within 1% of exhaustive", "seed %d: holmes %.6g s, optimum %.6g s "
                      "(x%.4f), n %d P %d D %d L %d", seed, p.step_s, x.best, ratio, n, x.P, x.D,
                      x.L);
        if ((ratio > 1.01 || p.baseline_naive_s < p.step_s) && getenv("PLAN_DEBUG")) {
            for (int i = 0; i < n; i++)
                printf("#  %s fab %d cls %d gbps %g tflops %g gpus %d memory %.3f GB %g GB/s\n",
                       w[i].name, fab_of[i], w[i].nic.cls, w[i].nic.gbps, w[i].tflops, w[i].gpus,
                       w[i].memory_gb, w[i].memory_gbps);
            printf("#  gateway %g\n", links.gateway_gbps);
            printf("#  tcp %g eff %g overlap %g m %d b %d sched %d h %d V %d s %d\n", links.tcp_gbps,
                   links.compute_efficiency, links.overlap, job.micro_batches,
                   job.micro_batch_size, job.schedule, job.model.hidden, job.model.vocab,
                   job.model.seq_len);
            for (int s = 0; s < x.P; s++) {
                printf("#  stage %d: holmes layers %d:", s, p.stages[s].last_layer -
                       p.stages[s].first_layer);
                for (int d = 0; d < x.D; d++)
                    printf(" %s", p.workers[p.ranks[plan_rank_of(&p, s, d, 0)].worker].name);
                printf(" | best layers %d:", x.best_layers[s]);
                for (int d = 0; d < x.D; d++)
                    printf(" w%d", x.best_units[s * x.D + d]);
                printf("\n");
            }
        }
        if (p.baseline_naive_s >= p.step_s * (1 - 1e-9))
            naive_ok++;
        else
            TEST_FAIL("naive does not beat holmes", "seed %d: naive %.6g < holmes %.6g", seed,
                      p.baseline_naive_s, p.step_s);
        if (p.baseline_ethernet_s >= p.step_s * (1 - 1e-9))
            eth_ok++;
        else
            TEST_FAIL("ethernet does not beat holmes", "seed %d: ethernet %.6g < holmes %.6g",
                      seed, p.baseline_ethernet_s, p.step_s);
        plan_eval_free(x.ev);
        plan_free(&p);
    }
    printf("# %d cases (%d fabric-homogeneous, %d with the GPUs' memory known, %d of them where "
           "nothing fits, %d with memory bandwidths), %ld exhaustive evaluations, worst "
           "holmes/optimum %.5f\n", cases, homog_cases, mem_cases, nothing_fits, bw_cases,
           total_evals, worst);
    CHECK_INT("random clusters: holmes <= 1.01 x exhaustive optimum", within, total);
    CHECK_INT("random clusters: naive never beats holmes", naive_ok, total);
    CHECK_INT("random clusters: ethernet never beats holmes", eth_ok, total);
    CHECK("some cases are fabric-homogeneous and some are not", homog_cases > want / 10 &&
          homog_cases < want * 9 / 10);
    TEST_MAIN_END();
}
