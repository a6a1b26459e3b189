/* The CUDA engine behind the engine seam (engine.h). Compiled twice by mk/cuda.mk, once per
 * precision (HOLMES_GPU_FP32 defined: engine_cuda_fp32_ops; else engine_cuda_bf16_ops), each
 * against gpt_cuda of the same precision, and linked only into the CUDA holmes-node.
 *
 * Device-resident: the parameters and gradients the trainer works on are the device stage's own
 * fp32 buffers (gpu_stage_params_dev, gpu_stage_grads_dev), its memory the GPU's (devmem_cuda,
 * with the stage's stream as the compute lane). The trainer's optimizer state, ZeRO masters and
 * pipeline activations are allocated there too. Forward and backward queue work and return; the
 * forward hook runs before a block's parameters are read (the trainer makes the stream wait for
 * their all-gather there), the backward hook right after a block's gradients are queued (the
 * trainer starts their reduce-scatter behind an event), and the tensor group's sums run on device
 * buffers (gpu_stage_set_tp_sum_dev: the trainer's all-reduce on the tensor group's communicator,
 * NCCL on the device or staged for TCP). Only tokens and targets go down, the loss and the
 * gradient norm come up once per step; parameters cross PCIe only to initialise, load and save.
 * Written and compile-checked without a GPU; tests/gpu/worker_gpu.sh runs it. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "clock.h"
#include "devmem_cuda.h"
#include "gpt_cuda.h"

#ifdef HOLMES_GPU_FP32
#define ENGINE_OPS engine_cuda_fp32_ops
#define ENGINE_NAME "cuda-fp32"
#else
#define ENGINE_OPS engine_cuda_bf16_ops
#define ENGINE_NAME "cuda-bf16"
#endif

struct cuda_engine {
    struct gpu_stage *g;
    struct devmem *mem;
    int device;
    int T, tp, B;
    int last;           /* holds the head (and the loss) */
};

static struct cuda_engine *ce_of(struct engine *en) { return en->impl; }

static void cuda_destroy(struct engine *en)
{
    struct cuda_engine *c = ce_of(en);
    if (c) {
        cudaSetDevice(c->device);
        gpu_stage_free(c->g);
        devmem_cuda_free(c->mem);
        free(c);
    }
    gpt_stage_free(en->host);
}

/* The forward hook: the trainer's, then (inside the stage) the bf16 copy of the range refreshed
 * where it was marked changed. */
static int fwd_hook(void *ctx, size_t lo, size_t hi)
{
    struct engine *en = ctx;
    return en->fwd_hook ? en->fwd_hook(en->fwd_ctx, lo, hi) : 0;
}

static void bwd_hook(void *ctx, int layer)
{
    struct engine *en = ctx;
    if (en->bwd_hook)
        en->bwd_hook(en->bwd_ctx, layer);
}

static int tp_sum_hook(void *ctx, float *buf, size_t n)
{
    struct engine *en = ctx;
    return en->tp_sum ? en->tp_sum(en->tp_ctx, buf, n) : -1;
}

