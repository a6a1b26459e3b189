/* Matrix products (llm.c's matmul.cuh): cuBLASLt with bias / GELU epilogues, the linear layers'
 * forward and backward on top, column sums (bias gradients), GELU, the attention's batched
 * products, and the GEMM ceiling benchmark (gpu_gemm_tflops). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* ---------------------------------------------------------------- kernels */

__device__ __forceinline__ float gelu_f(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}
__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, gelu_f(tof(inp[i])));
}
__global__ void gelu_backward_kernel(floatX *d, const floatX *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = tof(inp[i]);
    float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    put(d + i, tof(d[i]) * g);
}
__global__ void bias_add_kernel(floatX *out, const floatX *bias, size_t n, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, tof(out[i]) + tof(bias[i % OC]));
}

/* Column sums over rows in chunks of COLSUM_ROWS: partial[chunk][0][c] = sum d*xhat (when x is
 * given: LayerNorm weight gradient), partial[chunk][1][c] = sum d (bias gradient). */
__global__ void colsum_partial_kernel(float *partial, const floatX *d, const floatX *x,
                                      const float *mean, const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C)
        return;
    int r0 = chunk * COLSUM_ROWS, r1 = min(N, r0 + COLSUM_ROWS);
    float s0 = 0.0f, s1 = 0.0f;
    for (int r = r0; r < r1; r++) {
        float dv = tof(d[(size_t)r * C + c]);
        s1 += dv;
        if (x)
            s0 += dv * (tof(x[(size_t)r * C + c]) - mean[r]) * rstd[r];
    }
    partial[((size_t)chunk * 2 + 0) * C + c] = s0;
    partial[((size_t)chunk * 2 + 1) * C + c] = s1;
}
__global__ void colsum_finish_kernel(float *gw, float *gb, const float *partial, int chunks, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int k = 0; k < chunks; k++) {
        s0 += partial[((size_t)k * 2 + 0) * C + c];
        s1 += partial[((size_t)k * 2 + 1) * C + c];
    }
    if (gw)
        gw[c] += s0;
    if (gb)
        gb[c] += s1;
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

int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

/* matmul with the arguments of a gemm_plan (gemm_plan.h, checked on the CPU by
 * tests/unit/test_cuda_gemm_plan.c) */
int matmul_plan(struct gpu_ctx *x, struct gemm_plan p, void *D, cudaDataType dtype, const void *A,
                const void *B, float beta, const void *C, int epi, const void *bias, void *aux,
                int ldaux)
{
    return matmul(x, D, dtype, A, p.ta, B, p.tb, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, 1.0f, beta,
                  C, epi, bias, aux, ldaux);
}

} /* namespace */

/* ---------------------------------------------------------------- cuBLASLt matrix products */

/* Column-major D(m x n) = alpha * op(A) op(B) + beta * C (+ epilogue), A and B of the activation
 * type, C and D of dtype (C NULL: D itself). Without an epilogue, a product cuBLASLt has no
 * algorithm for goes to cublasGemmEx; with one, 1 is returned (no error set) so that the caller
 * falls back to separate kernels. */
