/* The CUDA engine's device code: conversions, reductions, and the kernels of embeddings,
 * LayerNorm, GELU and bias, attention, cross-entropy and the optimizer. Part of gpt_cuda.cu's
 * one translation unit (included there once, as llm.c's train_gpt2.cu includes its llmc/
 * headers): floatX, GELU_K, SQ_BLOCKS and COLSUM_ROWS come from there. */
#pragma once

/* ---------------------------------------------------------------- conversions */

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void put(float *p, float x) { *p = x; }
__device__ __forceinline__ void put(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result. */
__device__ float block_sum(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

__global__ void cast_kernel(floatX *out, const float *in, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, in[i]);
}
__global__ void uncast_kernel(float *out, const floatX *in, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tof(in[i]);
}
/* the sliced backward's key and value gradients: acc += d (fp32), then d = acc (the sum so far,
 * in the activation type) */
__global__ void accumulate_kernel(float *acc, floatX *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = acc[i] + tof(d[i]);
        acc[i] = v;
        put(d + i, v);
    }
}
/* uniform [-1, 1) from a hash of the index: benchmark inputs, never zeros */
__global__ void fill_random_kernel(floatX *out, size_t n, unsigned seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
        put(out + i, (float)x * (2.0f / 4294967296.0f) - 1.0f);
    }
}

/* ---------------------------------------------------------------- kernels: embeddings */

__global__ void encoder_forward_kernel(floatX *x, const int *tok, const floatX *wte,
                                       const floatX *wpe, int BT, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C)
        return;
    size_t r = i / C, c = i % C;
    put(x + i, tof(wte[(size_t)tok[r] * C + c]) + tof(wpe[(r % T) * C + c]));
}

/* Tensor parallelism: this rank's part of the token embeddings, in fp32: the wte row of a token
 * of its vocabulary rows [v0, v0 + Vl) (row token - v0 of its wte), zero for any other token (the
 * group's sum then holds every token's row) */
__global__ void encoder_tp_kernel(float *x, const int *tok, const floatX *wte, int v0, int Vl,
                                  int BT, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C)
        return;
    size_t r = i / C, c = i % C;
    int v = tok[r] - v0;
    x[i] = v >= 0 && v < Vl ? tof(wte[(size_t)v * C + c]) : 0.0f;
}
/* x = the group's sum of the token embeddings + wpe[position] (wpe after the sum, once) */
__global__ void encoder_tp_finish_kernel(floatX *x, const float *sum, const floatX *wpe, int BT,
                                         int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C)
        return;
    size_t r = i / C, c = i % C;
    put(x + i, sum[i] + tof(wpe[(r % T) * C + c]));
}

/* dwte rows: block u sums the positions of distinct token utok[u] (upos[ustart[u]..ustart[u+1]),
 * ascending) in order: deterministic, no atomics. */
__global__ void wte_backward_kernel(float *dwte, const floatX *dres, const int *utok,
                                    const int *ustart, const int *upos, int C)
{
    int u = blockIdx.x;
    size_t row = (size_t)utok[u] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = ustart[u]; j < ustart[u + 1]; j++)
            acc += tof(dres[(size_t)upos[j] * C + c]);
        dwte[row + c] += acc;
    }
}

__global__ void wpe_backward_kernel(float *dwpe, const floatX *dres, int B, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C)
        return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        acc += tof(dres[(size_t)b * T * C + i]);
    dwpe[i] += acc;
}

/* ---------------------------------------------------------------- kernels: LayerNorm */

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

/* Column sums over rows in chunks of COLSUM_ROWS: partial[chunk][0][c] = sum d*xhat (when x is
 * given: LayerNorm weight gradient), partial[chunk][1][c] = sum d (bias gradient). */
__global__ void colsum_partial_kernel(float *partial, const floatX *d, const floatX *x,
                                      const float *mean, const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C)
        return;
    int r0 = chunk * COLSUM_ROWS, r1 = min(N, r0 + COLSUM_ROWS);
    float s0 = 0.0f, s1 = 0.0f;
    for (int r = r0; r < r1; r++) {
        float dv = tof(d[(size_t)r * C + c]);
        s1 += dv;
        if (x)
            s0 += dv * (tof(x[(size_t)r * C + c]) - mean[r]) * rstd[r];
    }
    partial[((size_t)chunk * 2 + 0) * C + c] = s0;
    partial[((size_t)chunk * 2 + 1) * C + c] = s1;
}
__global__ void colsum_finish_kernel(float *gw, float *gb, const float *partial, int chunks, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int k = 0; k < chunks; k++) {
        s0 += partial[((size_t)k * 2 + 0) * C + c];
        s1 += partial[((size_t)k * 2 + 1) * C + c];
    }
    if (gw)
        gw[c] += s0;
    if (gb)
        gb[c] += s1;
}

