/* AdamW over any contiguous range of a stage's flat parameter buffer (so a ZeRO-1 shard updates
 * only its slice), the learning-rate schedule, and global-norm clipping helpers. */
#ifndef HOLMES_OPTIMIZER_H
#define HOLMES_OPTIMIZER_H

#include <stddef.h>

#include "error.h"
#include "gpt.h"

struct adamw_config {
    float beta1, beta2, eps, weight_decay; /* e.g. 0.9, 0.95, 1e-8, 0.1 */
};

/* A piece of one AdamW pass (an engine's, a ZeRO shard's): parameters [lo, hi) of the stage, with
 * p, g, m and v each pointing at parameter lo's element (engine memory). */
struct adamw_span {
    size_t lo, hi;
    float *p;
    const float *g;
    float *m, *v;
};

/* One AdamW step (PyTorch's torch.optim.AdamW) over params[lo, hi):
 *   g = grads[i] * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1 - b1^step) / (sqrt(v / (1 - b2^step)) + eps) + wd * p)   (wd where decay)
 * params and grads are the whole flat buffers (indexed from 0); m and v hold only the range
 * (m[0] belongs to params[lo]). Weight decay applies to elements of tensors whose decay flag is
 * set (matrices). step counts from 1. */
void adamw_update(const struct adamw_config *o, const struct gpt_tensor *tensors, int ntensors,
                  float *params, const float *grads, float *m, float *v, size_t lo, size_t hi,
                  float lr, long step, float grad_scale);
/* The same with the parameters held apart from the flat buffer: p[0] is parameter lo (e.g. the
 * fp32 master copy of a shard whose working parameters are rounded to bf16). */
void adamw_update_range(const struct adamw_config *o, const struct gpt_tensor *tensors,
                        int ntensors, float *p, const float *grads, float *m, float *v, size_t lo,
                        size_t hi, float lr, long step, float grad_scale);

/* The same with every buffer held apart: p[0], g[0], m[0] and v[0] belong to parameter lo (a
 * ZeRO shard's fp32 masters, a gradient gathered elsewhere); the tensor table still gives each
 * element's weight decay by its global index. */
void adamw_update_at(const struct adamw_config *o, const struct gpt_tensor *tensors, int ntensors,
                     float *p, const float *g, float *m, float *v, size_t lo, size_t hi, float lr,
                     long step, float grad_scale);

/* After the warm-up, from max_lr down to max_lr * min_lr_ratio at total_steps: a half cosine
 * (LR_COSINE), a straight line (LR_LINEAR), or warmup-stable-decay (LR_WSD: max_lr until the
 * last decay_steps steps, then a straight line). A constant rate is min_lr_ratio 1. */
enum lr_shape { LR_COSINE = 0, LR_LINEAR = 1, LR_WSD = 2 };
struct lr_schedule {
    float max_lr;
    long warmup_steps;  /* linear from max_lr/warmup to max_lr over steps 0..warmup-1 */
    long total_steps;   /* the decay reaches max_lr*min_lr_ratio at total_steps */
    float min_lr_ratio; /* in [0, 1] */
    enum lr_shape shape;
    long decay_steps;   /* LR_WSD: the steps of the decay, at most total - warmup */
};
int lr_schedule_check(const struct lr_schedule *s, herr *e);
/* The learning rate at 0-based step `step`. */
float lr_at(const struct lr_schedule *s, long step);

/* Sum of squares of g[lo, hi) (double accumulation); the global norm is the sqrt of the sum of
 * every stage's / shard's local value. */
double grad_sq_norm(const float *g, size_t lo, size_t hi);
/* The factor that brings a gradient of global squared norm `sq` to at most max_norm (1 when it is
 * already inside, or when max_norm <= 0 disables clipping). */
float grad_clip_scale(double sq, float max_norm);
void grad_scale(float *g, size_t lo, size_t hi, float scale);

/* Bytes the optimizer moves per parameter as optimizer_probe_gbps counts them: the norm reads
 * the gradient (4), AdamW reads p, g, m, v and writes p, m, v (28). */
#define OPTIMIZER_PROBE_BYTES_PER_PARAM 32

/* The memory bandwidth this process's optimizer step reaches, GB/s: the gradient norm and
 * AdamW (this file's, with its OpenMP threads) over n parameters held apart, the fastest of
 * `reps` steps, OPTIMIZER_PROBE_BYTES_PER_PARAM bytes a parameter. For the planner's price of
 * the step (links.optimizer_bytes_per_param / memory_gbps): a CPU worker says it in hello.
 * n in [2^16, 2^28], reps in [1, 100]; -1 with the reason (bad arguments, out of memory). */
double optimizer_probe_gbps(size_t n, int reps, herr *e);
/* What a worker's start-up probe runs (holmes-node worker, engines --probe): 64 MiB of
 * parameters, gradients and moments, past most last-level caches; about 10 ms a step at 15 GB/s. */
#define OPTIMIZER_PROBE_PARAMS ((size_t)1 << 22)
#define OPTIMIZER_PROBE_STEPS 3

#endif
