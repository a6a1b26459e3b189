/* Checkpoint sets across plans (ckpt_layout.h): the layout computed from the shape is the
 * engine's; a set written with one pipeline split reads under another bit for bit (parameters
 * and both AdamW moments, every tensor by name), layers read from several files; a corrupt or
 * missing file is named; pruning removes the earlier plan's files once superseded. */
#include <stdlib.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_layout.h"
#include "fs_testutil.h"
#include "test.h"

static char dir[64];
static struct gpt_config cfg = {4, 16, 2, 61, 0, 8};

/* The value of element i of tensor `name` in part p (0 params, 1 m, 2 v): a pure function of
 * them, so both copies of wte agree and any layout can be checked against it. */
static float value(const char *name, size_t i, int p)
{
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    h = (h ^ (uint32_t)i) * 16777619u;
    h = (h ^ (uint32_t)p) * 16777619u;
    return (float)(h % 100003) * 1e-5f - 0.5f + (float)p;
}

static int fill_stage(int first, int last, float *buf[3], size_t *n)
{
    struct ckpt_tensor *t;
    int nt;
    herr e;
    if (ckpt_stage_layout(&cfg, first, last, &t, &nt, n, &e) != 0)
        return -1;
    for (int p = 0; p < 3; p++) {
        buf[p] = malloc(*n * sizeof(float));
        for (int k = 0; k < nt; k++)
            for (size_t i = 0; i < t[k].size; i++)
                buf[p][t[k].offset + i] = value(t[k].name, i, p);
    }
    free(t);
    return 0;
}

static int write_set(const int *bounds, int nstages, int64_t step, int keep)
{
    for (int s = 0; s < nstages; s++) {
        float *b[3];
        size_t n;
        herr e;
        if (fill_stage(bounds[s], bounds[s + 1], b, &n) != 0)
            return -1;
        struct ckpt_meta m = {.c = cfg, .first = bounds[s], .last = bounds[s + 1], .step = step,
                              .data_pos = (uint64_t)step * 3, .nparams = n, .has_moments = 1};
        int rc = ckpt_write(dir, &m, b[0], b[1], b[2], keep, NULL, 0, &e);
        for (int p = 0; p < 3; p++)
            free(b[p]);
        if (rc != 0) {
            printf("write: %s\n", e.msg);
            return -1;
        }
    }
    return 0;
}

/* Reads stage [first, last) at step and compares every element with value(): 1 when exact. */
static int stage_exact(int64_t step, int first, int last, char *why, size_t cap)
{
    struct ckpt_tensor *t;
    int nt;
    size_t n;
    herr e = {0};
    if (ckpt_stage_layout(&cfg, first, last, &t, &nt, &n, &e) != 0)
        return snprintf(why, cap, "%s", e.msg), 0;
    float *b[3];
    for (int p = 0; p < 3; p++)
        b[p] = calloc(n, sizeof(float));
    struct ckpt_meta meta;
    int ok = ckpt_layout_read(dir, step, &cfg, first, last, b[0], b[1], b[2], n, &meta, &e) == 0;
    if (!ok)
        snprintf(why, cap, "%s", e.msg);
    for (int k = 0; ok && k < nt; k++)
        for (int p = 0; ok && p < 3; p++)
            for (size_t i = 0; ok && i < t[k].size; i++) {
                float want = value(t[k].name, i, p), got = b[p][t[k].offset + i];
                if (memcmp(&want, &got, sizeof want) != 0) {
                    snprintf(why, cap, "%s[%zu] part %d: %g, want %g", t[k].name, i, p, got, want);
                    ok = 0;
                }
            }
    if (ok && (meta.step != step || meta.first != first || meta.last != last ||
               meta.data_pos != (uint64_t)step * 3)) {
        snprintf(why, cap, "meta: step %lld [%d, %d) data %llu", (long long)meta.step, meta.first,
                 meta.last, (unsigned long long)meta.data_pos);
        ok = 0;
    }
    for (int p = 0; p < 3; p++)
        free(b[p]);
    free(t);
    return ok;
}

static void test_layout_is_the_engines(void)
{
    herr e;
    int ok = 1;
    const int ranges[][2] = {{0, 4}, {0, 1}, {1, 3}, {3, 4}, {2, 4}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        struct gpt_stage *s;
        struct ckpt_tensor *t;
        int nt;
        size_t n;
        if (gpt_stage_create(&s, &cfg, ranges[r][0], ranges[r][1], 1, 4, 1, &e) != 0 ||
            ckpt_stage_layout(&cfg, ranges[r][0], ranges[r][1], &t, &nt, &n, &e) != 0) {
            TEST_FAIL("layout.create", "%s", e.msg);
            return;
        }
        const struct gpt_tensor *g;
        int ng = gpt_stage_tensors(s, &g);
        ok &= ng == nt && n == gpt_stage_full_params(s);
        for (int k = 0; ok && k < nt; k++)
            ok &= !strcmp(g[k].name, t[k].name) && g[k].full_offset == t[k].offset &&
                  g[k].rows * g[k].cols == t[k].size && g[k].rows == t[k].rows;
        free(t);
        gpt_stage_free(s);
    }
    CHECK("layout.matches_gpt_stage_tensors", ok);
}