static int cuda_create(struct engine *en, const struct engine_spec *s, herr *e)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess)
        return herr_set(e, "CUDA: no usable GPU (%s)", cudaGetErrorString(ce));
    if (s->device < 0 || s->device >= ndev)
        return herr_set(e, "CUDA device %d: this pod sees %d GPU(s) (check nvidia.com/gpu and "
                        "CUDA_VISIBLE_DEVICES)", s->device, ndev);
    if ((ce = cudaSetDevice(s->device)) != cudaSuccess)
        return herr_set(e, "CUDA device %d: %s", s->device, cudaGetErrorString(ce));
    /* the host stage: layout (this tensor rank's), and host buffers to initialise, load and
     * save; no micro-batch of its own */
    if (gpt_stage_create_tp(&en->host, &s->model, s->first, s->last, 1, 1, 1, s->tp, s->tp_rank,
                            e) != 0)
        return -1;
    struct cuda_engine *c = calloc(1, sizeof *c);
    if (!c) {
        gpt_stage_free(en->host);
        en->host = NULL;
        return herr_set(e, "out of memory for the CUDA engine");
    }
    en->impl = c;
    c->device = s->device;
    c->T = s->T;
    c->B = s->B;
    c->tp = s->tp;
    c->last = s->last == s->model.layers;
    /* a resumed run takes the algorithms the first chose (bit for bit) */
    if (s->choices_file && gpu_gemm_choices_file(s->choices_file, e) != 0) {
        gpt_stage_free(en->host);
        en->host = NULL;
        free(c);
        en->impl = NULL;
        return -1;
    }
    /* the trainer keeps its shard's AdamW moments: the stage keeps none */
    int rc = gpu_stage_create_tp(&c->g, &s->model, s->first, s->last, s->B, s->T, s->slots,
                                 GPU_NO_MOMENTS, s->tp, s->tp_rank, e);
    /* out of device memory: it fails the same way again, so the job is not retried */
    if (rc != 0 && e && strstr(e->msg, "out of GPU memory"))
        e->kind = HERR_CONFIG;
    if (rc != 0 ||
        devmem_cuda_create(&c->mem, s->device, gpu_stage_stream(c->g), s->timeout_s, e) != 0) {
        cuda_destroy(en);
        en->impl = NULL;
        en->host = NULL;
        return -1;
    }
    if (gpu_stage_num_params(c->g) != gpt_stage_num_params(en->host)) {
        herr_set(e, "CUDA engine: %zu parameters, the host stage %zu (layouts differ)",
                 gpu_stage_num_params(c->g), gpt_stage_num_params(en->host));
        cuda_destroy(en);
        en->impl = NULL;
        en->host = NULL;
        return -1;
    }
    en->mem = c->mem;
    en->params = gpu_stage_params_dev(c->g);
    en->grads = gpu_stage_grads_dev(c->g);
#ifdef HOLMES_GPU_FP32
    en->act_dtype = DTYPE_FP32;
#else
    en->act_dtype = DTYPE_BF16;
#endif
    gpu_stage_set_forward_hook(c->g, fwd_hook, en);
    gpu_stage_set_backward_hook(c->g, bwd_hook, en);
    if (s->tp > 1)
        gpu_stage_set_tp_sum_dev(c->g, tp_sum_hook, en);
    return 0;
}

static int stage_err(struct engine *en, herr *e, const char *what)
{
    return herr_set(e, "CUDA engine: %s: %s", what, gpu_stage_error(ce_of(en)->g));
}

static int on_device(struct engine *en)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess)
        return engine_fail(en, "CUDA device %d lost", c->device);
    return 0;
}

static int cuda_params_upload(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess ||
        gpu_stage_set_params(c->g, gpt_stage_params(en->host)) != 0)
        return stage_err(en, e, "uploading the parameters");
    devmem_count_bytes(c->mem, gpt_stage_num_params(en->host) * sizeof(float), 0);
    return 0;
}

static int cuda_params_download(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess ||
        gpu_stage_get_params(c->g, gpt_stage_params(en->host)) != 0)
        return stage_err(en, e, "downloading the parameters");
    devmem_count_bytes(c->mem, 0, gpt_stage_num_params(en->host) * sizeof(float));
    return 0;
}

static int cuda_init_params(struct engine *en, uint64_t seed, herr *e)
{
    gpt_stage_init_params(en->host, seed); /* the same numbers as gpu_stage_init_params */
    return cuda_params_upload(en, e);
}

/* Token slices (TeraPipe): gpu_stage_forward_slice / _backward_slice, with tensor parallelism
 * too (as gpt_pass.c). */
