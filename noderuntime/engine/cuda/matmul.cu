/* Matrix products (llm.c's matmul.cuh): the linear layers' forward and backward on cuBLASLt's
 * products with bias / GELU epilogues (matmul_lt.cu: the products, their cache and the choice of
 * algorithm; the bias gradients' column sums are layernorm.cu's), GELU, the attention's batched
 * products, and the GEMM ceiling benchmark (gpu_gemm_tflops). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ float gelu_f(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}
/* n elements, VEC a thread (n a multiple of VEC) */
template <int VEC>
__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i >= n)
        return;
    if (VEC > 1) {
        pack16<floatX> p = load16(inp + i), o;
        for (int j = 0; j < VEC; j++)
            put(&o.v[j], gelu_f(tof(p.v[j])));
        store16(out + i, o);
    } else {
        put(out + i, gelu_f(tof(inp[i])));
    }
}
__device__ __forceinline__ float gelu_grad(float x)
{
    float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
template <int VEC>
__global__ void gelu_backward_kernel(floatX *d, const floatX *inp, size_t n)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i >= n)
        return;
    if (VEC > 1) {
        pack16<floatX> p = load16(inp + i), g = load16(d + i);
        for (int j = 0; j < VEC; j++)
            put(&g.v[j], tof(g.v[j]) * gelu_grad(tof(p.v[j])));
        store16(d + i, g);
    } else {
        put(d + i, tof(d[i]) * gelu_grad(tof(inp[i])));
    }
}
__global__ void bias_add_kernel(floatX *out, const floatX *bias, size_t n, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, tof(out[i]) + tof(bias[i % OC]));
}

/* uniform [-1, 1) from a hash of the index: benchmark inputs, never zeros */
__global__ void fill_random_kernel(floatX *out, size_t n, unsigned seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
        put(out + i, (float)x * (2.0f / 4294967296.0f) - 1.0f);
    }
}


/* matmul with the arguments of a gemm_plan (gemm_plan.h, checked on the CPU by
 * tests/unit/test_cuda_gemm_plan.c) */
int matmul_plan(struct gpu_ctx *x, struct gemm_plan p, void *D, cudaDataType dtype, const void *A,
                const void *B, float alpha, float beta, const void *C, int epi, const void *bias,
                void *aux, int ldaux)
{
    return matmul(x, D, dtype, A, p.ta, B, p.tb, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, alpha, beta,
                  C, epi, bias, aux, ldaux);
}

} /* namespace */

/* ---------------------------------------------------------------- linear layers */

/* Row-major out[N][OC] = inp[N][IC] @ w[OC][IC]^T (+ bias) (+ res). With gelu_out: out gets the
 * pre-activation and gelu_out = gelu(out) (the GELU_AUX_BIAS epilogue when cuBLASLt has it). */
int linear_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, const floatX *w,
               const floatX *bias, const floatX *res, floatX *gelu_out, int N, int IC, int OC)
{
    PROF(x, GPU_PART_MATMUL);
    char *EB = x->eb;
    size_t EN = x->en;
    size_t n = (size_t)N * OC;
    if (gelu_out) {
        int rc = matmul_plan(x, plan_linear_fwd(N, IC, OC), gelu_out, CUDA_X, w, inp, 1.0f, 0.0f,
                             NULL, EPI_GELU_BIAS, bias, out, OC);
        if (rc <= 0)
            return rc;
    }
    int rc = bias ? matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_X, w, inp, 1.0f,
                                res ? 1.0f : 0.0f, res, EPI_BIAS, bias, NULL, 0) : 1;
    if (rc < 0)
        return -1;
    if (rc == 1) { /* no bias epilogue: plain product, then the bias */
        OK(matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_X, w, inp, 1.0f,
                       res ? 1.0f : 0.0f, res, EPI_NONE, NULL, NULL, 0));
        if (bias) {
            bias_add_kernel<<<blocks_for(n, 256), 256, 0, x->stream>>>(out, bias, n, OC);
            LAUNCHED(x->stream);
        }
    }
    if (gelu_out)
        OK(gelu_fwd(x, gelu_out, out, n));
    return 0;
}

