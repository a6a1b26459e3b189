/* The distributed trainer against the single-process engine: the same tiny GPT, global batch
 * and seed, over TCP between forked processes (pipeline 2 x data 2, pipeline 4 x data 1,
 * pipeline 1 x data 4, and GPipe): per-step losses within 1e-5 relative for 20 steps and the same
 * final parameters (within 1e-5). Also: resume from a checkpoint reproduces an uninterrupted run,
 * and a process that dies mid-step makes every other one fail with an error instead of hanging. */
#include "test.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bf16.h"
#include "checkpoint.h"
#include "comm_testutil.h"
#include "gpt.h"
#include "optimizer.h"
#include "rank_table.h"
#include "trainer.h"
#include "fs_testutil.h"
#include "trainer_testutil.h"

#define STEPS 20
#define MAXSTEPS 32
#define EVAL_EVERY 8
#define EVAL_G 3 /* micro-batches of an evaluation, in all */

#define MODEL TRAINER_TEST_MODEL
enum { B = TRAINER_TEST_B, T = TRAINER_TEST_T, MG = 4 }; /* MG: micro-batches in the global batch */

/* The tests' batches; ctx (int[2], may be NULL): with ctx[0] >= 0 the process dies as it asks for
 * micro-batch ctx[1]. */
static int batch(void *ctx, uint64_t k, int r, int replicas, int *tok, int *tgt, herr *e)
{
    int *die = ctx;
    if (die && die[0] >= 0 && k == (uint64_t)die[1])
        _exit(0); /* a process dies mid-step */
    return trainer_test_batch(NULL, k, r, replicas, tok, tgt, e);
}

static void config(struct trainer_config *c, int M, long steps)
{
    trainer_test_config(c, M, steps, STEPS, 42);
}

struct run_arg {
    int P, D;
    enum schedule sched;
    long steps;         /* this invocation's last step */
    const char *ckpt;   /* checkpoint dir or NULL */
    int die_rank;       /* rank whose data source exits (-1: none) */
    long first_step;    /* step of the first report expected (resume) */
    int bf16;           /* parameters gathered and computed with in bf16 (fp32 masters) */
    int emulated;       /* the engine's memory staged as a device's (devmem_emulated) */
    long profile;       /* trainer_config.profile_step (0: none) */
    size_t bucket;      /* trainer_config.bucket_floats (0: the tests' 3,000) */
    /* non-finite steps: rank nan_rank's gradients become NaN at the steps of the mask skips
     * (bit s - 1: step s), which the reference skips too; at step poison_step its parameters
     * become NaN (the update keeps them so); max_nonfinite (0: the default, 3; -1: 0); with
     * want_err every rank must fail with an error holding it, of kind HERR_CONFIG, having
     * reported the steps before want_fail_step */
    uint32_t skips;
    int nan_rank;
    long poison_step;
    int max_nonfinite;
    const char *want_err;
    long want_fail_step;
};

struct result {
    float losses[MAXSTEPS];
    long nsteps;
    int overlapped, buckets; /* most buckets started during backward in one step, of */
    long staged_steps;       /* steps that copied bytes between the host and the engine */
    long profiled_step;      /* the step reported with a profile (-1: none; -2: several) */
    struct engine_profile profile;
    struct gpt_stage *ref;
    int evals;               /* evaluations reported */
    long eval_step;          /* the last one's step and loss */
    float eval_loss;
    uint32_t skipped;        /* bit s - 1: step s reported skipped */
    const struct run_arg *ra;
    int rank;
    int bad;
};

