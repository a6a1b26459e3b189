/* Flash attention's mma.sync kernels (flash_mma.cu has the whole description), written against a
 * few primitives that the includer defines, so that the same source compiles for the GPU
 * (flash_mma.cu: PTX) and for the host emulator that checks it without a GPU
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
 * Include inside the includer's namespace, after flash_plan.h. */
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

/* ---------------------------------------------------------------- forward */

/* Query strips a warp takes in forward: 2 for head sizes up to 64 (a block of 128 queries, warp w
 * the rows 16 w and 64 + 16 w of it, so that each K and V fragment loaded by ldmatrix serves two
 * products, as FlashAttention-2's 128-query blocks do), 1 for 128 (the registers: o alone is 64
 * floats a strip) */
template <int HS> constexpr int FWD_STRIPS = HS <= 64 ? 2 : 1;
/* the forward's blocks along the queries of [q0, q1) (the launch's, on the host) */
template <int HS> inline int fwd_blocks(int q0, int q1)
{
    return (flash_query_tiles(q0, q1) + FWD_STRIPS<HS> - 1) / FWD_STRIPS<HS>;
}

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

/* One key tile (Kc, Vc: keys from kt) for NS strips of a warp (strip i: the 16 queries from
 * sr[i]): the scores, the online softmax (running max mrow, this lane's part of the row sums
 * lrow), and P V added to o */
template <int HS, int NS>
__device__ __forceinline__ void fwd_tile(float o[][mgeo<HS>::ND][4], float mrow[][2],
                                         float lrow[][2], const uint32_t qa[][mgeo<HS>::NK][4],
                                         const int *sr, const bf16 *Kc, const bf16 *Vc, int kt,
                                         int q1, float sl2)
{
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[NS][8][4];
    strips_xyT<HS, NS>(s, qa, Kc);
#pragma unroll
    for (int i = 0; i < NS; i++) {
        bool masked = flash_needs_mask(sr[i], 16, kt, ROWS, q1);
        int row[2] = {sr[i] + g, sr[i] + g + 8};
        float mx[2] = {mrow[i][0], mrow[i][1]};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[i][j][e] * sl2;
                if (masked && !flash_visible(row[e >> 1], kt + 8 * j + 2 * t + (e & 1), q1))
                    v = -INFINITY;
                s[i][j][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2], mu[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            mx[k] = fmaxf(mx[k], shfl_xor(mx[k], 1));
            mx[k] = fmaxf(mx[k], shfl_xor(mx[k], 2));
            mu[k] = mx[k] == -INFINITY ? 0.0f : mx[k]; /* nothing visible yet (padding) */
            alpha[k] = fast_exp2(mrow[i][k] - mu[k]);
            mrow[i][k] = mx[k];
            lrow[i][k] *= alpha[k];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pe = fast_exp2(s[i][j][e] - mu[e >> 1]);
                lrow[i][e >> 1] += pe;
                s[i][j][e] = pe;
            }
#pragma unroll
        for (int n = 0; n < mgeo<HS>::ND; n++) {
            o[i][n][0] *= alpha[0];
            o[i][n][1] *= alpha[0];
            o[i][n][2] *= alpha[1];
            o[i][n][3] *= alpha[1];
        }
    }
    strips_pY<HS, NS>(o, s, Vc);
}

/* A block takes MT = FWD_STRIPS<HS> query tiles of 64 (heaviest first), warp w the 16 rows from
 * 16 w of each; it walks the key tiles up to its last query, K and V double-buffered */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
