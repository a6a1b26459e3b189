/* make test-gpu: the GPU engine against the CPU engine on tiny configs with fresh random inputs.
 *   gpu.vs_cpu.*     loss and every parameter gradient of one whole-model stage (relative error
 *                    of a tensor = max |difference| / max |reference|)
 *   gpu.adamw.*      three optimizer steps with global-norm clipping: losses and parameters
 *   gpu.two_stage.*  stages [0,1) + [1,2) with two micro-batches in flight = one stage [0,2)
 *   gpu.recompute.*  GELU recomputation in backward = stored GELU outputs
 *   gpu.slices.*     token slices (TeraPipe; 3, 9, 20 of T = 32), on one stage and on two, = the
 *                    unsliced stage's losses and gradients
 *   gpu.tensor.*     tensor parallelism (gpu_stage_create_tp), tp 2 and 4 ranks on one GPU, each a
 *                    thread summing through a shared host buffer: the layout, the loss and every
 *                    gradient (put together in the whole layout) = the CPU engine's one stage;
 *                    gpu.tensor*_sliced.* the same with token slices
 *   gpu.resume.*     a run resumed from a checkpoint (checkpoint.h, dataloader.h) repeats the
 *                    uninterrupted run's losses and parameters exactly
 *   gpu.bad_input.*  out-of-range tokens, slots, backward without forward: -1 and a message
 *   gpu.resident.*   the device-resident trainer's calls (hooks, the loss summed on the device,
 *                    the norm over ranges, AdamW on buffers apart, changed parameters, AdamW on
 *                    the stage's own parameters writing the bf16 copy in the same pass)
 *   gpu.vs_cpu.hs64  head size 64 (GPT-2's: flash attention's main case), T = max_seq = 80 (not
 *                    a multiple of its 64-row tiles), an odd batch
 *   gpu.vs_cpu.skewed  the same on text-like tokens (a token at 60 % of the positions: the
 *                    embedding gradient's split kernel)
 *   gpu.adamw.isolated  AdamW alone, the GPU's and the CPU's on identical inputs, to fp32 rounding
 *   gpu.adamw.spans  AdamW over ~100 ZeRO shards in one call = one call per shard, bit for bit;
 *                    their squares summed over ranges = the CPU's sum
 *   gpu.flash.*      flash attention (bf16, flash.cu) = the materialised attention, at T 80 and
 *                    200, and deterministic; both dQ kernels; in launches of one sequence
 *   gpu.overlap.*    the weight gradients' products on a second stream = one stream, bit for bit
 *   gpu.layernorm_held.*  LayerNorm's backward holding its rows or re-reading them
 *                    (HOLMES_GPU_LN_BWD_MAX_IT) = the same bits
 *   gpu.memory.*     gpu_stage_device_bytes = what creation takes; too big: refused, named
 *   gpu.profile.*    gpu_stage_profile_* (bench_gpu's breakdown and its products by shape,
 *                    the worker's --profile-step: the norm, zeroing, the bf16 copy, a
 *                    caller's marked work) and the counters
 * Every gpu.vs_cpu stage starts with its activations and scratch NaN (gpu_stage_debug_poison) and
 * its gradients NaN before gpu_stage_zero_grads (the first backward must write every one).
 * gpu.adamw.params and gpu.recompute.* use derived bounds (check_bounds.h, the reasoning there;
 * tests/unit/test_cuda_bounds.c reproduces on the CPU the failures the fixed ones gave).
 * Tolerance: 1e-4 in fp32 mode, 2e-2 in bf16 mode (the CPU engine is fp32).
 * Usage: test_gpu [--quick | --race] [--seed N]   (--quick: the first group only, for
 *        compute-sanitizer's memcheck; --race: smaller still, for its racecheck;
 *        HOLMES_TEST_VERBOSE=1 prints every tensor's error)
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "adamw_math.h"
#include "check_bounds.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "gpt.h"
#include "gpt_cuda.h"
#include "optimizer.h"
#include "test.h"
#include "tp_group.h"

static double TOL;
static int verbose; /* HOLMES_TEST_VERBOSE=1: every tensor's error */

static struct gpt_config tiny(void)
{
    struct gpt_config c = {2, 64, 4, 97, 0, 32}; /* V = 97 pads to 128 */
    return c;
}

static uint64_t rng_state;
static int rand_below(int n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((rng_state >> 33) % (uint64_t)n);
}
/* skewed: tokens as in text, where a few are frequent (60 % token 3, 10 % token V - 1, the rest
 * uniform): a token of more than WTE_SPLIT_ABOVE (32) positions has its embedding gradient summed
 * by the split kernel (encoder_kernels.cuh) */
static int skewed;
static void random_tokens(int *t, size_t n, int V)
{
    for (size_t i = 0; i < n; i++) {
        int r = rand_below(10);
        t[i] = skewed && r < 6 ? 3 % V : skewed && r == 6 ? V - 1 : rand_below(V);
    }
}

/* worst relative error over tensors (max |d| / max |ref| per tensor); skip_kbias leaves out the
 * key third of qkv.bias (its gradient is exactly zero, so AdamW turns round-off into +-lr) */
static double worst_tensor(const struct gpt_tensor *t, int nt, const float *got, const float *ref,
                           int skip_kbias, int C, char *which, size_t wlen)
{
    double worst = 0.0, global = 0.0;
    for (size_t i = 0; i < t[nt - 1].offset + t[nt - 1].size; i++)
        global = fabs(ref[i]) > global ? fabs(ref[i]) : global;
    for (int k = 0; k < nt; k++) {
        double md = 0.0, mr = 0.0;
        int kb = skip_kbias && strstr(t[k].name, "attn.qkv.bias") != NULL;
        for (size_t i = 0; i < t[k].size; i++) {
            if (kb && i >= (size_t)C && i < 2 * (size_t)C)
                continue;
            double r = ref[t[k].offset + i], d = fabs(got[t[k].offset + i] - r);
            md = d > md ? d : md;
            mr = fabs(r) > mr ? fabs(r) : mr;
        }
        /* a tensor whose reference is (nearly) all zero is measured against the whole buffer */
        double den = mr > 1e-6 * global ? mr : global;
        double rel = den > 0 ? md / den : md;
        if (verbose)
            printf("#   %-24s max |ref| %.3g, max |diff| %.3g, relative %.3g\n", t[k].name, mr, md, rel);
        if (rel > worst || (worst == 0.0 && k == 0)) {
            worst = rel;
            snprintf(which, wlen, "%s", t[k].name);
        }
    }
    return worst;
}

#define CHECK_TENSORS(name, t, nt, got, ref, skip, C, tol) do { char w_[64] = ""; \
        double e_ = worst_tensor(t, nt, got, ref, skip, C, w_, sizeof w_); \
        if (e_ <= (tol)) TEST_PASS(name); \
        else TEST_FAIL(name, "worst tensor %s: relative error %.3g > %.3g", w_, e_, (double)(tol)); \
    } while (0)

/* ---------------------------------------------------------------- GPU vs CPU */

/* A stage with head size 64 (GPT-2's) and a sequence that is not a multiple of flash
 * attention's 64-row tiles: T = max_seq = 80 */
static struct gpt_config wide(void)
{
    struct gpt_config c = {2, 128, 2, 97, 0, 80};
    return c;
}

#define NAMED(buf, pre, what) (snprintf(buf, sizeof buf, "%s.%s", pre, what), buf)

/* One whole-model stage against the CPU engine on shape (c, B, T), fresh random tokens: the loss,
 * every gradient and the norm; then `steps` AdamW steps with clipping (gpu.adamw.*: the losses,
 * and every parameter within its derived bound, check_bounds.h). The GPU stage starts with every
 * activation and scratch buffer NaN and its gradients NaN before gpu_stage_zero_grads, so that a
 * kernel leaving part of its output unwritten, or a first backward not writing every gradient,
 * shows. */
static void test_vs_cpu(const char *pre, struct gpt_config c, int B, int T, int steps)
{
    herr e;
    char name[96];
    struct gpt_stage *cs = NULL;
    struct gpu_stage *gs = NULL;
    if (gpt_stage_create(&cs, &c, 0, c.layers, B, T, 1, &e) < 0 ||
        gpu_stage_create(&gs, &c, 0, c.layers, B, T, 1, 0, &e) < 0) {
        TEST_FAIL(NAMED(name, pre, "create"), "%s", e.msg);
        gpt_stage_free(cs);
        return;
    }
    TEST_PASS(NAMED(name, pre, "create"));
    gpt_config_check(&c, NULL);
    printf("# %s: L%d C%d NH%d B%d T%d (max_seq %d), attention %s\n", pre, c.layers, c.channels,
           c.heads, B, T, c.max_seq, gpu_stage_attention_kind(gs));
    size_t n = gpt_stage_num_params(cs), BT = (size_t)B * T;
    CHECK_INT(NAMED(name, pre, "same_layout"), gpu_stage_num_params(gs), n);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(cs, &t);
    float *gp = malloc(n * sizeof(float)), *gg = malloc(n * sizeof(float));
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float)), *gc = malloc(n * sizeof(float));
    double *bound = calloc(n, sizeof(double)), *emax = calloc((size_t)nt, sizeof(double));
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    if (!gp || !gg || !m || !v || !gc || !bound || !emax || !tok || !tgt) {
        TEST_FAIL(NAMED(name, pre, "alloc"), "out of memory");
        goto out;
    }
    uint64_t seed = (uint64_t)rand_below(1 << 30);
    gpt_stage_init_params(cs, seed);
    for (size_t i = 0; i < n; i++)
        gg[i] = NAN;
    if (gpu_stage_init_params(gs, seed) < 0 || gpu_stage_get_params(gs, gp) < 0 ||
        gpu_stage_debug_poison(gs) < 0 || gpu_stage_set_grads(gs, gg) < 0) {
        TEST_FAIL(NAMED(name, pre, "init"), "%s", gpu_stage_error(gs));
        goto out;
    }
    CHECK(NAMED(name, pre, "same_init"), memcmp(gp, gpt_stage_params(cs), n * sizeof(float)) == 0);

    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    float lr = 1e-3f;
    double worst_loss = 0.0;
    for (int step = 0; step <= steps; step++) {
        random_tokens(tok, BT, c.vocab);
        random_tokens(tgt, BT, c.vocab);
        float lc = 0.0f, lg = 0.0f;
        gpt_stage_zero_grads(cs);
        if (gpt_stage_forward(cs, 0, tok, NULL, tgt, NULL, &lc) < 0 ||
            gpt_stage_backward(cs, 0, NULL, NULL, 1.0f) < 0) {
            TEST_FAIL(NAMED(name, pre, "cpu_step"), "%s", gpt_stage_error(cs));
            goto out;
        }
        if (gpu_stage_zero_grads(gs) < 0 || gpu_stage_forward(gs, 0, tok, NULL, tgt, NULL, &lg) < 0 ||
            gpu_stage_backward(gs, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(gs, gg) < 0) {
            TEST_FAIL(NAMED(name, pre, "gpu_step"), "%s", gpu_stage_error(gs));
            goto out;
        }
        double rl = fabs(lg - lc) / fabs(lc);
        worst_loss = rl > worst_loss ? rl : worst_loss;
        if (step == 0) {
            size_t nan = 0;
            for (size_t i = 0; i < n; i++)
                nan += !isfinite(gg[i]);
            CHECK_INT(NAMED(name, pre, "every_gradient_written"), nan, 0);
            CHECK_NEAR(NAMED(name, pre, "loss"), lg, lc, TOL);
            CHECK_TENSORS(NAMED(name, pre, "grads"), t, nt, gg, gpt_stage_grads(cs), 0, c.channels, TOL);
            double sqc = grad_sq_norm(gpt_stage_grads(cs), 0, n), sqg = 0.0;
            if (gpu_stage_grad_sq_norm(gs, 0, n, &sqg) < 0)
                TEST_FAIL(NAMED(name, pre, "grad_norm"), "%s", gpu_stage_error(gs));
            else
                CHECK_NEAR(NAMED(name, pre, "grad_norm"), sqg, sqc, TOL);
        }
        if (step == steps)
            break;
        /* clip to a norm below the current one so that clipping is exercised */
        double sqc = grad_sq_norm(gpt_stage_grads(cs), 0, n), sqg = 0.0;
        if (gpu_stage_grad_sq_norm(gs, 0, n, &sqg) < 0) {
            TEST_FAIL("gpu.adamw.norm", "%s", gpu_stage_error(gs));
            goto out;
        }
        float clip_c = grad_clip_scale(sqc, 0.5f * (float)sqrt(sqc));
        float clip_g = grad_clip_scale(sqg, 0.5f * (float)sqrt(sqc));
        memcpy(gc, gpt_stage_grads(cs), n * sizeof(float));
        adamw_update(&o, t, nt, gpt_stage_params(cs), gpt_stage_grads(cs), m, v, 0, n, lr,
                     step + 1, clip_c);
        if (gpu_stage_adamw(gs, &o, 0, n, lr, step + 1, clip_g) < 0) {
            TEST_FAIL("gpu.adamw.step", "%s", gpu_stage_error(gs));
            goto out;
        }
        /* the derived bound (check_bounds.h): each tensor's measured gradient difference, the
         * largest so far (the moments mix every step's), through AdamW's sensitivity */
        struct adamw_coef k = adamw_coef_make(lr, o.beta1, o.beta2, o.eps, step + 1);
        for (int q = 0; q < nt; q++) {
            size_t off = t[q].offset;
            double eq = adamw_grad_diff(gc + off, gg + off, t[q].size, clip_c, clip_g);
            emax[q] = eq > emax[q] ? eq : emax[q];
            adamw_drift_add(bound + off, t[q].size, gpt_stage_params(cs) + off, m + off, v + off,
                            emax[q], lr, o.eps, k.c1, k.c2);
        }
    }
    if (steps > 0) {
        if (worst_loss <= TOL)
            TEST_PASS("gpu.adamw.losses");
        else
            TEST_FAIL("gpu.adamw.losses", "worst relative loss difference %.3g > %.3g", worst_loss, TOL);
        double worst;
        size_t where;
        if (gpu_stage_get_params(gs, gp) < 0) {
            TEST_FAIL("gpu.adamw.params", "%s", gpu_stage_error(gs));
        } else {
            size_t bad = adamw_drift_violations(gpt_stage_params(cs), gp, bound, n, &worst, &where);
            const char *tn = "?";
            for (int q = 0; q < nt; q++)
                if (where >= t[q].offset && where < t[q].offset + t[q].size)
                    tn = t[q].name;
            if (bad == 0)
                TEST_PASS("gpu.adamw.params");
            else
                TEST_FAIL("gpu.adamw.params", "%zu parameters beyond their bound; worst %s[%zu]: "
                          "%.3g x its bound (%.3g)", bad, tn, where, worst, bound[where]);
        }
    }
out:
    free(gp);
    free(gg);
    free(gc);
    free(m);
    free(v);
    free(bound);
    free(emax);
    free(tok);
    free(tgt);
    gpt_stage_free(cs);
    gpu_stage_free(gs);
}

