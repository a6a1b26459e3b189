/* What every file of the CUDA engine shares (llm.c's cuda_common.h + cuda_utils.cuh): the
 * precision, the error macros, the device helpers (conversions, warp and block reductions) and
 * the cuBLASLt context. Each .cu file of the engine is its own translation unit; everything that
 * is not the C API (gpt_cuda.h) lives in the namespace GPU_NS, which names the precision, so the
 * fp32 and the bf16 objects link into one binary (the CUDA holmes-node) without clashing.
 *
 * Row-major tensors [rows][cols] are column-major [cols x rows] to cuBLAS, so a row-major
 * out[N][OC] = inp[N][IC] @ w[OC][IC]^T is the column-major O(OC x N) = W'^T (OC x IC) * I' (IC x N).
 * Every reduction has a fixed order (no floating-point atomics), so two runs of the same
 * micro-batches give the same bits (exact resume from a checkpoint). */
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_plan.h"
#include "gpt_cuda.h"

#ifdef HOLMES_GPU_FP32
typedef float floatX;
#define CUDA_X CUDA_R_32F
#define PREC_NAME "fp32"
#define GPU_NS holmes_gpu_fp32
#else
typedef __nv_bfloat16 floatX;
#define CUDA_X CUDA_R_16BF
#define PREC_NAME "bf16"
#define GPU_NS holmes_gpu_bf16
#endif

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define LT_WORKSPACE (32u << 20)
#define SQ_BLOCKS 1024
#define COLSUM_ROWS 64

namespace GPU_NS {

/* ---------------------------------------------------------------- errors */

/* printf into buf[n] (when given); returns -1 (gpt_cuda.cu) */
int fail_msg(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

} /* namespace GPU_NS */

/* Each function that checks calls names its error buffer EB (size EN) first. */
#define CK(call) do { cudaError_t err_ = (call); if (err_ != cudaSuccess) \
        return GPU_NS::fail_msg(EB, EN, "CUDA: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                                cudaGetErrorString(err_)); } while (0)
#define CKB(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) \
        return GPU_NS::fail_msg(EB, EN, "cuBLAS: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                                cublasGetStatusString(st_)); } while (0)
#ifdef HOLMES_GPU_DEBUG
#define LAUNCHED(stream) do { CK(cudaGetLastError()); CK(cudaStreamSynchronize(stream)); } while (0)
#else
#define LAUNCHED(stream) CK(cudaGetLastError())
#endif
#define OK(x) do { if ((x) < 0) return -1; } while (0)

namespace GPU_NS {

static inline unsigned blocks_for(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* ---------------------------------------------------------------- conversions, reductions */

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void put(float *p, float x) { *p = x; }
__device__ __forceinline__ void put(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result. */
__device__ inline float block_sum(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ inline float block_max(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

/* Block-wide sum in fp64 (blockDim.x at most 1024 and a power of two), a fixed tree: the same
 * bits every run. Thread 0 gets the result. */
__device__ inline double block_sum_fixed(double v)
{
    __shared__ double sh[1024];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}

/* ---------------------------------------------------------------- the cuBLASLt context */

struct gpu_ctx {
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *ws;
    char *eb;    /* error buffer */
    size_t en;
};

/* Conversions between fp32 and the activation type (device.cu), on `stream`; 0 or -1 (EB). */
int launch_cast(cudaStream_t stream, floatX *out, const float *in, size_t n, char *EB, size_t EN);
int launch_uncast(cudaStream_t stream, float *out, const floatX *in, size_t n, char *EB, size_t EN);

} /* namespace GPU_NS */
