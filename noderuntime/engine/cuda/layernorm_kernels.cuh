/* LayerNorm's kernels and the column sums (layernorm.cu and matmul.cu launch them), written
 * against a few primitives that the includer defines, so that the same source compiles for the
 * GPU and for the host emulator that checks it without one (tests/unit/layernorm_emu.cc):
 *   floatX                       the activations' type; tof(x) as float, put(p, f) stores f
 *   pack16<T>, load16(p), store16(p, v)   16 bytes of T (.v[]), the unit of the vector accesses
 *   warp_sum(v)                  the sum over the warp, every lane gets it
 *   block_sync()                 __syncthreads
 *   COLSUM_FINISH_SMEM(name)     float name[2 * COLSUM_FINISH_GROUPS * COLSUM_FINISH_COLS], shared
 * and threadIdx, blockIdx, blockDim, __global__, __device__, __forceinline__, min.
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

/* one warp per row; statistics in fp32; weights from the fp32 master copy */
template <int VEC>
__global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                         const float *w, const float *b, int N, int C)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const floatX *x = inp + (size_t)row * C;
    float xv[VEC];
    float s = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        load_row<VEC>(xv, x, c);
        for (int j = 0; j < VEC; j++)
            s += xv[j];
    }
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        load_row<VEC>(xv, x, c);
        for (int j = 0; j < VEC; j++) {
            float d = xv[j] - m;
            v += d * d;
        }
    }
    float rs = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        load_row<VEC>(xv, x, c);
        if (VEC > 1) {
            pack16<floatX> p;
            for (int j = 0; j < VEC; j++)
                put(&p.v[j], (xv[j] - m) * rs * w[c + j] + b[c + j]);
            store16(o + c, p);
        } else {
            put(o + c, (xv[0] - m) * rs * w[c] + b[c]);
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* Block `chunk` = rows [chunk rows, +rows) (rows = colsum_rows(N)): dinp += d(layernorm)/dinp, a
 * warp per row; then partial[chunk][0][c] = sum over its rows of dout * xhat (the weight's
 * gradient), partial[chunk][1][c] = sum of dout (the bias's), VEC columns a thread, rows in order
 * (re-read from the cache). */
template <int VEC>
__global__ void layernorm_backward_kernel(floatX *dinp, float *partial, const floatX *dout,
                                          const floatX *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C, int rows)
{
    int chunk = blockIdx.x, r0 = chunk * rows, r1 = min(N, r0 + rows);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    float xv[VEC], dv[VEC];
    for (int r = r0 + warp; r < r1; r += nw) {
        const floatX *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        float m = mean[r], rs = rstd[r];
        float dmean = 0.0f, dnm = 0.0f;
        for (int c = lane * VEC; c < C; c += 32 * VEC) {
            load_row<VEC>(xv, x, c);
            load_row<VEC>(dv, d, c);
            for (int j = 0; j < VEC; j++) {
                float dn = w[c + j] * dv[j];
                dmean += dn;
                dnm += dn * (xv[j] - m) * rs;
            }
        }
        dmean = warp_sum(dmean) / (float)C;
        dnm = warp_sum(dnm) / (float)C;
        floatX *dx = dinp + (size_t)r * C;
        for (int c = lane * VEC; c < C; c += 32 * VEC) {
            float gv[VEC];
            load_row<VEC>(xv, x, c);
            load_row<VEC>(dv, d, c);
            load_row<VEC>(gv, dx, c);
            if (VEC > 1) {
                pack16<floatX> p;
                for (int j = 0; j < VEC; j++)
                    put(&p.v[j], gv[j] + (w[c + j] * dv[j] - dmean - (xv[j] - m) * rs * dnm) * rs);
                store16(dx + c, p);
            } else {
                put(dx + c, gv[0] + (w[c] * dv[0] - dmean - (xv[0] - m) * rs * dnm) * rs);
            }
        }
    }
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float s0[VEC], s1[VEC];
        for (int j = 0; j < VEC; j++)
            s0[j] = s1[j] = 0.0f;
        for (int r = r0; r < r1; r++) {
            float m = mean[r], rs = rstd[r];
            load_row<VEC>(xv, inp + (size_t)r * C, c);
            load_row<VEC>(dv, dout + (size_t)r * C, c);
            for (int j = 0; j < VEC; j++) {
                s1[j] += dv[j];
                s0[j] += dv[j] * (xv[j] - m) * rs;
            }
        }
        for (int j = 0; j < VEC; j++) {
            partial[((size_t)chunk * 2 + 0) * C + c + j] = s0[j];
            partial[((size_t)chunk * 2 + 1) * C + c + j] = s1[j];
        }
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