static int on_step(void *ctx, const struct trainer_report *r)
{
    struct result *res = ctx;
    if (r->step >= 1 && r->step <= MAXSTEPS)
        res->losses[r->step - 1] = r->loss;
    res->nsteps = r->step;
    if (r->skipped && r->step >= 1 && r->step <= 32)
        res->skipped |= 1u << (r->step - 1);
    if (r->evaluated) {
        res->evals++;
        res->eval_step = r->step;
        res->eval_loss = r->eval_loss;
    }
    if (r->buckets_overlapped > res->overlapped)
        res->overlapped = r->buckets_overlapped;
    res->buckets = r->buckets;
    res->staged_steps += r->h2d_bytes > 0 && r->d2h_bytes > 0;
    if (r->profiled) {
        res->profiled_step = res->profiled_step == -1 ? r->step : -2;
        res->profile = r->profile;
    }
    if (getenv("TRAINER_VERBOSE"))
        fprintf(stderr, "stage %d replica %d step %ld loss %.6f time %.3f s (pipe %.3f sync %.3f)\n",
                r->stage, r->replica, r->step, r->loss, r->step_s, r->pipeline_s, r->grad_sync_s);
    return 0;
}

/* The injected faults (run_arg): NaN gradients at the skips' steps, NaN parameters at
 * poison_step, on rank nan_rank. */
static void inject(void *ctx, long step, float *params, float *grads, size_t n)
{
    struct result *res = ctx;
    const struct run_arg *ra = res->ra;
    if (res->rank != ra->nan_rank)
        return;
    float *a = step == ra->poison_step ? params
               : step <= 32 && (ra->skips >> (step - 1) & 1u) ? grads
                                                             : NULL;
    for (size_t i = 0; a && i < n; i++)
        a[i] = NAN;
}

/* Compares every tensor of the trained stage with the reference's tensor of the same name. */
static void on_end(void *ctx, struct gpt_stage *s, long steps)
{
    struct result *res = ctx;
    const struct gpt_tensor *a, *b;
    int na = gpt_stage_tensors(s, &a), nb = gpt_stage_tensors(res->ref, &b);
    const float *pa = gpt_stage_params(s), *pb = gpt_stage_params(res->ref);
    double maxd = 0;
    for (int i = 0; i < na; i++) {
        int j = 0;
        while (j < nb && strcmp(a[i].name, b[j].name) != 0)
            j++;
        if (j == nb || a[i].size != b[j].size) {
            fprintf(stderr, "tensor %s missing in the reference\n", a[i].name);
            res->bad = 1;
            return;
        }
        for (size_t k = 0; k < a[i].size; k++) {
            double d = fabs((double)pa[a[i].offset + k] - (double)pb[b[j].offset + k]);
            if (d > maxd)
                maxd = d;
        }
    }
    if (maxd > 1e-5) {
        fprintf(stderr, "final parameters differ by %g after %ld steps\n", maxd, steps);
        res->bad = 1;
    }
}

