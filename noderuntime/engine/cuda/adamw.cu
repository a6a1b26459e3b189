/* The optimizer (llm.c's adamw.cuh and global_norm.cuh): AdamW over spans of the stage's
 * parameters (ZeRO-1 shards), on the stage's buffers or on buffers held outside it, with
 * optimizer.h's formula (adamw_math.h), 16-byte loads and stores where the buffers allow, and
 * sums of squares in a fixed reduction order; up to 48 spans or 128 ranges a launch. The kernels
 * are adamw_kernels.cuh's (also run on the host by tests/unit/adamw_emu.cc). */
#include "adamw_math.h"
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* 4 floats, 16-byte aligned */
typedef float4 f4;
__device__ __forceinline__ f4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ void store4(float *p, f4 x) { *reinterpret_cast<float4 *>(p) = x; }

#include "adamw_kernels.cuh"

/* the squares of each range [lo[r], hi[r]) of base into sq_partial (sq_blocks of each, in range
 * order; up to SQ_LAUNCH_RANGES ranges a launch), their sum on the device in a fixed order, read
 * back: one synchronisation */
int sq_ranges(struct gpu_stage *s, const float *base, const size_t *lo, const size_t *hi, int n,
              double *out)
{
    PROF(&s->x, GPU_PART_NORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    size_t need = 1;
    for (int r = 0; r < n; r++)
        need += sq_blocks(hi[r] - lo[r]);
    *out = 0.0;
    if (need == 1)
        return 0;
    if (need > s->sq_cap) { /* grown once: the trainer's ranges do not change */
        double *np = NULL;
        OK(sync_stream(s->x.stream, EB, EN)); /* the old buffer is no longer read */
        CK(cudaMalloc((void **)&np, need * sizeof(double)));
        cudaFree(s->sq_partial);
        s->sq_partial = np;
        s->sq_cap = need;
    }
    size_t done = 0; /* partials written by the launches so far */
    struct sq_launch L;
    unsigned blocks;
    for (int r = 0; (blocks = sq_next_launch(&L, base, lo, hi, n, &r)) > 0; done += blocks) {
        sq_partial_kernel<<<blocks, SQ_THREADS, 0, s->x.stream>>>(s->sq_partial + done, L);
        LAUNCHED(s->x.stream);
    }
    double *total = s->sq_partial + done;
    sq_final_kernel<<<1, 1024, 0, s->x.stream>>>(total, s->sq_partial, done);
    LAUNCHED(s->x.stream);
    return d2h(s, out, total, sizeof *out);
}

} /* namespace */

/* The tensor table to the device: where each tensor ends and whether it decays (AdamW).
 * 0, or -1 (message in EB). */
int adamw_table_upload(struct gpu_stage *s, char *EB, size_t EN)
{
    size_t *h_end = (size_t *)malloc((size_t)s->ntensors * sizeof(size_t));
    int *h_dec = (int *)malloc((size_t)s->ntensors * sizeof(int));
    if (!h_end || !h_dec) {
        free(h_end);
        free(h_dec);
        fail_msg(EB, EN, "out of memory allocating the GPU stage");
        return -1;
    }
    for (int i = 0; i < s->ntensors; i++) {
        h_end[i] = s->tensors[i].offset + s->tensors[i].size;
        h_dec[i] = s->tensors[i].decay;
    }
    cudaError_t c1 = cudaMemcpy(s->seg_end, h_end, (size_t)s->ntensors * sizeof(size_t), cudaMemcpyHostToDevice);
    cudaError_t c2 = cudaMemcpy(s->seg_decay, h_dec, (size_t)s->ntensors * sizeof(int), cudaMemcpyHostToDevice);
    free(h_end);
    free(h_dec);
    if (c1 != cudaSuccess || c2 != cudaSuccess) {
        fail_msg(EB, EN, "CUDA: copying the tensor table: %s",
                 cudaGetErrorString(c1 != cudaSuccess ? c1 : c2));
        return -1;
    }
    return 0;
}

} /* namespace GPU_NS */