int gelu_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, size_t n)
{
    PROF(x, GPU_PART_MATMUL);
    char *EB = x->eb;
    size_t EN = x->en;
    if (n % XV == 0 && align_of(out) >= 16 && align_of(inp) >= 16)
        gelu_forward_kernel<XV><<<blocks_for(n / XV, 256), 256, 0, x->stream>>>(out, inp, n);
    else
        gelu_forward_kernel<1><<<blocks_for(n, 256), 256, 0, x->stream>>>(out, inp, n);
    LAUNCHED(x->stream);
    return 0;
}

/* linear_bwd's work on the context's stream: dinp (times gelu'(dgelu_pre) when given), dw when
 * with_dw, dbias */
static int linear_bwd_main(struct gpu_ctx *x, float *partial, floatX *dinp, float *dw,
                           float *dbias, const floatX *dout, const floatX *inp, const floatX *w,
                           const floatX *dgelu_pre, int N, int IC, int OC, float alpha, int with_dw)
{
    char *EB = x->eb;
    size_t EN = x->en;
    int rc = dinp ? 1 : 0;
    if (dinp && dgelu_pre)
        rc = matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_X, w, dout, alpha, 0.0f, NULL,
                         EPI_DGELU, NULL, (void *)dgelu_pre, IC);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        OK(matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_X, w, dout, alpha, 0.0f, NULL,
                       EPI_NONE, NULL, NULL, 0));
        if (dgelu_pre) {
            size_t n = (size_t)N * IC;
            if (n % XV == 0 && align_of(dinp) >= 16 && align_of(dgelu_pre) >= 16)
                gelu_backward_kernel<XV><<<blocks_for(n / XV, 256), 256, 0, x->stream>>>(
                    dinp, dgelu_pre, n);
            else
                gelu_backward_kernel<1><<<blocks_for(n, 256), 256, 0, x->stream>>>(dinp, dgelu_pre, n);
            LAUNCHED(x->stream);
        }
    }
    if (with_dw)
        OK(matmul_plan(x, plan_linear_dw(N, IC, OC), dw, CUDA_R_32F, inp, dout, alpha,
                       x->accum ? 1.0f : 0.0f, NULL, EPI_NONE, NULL, NULL, 0));
    if (dbias)
        OK(colsum(x, partial, dbias, dout, N, OC));
    return 0;
}

/* dinp[N][IC] = alpha dout @ w (overwritten; times gelu'(dgelu_pre) when given; dinp NULL: not
 * computed); dw[OC][IC] (+)= alpha dout^T @ inp (fp32); dbias[OC] (+)= column sums of dout */
int linear_bwd(struct gpu_ctx *x, float *partial, floatX *dinp, float *dw, float *dbias,
               const floatX *dout, const floatX *inp, const floatX *w, const floatX *dgelu_pre,
               int N, int IC, int OC, float alpha)
{
    PROF(x, GPU_PART_MATMUL);
    char *EB = x->eb;
    size_t EN = x->en;
    /* the weight gradient beside the input gradient (GPU_OVERLAP_WEIGHT_GRADS): forked after
     * what made dout and inp, joined before this returns, failed or not, so nothing later on
     * the stream (which may overwrite dout, as LayerNorm's backward does the residual
     * gradient) runs before it */
    struct gpu_ctx side = *x;
    int fork = x->side && x->warm && dinp && !(x->prof && x->prof->on);
    int rc = 0;
    if (fork) {
        side.stream = x->side;
        side.ws = x->ws_side;
        CK(cudaEventRecord(x->fork, x->stream));
        CK(cudaStreamWaitEvent(x->side, x->fork, 0));
        rc = matmul_plan(&side, plan_linear_dw(N, IC, OC), dw, CUDA_R_32F, inp, dout, alpha,
                         x->accum ? 1.0f : 0.0f, NULL, EPI_NONE, NULL, NULL, 0);
    }
    if (rc == 0)
        rc = linear_bwd_main(x, partial, dinp, dw, dbias, dout, inp, w, dgelu_pre, N, IC, OC,
                             alpha, !fork);
    if (fork) {
        CK(cudaEventRecord(x->join, x->side));
        CK(cudaStreamWaitEvent(x->stream, x->join, 0));
    }
    return rc;
}

/* Tensor parallelism's partial products, written in fp32 so that nothing is rounded to the
 * activation type before the group's sum: out[N][OC] = inp @ w^T (no bias) and
 * dinp[N][IC] = alpha dout @ w. */
