/* The planner on random clusters (run under ASan + UBSan by `make test`): 1 to 16,384 GPUs, 1 to 6
 * fabrics of uneven sizes listed interleaved or grouped, mixed GPU speeds and GPU counts, random
 * jobs (valid and impossible, auto and pinned shapes, both policies and schedules). Every plan
 * returned must hold together; every refusal must say why; nothing may crash.
 * HOLMES_FUZZ_SEED and HOLMES_FUZZ_ITERS run it longer (e.g. 2000 iterations). The first case is
 * the one that once crashed (2,048 workers x 8 GPUs, IB and RoCE interleaved, a GPT-3 175B shape,
 * tensor 8 x pipeline 16 x data 128: the search's refinement overran its start buffer). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner.h"
#include "planner_testutil.h"
#include "test.h"


struct fab {
    enum nic_class cls;
    char id[32];
    double gbps;
};

static void make_worker(struct plan_worker *w, int i, const struct fab *f, int gpus, double tflops)
{
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "w%d", i);
    w->gpus = gpus;
    w->tflops = tflops;
    w->nic.cls = f->cls;
    w->nic.gbps = f->gbps;
    w->nic.gid_index = f->cls == NIC_ROCE ? 3 : -1;
    snprintf(w->nic.fabric, sizeof w->nic.fabric, "%s", f->id);
}

static int divisors(int n, int *out, int cap)
{
    int k = 0;
    for (int d = 1; d <= n && k < cap; d++)
        if (n % d == 0)
            out[k++] = d;
    return k;
}

/* Checks of a plan: every layer in exactly one stage, stages contiguous and in order, the ranks
 * the shape needs, each rank on a worker that has the device, and a finite positive prediction.
 * Returns the number of failed checks (each printed). */
static int check_plan(const char *name, const struct plan *p, const struct plan_worker *w, int n,
                      const struct plan_job *j)
{
    int bad = 0;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("# %s: ", name);                                                                \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            bad++;                                                                                 \
        }                                                                                          \
    } while (0)
    EXPECT(p->tensor == j->tensor, "tensor %d, asked %d", p->tensor, j->tensor);
    EXPECT(j->pipeline == 0 || p->pipeline == j->pipeline, "pipeline %d, asked %d", p->pipeline,
           j->pipeline);
    EXPECT(j->data == 0 || p->data == j->data, "data %d, asked %d", p->data, j->data);
    EXPECT(p->n_stages == p->pipeline, "%d stages for pipeline %d", p->n_stages, p->pipeline);
    EXPECT((long)p->tensor * p->pipeline * p->data == p->n_ranks, "t x p x d = %ld, ranks %d",
           (long)p->tensor * p->pipeline * p->data, p->n_ranks);
    EXPECT(p->n_ranks <= plan_devices(w, n), "%d ranks on %ld devices", p->n_ranks,
           plan_devices(w, n));
    int next = 0;
    for (int s = 0; s < p->n_stages && bad < 5; s++) {
        EXPECT(p->stages[s].first_layer == next, "stage %d starts at %d, expected %d", s,
               p->stages[s].first_layer, next);
        EXPECT(p->stages[s].last_layer > p->stages[s].first_layer, "stage %d is empty", s);
        next = p->stages[s].last_layer;
    }
    EXPECT(next == j->model.layers, "stages cover %d of %d layers", next, j->model.layers);
    for (int r = 0; r < p->n_ranks && bad < 5; r++) {
        const struct plan_rank *k = &p->ranks[r];
        EXPECT(k->worker >= 0 && k->worker < n, "rank %d on worker %d", r, k->worker);
        if (k->worker < 0 || k->worker >= n)
            continue;
        int devs = w[k->worker].gpus > 0 ? w[k->worker].gpus : 1;
        EXPECT(k->local >= 0 && k->local < devs, "rank %d on device %d of %d", r, k->local, devs);
        EXPECT(plan_rank_of(p, k->stage, k->dp_rank, k->tp_rank) == r, "rank %d's coordinates", r);
    }
    /* each stage's optimizer priced at the least memory bandwidth of its devices (a worker's
     * own, else the links') */
    for (int s = 0; s < p->n_stages && bad < 5; s++) {
        double least = INFINITY;
        for (int r = 0; r < p->n_ranks; r++) {
            const struct plan_rank *k = &p->ranks[r];
            if (k->stage != s || k->worker < 0 || k->worker >= n)
                continue;
            double bw = w[k->worker].memory_gbps > 0 ? w[k->worker].memory_gbps : p->links.memory_gbps;
            least = fmin(least, bw);
        }
        EXPECT(p->stages[s].memory_gbps == least, "stage %d priced at %g GB/s, its devices' least %g",
               s, p->stages[s].memory_gbps, least);
        EXPECT(isfinite(p->stages[s].optimizer_s) && p->stages[s].optimizer_s > 0,
               "stage %d's optimizer priced %g s", s, p->stages[s].optimizer_s);
    }
    /* a tensor group stays inside one worker */
    for (int g = 0; g < p->n_groups && bad < 5; g++) {
        const struct plan_group *gr = &p->groups[g];
        if (gr->kind != GROUP_TP)
            continue;
        for (int i = 1; i < gr->n; i++)
            EXPECT(p->ranks[gr->members[i]].worker == p->ranks[gr->members[0]].worker,
                   "tensor group %d spans workers", g);
    }
    EXPECT(isfinite(p->step_s) && p->step_s > 0, "predicted step %g s", p->step_s);
    /* a link per stage boundary, replica and tensor rank, priced; the document the workers get
     * holds together (plan_doc_complete checks every group, links included) */
    int links = 0;
    for (int g = 0; g < p->n_groups; g++)
        if (p->groups[g].kind == GROUP_LINK) {
            links++;
            EXPECT(p->groups[g].gbps > 0 && p->groups[g].nic_share > 0 &&
                       p->groups[g].nic_share <= 1, "link group %d priced %g Gb/s, share %g", g,
                   p->groups[g].gbps, p->groups[g].nic_share);
        }
    EXPECT(links == (p->pipeline - 1) * p->data * p->tensor, "%d link groups for %d x %d x %d",
           links, p->pipeline, p->data, p->tensor);
    struct plan_doc doc;
    herr de = {0};
    if (p->n_ranks <= PLAN_DOC_MAX_WORLD) {
        int drc = plan_to_doc(p, &doc, &de);
        EXPECT(drc == 0, "plan_to_doc: %s", de.msg);
        if (drc == 0)
            plan_doc_free(&doc);
    }
    /* token slices: bounds rising from 0 to seqLen; never slower than unsliced under auto */
    if (p->slices > 1) {
        EXPECT(p->slice_bounds[0] == 0 && p->slice_bounds[p->slices] == j->model.seq_len,
               "slices %d span [%d, %d)", p->slices, p->slice_bounds[0], p->slice_bounds[p->slices]);
        for (int k = 0; k < p->slices && bad < 5; k++)
            EXPECT(p->slice_bounds[k + 1] > p->slice_bounds[k], "slice %d empty", k);
        EXPECT(!p->slices_auto || p->step_s < p->unsliced_step_s, "auto sliced slower: %g vs %g",
               p->step_s, p->unsliced_step_s);
    }
    EXPECT(j->token_slices != 1 || p->slices == 0, "%d slices for tokenSlices 1", p->slices);