using namespace GPU_NS;

int gpu_stage_grad_sq_norm(struct gpu_stage *s, size_t lo, size_t hi, double *out)
{
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "gradient range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    OK(grads_materialise(s));
    return sq_ranges(s, s->grads, &lo, &hi, 1, out);
}

int gpu_stage_sq_norm_ex(struct gpu_stage *s, const float *g, size_t n, double *out)
{
    size_t lo = 0;
    return sq_ranges(s, g, &lo, &n, 1, out);
}

int gpu_stage_sq_norm_ranges(struct gpu_stage *s, const float *base, const size_t *lo,
                             const size_t *hi, int n, double *out)
{
    for (int r = 0; r < n; r++)
        if (lo[r] > hi[r])
            return stage_fail(s, "norm range %d: [%zu, %zu) is empty backwards", r, lo[r], hi[r]);
    if (n < 0)
        return stage_fail(s, "norm ranges: count %d", n);
    return sq_ranges(s, base, lo, hi, n, out);
}

int gpu_stage_adamw(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                    float lr, long step, float grad_scale)
{
    if (!s->m)
        return stage_fail(s, "gpu_stage_adamw: the stage was created with GPU_NO_MOMENTS (use "
                          "gpu_stage_adamw_ex with the shard's moments)");
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    OK(grads_materialise(s));
    struct adamw_span a = {lo, hi, s->params + lo, s->grads + lo, s->m + lo, s->v + lo};
    return gpu_stage_adamw_spans(s, o, &a, 1, lr, step, grad_scale);
}

int gpu_stage_adamw_ex(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                       float *p, const float *g, float *m, float *v, float lr, long step,
                       float grad_scale)
{
    if (!p || !g || !m || !v)
        return stage_fail(s, "gpu_stage_adamw_ex: p, g, m and v must be device buffers");
    struct adamw_span a = {lo, hi, p, g, m, v};
    return gpu_stage_adamw_spans(s, o, &a, 1, lr, step, grad_scale);
}

int gpu_stage_adamw_spans(struct gpu_stage *s, const struct adamw_config *o,
                          const struct adamw_span *sp, int n, float lr, long step,
                          float grad_scale)
{
    PROF(&s->x, GPU_PART_OPTIMIZER);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (n < 0)
        return stage_fail(s, "AdamW: %d spans", n);
    for (int i = 0; i < n; i++) {
        if (sp[i].hi > s->nparams || sp[i].lo > sp[i].hi)
            return stage_fail(s, "AdamW span %d: parameter range [%zu, %zu) is outside [0, %zu)", i,
                              sp[i].lo, sp[i].hi, s->nparams);
        if (sp[i].hi > sp[i].lo && (!sp[i].p || !sp[i].g || !sp[i].m || !sp[i].v))
            return stage_fail(s, "AdamW span %d: p, g, m and v must be device buffers", i);
    }
    if (step < 1)
        return stage_fail(s, "AdamW step counts from 1 (got %ld)", step);
    struct adamw_coef k = adamw_coef_make(lr, o->beta1, o->beta2, o->eps, step);
#ifdef HOLMES_GPU_FP32
    floatX *wX = NULL;
#else
    floatX *wX = s->wX; /* the stage's own parameters' bf16 copy, written in the same pass */
#endif
    struct adamw_launch L;
    unsigned blocks;
    for (int i = 0; (blocks = adamw_next_launch(&L, sp, n, &i, s->params, wX)) > 0;) {
        adamw_kernel<<<blocks, ADAMW_THREADS, 0, s->x.stream>>>(L, s->seg_end, s->seg_decay,
                                                                s->ntensors, k, o->weight_decay,
                                                                grad_scale);
        LAUNCHED(s->x.stream);
    }
    return 0;
}
