/* A job re-planned onto another layout resumes from the old plan's checkpoints (ckpt_layout.h):
 * pipeline 2 x data 2 trains 6 steps and checkpoints; pipeline 3 x data 1 (other stage
 * boundaries: a stage's layers come from both old stage files) and pipeline 1 x data 3 (another
 * data degree: the ZeRO-1 shards re-cut from the whole moments) resume from that set. Loaded,
 * every parameter equals the old plan's file bit for bit; trained on, with the global batch kept
 * (6 micro-batches: 3 per replica, then 6 and 2) so the data resumes at the same sample, every
 * step's loss and the final parameters equal, within 1e-5, one process trained from the start
 * with that global batch (the run the old plan continued: test_trainer shows each layout equals
 * it). */
#include "test.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm_testutil.h"
#include "gpt.h"
#include "optimizer.h"
#include "rank_table.h"
#include "trainer.h"
#include "trainer_testutil.h"

#define STEPS 12
#define SAVED 6

#define MODEL TRAINER_TEST_MODEL
enum { B = TRAINER_TEST_B, T = TRAINER_TEST_T, MG = 6 }; /* MG: micro-batches in the global batch */

static void config(struct trainer_config *c, int M, long steps)
{
    trainer_test_config(c, M, steps, STEPS, 7);
}

enum check { CHECK_NONE, CHECK_LOADED, CHECK_TRAINED };

struct run_arg {
    int P, D;
    long steps;
    const char *ckpt;
    const char *old;    /* CHECK_LOADED: the old plan's checkpoint directory */
    enum check check;
};

struct result {
    float losses[STEPS];
    long first_step, nsteps;   /* the first and last step reported */
    struct gpt_stage *ref;
    int bad;
    const struct run_arg *ra;
};

static int on_step(void *ctx, const struct trainer_report *r)
{
    struct result *res = ctx;
    if (r->step >= 1 && r->step <= STEPS)
        res->losses[r->step - 1] = r->loss;
    if (!res->first_step)
        res->first_step = r->step;
    res->nsteps = r->step;
    return 0;
}

/* The old plan's two stage files at SAVED, read with the plain per-file reader (not the layout
 * module), with their tensor tables. */
struct old_set {
    struct gpt_stage *s[2];
    float *p[2];
};

static int old_load(struct old_set *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    for (int k = 0; k < 2; k++) {
        herr e;
        char path[4096];
        struct ckpt_meta meta;
        if (gpt_stage_create(&o->s[k], &MODEL, 2 * k, 2 * k + 2, 1, 1, 1, &e) != 0)
            return -1;
        size_t n = gpt_stage_num_params(o->s[k]);
        if (!(o->p[k] = malloc(n * sizeof(float))))
            return -1;
        ckpt_path(dir, 2 * k, 2 * k + 2, SAVED, path, sizeof path, &e);
        if (ckpt_read(path, &meta, o->p[k], NULL, NULL, n, &e) != 0) {
            fprintf(stderr, "%s\n", e.msg);
            return -1;
        }
    }
    return 0;
}

static void old_free(struct old_set *o)
{
    for (int k = 0; k < 2; k++) {
        gpt_stage_free(o->s[k]);
        free(o->p[k]);
    }
}

/* Tensor `name` of the old set (head: the last stage's copy of wte) and its size. */
static const float *old_tensor(const struct old_set *o, const char *name, int head, size_t *size)
{
    int layer = -1;
    int k = sscanf(name, "h%d.", &layer) == 1 ? layer >= 2 : head || !strncmp(name, "ln_f", 4);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(o->s[k], &t);
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name)) {
            *size = t[i].size;
            return o->p[k] + t[i].offset;
        }
    return NULL;
}

static void on_end(void *ctx, struct gpt_stage *s, long steps)
{
    struct result *res = ctx;
    const struct gpt_tensor *a;
    int na = gpt_stage_tensors(s, &a);
    const float *pa = gpt_stage_params(s);
    if (res->ra->check == CHECK_LOADED) { /* bit for bit what the old plan wrote */
        struct old_set o;
        if (old_load(&o, res->ra->old) != 0)
            res->bad = 1;
        for (int i = 0; i < na && !res->bad; i++) {
            size_t size = 0;
            int head = !strcmp(a[i].name, "wte") && i > 0;
            const float *want = old_tensor(&o, a[i].name, head, &size);
            if (!want || size != a[i].size || memcmp(want, pa + a[i].offset, size * sizeof *want)) {
                fprintf(stderr, "loaded %s differs from the old plan's checkpoint\n", a[i].name);
                res->bad = 1;
            }
        }
        old_free(&o);
        return;
    }
    if (res->ra->check != CHECK_TRAINED)
        return;
    const struct gpt_tensor *b;
    int nb = gpt_stage_tensors(res->ref, &b);
    const float *pb = gpt_stage_params(res->ref);
    double maxd = 0;
    for (int i = 0; i < na; i++) {
        int j = 0;
        while (j < nb && strcmp(a[i].name, b[j].name) != 0)
            j++;
        for (size_t k = 0; j < nb && k < a[i].size; k++) {
            double d = fabs((double)pa[a[i].offset + k] - (double)pb[b[j].offset + k]);
            maxd = d > maxd ? d : maxd;
        }
    }
    if (maxd > 1e-5) {
        fprintf(stderr, "final parameters differ from one process by %g after %ld steps\n", maxd,
                steps);
        res->bad = 1;
    }
}