mma_fwd_kernel(bf16 *atty, float *lse, const bf16 *qkv, int T, int NH, int q0, int q1, float sl2)
{
    typedef mgeo<HS> G;
    constexpr int MT = FWD_STRIPS<HS>;
    FM_SMEM(smem);
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *Ks = Qs + MT * G::TILE, *Vs = Ks + 2 * G::TILE;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    int first = MT * ((int)gridDim.x - 1 - (int)blockIdx.x); /* heavy first */
    int last = first + MT - 1 < flash_query_tiles(q0, q1) ? first + MT - 1
                                                          : flash_query_tiles(q0, q1) - 1;
    int qt0 = flash_query_tile(q0, q1, first);
    int kend = flash_key_end(flash_query_tile(q0, q1, last), q1), ntiles = (kend + ROWS - 1) / ROWS;
    for (int i = 0; i < MT; i++)
        tile_async<HS>(Qs + i * G::TILE, qb, stride, qt0 + i * ROWS, q1);
    tile_async<HS>(Ks, kb, stride, 0, kend);
    tile_async<HS>(Vs, vb, stride, 0, kend);
    cp_async_commit();

    int w16 = 16 * w, sr[MT];
    float mrow[MT][2], lrow[MT][2]; /* lrow: this lane's part */
    float o[MT][G::ND][4];
    uint32_t qa[MT][G::NK][4];
#pragma unroll
    for (int i = 0; i < MT; i++) {
        sr[i] = qt0 + i * ROWS + w16;
        mrow[i][0] = mrow[i][1] = -INFINITY;
        lrow[i][0] = lrow[i][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < G::ND; n++)
            o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    }
    for (int it = 0; it < ntiles; it++) {
        int kt = it * ROWS;
        const bf16 *Kc = Ks + (it & 1) * G::TILE, *Vc = Vs + (it & 1) * G::TILE;
        kv_step<HS>(Ks, Vs, kb, vb, stride, it, ntiles, kend);
        if (it == 0)
#pragma unroll
            for (int i = 0; i < MT; i++)
                frags_rows<HS>(qa[i], Qs + i * G::TILE, w16);
        /* a strip that starts at or past q1 has nothing to compute (its rows are not written) */
        bool see0 = sr[0] < q1 && flash_rows_see(sr[0], 16, kt);
        if constexpr (MT == 1) {
            if (see0)
                fwd_tile<HS, 1>(o, mrow, lrow, qa, sr, Kc, Vc, kt, q1, sl2);
        } else {
            /* strip 1's rows come 64 after strip 0's: it sees every tile strip 0 sees */
            bool see1 = sr[1] < q1 && flash_rows_see(sr[1], 16, kt);
            if (see0 && see1)
                fwd_tile<HS, 2>(o, mrow, lrow, qa, sr, Kc, Vc, kt, q1, sl2);
            else if (see1)
                fwd_tile<HS, 1>(o + 1, mrow + 1, lrow + 1, qa + 1, sr + 1, Kc, Vc, kt, q1, sl2);
            else if (see0)
                fwd_tile<HS, 1>(o, mrow, lrow, qa, sr, Kc, Vc, kt, q1, sl2);
        }
        block_sync(); /* the buffers just read are refilled next */
    }
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            float l = lrow[i][k];
            l += shfl_xor(l, 1);
            l += shfl_xor(l, 2);
            int row = sr[i] + g + 8 * k;
            if (row >= q1)
                continue;
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            bf16 *out = atty + ((size_t)b * T + row) * C + (size_t)h * HS + 2 * t;
            for (int n = 0; n < G::ND; n++)
                store_bf2(out + 8 * n, o[i][n][2 * k] * inv, o[i][n][2 * k + 1] * inv);
            if (t == 0)
                lse[((size_t)b * NH + h) * T + row] = mrow[i][k] + log2f(l);
        }
}

/* ---------------------------------------------------------------- backward */

/* Whether a backward kernel keeps the A fragments of its own 16 rows of the two tiles it holds
 * for the whole walk (K and V in dK/dV, Q and dY in dQ) in registers, as the forward keeps the
 * queries': each walked tile then costs only its B fragments' ldmatrix (about a ninth less shared
 * memory traffic at head size 64). Not at 128: 64 more registers where dK/dV already has 255. */
template <int HS> constexpr bool BWD_ROWS_IN_REGS = HS <= 64;

/* acc = the warp's 16 rows times Y^T: their A fragments from registers (ra, loaded by
 * frags_rows) when BWD_ROWS_IN_REGS, else from the shared tile X */
template <int HS>
__device__ __forceinline__ void rows_xyT(float acc[8][4], const uint32_t ra[][4], const bf16 *X,
                                         int w16, const bf16 *Y)
{
    if constexpr (BWD_ROWS_IN_REGS<HS>)
        strips_xyT<HS, 1>(reinterpret_cast<float(*)[8][4]>(acc),
                          reinterpret_cast<const uint32_t(*)[mgeo<HS>::NK][4]>(ra), Y);
    else
        xyT<HS>(acc, X, w16, Y);
}
/* the A fragments rows_xyT reads (a single unused one when not in registers) */
template <int HS> constexpr int BWD_RA = BWD_ROWS_IN_REGS<HS> ? mgeo<HS>::NK : 1;
template <int HS>
__device__ __forceinline__ void rows_frags(uint32_t ra[][4], const bf16 *X, int w16)
{
    if constexpr (BWD_ROWS_IN_REGS<HS>)
        frags_rows<HS>(ra, X, w16);
}