#undef EXPECT
    return bad;
}

static int one_case(int it, struct plan_worker *w, int n, const struct plan_job *j,
                    const struct cost_links *l, int *planned, int *refused)
{
    char name[96];
    snprintf(name, sizeof name, "case %d (%d workers, %ld devices)", it, n, plan_devices(w, n));
    struct plan p;
    herr e = {0};
    int bad = 0;
    if (plan_make(w, n, j, l, &p, &e) == 0) {
        (*planned)++;
        bad = check_plan(name, &p, w, n, j);
        plan_free(&p);
    } else {
        (*refused)++;
        if (!e.msg[0]) {
            printf("# %s: refused without a reason\n", name);
            bad = 1;
        }
    }
    return bad;
}

int main(void)
{
    const char *seed_s = getenv("HOLMES_FUZZ_SEED"), *iters_s = getenv("HOLMES_FUZZ_ITERS");
    uint64_t seed = seed_s ? strtoull(seed_s, NULL, 0) : 20261124;
    int iters = iters_s ? atoi(iters_s) : 60;
    planner_test_seed(seed);
    struct cost_links l;
    cost_links_default(&l);
    int planned = 0, refused = 0, bad = 0;
    struct plan_worker *w = calloc(16384, sizeof *w);
    if (!w) {
        TEST_FAIL("memory", "calloc");
        return 1;
    }

    /* The case that crashed. */
    struct fab ib = {NIC_INFINIBAND, "ib-a", 200}, roce = {NIC_ROCE, "roce-b", 100};
    for (int i = 0; i < 2048; i++)
        make_worker(&w[i], i, i % 2 ? &roce : &ib, 8, 312);
    struct plan_job j;
    plan_job_init(&j);
    j.model = (struct tj_model){.layers = 96, .hidden = 12288, .heads = 96, .vocab = 50257, .seq_len = 2048};
    j.tensor = 8;
    j.pipeline = 16;
    j.data = 128;
    j.micro_batches = 64;
    j.micro_batch_size = 1;
    int b = one_case(-1, w, 2048, &j, &l, &planned, &refused);
    CHECK("2,048 x 8 GPUs, IB/RoCE interleaved, GPT-3 175B, 8 x 16 x 128: planned and sound",
          b == 0 && planned == 1);

    static const enum nic_class classes[] = {NIC_INFINIBAND, NIC_ROCE, NIC_ETHERNET};
    static const int layer_choices[] = {2, 4, 12, 24, 48, 96};
    for (int it = 0; it < iters; it++) {
        /* the cluster: GPUs per worker, a size class (big clusters rarely), fabrics */
        int gpus = (int[]){0, 1, 2, 4, 8}[planner_test_pick(0, 4)];
        int per = gpus ? gpus : 1;
        int size_class = planner_test_pick(0, 19);
        int max_devices = size_class < 14 ? 64 : size_class < 19 ? 2048 : 16384;
        int n = planner_test_pick(1, max_devices / per);
        int nf = planner_test_pick(1, 6);
        struct fab fabs[6];
        for (int f = 0; f < nf; f++) {
            fabs[f].cls = classes[planner_test_pick(0, 2)];
            snprintf(fabs[f].id, sizeof fabs[f].id, "%s-%d",
                     fabs[f].cls == NIC_INFINIBAND ? "ib" : fabs[f].cls == NIC_ROCE ? "roce" : "eth", f);
            fabs[f].gbps = (double[]){10, 25, 100, 200, 400}[planner_test_pick(0, 4)];
        }
        int interleave = planner_test_pick(0, 1);
        double speeds[3] = {gpus ? 312 : 0.05, gpus ? 156 : 0.02, gpus ? 989 : 0.1};
        int mixed = planner_test_pick(0, 1);
        for (int i = 0; i < n; i++) {
            /* uneven fabric sizes: fabric f takes a share that halves with f */
            int f = interleave ? i % nf : 0;
            if (!interleave) {
                int r = planner_test_pick(0, (1 << nf) - 2);
                while (f < nf - 1 && r >= (1 << (nf - 1 - f)))
                    r -= 1 << (nf - 1 - f), f++;
            }
            make_worker(&w[i], i, &fabs[f], gpus, mixed ? speeds[planner_test_pick(0, 2)] : speeds[0]);
        }
        /* a third of the clusters say memory bandwidths (0: not said) */
        if (planner_test_pick(0, 2) == 0)
            for (int i = 0; i < n; i++)
                w[i].memory_gbps = (double[]){0, 900, 2039, 3352}[planner_test_pick(0, 3)];
        /* the job: a shape that fits, or not */
        plan_job_init(&j);
        int layers = layer_choices[planner_test_pick(0, 5)];
        int heads = (int[]){1, 2, 4, 8, 12, 16}[planner_test_pick(0, 5)];
        j.model = (struct tj_model){.layers = layers, .hidden = heads * 64, .heads = heads,
                                    .vocab = planner_test_pick(0, 1) ? 256 : 50257,
                                    .seq_len = (int[]){64, 256, 1024}[planner_test_pick(0, 2)]};
        int tdiv[8], nt = divisors(per, tdiv, 8);
        j.tensor = gpus ? tdiv[planner_test_pick(0, nt - 1)] : 1;
        if (gpus && j.tensor > 1 && heads % j.tensor != 0)
            j.tensor = 1;
        long devices = plan_devices(w, n);
        long blocks = devices / j.tensor;
        if (planner_test_pick(0, 2) == 0) {
            j.pipeline = 0;
            j.data = 0;
        } else {
            int want = planner_test_pick(1, layers + (planner_test_pick(0, 4) == 0 ? 3 : 0)); /* sometimes too many */
            j.pipeline = want;
            j.data = blocks % want == 0 ? (int)(blocks / want) : planner_test_pick(1, 8);
        }
        j.micro_batches = planner_test_pick(1, 64);
        j.micro_batch_size = planner_test_pick(1, 4);
        j.schedule = planner_test_pick(0, 1) ? SCHED_1F1B : SCHED_GPIPE;
        /* TeraPipe: unsliced mostly; else auto, or a count (sometimes more than the tokens) */
        int ts = planner_test_pick(0, 5);
        j.token_slices = ts < 3 ? 1 : ts == 3 ? TJ_AUTO : planner_test_pick(2, j.model.seq_len + (ts == 5 ? 8 : 0));
        j.policy = planner_test_pick(0, 3) ? POLICY_HOLMES : POLICY_NAIVE;
        bad += one_case(it, w, n, &j, &l, &planned, &refused);
    }
    printf("# seed %llu: %d cases, %d planned, %d refused\n", (unsigned long long)seed,
           iters + 1, planned, refused);
    CHECK_INT("every plan holds together and every refusal says why", bad, 0);
    CHECK("some random cases planned", planned > 1);
    CHECK("some random cases refused", refused > 0);
    free(w);
    TEST_MAIN_END();
}
