/* The optimizer (llm.c's adamw.cuh and global_norm.cuh): AdamW over any range of the stage's
 * parameters (a ZeRO-1 shard) with optimizer.h's formula, and the gradient's sum of squares in a
 * fixed reduction order. */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* AdamW over n elements in one launch: element i is parameter lo + i (p, g, m, v, and pX when
 * given, each point at parameter lo's place); seg_end (ascending) gives each tensor's end and
 * seg_decay whether weight decay applies; pX (bf16 mode) receives the updated weights. */
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, floatX *pX,
                             const size_t *seg_end, const int *seg_decay, int nseg, size_t lo,
                             size_t n, float lr, float b1, float b2, float eps, float wd,
                             float bc1, float bc2, float gs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t at = lo + i;
    int a = 0, b = nseg - 1;
    while (a < b) {
        int mid = (a + b) / 2;
        if (seg_end[mid] > at)
            b = mid;
        else
            a = mid + 1;
    }
    float w = seg_decay[a] ? wd : 0.0f;
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mh = mi / bc1, vh = vi / bc2;
    float pi = p[i] - lr * (mh / (sqrtf(vh) + eps) + w * p[i]);
    p[i] = pi;
    if (pX)
        put(pX + i, pi);
}

/* fixed grid (SQ_BLOCKS blocks): partial[block] = sum of g^2 over a grid-stride, in fp64 */
__global__ void sq_partial_kernel(double *partial, const float *g, size_t lo, size_t hi)
{
    double s = 0.0;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* out[0] = the sum of partial[0, n) in a fixed order (one block) */
__global__ void sq_final_kernel(double *out, const double *partial, size_t n)
{
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += partial[i];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0)
        out[0] = s;
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
    char *EB = s->err;
    size_t EN = sizeof s->err;
    double h[SQ_BLOCKS];
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "gradient range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    sq_partial_kernel<<<SQ_BLOCKS, 256, 0, s->x.stream>>>(s->sq_partial, s->grads, lo, hi);
    LAUNCHED(s->x.stream);
    OK(d2h(s, h, s->sq_partial, sizeof h));
    double sum = 0.0;
    for (int i = 0; i < SQ_BLOCKS; i++)
        sum += h[i];
    *out = sum;
    return 0;
}

int gpu_stage_adamw(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                    float lr, long step, float grad_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    if (step < 1)
        return stage_fail(s, "AdamW step counts from 1 (got %ld)", step);
    if (s->no_moments)
        return stage_fail(s, "this stage keeps no AdamW moments (GPU_NO_MOMENTS): gpu_stage_adamw_ex");
    if (hi == lo)
        return 0;
    float bc1 = 1.0f - powf(o->beta1, (float)step);
    float bc2 = 1.0f - powf(o->beta2, (float)step);
#ifdef HOLMES_GPU_FP32
    floatX *px = NULL;
#else
    floatX *px = s->wX;
#endif
    adamw_kernel<<<blocks_for(hi - lo, 256), 256, 0, s->x.stream>>>(
        s->params + lo, s->grads + lo, s->m + lo, s->v + lo, px ? px + lo : NULL, s->seg_end,
        s->seg_decay, s->ntensors, lo, hi - lo, lr, o->beta1, o->beta2, o->eps, o->weight_decay,
        bc1, bc2, grad_scale);
    LAUNCHED(s->x.stream);
    return 0;
}

int gpu_stage_adamw_ex(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                       float *p, const float *g, float *m, float *v, float lr, long step,
                       float grad_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    if (step < 1)
        return stage_fail(s, "AdamW step counts from 1 (got %ld)", step);
    if (hi == lo)
        return 0;
    float bc1 = 1.0f - powf(o->beta1, (float)step);
    float bc2 = 1.0f - powf(o->beta2, (float)step);
    adamw_kernel<<<blocks_for(hi - lo, 256), 256, 0, s->x.stream>>>(
        p, g, m, v, NULL, s->seg_end, s->seg_decay, s->ntensors, lo, hi - lo, lr, o->beta1,
        o->beta2, o->eps, o->weight_decay, bc1, bc2, grad_scale);
    LAUNCHED(s->x.stream);
    return 0;
}

int gpu_stage_sq_norm_ranges(struct gpu_stage *s, const float *base, const size_t *lo,
                             const size_t *hi, int n, double *out)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    *out = 0.0;
    if (n < 0)
        return stage_fail(s, "gradient norm: %d ranges", n);
    if (n > s->sq_cap) { /* grown once: the trainer's ranges do not change */
        if (s->sq_parts)
            cudaFree(s->sq_parts);
        s->sq_parts = NULL;
        s->sq_cap = 0;
        CK(cudaMalloc((void **)&s->sq_parts, ((size_t)n * SQ_BLOCKS + 1) * sizeof(double)));
        s->sq_cap = n;
    }
    if (n == 0)
        return 0;
    for (int r = 0; r < n; r++) {
        if (lo[r] > hi[r])
            return stage_fail(s, "gradient norm: range %d [%zu, %zu) is reversed", r, lo[r], hi[r]);
        sq_partial_kernel<<<SQ_BLOCKS, 256, 0, s->x.stream>>>(s->sq_parts + (size_t)r * SQ_BLOCKS,
                                                              base, lo[r], hi[r]);
        LAUNCHED(s->x.stream);
    }
    double *total = s->sq_parts + (size_t)n * SQ_BLOCKS;
    sq_final_kernel<<<1, 256, 0, s->x.stream>>>(total, s->sq_parts, (size_t)n * SQ_BLOCKS);
    LAUNCHED(s->x.stream);
    return d2h(s, out, total, sizeof *out);
}