/* D[b][h][q] = sum_d dy[b][q][h HS + d] y[b][q][h HS + d] for q in [q0, q1), backward's first
 * step: HS / 8 lanes a row (2 to 16, so a row's lanes never straddle a warp), each 8 elements
 * (a 16-byte load of each operand when vec), the lanes' parts added by shuffles in a fixed order;
 * lane 0 of the row writes. Any block size that is a multiple of 32; every lane reaches the
 * shuffles (lanes past the last row add zeros). */
template <int HS>
__global__ void mma_dsum_kernel(float *D, const bf16 *dy, const bf16 *y, int B, int T, int NH,
                                int q0, int q1, bool vec)
{
    constexpr int LPR = HS / 8;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, row = i / LPR;
    int part = (int)(i % LPR), S = q1 - q0;
    bool ok = row < (size_t)B * NH * S;
    int q = 0, h = 0, b = 0;
    float acc = 0.0f;
    if (ok) {
        q = q0 + (int)(row % S);
        h = (int)(row / S % NH);
        b = (int)(row / S / NH);
        size_t o = ((size_t)b * T + q) * NH * HS + (size_t)h * HS + 8 * part;
        float a[8], c[8];
        load8(a, dy + o, vec);
        load8(c, y + o, vec);
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc += a[j] * c[j];
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m /= 2)
        acc += shfl_xor(acc, m);
    if (ok && part == 0)
        D[((size_t)b * NH + h) * T + q] = acc;
}

/* rows' lse (rows at or past q1: +inf, so P = 0) and D of the query tile from qt into shared */
__device__ __forceinline__ void rows_into(float *Ls, float *Ds, const float *lse, const float *D,
                                          int qt, int q1)
{
    for (int i = threadIdx.x; i < ROWS; i += NTHREADS) {
        int q = qt + i;
        Ls[i] = q < q1 ? lse[q] : INFINITY;
        Ds[i] = q < q1 ? D[q] : 0.0f;
    }
}

/* A warp's 16 rows of accumulators (C layout, [ND][4]) times sc into a [rows][stride] gradient at
 * columns [0, HS) from dst: rows row0 + g and + 8 (those < rend); with acc32 (fp32, same layout)
 * the sum with it, written to both */
template <int HS>
__device__ __forceinline__ void rows_out(bf16 *dst, float *acc32, const float v[][4], float sc,
                                         int row0, int rend, size_t stride)
{
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = row0 + g + 8 * i;
        if (r >= rend)
            continue;
        size_t o = (size_t)r * stride + 2 * t;
        for (int n = 0; n < mgeo<HS>::ND; n++) {
            float x = v[n][2 * i] * sc, y = v[n][2 * i + 1] * sc;
            if (acc32) {
                x += acc32[o + 8 * n];
                y += acc32[o + 8 * n + 1];
                acc32[o + 8 * n] = x;
                acc32[o + 8 * n + 1] = y;
            }
            store_bf2(dst + o + 8 * n, x, y);
        }
    }
}

/* The dS workspace of a pass [q0, q1) (the stored dQ path): per (sequence, head) bh, dS^T as
 * [key][query], the keys [0, q1) as rows of ds_ld(q0, q1) bf16, the query q at column q - q0;
 * whole 64-column query tiles from column 0, so the dQ kernel's 16-byte copies stay aligned and
 * inside a row. Only the pairs the dK/dV kernel visits are written (every visible one among
 * them); the rest is never read unmasked. */
__host__ __device__ __forceinline__ int ds_ld(int q0, int q1)
{
    return flash_ds_cols(q1 - q0);
}
__host__ __device__ __forceinline__ size_t ds_row(int bh, int q1, int key, int ld)
{
    return ((size_t)bh * q1 + key) * ld;
}

/* bf16(x), bf16(y) at columns col, col + 1 of a row of ncols: one 4-byte store when both are in
 * and col is even, else each that is in alone */
__device__ __forceinline__ void store_pair(bf16 *row, int col, float x, float y, int ncols)
{
    if (col + 1 < ncols && (col & 1) == 0) {
        store_bf2(row + col, x, y);
        return;
    }
    if (col < ncols)
        store_bf1(row + col, x);
    if (col + 1 < ncols)
        store_bf1(row + col + 1, y);
}