static int worker(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    struct run_arg *ra = arg;
    herr e;
    struct result res = {.ra = ra};
    (void)n;
    omp_set_num_threads(1);
    float ref_losses[STEPS];
    struct plan_doc rt;
    if (trainer_test_rank_setup(MG, STEPS, 7, 0, 0, ra->P, ra->D, eps, ref_losses, &res.ref, &rt))
        return 1;
    struct trainer_config c;
    config(&c, MG / ra->D, ra->steps);
    c.listener = l;
    c.checkpoint_dir = ra->ckpt;
    c.checkpoint_every = 3;
    struct trainer_data data = {.ctx = NULL, .batch = trainer_test_batch};
    struct trainer_hooks hooks = {.ctx = &res, .on_step = on_step, .on_end = on_end};
    int rc = trainer_run(&c, &rt, rank, &data, &hooks, &e);
    plan_doc_free(&rt);
    gpt_stage_free(res.ref);
    if (rc != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
        return 1;
    }
    long first = ra->check == CHECK_TRAINED ? SAVED : 0;
    for (long s = first; s < ra->steps && ra->check != CHECK_LOADED; s++) {
        double d = fabs((double)res.losses[s] - ref_losses[s]) / fabs((double)ref_losses[s]);
        if (d > 1e-5) {
            fprintf(stderr, "rank %d (pipeline %d x data %d) step %ld: loss %.9g vs one process "
                    "%.9g (rel %.3g)\n", rank, ra->P, ra->D, s + 1, res.losses[s], ref_losses[s], d);
            res.bad = 1;
        }
    }
    if (ra->check == CHECK_TRAINED && (res.first_step != SAVED + 1 || res.nsteps != ra->steps)) {
        fprintf(stderr, "rank %d: steps %ld..%ld, want %d..%ld\n", rank, res.first_step,
                res.nsteps, SAVED + 1, ra->steps);
        res.bad = 1;
    }
    return res.bad;
}

static int copy_dir(const char *from, const char *to)
{
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    return system(cmd);
}

int main(void)
{
    setenv("OMP_NUM_THREADS", "1", 1);
    char dir[] = "/tmp/holmes-replan-XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("setup", "mkdtemp");
        TEST_MAIN_END();
    }
    char old[200];
    snprintf(old, sizeof old, "%s/p2d2", dir);
    struct run_arg first = {2, 2, SAVED, old, NULL, CHECK_NONE};
    CHECK_INT("pipeline 2 x data 2 (3 micro-batches a replica): 6 steps, checkpointed",
              run_group(4, worker, &first, -1, 120), 0);
    struct {
        int P, D;
        const char *what;
    } to[] = {{3, 1, "pipeline 3 x data 1 (other stage boundaries, 6 micro-batches)"},
              {1, 3, "pipeline 1 x data 3 (ZeRO-1 shards re-cut, 2 micro-batches a replica)"}};
    for (size_t k = 0; k < sizeof to / sizeof to[0]; k++) {
        char d[700], name[300];
        snprintf(d, sizeof d, "%s/as-p%dd%d", dir, to[k].P, to[k].D);
        if (copy_dir(old, d) != 0) {
            TEST_FAIL("copy", "%s", d);
            continue;
        }
        struct run_arg loaded = {to[k].P, to[k].D, SAVED, d, old, CHECK_LOADED};
        snprintf(name, sizeof name, "%s: loads every parameter bit for bit", to[k].what);
        CHECK_INT(name, run_group(to[k].P * to[k].D, worker, &loaded, -1, 120), 0);
        struct run_arg trained = {to[k].P, to[k].D, STEPS, d, NULL, CHECK_TRAINED};
        snprintf(name, sizeof name, "%s: resumes at step %d and trains to %d with every loss and "
                 "the final parameters within 1e-5 of one process", to[k].what, SAVED, STEPS);
        CHECK_INT(name, run_group(to[k].P * to[k].D, worker, &trained, -1, 120), 0);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_MAIN_END();
}