static int worker(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    struct run_arg *ra = arg;
    herr e;
    struct result res = {.bad = 0, .profiled_step = -1, .ra = ra, .rank = rank};
    omp_set_num_threads(1); /* several processes share a small machine */
    float ref_losses[STEPS];
    struct plan_doc rt;
    if (trainer_test_rank_setup(MG, STEPS, 42, ra->bf16, ra->skips, ra->P, ra->D, eps, ref_losses, &res.ref, &rt))
        return 1;
    (void)n;
    struct trainer_config c;
    config(&c, MG / ra->D, ra->steps);
    c.schedule = ra->sched;
    c.listener = l;
    c.checkpoint_dir = ra->ckpt;
    c.checkpoint_every = 5;
    c.param_wire = ra->bf16 ? DTYPE_BF16 : DTYPE_FP32;
    c.emulate_device = ra->emulated;
    c.profile_step = ra->profile;
    if (ra->bucket)
        c.bucket_floats = ra->bucket;
    int die[2] = {ra->die_rank == rank ? 0 : -1, 3 * (MG / ra->D) + 1};
    /* evaluations after steps 8, 16 and 20, on EVAL_G micro-batches in all (micro-batch k of
     * replica r is window group k * D + r: the same groups whatever D; 3 of them: replicas take
     * 2 and 1, or 1, 1, 1 and none) */
    c.eval_every = EVAL_EVERY;
    c.eval_batches = EVAL_G;
    struct trainer_data data = {die, batch, NULL, trainer_test_batch};
    if (ra->max_nonfinite)
        c.max_nonfinite = ra->max_nonfinite < 0 ? 0 : ra->max_nonfinite;
    struct trainer_hooks hooks = {.ctx = &res, .on_step = on_step,
                                  .on_end = ra->steps == STEPS ? on_end : NULL,
                                  .grads_final = ra->skips || ra->poison_step ? inject : NULL};
    int rc = trainer_run(&c, &rt, rank, &data, &hooks, &e);
    double ref_eval = 0; /* the reference's final stage's mean loss on the evaluation's batches */
    for (int k = 0; k < EVAL_G; k++) {
        int tok[B * T], tgt[B * T];
        float lk = 0;
        herr be;
        trainer_test_batch(NULL, (uint64_t)k, 0, 1, tok, tgt, &be);
        gpt_stage_forward(res.ref, 0, tok, NULL, tgt, NULL, &lk);
        ref_eval += lk / EVAL_G;
    }
    plan_doc_free(&rt);
    gpt_stage_free(res.ref);
    if (ra->die_rank >= 0) {
        if (rc == 0) {
            fprintf(stderr, "rank %d finished although rank %d died\n", rank, ra->die_rank);
            return 1;
        }
        if (!strstr(e.msg, "lost its connection") && !strstr(e.msg, "timed out")) {
            fprintf(stderr, "rank %d: unclear error: %s\n", rank, e.msg);
            return 1;
        }
        return 0;
    }
    if (ra->want_err) { /* every rank fails alike, after the steps before the failing one */
        if (rc == 0 || !strstr(e.msg, ra->want_err) || e.kind != HERR_CONFIG ||
            res.nsteps != ra->want_fail_step - 1) {
            fprintf(stderr, "rank %d: %s after %ld steps (want an error holding \"%s\" of kind "
                    "configuration after %ld): kind %d: %s\n", rank, rc ? "failed" : "finished",
                    res.nsteps, ra->want_err, ra->want_fail_step - 1, e.kind, rc ? e.msg : "");
            return 1;
        }
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
        return 1;
    }
    uint32_t want_skips = ra->skips & (ra->steps >= 32 ? ~0u : (1u << ra->steps) - 1);
    if (res.skipped != want_skips) {
        fprintf(stderr, "rank %d: steps skipped 0x%x, want 0x%x\n", rank, res.skipped,
                want_skips);
        res.bad = 1;
    }
    for (long s = ra->first_step; s < ra->steps; s++) {
        double d = fabs((double)res.losses[s] - ref_losses[s]) / fabs((double)ref_losses[s]);
        if (d > 1e-5) {
            fprintf(stderr, "rank %d step %ld: loss %.9g vs reference %.9g (rel %.3g)\n", rank,
                    s + 1, res.losses[s], ref_losses[s], d);
            res.bad = 1;
        }
    }
    if (ra->D > 1 && res.overlapped == 0) {
        fprintf(stderr, "rank %d: no gradient bucket (of %d) was reduce-scattered during backward\n",
                rank, res.buckets);
        res.bad = 1;
    }
    /* every step of the emulated device's runs went through the staging (every rank exchanges
     * with a neighbour or replica each step); host memory never does */
    long want_staged = ra->emulated ? ra->steps - ra->first_step : 0;
    if (res.staged_steps != want_staged) {
        fprintf(stderr, "rank %d: %ld steps staged bytes, want %ld\n", rank, res.staged_steps,
                want_staged);
        res.bad = 1;
    }
    /* the profiled step: the engine's time by part, each part that ran counted, inside the
     * total (bf16 parameters: the masters rounded and the gathered parameters widened) */
    const struct engine_profile *q = &res.profile;
    double parts = 0;
    for (int i = 0; i < ENGINE_PARTS; i++)
        parts += q->ms[i];
    if (res.profiled_step != (ra->profile ? ra->profile : -1) ||
        (ra->profile && !(q->total_ms > 0 && q->ms[ENGINE_PART_COMPUTE] > 0 &&
                          q->ms[ENGINE_PART_NORM] > 0 && q->ms[ENGINE_PART_ADAMW] > 0 &&
                          (!ra->bf16 || q->ms[ENGINE_PART_MASTERS] > 0) &&
                          parts <= q->total_ms * 1.001 + 1e-3))) {
        fprintf(stderr, "rank %d: profiled step %ld (want %ld): total %g ms, compute %g, norm %g, "
                "adamw %g, masters %g, parts %g\n", rank, res.profiled_step, ra->profile,
                q->total_ms, q->ms[ENGINE_PART_COMPUTE], q->ms[ENGINE_PART_NORM],
                q->ms[ENGINE_PART_ADAMW], q->ms[ENGINE_PART_MASTERS], parts);
        res.bad = 1;
    }
    /* the profiled step's calls: a forward and a backward per micro-batch, one clear, one norm;
     * AdamW is one pass over the stage's shards, whatever the buckets: one call for up to
     * ENGINE_ADAMW_SPANS of them (the last stage's tied embedding apart), not one per bucket; with
     * one replica and fp32 parameters nothing marks the parameters changed (the engine's AdamW
     * wrote them). The GPU's optimizer time rests on that (docs/gpu.md). */
    unsigned long long k[ENGINE_PARTS];
    for (int i = 0; i < ENGINE_PARTS; i++)
        k[i] = q->calls[i];
    unsigned long long passes = (unsigned long long)(res.buckets + ENGINE_ADAMW_SPANS - 1) /
                                ENGINE_ADAMW_SPANS;
    int one_pass = res.buckets > 2 && k[ENGINE_PART_ADAMW] >= 1 &&
                   k[ENGINE_PART_ADAMW] <= passes + 1 &&
                   (ra->D > 1 || ra->bf16 || k[ENGINE_PART_BF16_COPY] == 0);
    if (getenv("TRAINER_VERBOSE") && ra->profile)
        fprintf(stderr, "rank %d: %d buckets, calls: compute %llu, zeroing %llu, norm %llu, adamw "
                "%llu, bf16 copy %llu\n", rank, res.buckets, k[ENGINE_PART_COMPUTE],
                k[ENGINE_PART_ZEROING], k[ENGINE_PART_NORM], k[ENGINE_PART_ADAMW],
                k[ENGINE_PART_BF16_COPY]);
    if (ra->profile && (k[ENGINE_PART_COMPUTE] != 2ull * (unsigned)(MG / ra->D) ||
                        k[ENGINE_PART_ZEROING] != 1 || k[ENGINE_PART_NORM] != 1 || !one_pass)) {
        fprintf(stderr, "rank %d: profiled step's calls: compute %llu (want %d), zeroing %llu, "
                "norm %llu, adamw %llu, bf16 copy %llu (%d buckets)\n", rank,
                k[ENGINE_PART_COMPUTE], 2 * (MG / ra->D), k[ENGINE_PART_ZEROING],
                k[ENGINE_PART_NORM], k[ENGINE_PART_ADAMW], k[ENGINE_PART_BF16_COPY], res.buckets);
        res.bad = 1;
    }
    /* every rank has the evaluation's loss: after the last step the reference's, its final
     * stage's mean loss on the same micro-batches (fp32 parameters: bf16 ones compute with
     * rounded parameters, the reference's final stage holds the masters) */
    int evals = (int)(ra->steps / EVAL_EVERY - ra->first_step / EVAL_EVERY) +
                (ra->steps % EVAL_EVERY != 0); /* and after the run's last step */
    if (res.evals != evals || (evals > 0 && res.eval_step != ra->steps && ra->steps == STEPS)) {
        fprintf(stderr, "rank %d: %d evaluations (want %d), the last after step %ld\n", rank,
                res.evals, evals, res.eval_step);
        res.bad = 1;
    }
    if (ra->steps == STEPS && !ra->bf16 && ra->die_rank < 0) {
        double d = fabs((double)res.eval_loss - ref_eval) / ref_eval;
        if (!(d <= 1e-5)) {
            fprintf(stderr, "rank %d: evaluation loss %.9g after step %ld, the reference's %.9g\n",
                    rank, res.eval_loss, res.eval_step, ref_eval);
            res.bad = 1;
        }
    }
    if (res.nsteps != ra->steps) {
        fprintf(stderr, "rank %d: %ld steps reported, want %ld\n", rank, res.nsteps, ra->steps);
        res.bad = 1;
    }
    return res.bad;
}