/* dK, dV of 64 keys (a warp 16) of one (sequence, head), over the query tiles that see them;
 * with dsT (the stored dQ path) each dS it computes also goes there in bf16, the value dK's
 * product reads (ds_ld, ds_row) */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
mma_dkdv_kernel(bf16 *dqkv, float *kv_acc, bf16 *dsT, const bf16 *dy, const float *lse,
                const float *D, const bf16 *qkv, int T, int NH, int q0, int q1, float sl2,
                float scale)
{
    typedef mgeo<HS> G;
    FM_SMEM(smem);
    bf16 *Ks = reinterpret_cast<bf16 *>(smem), *Vs = Ks + G::TILE, *Qs = Vs + G::TILE;
    bf16 *dYs = Qs + 2 * G::TILE;
    float *Ls = reinterpret_cast<float *>(dYs + 2 * G::TILE), *Ds = Ls + 2 * ROWS;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const bf16 *dyb = dy + (size_t)b * T * C + (size_t)h * HS;
    const float *lseb = lse + ((size_t)b * NH + h) * T, *Db = D + ((size_t)b * NH + h) * T;
    int kt0 = (int)blockIdx.x * ROWS, qfirst = flash_first_query(q0, kt0);
    int ntiles = (q1 - qfirst + ROWS - 1) / ROWS;
    tile_async<HS>(Ks, kb, stride, kt0, q1);
    tile_async<HS>(Vs, vb, stride, kt0, q1);
    tile_async<HS>(Qs, qb, stride, qfirst, q1);
    tile_async<HS>(dYs, dyb, (size_t)C, qfirst, q1);
    cp_async_commit();
    rows_into(Ls, Ds, lseb, Db, qfirst, q1);

    int w16 = 16 * w, key[2] = {kt0 + w16 + g, kt0 + w16 + g + 8};
    uint32_t ka[BWD_RA<HS>][4], va[BWD_RA<HS>][4];
    float dk[G::ND][4], dv[G::ND][4];
    for (int n = 0; n < G::ND; n++)
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        int qt = qfirst + it * ROWS, cur = it & 1, nxt = cur ^ 1;
        const bf16 *Qc = Qs + cur * G::TILE, *dYc = dYs + cur * G::TILE;
        const float *Lc = Ls + cur * ROWS, *Dc = Ds + cur * ROWS;
        if (it + 1 < ntiles) {
            tile_async<HS>(Qs + nxt * G::TILE, qb, stride, qt + ROWS, q1);
            tile_async<HS>(dYs + nxt * G::TILE, dyb, (size_t)C, qt + ROWS, q1);
            cp_async_commit();
            rows_into(Ls + nxt * ROWS, Ds + nxt * ROWS, lseb, Db, qt + ROWS, q1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        block_sync();
        if (it == 0) {
            rows_frags<HS>(ka, Ks, w16);
            rows_frags<HS>(va, Vs, w16);
        }
        if (flash_rows_see(qt, ROWS, kt0 + w16)) {
            bool masked = flash_needs_mask(qt, ROWS, kt0 + w16, 16, q1);
            float p[8][4], ds[8][4];
            rows_xyT<HS>(p, ka, Ks, w16, Qc); /* S^T: the warp's keys x the tile's queries */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = 8 * j + 2 * t + (e & 1);
                    float x = fast_exp2(p[j][e] * sl2 - Lc[qi]);
                    p[j][e] = masked && !flash_visible(qt + qi, key[e >> 1], q1) ? 0.0f : x;
                }
            rows_xyT<HS>(ds, va, Vs, w16, dYc); /* dP^T = V dY^T */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ds[j][e] = p[j][e] * (ds[j][e] - Dc[8 * j + 2 * t + (e & 1)]);
            if (dsT) {
                int ld = ds_ld(q0, q1);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    if (key[i] >= q1)
                        continue;
                    bf16 *row = dsT + ds_row(bh, q1, key[i], ld);
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        store_pair(row, qt - q0 + 8 * j + 2 * t, ds[j][2 * i], ds[j][2 * i + 1],
                                   q1 - q0);
                }
            }
            pY<HS>(dv, p, dYc);  /* dV += P^T dY */
            pY<HS>(dk, ds, Qc);  /* dK += dS^T Q */
        }
        block_sync(); /* the buffers just read are refilled next */
    }
    bf16 *base = dqkv + (size_t)b * T * stride + (size_t)h * HS;
    float *accb = kv_acc ? kv_acc + (size_t)b * T * stride + (size_t)h * HS : NULL;
    rows_out<HS>(base + C, accb ? accb + C : NULL, dk, scale, kt0 + w16, q1, stride);
    rows_out<HS>(base + 2 * C, accb ? accb + 2 * C : NULL, dv, 1.0f, kt0 + w16, q1, stride);
}

