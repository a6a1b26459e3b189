/* Causal self-attention with the scores materialised (fp32 mode, and bf16 with
 * GPU_MATERIALISED_ATTENTION; flash.cu is bf16's), forward beside backward, over this rank's NHl
 * heads: q, k, v permuted out of the qkv product [B][T][3][NHl][hs] into [B][NHl][T][hs], the
 * T x T scores materialised per layer (scale q k^T by strided-batched cuBLAS, causal softmax in
 * place, att v), then permuted back to [B][T][Cl]. */
#include "stage.cuh"

namespace GPU_NS {

namespace {

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

} /* namespace */

/* over this rank's NHl heads (qkv [B][T][3][NHl][hs], atty [B][T][Cl]) */
int attention_fwd(struct gpu_stage *s, floatX *atty, floatX *att, const floatX *qkv)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->Cl, NH = s->NHl, hs = C / NH;
    size_t BTC = (size_t)B * T * C;
    int rows = B * NH * T;
    permute_kernel<<<blocks_for(BTC, 256), 256, 0, s->x.stream>>>(s->q, s->k, s->vv, qkv, B, T, NH, hs);
    LAUNCHED(s->x.stream);
    /* att = scale q k^T */
    OK(bgemm(&s->x, plan_att_xxT(T, hs), 1.0f / sqrtf((float)hs), s->k, s->q, att, B * NH));
    softmax_forward_kernel<<<blocks_for((size_t)rows * 32, 256), 256, 0, s->x.stream>>>(att, rows, T);
    LAUNCHED(s->x.stream);
    /* y = att v */
    OK(bgemm(&s->x, plan_att_px(T, hs), 1.0f, s->vv, att, s->y, B * NH));
    unpermute_kernel<<<blocks_for(BTC, 256), 256, 0, s->x.stream>>>(atty, s->y, B, T, NH, hs, 0);
    LAUNCHED(s->x.stream);
    return 0;
}

int attention_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *att,
                  const floatX *qkv)
{
    PROF(&s->x, GPU_PART_ATTENTION);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->Cl, NH = s->NHl, hs = C / NH;
    size_t BTC = (size_t)B * T * C;
    int rows = B * NH * T, batch = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    cudaStream_t st = s->x.stream;
    permute_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(s->q, s->k, s->vv, qkv, B, T, NH, hs);
    LAUNCHED(st);
    unpermute_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>((floatX *)dy, s->y, B, T, NH, hs, 1);
    LAUNCHED(st);
    /* datt = dy v^T; dv = att^T dy */
    OK(bgemm(&s->x, plan_att_xxT(T, hs), 1.0f, s->vv, s->y, s->datt, batch));
    OK(bgemm(&s->x, plan_att_pTx(T, hs), 1.0f, s->y, att, s->dv, batch));
    softmax_backward_kernel<<<blocks_for((size_t)rows * 32, 256), 256, 0, st>>>(s->datt, att, rows, T);
    LAUNCHED(st);
    /* dq = scale dpre k; dk = scale dpre^T q */
    OK(bgemm(&s->x, plan_att_px(T, hs), scale, s->k, s->datt, s->dq, batch));
    OK(bgemm(&s->x, plan_att_pTx(T, hs), scale, s->q, s->datt, s->dk, batch));
    permute_backward_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(dqkv, s->dq, s->dk, s->dv, B, T, NH, hs);
    LAUNCHED(st);
    return 0;
}

} /* namespace GPU_NS */
