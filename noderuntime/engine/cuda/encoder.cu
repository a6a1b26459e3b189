/* The embeddings (llm.c's encoder.cuh), forward beside backward: x0 = wte[token] + wpe[position];
 * wte's gradient one block per distinct token over its positions in order (the token groups of
 * token_groups.h, uploaded per micro-batch), wpe's per position over the batch. With tensor
 * parallelism (gpt_pass.c's embed_forward) each rank looks up the tokens of its vocabulary rows. */
#include "stage.cuh"
#include "token_groups.h"

namespace GPU_NS {

namespace {

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

} /* namespace */

/* positions of the micro-batch grouped by token (token_groups.h), into csr (pinned) and up,
 * asynchronously. With tensor parallelism only the tokens of this rank's wte rows [v0, v0 + Vl),
 * as rows of its wte (token - v0): every other token goes into one group past them (Vl), the
 * last one, which is dropped. */
static int upload_token_groups(struct gpu_stage *s, struct gslot *a, const int *tokens, int *csr)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    size_t BT = (size_t)s->B * s->T;
    int *cnt = csr, *utok = cnt + s->ncount + 1, *ustart = utok + BT, *upos = ustart + BT + 1;
    int nu;
    if (s->tp == 1) {
        nu = token_groups(tokens, BT, s->c.vocab, cnt, utok, ustart, upos);
    } else {
        int *mine = upos + BT, v0 = s->tpr * s->Vl;
        for (size_t i = 0; i < BT; i++) {
            int v = tokens[i] - v0;
            mine[i] = v >= 0 && v < s->Vl ? v : s->Vl;
        }
        nu = token_groups(mine, BT, s->Vl + 1, cnt, utok, ustart, upos);
        if (nu > 0 && utok[nu - 1] == s->Vl)
            nu--;
    }
    a->nuniq = nu;
    CK(cudaMemcpyAsync(a->utok, utok, (size_t)nu * sizeof(int), cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(a->ustart, ustart, ((size_t)nu + 1) * sizeof(int), cudaMemcpyHostToDevice,
                       st));
    CK(cudaMemcpyAsync(a->upos, upos, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    return 0;
}

int upload_ids(struct gpu_stage *s, struct gslot *a, const int *tokens, const int *targets)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    cudaStream_t st = s->x.stream;
    size_t BT = (size_t)s->B * s->T;
    int *ptok = a->h_pin, *ptgt = ptok + BT, *csr = ptgt + BT;
    if (s->first != 0 && !targets)
        return 0;
    /* the slot's pinned buffer is rewritten once its last copies up are done (they are, but for
     * a host far ahead of the GPU) */
    if (a->up_used)
        CK(cudaEventSynchronize(a->up_ev));
    if (s->first == 0) {
        memcpy(ptok, tokens, BT * sizeof(int));
        CK(cudaMemcpyAsync(a->tokens, ptok, BT * sizeof(int), cudaMemcpyHostToDevice, st));
        OK(upload_token_groups(s, a, ptok, csr));
    }
    if (targets) {
        memcpy(ptgt, targets, BT * sizeof(int));
        CK(cudaMemcpyAsync(a->targets, ptgt, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    }
    CK(cudaEventRecord(a->up_ev, st));
    a->up_used = 1;
    return 0;
}

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
    if (s->tp == 1) {
        encoder_forward_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(
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

/* wte: the groups of upload_token_groups (with tensor parallelism only this rank's rows); wpe,
 * like the residual, the same on every rank */
int embed_bwd(struct gpu_stage *s, struct gslot *a, const floatX *dx)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->c.channels;
    cudaStream_t st = s->x.stream;
    float *G = s->grads;
    if (a->nuniq > 0) {
        wte_backward_kernel<<<(unsigned)a->nuniq, 256, 0, st>>>(G + s->wte_off, dx, a->utok,
                                                                a->ustart, a->upos, C);
        LAUNCHED(st);
    }
    wpe_backward_kernel<<<blocks_for((size_t)T * C, 256), 256, 0, st>>>(G + s->wpe_off, dx, B, T, C);
    LAUNCHED(st);
    return 0;
}

} /* namespace GPU_NS */