/* ---------------------------------------------------------------- kernels: GELU, bias */

__device__ __forceinline__ float gelu_f(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}
__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, gelu_f(tof(inp[i])));
}
__global__ void gelu_backward_kernel(floatX *d, const floatX *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = tof(inp[i]);
    float t = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    put(d + i, tof(d[i]) * g);
}
__global__ void bias_add_kernel(floatX *out, const floatX *bias, size_t n, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, tof(out[i]) + tof(bias[i % OC]));
}

/* Tensor parallelism, a row-parallel layer after the group's sum of its products (fp32):
 * out[N][C] = sum + bias (fp32 master) + res, in that order (gpt_pass.c's row_parallel_forward) */
__global__ void row_parallel_finish_kernel(floatX *out, const float *sum, const float *bias,
                                           const floatX *res, size_t n, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, (sum[i] + bias[i % C]) + tof(res[i]));
}

/* ---------------------------------------------------------------- kernels: attention */

/* Element i of q (or k, v) [B][NH][T][hs]: its place in qkv [B][T][3][NH][hs] (k and v are C
 * and 2C further on). */
__device__ inline size_t qkv_index(size_t i, int T, int NH, int hs)
{
    size_t C = (size_t)NH * hs;
    int d = (int)(i % hs);
    int t = (int)((i / hs) % T);
    int h = (int)((i / hs / T) % NH);
    size_t b = i / hs / T / NH;
    return (b * T + t) * 3 * C + (size_t)h * hs + d;
}

/* qkv [B][T][3][NH][hs] -> q, k, v [B][NH][T][hs] */
__global__ void permute_kernel(floatX *q, floatX *k, floatX *v, const floatX *qkv, int B, int T,
                               int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t C = (size_t)NH * hs;
    if (i >= (size_t)B * T * C)
        return;
    size_t src = qkv_index(i, T, NH, hs);
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
}
/* dq, dk, dv [B][NH][T][hs] -> dqkv [B][T][3C] */
__global__ void permute_backward_kernel(floatX *dqkv, const floatX *dq, const floatX *dk,
                                        const floatX *dv, int B, int T, int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t C = (size_t)NH * hs;
    if (i >= (size_t)B * T * C)
        return;
    size_t dst = qkv_index(i, T, NH, hs);
    dqkv[dst] = dq[i];
    dqkv[dst + C] = dk[i];
    dqkv[dst + 2 * C] = dv[i];
}
/* y [B][NH][T][hs] <-> out [B][T][C]; dir 0: y -> out, dir 1: out -> y */
__global__ void unpermute_kernel(floatX *out, floatX *y, int B, int T, int NH, int hs, int dir)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t C = (size_t)NH * hs;
    if (i >= (size_t)B * T * C)
        return;
    int d = (int)(i % hs);
    int t = (int)((i / hs) % T);
    int h = (int)((i / hs / T) % NH);
    size_t b = i / hs / T / NH;
    size_t o = (b * T + t) * C + (size_t)h * hs + d;
    if (dir == 0)
        out[o] = y[i];
    else
        y[i] = out[o];
}
/* causal softmax in place over rows of [B*NH*T][T]; row r is query t = r % T; zero above the
 * diagonal; one warp per row */
__global__ void softmax_forward_kernel(floatX *att, int rows, int T)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    floatX *p = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = fmaxf(mx, tof(p[j]));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32)
        sum += expf(tof(p[j]) - mx);
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32)
        put(p + j, j <= t ? expf(tof(p[j]) - mx) * inv : 0.0f);
}
/* datt -> dpre in place: dpre_j = att_j (datt_j - sum_i att_i datt_i), zero above the diagonal */
__global__ void softmax_backward_kernel(floatX *datt, const floatX *att, int rows, int T)
{
    int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    floatX *d = datt + (size_t)row * T;
    const floatX *a = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
        dot += tof(a[j]) * tof(d[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        put(d + j, j <= t ? tof(a[j]) * (tof(d[j]) - dot) : 0.0f);
}

/* ---------------------------------------------------------------- kernels: cross-entropy */

/* one block per row: losses[r] = logsumexp(logits[r][0..V)) - logits[r][target] */
__global__ void ce_forward_kernel(float *losses, const floatX *logits, const int *targets, int V,
                                  int Vp)
{
    size_t r = blockIdx.x;
    const floatX *lg = logits + r * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, tof(lg[v]));
    mx = block_max(mx);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += expf(tof(lg[v]) - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        losses[r] = logf(sum) + mx - tof(lg[targets[r]]);
}
/* in place: logits -> scale * (softmax - onehot(target)), zero for the padded columns */
__global__ void ce_backward_kernel(floatX *logits, const int *targets, float scale, int V, int Vp)
{
    size_t r = blockIdx.x;
    floatX *lg = logits + r * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, tof(lg[v]));
    mx = block_max(mx);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        sum += expf(tof(lg[v]) - mx);
    sum = block_sum(sum);
    float inv = scale / sum;
    int tg = targets[r];
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = v < V ? expf(tof(lg[v]) - mx) * inv : 0.0f;
        if (v == tg)
            g -= scale;
        put(lg + v, g);
    }
}