static int slice_check(struct engine *en, int t0, int t1)
{
    struct cuda_engine *c = ce_of(en);
    if (t0 < 0 || t1 > c->T || t0 >= t1)
        return engine_fail(en, "token slice [%d, %d) is not inside [0, %d) or is empty", t0, t1,
                           c->T);
    return 0;
}

static int cuda_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                        const void *in_act, const int *targets, void *out_act)
{
    struct cuda_engine *c = ce_of(en);
    if (slice_check(en, t0, t1) != 0 || on_device(en) != 0)
        return -1;
    /* loss NULL: the last stage adds it to the stage's sum on the device (gpu_stage_loss_take) */
    if (gpu_stage_forward_slice(c->g, slot, t0, t1, tokens, in_act, targets, out_act, NULL) != 0)
        return engine_fail(en, "%s", gpu_stage_error(c->g));
    if (t0 == 0) /* the micro-batch's tokens (first stage) and targets (last) went down */
        devmem_count_bytes(c->mem, (size_t)c->B * (size_t)c->T * sizeof(int) *
                                       (size_t)((tokens != NULL) + (targets != NULL)), 0);
    return 0;
}

static int cuda_backward(struct engine *en, int slot, int t0, int t1, const void *dout, void *din,
                         float loss_scale)
{
    struct cuda_engine *c = ce_of(en);
    if (slice_check(en, t0, t1) != 0 || on_device(en) != 0)
        return -1;
    if (gpu_stage_backward_slice(c->g, slot, t0, t1, dout, din, loss_scale) != 0)
        return engine_fail(en, "%s", gpu_stage_error(c->g));
    return 0;
}

static int cuda_zero_grads(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess || gpu_stage_zero_grads(c->g) != 0)
        return stage_err(en, e, "zeroing gradients");
    return 0;
}

static int cuda_loss_take(struct engine *en, float *sum, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    *sum = 0;
    if (!c->last)
        return 0;
    if (cudaSetDevice(c->device) != cudaSuccess || gpu_stage_loss_take(c->g, sum) != 0)
        return stage_err(en, e, "reading the loss");
    devmem_count_sync(c->mem);
    devmem_count_bytes(c->mem, 0, sizeof(float));
    return 0;
}

static int cuda_sq_norm(struct engine *en, const float *base, const size_t *lo, const size_t *hi,
                        int n, double *out, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess ||
        gpu_stage_sq_norm_ranges(c->g, base, lo, hi, n, out) != 0)
        return stage_err(en, e, "the gradient norm");
    devmem_count_sync(c->mem);
    devmem_count_bytes(c->mem, 0, sizeof(double));
    return 0;
}

static int cuda_adamw(struct engine *en, const struct adamw_config *o, const struct adamw_span *sp,
                      int n, float lr, long step, float grad_scale, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    /* spans on the stage's own parameters (p == en->params + lo): the same pass writes their
     * bf16 copy, nothing to refresh before the next forward */
    if (cudaSetDevice(c->device) != cudaSuccess ||
        gpu_stage_adamw_spans(c->g, o, sp, n, lr, step, grad_scale) != 0)
        return stage_err(en, e, "AdamW");
    return 0;
}

static void cuda_params_changed(struct engine *en, size_t lo, size_t hi)
{
    gpu_stage_params_changed(ce_of(en)->g, lo, hi);
}

/* the stage calls the hooks itself (set once at creation, reading en's fields) */
static void cuda_hooks_changed(struct engine *en) { (void)en; }

/* Profiling: the stage's own (CUDA events by part on its stream), its parts folded into the
 * engine's. */
static int engine_part_of(int gpu_part)
{
    switch (gpu_part) {
    case GPU_PART_OPTIMIZER: return ENGINE_PART_ADAMW;
    case GPU_PART_NORM: return ENGINE_PART_NORM;
    case GPU_PART_BF16_COPY: return ENGINE_PART_BF16_COPY;
    case GPU_PART_ZEROING: return ENGINE_PART_ZEROING;
    case GPU_PART_MASTERS: return ENGINE_PART_MASTERS;
    case GPU_PART_OTHER: return ENGINE_PART_OTHER;
    default: return ENGINE_PART_COMPUTE; /* attention, matmul, layernorm, classifier, embedding */
    }
}

