/* Flash attention (bf16 mode), forward beside backward: causal, the T x T scores never stored.
 * Tensor cores through WMMA (nvcuda::wmma, 16x16x16 bf16 products accumulating in fp32, which
 * compile to mma.sync on sm_80 and sm_90); softmax statistics in fp32; q, k, v read where the
 * qkv product leaves them ([B][T][3][NH][hs]), the output written as [B][T][NH hs].
 *
 * Forward (FlashAttention-2's loop): a block takes 64 queries of one (sequence, head), 4 warps of
 * 16 rows; it walks the key tiles up to its last query, each warp computing its scores S = Q K^T
 * (through shared memory: WMMA's fragments are opaque), the online softmax (running max m and
 * sum l per row, two lanes a row), P in bf16, then P V added to its rows' output (registers).
 * It keeps each row's log-sum-exp (base 2, of the scaled scores) for backward.
 *
 * Backward, deterministic (no atomics): D = rowsum(dY * Y) first; one kernel over key tiles
 * (each warp 16 keys, walking the query tiles from its keys on) accumulates dV = P^T dY and
 * dK = dS^T Q in registers; another over query tiles accumulates dQ = dS K; both recompute S and
 * P from q, k and the log-sum-exp, dS = P (dP - D), dP = dY V^T. Every element of dq, dk, dv is
 * written by one thread after a loop in a fixed order.
 *
 * Token slices pay their rectangle: queries [q0, q1), keys [0, q1).
 *
 * The tile arithmetic (which tiles a block visits, the masks) is flash_plan.h's, checked on the
 * CPU by tests/unit/test_cuda_flash.c against a plain attention. */
#include "flash_plan.h"
#include "stage.cuh"

#ifndef HOLMES_GPU_FP32
#include <mma.h>
#endif

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

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

constexpr int BR = FLASH_TILE; /* queries a block */
constexpr int BC = FLASH_TILE; /* keys a tile */
constexpr int NWARP = BR / 16;
constexpr int NTHREADS = NWARP * 32;

/* shared-memory geometry for head size HS */
template <int HS> struct geo {
    static constexpr int LDH = HS + 8;                   /* a bf16 tile's row (padding: banks) */
    static constexpr int LDS = (HS > BC ? HS : BC) + 4;  /* a warp's fp32 rows */
    static constexpr int LDP = BC + 8;                   /* a warp's bf16 P rows */
    static constexpr int TILE = BR * LDH;                /* bf16 elements of a tile */
    static constexpr int WARPF = 16 * LDS;               /* floats of a warp's S buffer */
    static constexpr int WARPP = 16 * LDP;               /* bf16 of a warp's P buffer */
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt; /* X^T */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* rows [r0, r0 + 64) of a row-major [rows][stride] matrix's HS columns at src into tile (row
 * length LDH); rows from rend on are zero. 16-byte loads. */
template <int HS>
__device__ void load_tile(bf16 *tile, const bf16 *src, size_t stride, int r0, int rend)
{
    constexpr int CH = HS / 8;
    for (int i = threadIdx.x; i < BR * CH; i += NTHREADS) {
        int r = i / CH, c = (i % CH) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + r < rend)
            v = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + r) * stride + c);
        *reinterpret_cast<uint4 *>(tile + r * geo<HS>::LDH + c) = v;
    }
}

/* out[16][64] (fp32, row length LDS) = rows [16 w, +16) of X (tile, LDH) times Y^T (tile) */
template <int HS>
__device__ void tile_xyT(float *out, const bf16 *X, const bf16 *Y, int w)
{
    for (int n = 0; n < BC / 16; n++) {
        frag_c acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < HS / 16; k++) {
            frag_a a;
            frag_bt b;
            wmma::load_matrix_sync(a, X + 16 * w * geo<HS>::LDH + 16 * k, geo<HS>::LDH);
            wmma::load_matrix_sync(b, Y + 16 * n * geo<HS>::LDH + 16 * k, geo<HS>::LDH);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(out + 16 * n, acc, geo<HS>::LDS, wmma::mem_row_major);
    }
}