/* AdamW alone (gpu.adamw.isolated): the GPU's and the CPU's on identical parameters, gradients
 * and moments must agree to fp32 rounding (the kernel's formula is optimizer.c's, adamw_math.h;
 * what is left is the order of operations, fused multiply-adds); so must gpu_stage_adamw_ex on
 * a range of buffers held apart. */
static void test_adamw_isolated(void)
{
    struct gpt_config c = tiny();
    herr e;
    struct gpu_stage *gs = NULL;
    struct gpt_stage *cs = NULL;
    if (gpu_stage_create(&gs, &c, 0, c.layers, 1, 4, 1, 0, &e) < 0 ||
        gpt_stage_create(&cs, &c, 0, c.layers, 1, 4, 1, &e) < 0) {
        TEST_FAIL("gpu.adamw.isolated", "%s", e.msg);
        gpu_stage_free(gs);
        return;
    }
    size_t n = gpu_stage_num_params(gs);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(cs, &t);
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    float *pg = malloc(n * 4), *mg = malloc(n * 4), *vg = malloc(n * 4);
    float *dp = NULL, *dg = NULL, *dm = NULL, *dv = NULL;
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    if (!p || !g || !m || !v || !pg || !mg || !vg) {
        TEST_FAIL("gpu.adamw.isolated", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(rand_below(2000) - 1000) * 4e-5f;
        g[i] = (float)(rand_below(2000) - 1000) * (i % 5 ? 1e-5f : 1e-12f); /* some near zero */
        m[i] = (float)(rand_below(2000) - 1000) * 1e-6f;
        v[i] = (float)rand_below(1000) * 1e-10f;
    }
    if (gpu_stage_set_params(gs, p) < 0 || gpu_stage_set_grads(gs, g) < 0 ||
        gpu_stage_set_moments(gs, m, v) < 0 || gpu_stage_adamw(gs, &o, 0, n, 1e-3f, 7, 0.8f) < 0 ||
        gpu_stage_get_params(gs, pg) < 0 || gpu_stage_get_moments(gs, mg, vg) < 0) {
        TEST_FAIL("gpu.adamw.isolated", "%s", gpu_stage_error(gs));
        goto out;
    }
    /* gpu_stage_adamw_ex over [a, z) of the same inputs, held apart (before the CPU's update) */
    size_t a = n / 3 + 5, z = n - n / 4 + 3, w = z - a;
    if (cudaMalloc((void **)&dp, w * 4) != cudaSuccess || cudaMalloc((void **)&dg, w * 4) != cudaSuccess ||
        cudaMalloc((void **)&dm, w * 4) != cudaSuccess || cudaMalloc((void **)&dv, w * 4) != cudaSuccess ||
        cudaMemcpy(dp, p + a, w * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dg, g + a, w * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dm, m + a, w * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dv, v + a, w * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        gpu_stage_adamw_ex(gs, &o, a, z, dp, dg, dm, dv, 1e-3f, 7, 0.8f) < 0 || gpu_stage_sync(gs) < 0) {
        TEST_FAIL("gpu.adamw.isolated_ex", "%s", gpu_stage_error(gs));
        goto out;
    }
    /* each result against the size of what it is made of: p against |p| + lr + the step (the
     * step is about lr, but these moments are drawn apart, so where v is near 0 it is m/eps,
     * up to 1e5 lr: a rounding of m is then that much larger in p), m against its two terms
     * (they may cancel), v (no cancellation) against v */
    double *sp = malloc(n * sizeof(double)), *sm = malloc(n * sizeof(double));
    if (!sp || !sm) {
        free(sp);
        free(sm);
        TEST_FAIL("gpu.adamw.isolated", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        sp[i] = fabs((double)p[i]) + 1e-3;
        sm[i] = 0.9 * fabs((double)m[i]) + 0.1 * fabs((double)g[i] * 0.8) + 1e-30;
    }
    float *p0 = malloc(n * 4);
    if (!p0) {
        free(sp);
        free(sm);
        TEST_FAIL("gpu.adamw.isolated", "out of memory");
        goto out;
    }
    memcpy(p0, p, n * 4);
    adamw_update(&o, t, nt, p, g, m, v, 0, n, 1e-3f, 7, 0.8f);
    for (size_t i = 0; i < n; i++)
        sp[i] += fabs((double)p0[i] - p[i]); /* the step, once the CPU has taken it */
    free(p0);
    double wp = 0.0, wm = 0.0, wv = 0.0;
    for (size_t i = 0; i < n; i++) {
        wp = fmax(wp, fabs((double)pg[i] - p[i]) / sp[i]);
        wm = fmax(wm, fabs((double)mg[i] - m[i]) / sm[i]);
        wv = fmax(wv, fabs((double)vg[i] - v[i]) / (fabs(v[i]) + 1e-30));
    }
    /* fp32: a handful of roundings (2^-23 each) */
    if (wp <= 1e-6 && wm <= 1e-6 && wv <= 1e-6)
        TEST_PASS("gpu.adamw.isolated");
    else
        TEST_FAIL("gpu.adamw.isolated", "relative differences p %.3g, m %.3g, v %.3g > 1e-6", wp,
                  wm, wv);
    if (cudaMemcpy(pg, dp, w * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(sp);
        free(sm);
        TEST_FAIL("gpu.adamw.isolated_ex", "copy back");
        goto out;
    }
    wp = 0.0;
    for (size_t i = 0; i < w; i++)
        wp = fmax(wp, fabs((double)pg[i] - p[a + i]) / sp[a + i]);
    free(sp);
    free(sm);
    if (wp <= 1e-6)
        TEST_PASS("gpu.adamw.isolated_ex");
    else
        TEST_FAIL("gpu.adamw.isolated_ex", "relative difference %.3g > 1e-6", wp);
out:
    cudaFree(dp);
    cudaFree(dg);
    cudaFree(dm);
    cudaFree(dv);
    free(p);
    free(g);
    free(m);
    free(v);
    free(pg);
    free(mg);
    free(vg);
    gpu_stage_free(gs);
    gpt_stage_free(cs);
}

/* AdamW over many spans in one call (gpu.adamw.spans): a replica's ZeRO shards of ~100 buckets,
 * the moments laid out shard after shard as zero.c does, on buffers held apart. The one call
 * (several launches of up to 48 spans) must give, bit for bit, what one call per span gives (the
 * same formula element by element, another launch geometry), and both the CPU's update to fp32
 * rounding; the squares of the same ranges summed by gpu_stage_sq_norm_ranges (128 ranges a
 * launch) within 1e-12 of the CPU's sum in double. */
static void test_adamw_spans(void)
{
    struct gpt_config c = tiny();
    herr e;
    struct gpu_stage *gs = NULL;
    struct gpt_stage *cs = NULL;
    if (gpu_stage_create(&gs, &c, 0, c.layers, 1, 4, 1, GPU_NO_MOMENTS, &e) < 0 ||
        gpt_stage_create(&cs, &c, 0, c.layers, 1, 4, 1, &e) < 0) {
        TEST_FAIL("gpu.adamw.spans", "%s", e.msg);
        gpu_stage_free(gs);
        return;
    }
    size_t n = gpu_stage_num_params(gs), bucket = n / 97 + 1;
    int D = 3, r = 1, ns = 0;
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(cs, &t);
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    struct adamw_span sp1[128], sp2[128];
    size_t lo[128], hi[128], off = 0;
    float *h = malloc(6 * n * sizeof(float)), *d = NULL;
    if (!h || cudaMalloc((void **)&d, 8 * n * sizeof(float)) != cudaSuccess) {
        TEST_FAIL("gpu.adamw.spans", "out of memory");
        goto out;
    }
    /* host: p g m v, then the two results; device: p1 p2 g m1 m2 v1 v2 (moments compacted) */
    for (size_t i = 0; i < n; i++) {
        h[i] = (float)(rand_below(2000) - 1000) * 4e-5f;
        h[n + i] = (float)(rand_below(2000) - 1000) * 1e-5f;
        h[2 * n + i] = (float)(rand_below(2000) - 1000) * 1e-6f;
        h[3 * n + i] = (float)rand_below(1000) * 1e-10f + 1e-12f;
    }
    float *p1 = d, *p2 = d + n, *g = d + 2 * n, *m1 = d + 3 * n, *m2 = d + 4 * n, *v1 = d + 5 * n,
          *v2 = d + 6 * n;
    for (size_t b = n; b > 0 && ns < 128;) { /* bucket 0 at the end, as zero.c cuts them */
        size_t blo = b > bucket ? b - bucket : 0, part = (b - blo) / (size_t)D;
        lo[ns] = blo + part * (size_t)r;
        hi[ns] = lo[ns] + part;
        ns++;
        b = blo;
    }
    for (int j = ns - 1; j >= 0; j--) { /* the shards in buffer order in the moments */
        sp1[j] = (struct adamw_span){lo[j], hi[j], p1 + lo[j], g + lo[j], m1 + off, v1 + off};
        sp2[j] = (struct adamw_span){lo[j], hi[j], p2 + lo[j], g + lo[j], m2 + off, v2 + off};
        off += hi[j] - lo[j];
    }
    if (cudaMemcpy(p1, h, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(p2, h, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(g, h + n, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(m1, h + 2 * n, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(m2, h + 2 * n, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(v1, h + 3 * n, n * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(v2, h + 3 * n, n * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        TEST_FAIL("gpu.adamw.spans", "copies to the device");
        goto out;
    }
    int rc = gpu_stage_adamw_spans(gs, &o, sp1, ns, 1e-3f, 4, 0.9f);
    for (int j = 0; j < ns && rc == 0; j++)
        rc = gpu_stage_adamw_ex(gs, &o, lo[j], hi[j], sp2[j].p, sp2[j].g, sp2[j].m, sp2[j].v,
                                1e-3f, 4, 0.9f);
    double sq = 0.0, want = 0.0;
    if (rc == 0)
        rc = gpu_stage_sq_norm_ranges(gs, g, lo, hi, ns, &sq);
    if (rc < 0 || gpu_stage_sync(gs) < 0) {
        TEST_FAIL("gpu.adamw.spans", "%s", gpu_stage_error(gs));
        goto out;
    }
    if (cudaMemcpy(h + 4 * n, d, 2 * n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        TEST_FAIL("gpu.adamw.spans", "copy back");
        goto out;
    }
    size_t differ = 0;
    double worst = 0.0;
    off = 0;
    for (int j = ns - 1; j >= 0; j--) { /* the CPU's update of the same shard, moments apart */
        size_t w = hi[j] - lo[j];
        float *pc = h + lo[j], *mc = h + 2 * n + off, *vc = h + 3 * n + off;
        float *p0 = malloc(w * 4);
        if (!p0) {
            TEST_FAIL("gpu.adamw.spans", "out of memory");
            goto out;
        }
        memcpy(p0, pc, w * 4);
        adamw_update_at(&o, t, nt, pc, h + n + lo[j], mc, vc, lo[j], hi[j], 1e-3f, 4, 0.9f);
        for (size_t i = 0; i < w; i++) {
            float a = h[4 * n + lo[j] + i], b = h[5 * n + lo[j] + i];
            differ += memcmp(&a, &b, sizeof a) != 0;
            double step = fabs((double)p0[i] - pc[i]);
            worst = fmax(worst, fabs((double)a - pc[i]) / (fabs((double)p0[i]) + 1e-3 + step));
        }
        free(p0);
        for (size_t i = lo[j]; i < hi[j]; i++)
            want += (double)h[n + i] * h[n + i];
        off += w;
    }
    if (differ == 0 && worst <= 1e-6)
        TEST_PASS("gpu.adamw.spans");
    else
        TEST_FAIL("gpu.adamw.spans", "%d spans: %zu parameters differ from one call per span; "
                  "against the CPU %.3g > 1e-6", ns, differ, worst);
    if (fabs(sq - want) <= 1e-12 * want)
        TEST_PASS("gpu.adamw.spans_norm");
    else
        TEST_FAIL("gpu.adamw.spans_norm", "%d ranges: %.17g against the CPU's %.17g", ns, sq, want);
out:
    cudaFree(d);
    free(h);
    gpu_stage_free(gs);
    gpt_stage_free(cs);
}

/* ---------------------------------------------------------------- two stages = one */

static void test_two_stage(void)
{
    struct gpt_config c = tiny();
    int B = 2, T = 16;
    size_t BT = (size_t)B * T, BTC = BT * (size_t)c.channels;
    herr e;
    struct gpu_stage *one = NULL, *s0 = NULL, *s1 = NULL;
    void *act[2] = {NULL, NULL}, *dact = NULL, *dummy = NULL;
    float *g1 = NULL, *ga = NULL, *gb = NULL;
    int *tok = malloc(2 * BT * sizeof(int)), *tgt = malloc(2 * BT * sizeof(int));
    if (!tok || !tgt || gpu_stage_create(&one, &c, 0, 2, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&s0, &c, 0, 1, B, T, 2, 0, &e) < 0 ||
        gpu_stage_create(&s1, &c, 1, 2, B, T, 2, 0, &e) < 0 ||
        !(act[0] = gpu_act_alloc(BTC, &e)) || !(act[1] = gpu_act_alloc(BTC, &e)) ||
        !(dact = gpu_act_alloc(BTC, &e)) || !(dummy = gpu_act_alloc(BTC, &e))) {
        TEST_FAIL("gpu.two_stage.create", "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    gpt_config_check(&c, NULL);
    random_tokens(tok, 2 * BT, c.vocab);
    random_tokens(tgt, 2 * BT, c.vocab);
    uint64_t seed = 5;
    float l1[2], l2[2];
    if (gpu_stage_init_params(one, seed) < 0 || gpu_stage_init_params(s0, seed) < 0 ||
        gpu_stage_init_params(s1, seed) < 0) {
        TEST_FAIL("gpu.two_stage.init", "%s", gpu_stage_error(one));
        goto out;
    }
    for (int k = 0; k < 2; k++) /* one stage: micro-batch after micro-batch */
        if (gpu_stage_forward(one, 0, tok + k * BT, NULL, tgt + k * BT, NULL, &l1[k]) < 0 ||
            gpu_stage_backward(one, 0, NULL, NULL, 1.0f) < 0) {
            TEST_FAIL("gpu.two_stage.one", "%s", gpu_stage_error(one));
            goto out;
        }
    /* two stages, both micro-batches in flight: F0 F1 then B1 B0. Forward and backward return
     * without waiting: each stage's stream waits for an event the other recorded after writing
     * what it reads (gpu_stage_event_record / gpu_stage_wait_event), and s1 waits for s0 to have
     * read dact before writing it again; no host waits but the losses. */
    cudaEvent_t ev0 = NULL, ev1 = NULL;
    if (cudaEventCreateWithFlags(&ev0, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev1, cudaEventDisableTiming) != cudaSuccess) {
        TEST_FAIL("gpu.two_stage.events", "cudaEventCreate failed");
        goto out;
    }
    int fw = 1, bw = 1;
    for (int k = 0; fw && k < 2; k++)
        fw = gpu_stage_forward(s0, k, tok + k * BT, NULL, NULL, act[k], NULL) == 0 &&
             gpu_stage_event_record(s0, ev0) == 0 && gpu_stage_wait_event(s1, ev0) == 0 &&
             gpu_stage_forward(s1, k, NULL, act[k], tgt + k * BT, NULL, &l2[k]) == 0;
    for (int k = 1; fw && bw && k >= 0; k--)
        bw = gpu_stage_backward(s1, k, NULL, dact, 1.0f) == 0 &&
             gpu_stage_event_record(s1, ev1) == 0 && gpu_stage_wait_event(s0, ev1) == 0 &&
             gpu_stage_backward(s0, k, dact, NULL, 1.0f) == 0 &&
             gpu_stage_event_record(s0, ev0) == 0 && gpu_stage_wait_event(s1, ev0) == 0;
    cudaEventDestroy(ev0);
    cudaEventDestroy(ev1);
    if (!fw || !bw) {
        TEST_FAIL(fw ? "gpu.two_stage.backward" : "gpu.two_stage.forward", "%s / %s",
                  gpu_stage_error(s0), gpu_stage_error(s1));
        goto out;
    }
    double tol = TOL / 10;
    CHECK_NEAR("gpu.two_stage.loss0", l2[0], l1[0], tol);
    CHECK_NEAR("gpu.two_stage.loss1", l2[1], l1[1], tol);
    size_t n1 = gpu_stage_num_params(one), na = gpu_stage_num_params(s0), nb = gpu_stage_num_params(s1);
    g1 = malloc(n1 * sizeof(float));
    ga = malloc(na * sizeof(float));
    gb = malloc(nb * sizeof(float));
    float *gm = malloc(n1 * sizeof(float));
    if (!g1 || !ga || !gb || !gm || gpu_stage_get_grads(one, g1) < 0 ||
        gpu_stage_get_grads(s0, ga) < 0 || gpu_stage_get_grads(s1, gb) < 0) {
        free(gm);
        TEST_FAIL("gpu.two_stage.grads", "cannot read the gradients");
        goto out;
    }
    /* assemble the split gradients in the one-stage layout, by tensor name; the two wte copies
     * are summed, as the pipeline does */
    const struct gpt_tensor *t1, *ta, *tb;
    int n1t = gpu_stage_tensors(one, &t1), nat = gpu_stage_tensors(s0, &ta), nbt = gpu_stage_tensors(s1, &tb);
    int missing = 0;
    for (int i = 0; i < n1t; i++) {
        float *dst = gm + t1[i].offset;
        int found = 0;
        memset(dst, 0, t1[i].size * sizeof(float));
        for (int j = 0; j < nat; j++)
            if (!strcmp(ta[j].name, t1[i].name)) {
                for (size_t q = 0; q < t1[i].size; q++) dst[q] += ga[ta[j].offset + q];
                found = 1;
            }
        for (int j = 0; j < nbt; j++)
            if (!strcmp(tb[j].name, t1[i].name)) {
                for (size_t q = 0; q < t1[i].size; q++) dst[q] += gb[tb[j].offset + q];
                found = 1;
            }
        missing += !found;
    }
    CHECK_INT("gpu.two_stage.every_tensor_somewhere", missing, 0);
    CHECK_TENSORS("gpu.two_stage.grads", t1, n1t, gm, g1, 0, c.channels, tol);
    free(gm);
out:
    free(tok);
    free(tgt);
    free(g1);
    free(ga);
    free(gb);
    for (int k = 0; k < 2; k++)
        gpu_act_free(act[k]);
    gpu_act_free(dact);
    gpu_act_free(dummy);
    gpu_stage_free(one);
    gpu_stage_free(s0);
    gpu_stage_free(s1);
}

/* ---------------------------------------------------------------- token slices (TeraPipe) */

/* g[name] = the sum of every stage's gradient of that tensor (both wte copies, as the pipeline
 * sums them), in the layout of `t`; returns the tensors found nowhere */
static int assemble_grads(const struct gpt_tensor *t, int nt, float *g, struct gpu_stage **st,
                          float **gs, int nst)
{
    int missing = 0;
    for (int i = 0; i < nt; i++) {
        float *dst = g + t[i].offset;
        int found = 0;
        memset(dst, 0, t[i].size * sizeof(float));
        for (int k = 0; k < nst; k++) {
            const struct gpt_tensor *tk;
            int ntk = gpu_stage_tensors(st[k], &tk);
            for (int j = 0; j < ntk; j++)
                if (!strcmp(tk[j].name, t[i].name)) {
                    for (size_t q = 0; q < t[i].size; q++)
                        dst[q] += gs[k][tk[j].offset + q];
                    found = 1;
                }
        }
        missing += !found;
    }
    return missing;
}

/* Two micro-batches cut into uneven slices (3, 9, 20 of T = 32; odd batch), all forwarded
 * (slices in order) before the backwards (micro-batches and slices in reverse), on one stage
 * [0, 2) (GELU recomputed, to take that path too) and on two stages [0, 1) + [1, 2) (the
 * activations and their gradients crossing as [B][S][C] slices): the losses (the slices' shares
 * summed) and every gradient = one unsliced stage [0, 2). */
static void test_slices(void)
{
    struct gpt_config c = tiny();
    int B = 3, T = 32, cut[] = {0, 3, 12, 32}, ns = 3;
    size_t BT = (size_t)B * T, BTC = BT * (size_t)c.channels;
    herr e;
    struct gpu_stage *one = NULL, *sl = NULL, *s0 = NULL, *s1 = NULL;
    void *act = NULL, *dact = NULL;
    float *g1 = NULL, *gsl = NULL, *ga = NULL, *gb = NULL, *gm = NULL;
    int *tok = malloc(2 * BT * sizeof(int)), *tgt = malloc(2 * BT * sizeof(int));
    if (!tok || !tgt || gpu_stage_create(&one, &c, 0, 2, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&sl, &c, 0, 2, B, T, 2, GPU_RECOMPUTE_GELU, &e) < 0 ||
        gpu_stage_create(&s0, &c, 0, 1, B, T, 2, 0, &e) < 0 ||
        gpu_stage_create(&s1, &c, 1, 2, B, T, 2, 0, &e) < 0 ||
        !(act = gpu_act_alloc(BTC, &e)) || !(dact = gpu_act_alloc(BTC, &e))) {
        TEST_FAIL("gpu.slices.create", "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    gpt_config_check(&c, NULL);
    random_tokens(tok, 2 * BT, c.vocab);
    random_tokens(tgt, 2 * BT, c.vocab);
    uint64_t seed = 13;
    if (gpu_stage_init_params(one, seed) < 0 || gpu_stage_init_params(sl, seed) < 0 ||
        gpu_stage_init_params(s0, seed) < 0 || gpu_stage_init_params(s1, seed) < 0) {
        TEST_FAIL("gpu.slices.init", "%s", gpu_stage_error(one));
        goto out;
    }
    CHECK("gpu.slices.in_order",
          gpu_stage_forward_slice(sl, 0, 3, 12, tok, NULL, tgt, NULL, NULL) < 0 &&
              strstr(gpu_stage_error(sl), "in order") != NULL);
    float lw[2], ls[2] = {0, 0}, lp[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        if (gpu_stage_forward(one, 0, tok + k * BT, NULL, tgt + k * BT, NULL, &lw[k]) < 0 ||
            gpu_stage_backward(one, 0, NULL, NULL, 1.0f) < 0) {
            TEST_FAIL("gpu.slices.whole", "%s", gpu_stage_error(one));
            goto out;
        }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < ns; j++) {
            float l = 0.0f, m = 0.0f;
            if (gpu_stage_forward_slice(sl, k, cut[j], cut[j + 1], tok + k * BT, NULL,
                                        tgt + k * BT, NULL, &l) < 0 ||
                gpu_stage_forward_slice(s0, k, cut[j], cut[j + 1], tok + k * BT, NULL, NULL, act,
                                        NULL) < 0 || gpu_stage_sync(s0) < 0 ||
                gpu_stage_forward_slice(s1, k, cut[j], cut[j + 1], NULL, act, tgt + k * BT, NULL,
                                        &m) < 0) {
                TEST_FAIL("gpu.slices.forward", "%s / %s / %s", gpu_stage_error(sl),
                          gpu_stage_error(s0), gpu_stage_error(s1));
                goto out;
            }
            ls[k] += l;
            lp[k] += m;
        }
    for (int k = 1; k >= 0; k--)
        for (int j = ns - 1; j >= 0; j--)
            if (gpu_stage_backward_slice(sl, k, cut[j], cut[j + 1], NULL, NULL, 1.0f) < 0 ||
                gpu_stage_backward_slice(s1, k, cut[j], cut[j + 1], NULL, dact, 1.0f) < 0 ||
                gpu_stage_sync(s1) < 0 ||
                gpu_stage_backward_slice(s0, k, cut[j], cut[j + 1], dact, NULL, 1.0f) < 0 ||
                gpu_stage_sync(s0) < 0) {
                TEST_FAIL("gpu.slices.backward", "%s / %s / %s", gpu_stage_error(sl),
                          gpu_stage_error(s1), gpu_stage_error(s0));
                goto out;
            }
    CHECK("gpu.slices.done", gpu_stage_backward_slice(sl, 0, 0, 3, NULL, NULL, 1.0f) < 0);
    for (int k = 0; k < 2; k++) {
        CHECK_NEAR("gpu.slices.loss", ls[k], lw[k], TOL);
        CHECK_NEAR("gpu.slices.two_stage_loss", lp[k], lw[k], TOL);
    }
    size_t n1 = gpu_stage_num_params(one), na = gpu_stage_num_params(s0), nb = gpu_stage_num_params(s1);
    g1 = malloc(n1 * sizeof(float));
    gsl = malloc(n1 * sizeof(float));
    gm = malloc(n1 * sizeof(float));
    ga = malloc(na * sizeof(float));
    gb = malloc(nb * sizeof(float));
    if (!g1 || !gsl || !gm || !ga || !gb || gpu_stage_get_grads(one, g1) < 0 ||
        gpu_stage_get_grads(sl, gsl) < 0 || gpu_stage_get_grads(s0, ga) < 0 ||
        gpu_stage_get_grads(s1, gb) < 0) {
        TEST_FAIL("gpu.slices.grads", "cannot read the gradients");
        goto out;
    }
    const struct gpt_tensor *t1;
    int n1t = gpu_stage_tensors(one, &t1);
    CHECK_TENSORS("gpu.slices.grads", t1, n1t, gsl, g1, 0, c.channels, TOL);
    struct gpu_stage *two[2] = {s0, s1};
    float *g2[2] = {ga, gb};
    CHECK_INT("gpu.slices.every_tensor_somewhere", assemble_grads(t1, n1t, gm, two, g2, 2), 0);
    CHECK_TENSORS("gpu.slices.two_stage_grads", t1, n1t, gm, g1, 0, c.channels, TOL);
    /* with tensor parallelism: test_tensor's sliced cases */
out:
    free(tok);
    free(tgt);
    free(g1);
    free(gsl);
    free(gm);
    free(ga);
    free(gb);
    gpu_act_free(act);
    gpu_act_free(dact);
    gpu_stage_free(one);
    gpu_stage_free(sl);
    gpu_stage_free(s0);
    gpu_stage_free(s1);
}

/* ---------------------------------------------------------------- recomputation */

static void test_recompute(void)
{
    struct gpt_config c = tiny();
    int B = 2, T = 16;
    size_t BT = (size_t)B * T;
    herr e;
    struct gpu_stage *keep = NULL, *re = NULL;
    float *gk = NULL, *gr = NULL;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    if (!tok || !tgt || gpu_stage_create(&keep, &c, 0, 2, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&re, &c, 0, 2, B, T, 1, GPU_RECOMPUTE_GELU, &e) < 0) {
        TEST_FAIL("gpu.recompute.create", "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    random_tokens(tok, BT, c.vocab);
    random_tokens(tgt, BT, c.vocab);
    float lk = 0.0f, lr = 0.0f;
    size_t n = gpu_stage_num_params(keep);
    gk = malloc(n * sizeof(float));
    gr = malloc(n * sizeof(float));
    if (!gk || !gr || gpu_stage_init_params(keep, 9) < 0 || gpu_stage_init_params(re, 9) < 0 ||
        gpu_stage_forward(keep, 0, tok, NULL, tgt, NULL, &lk) < 0 ||
        gpu_stage_backward(keep, 0, NULL, NULL, 1.0f) < 0 ||
        gpu_stage_forward(re, 0, tok, NULL, tgt, NULL, &lr) < 0 ||
        gpu_stage_backward(re, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(keep, gk) < 0 ||
        gpu_stage_get_grads(re, gr) < 0) {
        TEST_FAIL("gpu.recompute.run", "%s / %s", keep ? gpu_stage_error(keep) : "",
                  re ? gpu_stage_error(re) : "");
        goto out;
    }
    CHECK("gpu.recompute.same_loss", lk == lr);
    /* The recomputed GELU outputs feed one product, the MLP projection's weight gradient: it may
     * differ by one bf16 rounding of the GELU input and of its output each (check_bounds.h's
     * reasoning: 3 u in bf16; fp32: a few fp32 roundings, TOL / 10), and every other gradient
     * comes from the same values on both paths: the same bits. */
    const struct gpt_tensor *t;
    int nt = gpu_stage_tensors(keep, &t), differ = 0;
    double bound = strcmp(gpu_precision_name(), "fp32") == 0 ? TOL / 10 : GELU_RECOMPUTE_BOUND_BF16;
    double worst = 0.0;
    const char *which = "";
    for (int k = 0; k < nt; k++) {
        const float *a = gk + t[k].offset, *b = gr + t[k].offset;
        if (strstr(t[k].name, "mlp.proj.weight")) {
            char w[64];
            double r = worst_tensor(&t[k], 1, gr, gk, 0, c.channels, w, sizeof w);
            if (r > worst) {
                worst = r;
                which = t[k].name;
            }
        } else if (memcmp(a, b, t[k].size * sizeof(float)) != 0) {
            if (!differ)
                printf("# gpu.recompute: %s differs\n", t[k].name);
            differ++;
        }
    }
    CHECK_INT("gpu.recompute.other_grads_identical", differ, 0);
    if (worst <= bound)
        TEST_PASS("gpu.recompute.proj_weight_grads");
    else
        TEST_FAIL("gpu.recompute.proj_weight_grads", "%s: relative error %.3g > %.3g", which,
                  worst, bound);
    CHECK("gpu.recompute.bad_flag", gpu_stage_create(&re, &c, 0, 2, B, T, 1, 0x40, &e) < 0 &&
          strstr(e.msg, "flags") != NULL);
out:
    free(tok);
    free(tgt);
    free(gk);
    free(gr);
    gpu_stage_free(keep);
    gpu_stage_free(re);
}

/* ---------------------------------------------------------------- tensor parallelism */

struct tp_rank {
    struct tp_group *g;
    struct gpu_stage *s;
    const int *tok, *tgt;
    float loss;
    int rc;
    float *h;      /* the device sum's host copy */
    int sliced;    /* the micro-batch in the token slices TP_CUTS (forward in order, backward in
                      reverse), the loss their sum */
};

#define TP_NSLICES 3
static const int TP_CUTS[TP_NSLICES + 1] = {0, 3, 10, 16}; /* of test_tensor's T = 16 */

/* The group's sum (tests/unit/tp_group.h). */
static int tp_rank_sum(void *ctx, float *buf, size_t n)
{
    return tp_group_sum(((struct tp_rank *)ctx)->g, buf, n);
}

/* The same on the device buffer (gpu_stage_set_tp_sum_dev's contract, through the host here):
 * the stream's work done, the buffer down, the group's sum, up again queued on the stream. */
static int tp_rank_sum_dev(void *ctx, float *dev_buf, size_t n)
{
    struct tp_rank *r = ctx;
    cudaStream_t st = (cudaStream_t)gpu_stage_stream(r->s);
    if (!r->h || gpu_stage_sync(r->s) < 0 ||
        cudaMemcpy(r->h, dev_buf, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
        tp_group_sum(r->g, r->h, n) != 0 ||
        cudaMemcpyAsync(dev_buf, r->h, n * sizeof(float), cudaMemcpyHostToDevice, st) != cudaSuccess)
        return -1;
    return 0;
}

static void *tp_run(void *arg)
{
    struct tp_rank *r = arg;
    if (!r->sliced) {
        r->rc = gpu_stage_zero_grads(r->s) < 0 ||
                gpu_stage_forward(r->s, 0, r->tok, NULL, r->tgt, NULL, &r->loss) < 0 ||
                gpu_stage_backward(r->s, 0, NULL, NULL, 1.0f) < 0;
        return NULL;
    }
    r->loss = 0.0f;
    r->rc = gpu_stage_zero_grads(r->s) < 0;
    for (int k = 0; !r->rc && k < TP_NSLICES; k++) {
        float l = 0.0f;
        r->rc = gpu_stage_forward_slice(r->s, 0, TP_CUTS[k], TP_CUTS[k + 1], r->tok, NULL, r->tgt,
                                        NULL, &l) < 0;
        r->loss += l;
    }
    for (int k = TP_NSLICES - 1; !r->rc && k >= 0; k--)
        r->rc = gpu_stage_backward_slice(r->s, 0, TP_CUTS[k], TP_CUTS[k + 1], NULL, NULL, 1.0f) < 0;
    return NULL;
}

/* tp ranks of the whole model against the CPU engine's one stage (vocabulary 97 padded to 128:
 * with tp 4 the last rank holds one real row and 31 of padding); sliced: each rank runs the
 * micro-batch in token slices (TeraPipe with tensor parallelism), the CPU stage whole */
static void test_tensor(int tp, int dev, int sliced)
{
    struct gpt_config c = tiny();
    int B = 2, T = 16;
    size_t BT = (size_t)B * T;
    char name[80];
    const char *kind = dev ? (sliced ? "_dev_sliced" : "_dev") : (sliced ? "_sliced" : "");
    herr e;
    struct gpt_stage *cs = NULL, *twin = NULL;
    struct tp_rank rk[4];
    pthread_t th[4];
    struct tp_group g;
    memset(rk, 0, sizeof rk);
    memset(&g, 0, sizeof g);
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    float *full = NULL, *local = NULL;
    if (!tok || !tgt || gpt_stage_create(&cs, &c, 0, c.layers, B, T, 1, &e) < 0 ||
        gpt_stage_create_tp(&twin, &c, 0, c.layers, 1, 1, 1, tp, 0, &e) < 0) {
        snprintf(name, sizeof name, "gpu.tensor%d%s.create", tp, kind);
        TEST_FAIL(name, "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    gpt_config_check(&c, NULL);
    for (int t = 0; t < tp; t++)
        if (gpu_stage_create_tp(&rk[t].s, &c, 0, c.layers, B, T, 1, 0, tp, t, &e) < 0) {
            snprintf(name, sizeof name, "gpu.tensor%d%s.create", tp, kind);
            TEST_FAIL(name, "rank %d: %s", t, e.msg);
            goto out;
        }
    size_t n = gpt_stage_num_params(cs), nl = gpu_stage_num_params(rk[0].s);
    snprintf(name, sizeof name, "gpu.tensor%d%s.layout", tp, kind);
    CHECK_INT(name, nl, gpt_stage_num_params(twin));
    full = calloc(n, sizeof(float));
    local = calloc(nl, sizeof(float));
    if (!full || !local || tp_group_init(&g, tp, BT * (size_t)c.channels * 16) != 0) {
        TEST_FAIL("gpu.tensor", "out of memory");
        goto out;
    }
    random_tokens(tok, BT, c.vocab);
    random_tokens(tgt, BT, c.vocab);
    uint64_t seed = (uint64_t)rand_below(1 << 30);
    gpt_stage_init_params(cs, seed);
    /* the ranks' parameters, put together, are the whole stage's */
    for (int t = 0; t < tp; t++) {
        if (gpu_stage_init_params(rk[t].s, seed) < 0 || gpu_stage_get_params(rk[t].s, local) < 0) {
            snprintf(name, sizeof name, "gpu.tensor%d%s.init", tp, kind);
            TEST_FAIL(name, "rank %d: %s", t, gpu_stage_error(rk[t].s));
            goto out;
        }
        gpt_stage_to_full(twin, t, local, full);
    }
    snprintf(name, sizeof name, "gpu.tensor%d%s.same_init", tp, kind);
    CHECK(name, memcmp(full, gpt_stage_params(cs), n * sizeof(float)) == 0);

    /* a tensor-parallel stage without the group's sum: an error, not a hang */
    snprintf(name, sizeof name, "gpu.tensor%d%s.no_sum", tp, kind);
    CHECK(name, gpu_stage_forward(rk[0].s, 0, tok, NULL, tgt, NULL, NULL) < 0 &&
                strstr(gpu_stage_error(rk[0].s), "no group sum") != NULL);

    float lc = 0.0f;
    if (gpt_stage_forward(cs, 0, tok, NULL, tgt, NULL, &lc) < 0 ||
        gpt_stage_backward(cs, 0, NULL, NULL, 1.0f) < 0) {
        TEST_FAIL("gpu.tensor.cpu_step", "%s", gpt_stage_error(cs));
        goto out;
    }
    for (int t = 0; t < tp; t++) {
        rk[t].g = &g;
        rk[t].tok = tok;
        rk[t].tgt = tgt;
        rk[t].sliced = sliced;
        if (dev) {
            rk[t].h = malloc(BT * (size_t)c.channels * 16 * sizeof(float));
            gpu_stage_set_tp_sum_dev(rk[t].s, tp_rank_sum_dev, &rk[t]);
        } else {
            gpu_stage_set_tp_sum(rk[t].s, tp_rank_sum, &rk[t]);
        }
    }
    for (int t = 0; t < tp; t++)
        pthread_create(&th[t], NULL, tp_run, &rk[t]);
    for (int t = 0; t < tp; t++)
        pthread_join(th[t], NULL);
    int ran = 1;
    double worst_loss = 0.0;
    memset(full, 0, n * sizeof(float));
    for (int t = 0; t < tp; t++) {
        if (rk[t].rc || gpu_stage_get_grads(rk[t].s, local) < 0) {
            snprintf(name, sizeof name, "gpu.tensor%d%s.step", tp, kind);
            TEST_FAIL(name, "rank %d: %s", t, gpu_stage_error(rk[t].s));
            ran = 0;
            break;
        }
        double rl = fabs(rk[t].loss - lc) / fabs(lc);
        worst_loss = rl > worst_loss ? rl : worst_loss;
        gpt_stage_to_full(twin, t, local, full); /* replicated tensors: the last rank's */
    }
    if (ran) {
        snprintf(name, sizeof name, "gpu.tensor%d%s.loss", tp, kind);
        if (worst_loss <= TOL)
            TEST_PASS(name);
        else
            TEST_FAIL(name, "worst relative loss difference over the ranks %.3g > %.3g",
                      worst_loss, TOL);
        const struct gpt_tensor *tt;
        int nt = gpt_stage_tensors(cs, &tt);
        snprintf(name, sizeof name, "gpu.tensor%d%s.grads", tp, kind);
        CHECK_TENSORS(name, tt, nt, full, gpt_stage_grads(cs), 0, c.channels, TOL);
    }
out:
    free(tok);
    free(tgt);
    free(full);
    free(local);
    tp_group_destroy(&g);
    for (int t = 0; t < 4; t++) {
        gpu_stage_free(rk[t].s);
        free(rk[t].h);
    }
    gpt_stage_free(cs);
    gpt_stage_free(twin);
}

/* ---------------------------------------------------------------- resume */

struct run {
    struct gpu_stage *s;
    struct dataloader *d;
    int *in, *tg;
};

static int train_steps(struct run *r, long from, long to, float *losses, const struct lr_schedule *ls)
{
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    size_t n = gpu_stage_num_params(r->s);
    for (long step = from; step < to; step++) {
        double sq;
        herr e;
        if (dataloader_next(r->d, r->in, r->tg, &e) < 0 || gpu_stage_zero_grads(r->s) < 0 ||
            gpu_stage_forward(r->s, 0, r->in, NULL, r->tg, NULL, &losses[step]) < 0 ||
            gpu_stage_backward(r->s, 0, NULL, NULL, 1.0f) < 0 ||
            gpu_stage_grad_sq_norm(r->s, 0, n, &sq) < 0 ||
            gpu_stage_adamw(r->s, &o, 0, n, lr_at(ls, step), step + 1, grad_clip_scale(sq, 1.0f)) < 0)
            return -1;
    }
    return 0;
}

static void test_resume(const char *corpus)
{
    struct gpt_config c = {2, 64, 4, DATALOADER_TEXT_VOCAB, 0, 32};
    int B = 4, T = 32;
    long steps = 8, at = 4;
    struct lr_schedule ls = {.max_lr = 3e-3f, .warmup_steps = 2, .total_steps = steps,
                            .min_lr_ratio = 0.1f};
    struct dataloader_config dc = {.pattern = corpus, .B = B, .T = T, .rank = 0, .world = 1,
                                   .seed = 11, .vocab = c.vocab};
    char dir[] = "/tmp/holmes-gpu-resume.XXXXXX", path[512] = "";
    herr e;
    struct run a = {0}, b = {0};
    float la[8], lb[8];
    size_t BT = (size_t)B * T;
    float *pa = NULL, *pb = NULL, *m = NULL, *v = NULL;
    if (!mkdtemp(dir)) {
        TEST_FAIL("gpu.resume.tmpdir", "mkdtemp failed");
        return;
    }
    a.in = malloc(BT * sizeof(int));
    a.tg = malloc(BT * sizeof(int));
    b.in = malloc(BT * sizeof(int));
    b.tg = malloc(BT * sizeof(int));
    if (!a.in || !a.tg || !b.in || !b.tg || dataloader_open(&a.d, &dc, &e) < 0 ||
        dataloader_open(&b.d, &dc, &e) < 0 || gpu_stage_create(&a.s, &c, 0, 2, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&b.s, &c, 0, 2, B, T, 1, 0, &e) < 0) {
        TEST_FAIL("gpu.resume.setup", "%s", e.msg);
        goto out;
    }
    gpt_config_check(&c, NULL);
    size_t n = gpu_stage_num_params(a.s);
    pa = malloc(n * sizeof(float));
    pb = malloc(n * sizeof(float));
    m = malloc(n * sizeof(float));
    v = malloc(n * sizeof(float));
    if (!pa || !pb || !m || !v || gpu_stage_init_params(a.s, 3) < 0) {
        TEST_FAIL("gpu.resume.init", "%s", gpu_stage_error(a.s));
        goto out;
    }
    /* run a: steps [0, at), checkpoint, steps [at, steps) */
    struct ckpt_meta meta = {c, 0, 2, at, 0, {3, 0, 0, 0}, n, 1};
    if (train_steps(&a, 0, at, la, &ls) < 0 || gpu_stage_get_params(a.s, pa) < 0 ||
        gpu_stage_get_moments(a.s, m, v) < 0) {
        TEST_FAIL("gpu.resume.first_half", "%s", gpu_stage_error(a.s));
        goto out;
    }
    meta.data_pos = dataloader_position(a.d);
    if (ckpt_write(dir, &meta, pa, m, v, 2, path, sizeof path, &e) < 0) {
        TEST_FAIL("gpu.resume.write", "%s", e.msg);
        goto out;
    }
    if (train_steps(&a, at, steps, la, &ls) < 0 || gpu_stage_get_params(a.s, pa) < 0) {
        TEST_FAIL("gpu.resume.second_half", "%s", gpu_stage_error(a.s));
        goto out;
    }
    CHECK("gpu.resume.learns", la[steps - 1] < la[0] - 0.3f);
    /* run b: a fresh engine from the checkpoint */
    struct ckpt_meta got;
    if (ckpt_latest(dir, 0, 2, path, sizeof path, &e) != 0 ||
        ckpt_read(path, &got, pb, m, v, n, &e) < 0 || ckpt_check_shape(path, &got, &c, 0, 2, &e) < 0) {
        TEST_FAIL("gpu.resume.read", "%s", e.msg);
        goto out;
    }
    dataloader_seek(b.d, got.data_pos);
    if (gpu_stage_set_params(b.s, pb) < 0 || gpu_stage_set_moments(b.s, m, v) < 0 ||
        train_steps(&b, got.step, steps, lb, &ls) < 0 || gpu_stage_get_params(b.s, pb) < 0) {
        TEST_FAIL("gpu.resume.run", "%s", gpu_stage_error(b.s));
        goto out;
    }
    CHECK_INT("gpu.resume.step", got.step, at);
    CHECK("gpu.resume.same_losses", memcmp(la + at, lb + at, (size_t)(steps - at) * sizeof(float)) == 0);
    CHECK("gpu.resume.same_params", memcmp(pa, pb, n * sizeof(float)) == 0);
out:
    if (path[0] && strstr(path, dir) == path)
        unlink(path);
    rmdir(dir);
    free(pa);
    free(pb);
    free(m);
    free(v);
    free(a.in);
    free(a.tg);
    free(b.in);
    free(b.tg);
    dataloader_free(a.d);
    dataloader_free(b.d);
    gpu_stage_free(a.s);
    gpu_stage_free(b.s);
}

/* ---------------------------------------------------------------- bad input */

static void test_bad_input(void)
{
    struct gpt_config c = tiny();
    herr e;
    struct gpu_stage *s = NULL;
    int tok[16] = {0}, tgt[16] = {0};
    c.channels = 66; /* not a multiple of heads */
    CHECK("gpu.bad_input.config", gpu_stage_create(&s, &c, 0, 2, 1, 16, 1, 0, &e) < 0 &&
          strstr(e.msg, "heads") != NULL);
    { /* the candidates cuBLASLt's heuristic offers for timing: a bad count is refused by name,
       * 32 is taken (shapes no other check uses: the choice is made at a shape's first use) */
        double tf = 0.0;
        setenv("HOLMES_GPU_GEMM_CANDIDATES", "0", 1);
        int bad = gpu_gemm_tflops(96, 1, &tf, &e) < 0 && strstr(e.msg, "HOLMES_GPU_GEMM_CANDIDATES") != NULL;
        setenv("HOLMES_GPU_GEMM_CANDIDATES", "32", 1);
        int good = gpu_gemm_tflops(112, 2, &tf, &e) == 0 && tf > 0.0;
        unsetenv("HOLMES_GPU_GEMM_CANDIDATES");
        CHECK("gpu.bad_input.gemm_candidates", bad && good);
    }
    c = tiny();
    CHECK("gpu.bad_input.range", gpu_stage_create(&s, &c, 1, 3, 1, 16, 1, 0, &e) < 0);
    CHECK("gpu.bad_input.seq", gpu_stage_create(&s, &c, 0, 2, 1, 64, 1, 0, &e) < 0 &&
          strstr(e.msg, "max_seq") != NULL);
    c.max_seq = 65536; /* more rows than an int counts: refused before allocating */
    CHECK("gpu.bad_input.rows", gpu_stage_create(&s, &c, 0, 2, 65536, 65536, 1, 0, &e) < 0 &&
          strstr(e.msg, "4294967296 rows") != NULL);
    c = tiny();
    if (gpu_stage_create(&s, &c, 0, 2, 1, 16, 1, 0, &e) < 0) {
        TEST_FAIL("gpu.bad_input.create", "%s", e.msg);
        return;
    }
    gpu_stage_init_params(s, 1);
    tok[3] = 97;
    CHECK("gpu.bad_input.token", gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, NULL) < 0 &&
          strstr(gpu_stage_error(s), "token 97 at position 3") != NULL);
    tok[3] = 0;
    tgt[5] = -1;
    CHECK("gpu.bad_input.target", gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, NULL) < 0 &&
          strstr(gpu_stage_error(s), "target -1") != NULL);
    CHECK("gpu.bad_input.slot", gpu_stage_forward(s, 1, tok, NULL, NULL, NULL, NULL) < 0 &&
          strstr(gpu_stage_error(s), "slot 1") != NULL);
    CHECK("gpu.bad_input.backward_first", gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 &&
          strstr(gpu_stage_error(s), "no forward") != NULL);
    CHECK("gpu.bad_input.adamw_range", gpu_stage_adamw(s, &(struct adamw_config){0.9f, 0.95f, 1e-8f, 0.1f},
                                                       0, gpu_stage_num_params(s) + 1, 1e-3f, 1, 1.0f) < 0);
    gpu_stage_free(s);
}

/* ---------------------------------------------------------------- the device-resident trainer's calls */

struct hook_log {
    size_t lo[64], hi[64];
    int nf, layers[64], nb;
};
static int log_fwd(void *ctx, size_t lo, size_t hi)
{
    struct hook_log *h = ctx;
    if (h->nf < 64) {
        h->lo[h->nf] = lo;
        h->hi[h->nf] = hi;
    }
    h->nf++;
    return 0;
}
static void log_bwd(void *ctx, int layer)
{
    struct hook_log *h = ctx;
    if (h->nb < 64)
        h->layers[h->nb] = layer;
    h->nb++;
}

/* gpu.resident.*: the calls engine_cuda.c makes, against the stage's own older calls and the CPU
 * optimizer: the forward hook covers every parameter once per forward, in order; the backward
 * hook names every block, last first; the loss summed on the device = the losses read one by
 * one; the norm over ranges = gpu_stage_grad_sq_norm; AdamW on buffers held apart = the CPU's
 * adamw_update_at; a changed range's bf16 copy follows the parameters before the next forward
 * reads it (the loss with changed parameters = a fresh stage's with them), and AdamW on the
 * stage's own parameters writes it in the same pass */
static void test_resident(void)
{
    struct gpt_config c = tiny();
    gpt_config_check(&c, NULL);
    int B = 2, T = 16;
    size_t BT = (size_t)B * T;
    herr e;
    struct gpu_stage *gs = NULL, *ref = NULL, *fresh = NULL;
    struct gpt_stage *cs = NULL;
    if (gpu_stage_create(&gs, &c, 0, c.layers, B, T, 2, GPU_NO_MOMENTS, &e) < 0 ||
        gpu_stage_create(&ref, &c, 0, c.layers, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&fresh, &c, 0, c.layers, B, T, 1, 0, &e) < 0 ||
        gpt_stage_create(&cs, &c, 0, c.layers, 1, 1, 1, &e) < 0) {
        TEST_FAIL("gpu.resident.create", "%s", e.msg);
        gpu_stage_free(gs);
        gpu_stage_free(ref);
        gpu_stage_free(fresh);
        return;
    }
    size_t n = gpu_stage_num_params(gs);
    int *tok = malloc(2 * BT * sizeof(int)), *tgt = malloc(2 * BT * sizeof(int));
    float *h = malloc(n * sizeof(float)), *h2 = malloc(n * sizeof(float));
    float *hm = calloc(n, sizeof(float)), *hv = calloc(n, sizeof(float)), *hg = malloc(n * sizeof(float));
    float *dm = NULL, *dv = NULL, *dp = NULL;
    if (!tok || !tgt || !h || !h2 || !hm || !hv || !hg) {
        TEST_FAIL("gpu.resident", "out of memory");
        goto out;
    }
    uint64_t seed = (uint64_t)rand_below(1 << 30);
    CHECK("gpu.resident.no_moments_refuses_adamw",
          gpu_stage_init_params(gs, seed) == 0 &&
              gpu_stage_adamw(gs, &(struct adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, 0, n, 1e-3f, 1, 1.0f) < 0);
    gpu_stage_init_params(ref, seed);
    random_tokens(tok, 2 * BT, c.vocab);
    random_tokens(tgt, 2 * BT, c.vocab);
    struct hook_log hl = {{0}, {0}, 0, {0}, 0};
    gpu_stage_set_forward_hook(gs, log_fwd, &hl);
    gpu_stage_set_backward_hook(gs, log_bwd, &hl);
    float want = 0.0f, got = -1.0f;
    int ok = gpu_stage_zero_grads(gs) == 0 && gpu_stage_zero_grads(ref) == 0;
    for (int k = 0; ok && k < 2; k++) {
        float l = 0.0f;
        ok = gpu_stage_forward(gs, k, tok + k * BT, NULL, tgt + k * BT, NULL, NULL) == 0 &&
             gpu_stage_forward(ref, 0, tok + k * BT, NULL, tgt + k * BT, NULL, &l) == 0 &&
             gpu_stage_backward(ref, 0, NULL, NULL, 0.5f) == 0;
        want += l;
    }
    for (int k = 1; ok && k >= 0; k--)
        ok = gpu_stage_backward(gs, k, NULL, NULL, 0.5f) == 0;
    ok = ok && gpu_stage_loss_take(gs, &got) == 0;
    if (!ok) {
        TEST_FAIL("gpu.resident.pass", "%s / %s", gpu_stage_error(gs), gpu_stage_error(ref));
        goto out;
    }
    CHECK_NEAR("gpu.resident.loss_summed_on_device", got, want, 1e-5 * fabs(want));
    float again = -1.0f;
    CHECK("gpu.resident.loss_take_resets", gpu_stage_loss_take(gs, &again) == 0 && again == 0.0f);
    /* the forward hook: 2 forwards x (embeddings + blocks + head) ranges tiling [0, n) each */
    int units = c.layers + 2, tiles = hl.nf == 2 * units;
    for (int f = 0; tiles && f < 2; f++)
        for (int u = 0; u < units; u++) {
            size_t lo = hl.lo[f * units + u], hi = hl.hi[f * units + u];
            size_t prev = u ? hl.hi[f * units + u - 1] : 0;
            tiles = tiles && lo == prev && hi > lo && (u < units - 1 || hi == n);
        }
    CHECK("gpu.resident.forward_hook_tiles_the_parameters_in_order", tiles);
    /* the backward hook: every block, last first, once per backward */
    int order = hl.nb == 2 * c.layers;
    for (int i = 0; order && i < hl.nb; i++)
        order = hl.layers[i] == c.layers - 1 - i % c.layers;
    CHECK("gpu.resident.backward_hook_every_block_last_first", order);
    /* the norm over ranges (3 pieces, out of order of nothing) = the stage's own */
    double whole = 0.0, parts = -1.0;
    size_t lo[3] = {0, n / 3, n / 2}, hi[3] = {n / 3, n / 2, n};
    CHECK("gpu.resident.sq_norm_ranges",
          gpu_stage_grad_sq_norm(ref, 0, n, &whole) == 0 &&
              gpu_stage_sq_norm_ranges(gs, gpu_stage_grads_dev(gs), lo, hi, 3, &parts) == 0 &&
              fabs(parts - whole) <= 1e-4 * whole);
    /* AdamW on buffers apart from the stage = the CPU's (from the same gradients) */
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    size_t a = n / 5, z = n - n / 7; /* a shard inside tensors */
    if (gpu_stage_get_grads(gs, hg) < 0 || gpu_stage_get_params(gs, h) < 0 ||
        cudaMalloc((void **)&dm, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dv, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dp, n * sizeof(float)) != cudaSuccess ||
        cudaMemset(dm, 0, n * sizeof(float)) != cudaSuccess ||
        cudaMemset(dv, 0, n * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(dp, h + a, (z - a) * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        TEST_FAIL("gpu.resident.adamw_ex", "set-up: %s", gpu_stage_error(gs));
        goto out;
    }
    const struct gpt_tensor *tt;
    int nt = gpt_stage_tensors(cs, &tt);
    for (int step = 1; step <= 3; step++) {
        adamw_update_at(&o, tt, nt, h + a, hg + a, hm, hv, a, z, 1e-3f, step, 0.7f);
        gpu_stage_adamw_ex(gs, &o, a, z, dp, gpu_stage_grads_dev(gs) + a, dm, dv, 1e-3f, step, 0.7f);
    }
    ok = gpu_stage_sync(gs) == 0 &&
         cudaMemcpy(h2, dp, (z - a) * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    double worst = 0.0;
    for (size_t i = 0; ok && i < z - a; i++) {
        double d = fabs((double)h2[i] - h[a + i]) / (fabs(h[a + i]) + 1e-3);
        worst = d > worst ? d : worst;
    }
    if (ok && worst <= 1e-5)
        TEST_PASS("gpu.resident.adamw_ex_equals_the_cpu");
    else
        TEST_FAIL("gpu.resident.adamw_ex_equals_the_cpu", "worst relative difference %.3g (%s)",
                  worst, gpu_stage_error(gs));
    /* changed parameters, written behind the stage's back, then marked: the next forward computes
     * with them (bf16: its copy refreshed), as a stage given them fresh does */
    ok = cudaMemcpy(gpu_stage_params_dev(gs) + a, dp, (z - a) * sizeof(float),
                    cudaMemcpyDeviceToDevice) == cudaSuccess &&
         gpu_stage_get_params(gs, h) == 0 && gpu_stage_set_params(fresh, h) == 0;
    gpu_stage_params_changed(gs, a, z);
    float lf = 0.0f, lg = 0.0f;
    ok = ok && gpu_stage_forward(fresh, 0, tok, NULL, tgt, NULL, &lf) == 0 &&
         gpu_stage_forward(gs, 0, tok, NULL, tgt, NULL, &lg) == 0;
    CHECK("gpu.resident.changed_parameters_reach_the_forward", ok && lf == lg);
    /* AdamW on the stage's own parameters (the trainer's path with one replica and fp32
     * parameters): the same pass writes the bf16 copy, so with no gpu_stage_params_changed the
     * next forward computes with the updated parameters, as a stage given them fresh does; and
     * the parameters are the CPU's update of the same state */
    ok = ok && gpu_stage_get_params(gs, h) == 0;
    for (size_t i = 0; ok && i < n; i++)
        h2[i] = h[i];
    adamw_update_at(&o, tt, nt, h2 + a, hg + a, hm, hv, a, z, 1e-3f, 4, 0.7f);
    ok = ok && gpu_stage_adamw_ex(gs, &o, a, z, gpu_stage_params_dev(gs) + a,
                                  gpu_stage_grads_dev(gs) + a, dm, dv, 1e-3f, 4, 0.7f) == 0 &&
         gpu_stage_get_params(gs, h) == 0 && gpu_stage_set_params(fresh, h) == 0;
    worst = 0.0; /* AdamW that did nothing would leave h at the old values: far from h2 */
    for (size_t i = a; ok && i < z; i++) {
        double d = fabs((double)h[i] - h2[i]) / (fabs(h2[i]) + 1e-3);
        worst = d > worst ? d : worst;
    }
    lf = 0.0f, lg = -1.0f;
    ok = ok && worst <= 1e-5 && gpu_stage_forward(fresh, 0, tok, NULL, tgt, NULL, &lf) == 0 &&
         gpu_stage_forward(gs, 0, tok, NULL, tgt, NULL, &lg) == 0;
    if (ok && lf == lg)
        TEST_PASS("gpu.resident.adamw_own_params_writes_the_bf16_copy");
    else
        TEST_FAIL("gpu.resident.adamw_own_params_writes_the_bf16_copy",
                  "loss %.9g, a fresh stage's %.9g; parameters vs the CPU: worst %.3g (%s)", lg, lf,
                  worst, gpu_stage_error(gs));
out:
    cudaFree(dm);
    cudaFree(dv);
    cudaFree(dp);
    free(tok);
    free(tgt);
    free(h);
    free(h2);
    free(hm);
    free(hv);
    free(hg);
    gpu_stage_free(gs);
    gpu_stage_free(ref);
    gpu_stage_free(fresh);
    gpt_stage_free(cs);
}

/* ---------------------------------------------------------------- this round's engine */

/* gpu.flash.*: flash attention against the materialised one (bf16; GPU_MATERIALISED_ATTENTION),
 * on GPT-2's head size and a T that is not a multiple of the tiles: the loss and every gradient
 * within the precision's tolerance, and the backward deterministic (two runs, the same bits);
 * both dQ kernels: from the stored dS (the default) and recomputing (GPU_FLASH_RECOMPUTE_DQ: the
 * same forward, so the same loss bits, and its gradients within the tolerance too); and a pass in
 * launches of one sequence each (HOLMES_GPU_FLASH_MAX_BH=1, as a pass over more (sequence, head)
 * pairs than a grid takes goes): the same bits, and a bad value of that variable refused. */
static void test_flash_at(int B, int T);

/* At T = 80 (a partial second tile) and T = 200 (whole tiles that no mask touches, in every
 * kernel, beside the diagonal and the partial ones) */
static void test_flash(void)
{
    if (strcmp(gpu_precision_name(), "bf16") != 0)
        return;
    test_flash_at(3, 80);
    test_flash_at(2, 200);
}

/* flash attention against the materialised attention on (B, T); check names carry T */
static void test_flash_at(int B, int T)
{
    char nm[12][64];
    static const char *const what[12] = {"create", "kinds", "run", "loss", "grads", "deterministic",
                                         "recompute_dq.run", "recompute_dq.loss_same",
                                         "recompute_dq.grads", "chunked.run", "chunked.same_bits",
                                         "chunked.bad_value_refused"};
    for (int i = 0; i < 12; i++)
        snprintf(nm[i], sizeof nm[i], "gpu.flash.T%d.%s", T, what[i]);
    struct gpt_config c = wide();
    c.max_seq = T;
    size_t BT = (size_t)B * T;
    herr e;
    struct gpu_stage *fl = NULL, *ma = NULL, *rq = NULL;
    float *gf = NULL, *gm = NULL, *g2 = NULL, *gr = NULL;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    if (!tok || !tgt || gpu_stage_create(&fl, &c, 0, 2, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&ma, &c, 0, 2, B, T, 1, GPU_MATERIALISED_ATTENTION, &e) < 0 ||
        gpu_stage_create(&rq, &c, 0, 2, B, T, 1, GPU_FLASH_RECOMPUTE_DQ, &e) < 0) {
        TEST_FAIL(nm[0], "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    CHECK(nm[1], !strcmp(gpu_stage_attention_kind(fl), "flash") &&
                     !strcmp(gpu_stage_attention_kind(ma), "materialised"));
    gpt_config_check(&c, NULL);
    random_tokens(tok, BT, c.vocab);
    random_tokens(tgt, BT, c.vocab);
    size_t n = gpu_stage_num_params(fl);
    gf = malloc(n * sizeof(float));
    gm = malloc(n * sizeof(float));
    g2 = malloc(n * sizeof(float));
    gr = malloc(n * sizeof(float));
    float lf = 0.0f, lm = 0.0f, l2 = 0.0f, lr = 0.0f;
    if (!gf || !gm || !g2 || gpu_stage_init_params(fl, 21) < 0 || gpu_stage_init_params(ma, 21) < 0 ||
        gpu_stage_zero_grads(fl) < 0 || gpu_stage_zero_grads(ma) < 0 ||
        gpu_stage_forward(fl, 0, tok, NULL, tgt, NULL, &lf) < 0 ||
        gpu_stage_backward(fl, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(fl, gf) < 0 ||
        gpu_stage_forward(ma, 0, tok, NULL, tgt, NULL, &lm) < 0 ||
        gpu_stage_backward(ma, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(ma, gm) < 0 ||
        gpu_stage_zero_grads(fl) < 0 || gpu_stage_forward(fl, 0, tok, NULL, tgt, NULL, &l2) < 0 ||
        gpu_stage_backward(fl, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(fl, g2) < 0) {
        TEST_FAIL(nm[2], "%s / %s", fl ? gpu_stage_error(fl) : "", ma ? gpu_stage_error(ma) : "");
        goto out;
    }
    CHECK_NEAR(nm[3], lf, lm, TOL);
    const struct gpt_tensor *t;
    int nt = gpu_stage_tensors(fl, &t);
    CHECK_TENSORS(nm[4], t, nt, gf, gm, 0, c.channels, TOL);
    CHECK(nm[5], lf == l2 && memcmp(gf, g2, n * sizeof(float)) == 0);
    if (!gr || gpu_stage_init_params(rq, 21) < 0 || gpu_stage_zero_grads(rq) < 0 ||
        gpu_stage_forward(rq, 0, tok, NULL, tgt, NULL, &lr) < 0 ||
        gpu_stage_backward(rq, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(rq, gr) < 0) {
        TEST_FAIL(nm[6], "%s", rq ? gpu_stage_error(rq) : "out of memory");
        goto out;
    }
    TEST_PASS(nm[6]);
    CHECK(nm[7], lr == lf);
    CHECK_TENSORS(nm[8], t, nt, gr, gm, 0, c.channels, TOL);
    {
        struct gpu_stage *ch = NULL, *bad = NULL;
        float lc = 0.0f;
        setenv("HOLMES_GPU_FLASH_MAX_BH", "1", 1);
        int rc = gpu_stage_create(&ch, &c, 0, 2, B, T, 1, 0, &e);
        setenv("HOLMES_GPU_FLASH_MAX_BH", "0", 1);
        int rb = gpu_stage_create(&bad, &c, 0, 2, B, T, 1, 0, &e);
        unsetenv("HOLMES_GPU_FLASH_MAX_BH");
        CHECK(nm[11], rb < 0 && strstr(e.msg, "HOLMES_GPU_FLASH_MAX_BH"));
        gpu_stage_free(bad);
        if (rc < 0 || gpu_stage_init_params(ch, 21) < 0 || gpu_stage_zero_grads(ch) < 0 ||
            gpu_stage_forward(ch, 0, tok, NULL, tgt, NULL, &lc) < 0 ||
            gpu_stage_backward(ch, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(ch, gr) < 0) {
            TEST_FAIL(nm[9], "%s", ch ? gpu_stage_error(ch) : "create failed");
        } else {
            TEST_PASS(nm[9]);
            CHECK(nm[10], lc == lf && memcmp(gr, gf, n * sizeof(float)) == 0);
        }
        gpu_stage_free(ch);
    }
out:
    free(tok);
    free(tgt);
    free(gf);
    free(gm);
    free(g2);
    free(gr);
    gpu_stage_free(fl);
    gpu_stage_free(ma);
    gpu_stage_free(rq);
}

/* gpu.overlap.*: GPU_OVERLAP_WEIGHT_GRADS (the weight gradients' products on a second stream)
 * gives the same loss and gradients, bit for bit, as one stream: after a warm-up backward (the
 * overlap starts once every product's algorithm is chosen), two micro-batches, the first writing
 * the gradients and the second adding to them; once more with the profiler on (which runs them
 * on one stream) for the same bits again. */
static void test_overlap(void)
{
    struct gpt_config c = wide();
    int B = 3, T = 80;
    size_t BT = (size_t)B * T;
    herr e;
    struct gpu_stage *st[2] = {NULL, NULL};
    float *g[2] = {NULL, NULL}, loss[2][2] = {{0}};
    int *tok = malloc(2 * BT * sizeof(int)), *tgt = malloc(2 * BT * sizeof(int));
    if (!tok || !tgt || gpu_stage_create(&st[0], &c, 0, c.layers, B, T, 1, 0, &e) < 0 ||
        gpu_stage_create(&st[1], &c, 0, c.layers, B, T, 1, GPU_OVERLAP_WEIGHT_GRADS, &e) < 0) {
        TEST_FAIL("gpu.overlap.create", "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    gpt_config_check(&c, NULL);
    random_tokens(tok, 2 * BT, c.vocab);
    random_tokens(tgt, 2 * BT, c.vocab);
    size_t n = gpu_stage_num_params(st[0]);
    for (int k = 0; k < 2; k++) {
        struct gpu_stage *s = st[k];
        g[k] = malloc(n * sizeof(float));
        if (!g[k] || gpu_stage_init_params(s, 33) < 0 || gpu_stage_zero_grads(s) < 0 ||
            gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, NULL) < 0 ||
            gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_zero_grads(s) < 0 ||
            gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss[k][0]) < 0 ||
            gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 ||
            gpu_stage_forward(s, 0, tok + BT, NULL, tgt + BT, NULL, &loss[k][1]) < 0 ||
            gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(s, g[k]) < 0) {
            TEST_FAIL("gpu.overlap.run", "%s", g[k] ? gpu_stage_error(s) : "out of memory");
            goto out;
        }
    }
    TEST_PASS("gpu.overlap.run");
    CHECK("gpu.overlap.same_loss", loss[0][0] == loss[1][0] && loss[0][1] == loss[1][1]);
    CHECK("gpu.overlap.same_grads", memcmp(g[0], g[1], n * sizeof(float)) == 0);
    /* the profiled step: one stream, the same bits */
    struct gpu_profile prof;
    float lp = 0.0f;
    if (gpu_stage_zero_grads(st[1]) < 0 || gpu_stage_profile_begin(st[1]) < 0 ||
        gpu_stage_forward(st[1], 0, tok, NULL, tgt, NULL, &lp) < 0 ||
        gpu_stage_backward(st[1], 0, NULL, NULL, 1.0f) < 0 ||
        gpu_stage_forward(st[1], 0, tok + BT, NULL, tgt + BT, NULL, NULL) < 0 ||
        gpu_stage_backward(st[1], 0, NULL, NULL, 1.0f) < 0 ||
        gpu_stage_profile_end(st[1], &prof) < 0 || gpu_stage_get_grads(st[1], g[1]) < 0)
        TEST_FAIL("gpu.overlap.profiled", "%s", gpu_stage_error(st[1]));
    else
        CHECK("gpu.overlap.profiled", lp == loss[0][0] && memcmp(g[0], g[1], n * sizeof(float)) == 0);
out:
    free(tok);
    free(tgt);
    for (int k = 0; k < 2; k++) {
        free(g[k]);
        gpu_stage_free(st[k]);
    }
}

/* gpu.layernorm_held.*: LayerNorm's backward holding its rows in registers or re-reading them
 * (HOLMES_GPU_LN_BWD_MAX_IT: 8, the default 4, 0) gives the same loss and gradients, bit for bit
 * (each lane takes the same columns in the same order either way), at GPT-2 1.5B's 1,600 channels
 * (bf16: 7 vectors a lane, held only at 8) and at 256 (held at 1 or 2 vectors unless 0); a value
 * that is not 0, 1, 2, 4 or 8 refused naming the variable. */
static void test_layernorm_held(void)
{
    static const char *const val[3] = {NULL, "8", "0"};
    static const int channels[2] = {1600, 256};
    int B = 2, T = 32;
    size_t BT = (size_t)B * T;
    herr e;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    float *g[3] = {NULL, NULL, NULL};
    if (!tok || !tgt) {
        TEST_FAIL("gpu.layernorm_held.run", "out of memory");
        goto out;
    }
    for (int ci = 0; ci < 2; ci++) {
        struct gpt_config c = {2, channels[ci], channels[ci] / 64, 97, 0, T};
        char nm[3][64];
        snprintf(nm[0], sizeof nm[0], "gpu.layernorm_held.C%d.run", c.channels);
        snprintf(nm[1], sizeof nm[1], "gpu.layernorm_held.C%d.same_loss", c.channels);
        snprintf(nm[2], sizeof nm[2], "gpu.layernorm_held.C%d.same_grads", c.channels);
        gpt_config_check(&c, NULL);
        random_tokens(tok, BT, c.vocab);
        random_tokens(tgt, BT, c.vocab);
        float loss[3] = {0};
        size_t n = 0;
        int ok = 1;
        for (int k = 0; k < 3 && ok; k++) {
            struct gpu_stage *s = NULL;
            if (val[k])
                setenv("HOLMES_GPU_LN_BWD_MAX_IT", val[k], 1);
            int rc = gpu_stage_create(&s, &c, 0, c.layers, B, T, 1, 0, &e);
            unsetenv("HOLMES_GPU_LN_BWD_MAX_IT");
            if (rc == 0) {
                n = gpu_stage_num_params(s);
                free(g[k]);
                g[k] = malloc(n * sizeof(float));
            }
            if (rc < 0 || !g[k] || gpu_stage_init_params(s, 41) < 0 || gpu_stage_zero_grads(s) < 0 ||
                gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss[k]) < 0 ||
                gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_get_grads(s, g[k]) < 0) {
                TEST_FAIL(nm[0], "HOLMES_GPU_LN_BWD_MAX_IT=%s: %s", val[k] ? val[k] : "(unset)",
                          rc < 0 ? e.msg : g[k] ? gpu_stage_error(s) : "out of memory");
                ok = 0;
            }
            gpu_stage_free(s);
        }
        if (!ok)
            continue;
        TEST_PASS(nm[0]);
        CHECK(nm[1], loss[0] == loss[1] && loss[0] == loss[2]);
        CHECK(nm[2], memcmp(g[0], g[1], n * sizeof(float)) == 0 &&
                         memcmp(g[0], g[2], n * sizeof(float)) == 0);
    }
    {
        struct gpt_config c = wide();
        struct gpu_stage *bad = NULL;
        setenv("HOLMES_GPU_LN_BWD_MAX_IT", "3", 1);
        int rb = gpu_stage_create(&bad, &c, 0, c.layers, B, T, 1, 0, &e);
        gpu_stage_free(bad);
        bad = NULL;
        setenv("HOLMES_GPU_LN_BWD_MAX_IT", "16", 1);
        int rc = gpu_stage_create(&bad, &c, 0, c.layers, B, T, 1, 0, &e);
        unsetenv("HOLMES_GPU_LN_BWD_MAX_IT");
        gpu_stage_free(bad);
        CHECK("gpu.layernorm_held.bad_value_refused",
              rb < 0 && rc < 0 && strstr(e.msg, "HOLMES_GPU_LN_BWD_MAX_IT"));
    }
out:
    free(tok);
    free(tgt);
    for (int k = 0; k < 3; k++)
        free(g[k]);
}

/* gpu.memory.*: gpu_stage_device_bytes against what a creation takes (cudaMemGetInfo before and
 * after; the handles' own allocations aside), and a stage too big for the GPU refused with the
 * layers, the bytes asked and the bytes free named, and nothing left allocated. */
static void test_memory(void)
{
    struct gpt_config c = wide();
    herr e;
    struct gpu_stage *s = NULL;
    size_t f0 = 0, f1 = 0, f2 = 0, tot = 0;
    size_t plan = gpu_stage_device_bytes(&c, 0, 2, 256, 80, 2, 0, 1);
    if (cudaMemGetInfo(&f0, &tot) != cudaSuccess || gpu_stage_create(&s, &c, 0, 2, 256, 80, 2, 0, &e) < 0 ||
        cudaMemGetInfo(&f1, &tot) != cudaSuccess) {
        TEST_FAIL("gpu.memory.plan", "%s", e.msg);
        gpu_stage_free(s);
        return;
    }
    double got = (double)f0 - (double)f1;
    printf("# gpu.memory: planned %.1f MiB, taken %.1f MiB\n", plan / 1048576.0, got / 1048576.0);
    if (got >= 0.9 * plan && got <= 1.1 * plan + 64.0 * 1048576)
        TEST_PASS("gpu.memory.plan");
    else
        TEST_FAIL("gpu.memory.plan", "planned %zu bytes, the creation took %.0f", plan, got);
    gpu_stage_free(s);
    s = NULL;
    int B = 64;
    while (gpu_stage_device_bytes(&c, 0, 2, B, 80, 8, 0, 1) < 2 * tot && B < (1 << 22))
        B *= 2;
    int rc = gpu_stage_create(&s, &c, 0, 2, B, 80, 8, 0, &e);
    CHECK("gpu.memory.too_big_refused", rc < 0 && strstr(e.msg, "layers [0, 2)") &&
                                            strstr(e.msg, "bytes") && strstr(e.msg, "free"));
    if (rc == 0)
        gpu_stage_free(s);
    else
        printf("# %s\n", e.msg);
    CHECK("gpu.memory.nothing_left", cudaMemGetInfo(&f2, &tot) == cudaSuccess &&
                                         (double)f2 >= (double)f0 - 8.0 * 1048576);
}

/* gpu.profile.*: a step between gpu_stage_profile_begin and _end: the parts (outermost only) fit
 * inside the total, attention and the products took time, and the counters moved */
static void test_profile(void)
{
    struct gpt_config c = tiny();
    int B = 2, T = 32;
    size_t BT = (size_t)B * T;
    herr e;
    struct gpu_stage *s = NULL;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    struct gpu_profile p;
    double sq = 0.0, sq2 = -1.0;
    float loss = 0.0f;
    if (!tok || !tgt || gpu_stage_create(&s, &c, 0, 2, B, T, 1, 0, &e) < 0) {
        TEST_FAIL("gpu.profile.create", "%s", tok && tgt ? e.msg : "out of memory");
        goto out;
    }
    gpt_config_check(&c, NULL);
    random_tokens(tok, BT, c.vocab);
    random_tokens(tgt, BT, c.vocab);
    size_t n = gpu_stage_num_params(s);
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    if (gpu_stage_init_params(s, 4) < 0 || gpu_stage_profile_begin(s) < 0 ||
        gpu_stage_zero_grads(s) < 0 || gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, NULL) < 0 ||
        gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 || gpu_stage_loss_take(s, &loss) < 0 ||
        gpu_stage_grad_sq_norm(s, 0, n, &sq) < 0 ||
        gpu_stage_adamw(s, &o, 0, n, 1e-3f, 1, grad_clip_scale(sq, 1.0f)) < 0 ||
        gpu_stage_profile_end(s, &p) < 0) {
        TEST_FAIL("gpu.profile.run", "%s", gpu_stage_error(s));
        goto out;
    }
    double parts = 0.0;
    for (int i = 0; i < GPU_PARTS; i++)
        parts += p.ms[i];
    CHECK("gpu.profile.parts_inside_total", p.total_ms > 0 && parts <= 1.01 * p.total_ms + 0.01);
    CHECK("gpu.profile.attention_and_matmul", p.ms[GPU_PART_ATTENTION] > 0 &&
                                                  p.ms[GPU_PART_MATMUL] > 0 &&
                                                  p.ms[GPU_PART_OPTIMIZER] > 0 &&
                                                  p.ms[GPU_PART_NORM] > 0);
    /* the timed kernels: every linear layer's products (qkv, the projection, fc, fc's projection
     * and the head: distinct shapes) forward and backward, inside the matmul part; flash
     * attention's (bf16) 4 kernels a layer, inside the attention part */
    double gms = 0.0, ams = 0.0, lnms = 0.0, clms = 0.0;
    int gshapes = 0, gcount = 0, acount = 0, gpos = 1, mpos = 1, lnf = 0, lnb = 0, cls = 0;
    for (int i = 0; i < p.nkernels; i++) {
        const struct gpu_kernel_time *g = &p.kernels[i];
        gpos &= g->ms > 0 && (i == 0 || g->ms <= p.kernels[i - 1].ms);
        if (gpu_kernel_group(g->kind) == 2) { /* moving bytes, at most an H200's 4.8 TB/s */
            mpos &= g->bytes > 0 && g->flop == 0 && g->bytes / (g->ms * 1e-3) < 5e12;
            lnf += g->kind == GPU_KERNEL_LN_FWD ? g->count : 0;
            lnb += g->kind == GPU_KERNEL_LN_BWD ? g->count : 0;
            cls += g->kind == GPU_KERNEL_CLASSIFIER ? g->count : 0;
            if (g->kind == GPU_KERNEL_LN_FWD || g->kind == GPU_KERNEL_LN_BWD ||
                g->kind == GPU_KERNEL_COLSUM_FINISH)
                lnms += g->ms;
            else if (g->kind == GPU_KERNEL_CLASSIFIER)
                clms += g->ms;
            continue;
        }
        gpos &= g->flop > 0;
        if (g->kind == GPU_KERNEL_PRODUCT) {
            gms += g->ms;
            gcount += g->count;
            gshapes++;
        } else {
            ams += g->ms;
            acount += g->count;
        }
    }
    int flash = strcmp(gpu_stage_attention_kind(s), "flash") == 0;
    CHECK("gpu.profile.products_by_shape", gshapes >= 5 && gcount >= 27 && gpos &&
                                               p.kernels_lost == 0 &&
                                               gms <= 1.01 * p.ms[GPU_PART_MATMUL] + 0.01);
    CHECK("gpu.profile.attention_kernels", acount == (flash ? 4 * 2 : 0) &&
                                               ams <= 1.01 * p.ms[GPU_PART_ATTENTION] + 0.01);
    /* the memory-bound kernels: a LayerNorm forward and backward for each of the layers' two and
     * the final one, the classifier once (tiny(): 2 layers, the whole model in the stage); the
     * LayerNorm's (with the finish of its weight and bias sums: column sums' finishes of the
     * linear layers' biases count in matmul) inside the layernorm part, the classifier's in its */
    CHECK("gpu.profile.memory_kernels", mpos && lnf == 2 * 2 + 1 && lnb == 2 * 2 + 1 && cls == 1 &&
                                            lnms <= 1.01 * (p.ms[GPU_PART_LAYERNORM] +
                                                            p.ms[GPU_PART_MATMUL]) + 0.01 &&
                                            clms <= 1.01 * p.ms[GPU_PART_CLASSIFIER] + 0.01);
    /* the worker's parts: gradients cleared (read with no backward since the zeroing), the
     * caller's own marked work (the trainer's masters), the bf16 copy refreshed (bf16) */
    void *scratch = NULL;
    float l2 = 0.0f;
    int prof_ok = cudaMalloc(&scratch, 1 << 20) == cudaSuccess && gpu_stage_profile_begin(s) == 0 &&
                  gpu_stage_zero_grads(s) == 0 && gpu_stage_grad_sq_norm(s, 0, n, &sq) == 0;
    gpu_stage_profile_enter(s, GPU_PART_MASTERS);
    prof_ok = prof_ok && cudaMemsetAsync(scratch, 0, 1 << 20,
                                         (cudaStream_t)gpu_stage_stream(s)) == cudaSuccess;
    gpu_stage_profile_leave(s);
    gpu_stage_params_changed(s, 0, n);
    prof_ok = prof_ok && gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, &l2) == 0 &&
              gpu_stage_profile_end(s, &p) == 0;
    cudaFree(scratch);
    int bf16 = strcmp(gpu_precision_name(), "bf16") == 0;
    CHECK("gpu.profile.worker_parts",
          prof_ok && p.ms[GPU_PART_ZEROING] > 0 && p.ms[GPU_PART_MASTERS] > 0 &&
              p.ms[GPU_PART_NORM] > 0 && (p.ms[GPU_PART_BF16_COPY] > 0) == bf16 &&
              p.ms[GPU_PART_OPTIMIZER] == 0 && sq == 0.0);
    CHECK("gpu.profile.counters", p.launches > 20 && p.syncs >= 2 && p.events_lost == 0);
    CHECK("gpu.profile.loss_read_once", isfinite(loss) && loss > 0.0f);
    /* the norm over one device buffer = the stage's own, the same reduction */
    CHECK("gpu.sq_norm_ex", gpu_stage_grad_sq_norm(s, 0, n, &sq) == 0 &&
                                gpu_stage_sq_norm_ex(s, gpu_stage_grads_dev(s), n, &sq2) == 0 &&
                                sq == sq2);
out:
    free(tok);
    free(tgt);
    gpu_stage_free(s);
}

int main(int argc, char **argv)
{
    int quick = 0, race = 0;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--race"))
            race = quick = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick | --race] [--seed N]\n", argv[0]);
            return 2;
        }
    }
    TOL = strcmp(gpu_precision_name(), "fp32") == 0 ? 1e-4 : 2e-2;
    verbose = getenv("HOLMES_TEST_VERBOSE") && strcmp(getenv("HOLMES_TEST_VERBOSE"), "0") != 0;
    rng_state = seed;
    char dev[256];
    herr e;
    if (gpu_device_name(dev, sizeof dev, &e) < 0) {
        TEST_FAIL("gpu.device", "%s", e.msg);
        TEST_MAIN_END();
    }
    printf("# %s, %s mode, tolerance %g, seed %llu\n", dev, gpu_precision_name(), TOL,
           (unsigned long long)seed);
    /* --race (compute-sanitizer's racecheck, which slows every kernel many times): one sequence
     * each, no steps; flash attention at head sizes 16 and 64 still */
    test_vs_cpu("gpu.vs_cpu", tiny(), race ? 1 : 2, 16, race ? 0 : quick ? 1 : 3);
    test_vs_cpu("gpu.vs_cpu.hs64", wide(), race ? 1 : 3, 80, 0); /* GPT-2's head size, T = max_seq, odd */
    skewed = 1; /* text-like tokens: the embedding gradient's split kernel (144 positions of token 3) */
    test_vs_cpu("gpu.vs_cpu.skewed", wide(), race ? 1 : 3, 80, 0);
    skewed = 0;
    if (!quick) {
        test_vs_cpu("gpu.vs_cpu.max_seq", tiny(), 3, 32, 0); /* T = max_seq, odd batch */
        test_adamw_isolated();
        test_adamw_spans();
        test_two_stage();
        test_recompute();
        test_slices();
        test_tensor(2, 0, 0);
        test_tensor(4, 0, 0);
        test_tensor(2, 1, 0); /* the group's sums through gpu_stage_set_tp_sum_dev */
        test_tensor(2, 0, 1); /* token slices with tensor parallelism */
        test_tensor(4, 1, 1);
        const char *corpus = getenv("HOLMES_CORPUS");
        test_resume(corpus ? corpus : "examples/data/corpus.txt");
        test_bad_input();
        test_resident();
        test_flash();
        test_overlap();
        test_layernorm_held();
        test_memory();
        test_profile();
    }
    printf("%d passed, %d failed\n", test_passes_, test_failures_);
    TEST_MAIN_END();
}
