/* LayerNorm's kernels and the column sums (layernorm.cu and matmul.cu launch them), written
 * against a few primitives that the includer defines, so that the same source compiles for the
 * GPU and for the host emulator that checks it without one (tests/unit/layernorm_emu.cc):
 *   floatX                       the activations' type; tof(x) as float, put(p, f) stores f
 *   pack16<T>, load16(p), store16(p, v)   16 bytes of T (.v[]), the unit of the vector accesses
 *   warp_sum(v)                  the sum over the warp, every lane gets it
 *   block_sync()                 __syncthreads
 *   COLSUM_FINISH_SMEM(name)     float name[2 * COLSUM_FINISH_GROUPS * COLSUM_FINISH_COLS], shared
 *   LN_BWD_SMEM(name)            float name[LN_BWD_SMEM_FLOATS(XV)], shared (XV: the vectors'
 *                                width, 16 / sizeof(floatX))
 * and threadIdx, blockIdx, blockDim, __global__, __device__, __forceinline__, __launch_bounds__,
 * min.
 * Row splits are colsum_plan.h's. Include inside the includer's namespace, after colsum_plan.h. */
#pragma once

/* VEC elements of row x at column c, as floats */
template <int VEC> __device__ __forceinline__ void load_row(float *out, const floatX *x, int c)
{
    if (VEC > 1) {
        pack16<floatX> p = load16(x + c);
        for (int j = 0; j < VEC; j++)
            out[j] = tof(p.v[j]);
    } else {
        out[0] = tof(x[c]);
    }
}

/* VEC weights from column c as floats: 16-byte loads when wvec (w 16-byte aligned, VEC a
 * multiple of 4) */
template <int VEC> __device__ __forceinline__ void load_w(float *out, const float *w, int c, bool wvec)
{
    if (VEC % 4 == 0 && wvec) {
        for (int j = 0; j < VEC; j += 4) {
            pack16<float> p = load16(w + c + j);
            for (int k = 0; k < 4; k++)
                out[j + k] = p.v[k];
        }
    } else {
        for (int j = 0; j < VEC; j++)
            out[j] = w[c + j];
    }
}

/* The part of a row a lane holds: vector i (i < IT) is the VEC columns from (lane + 32 i) VEC.
 * IT > 0: the row read from memory once, held in registers as loaded (16-byte packs) for every
 * later pass; IT = 0 (rows longer than 32 VEC IT_MAX, or VEC 1): each pass reads the row again
 * (from the cache). Either way the lane's columns, and so every sum's order, are the same. */
template <int VEC, int IT> struct row_part {
    pack16<floatX> p[IT > 0 ? IT : 1];
    const floatX *x;
    int C, lane;
    __device__ __forceinline__ void load(const floatX *x_, int C_, int lane_)
    {
        x = x_;
        C = C_;
        lane = lane_;
        if (IT > 0)
            for (int i = 0; i < IT; i++)
                p[i] = (lane + 32 * i) * VEC < C ? load16(x + (lane + 32 * i) * VEC)
                                                 : pack16<floatX>{}; /* never read */
    }
    /* the lane's vector at column c (c = (lane + 32 i) VEC: vector i), as floats */
    __device__ __forceinline__ void get(float *out, int i, int c) const
    {
        if (IT > 0) {
            for (int j = 0; j < VEC; j++)
                out[j] = tof(p[i].v[j]);
        } else {
            load_row<VEC>(out, x, c);
        }
    }
};
/* vectors a lane walks: IT (held) or as many as the row has (re-read) */
template <int VEC, int IT> __device__ __forceinline__ int row_vectors(int C)
{
    return IT > 0 ? IT : (C + 32 * VEC - 1) / (32 * VEC);
}

