/* LayerNorm (llm.c's layernorm.cuh), forward beside backward: one warp per row, statistics in
 * fp32, weights from the fp32 master copy; the weight and bias gradients by column sums
 * (matmul.cu's colsum). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* one warp per row; statistics in fp32; weights from the fp32 master copy */
__global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                         const float *w, const float *b, int N, int C)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const floatX *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += tof(x[c]);
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = tof(x[c]) - m;
        v += d * d;
    }
    float rs = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        put(o + c, (tof(x[c]) - m) * rs * w[c] + b[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = rs;
    }
}

/* dinp += d(layernorm)/dinp, one warp per row (parameter gradients: colsum kernels) */
__global__ void layernorm_backward_kernel(floatX *dinp, const floatX *dout, const floatX *inp,
                                          const float *w, const float *mean, const float *rstd,
                                          int N, int C)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const floatX *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    float dmean = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = w[c] * tof(d[c]);
        dmean += dn;
        dnm += dn * (tof(x[c]) - m) * rs;
    }
    dmean = warp_sum(dmean) / (float)C;
    dnm = warp_sum(dnm) / (float)C;
    floatX *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (tof(x[c]) - m) * rs;
        put(dx + c, tof(dx[c]) + (w[c] * tof(d[c]) - dmean - norm * dnm) * rs);
    }
}

} /* namespace */

int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd, const floatX *inp,
                  size_t woff, size_t boff, int N)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    layernorm_forward_kernel<<<blocks_for((size_t)N * 32, 256), 256, 0, s->x.stream>>>(
        out, mean, rstd, inp, s->params + woff, s->params + boff, N, s->c.channels);
    LAUNCHED(s->x.stream);
    return 0;
}

int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff, const floatX *dout,
                  const floatX *inp, const float *mean, const float *rstd, int N)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels;
    layernorm_backward_kernel<<<blocks_for((size_t)N * 32, 256), 256, 0, s->x.stream>>>(
        dinp, dout, inp, s->params + woff, mean, rstd, N, C);
    LAUNCHED(s->x.stream);
    return colsum(&s->x, s->partial, s->grads + woff, s->grads + boff, dout, inp, mean, rstd, N, C);
}

} /* namespace GPU_NS */