/* Tensor parallelism (gpt_pass.c's cross_entropy): each rank holds Vl logits of a row, the first n
 * of them real vocabulary (global index v0 + v < V; n may be 0). One block per row writes this
 * rank's slots of buf, [tp][N] maxima, [tp][N] sums, [N] target logits, whose other slots are
 * zero, so that the group's sum gathers every rank's: the row's max over its n logits (-1e30
 * when n is 0), the sum of exp(logit - that max), and the target's logit where this rank holds
 * it. */
__global__ void ce_tp_local_kernel(float *buf, const floatX *logits, const int *targets, int v0,
                                   int n, int Vl, int tp, int tpr, int N)
{
    size_t r = blockIdx.x;
    const floatX *lg = logits + r * Vl;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < n; v += blockDim.x)
        mx = fmaxf(mx, tof(lg[v]));
    mx = block_max(mx);
    if (n == 0)
        mx = -1e30f;
    float sum = 0.0f;
    for (int v = threadIdx.x; v < n; v += blockDim.x)
        sum += expf(tof(lg[v]) - mx);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
        int t = targets[r] - v0;
        buf[(size_t)tpr * N + r] = mx;
        buf[((size_t)tp + tpr) * N + r] = sum;
        buf[2 * (size_t)tp * N + r] = t >= 0 && t < n ? tof(lg[t]) : 0.0f;
    }
}
/* After the group's sum of buf, one thread per row: the row's global max and sum of exponentials
 * (every rank's sum rescaled to the global max), kept for backward, and its loss */
__global__ void ce_tp_global_kernel(float *losses, float *ce_max, float *ce_sum, const float *buf,
                                    int tp, int N)
{
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (size_t)N)
        return;
    float mx = buf[r];
    for (int k = 1; k < tp; k++)
        mx = fmaxf(mx, buf[(size_t)k * N + r]);
    float sum = 0.0f;
    for (int k = 0; k < tp; k++)
        sum += buf[((size_t)tp + k) * N + r] * expf(buf[(size_t)k * N + r] - mx);
    ce_max[r] = mx;
    ce_sum[r] = sum;
    losses[r] = logf(sum) + mx - buf[2 * (size_t)tp * N + r];
}
/* in place, one block per row: this rank's Vl logits -> scale * (softmax - onehot(target)) with
 * the forward's global max and sum; zero for the columns past the real vocabulary (n) */
__global__ void ce_tp_backward_kernel(floatX *logits, const int *targets, const float *ce_max,
                                      const float *ce_sum, float scale, int v0, int n, int Vl)
{
    size_t r = blockIdx.x;
    floatX *lg = logits + r * Vl;
    float mx = ce_max[r], inv = scale / ce_sum[r];
    int t = targets[r] - v0;
    for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
        float g = v < n ? expf(tof(lg[v]) - mx) * inv : 0.0f;
        if (v == t)
            g -= scale;
        put(lg + v, g);
    }
}

/* ---------------------------------------------------------------- kernels: optimizer */

/* AdamW over params[lo, hi) in one launch; seg_end (ascending) gives each tensor's end and
 * seg_decay whether weight decay applies; pX (bf16 mode) receives the updated weights. */
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, floatX *pX,
                             const size_t *seg_end, const int *seg_decay, int nseg, size_t lo,
                             size_t hi, float lr, float b1, float b2, float eps, float wd,
                             float bc1, float bc2, float gs)
{
    size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hi)
        return;
    int a = 0, b = nseg - 1;
    while (a < b) {
        int mid = (a + b) / 2;
        if (seg_end[mid] > i)
            b = mid;
        else
            a = mid + 1;
    }
    float w = seg_decay[a] ? wd : 0.0f;
    float gi = g[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mh = mi / bc1, vh = vi / bc2;
    float pi = p[i] - lr * (mh / (sqrtf(vh) + eps) + w * p[i]);
    p[i] = pi;
    if (pX)
        put(pX + i, pi);
}

/* fixed grid (SQ_BLOCKS blocks): partial[block] = sum of g^2 over a grid-stride, in fp64 */
__global__ void sq_partial_kernel(double *partial, const float *g, size_t lo, size_t hi)
{
    __shared__ double sh[256];
    double s = 0.0;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sh[0];
}
