/* The CUDA engine outside a stage: activation buffers in the activation type (allocate,
 * upload, download), the GEMM ceiling benchmark and the device's name. Part of gpt_cuda.cu's
 * one translation unit (included there once, at its end). */
#pragma once

/* ---------------------------------------------------------------- activations, benchmarks */

void *gpu_act_alloc(size_t n, herr *e)
{
    void *p = NULL;
    cudaError_t ce = cudaMalloc(&p, (n ? n : 1) * sizeof(floatX));
    if (ce != cudaSuccess) {
        herr_set(e, "CUDA: cannot allocate %zu activations: %s", n, cudaGetErrorString(ce));
        return NULL;
    }
    return p;
}
void gpu_act_free(void *p)
{
    if (p)
        cudaFree(p);
}

int gpu_act_upload(void *dev, const float *host, size_t n, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    float *tmp = NULL;
    CK(cudaMalloc(&tmp, (n ? n : 1) * sizeof(float)));
    cudaError_t ce = cudaMemcpy(tmp, host, n * sizeof(float), cudaMemcpyHostToDevice);
    if (ce == cudaSuccess && n) {
        cast_kernel<<<blocks_for(n, 256), 256>>>((floatX *)dev, tmp, n);
        ce = cudaGetLastError();
    }
    if (ce == cudaSuccess)
        ce = cudaDeviceSynchronize();
    cudaFree(tmp);
    if (ce != cudaSuccess)
        return fail_msg(EB, EN, "CUDA: activation upload: %s", cudaGetErrorString(ce));
    return 0;
}

int gpu_act_download(float *host, const void *dev, size_t n, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    float *tmp = NULL;
    CK(cudaMalloc(&tmp, (n ? n : 1) * sizeof(float)));
    cudaError_t ce = cudaSuccess;
    if (n) {
        uncast_kernel<<<blocks_for(n, 256), 256>>>(tmp, (const floatX *)dev, n);
        ce = cudaGetLastError();
    }
    if (ce == cudaSuccess)
        ce = cudaDeviceSynchronize();
    if (ce == cudaSuccess)
        ce = cudaMemcpy(host, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
    if (ce != cudaSuccess)
        return fail_msg(EB, EN, "CUDA: activation download: %s", cudaGetErrorString(ce));
    return 0;
}

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

int gpu_device_name(char *buf, size_t len, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    int dev = 0;
    cudaDeviceProp p;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, len, "%s, %d SMs, %.0f GiB, compute capability %d.%d", p.name,
             p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    return 0;
}