/* acc[HS/16] += P[16][64] (bf16, LDP) times Y (tile [64][HS]) */
template <int HS>
__device__ void tile_pY(frag_c *acc, const bf16 *P, const bf16 *Y)
{
    for (int nd = 0; nd < HS / 16; nd++)
        for (int kk = 0; kk < BC / 16; kk++) {
            frag_a a;
            frag_b b;
            wmma::load_matrix_sync(a, P + 16 * kk, geo<HS>::LDP);
            wmma::load_matrix_sync(b, Y + 16 * kk * geo<HS>::LDH + 16 * nd, geo<HS>::LDH);
            wmma::mma_sync(acc[nd], a, b, acc[nd]);
        }
}

/* ---------------------------------------------------------------- forward */

template <int HS>
__global__ void __launch_bounds__(NTHREADS)
flash_fwd_kernel(bf16 *atty, float *lse, const bf16 *qkv, int T, int NH, int q0, int q1,
                 float sl2)
{
    typedef geo<HS> G;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *Ks = Qs + G::TILE, *Vs = Ks + G::TILE;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sf = reinterpret_cast<float *>(Vs + G::TILE) + w * G::WARPF;
    bf16 *Pb = reinterpret_cast<bf16 *>(reinterpret_cast<float *>(Vs + G::TILE) + NWARP * G::WARPF) +
               w * G::WARPP;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    int qt0 = flash_query_tile(q0, q1, (int)gridDim.x - 1 - (int)blockIdx.x); /* heavy first */
    int kend = flash_key_end(qt0, q1);
    load_tile<HS>(Qs, qb, stride, qt0, q1);

    int r = lane / 2, half = lane % 2, q = qt0 + 16 * w + r;
    constexpr int HC = BC / 2, HD = HS / 2; /* a lane's columns of S, of the output */
    float m = -INFINITY, l = 0.0f, o[HD];
    for (int d = 0; d < HD; d++)
        o[d] = 0.0f;
    for (int kt = 0; kt < kend; kt += BC) {
        __syncthreads(); /* the previous tiles are read */
        load_tile<HS>(Ks, kb, stride, kt, kend);
        load_tile<HS>(Vs, vb, stride, kt, kend);
        __syncthreads();
        if (!flash_rows_see(qt0 + 16 * w, 16, kt))
            continue; /* every key of the tile is after the warp's queries */
        tile_xyT<HS>(Sf, Qs, Ks, w);
        __syncwarp();
        float sv[HC], mx = m;
        for (int c = 0; c < HC; c++) {
            int key = kt + half * HC + c;
            sv[c] = flash_visible(q, key, q1) ? Sf[r * G::LDS + half * HC + c] * sl2 : -INFINITY;
            mx = fmaxf(mx, sv[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mu = mx == -INFINITY ? 0.0f : mx; /* a row with nothing visible yet (padding) */
        float alpha = exp2f(m - mu), ps = 0.0f;
        for (int c = 0; c < HC; c++) {
            float p = exp2f(sv[c] - mu);
            ps += p;
            Pb[r * G::LDP + half * HC + c] = __float2bfloat16(p);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * alpha + ps;
        m = mx;
        for (int d = 0; d < HD; d++)
            o[d] *= alpha;
        __syncwarp();
        frag_c acc[HS / 16];
        for (int nd = 0; nd < HS / 16; nd++)
            wmma::fill_fragment(acc[nd], 0.0f);
        tile_pY<HS>(acc, Pb, Vs);
        for (int nd = 0; nd < HS / 16; nd++)
            wmma::store_matrix_sync(Sf + 16 * nd, acc[nd], G::LDS, wmma::mem_row_major);
        __syncwarp();
        for (int d = 0; d < HD; d++)
            o[d] += Sf[r * G::LDS + half * HD + d];
        __syncwarp();
    }
    if (q < q1) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16 *out = atty + ((size_t)b * T + q) * C + (size_t)h * HS + half * HD;
        for (int d = 0; d < HD; d++)
            out[d] = __float2bfloat16(o[d] * inv);
        if (half == 0)
            lse[((size_t)b * NH + h) * T + q] = m + log2f(l);
    }
}

/* ---------------------------------------------------------------- backward */

/* D[b][h][q] = sum_d dy[b][q][h HS + d] y[b][q][h HS + d] for q in [q0, q1): a warp per row */
template <int HS>
__global__ void flash_dsum_kernel(float *D, const bf16 *dy, const bf16 *y, int B, int T, int NH,
                                  int q0, int q1)
{
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32, S = q1 - q0;
    if (row >= (size_t)B * NH * S)
        return;
    int q = q0 + (int)(row % S), h = (int)(row / S % NH), b = (int)(row / S / NH);
    size_t o = ((size_t)b * T + q) * NH * HS + (size_t)h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32)
        acc += __bfloat162float(dy[o + d]) * __bfloat162float(y[o + d]);
    acc = warp_sum(acc);
    if (lane == 0)
        D[((size_t)b * NH + h) * T + q] = acc;
}

/* The per-row values of a query tile into shared memory: lse (rows past q1: +inf, so P = 0) and D */
__device__ void load_rows(float *Ls, float *Ds, const float *lse, const float *D, int qt, int q1)
{
    for (int i = threadIdx.x; i < BR; i += NTHREADS) {
        int q = qt + i;
        Ls[i] = q < q1 ? lse[q] : INFINITY;
        Ds[i] = q < q1 ? D[q] : 0.0f;
    }
}

/* Writes a warp's 16 rows of an accumulator set (times sc) into a [rows][3C] gradient: row ids
 * row0 + r (< rend), columns col0 + d; with acc (fp32, same layout) adds into it and writes the
 * sum. Through the warp's fp32 buffer. */
template <int HS>
__device__ void store_rows(bf16 *dst, float *acc32, frag_c *frags, float *Sf, float sc, int row0,
                           int rend, size_t stride)
{
    typedef geo<HS> G;
    int lane = threadIdx.x % 32;
    for (int nd = 0; nd < HS / 16; nd++)
        wmma::store_matrix_sync(Sf + 16 * nd, frags[nd], G::LDS, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HS; i += 32) {
        int r = i / HS, d = i % HS;
        if (row0 + r >= rend)
            continue;
        size_t o = (size_t)(row0 + r) * stride + d;
        float v = Sf[r * G::LDS + d] * sc;
        if (acc32) {
            v += acc32[o];
            acc32[o] = v;
        }
        dst[o] = __float2bfloat16(v);
    }
    __syncwarp();
}

/* dK, dV of 64 keys (a warp 16) of one (sequence, head), over the queries that see them */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
flash_dkdv_kernel(bf16 *dqkv, float *kv_acc, const bf16 *dy, const float *lse, const float *D,
                  const bf16 *qkv, int T, int NH, int q0, int q1, float sl2, float scale)
{
    typedef geo<HS> G;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem), *Vs = Ks + G::TILE, *Qs = Vs + G::TILE;
    bf16 *dYs = Qs + G::TILE;
    float *Ls = reinterpret_cast<float *>(dYs + G::TILE), *Ds = Ls + BR;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sf = Ds + BR + w * G::WARPF;
    bf16 *Pb = reinterpret_cast<bf16 *>(Ds + BR + NWARP * G::WARPF) + w * 2 * G::WARPP;
    bf16 *dSb = Pb + G::WARPP;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const bf16 *dyb = dy + (size_t)b * T * C + (size_t)h * HS;
    const float *lseb = lse + ((size_t)b * NH + h) * T, *Db = D + ((size_t)b * NH + h) * T;
    int kt0 = (int)blockIdx.x * BC;
    load_tile<HS>(Ks, kb, stride, kt0, q1);
    load_tile<HS>(Vs, vb, stride, kt0, q1);

    int r = lane / 2, half = lane % 2, key = kt0 + 16 * w + r;
    constexpr int HC = BR / 2;
    frag_c dk[HS / 16], dv[HS / 16];
    for (int nd = 0; nd < HS / 16; nd++) {
        wmma::fill_fragment(dk[nd], 0.0f);
        wmma::fill_fragment(dv[nd], 0.0f);
    }
    for (int qt = flash_first_query(q0, kt0); qt < q1; qt += BR) {
        __syncthreads(); /* the previous query tile is read */
        load_tile<HS>(Qs, qb, stride, qt, q1);
        load_tile<HS>(dYs, dyb, (size_t)C, qt, q1);
        load_rows(Ls, Ds, lseb, Db, qt, q1);
        __syncthreads();
        if (!flash_rows_see(qt, BR, kt0 + 16 * w))
            continue; /* the tile's queries all come before the warp's keys */
        float p[HC];
        tile_xyT<HS>(Sf, Ks, Qs, w); /* S^T: the warp's keys x the tile's queries */
        __syncwarp();
        for (int c = 0; c < HC; c++) {
            int qi = half * HC + c;
            p[c] = flash_visible(qt + qi, key, q1) ? exp2f(Sf[r * G::LDS + qi] * sl2 - Ls[qi]) : 0.0f;
            Pb[r * G::LDP + qi] = __float2bfloat16(p[c]);
        }
        __syncwarp();
        tile_xyT<HS>(Sf, Vs, dYs, w); /* dP^T = V dY^T */
        __syncwarp();
        for (int c = 0; c < HC; c++) {
            int qi = half * HC + c;
            dSb[r * G::LDP + qi] = __float2bfloat16(p[c] * (Sf[r * G::LDS + qi] - Ds[qi]));
        }
        __syncwarp();
        tile_pY<HS>(dv, Pb, dYs);  /* dV += P^T dY */
        tile_pY<HS>(dk, dSb, Qs);  /* dK += dS^T Q */
        __syncwarp();
    }
    bf16 *base = dqkv + (size_t)b * T * stride + (size_t)h * HS;
    float *accb = kv_acc ? kv_acc + (size_t)b * T * stride + (size_t)h * HS : NULL;
    store_rows<HS>(base + C, accb ? accb + C : NULL, dk, Sf, scale, kt0 + 16 * w, q1, stride);
    store_rows<HS>(base + 2 * C, accb ? accb + 2 * C : NULL, dv, Sf, 1.0f, kt0 + 16 * w, q1,
                   stride);
}

/* dQ of 64 queries (a warp 16) of one (sequence, head), over the keys they see */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
flash_dq_kernel(bf16 *dqkv, const bf16 *dy, const float *lse, const float *D, const bf16 *qkv,
                int T, int NH, int q0, int q1, float sl2, float scale)
{
    typedef geo<HS> G;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *dYs = Qs + G::TILE, *Ks = dYs + G::TILE;
    bf16 *Vs = Ks + G::TILE;
    float *Ls = reinterpret_cast<float *>(Vs + G::TILE), *Ds = Ls + BR;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sf = Ds + BR + w * G::WARPF;
    bf16 *dSb = reinterpret_cast<bf16 *>(Ds + BR + NWARP * G::WARPF) + w * 2 * G::WARPP;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const bf16 *dyb = dy + (size_t)b * T * C + (size_t)h * HS;
    const float *lseb = lse + ((size_t)b * NH + h) * T, *Db = D + ((size_t)b * NH + h) * T;
    int qt0 = flash_query_tile(q0, q1, (int)gridDim.x - 1 - (int)blockIdx.x); /* heavy first */
    int kend = flash_key_end(qt0, q1);
    load_tile<HS>(Qs, qb, stride, qt0, q1);
    load_tile<HS>(dYs, dyb, (size_t)C, qt0, q1);
    load_rows(Ls, Ds, lseb, Db, qt0, q1);

    int r = lane / 2, half = lane % 2, qi = 16 * w + r, q = qt0 + qi;
    constexpr int HC = BC / 2;
    frag_c dq[HS / 16];
    for (int nd = 0; nd < HS / 16; nd++)
        wmma::fill_fragment(dq[nd], 0.0f);
    for (int kt = 0; kt < kend; kt += BC) {
        __syncthreads(); /* the previous key tile is read (and, the first time, the rows) */
        load_tile<HS>(Ks, kb, stride, kt, kend);
        load_tile<HS>(Vs, vb, stride, kt, kend);
        __syncthreads();
        if (!flash_rows_see(qt0 + 16 * w, 16, kt))
            continue;
        float p[HC];
        tile_xyT<HS>(Sf, Qs, Ks, w); /* S: the warp's queries x the tile's keys */
        __syncwarp();
        for (int c = 0; c < HC; c++) {
            int kc = half * HC + c;
            p[c] = flash_visible(q, kt + kc, q1) ? exp2f(Sf[r * G::LDS + kc] * sl2 - Ls[qi]) : 0.0f;
        }
        __syncwarp();
        tile_xyT<HS>(Sf, dYs, Vs, w); /* dP = dY V^T */
        __syncwarp();
        for (int c = 0; c < HC; c++) {
            int kc = half * HC + c;
            dSb[r * G::LDP + kc] = __float2bfloat16(p[c] * (Sf[r * G::LDS + kc] - Ds[qi]));
        }
        __syncwarp();
        tile_pY<HS>(dq, dSb, Ks); /* dQ += dS K */
        __syncwarp();
    }
    store_rows<HS>(dqkv + (size_t)b * T * stride + (size_t)h * HS, NULL, dq, Sf, scale, qt0 + 16 * w,
                   q1, stride);
}

/* shared memory of each kernel for HS */
template <int HS> constexpr size_t fwd_smem()
{
    return 3 * geo<HS>::TILE * sizeof(bf16) + NWARP * (geo<HS>::WARPF * sizeof(float) +
                                                       geo<HS>::WARPP * sizeof(bf16));
}
template <int HS> constexpr size_t bwd_smem()
{
    return 4 * geo<HS>::TILE * sizeof(bf16) + 2 * BR * sizeof(float) +
           NWARP * (geo<HS>::WARPF * sizeof(float) + 2 * geo<HS>::WARPP * sizeof(bf16));
}

template <int HS> int launch_fwd(struct gpu_stage *s, floatX *atty, float *lse, const floatX *qkv,
                                 int q0, int q1)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    size_t sm = fwd_smem<HS>();
    dim3 grid((unsigned)flash_query_tiles(q0, q1), (unsigned)(s->B * s->NHl));
    float sl2 = 1.4426950408889634f / sqrtf((float)HS);
    struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_FWD, s->B * s->NHl, q0, q1, HS);
    int timed = prof_kernel_start(s->x.prof, s->x.stream, &r);
    flash_fwd_kernel<HS><<<grid, NTHREADS, sm, s->x.stream>>>(atty, lse, qkv, s->T, s->NHl, q0, q1,
                                                              sl2);
    LAUNCHED(s->x.stream);
    prof_kernel_end(s->x.prof, s->x.stream, timed);
    return 0;
}