int matmul(struct gpu_ctx *x, void *D, cudaDataType dtype, const void *A, int ta, const void *B,
           int tb, int m, int n, int k, int lda, int ldb, int ldd, float alpha, float beta,
           const void *C, int epi, const void *bias, void *aux, int ldaux)
{
    char *EB = x->eb;
    size_t EN = x->en;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int nres = 0, rc = -1;
    cublasStatus_t st;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
    uint64_t ws = LT_WORKSPACE;
    uint32_t aa = (uint32_t)align_of(A), ab = (uint32_t)align_of(B);
    uint32_t ac = (uint32_t)align_of(C ? C : D), ad = (uint32_t)align_of(D);
    int64_t ldaux64 = ldaux;
#define LTCK(call) do { st = (call); if (st != CUBLAS_STATUS_SUCCESS) { \
        fail_msg(EB, EN, "cuBLASLt: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                 cublasGetStatusString(st)); goto done; } } while (0)
    LTCK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (epi == EPI_BIAS)
        e = CUBLASLT_EPILOGUE_BIAS;
    else if (epi == EPI_GELU_BIAS)
        e = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    else if (epi == EPI_DGELU)
        e = CUBLASLT_EPILOGUE_DGELU;
    LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (epi == EPI_BIAS || epi == EPI_GELU_BIAS)
        LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epi == EPI_GELU_BIAS || epi == EPI_DGELU) {
        LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        LTCK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux64, sizeof ldaux64));
    }
    LTCK(cublasLtMatrixLayoutCreate(&la, CUDA_X, ta ? k : m, ta ? m : k, lda));
    LTCK(cublasLtMatrixLayoutCreate(&lb, CUDA_X, tb ? n : k, tb ? k : n, ldb));
    LTCK(cublasLtMatrixLayoutCreate(&lc, dtype, m, n, ldd));
    LTCK(cublasLtMatmulPreferenceCreate(&pref));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
    LTCK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
    st = cublasLtMatmulAlgoGetHeuristic(x->lt, op, la, lb, lc, lc, pref, 1, &heur, &nres);
    if (st != CUBLAS_STATUS_SUCCESS || nres == 0) {
        if (epi != EPI_NONE) {
            rc = 1; /* the caller falls back to separate kernels */
            goto done;
        }
        /* no cuBLASLt algorithm for these types or alignments: cublasGemmEx (its type table
         * has bf16 x bf16 -> fp32 and -> bf16 with fp32 compute), in place on D */
        if (C && C != D && beta != 0.0f) {
            cudaError_t ce = cudaMemcpy2DAsync(D, (size_t)ldd * (dtype == CUDA_R_32F ? 4 : 2), C,
                                               (size_t)ldd * (dtype == CUDA_R_32F ? 4 : 2),
                                               (size_t)m * (dtype == CUDA_R_32F ? 4 : 2), (size_t)n,
                                               cudaMemcpyDeviceToDevice, x->stream);
            if (ce != cudaSuccess) {
                fail_msg(EB, EN, "CUDA: copying C for cublasGemmEx: %s", cudaGetErrorString(ce));
                goto done;
            }
        }
        if (!x->blas) {
            fail_msg(EB, EN, "cuBLASLt: no algorithm for a %dx%dx%d product", m, n, k);
            goto done;
        }
        LTCK(cublasGemmEx(x->blas, opa, opb, m, n, k, &alpha, A, CUDA_X, lda, B, CUDA_X, ldb, &beta,
                          D, dtype, ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        rc = 0;
        goto done;
    }
    LTCK(cublasLtMatmul(x->lt, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &heur.algo,
                        x->ws, LT_WORKSPACE, x->stream));
    rc = 0;
#undef LTCK
done:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    return rc;
}

/* ---------------------------------------------------------------- linear layers */

/* Row-major out[N][OC] = inp[N][IC] @ w[OC][IC]^T (+ bias) (+ res). With gelu_out: out gets the
 * pre-activation and gelu_out = gelu(out) (the GELU_AUX_BIAS epilogue when cuBLASLt has it). */
int linear_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, const floatX *w,
               const floatX *bias, const floatX *res, floatX *gelu_out, int N, int IC, int OC)
{
    char *EB = x->eb;
    size_t EN = x->en;
    size_t n = (size_t)N * OC;
    if (gelu_out) {
        int rc = matmul_plan(x, plan_linear_fwd(N, IC, OC), gelu_out, CUDA_X, w, inp, 0.0f, NULL,
                             EPI_GELU_BIAS, bias, out, OC);
        if (rc <= 0)
            return rc;
    }
    int rc = bias ? matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_X, w, inp,
                                res ? 1.0f : 0.0f, res, EPI_BIAS, bias, NULL, 0) : 1;
    if (rc < 0)
        return -1;
    if (rc == 1) { /* no bias epilogue: plain product, then the bias */
        OK(matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_X, w, inp, res ? 1.0f : 0.0f, res,
                       EPI_NONE, NULL, NULL, 0));
        if (bias) {
            bias_add_kernel<<<blocks_for(n, 256), 256, 0, x->stream>>>(out, bias, n, OC);
            LAUNCHED(x->stream);
        }
    }
    if (gelu_out) {
        gelu_forward_kernel<<<blocks_for(n, 256), 256, 0, x->stream>>>(gelu_out, out, n);
        LAUNCHED(x->stream);
    }
    return 0;
}

