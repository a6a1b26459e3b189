/* Flash attention's mma.sync kernels (flash.cu has the whole description), written against a
 * few primitives that the includer defines, so that the same source compiles for the GPU
 * (flash.cu: PTX) and for the host emulator that checks it without a GPU
 * (tests/unit/flash_mma_emu.cc: the 128 threads of a block as host threads, the warp-wide
 * operations exchanging their lanes' operands as the PTX ISA lays them out):
 *   bf16                         the 16-bit brain float type
 *   block_sync()                 __syncthreads
 *   shfl_xor(v, m)               __shfl_xor_sync over the whole warp
 *   cp_async16(dst, src, ok)     16 bytes global -> shared, asynchronous, zeros when !ok
 *   cp_async_commit(), cp_async_wait<N>()
 *   ldsm4(r, p), ldsm4t(r, p)    ldmatrix .x4 (and .trans); p: this lane's row address
 *   mma(c, a, b0, b1)            mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32, c += a b
 *   fast_exp2(x)                 2^x
 *   pack2(lo, hi)                two floats as bf16 in one 32-bit register, lo in the low half
 *   store_bf2(p, x, y)           p[0], p[1] = bf16(x), bf16(y) (global, p 4-byte aligned)
 *   store_bf1(p, x)              p[0] = bf16(x) (global)
 *   load8(f, p, vec)             f[0..8) = p[0..8) as floats (global; vec: one 16-byte load, p
 *                                16-byte aligned; else eight 2-byte ones)
 *   FM_SMEM(name)                the block's dynamic shared memory as unsigned char name[]
 * and threadIdx, blockIdx, blockDim, gridDim, __global__, __device__, __forceinline__, __launch_bounds__.
 * Include inside the includer's namespace, after flash_plan.h. This file has the shared helpers
 * and includes the forward's kernel (flash_fwd_kernels.cuh) and the backward's
 * (flash_bwd_kernels.cuh). */
#pragma once

constexpr int ROWS = FLASH_TILE; /* a block's own rows, and the rows of a walked tile */
constexpr int NWARP = ROWS / 16;
constexpr int NTHREADS = NWARP * 32;

template <int HS> struct mgeo {
    static constexpr int LDH = HS + 8;    /* a shared row, in bf16 (16 bytes of padding) */
    static constexpr int TILE = ROWS * LDH;
    static constexpr int NK = HS / 16;    /* 16-wide chunks of the head dimension */
    static constexpr int ND = HS / 8;     /* 8-wide n-tiles of the head dimension */
};

/* rows [r0, r0 + 64) of a row-major matrix (row stride `stride`) into a shared tile, HS columns,
 * asynchronously; rows from rend on are zero */
template <int HS>
__device__ __forceinline__ void tile_async(bf16 *tile, const bf16 *src, size_t stride, int r0,
                                           int rend)
{
    constexpr int CH = HS / 8;
    for (int i = threadIdx.x; i < ROWS * CH; i += NTHREADS) {
        int r = i / CH, c = (i % CH) * 8;
        bool ok = r0 + r < rend;
        cp_async16(tile + r * mgeo<HS>::LDH + c, src + (size_t)(ok ? r0 + r : 0) * stride + c, ok);
    }
}

/* The A fragment of chunk kk of a warp's 16 rows (from row w16) of a shared tile */
template <int HS>
__device__ __forceinline__ void frag_a(uint32_t a[4], const bf16 *tile, int w16, int kk)
{
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    ldsm4(a, tile + (w16 + 8 * (m & 1) + r) * mgeo<HS>::LDH + 16 * kk + 8 * (m >> 1));
}

/* acc[j] (j < 8: the tile's 64 rows as n, 8 at a time) = the warp's rows of X (A fragments loaded
 * from shared X at w16) times Y^T (shared tile Y [64][HS]) */
template <int HS>
__device__ __forceinline__ void xyT(float acc[8][4], const bf16 *X, int w16, const bf16 *Y)
{
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    for (int j = 0; j < 8; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < mgeo<HS>::NK; kk++) {
        uint32_t a[4];
        frag_a<HS>(a, X, w16, kk);
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            uint32_t b[4];
            ldsm4(b, Y + (8 * (j + (m >> 1)) + r) * mgeo<HS>::LDH + 16 * kk + 8 * (m & 1));
            mma(acc[j], a, b[0], b[1]);
            mma(acc[j + 1], a, b[2], b[3]);
        }
    }
}