/* The reference itself learns (run in a child: OpenMP must not start in the parent, whose
 * thread pool would not survive fork). */
static int reference_learns(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps,
                            void *arg)
{
    (void)rank, (void)n, (void)l, (void)eps, (void)arg;
    herr e;
    omp_set_num_threads(1);
    float ref_losses[STEPS], bf_losses[STEPS];
    struct gpt_stage *ref, *bf;
    if (trainer_test_reference(MG, STEPS, 42, 0, 0, ref_losses, &ref, &e) != 0 ||
        trainer_test_reference(MG, STEPS, 42, 1, 0, bf_losses, &bf, &e) != 0) {
        fprintf(stderr, "reference: %s\n", e.msg);
        return 1;
    }
    /* bf16 parameters change the trained parameters by far more than the layouts' 1e-5
     * tolerance (on_end), so a layout that ignored them would not match the bf16 reference */
    size_t np = gpt_stage_num_params(ref);
    const float *pr = gpt_stage_params(ref), *pbf = gpt_stage_params(bf);
    double most = 0;
    for (size_t i = 0; i < np; i++) {
        double d = fabs((double)pr[i] - (double)pbf[i]);
        most = d > most ? d : most;
    }
    gpt_stage_free(ref);
    gpt_stage_free(bf);
    if (!(ref_losses[STEPS - 1] < ref_losses[0] - 0.1f) || !(bf_losses[STEPS - 1] < bf_losses[0] - 0.1f)) {
        fprintf(stderr, "loss %g -> %g (bf16 parameters: %g -> %g)\n", ref_losses[0],
                ref_losses[STEPS - 1], bf_losses[0], bf_losses[STEPS - 1]);
        return 1;
    }
    if (!(most > 1e-4)) {
        fprintf(stderr, "bf16 parameters change the trained parameters by at most %g\n", most);
        return 1;
    }
    return 0;
}

