/* Flash attention (bf16 mode), forward beside backward: causal, the T x T scores never stored
 * (FlashAttention-2's loop and register-resident layout). Softmax statistics in fp32; q, k, v read
 * where the qkv product leaves them ([B][T][3][NH][hs]), the output written as [B][T][NH hs].
 *
 * Forward: a block of 4 warps takes 64 queries of one (sequence, head), a warp 16 rows; it walks
 * the key tiles up to its last query, each warp computing its scores S = Q K^T, the online
 * softmax (running max m and sum l per row), P in bf16, then P V added to its rows' output, all
 * in registers. It keeps each row's log-sum-exp (base 2, of the scaled scores) for backward.
 *
 * Backward, deterministic (no atomics): D = rowsum(dY * Y) first; one kernel over key tiles
 * (each warp 16 keys, walking the query tiles from its keys on) recomputes S and P from q, k and
 * the log-sum-exp, dP = dY V^T and dS = P (dP - D), accumulates dV = P^T dY and dK = dS^T Q in
 * registers, and stores dS (bf16, as dK's product reads it) in a [B][NH][T][T] workspace; another
 * over query tiles accumulates dQ = dS K from it: one product a query-key pair where recomputing
 * S and dP there took three, for 2 bytes a pair written and read (GPU_FLASH_RECOMPUTE_DQ keeps the
 * recomputing dQ kernel and no workspace). Every element of dq, dk, dv is written by one thread
 * after a loop in a fixed order.
 *
 * Token slices pay their rectangle: queries [q0, q1), keys [0, q1).
 *
 * What makes it fast (measured on an H100, 2026-11-27: 2.7x the WMMA kernels this file held
 * before, which went through shared memory for every product):
 *   - mma.sync.m16n8k16 (bf16 in, fp32 accumulate) on fragments loaded by ldmatrix, so the scores
 *     S, the probabilities P and dS stay in registers: an S accumulator's layout is the A operand
 *     layout of the next product (P V, P^T dY, dS K), no round trip through shared memory;
 *   - the tiles the loop walks (K and V in forward and dQ; Q and dY in dK/dV) double-buffered with
 *     cp.async, the next tile loading while the current one is multiplied;
 *   - the softmax row statistics reduced over the 4 lanes that share a row, the row sum kept per
 *     lane and reduced once at the end.
 * Geometry: a block of 4 warps takes 64 rows (queries in forward and dQ, keys in dK/dV), a warp 16;
 * the walked tiles are 64 rows; head size HS in {16, 32, 64, 128}; shared rows padded by 16 bytes
 * (ldmatrix's 8 row addresses fall in distinct banks).
 *
 * Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = 4 g + t:
 *   A 16x16 row-major, 4 registers of 2 bf16: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
 *   B 16x8 (k x n), 2 registers: (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
 *   C 16x8 fp32, 4 floats: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
 * ldmatrix .x4 loads four 8x8 bf16 matrices whose rows lanes 8m..8m+7 address; lane l receives
 * (row l/4, columns 2(l%4), +1) of each, or with .trans the transposed pair (rows 2(l%4), +1 of
 * column l/4). So for X stored row-major [rows][d]:
 *   A of X's rows (Q, K, V, dY in the role of the left operand): matrices (rows 0-7, d 0-7),
 *     (rows 8-15, d 0-7), (rows 0-7, d 8-15), (rows 8-15, d 8-15);
 *   B = X^T for S-like products (n = X's rows, k = d): non-transposed, matrices (rows 8j.., d 0-7),
 *     (rows 8j.., d 8-15), (rows 8j+8.., d 0-7), (rows 8j+8.., d 8-15): b0 b1 of n-tiles j, j+1;
 *   B = X for P-like products (k = X's rows, n = d): .trans, matrices (rows 0-7, d 8n..),
 *     (rows 8-15, d 8n..), (rows 0-7, d 8n+8..), (rows 8-15, d 8n+8..).
 * The kernels are in flash_mma_kernels.cuh (emulated on the host by tests/unit/flash_mma_emu.cc);
 * the tile arithmetic (which tiles a block visits, the masks) is flash_plan.h's, checked on the
 * CPU by tests/unit/test_cuda_flash.c against a plain attention. */
#include "flash_plan.h"
#include "stage.cuh"