int linear_fwd_f32(struct gpu_ctx *x, float *out, const floatX *inp, const floatX *w, int N,
                   int IC, int OC)
{
    PROF(x, GPU_PART_MATMUL);
    return matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_R_32F, w, inp, 1.0f, 0.0f, NULL,
                       EPI_NONE, NULL, NULL, 0);
}
int linear_dinp_f32(struct gpu_ctx *x, float *dinp, const floatX *w, const floatX *dout, int N,
                    int IC, int OC, float alpha)
{
    PROF(x, GPU_PART_MATMUL);
    return matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_R_32F, w, dout, alpha, 0.0f,
                       NULL, EPI_NONE, NULL, NULL, 0);
}

/* strided-batched products for attention (cuBLAS), arguments from a gemm_plan */
int bgemm(struct gpu_ctx *x, struct gemm_plan p, float alpha, const floatX *A, const floatX *B,
          floatX *D, int batch)
{
    PROF(x, GPU_PART_MATMUL);
    char *EB = x->eb;
    size_t EN = x->en;
    float beta = 0.0f;
    COUNT_LAUNCH();
    CKB(cublasGemmStridedBatchedEx(x->blas, p.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, p.m, p.n, p.k, &alpha, A,
                                   CUDA_X, p.lda, p.sa, B, CUDA_X, p.ldb, p.sb, &beta, D, CUDA_X,
                                   p.ldd, p.sd, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

} /* namespace GPU_NS */

using namespace GPU_NS;

/* ---------------------------------------------------------------- the GEMM ceiling */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int gpu_gemm_tflops(int n, int iters, double *tflops, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    struct gpu_ctx x;
    memset(&x, 0, sizeof x);
    x.eb = EB;
    x.en = EN;
    x.accum = 1;
    floatX *A = NULL, *B = NULL, *D = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *ms = (float *)calloc((size_t)(iters > 0 ? iters : 1), sizeof(float));
    int rc = -1;
    size_t nn = (size_t)n * n;
    if (!ms || n <= 0 || iters <= 0) {
        free(ms);
        return herr_set(e, "GEMM benchmark: size and iterations must be positive");
    }
#define GK(call) do { cudaError_t ce_ = (call); if (ce_ != cudaSuccess) { \
        fail_msg(EB, EN, "CUDA: %s: %s", #call, cudaGetErrorString(ce_)); goto out; } } while (0)
    GK(cudaStreamCreate(&x.stream));
    if (cublasLtCreate(&x.lt) != CUBLAS_STATUS_SUCCESS) {
        fail_msg(EB, EN, "cuBLASLt: cannot create a handle");
        goto out;
    }
    GK(cudaMalloc((void **)&A, nn * sizeof(floatX)));
    GK(cudaMalloc((void **)&B, nn * sizeof(floatX)));
    GK(cudaMalloc((void **)&D, nn * sizeof(floatX)));
    GK(cudaMalloc(&x.ws, LT_WORKSPACE));
    fill_random_kernel<<<blocks_for(nn, 256), 256, 0, x.stream>>>(A, nn, 1u);
    fill_random_kernel<<<blocks_for(nn, 256), 256, 0, x.stream>>>(B, nn, 2u);
    GK(cudaGetLastError());
    GK(cudaEventCreate(&e0));
    GK(cudaEventCreate(&e1));
    for (int i = -3; i < iters; i++) {
        GK(cudaEventRecord(e0, x.stream));
        if (matmul(&x, D, CUDA_X, A, 1, B, 0, n, n, n, n, n, n, 1.0f, 0.0f, NULL, EPI_NONE, NULL,
                   NULL, 0) != 0)
            goto out;
        GK(cudaEventRecord(e1, x.stream));
        GK(cudaEventSynchronize(e1));
        if (i >= 0)
            GK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)iters, sizeof(float), cmp_float);
    *tflops = 2.0 * n * (double)n * n / (ms[iters / 2] * 1e-3) / 1e12;
    rc = 0;
#undef GK
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(A);
    cudaFree(B);
    cudaFree(D);
    cudaFree(x.ws);
    gpu_ctx_release(&x);
    if (x.lt)
        cublasLtDestroy(x.lt);
    if (x.stream)
        cudaStreamDestroy(x.stream);
    free(ms);
    return rc;
}