/* Layout a (pipeline 2 x data 2) runs 7 steps with checkpoints (at 5 and 7) in a fresh
 * directory, then resumes to STEPS: its losses and final parameters must match the reference. */
static void check_resume(const char *what, struct run_arg a)
{
    char dir[] = "/tmp/holmes-trainer-XXXXXX", name[256];
    if (!mkdtemp(dir)) {
        TEST_FAIL(what, "mkdtemp");
        return;
    }
    a.ckpt = dir;
    a.steps = 7;
    a.first_step = 0;
    snprintf(name, sizeof name, "%sfirst 7 steps with checkpoints", what);
    CHECK_INT(name, run_group(4, worker, &a, -1, 120), 0);
    a.steps = STEPS;
    a.first_step = 7;
    snprintf(name, sizeof name, "%sthe resumed run matches the uninterrupted reference", what);
    CHECK_INT(name, run_group(4, worker, &a, -1, 120), 0);
    char latest[256];
    snprintf(latest, sizeof latest, "%s/latest-step", dir);
    snprintf(name, sizeof name, "%sthe latest checkpoint step recorded", what);
    CHECK_INT(name, test_read_long(latest, -1), STEPS);
    test_remove_tree(dir);
}

/* A checkpoint set that holds a NaN (written before the save-time check, or by another program)
 * does not verify: pipeline 2 x data 2 runs 7 steps (checkpoints at 5 and 7), the last stage's
 * file of step 7 is rewritten with one parameter NaN (its checksum right), and the run resumes
 * from step 5 and matches the reference. */
