/* The optimizer (llm.c's adamw.cuh and global_norm.cuh): AdamW over any range of the stage's
 * parameters (a ZeRO-1 shard), on the stage's buffers or on buffers held outside it, with
 * optimizer.h's formula (adamw_math.h), 16-byte loads and stores where the buffers allow, and
 * sums of squares in a fixed reduction order. Each block finds the tensor of its first element
 * once (the tensor table: where each ends, whether it decays); its threads step on from there. */
#include "adamw_math.h"
#include "stage.cuh"

#define ADAMW_THREADS 256
#define ADAMW_ELEMS 4 /* elements a thread, ADAMW_THREADS apart */

namespace GPU_NS {

namespace {

/* AdamW over parameters [lo, hi): p, g, m, v point at element lo's; the tensor table seg_end
 * (ascending ends) and seg_decay gives weight decay; pX (bf16 mode, may be NULL) receives the
 * updated weights. A thread takes VEC consecutive elements (VEC 4: 16-byte loads and stores, the
 * four buffers 16-byte aligned), ADAMW_ELEMS times, ADAMW_THREADS * VEC apart; a block covers
 * ADAMW_THREADS * ADAMW_ELEMS * VEC elements. */
template <int VEC>
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, floatX *pX,
                             const size_t *seg_end, const int *seg_decay, int nseg, size_t lo,
                             size_t hi, struct adamw_coef k, float wd, float gs)
{
    __shared__ int seg0;
    size_t base = lo + (size_t)blockIdx.x * ADAMW_THREADS * ADAMW_ELEMS * VEC;
    if (threadIdx.x == 0) { /* the tensor of the block's first element */
        int a = 0, b = nseg - 1;
        while (a < b) {
            int mid = (a + b) / 2;
            if (seg_end[mid] > base)
                b = mid;
            else
                a = mid + 1;
        }
        seg0 = a;
    }
    __syncthreads();
    int seg = seg0;
    for (int e = 0; e < ADAMW_ELEMS; e++) {
        size_t i0 = base + ((size_t)e * ADAMW_THREADS + threadIdx.x) * VEC;
        if (i0 >= hi)
            return;
        size_t j0 = i0 - lo;
        if (VEC == 4 && i0 + 3 < hi) {
            float4 pp = *reinterpret_cast<const float4 *>(p + j0);
            float4 gg = *reinterpret_cast<const float4 *>(g + j0);
            float4 mm = *reinterpret_cast<const float4 *>(m + j0);
            float4 vv = *reinterpret_cast<const float4 *>(v + j0);
            float *pa = &pp.x, *ga = &gg.x, *ma = &mm.x, *va = &vv.x;
            for (int q = 0; q < 4; q++) {
                while (seg < nseg - 1 && i0 + q >= seg_end[seg])
                    seg++;
                adamw_elem(&k, &pa[q], &ma[q], &va[q], ga[q], gs, seg_decay[seg] ? wd : 0.0f);
                if (pX)
                    put(pX + j0 + q, pa[q]);
            }
            *reinterpret_cast<float4 *>(p + j0) = pp;
            *reinterpret_cast<float4 *>(m + j0) = mm;
            *reinterpret_cast<float4 *>(v + j0) = vv;
            continue;
        }
        for (int q = 0; q < VEC && i0 + q < hi; q++) { /* VEC 1, or the range's last elements */
            size_t j = j0 + q;
            while (seg < nseg - 1 && i0 + q >= seg_end[seg])
                seg++;
            float pj = p[j], mj = m[j], vj = v[j];
            adamw_elem(&k, &pj, &mj, &vj, g[j], gs, seg_decay[seg] ? wd : 0.0f);
            p[j] = pj;
            m[j] = mj;
            v[j] = vj;
            if (pX)
                put(pX + j, pj);
        }
    }
}

/* fixed grid (SQ_BLOCKS blocks): partial[block] = sum of g[0, n)^2 over a grid-stride, in fp64 */
__global__ void sq_partial_kernel(double *partial, const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
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

/* the squares of each range [lo[r], hi[r]) of base into sq_partial[r SQ_BLOCKS ...], their sum
 * on the device in a fixed order, read back: one synchronisation */
int sq_ranges(struct gpu_stage *s, const float *base, const size_t *lo, const size_t *hi, int n,
              double *out)
{
    PROF(&s->x, GPU_PART_NORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    size_t need = (size_t)n * SQ_BLOCKS + 1;
    *out = 0.0;
    if (n == 0)
        return 0;
    if (need > s->sq_cap) { /* grown once: the trainer's ranges do not change */
        double *np = NULL;
        OK(sync_stream(s->x.stream, EB, EN)); /* the old buffer is no longer read */
        CK(cudaMalloc((void **)&np, need * sizeof(double)));
        cudaFree(s->sq_partial);
        s->sq_partial = np;
        s->sq_cap = need;
    }
    for (int r = 0; r < n; r++) {
        sq_partial_kernel<<<SQ_BLOCKS, 256, 0, s->x.stream>>>(s->sq_partial + (size_t)r * SQ_BLOCKS,
                                                              base + lo[r], hi[r] - lo[r]);
        LAUNCHED(s->x.stream);
    }
    double *total = s->sq_partial + (size_t)n * SQ_BLOCKS;
    sq_final_kernel<<<1, 1024, 0, s->x.stream>>>(total, s->sq_partial, (size_t)n * SQ_BLOCKS);
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

int adamw_run(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi, float *p,
              const float *g, float *m, float *v, floatX *pX, float lr, long step,
              float grad_scale)
{
    PROF(&s->x, GPU_PART_OPTIMIZER);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    if (step < 1)
        return stage_fail(s, "AdamW step counts from 1 (got %ld)", step);
    if (hi == lo)
        return 0;
    struct adamw_coef k = adamw_coef_make(lr, o->beta1, o->beta2, o->eps, step);
    uintptr_t al = (uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v;
    if (al % 16 == 0) {
        size_t per = (size_t)ADAMW_THREADS * ADAMW_ELEMS * 4;
        adamw_kernel<4><<<(unsigned)((hi - lo + per - 1) / per), ADAMW_THREADS, 0, s->x.stream>>>(
            p, g, m, v, pX, s->seg_end, s->seg_decay, s->ntensors, lo, hi, k, o->weight_decay,
            grad_scale);
    } else {
        size_t per = (size_t)ADAMW_THREADS * ADAMW_ELEMS;
        adamw_kernel<1><<<(unsigned)((hi - lo + per - 1) / per), ADAMW_THREADS, 0, s->x.stream>>>(
            p, g, m, v, pX, s->seg_end, s->seg_decay, s->ntensors, lo, hi, k, o->weight_decay,
            grad_scale);
    }
    LAUNCHED(s->x.stream);
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
#ifdef HOLMES_GPU_FP32
    floatX *px = NULL;
#else
    floatX *px = s->wX + lo;
#endif
    return adamw_run(s, o, lo, hi, s->params + lo, s->grads + lo, s->m + lo, s->v + lo, px, lr,
                     step, grad_scale);
}

int gpu_stage_adamw_ex(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                       float *p, const float *g, float *m, float *v, float lr, long step,
                       float grad_scale)
{
    if (!p || !g || !m || !v)
        return stage_fail(s, "gpu_stage_adamw_ex: p, g, m and v must be device buffers");
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
#ifdef HOLMES_GPU_FP32
    floatX *px = NULL;
#else
    /* the stage's own parameters: their bf16 copy written in the same pass (as gpu_stage_adamw
     * does), instead of a refresh that reads them again before the next forward */
    floatX *px = p == s->params + lo ? s->wX + lo : NULL;
#endif
    return adamw_run(s, o, lo, hi, p, g, m, v, px, lr, step, grad_scale);
}