/* The IT a row of C columns takes on the vector path (VEC columns a vector): the fewest of 1, 2,
 * 4 or 8 vectors a lane that hold it, at most max_it; 0 (re-read) past it. Forward: up to 8 (bf16
 * rows to 2,048 columns). Backward, which holds two rows: compiled up to 8 (165 registers at
 * sm_90, no spills, one block of 256 threads an SM), used up to LN_BWD_DEFAULT_IT (4: 98
 * registers, two blocks an SM) unless HOLMES_GPU_LN_BWD_MAX_IT says otherwise (0, 1, 2, 4 or 8:
 * which is faster for GPT-2 1.5B's 1,600 columns waits for a GPU). The launchers call
 * by_row_its<LN_*_MAX_IT>, which calls f(ln_its<IT>{}) with it as a compile-time constant. */
template <int N> struct ln_its {
    static constexpr int value = N;
};
static inline int ln_row_its(int C, int vec, int max_it)
{
    int v = (C + 32 * vec - 1) / (32 * vec);
    int it = v <= 1 ? 1 : v <= 2 ? 2 : v <= 4 ? 4 : v <= 8 ? 8 : 0;
    return it <= max_it ? it : 0;
}
#define LN_FWD_MAX_IT 8
#define LN_BWD_MAX_IT 8
#define LN_BWD_DEFAULT_IT 4
template <int MAX_IT, class F> auto by_row_its(int it, F f)
{
    switch (it) {
    case 1: return f(ln_its<1>{});
    case 2: return f(ln_its<2>{});
    case 4: return f(ln_its<4>{});
    }
    if constexpr (MAX_IT >= 8) /* only what ln_row_its(., ., MAX_IT) can give is compiled */
        if (it == 8)
            return f(ln_its<8>{});
    return f(ln_its<0>{});
}

/* one warp per row; statistics in fp32; weights from the fp32 master copy (16-byte loads when
 * wvec); the row held in registers (IT > 0) or re-read (IT = 0), see row_part */