int gelu_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, size_t n)
{
    char *EB = x->eb;
    size_t EN = x->en;
    gelu_forward_kernel<<<blocks_for(n, 256), 256, 0, x->stream>>>(out, inp, n);
    LAUNCHED(x->stream);
    return 0;
}

int colsum(struct gpu_ctx *x, float *partial, float *gw, float *gb, const floatX *d,
           const floatX *inp, const float *mean, const float *rstd, int N, int C)
{
    char *EB = x->eb;
    size_t EN = x->en;
    int chunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    dim3 grid(blocks_for((size_t)C, 128), (unsigned)chunks);
    colsum_partial_kernel<<<grid, 128, 0, x->stream>>>(partial, d, inp, mean, rstd, N, C);
    LAUNCHED(x->stream);
    colsum_finish_kernel<<<blocks_for((size_t)C, 128), 128, 0, x->stream>>>(gw, gb, partial, chunks, C);
    LAUNCHED(x->stream);
    return 0;
}

/* dinp[N][IC] = dout @ w (overwritten; times gelu'(dgelu_pre) when given; dinp NULL: not
 * computed); dw[OC][IC] += dout^T @ inp (fp32); dbias[OC] += column sums of dout */
int linear_bwd(struct gpu_ctx *x, float *partial, floatX *dinp, float *dw, float *dbias,
               const floatX *dout, const floatX *inp, const floatX *w, const floatX *dgelu_pre,
               int N, int IC, int OC)
{
    char *EB = x->eb;
    size_t EN = x->en;
    int rc = dinp ? 1 : 0;
    if (dinp && dgelu_pre)
        rc = matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_X, w, dout, 0.0f, NULL,
                         EPI_DGELU, NULL, (void *)dgelu_pre, IC);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        OK(matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_X, w, dout, 0.0f, NULL,
                       EPI_NONE, NULL, NULL, 0));
        if (dgelu_pre) {
            size_t n = (size_t)N * IC;
            gelu_backward_kernel<<<blocks_for(n, 256), 256, 0, x->stream>>>(dinp, dgelu_pre, n);
            LAUNCHED(x->stream);
        }
    }
    OK(matmul_plan(x, plan_linear_dw(N, IC, OC), dw, CUDA_R_32F, inp, dout, 1.0f, NULL, EPI_NONE,
                   NULL, NULL, 0));
    if (dbias)
        OK(colsum(x, partial, NULL, dbias, dout, NULL, NULL, NULL, N, OC));
    return 0;
}

/* Tensor parallelism's partial products, written in fp32 so that nothing is rounded to the
 * activation type before the group's sum: out[N][OC] = inp @ w^T (no bias) and
 * dinp[N][IC] = dout @ w. */
int linear_fwd_f32(struct gpu_ctx *x, float *out, const floatX *inp, const floatX *w, int N,
                   int IC, int OC)
{
    return matmul_plan(x, plan_linear_fwd(N, IC, OC), out, CUDA_R_32F, w, inp, 0.0f, NULL,
                       EPI_NONE, NULL, NULL, 0);
}
int linear_dinp_f32(struct gpu_ctx *x, float *dinp, const floatX *w, const floatX *dout, int N,
                    int IC, int OC)
{
    return matmul_plan(x, plan_linear_dinp(N, IC, OC), dinp, CUDA_R_32F, w, dout, 0.0f, NULL,
                       EPI_NONE, NULL, NULL, 0);
}

/* strided-batched products for attention (cuBLAS), arguments from a gemm_plan */
int bgemm(struct gpu_ctx *x, struct gemm_plan p, float alpha, const floatX *A, const floatX *B,
          floatX *D, int batch)
{
    char *EB = x->eb;
    size_t EN = x->en;
    float beta = 0.0f;
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
    if (x.lt)
        cublasLtDestroy(x.lt);
    if (x.stream)
        cudaStreamDestroy(x.stream);
    free(ms);
    return rc;
}