/* out[n] (n < ND: head dimension 8 at a time) += P (16 x 64, as C fragments p[8][4]) times the
 * shared tile Y [64][HS] */
template <int HS>
__device__ __forceinline__ void pY(float out[][4], const float p[8][4], const bf16 *Y)
{
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {pack2(p[2 * kk][0], p[2 * kk][1]), pack2(p[2 * kk][2], p[2 * kk][3]),
                         pack2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         pack2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < mgeo<HS>::ND; n += 2) {
            uint32_t b[4];
            ldsm4t(b, Y + (16 * kk + 8 * (m & 1) + r) * mgeo<HS>::LDH + 8 * (n + (m >> 1)));
            mma(out[n], a, b[0], b[1]);
            mma(out[n + 1], a, b[2], b[3]);
        }
    }
}

/* Step `it` of a walk over ntiles key tiles (K and V, 64 rows each, rows from kend on zero),
 * double-buffered in Ks[2], Vs[2]: the next pair starts loading into the other buffers, the
 * current pair is waited for, and the block synchronises (every thread's copies visible) */
template <int HS>
__device__ __forceinline__ void kv_step(bf16 *Ks, bf16 *Vs, const bf16 *kb, const bf16 *vb,
                                        size_t stride, int it, int ntiles, int kend)
{
    if (it + 1 < ntiles) {
        int nxt = ((it + 1) & 1) * mgeo<HS>::TILE, r0 = (it + 1) * ROWS;
        tile_async<HS>(Ks + nxt, kb, stride, r0, kend);
        tile_async<HS>(Vs + nxt, vb, stride, r0, kend);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    block_sync();
}

/* ---------------------------------------------------------------- strips of rows */

/* The A fragments of a warp's 16 rows (from row w16 of a shared tile), every 16-wide chunk of the
 * head dimension: the queries' part of Q K^T, kept in registers for the whole walk */
template <int HS>
__device__ __forceinline__ void frags_rows(uint32_t a[][4], const bf16 *tile, int w16)
{
#pragma unroll
    for (int kk = 0; kk < mgeo<HS>::NK; kk++)
        frag_a<HS>(a[kk], tile, w16, kk);
}

/* acc[i] = strip i's rows (A fragments qa[i], i < NS) times Y^T (shared tile Y [64][HS]), each B
 * fragment loaded once for the NS strips */
template <int HS, int NS>
__device__ __forceinline__ void strips_xyT(float acc[][8][4], const uint32_t qa[][mgeo<HS>::NK][4],
                                           const bf16 *Y)
{
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
#pragma unroll
    for (int i = 0; i < NS; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < mgeo<HS>::NK; kk++)
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            uint32_t b[4];
            ldsm4(b, Y + (8 * (j + (m >> 1)) + r) * mgeo<HS>::LDH + 16 * kk + 8 * (m & 1));
#pragma unroll
            for (int i = 0; i < NS; i++) {
                mma(acc[i][j], qa[i][kk], b[0], b[1]);
                mma(acc[i][j + 1], qa[i][kk], b[2], b[3]);
            }
        }
}

/* out[i] += P of strip i (16 x 64, C fragments p[i][8][4]) times the shared tile Y [64][HS], each
 * B fragment loaded once for the NS strips */
template <int HS, int NS>
__device__ __forceinline__ void strips_pY(float out[][mgeo<HS>::ND][4], const float p[][8][4],
                                          const bf16 *Y)
{
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[NS][4];
#pragma unroll
        for (int i = 0; i < NS; i++) {
            a[i][0] = pack2(p[i][2 * kk][0], p[i][2 * kk][1]);
            a[i][1] = pack2(p[i][2 * kk][2], p[i][2 * kk][3]);
            a[i][2] = pack2(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
            a[i][3] = pack2(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < mgeo<HS>::ND; n += 2) {
            uint32_t b[4];
            ldsm4t(b, Y + (16 * kk + 8 * (m & 1) + r) * mgeo<HS>::LDH + 8 * (n + (m >> 1)));
#pragma unroll
            for (int i = 0; i < NS; i++) {
                mma(out[i][n], a[i], b[0], b[1]);
                mma(out[i][n + 1], a[i], b[2], b[3]);
            }
        }
    }
}

/* the forward's kernel (flash_fwd_kernels.cuh) and the backward's (flash_bwd_kernels.cuh) */
#include "flash_fwd_kernels.cuh"
#include "flash_bwd_kernels.cuh"