static int cuda_profile_begin(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (cudaSetDevice(c->device) != cudaSuccess || gpu_stage_profile_begin(c->g) != 0)
        return stage_err(en, e, "starting the profile");
    return 0;
}

static int cuda_profile_end(struct engine *en, struct engine_profile *out, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    struct gpu_profile p;
    if (cudaSetDevice(c->device) != cudaSuccess || gpu_stage_profile_end(c->g, &p) != 0)
        return stage_err(en, e, "the profile");
    devmem_count_sync(c->mem);
    out->total_ms = p.total_ms;
    for (int i = 0; i < GPU_PARTS; i++)
        out->ms[engine_part_of(i)] += p.ms[i];
    out->launches = p.launches;
    out->syncs = p.syncs;
    out->lost = p.events_lost;
    return 0;
}

static void cuda_profile_enter(struct engine *en, enum engine_part part)
{
    static const int gpu_part[ENGINE_PARTS] = {
        [ENGINE_PART_COMPUTE] = GPU_PART_MATMUL, /* folded back into compute */
        [ENGINE_PART_BF16_COPY] = GPU_PART_BF16_COPY, [ENGINE_PART_ZEROING] = GPU_PART_ZEROING,
        [ENGINE_PART_NORM] = GPU_PART_NORM, [ENGINE_PART_ADAMW] = GPU_PART_OPTIMIZER,
        [ENGINE_PART_MASTERS] = GPU_PART_MASTERS, [ENGINE_PART_OTHER] = GPU_PART_OTHER};
    gpu_stage_profile_enter(ce_of(en)->g, gpu_part[part]);
}

static void cuda_profile_leave(struct engine *en) { gpu_stage_profile_leave(ce_of(en)->g); }

static const char *cuda_error(const struct engine *en) { return en->err; }

/* The planner's compute rate for this node's GPUs 0..n-1: the engine's own matrix product
 * (cuBLASLt in this precision, its algorithm chosen as for training), PROBE_N^3, the median of
 * PROBE_ITERS; the slowest GPU's. Run in a process of its own (engine_gpu_probe). */
#define PROBE_N 4096
#define PROBE_ITERS 10
static int cuda_probe_tflops(int n, double *tflops, herr *e)
{
    *tflops = 0;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess)
        return herr_set(e, "compute probe: no CUDA device (%s)", cudaGetErrorString(ce));
    if (n < 1 || count < n)
        return herr_set(e, "compute probe: %d GPUs asked, %d visible", n, count);
    double least = 0;
    for (int d = 0; d < n; d++) {
        double t = 0;
        if ((ce = cudaSetDevice(d)) != cudaSuccess)
            return herr_set(e, "compute probe: device %d: %s", d, cudaGetErrorString(ce));
        if (gpu_gemm_tflops(PROBE_N, PROBE_ITERS, &t, e) != 0)
            return herr_wrap(e, "compute probe, device %d", d);
        if (d == 0 || t < least)
            least = t;
    }
    *tflops = least;
    return 0;
}

/* The planner's memory rate for this node's GPUs 0..n-1: the engine's own gradient norm and
 * AdamW over the parameters of a stage of GPT-2 124M's blocks (85 M parameters: 12 layers of 768,
 * a vocabulary of 256), each step synchronising on the norm as a training step does, the best of
 * OPT_PROBE_STEPS; counted at OPTIMIZER_PROBE_BYTES_PER_PARAM bytes a parameter, as the CPU's
 * optimizer_probe_gbps counts its own; the slowest GPU's. On an H100 (2026-11-27) the 1.5B step's
 * AdamW moved its 30 bytes a parameter at 2.83 TB/s and the norm its 4 at 2.2: 2.57 TB/s at 32
 * bytes a parameter, where the device's peak is 3.35. */
