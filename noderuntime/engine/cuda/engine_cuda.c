/* The CUDA engine behind the engine seam (engine.h). Compiled twice by mk/cuda.mk, once per
 * precision (HOLMES_GPU_FP32 defined: engine_cuda_fp32_ops; else engine_cuda_bf16_ops), each
 * against gpt_cuda.cu of the same precision, and linked only into the CUDA holmes-node.
 *
 * The trainer's buffers stay on the host (engine.h): this engine keeps the device stage in step
 * with them. Parameters are uploaded in the first forward after they changed (the forward hook
 * runs first, for all of them, so the ZeRO all-gather is complete); gradients are downloaded
 * when the trainer asks (engine_grads_fetch); activations cross in host fp32, converted to and
 * from the device's activation type. A tensor group (Megatron-LM, gpu_stage_create_tp) sums its
 * partial results through the trainer's function (engine_set_tp_sum), on host fp32 buffers. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

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
    int device;
    size_t act_n;       /* B*T*C */
    int T, tp;
    void *in_dev, *out_dev; /* activations in, out (device, activation type) */
    int params_dirty;   /* host parameters changed since the last upload */
    int grads_dirty;    /* device gradients changed since the last download */
};

static struct cuda_engine *ce_of(struct engine *en) { return en->impl; }

static void cuda_destroy(struct engine *en)
{
    struct cuda_engine *c = ce_of(en);
    if (c) {
        cudaSetDevice(c->device);
        gpu_act_free(c->in_dev);
        gpu_act_free(c->out_dev);
        gpu_stage_free(c->g);
        free(c);
    }
    gpt_stage_free(en->host);
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
    /* the host stage: layout (this tensor rank's) and the trainer's buffers; no micro-batch of
     * its own */
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
    c->act_n = (size_t)s->B * (size_t)s->T * (size_t)s->model.channels;
    c->T = s->T;
    c->tp = s->tp;
    c->params_dirty = 1;
    if (gpu_stage_create_tp(&c->g, &s->model, s->first, s->last, s->B, s->T, s->slots, 0, s->tp,
                            s->tp_rank, e) != 0 ||
        (s->first > 0 && !(c->in_dev = gpu_act_alloc(c->act_n, e))) ||
        (s->last < s->model.layers && !(c->out_dev = gpu_act_alloc(c->act_n, e)))) {
        cuda_destroy(en);
        en->impl = NULL;
        en->host = NULL;
        return -1;
    }
    if (gpu_stage_num_params(c->g) != gpt_stage_num_params(en->host)) {
        cuda_destroy(en);
        en->impl = NULL;
        en->host = NULL;
        return herr_set(e, "CUDA engine: %zu parameters, the host stage %zu (layouts differ)",
                        gpu_stage_num_params(c->g), gpt_stage_num_params(en->host));
    }
    gpu_stage_set_tp_sum(c->g, en->tp_sum, en->tp_ctx);
    return 0;
}

static int cuda_init_params(struct engine *en, uint64_t seed, herr *e)
{
    (void)e;
    gpt_stage_init_params(en->host, seed); /* the same numbers as gpu_stage_init_params */
    ce_of(en)->params_dirty = 1;
    return 0;
}

static int upload_params(struct engine *en)
{
    struct cuda_engine *c = ce_of(en);
    if (en->fwd_hook && en->fwd_hook(en->fwd_ctx, 0, gpt_stage_num_params(en->host)) != 0)
        return engine_fail(en, "waiting for the parameters");
    if (c->params_dirty && gpu_stage_set_params(c->g, gpt_stage_params(en->host)) != 0)
        return engine_fail(en, "uploading parameters: %s", gpu_stage_error(c->g));
    c->params_dirty = 0;
    return 0;
}

/* Token slices (TeraPipe): gpu_stage_forward_slice / _backward_slice, for tensor 1 only (as
 * gpt_pass.c). Returns the activation elements of the slice ([B][t1 - t0][C]) through *n. */