static void test_across_plans(void)
{
    char why[1200] = "";
    const int two[] = {0, 2, 4};        /* pipeline 2 */
    CHECK("write.pipeline2", write_set(two, 2, 10, 3) == 0);
    int64_t *steps;
    int ns;
    herr e;
    CHECK("steps.one", ckpt_set_steps(dir, &steps, &ns, &e) == 0 && ns == 1 && steps[0] == 10);
    free(steps);
    /* the same stages, then other boundaries: layers from two files, and the whole model */
    const int want[][2] = {{0, 2}, {2, 4}, {0, 1}, {1, 3}, {3, 4}, {0, 4}, {0, 3}, {1, 4}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "read.p2_as[%d,%d)", want[k][0], want[k][1]);
        if (stage_exact(10, want[k][0], want[k][1], why, sizeof why))
            TEST_PASS(name);
        else
            TEST_FAIL(name, "%s", why);
    }
    /* params only: moments not asked for */
    struct ckpt_tensor *t;
    int nt;
    size_t n;
    ckpt_stage_layout(&cfg, 1, 3, &t, &nt, &n, &e);
    float *p = calloc(n, sizeof *p);
    CHECK("read.params_only", ckpt_layout_read(dir, 10, &cfg, 1, 3, p, NULL, NULL, n, NULL, &e) == 0 &&
          p[t[0].offset] == value(t[0].name, 0, 0));
    CHECK("read.wrong_count", ckpt_layout_read(dir, 10, &cfg, 1, 3, p, NULL, NULL, n - 1, NULL, &e) != 0 &&
          strstr(e.msg, "parameters"));
    struct gpt_config other = cfg;
    other.channels = 32;
    CHECK("read.other_shape_named", ckpt_layout_read(dir, 10, &other, 0, 4, p, NULL, NULL, n, NULL, &e) != 0);
    free(p);
    free(t);

    /* a set written by pipeline 3 at a later step, and a pipeline 1 after it */
    const int three[] = {0, 1, 3, 4}, one[] = {0, 4};
    CHECK("write.pipeline3", write_set(three, 3, 20, 3) == 0);
    CHECK("read.p3_as[0,2)", stage_exact(20, 0, 2, why, sizeof why));
    CHECK("read.p3_as[2,4)", stage_exact(20, 2, 4, why, sizeof why));
    CHECK("read.older_set_still_there", stage_exact(10, 1, 3, why, sizeof why));
    CHECK("write.pipeline1", write_set(one, 1, 30, 3) == 0);
    CHECK("steps.three", ckpt_set_steps(dir, &steps, &ns, &e) == 0 && ns == 3 && steps[0] == 10 &&
          steps[2] == 30);
    free(steps);

    /* a corrupt file: the stages that read it fail naming it, the others read */
    char path[4096];
    ckpt_path(dir, 1, 3, 20, path, sizeof path, &e);
    FILE *f = fopen(path, "r+b");
    fseek(f, 300, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 300, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
    ckpt_stage_layout(&cfg, 2, 4, &t, &nt, &n, &e);
    p = calloc(n, sizeof *p);
    CHECK("corrupt.named", ckpt_layout_read(dir, 20, &cfg, 2, 4, p, NULL, NULL, n, NULL, &e) != 0 &&
          strstr(e.msg, "stage-1-3-step-000000020") && strstr(e.msg, "CRC"));
    free(p);
    free(t);
    CHECK("corrupt.others_read", stage_exact(20, 3, 4, why, sizeof why));
    /* a missing file: the layer no file starts at */
    ckpt_path(dir, 3, 4, 20, path, sizeof path, &e);
    unlink(path);
    struct ckpt_file *cover;
    int nc;
    CHECK("missing.layer_named", ckpt_set_cover(dir, 20, 4, &cover, &nc, &e) != 0 &&
          strstr(e.msg, "none starts at layer 3"));
    CHECK("missing.step_named", ckpt_set_cover(dir, 15, 4, &cover, &nc, &e) != 0 &&
          strstr(e.msg, "no stage file of step 15"));
    /* a model of another depth asked for: the files' header says what they hold (until
     * 2026-11-29: "none starts at layer 3", as if a file were missing) */
    CHECK("depth.named", ckpt_set_cover(dir, 20, 6, &cover, &nc, &e) != 0 &&
          strstr(e.msg, "the set of step 20 is a model of 4 layers (its files' header), not 6"));
}

/* Pruning across plans: a plan's newer sets supersede the old plan's files of the same layers;
 * a step written again replaces the old plan's files of that step. */
static void test_prune(void)
{
    const int two[] = {0, 2, 4}, three[] = {0, 1, 3, 4};
    herr e;
    char path[4096];
    write_set(two, 2, 40, 2);
    write_set(two, 2, 50, 2);
    write_set(three, 3, 50, 2); /* the same step under the new plan: the old plan's go */
    ckpt_path(dir, 0, 2, 50, path, sizeof path, &e);
    CHECK("prune.same_step_superseded", access(path, F_OK) != 0);
    ckpt_path(dir, 0, 2, 40, path, sizeof path, &e);
    CHECK("prune.older_kept_until_keep_new_sets", access(path, F_OK) == 0);
    write_set(three, 3, 60, 2);
    CHECK("prune.older_removed_after_keep_new_sets", access(path, F_OK) != 0);
    ckpt_path(dir, 0, 1, 50, path, sizeof path, &e);
    CHECK("prune.new_plan_keeps_its_own", access(path, F_OK) == 0);
    char why[1200] = "";
    CHECK("prune.newest_reads", stage_exact(60, 0, 4, why, sizeof why));
}

int main(void)
{
    herr e;
    gpt_config_check(&cfg, &e);
    if (test_in_tmpdir(dir, sizeof dir, "cl",
                       (void (*const[])(void)){test_layout_is_the_engines, test_across_plans,
                                               test_prune, NULL}))
        return 1;
    TEST_MAIN_END();
}