namespace GPU_NS {

#ifdef HOLMES_GPU_FP32

int flash_supported(int hs)
{
    (void)hs;
    return 0;
}
int flash_prepare(struct gpu_stage *s)
{
    return stage_fail(s, "flash attention runs in bf16 mode only");
}
int flash_fwd(struct gpu_stage *s, floatX *, float *, const floatX *, int, int)
{
    return stage_fail(s, "flash attention runs in bf16 mode only");
}
int flash_bwd(struct gpu_stage *s, floatX *, const floatX *, const floatX *, const float *,
              const floatX *, int, int, float *)
{
    return stage_fail(s, "flash attention runs in bf16 mode only");
}

#else

namespace {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; zeros when !ok (src is then not read) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c += a b (16x8x16) */
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x on the special-function unit (ex2.approx: relative error ~2^-22, far below bf16's; -inf
 * gives +0) */
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* two floats as bf16 in one register, the first in the low half (the lower column) */
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float shfl_xor(float v, int m)
{
    return __shfl_xor_sync(0xffffffffu, v, m);
}
__device__ __forceinline__ void store_bf2(bf16 *p, float x, float y)
{
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_bf1(bf16 *p, float x)
{
    *p = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void load8(float f[8], const bf16 *p, bool vec)
{
    if (vec) {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 v = __bfloat1622float2(h[j]);
            f[2 * j] = v.x;
            f[2 * j + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            f[j] = __bfloat162float(p[j]);
    }
}
#define FM_SMEM(name) extern __shared__ __align__(128) unsigned char name[]

#include "flash_mma_kernels.cuh"

/* D = rowsum(dy * y) of the queries [q0, q1) into s->dsum: backward's first step */
template <int HS> int launch_dsum(struct gpu_stage *s, const floatX *dy, const floatX *y, int q0,
                                  int q1)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    size_t lanes = (size_t)s->B * s->NHl * (size_t)(q1 - q0) * (HS / 8);
    bool vec = ((uintptr_t)dy & 15) == 0 && ((uintptr_t)y & 15) == 0;
    struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_DSUM, s->B * s->NHl, q0, q1, HS);
    int timed = prof_kernel_start(s->x.prof, st, &r);
    mma_dsum_kernel<HS><<<blocks_for(lanes, 256), 256, 0, st>>>(s->dsum, dy, y, s->B, s->T, s->NHl,
                                                                 q0, q1, vec);
    LAUNCHED(st);
    prof_kernel_end(s->x.prof, st, timed);
    return 0;
}

/* The sequences [b0, b0 + nb) of a pass (the launches' chunk, flash_launch_seqs): where their
 * rows start in each buffer. The kernels index from their grid's y, the chunk's own pairs. */
struct seq_chunk {
    int nb;
    size_t qkv, y, rows; /* element offsets: [B][T][3C], [B][T][C], [B][NH][T] */
};
static struct seq_chunk chunk_at(const struct gpu_stage *s, int b0, int HS)
{
    struct seq_chunk c;
    int per = flash_launch_seqs(s->NHl, s->flash_max_bh);
    size_t C = (size_t)s->NHl * HS;
    c.nb = s->B - b0 < per ? s->B - b0 : per;
    c.qkv = (size_t)b0 * s->T * 3 * C;
    c.y = (size_t)b0 * s->T * C;
    c.rows = (size_t)b0 * s->NHl * s->T;
    return c;
}

template <int HS> int launch_fwd(struct gpu_stage *s, floatX *atty, float *lse, const floatX *qkv,
                                 int q0, int q1)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    float sl2 = 1.4426950408889634f / sqrtf((float)HS);
    for (int b0 = 0; b0 < s->B;) {
        struct seq_chunk c = chunk_at(s, b0, HS);
        dim3 grid((unsigned)fwd_blocks<HS>(q0, q1), (unsigned)(c.nb * s->NHl));
        struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_FWD, c.nb * s->NHl, q0, q1, HS);
        int timed = prof_kernel_start(s->x.prof, s->x.stream, &r);
        mma_fwd_kernel<HS><<<grid, NTHREADS, fwd_smem<HS>(), s->x.stream>>>(
            atty + c.y, lse + c.rows, qkv + c.qkv, s->T, s->NHl, q0, q1, sl2);
        LAUNCHED(s->x.stream);
        prof_kernel_end(s->x.prof, s->x.stream, timed);
        b0 += c.nb;
    }
    return 0;
}

template <int HS> int launch_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy,
                                 const float *lse, const floatX *qkv, int q0, int q1, float *kv_acc)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    int T = s->T, NH = s->NHl;
    float scale = 1.0f / sqrtf((float)HS), sl2 = 1.4426950408889634f * scale;
    for (int b0 = 0; b0 < s->B;) {
        struct seq_chunk c = chunk_at(s, b0, HS);
        int bh = c.nb * NH;
        floatX *dq = dqkv + c.qkv, *ds = s->flash_ds;
        if (ds) /* the workspace as the kernels index it: the chunk's pairs from its first */
            ds += ds_row(b0 * NH, q1, 0, ds_ld(q0, q1));
        dim3 gk((unsigned)flash_key_tiles(q1), (unsigned)bh);
        struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_DKDV, bh, q0, q1, HS);
        int timed = prof_kernel_start(s->x.prof, st, &r);
        mma_dkdv_kernel<HS><<<gk, NTHREADS, dkdv_smem<HS>(), st>>>(
            dq, kv_acc ? kv_acc + c.qkv : NULL, ds, dy + c.y, lse + c.rows, s->dsum + c.rows,
            qkv + c.qkv, T, NH, q0, q1, sl2, scale);
        LAUNCHED(st);
        prof_kernel_end(s->x.prof, st, timed);
        dim3 gq((unsigned)flash_query_tiles(q0, q1), (unsigned)bh);
        r = flash_rec(ds ? GPU_KERNEL_FLASH_DQ_DS : GPU_KERNEL_FLASH_DQ, bh, q0, q1, HS);
        timed = prof_kernel_start(s->x.prof, st, &r);
        if (ds)
            mma_dq_ds_kernel<HS><<<gq, NTHREADS, dq_ds_smem<HS>(), st>>>(dq, ds, qkv + c.qkv, T, NH,
                                                                         q0, q1, scale);
        else
            mma_dq_kernel<HS><<<gq, NTHREADS, dq_smem<HS>(), st>>>(
                dq, dy + c.y, lse + c.rows, s->dsum + c.rows, qkv + c.qkv, T, NH, q0, q1, sl2,
                scale);
        LAUNCHED(st);
        prof_kernel_end(s->x.prof, st, timed);
        b0 += c.nb;
    }
    return 0;
}