static void check_resume_nonfinite(void)
{
    const char *what = "a checkpoint holding a NaN is passed over for the older set: ";
    char dir[] = "/tmp/holmes-trainer-XXXXXX", name[256], path[4096];
    if (!mkdtemp(dir)) {
        TEST_FAIL(what, "mkdtemp");
        return;
    }
    struct run_arg a = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = 7, .ckpt = dir,
                        .die_rank = -1};
    snprintf(name, sizeof name, "%sfirst 7 steps with checkpoints", what);
    CHECK_INT(name, run_group(4, worker, &a, -1, 120), 0);
    herr e = {0};
    struct ckpt_meta meta;
    int rc = ckpt_path(dir, 2, 4, 7, path, sizeof path, &e) != 0 ||
             ckpt_read_meta(path, &meta, &e) != 0;
    size_t n = rc ? 0 : (size_t)meta.nparams;
    float *p = rc ? NULL : calloc(3 * n, sizeof *p);
    rc = rc || !p || ckpt_read(path, &meta, p, p + n, p + 2 * n, n, &e) != 0;
    if (!rc) {
        p[n / 2] = NAN;
        rc = ckpt_write(dir, &meta, p, p + n, p + 2 * n, 10, NULL, 0, &e);
    }
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    free(p);
    snprintf(name, sizeof name, "%sthe last stage's file rewritten with a NaN", what);
    CHECK_INT(name, rc, 0);
    a.steps = STEPS;
    a.first_step = 5;
    snprintf(name, sizeof name, "%sthe run resumed from step 5 matches the reference", what);
    CHECK_INT(name, run_group(4, worker, &a, -1, 120), 0);
    test_remove_tree(dir);
}

/* No checkpoint holds a value that is not finite: rank 3's parameters turn NaN at step 5 (its
 * update keeps them so, the gather brings its shards to rank 2), and the checkpoint due at 5 is
 * refused on every rank before step 5 is reported; the directory keeps no file of step 5. */
static void check_save_nonfinite(void)
{
    char dir[] = "/tmp/holmes-trainer-XXXXXX", path[4096];
    if (!mkdtemp(dir)) {
        TEST_FAIL("save non-finite", "mkdtemp");
        return;
    }
    struct run_arg a = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .ckpt = dir,
                        .die_rank = -1, .nan_rank = 3, .poison_step = 5,
                        .want_err = "not finite: no checkpoint written, the previous ones kept",
                        .want_fail_step = 5};
    CHECK_INT("parameters NaN at step 5 on one rank: every rank refuses the checkpoint of step 5 "
              "(a configuration error)", run_group(4, worker, &a, -1, 120), 0);
    herr e = {0};
    int files = 0;
    for (int s = 0; s < 2; s++)
        if (ckpt_path(dir, 2 * s, 2 * s + 2, 5, path, sizeof path, &e) == 0)
            files += access(path, F_OK) == 0;
    CHECK_INT("no checkpoint file of step 5 written", files, 0);
    test_remove_tree(dir);
}

