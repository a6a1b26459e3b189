/* AdamW, learning-rate schedule and gradient clipping. */
#include "optimizer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* The element loop, compiled twice (AVX2 and baseline x86-64) and picked at load time. In the
 * bias-corrected update, 1/(1-b1^t) and 1/sqrt(1-b2^t) are hoisted out of the loop as PyTorch
 * does: p -= lr * (m * c1) / (sqrt(v) * c2 + eps) + lr * wd * p. */
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float b1,
                         float b2, float eps, float lr, float wd, float c1, float c2, float gs)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * c1) / (sqrtf(vi) * c2 + eps) + wd * p[i]);
    }
}

static void adamw_segment(const struct adamw_config *o, float *p, const float *g, float *m,
                          float *v, size_t n, float lr, float wd, float bc1, float bc2,
                          float gs)
{
    float c1 = 1.0f / bc1, c2 = 1.0f / sqrtf(bc2);
    if (n <= 65536) {
        adamw_kernel(p, g, m, v, n, o->beta1, o->beta2, o->eps, lr, wd, c1, c2, gs);
        return;
    }
#pragma omp parallel
    {
        size_t id = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t lo = n * id / nt / 16 * 16, hi = id + 1 == nt ? n : n * (id + 1) / nt / 16 * 16;
        adamw_kernel(p + lo, g + lo, m + lo, v + lo, hi - lo, o->beta1, o->beta2, o->eps, lr, wd,
                     c1, c2, gs);
    }
}

void adamw_update(const struct adamw_config *o, const struct gpt_tensor *tensors, int ntensors,
                  float *params, const float *grads, float *m, float *v, size_t lo, size_t hi,
                  float lr, long step, float grad_scale)
{
    adamw_update_range(o, tensors, ntensors, params + lo, grads, m, v, lo, hi, lr, step,
                       grad_scale);
}

void adamw_update_range(const struct adamw_config *o, const struct gpt_tensor *tensors,
                        int ntensors, float *p, const float *grads, float *m, float *v, size_t lo,
                        size_t hi, float lr, long step, float grad_scale)
{
    adamw_update_at(o, tensors, ntensors, p, grads + lo, m, v, lo, hi, lr, step, grad_scale);
}

void adamw_update_at(const struct adamw_config *o, const struct gpt_tensor *tensors, int ntensors,
                     float *p, const float *g, float *m, float *v, size_t lo, size_t hi, float lr,
                     long step, float grad_scale)
{
    float bc1 = 1.0f - powf(o->beta1, (float)step);
    float bc2 = 1.0f - powf(o->beta2, (float)step);
    for (int t = 0; t < ntensors; t++) {
        size_t a = tensors[t].offset, b = a + tensors[t].size;
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (a >= b)
            continue;
        float wd = tensors[t].decay ? o->weight_decay : 0.0f;
        adamw_segment(o, p + (a - lo), g + (a - lo), m + (a - lo), v + (a - lo), b - a, lr, wd, bc1,
                      bc2, grad_scale);
    }
}

int lr_schedule_check(const struct lr_schedule *s, herr *e)
{
    if (!(s->max_lr > 0.0f) || !isfinite(s->max_lr))
        return herr_set(e, "learning rate must be a positive number (got %g)", s->max_lr);
    if (s->warmup_steps < 0)
        return herr_set(e, "warmup steps must be >= 0 (got %ld)", s->warmup_steps);
    if (s->total_steps <= 0)
        return herr_set(e, "total steps must be positive (got %ld)", s->total_steps);
    if (!(s->min_lr_ratio >= 0.0f && s->min_lr_ratio <= 1.0f))
        return herr_set(e, "min learning-rate ratio must be in [0, 1] (got %g)", s->min_lr_ratio);
    if (s->shape == LR_WSD && (s->decay_steps < 0 || s->decay_steps > s->total_steps - s->warmup_steps))
        return herr_set(e, "decay steps must be in [0, %ld] (total %ld less warm-up %ld; got %ld)",
                        s->total_steps - s->warmup_steps, s->total_steps, s->warmup_steps,
                        s->decay_steps);
    return 0;
}

float lr_at(const struct lr_schedule *s, long step)
{
    if (step < s->warmup_steps)
        return s->max_lr * (float)(step + 1) / (float)s->warmup_steps;
    float min_lr = s->max_lr * s->min_lr_ratio;
    if (step >= s->total_steps || s->total_steps <= s->warmup_steps)
        return min_lr;
    long from = s->shape == LR_WSD ? s->total_steps - s->decay_steps : s->warmup_steps;
    if (step < from) /* LR_WSD's stable part */
        return s->max_lr;
    double ratio = (double)(step - from) / (double)(s->total_steps - from);
    double coeff = s->shape == LR_COSINE ? 0.5 * (1.0 + cos(M_PI * ratio)) : 1.0 - ratio;
    return (float)(min_lr + coeff * (s->max_lr - min_lr));
}

double grad_sq_norm(const float *g, size_t lo, size_t hi)
{
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) if (parallel : hi - lo > 65536)
    for (size_t i = lo; i < hi; i++)
        sum += (double)g[i] * g[i];
    return sum;
}

float grad_clip_scale(double sq, float max_norm)
{
    double norm = sqrt(sq);
    if (max_norm <= 0.0f || norm <= max_norm)
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}

void grad_scale(float *g, size_t lo, size_t hi, float scale)
{
#pragma omp parallel for simd if (parallel : hi - lo > 65536)
    for (size_t i = lo; i < hi; i++)
        g[i] *= scale;
}

double optimizer_probe_gbps(size_t n, int reps, herr *e)
{
    if (n < (1u << 16) || n > (1u << 28) || reps < 1 || reps > 100) {
        herr_set(e, "optimizer probe: %zu parameters must be in [65536, 268435456] and %d steps "
                 "in [1, 100]", n, reps);
        return -1;
    }
    n = n / 16 * 16; /* four 64-byte aligned buffers */
    float *buf = aligned_alloc(64, 4 * n * sizeof(float));
    if (!buf) {
        herr_set(e, "optimizer probe: out of memory for 4 x %zu floats", n);
        return -1;
    }
    float *p = buf, *g = buf + n, *m = buf + 2 * n, *v = buf + 3 * n;
#pragma omp parallel for if (parallel : n > 65536)
    for (size_t i = 0; i < n; i++) { /* first touch by the threads that will use the pages */
        p[i] = 0.02f * (float)((i * 7 + 3) % 17) - 0.16f;
        g[i] = 1e-3f * (float)((i * 5 + 1) % 13) - 6e-3f;
        m[i] = v[i] = 0.0f;
    }
    struct gpt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "probe");
    t.size = n;
    t.decay = 1;
    const struct adamw_config o = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_mono_s();
        float scale = grad_clip_scale(grad_sq_norm(g, 0, n), 1.0f);
        adamw_update_at(&o, &t, 1, p, g, m, v, 0, n, 1e-4f, r + 1, scale);
        double dt = clock_mono_s() - t0;
        if (dt < best)
            best = dt;
    }
    free(buf);
    if (!(best > 0)) {
        herr_set(e, "optimizer probe: no time measured over %zu parameters", n);
        return -1;
    }
    return (double)OPTIMIZER_PROBE_BYTES_PER_PARAM * (double)n / best / 1e9;
}