template <int HS> int prepare(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    /* (sequence, head) pairs a launch takes: CUDA's grid limit, or fewer for tests (so that a
     * small pass goes in several launches) */
    s->flash_max_bh = FLASH_MAX_BH;
    if (env_int("HOLMES_GPU_FLASH_MAX_BH", 1, FLASH_MAX_BH, &s->flash_max_bh, EB, EN) < 0)
        return -1;
    CK(cudaFuncSetAttribute(mma_fwd_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)fwd_smem<HS>()));
    CK(cudaFuncSetAttribute(mma_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)dkdv_smem<HS>()));
    CK(cudaFuncSetAttribute(mma_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)dq_smem<HS>()));
    CK(cudaFuncSetAttribute(mma_dq_ds_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)dq_ds_smem<HS>()));
    return 0;
}

} /* namespace */

int flash_supported(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

int flash_prepare(struct gpu_stage *s)
{
    return by_head_size(s, [&](auto hs) { return prepare<decltype(hs)::value>(s); });
}

int flash_fwd(struct gpu_stage *s, floatX *atty, float *lse, const floatX *qkv, int q0, int q1)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    return by_head_size(s, [&](auto hs) {
        return launch_fwd<decltype(hs)::value>(s, atty, lse, qkv, q0, q1);
    });
}

/* D = rowsum(dy * y) first, then dK dV and dQ */
int flash_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *y,
              const float *lse, const floatX *qkv, int q0, int q1, float *kv_acc)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    return by_head_size(s, [&](auto hs) {
        constexpr int HS = decltype(hs)::value;
        if (launch_dsum<HS>(s, dy, y, q0, q1) < 0)
            return -1;
        return launch_bwd<HS>(s, dqkv, dy, lse, qkv, q0, q1, kv_acc);
    });
}

#endif /* HOLMES_GPU_FP32 */

} /* namespace GPU_NS */
