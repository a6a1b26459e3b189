/* Flash attention's forward kernel (mma.sync), part of flash_mma_kernels.cuh, which includes it
 * after the primitives and the shared helpers it uses (flash.cu has the whole description). */
#pragma once

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

/* its dynamic shared memory */
template <int HS> constexpr size_t fwd_smem()
{
    return (FWD_STRIPS<HS> + 4) * mgeo<HS>::TILE * sizeof(bf16);
}
