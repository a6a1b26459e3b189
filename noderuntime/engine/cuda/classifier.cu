/* The classifier's loss (llm.c's fused_classifier.cuh), forward beside backward: cross-entropy
 * per row over the padded-vocabulary logits, and, with tensor parallelism, the exchange of
 * gpt_pass.c's cross_entropy (each rank holds Vl of the vocabulary). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

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

/* Real vocabulary columns among this rank's Vl logits: global index tpr * Vl + v < V. */
int vocab_held(const struct gpu_stage *s)
{
    int n = s->c.vocab - s->tpr * s->Vl;
    return n < 0 ? 0 : n < s->Vl ? n : s->Vl;
}

} /* namespace */

/* The loss of each row into a->losses. With tensor parallelism (gpt_pass.c's cross_entropy) each
 * rank holds Vl of the vocabulary: the group sums every rank's row max and sum of exponentials
 * (each in its own slots of the exchange) and the target's logit (held by one rank), and each
 * row's global max and sum are kept for backward. */
int cross_entropy_fwd(struct gpu_stage *s, struct gslot *a)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int BT = s->B * s->T;
    cudaStream_t st = s->x.stream;
    if (s->tp == 1) {
        ce_forward_kernel<<<(unsigned)BT, 256, 0, st>>>(a->losses, a->logits, a->targets,
                                                        s->c.vocab, s->c.padded_vocab);
        LAUNCHED(st);
        return 0;
    }
    size_t nx = (size_t)BT * (2 * (size_t)s->tp + 1); /* [tp][BT] max, [tp][BT] sum, [BT] target */
    CK(cudaMemsetAsync(s->tp_dev, 0, nx * sizeof(float), st));
    ce_tp_local_kernel<<<(unsigned)BT, 256, 0, st>>>(s->tp_dev, a->logits, a->targets,
                                                     s->tpr * s->Vl, vocab_held(s), s->Vl, s->tp,
                                                     s->tpr, BT);
    LAUNCHED(st);
    OK(tp_sum_dev(s, s->tp_dev, nx, "the loss's row maxima and sums"));
    ce_tp_global_kernel<<<blocks_for((size_t)BT, 256), 256, 0, st>>>(a->losses, a->ce_max,
                                                                    a->ce_sum, s->tp_dev, s->tp, BT);
    LAUNCHED(st);
    return 0;
}

int cross_entropy_bwd(struct gpu_stage *s, struct gslot *a, float scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int BT = s->B * s->T;
    cudaStream_t st = s->x.stream;
    if (s->tp == 1)
        ce_backward_kernel<<<(unsigned)BT, 256, 0, st>>>(a->logits, a->targets, scale, s->c.vocab,
                                                         s->c.padded_vocab);
    else /* the forward's global max and sum over the whole vocabulary */
        ce_tp_backward_kernel<<<(unsigned)BT, 256, 0, st>>>(a->logits, a->targets, a->ce_max,
                                                            a->ce_sum, scale, s->tpr * s->Vl,
                                                            vocab_held(s), s->Vl);
    LAUNCHED(st);
    return 0;
}

/* acc[0] += the losses of rows [t0, t1) of each of B sequences of T, / (B T): one block, each
 * thread a fixed stride, then a fixed tree (deterministic) */
__global__ void loss_add_kernel(double *acc, const float *losses, int B, int T, int t0, int t1)
{
    int S = t1 - t0;
    double sum = 0.0;
    for (int i = threadIdx.x; i < B * S; i += blockDim.x)
        sum += losses[(size_t)(i / S) * T + t0 + i % S];
    sum = block_sum_fixed(sum);
    if (threadIdx.x == 0)
        acc[0] += sum / ((double)B * T);
}

int loss_add(struct gpu_stage *s, struct gslot *a, int t0, int t1)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    loss_add_kernel<<<1, 256, 0, s->x.stream>>>(s->loss_acc, a->losses, s->B, s->T, t0, t1);
    LAUNCHED(s->x.stream);
    return 0;
}

int cross_entropy_rows_fwd(struct gpu_stage *s, float *losses, const floatX *logits,
                           const int *targets, int n)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    ce_forward_kernel<<<(unsigned)n, 256, 0, s->x.stream>>>(losses, logits, targets, s->c.vocab,
                                                            s->Vl);
    LAUNCHED(s->x.stream);
    return 0;
}

int cross_entropy_rows_bwd(struct gpu_stage *s, floatX *logits, const int *targets, float scale,
                           int n)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    ce_backward_kernel<<<(unsigned)n, 256, 0, s->x.stream>>>(logits, targets, scale, s->c.vocab,
                                                             s->Vl);
    LAUNCHED(s->x.stream);
    return 0;
}

} /* namespace GPU_NS */