#define OPT_PROBE_STEPS 5
static int cuda_probe_optimizer_gbps(int n, double *gbps, herr *e)
{
    *gbps = 0;
    struct gpt_config c = {.layers = 12, .channels = 768, .heads = 12, .vocab = 256, .max_seq = 64};
    if (gpt_config_check(&c, e) != 0)
        return herr_wrap(e, "optimizer probe");
    double least = 0;
    for (int d = 0; d < n; d++) {
        cudaError_t ce = cudaSetDevice(d);
        if (ce != cudaSuccess)
            return herr_set(e, "optimizer probe: device %d: %s", d, cudaGetErrorString(ce));
        struct gpu_stage *s = NULL;
        if (gpu_stage_create(&s, &c, 0, c.layers, 1, c.max_seq, 1, 0, e) != 0)
            return herr_wrap(e, "optimizer probe, device %d", d);
        size_t np = gpu_stage_num_params(s);
        float *g = malloc(np * sizeof(float));
        if (!g) {
            gpu_stage_free(s);
            return herr_set(e, "optimizer probe: out of memory for %zu gradients", np);
        }
        /* parameters and gradients of a few sizes (their values do not change the traffic) */
        for (size_t i = 0; i < np; i++)
            g[i] = 0.02f * (float)((i * 7 + 3) % 17) - 0.16f;
        int rc = gpu_stage_set_params(s, g);
        for (size_t i = 0; i < np; i++)
            g[i] = 1e-3f * (float)((i * 5 + 1) % 13) - 6e-3f;
        rc = rc != 0 || gpu_stage_set_grads(s, g) != 0 ? -1 : 0;
        free(g);
        const struct adamw_config o = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
        double best = 0;
        for (int r = 0; rc == 0 && r < OPT_PROBE_STEPS; r++) {
            double sq = 0, t0 = clock_mono_s();
            if (gpu_stage_grad_sq_norm(s, 0, np, &sq) != 0 ||
                gpu_stage_adamw(s, &o, 0, np, 1e-4f, r + 1, grad_clip_scale(sq, 1.0f)) != 0 ||
                gpu_stage_sync(s) != 0) {
                rc = -1;
                break;
            }
            double dt = clock_mono_s() - t0;
            if (r == 0 || dt < best)
                best = dt;
        }
        if (rc != 0) {
            herr_set(e, "optimizer probe, device %d: %s", d, gpu_stage_error(s));
            gpu_stage_free(s);
            return -1;
        }
        gpu_stage_free(s);
        double rate = best > 0 ? OPTIMIZER_PROBE_BYTES_PER_PARAM * (double)np / best / 1e9 : 0;
        if (!(rate > 0))
            return herr_set(e, "optimizer probe, device %d: no time measured", d);
        if (d == 0 || rate < least)
            least = rate;
    }
    *gbps = least;
    return 0;
}

const struct engine_ops ENGINE_OPS = {
    .name = ENGINE_NAME,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .init_params = cuda_init_params,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .zero_grads = cuda_zero_grads,
    .loss_take = cuda_loss_take,
    .sq_norm = cuda_sq_norm,
    .adamw = cuda_adamw,
    .params_changed = cuda_params_changed,
    .params_upload = cuda_params_upload,
    .params_download = cuda_params_download,
    .hooks_changed = cuda_hooks_changed,
    .profile_begin = cuda_profile_begin,
    .profile_end = cuda_profile_end,
    .profile_enter = cuda_profile_enter,
    .profile_leave = cuda_profile_leave,
    .error = cuda_error,
    .probe_tflops = cuda_probe_tflops,
    .probe_optimizer_gbps = cuda_probe_optimizer_gbps,
};
