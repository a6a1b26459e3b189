/* Flash attention's backward kernels (mma.sync): D = rowsum(dY Y), dK and dV (storing dS), dQ from
 * the stored dS or recomputing it. Part of flash_mma_kernels.cuh, which includes it after the
 * primitives and the shared helpers it uses (flash.cu has the whole description). */
#pragma once

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

/* A backward block's views of its (sequence, head) (blockIdx.y = b NH + h): its q, k and v
 * columns of the qkv rows (3 C apart), its dy columns (C apart), its rows of lse and D */
template <int HS> struct bh_views {
    int C;
    size_t stride;
    const bf16 *q, *k, *v, *dy;
    const float *lse, *D;
    __device__ __forceinline__ bh_views(const bf16 *qkv, const bf16 *dy_, const float *lse_,
                                        const float *D_, int T, int NH)
    {
        int bh = blockIdx.y, b = bh / NH, h = bh % NH;
        C = NH * HS;
        stride = 3 * (size_t)C;
        q = qkv + (size_t)b * T * stride + (size_t)h * HS;
        k = q + C;
        v = q + 2 * C;
        dy = dy_ + (size_t)b * T * C + (size_t)h * HS;
        lse = lse_ + (size_t)bh * T;
        D = D_ + (size_t)bh * T;
    }
};

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
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    bh_views<HS> V(qkv, dy, lse, D, T, NH);
    int C = V.C;
    size_t stride = V.stride;
    const bf16 *qb = V.q, *kb = V.k, *vb = V.v, *dyb = V.dy;
    const float *lseb = V.lse, *Db = V.D;
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
    int b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH;
    bh_views<HS> V(qkv, dy, lse, D, T, NH);
    int C = V.C;
    size_t stride = V.stride;
    const bf16 *qb = V.q, *kb = V.k, *vb = V.v, *dyb = V.dy;
    const float *lseb = V.lse, *Db = V.D;
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