/* D = rowsum(dy * y) of the queries [q0, q1) into s->dsum: both kernel sets' first step */
template <int HS> int launch_dsum(struct gpu_stage *s, const floatX *dy, const floatX *y, int q0,
                                  int q1)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    size_t rows = (size_t)s->B * s->NHl * (size_t)(q1 - q0);
    struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_DSUM, s->B * s->NHl, q0, q1, HS);
    int timed = prof_kernel_start(s->x.prof, st, &r);
    flash_dsum_kernel<HS><<<blocks_for(rows * 32, 256), 256, 0, st>>>(s->dsum, dy, y, s->B, s->T,
                                                                      s->NHl, q0, q1);
    LAUNCHED(st);
    prof_kernel_end(s->x.prof, st, timed);
    return 0;
}

template <int HS> int launch_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy,
                                 const float *lse, const floatX *qkv, int q0, int q1,
                                 float *kv_acc)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    int B = s->B, T = s->T, NH = s->NHl;
    size_t sm = bwd_smem<HS>();
    float scale = 1.0f / sqrtf((float)HS), sl2 = 1.4426950408889634f * scale;
    dim3 gk((unsigned)flash_key_tiles(q1), (unsigned)(B * NH));
    struct kernel_rec r = flash_rec(GPU_KERNEL_FLASH_DKDV, B * NH, q0, q1, HS);
    int timed = prof_kernel_start(s->x.prof, st, &r);
    flash_dkdv_kernel<HS><<<gk, NTHREADS, sm, st>>>(dqkv, kv_acc, dy, lse, s->dsum, qkv, T, NH, q0,
                                                    q1, sl2, scale);
    LAUNCHED(st);
    prof_kernel_end(s->x.prof, st, timed);
    dim3 gq((unsigned)flash_query_tiles(q0, q1), (unsigned)(B * NH));
    r = flash_rec(GPU_KERNEL_FLASH_DQ, B * NH, q0, q1, HS);
    timed = prof_kernel_start(s->x.prof, st, &r);
    flash_dq_kernel<HS><<<gq, NTHREADS, sm, st>>>(dqkv, dy, lse, s->dsum, qkv, T, NH, q0, q1, sl2,
                                                  scale);
    LAUNCHED(st);
    prof_kernel_end(s->x.prof, st, timed);
    return 0;
}