/* dQ of 64 queries (a warp 16) of one (sequence, head), over the key tiles they see */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
mma_dq_kernel(bf16 *dqkv, const bf16 *dy, const float *lse, const float *D, const bf16 *qkv, int T,
              int NH, int q0, int q1, float sl2, float scale)
{
    typedef mgeo<HS> G;
    FM_SMEM(smem);
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *dYs = Qs + G::TILE, *Ks = dYs + G::TILE;
    bf16 *Vs = Ks + 2 * G::TILE;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t stride = 3 * (size_t)C;
    const bf16 *qb = qkv + (size_t)b * T * stride + (size_t)h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const bf16 *dyb = dy + (size_t)b * T * C + (size_t)h * HS;
    const float *lseb = lse + ((size_t)b * NH + h) * T, *Db = D + ((size_t)b * NH + h) * T;
    int qt0 = flash_query_tile(q0, q1, (int)gridDim.x - 1 - (int)blockIdx.x); /* heavy first */
    int kend = flash_key_end(qt0, q1), ntiles = (kend + ROWS - 1) / ROWS;
    tile_async<HS>(Qs, qb, stride, qt0, q1);
    tile_async<HS>(dYs, dyb, (size_t)C, qt0, q1);
    tile_async<HS>(Ks, kb, stride, 0, kend);
    tile_async<HS>(Vs, vb, stride, 0, kend);
    cp_async_commit();

    int w16 = 16 * w, row[2] = {qt0 + w16 + g, qt0 + w16 + g + 8};
    float L[2], Dr[2];
    for (int i = 0; i < 2; i++) {
        L[i] = row[i] < q1 ? lseb[row[i]] : INFINITY;
        Dr[i] = row[i] < q1 ? Db[row[i]] : 0.0f;
    }
    uint32_t qa[BWD_RA<HS>][4], dya[BWD_RA<HS>][4];
    float dq[G::ND][4];
    for (int n = 0; n < G::ND; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        int kt = it * ROWS;
        const bf16 *Kc = Ks + (it & 1) * G::TILE, *Vc = Vs + (it & 1) * G::TILE;
        kv_step<HS>(Ks, Vs, kb, vb, stride, it, ntiles, kend);
        if (it == 0) {
            rows_frags<HS>(qa, Qs, w16);
            rows_frags<HS>(dya, dYs, w16);
        }
        if (flash_rows_see(qt0 + w16, 16, kt)) {
            bool masked = flash_needs_mask(qt0 + w16, 16, kt, ROWS, q1);
            float p[8][4], ds[8][4];
            rows_xyT<HS>(p, qa, Qs, w16, Kc); /* S: the warp's queries x the tile's keys */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = fast_exp2(p[j][e] * sl2 - L[e >> 1]);
                    p[j][e] = masked && !flash_visible(row[e >> 1], kt + 8 * j + 2 * t + (e & 1), q1)
                                  ? 0.0f
                                  : x;
                }
            rows_xyT<HS>(ds, dya, dYs, w16, Vc); /* dP = dY V^T */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ds[j][e] = p[j][e] * (ds[j][e] - Dr[e >> 1]);
            pY<HS>(dq, ds, Kc); /* dQ += dS K */
        }
        block_sync(); /* the buffers just read are refilled next */
    }
    rows_out<HS>(dqkv + (size_t)b * T * stride + (size_t)h * HS, NULL, dq, scale, qt0 + w16, q1,
                 stride);
}

/* A warp's A fragment (a: 16 queries from qw, keys kk0..kk0 + 15, ldmatrix .trans of a dS^T
 * tile) with the pairs that are not visible zeroed: a key after its query, a query at or past q1
 * (never written in the workspace) */
