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

namespace GPU_NS {

/* ---------------------------------------------------------------- errors */

/* printf into buf[n] (when given); returns -1 (gpt_cuda.cu) */
int fail_msg(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The environment variable `name` as a whole number in [lo, hi] into *out: 1; 0 when it is not
 * set (*out untouched); -1 (buf) naming it and the range when it is anything else */
int env_int(const char *name, int lo, int hi, int *out, char *buf, size_t n);

} /* namespace GPU_NS */

/* Each function that checks calls names its error buffer EB (size EN) first. */
#define CK(call) do { cudaError_t err_ = (call); if (err_ != cudaSuccess) \
        return GPU_NS::fail_msg(EB, EN, "CUDA: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                                cudaGetErrorString(err_)); } while (0)
#define CKB(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) \
        return GPU_NS::fail_msg(EB, EN, "cuBLAS: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                                cublasGetStatusString(st_)); } while (0)
/* After each kernel launch (and each other piece of enqueued work: a library product, an
 * asynchronous copy or memset): counts it (gpu_counters) and checks the launch. */
#define COUNT_LAUNCH() __atomic_fetch_add(&GPU_NS::g_launches, 1ULL, __ATOMIC_RELAXED)
#define COUNT_SYNC() __atomic_fetch_add(&GPU_NS::g_syncs, 1ULL, __ATOMIC_RELAXED)
#ifdef HOLMES_GPU_DEBUG
#define LAUNCHED(stream) do { COUNT_LAUNCH(); CK(cudaGetLastError()); \
        CK(cudaStreamSynchronize(stream)); } while (0)
#else
#define LAUNCHED(stream) do { COUNT_LAUNCH(); CK(cudaGetLastError()); } while (0)
#endif
/* an asynchronous copy or memset, counted */
#define ENQ(call) do { COUNT_LAUNCH(); CK(call); } while (0)
#define OK(x) do { if ((x) < 0) return -1; } while (0)

namespace GPU_NS {

extern unsigned long long g_launches, g_syncs; /* gpu_counters (gpt_cuda_host.cu) */

/* cudaStreamSynchronize, counted; 0 or -1 (EB) */
int sync_stream(cudaStream_t st, char *EB, size_t EN);

static inline unsigned blocks_for(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* the largest power of two up to 256 that p's address is a multiple of */
static inline int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

/* the block's barrier, as the kernels of *_kernels.cuh call it (tests/unit/kernel_emu.h has the
 * host emulator's) */
__device__ __forceinline__ void block_sync()
{
    __syncthreads();
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

/* 16 bytes of a type: the unit of the memory-bound kernels' loads and stores (8 bf16, 4 fp32) */
template <typename T> struct alignas(16) pack16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
template <typename T> __device__ __forceinline__ pack16<T> load16(const T *p)
{
    return *reinterpret_cast<const pack16<T> *>(p);
}
template <typename T> __device__ __forceinline__ void store16(T *p, const pack16<T> &x)
{
    *reinterpret_cast<pack16<T> *>(p) = x;
}
/* elements of the activation type in 16 bytes */
#define XV ((int)(16 / sizeof(floatX)))

/* ---------------------------------------------------------------- profiling */

/* a timed launch: its kind and shape (kernel_times.h) and FLOPs */
struct kernel_rec {
    struct gpu_kernel_time what;
    double flop, bytes;
};
/* Each part of the stage's work between two CUDA events (gpu_stage_profile_begin/end): a scope
 * records its start and end on the stream, nested scopes count for the outermost. Off: nothing. */
struct gpu_prof {
    int on, depth, open, cap, used, lost;   /* open: the outermost part's start was recorded */
    cudaEvent_t *ev;              /* [2 cap]: start, end of each timed part */
    unsigned char *part;          /* [cap] */
    cudaEvent_t t0, t1;
    unsigned long long l0, s0;    /* the counters at begin */
    /* each matrix product and attention kernel alone (kernel_times.h groups them at the end) */
    int gcap, gused, glost;
    cudaEvent_t *gev;             /* [2 gcap] */
    struct kernel_rec *grec;      /* [gcap] */
};
void prof_enter(struct gpu_prof *p, cudaStream_t st, int part);
void prof_leave(struct gpu_prof *p, cudaStream_t st);
/* A timed launch's start (its record's index, or -1: not timed) and end: matmul_lt.cu's
 * products, flash attention's kernels, the memory-bound ones (mem_rec) */
int prof_kernel_start(struct gpu_prof *p, cudaStream_t st, const struct kernel_rec *r);
void prof_kernel_end(struct gpu_prof *p, cudaStream_t st, int i);
/* the record of flash attention's kernel `kind` over queries [q0, q1) */
static inline struct kernel_rec flash_rec(int kind, int bh, int q0, int q1, int hs)
{
    struct kernel_rec r;
    memset(&r, 0, sizeof r);
    r.what.kind = kind;
    r.what.m = bh;
    r.what.n = q1 - q0;
    r.what.k = hs;
    r.flop = flash_flop(kind, bh, q0, q1, hs);
    return r;
}
/* the record of a memory-bound kernel `kind` over rows x cols, moving `bytes` */
static inline struct kernel_rec mem_rec(int kind, int rows, int cols, double bytes)
{
    struct kernel_rec r;
    memset(&r, 0, sizeof r);
    r.what.kind = kind;
    r.what.m = rows;
    r.what.n = cols;
    r.bytes = bytes;
    return r;
}
struct prof_scope {
    struct gpu_prof *p;
    cudaStream_t st;
    prof_scope(struct gpu_prof *p_, cudaStream_t st_, int part) : p(p_), st(st_)
    {
        if (p && p->on)
            prof_enter(p, st, part);
        else
            p = NULL;
    }
    ~prof_scope()
    {
        if (p)
            prof_leave(p, st);
    }
};
#define PROF_CAT2(a, b) a##b
#define PROF_CAT(a, b) PROF_CAT2(a, b)
/* times the rest of the enclosing block as `part` (ctx: a gpu_ctx *) */
#define PROF(ctx, part) GPU_NS::prof_scope PROF_CAT(prof_scope_, __LINE__)((ctx)->prof, (ctx)->stream, (part))

#include "block_sum.cuh"

/* ---------------------------------------------------------------- the cuBLASLt context */

struct lt_cache; /* matmul.cu: cuBLASLt descriptors and algorithms per shape */
struct gpu_ctx {
    struct lt_cache *cache;  /* made at the first product; gpu_ctx_release frees it */
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *ws;
    char *eb;    /* error buffer */
    size_t en;
    struct gpu_prof *prof;   /* the stage's (NULL: not timed) */
    int accum;               /* parameter gradients: 1 add into them, 0 write them (the first
                                backward after gpu_stage_zero_grads) */
    /* GPU_OVERLAP_WEIGHT_GRADS: a linear layer's weight-gradient product runs on `side` beside
     * its input-gradient product on `stream` (fork, join: the events between them), with its own
     * cuBLASLt workspace, once `warm` (a whole backward ran, so every product's algorithm was
     * chosen on a quiet stream) and not while profiling (the parts are timed on `stream`) */
    cudaStream_t side;
    void *ws_side;
    cudaEvent_t fork, join;
    int warm;
};

void gpu_ctx_release(struct gpu_ctx *x);

/* Conversions between fp32 and the activation type (device.cu), on `stream`; 0 or -1 (EB). */
int launch_cast(cudaStream_t stream, floatX *out, const float *in, size_t n, char *EB, size_t EN);
int launch_uncast(cudaStream_t stream, float *out, const floatX *in, size_t n, char *EB, size_t EN);

} /* namespace GPU_NS */