/* the kernels' shared memory beyond 48 KiB, on the current device */
template <int HS> int prepare(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaFuncSetAttribute(flash_fwd_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)fwd_smem<HS>()));
    CK(cudaFuncSetAttribute(flash_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)bwd_smem<HS>()));
    CK(cudaFuncSetAttribute(flash_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)bwd_smem<HS>()));
    return 0;
}

} /* namespace */

int flash_supported(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

int flash_prepare(struct gpu_stage *s)
{
    if (s->flash == FLASH_MMA)
        return flash_mma_prepare(s);
    return by_head_size(s, [&](auto hs) { return prepare<decltype(hs)::value>(s); });
}

int flash_fwd(struct gpu_stage *s, floatX *atty, float *lse, const floatX *qkv, int q0, int q1)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    if (s->flash == FLASH_MMA)
        return flash_mma_fwd(s, atty, lse, qkv, q0, q1);
    return by_head_size(s, [&](auto hs) {
        return launch_fwd<decltype(hs)::value>(s, atty, lse, qkv, q0, q1);
    });
}

/* D = rowsum(dy * y) first (both kernel sets read it), then the chosen set's kernels */
int flash_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *y,
              const float *lse, const floatX *qkv, int q0, int q1, float *kv_acc)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    return by_head_size(s, [&](auto hs) {
        constexpr int HS = decltype(hs)::value;
        if (launch_dsum<HS>(s, dy, y, q0, q1) < 0)
            return -1;
        if (s->flash == FLASH_MMA)
            return flash_mma_bwd(s, dqkv, dy, lse, qkv, q0, q1, kv_acc);
        return launch_bwd<HS>(s, dqkv, dy, lse, qkv, q0, q1, kv_acc);
    });
}

#endif /* HOLMES_GPU_FP32 */

} /* namespace GPU_NS */
