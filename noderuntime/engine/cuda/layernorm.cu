/* LayerNorm (llm.c's layernorm.cuh), forward beside backward: one warp per row, statistics in
 * fp32, weights from the fp32 master copy, 16-byte loads and stores when the rows allow. The
 * backward makes its own weight and bias gradients: each block of COLSUM_ROWS rows writes the
 * input's gradient row by row, then its columns' partial sums (re-reading rows the block has just
 * read, from the cache), and one small kernel adds the blocks' sums in order (no atomics: the
 * same bits every run). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

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

/* Block `chunk` = rows [chunk COLSUM_ROWS, +COLSUM_ROWS): dinp += d(layernorm)/dinp, a warp per
 * row; then partial[chunk][0][c] = sum over its rows of dout * xhat (the weight's gradient),
 * partial[chunk][1][c] = sum of dout (the bias's), VEC columns a thread, rows in order. */
template <int VEC>
__global__ void layernorm_backward_kernel(floatX *dinp, float *partial, const floatX *dout,
                                          const floatX *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C)
{
    int chunk = blockIdx.x, r0 = chunk * COLSUM_ROWS, r1 = min(N, r0 + COLSUM_ROWS);
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

int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} /* namespace */

int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd, const floatX *inp,
                  size_t woff, size_t boff, int N)
{
    PROF(&s->x, GPU_PART_LAYERNORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels;
    unsigned grid = blocks_for((size_t)N * 32, 256);
    if (C % XV == 0 && aligned16(out) && aligned16(inp))
        layernorm_forward_kernel<XV><<<grid, 256, 0, s->x.stream>>>(
            out, mean, rstd, inp, s->params + woff, s->params + boff, N, C);
    else
        layernorm_forward_kernel<1><<<grid, 256, 0, s->x.stream>>>(
            out, mean, rstd, inp, s->params + woff, s->params + boff, N, C);
    LAUNCHED(s->x.stream);
    return 0;
}

int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff, const floatX *dout,
                  const floatX *inp, const float *mean, const float *rstd, int N)
{
    PROF(&s->x, GPU_PART_LAYERNORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels, chunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    if (C % XV == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp))
        layernorm_backward_kernel<XV><<<(unsigned)chunks, 256, 0, s->x.stream>>>(
            dinp, s->partial, dout, inp, s->params + woff, mean, rstd, N, C);
    else
        layernorm_backward_kernel<1><<<(unsigned)chunks, 256, 0, s->x.stream>>>(
            dinp, s->partial, dout, inp, s->params + woff, mean, rstd, N, C);
    LAUNCHED(s->x.stream);
    return colsum_finish(&s->x, s->grads + woff, s->grads + boff, s->partial, chunks, C);
}

} /* namespace GPU_NS */
