/* The embeddings (llm.c's encoder.cuh), forward beside backward: x0 = wte[token] + wpe[position];
 * wte's gradient one block per distinct token over its positions in a fixed order (the token
 * groups of token_groups.h, uploaded per micro-batch by gpt_cuda_host.cu; a frequent token's
 * positions split among the block's warps: encoder_kernels.cuh, also run on the host by
 * tests/unit/encoder_emu.cc), wpe's per position over the batch. With tensor parallelism
 * (gpt_pass.c's embed_forward) each rank looks up the tokens of its vocabulary rows. */
#include "stage.cuh"

namespace GPU_NS {

namespace {

#define WTE_BWD_SMEM(name, VEC) __shared__ float name[WTE_BWD_SMEM_FLOATS(VEC)]

#include "encoder_kernels.cuh"

/* VEC channels a thread (C a multiple of VEC) */
template <int VEC>
__global__ void encoder_forward_kernel(floatX *x, const int *tok, const floatX *wte,
                                       const floatX *wpe, int BT, int T, int C)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i >= (size_t)BT * C)
        return;
    size_t r = i / C, c = i % C;
    const floatX *a = wte + (size_t)tok[r] * C + c, *b = wpe + (r % T) * C + c;
    if (VEC > 1) {
        pack16<floatX> pa = load16(a), pb = load16(b), o;
        for (int j = 0; j < VEC; j++)
            put(&o.v[j], tof(pa.v[j]) + tof(pb.v[j]));
        store16(x + i, o);
    } else {
        put(x + i, tof(a[0]) + tof(b[0]));
    }
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

/* dwpe (+)= the position's gradient summed over the batch (b ascending); accum 0: written */
__global__ void wpe_backward_kernel(float *dwpe, const floatX *dres, int B, int T, int C, int accum)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C)
        return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
        acc += tof(dres[(size_t)b * T * C + i]);
    dwpe[i] = accum ? dwpe[i] + acc : acc;
}

} /* namespace */

/* x0 = wte[token] + wpe[position]. With tensor parallelism (gpt_pass.c's embed_forward) each rank
 * looks up the tokens of its vocabulary rows (0 for the others), the group sums them (fp32), and
 * wpe is added after the sum. */
int embed_fwd(struct gpu_stage *s, struct gslot *a)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int T = s->T, C = s->c.channels, BT = s->B * s->T;
    size_t BTC = (size_t)BT * C;
    cudaStream_t st = s->x.stream;
    PROF(&s->x, GPU_PART_EMBEDDING);
    if (s->tp == 1) {
        if (C % XV == 0)
            encoder_forward_kernel<XV><<<blocks_for(BTC / XV, 256), 256, 0, st>>>(
                a->x0, a->tokens, s->wX + s->wte_off, s->wX + s->wpe_off, BT, T, C);
        else
            encoder_forward_kernel<1><<<blocks_for(BTC, 256), 256, 0, st>>>(
                a->x0, a->tokens, s->wX + s->wte_off, s->wX + s->wpe_off, BT, T, C);
        LAUNCHED(st);
        return 0;
    }
    encoder_tp_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(s->tp_dev, a->tokens, s->wX + s->wte_off,
                                                           s->tpr * s->Vl, s->Vl, BT, C);
    LAUNCHED(st);
    OK(tp_sum_dev(s, s->tp_dev, BTC, "the token embeddings"));
    encoder_tp_finish_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(a->x0, s->tp_dev,
                                                                  s->wX + s->wpe_off, BT, T, C);
    LAUNCHED(st);
    return 0;
}

/* wte: the token groups (with tensor parallelism only this rank's rows); wpe, like the residual,
 * the same on every rank. When the gradients are written rather than added (x.accum 0), the wte
 * rows no token of the micro-batch touched (unless the head wrote them: tied weights) and wpe's
 * positions from T on are cleared. */
int embed_bwd(struct gpu_stage *s, struct gslot *a, const floatX *dx)
{
    PROF(&s->x, GPU_PART_EMBEDDING);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->c.channels;
    cudaStream_t st = s->x.stream;
    float *G = s->grads;
    /* tied weights: where this stage holds the head too, its gradient is the same rows, which
     * the head's backward wrote (every row) earlier in this backward: add to them */
    int head_wrote_wte = s->last == s->c.layers && s->head_off == s->wte_off;
    if (!s->x.accum) {
        if (!head_wrote_wte)
            ENQ(cudaMemsetAsync(G + s->wte_off, 0, (size_t)s->Vl * C * sizeof(float), st));
        if (T < s->c.max_seq)
            ENQ(cudaMemsetAsync(G + s->wpe_off + (size_t)T * C, 0,
                                (size_t)(s->c.max_seq - T) * C * sizeof(float), st));
    }
    if (a->nuniq > 0) {
        wte_backward_kernel<<<(unsigned)a->nuniq, WTE_BWD_THREADS, 0, st>>>(
            G + s->wte_off, dx, a->utok, a->ustart, a->upos, C);
        LAUNCHED(st);
    }
    if (a->maxpos > WTE_SPLIT_ABOVE) { /* a token this frequent: its positions split */
        if (C % XV == 0 && ((uintptr_t)dx & 15) == 0)
            wte_split_kernel<XV><<<(unsigned)a->nuniq, WTE_BWD_THREADS, 0, st>>>(
                G + s->wte_off, dx, a->utok, a->ustart, a->upos, C);
        else
            wte_split_kernel<1><<<(unsigned)a->nuniq, WTE_BWD_THREADS, 0, st>>>(
                G + s->wte_off, dx, a->utok, a->ustart, a->upos, C);
        LAUNCHED(st);
    }
    wpe_backward_kernel<<<blocks_for((size_t)T * C, 256), 256, 0, st>>>(G + s->wpe_off, dx, B, T, C,
                                                                       s->x.accum);
    LAUNCHED(st);
    return 0;
}

} /* namespace GPU_NS */