template <int VEC, int IT>
__global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                         const float *w, const float *b, int N, int C, bool wvec)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N)
        return;
    row_part<VEC, IT> x;
    x.load(inp + (size_t)row * C, C, lane);
    const int nv = row_vectors<VEC, IT>(C);
    float xv[VEC];
    float s = 0.0f;
    for (int i = 0; i < nv; i++) {
        int c = (lane + 32 * i) * VEC;
        if (c < C) {
            x.get(xv, i, c);
            for (int j = 0; j < VEC; j++)
                s += xv[j];
        }
    }
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = 0; i < nv; i++) {
        int c = (lane + 32 * i) * VEC;
        if (c < C) {
            x.get(xv, i, c);
            for (int j = 0; j < VEC; j++) {
                float d = xv[j] - m;
                v += d * d;
            }
        }
    }
    float rs = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int i = 0; i < nv; i++) {
        int c = (lane + 32 * i) * VEC;
        if (c >= C)
            continue;
        float wv[VEC], bv[VEC];
        x.get(xv, i, c);
        load_w<VEC>(wv, w, c, wvec);
        load_w<VEC>(bv, b, c, wvec);
        if (VEC > 1) {
            pack16<floatX> p;
            for (int j = 0; j < VEC; j++)
                put(&p.v[j], (xv[j] - m) * rs * wv[j] + bv[j]);
            store16(o + c, p);
        } else {
            put(o + c, (xv[0] - m) * rs * wv[0] + bv[0]);
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* threads of the LayerNorm backward's block, and the floats of its shared memory: the row groups'
 * column sums, 2 a column (weight, bias) for up to LN_BWD_THREADS * VEC columns */
#define LN_BWD_THREADS 256
#define LN_BWD_SMEM_FLOATS(VEC) (2 * LN_BWD_THREADS * (VEC))

/* Block `chunk` = rows [chunk rows, +rows) (rows = colsum_rows(N)), LN_BWD_THREADS threads:
 * dinp += d(layernorm)/dinp, a warp per row (the row of the input and of its gradient held in
 * registers between the two passes when IT > 0); then partial[chunk][0][c] = sum over its rows of
 * dout * xhat (the weight's gradient), partial[chunk][1][c] = sum of dout (the bias's), VEC
 * columns a thread and, when the columns take fewer threads than the block has, G row groups:
 * group g sums the rows r0 + g, r0 + g + G, ... in order (re-read from the cache), then group 0
 * adds the groups' sums 1, 2, ... in order (shared memory) to its own. */
template <int VEC, int IT>
__global__ void __launch_bounds__(LN_BWD_THREADS)
layernorm_backward_kernel(floatX *dinp, float *partial, const floatX *dout,
                                          const floatX *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C, int rows, bool wvec)
{
    LN_BWD_SMEM(sh);
    int chunk = blockIdx.x, r0 = chunk * rows, r1 = min(N, r0 + rows);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const int nv = row_vectors<VEC, IT>(C);
    float xv[VEC], dv[VEC], wv[VEC];
    for (int r = r0 + warp; r < r1; r += nw) {
        row_part<VEC, IT> x, d;
        x.load(inp + (size_t)r * C, C, lane);
        d.load(dout + (size_t)r * C, C, lane);
        float m = mean[r], rs = rstd[r];
        float dmean = 0.0f, dnm = 0.0f;
        for (int i = 0; i < nv; i++) {
            int c = (lane + 32 * i) * VEC;
            if (c >= C)
                continue;
            x.get(xv, i, c);
            d.get(dv, i, c);
            load_w<VEC>(wv, w, c, wvec);
            for (int j = 0; j < VEC; j++) {
                float dn = wv[j] * dv[j];
                dmean += dn;
                dnm += dn * (xv[j] - m) * rs;
            }
        }
        dmean = warp_sum(dmean) / (float)C;
        dnm = warp_sum(dnm) / (float)C;
        floatX *dx = dinp + (size_t)r * C;
        for (int i = 0; i < nv; i++) {
            int c = (lane + 32 * i) * VEC;
            if (c >= C)
                continue;
            float gv[VEC];
            x.get(xv, i, c);
            d.get(dv, i, c);
            load_w<VEC>(wv, w, c, wvec);
            load_row<VEC>(gv, dx, c);
            if (VEC > 1) {
                pack16<floatX> p;
                for (int j = 0; j < VEC; j++)
                    put(&p.v[j], gv[j] + (wv[j] * dv[j] - dmean - (xv[j] - m) * rs * dnm) * rs);
                store16(dx + c, p);
            } else {
                put(dx + c, gv[0] + (wv[0] * dv[0] - dmean - (xv[0] - m) * rs * dnm) * rs);
            }
        }
    }
    /* the columns' sums: ncv column vectors, G row groups */
    int ncv = (C + VEC - 1) / VEC, G = (int)blockDim.x / ncv;
    if (G < 1)
        G = 1;
    if (G > r1 - r0)
        G = r1 - r0 > 0 ? r1 - r0 : 1;
    for (int base = 0; base < ncv; base += (int)blockDim.x) { /* G 1: columns in rounds */
        int t = (int)threadIdx.x, cv = G > 1 ? t % ncv : base + t, g = G > 1 ? t / ncv : 0;
        int c = cv * VEC;
        bool active = g < G && cv < ncv;
        float s0[VEC], s1[VEC];
        for (int j = 0; j < VEC; j++)
            s0[j] = s1[j] = 0.0f;
        if (active)
            for (int r = r0 + g; r < r1; r += G) {
                float m = mean[r], rs = rstd[r];
                load_row<VEC>(xv, inp + (size_t)r * C, c);
                load_row<VEC>(dv, dout + (size_t)r * C, c);
                for (int j = 0; j < VEC; j++) {
                    s1[j] += dv[j];
                    s0[j] += dv[j] * (xv[j] - m) * rs;
                }
            }
        if (G > 1) {
            block_sync(); /* (a no-op barrier before the first writes) */
            if (active && g > 0)
                for (int j = 0; j < VEC; j++) {
                    sh[((g - 1) * 2 + 0) * ncv * VEC + c + j] = s0[j];
                    sh[((g - 1) * 2 + 1) * ncv * VEC + c + j] = s1[j];
                }
            block_sync();
            if (active && g == 0)
                for (int k = 1; k < G; k++)
                    for (int j = 0; j < VEC; j++) {
                        s0[j] += sh[((k - 1) * 2 + 0) * ncv * VEC + c + j];
                        s1[j] += sh[((k - 1) * 2 + 1) * ncv * VEC + c + j];
                    }
        }
        if (active && g == 0)
            for (int j = 0; j < VEC; j++) {
                partial[((size_t)chunk * 2 + 0) * C + c + j] = s0[j];
                partial[((size_t)chunk * 2 + 1) * C + c + j] = s1[j];
            }
        if (G > 1)
            break; /* every column vector had a thread */
    }
}

/* Column sums of d[N][C] (a bias's gradient), a block (x) of threads a column group, blockIdx.y
 * the chunk of `rows` rows, VEC columns a thread: partial[chunk][1][c] = the sum of the chunk's
 * rows in order (row 0 of the pair is the LayerNorm weight's, unused here). */
template <int VEC>
__global__ void colsum_partial_kernel(float *partial, const floatX *d, int N, int C, int rows)
{
    int c = (blockIdx.x * blockDim.x + threadIdx.x) * VEC, chunk = blockIdx.y;
    if (c >= C)
        return;
    int r0 = chunk * rows, r1 = min(N, r0 + rows);
    float s1[VEC];
    for (int j = 0; j < VEC; j++)
        s1[j] = 0.0f;
    for (int r = r0; r < r1; r++)
        if (VEC > 1) {
            pack16<floatX> p = load16(d + (size_t)r * C + c);
            for (int j = 0; j < VEC; j++)
                s1[j] += tof(p.v[j]);
        } else {
            s1[0] += tof(d[(size_t)r * C + c]);
        }
    for (int j = 0; j < VEC; j++)
        partial[((size_t)chunk * 2 + 1) * C + c + j] = s1[j];
}

/* The chunks' sums in a fixed order: gw (+)= the sum of partial[k][0], gb (+)= of partial[k][1]
 * (either may be NULL; accum: add, else write). Block (COLSUM_FINISH_COLS, COLSUM_FINISH_GROUPS):
 * thread (x, g) adds the chunks g, g + GROUPS, ... of column blockIdx.x COLS + x in order, then
 * thread (x, 0) adds the groups' sums 0, 1, ... in order. */
__global__ void colsum_finish_kernel(float *gw, float *gb, const float *partial, int chunks, int C,
                                     int accum)
{
    COLSUM_FINISH_SMEM(sh);
    const int G = COLSUM_FINISH_GROUPS, W = COLSUM_FINISH_COLS;
    int x = threadIdx.x, g = threadIdx.y, c = blockIdx.x * W + x;
    float s0 = 0.0f, s1 = 0.0f;
    if (c < C)
        for (int k = g; k < chunks; k += G) {
            if (gw)
                s0 += partial[((size_t)k * 2 + 0) * C + c];
            if (gb)
                s1 += partial[((size_t)k * 2 + 1) * C + c];
        }
    sh[g * W + x] = s0;
    sh[(G + g) * W + x] = s1;
    block_sync();
    if (g != 0 || c >= C)
        return;
    s0 = s1 = 0.0f;
    for (int j = 0; j < G; j++) {
        s0 += sh[j * W + x];
        s1 += sh[(G + j) * W + x];
    }
    if (gw)
        gw[c] = accum ? gw[c] + s0 : s0;
    if (gb)
        gb[c] = accum ? gb[c] + s1 : s1;
}