__device__ __forceinline__ void mask_a(uint32_t a[4], int qw, int kk0, int q1)
{
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int q = qw + g + 8 * (i & 1), k = kk0 + 2 * t + 8 * (i >> 1);
        uint32_t keep = (flash_visible(q, k, q1) ? 0x0000ffffu : 0u) |
                        (flash_visible(q, k + 1, q1) ? 0xffff0000u : 0u);
        a[i] &= keep;
    }
}

/* dQ of 64 queries (a warp 16) of one (sequence, head) from the dS that the dK/dV kernel stored:
 * dQ = dS K over the key tiles the queries see, the dS^T tiles ([64 keys][64 queries]) and the K
 * tiles double-buffered with cp.async; dS's A fragments by ldmatrix .trans of the stored tile,
 * masked in the tiles flash_needs_mask names (the pairs left unwritten are all invisible). One
 * product a pair instead of the recomputing kernel's three. */
template <int HS>
__global__ void __launch_bounds__(NTHREADS)
mma_dq_ds_kernel(bf16 *dqkv, const bf16 *dsT, const bf16 *qkv, int T, int NH, int q0, int q1,
                 float scale)
{
    typedef mgeo<HS> G;
    typedef mgeo<ROWS> S; /* a dS^T tile: 64 query columns */
    FM_SMEM(smem);
    bf16 *Ss = reinterpret_cast<bf16 *>(smem), *Ks = Ss + 2 * S::TILE;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, ld = ds_ld(q0, q1);
    size_t stride = 3 * (size_t)C;
    const bf16 *kb = qkv + (size_t)b * T * stride + C + (size_t)h * HS;
    int qt0 = flash_query_tile(q0, q1, (int)gridDim.x - 1 - (int)blockIdx.x); /* heavy first */
    const bf16 *sb = dsT + ds_row(bh, q1, 0, ld) + (qt0 - q0);
    int kend = flash_key_end(qt0, q1), ntiles = (kend + ROWS - 1) / ROWS;
    tile_async<ROWS>(Ss, sb, (size_t)ld, 0, kend);
    tile_async<HS>(Ks, kb, stride, 0, kend);
    cp_async_commit();

    int w16 = 16 * w;
    float dq[G::ND][4];
    for (int n = 0; n < G::ND; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        int kt = it * ROWS, cur = it & 1;
        const bf16 *Sc = Ss + cur * S::TILE, *Kc = Ks + cur * G::TILE;
        if (it + 1 < ntiles) {
            tile_async<ROWS>(Ss + (cur ^ 1) * S::TILE, sb, (size_t)ld, kt + ROWS, kend);
            tile_async<HS>(Ks + (cur ^ 1) * G::TILE, kb, stride, kt + ROWS, kend);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        block_sync();
        if (flash_rows_see(qt0 + w16, 16, kt)) {
            bool masked = flash_needs_mask(qt0 + w16, 16, kt, ROWS, q1);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t a[4];
                ldsm4t(a, Sc + (16 * kk + 8 * (m >> 1) + r) * S::LDH + w16 + 8 * (m & 1));
                if (masked)
                    mask_a(a, qt0 + w16, kt + 16 * kk, q1);
#pragma unroll
                for (int n = 0; n < G::ND; n += 2) {
                    uint32_t bb[4];
                    ldsm4t(bb, Kc + (16 * kk + 8 * (m & 1) + r) * G::LDH + 8 * (n + (m >> 1)));
                    mma(dq[n], a, bb[0], bb[1]);
                    mma(dq[n + 1], a, bb[2], bb[3]);
                }
            }
        }
        block_sync(); /* the buffers just read are refilled next */
    }
    rows_out<HS>(dqkv + (size_t)b * T * stride + (size_t)h * HS, NULL, dq, scale, qt0 + w16, q1,
                 stride);
}

/* each kernel's dynamic shared memory */
template <int HS> constexpr size_t fwd_smem()
{
    return (FWD_STRIPS<HS> + 4) * mgeo<HS>::TILE * sizeof(bf16);
}
template <int HS> constexpr size_t dkdv_smem()
{
    return 6 * mgeo<HS>::TILE * sizeof(bf16) + 4 * ROWS * sizeof(float);
}
template <int HS> constexpr size_t dq_smem()
{
    return 6 * mgeo<HS>::TILE * sizeof(bf16);
}
template <int HS> constexpr size_t dq_ds_smem()
{
    return 2 * (mgeo<ROWS>::TILE + mgeo<HS>::TILE) * sizeof(bf16);
}