int main(void)
{
    /* four processes on a shared 2-core machine: one OpenMP thread each */
    setenv("OMP_NUM_THREADS", "1", 1);
    CHECK_INT("single-process reference loss decreases, with fp32 and with bf16 parameters, which "
              "differ", run_group(1, reference_learns, NULL, -1, 60), 0);
    struct {
        int P, D;
        enum schedule s;
    } layouts[] = {{2, 2, SCHED_1F1B}, {4, 1, SCHED_1F1B}, {1, 4, SCHED_1F1B}, {2, 2, SCHED_GPIPE}};
    const char *only = getenv("TRAINER_ONLY"); /* debugging: one layout */
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        if (only && atoi(only) != (int)i)
            continue;
        struct run_arg ra = {.P = layouts[i].P, .D = layouts[i].D, .sched = layouts[i].s, .steps = STEPS, .die_rank = -1, .profile = 5};
        char name[128];
        snprintf(name, sizeof name, "pipeline %d x data %d (%s): 20 step losses and final params "
                 "match one process; step 5 profiled by part", ra.P, ra.D,
                 schedule_name(ra.sched));
        CHECK_INT(name, run_group(ra.P * ra.D, worker, &ra, -1, 120), 0);
    }
    /* buckets of 200 floats: more shards a stage than one AdamW call takes (ENGINE_ADAMW_SPANS),
     * the tied embedding's too, so the optimizer's calls are cut and their gathers follow each */
    struct run_arg small = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1, .profile = 5, .bucket = 200};
    CHECK_INT("pipeline 2 x data 2, 200-float buckets: losses and final params match one process; "
              "AdamW in calls of up to 48 shards", run_group(4, worker, &small, -1, 120), 0);
    /* resume: run 7 steps (checkpoint at 5 and 7), then the rest; must match the reference */
    check_resume("", (struct run_arg){.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = 0, .die_rank = -1});
    /* bf16 parameters (fp32 masters): the layout with every exchange (data-parallel shards, the
     * tied embedding between stages) against the bf16 reference, and a resume, whose checkpoint
     * must hold the masters (rounded parameters would not continue the same run) */
    struct run_arg h = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1, .bf16 = 1, .profile = 3};
    CHECK_INT("pipeline 2 x data 2, bf16 parameters: losses and final fp32 masters match one "
              "process; step 3 profiled by part", run_group(4, worker, &h, -1, 120), 0);
    check_resume("bf16 parameters: ",
                 (struct run_arg){.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = 0, .die_rank = -1, .bf16 = 1});
    /* the engine's memory as a device's: every exchange staged through host buffers, as on a
     * GPU, with the same results (fp32 and bf16 parameters, and a resume) */
    struct run_arg em = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1, .emulated = 1};
    CHECK_INT("pipeline 2 x data 2 on the emulated device: losses and final params match one "
              "process", run_group(4, worker, &em, -1, 120), 0);
    check_resume("emulated device, bf16 parameters: ",
                 (struct run_arg){.P = 2, .D = 2, .sched = SCHED_GPIPE, .steps = 0, .die_rank = -1, .bf16 = 1, .emulated = 1});
    /* steps whose gradient norm is not finite (NaN gradients on one rank: every rank's norm is
     * NaN) are skipped on every rank, the tied embedding's exchange too: the same losses and
     * final parameters as the reference that makes no update at those steps */
    struct run_arg nan = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1,
                          .skips = 1u << 2 | 1u << 10, .nan_rank = 3};
    CHECK_INT("pipeline 2 x data 2, NaN gradients on rank 3 at steps 3 and 11: every rank skips "
              "them, losses and final params match the reference skipping them",
              run_group(4, worker, &nan, -1, 120), 0);
    struct run_arg nan3 = {.P = 4, .D = 1, .sched = SCHED_GPIPE, .steps = STEPS, .die_rank = -1,
                           .skips = 7u << 2, .nan_rank = 0};
    CHECK_INT("pipeline 4, NaN gradients on rank 0 at steps 3-5 (3 in a row, the most skipped): "
              "skipped, then training goes on as the reference's",
              run_group(4, worker, &nan3, -1, 120), 0);
    struct run_arg div = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1,
                          .skips = 7u << 2, .nan_rank = 1, .max_nonfinite = 2,
                          .want_err = "training diverged: step 5", .want_fail_step = 5};
    CHECK_INT("max_nonfinite 2, NaN gradients at steps 3-5: every rank fails at step 5 with a "
              "configuration error", run_group(4, worker, &div, -1, 120), 0);
    struct run_arg div0 = {.P = 1, .D = 4, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = -1,
                           .skips = 1u << 8, .nan_rank = 2, .max_nonfinite = -1,
                           .want_err = "1 step in a row", .want_fail_step = 9};
    CHECK_INT("max_nonfinite 0: the first non-finite step (9) fails every rank",
              run_group(4, worker, &div0, -1, 120), 0);
    check_save_nonfinite();
    check_resume_nonfinite();
    struct run_arg d = {.P = 2, .D = 2, .sched = SCHED_1F1B, .steps = STEPS, .die_rank = 1};
    CHECK_INT("a process dying mid-step fails every other with a clear error",
              run_group(4, worker, &d, -1, 60), 0);
    TEST_MAIN_END();
}