static int slice_check(struct engine *en, int t0, int t1, size_t *n)
{
    struct cuda_engine *c = ce_of(en);
    if (t0 < 0 || t1 > c->T || t0 >= t1)
        return engine_fail(en, "token slice [%d, %d) is not inside [0, %d) or is empty", t0, t1,
                           c->T);
    if (!(t0 == 0 && t1 == c->T) && c->tp > 1)
        return engine_fail(en, "token slices [%d, %d) of %d with tensor parallelism (%d): the CUDA "
                           "engine slices only tensor 1", t0, t1, c->T, c->tp);
    *n = c->act_n / (size_t)c->T * (size_t)(t1 - t0);
    return 0;
}

static int cuda_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                        const float *in_act, const int *targets, float *out_act, float *loss)
{
    struct cuda_engine *c = ce_of(en);
    herr e;
    size_t n;
    if (slice_check(en, t0, t1, &n) != 0)
        return -1;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return engine_fail(en, "CUDA device %d lost", c->device);
    if (upload_params(en) != 0)
        return -1;
    if (c->in_dev && gpu_act_upload(c->in_dev, in_act, n, &e) != 0)
        return engine_fail(en, "forward: %s", e.msg);
    if (gpu_stage_forward_slice(c->g, slot, t0, t1, tokens, c->in_dev, targets, c->out_dev,
                                loss) != 0)
        return engine_fail(en, "%s", gpu_stage_error(c->g));
    if (c->out_dev && gpu_act_download(out_act, c->out_dev, n, &e) != 0)
        return engine_fail(en, "forward: %s", e.msg);
    return 0;
}

static int cuda_backward(struct engine *en, int slot, int t0, int t1, const float *dout,
                         float *din, float loss_scale)
{
    struct cuda_engine *c = ce_of(en);
    herr e;
    size_t n;
    if (slice_check(en, t0, t1, &n) != 0)
        return -1;
    if (cudaSetDevice(c->device) != cudaSuccess)
        return engine_fail(en, "CUDA device %d lost", c->device);
    /* on the last stage out_dev is absent and dout unused; elsewhere out_dev carries dout */
    if (c->out_dev && gpu_act_upload(c->out_dev, dout, n, &e) != 0)
        return engine_fail(en, "backward: %s", e.msg);
    if (gpu_stage_backward_slice(c->g, slot, t0, t1, c->out_dev, c->in_dev, loss_scale) != 0)
        return engine_fail(en, "%s", gpu_stage_error(c->g));
    c->grads_dirty = 1;
    if (c->in_dev && gpu_act_download(din, c->in_dev, n, &e) != 0)
        return engine_fail(en, "backward: %s", e.msg);
    return 0;
}

static int cuda_zero_grads(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    memset(gpt_stage_grads(en->host), 0, gpt_stage_num_params(en->host) * sizeof(float));
    c->params_dirty = 1; /* a new step: the optimizer wrote the parameters */
    c->grads_dirty = 0;
    if (cudaSetDevice(c->device) != cudaSuccess || gpu_stage_zero_grads(c->g) != 0)
        return herr_set(e, "CUDA engine: zeroing gradients: %s", gpu_stage_error(c->g));
    return 0;
}

static int cuda_grads_fetch(struct engine *en, herr *e)
{
    struct cuda_engine *c = ce_of(en);
    if (!c->grads_dirty)
        return 0;
    if (cudaSetDevice(c->device) != cudaSuccess ||
        gpu_stage_get_grads(c->g, gpt_stage_grads(en->host)) != 0)
        return herr_set(e, "CUDA engine: downloading gradients: %s", gpu_stage_error(c->g));
    c->grads_dirty = 0;
    return 0;
}

static void cuda_params_changed(struct engine *en) { ce_of(en)->params_dirty = 1; }

/* the forward hook runs in upload_params; no per-block backward hook; the tensor group's sum
 * goes to the device stage */
static void cuda_hooks_changed(struct engine *en)
{
    struct cuda_engine *c = ce_of(en);
    if (c && c->g)
        gpu_stage_set_tp_sum(c->g, en->tp_sum, en->tp_ctx);
}

static const char *cuda_error(const struct engine *en) { return en->err; }

const struct engine_ops ENGINE_OPS = {
    .name = ENGINE_NAME,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .init_params = cuda_init_params,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .zero_grads = cuda_zero_grads,
    .grads_fetch = cuda_grads_fetch,
    .params_changed = cuda_params_changed,
    .hooks_changed = cuda_hooks_changed,
    .error = cuda_error,
};
