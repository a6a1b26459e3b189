/* The classifier's loss (llm.c's fused_classifier.cuh), forward beside backward: cross-entropy
 * per row over the padded-vocabulary logits in one kernel that also leaves the loss's gradient
 * in place of the logits (read once into registers and written once, 16 bytes at a time:
 * classifier_kernels.cuh; rows too long for that read twice), so that backward has nothing left
 * to do but the head's products; with tensor parallelism, the exchange of
 * gpt_pass.c's cross_entropy (each rank holds Vl of the vocabulary), its gradient in backward.
 * The loss of a micro-batch (or slice) is summed on the device (loss_reduce). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

#define CLASSIFIER_SMEM(name) __shared__ float name[32]

#include "classifier_kernels.cuh"

/* (m, s) pairs of an online softmax: s = sum exp(x - m) */
__device__ __forceinline__ void online_add(float &m, float &s, float x)
{
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else {
        s += expf(x - m);
    }
}

/* Rows longer than classifier_rows_kernel keeps in registers (or not 16-byte aligned): row j of
 * blockIdx.x = rows [t0, t0 + S) of each sequence of T: the logits row b T + t0 + j % S
 * (b = j / S). One block per row, VEC logits a load, the row read twice:
 * losses[r] = logsumexp(logits[r][0..V)) - logits[r][target], and in place
 * logits[r] = dscale (softmax - onehot(target)), zero in the padded columns [V, Vp). */
template <int VEC>
__global__ void fused_classifier_kernel(float *losses, floatX *logits, const int *targets, int V,
                                        int Vp, int T, int t0, int S, float dscale)
{
    size_t r = (size_t)(blockIdx.x / S) * T + t0 + blockIdx.x % S;
    floatX *lg = logits + r * Vp;
    float m = -INFINITY, sum = 0.0f;
    for (int v = threadIdx.x * VEC; v < V; v += blockDim.x * VEC) {
        if (VEC > 1) {
            pack16<floatX> p = load16(lg + v);
            for (int j = 0; j < VEC; j++)
                if (v + j < V)
                    online_add(m, sum, tof(p.v[j]));
        } else {
            online_add(m, sum, tof(lg[v]));
        }
    }
    float mx = block_max(m);
    sum = block_sum(m == -INFINITY ? 0.0f : sum * expf(m - mx));
    int tg = targets[r];
    float xt = tof(lg[tg]);
    __syncthreads(); /* everyone has read the target's logit before it is overwritten */
    if (threadIdx.x == 0)
        losses[r] = logf(sum) + mx - xt;
    float inv = dscale / sum;
    for (int v = threadIdx.x * VEC; v < Vp; v += blockDim.x * VEC) {
        if (VEC > 1) {
            pack16<floatX> p = load16(lg + v);
            for (int j = 0; j < VEC; j++) {
                float g = v + j < V ? expf(tof(p.v[j]) - mx) * inv : 0.0f;
                put(&p.v[j], v + j == tg ? g - dscale : g);
            }
            store16(lg + v, p);
        } else {
            float g = v < V ? expf(tof(lg[v]) - mx) * inv : 0.0f;
            put(lg + v, v == tg ? g - dscale : g);
        }
    }
}

/* dst[1] = the sum of losses over rows [t0, t0 + S) of each of B sequences of T, times inv;
 * dst[0] += that when add. One block, fp64, a fixed order. */
__global__ void loss_reduce_kernel(double *dst, int add, const float *losses, int B, int T, int t0,
                                   int S, double inv)
{
    double acc = 0.0;
    for (int j = threadIdx.x; j < B * S; j += blockDim.x)
        acc += losses[(size_t)(j / S) * T + t0 + j % S];
    acc = block_sum_fixed(acc);
    if (threadIdx.x == 0) {
        double v = acc * inv;
        dst[1] = v;
        if (add)
            dst[0] += v;
    }
}

/* Row i of a pass's N = B S rows (S positions from t0 of each sequence) in the slot's [B][T] */
__device__ __forceinline__ size_t pass_row(size_t i, int T, int t0, int S)
{
    return i / (size_t)S * T + (size_t)t0 + i % (size_t)S;
}

/* Tensor parallelism (gpt_pass.c's cross_entropy): each rank holds Vl logits of a row, the first n
 * of them real vocabulary (global index v0 + v < V; n may be 0). One block per row of the pass
 * (pass_row) writes this rank's slots of buf, [tp][N] maxima, [tp][N] sums, [N] target logits,
 * whose other slots are zero, so that the group's sum gathers every rank's: the row's max over
 * its n logits (-1e30 when n is 0), the sum of exp(logit - that max), and the target's logit
 * where this rank holds it. */
__global__ void ce_tp_local_kernel(float *buf, const floatX *logits, const int *targets, int v0,
                                   int n, int Vl, int tp, int tpr, int N, int T, int t0, int S)
{
    size_t i = blockIdx.x, r = pass_row(i, T, t0, S);
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
        buf[(size_t)tpr * N + i] = mx;
        buf[((size_t)tp + tpr) * N + i] = sum;
        buf[2 * (size_t)tp * N + i] = t >= 0 && t < n ? tof(lg[t]) : 0.0f;
    }
}
/* After the group's sum of buf, one thread per row: the row's global max and sum of exponentials
 * (every rank's sum rescaled to the global max), kept for backward, and its loss */
__global__ void ce_tp_global_kernel(float *losses, float *ce_max, float *ce_sum, const float *buf,
                                    int tp, int N, int T, int t0, int S)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N)
        return;
    size_t r = pass_row(i, T, t0, S);
    float mx = buf[i];
    for (int k = 1; k < tp; k++)
        mx = fmaxf(mx, buf[(size_t)k * N + i]);
    float sum = 0.0f;
    for (int k = 0; k < tp; k++)
        sum += buf[((size_t)tp + k) * N + i] * expf(buf[(size_t)k * N + i] - mx);
    ce_max[r] = mx;
    ce_sum[r] = sum;
    losses[r] = logf(sum) + mx - buf[2 * (size_t)tp * N + i];
}
/* in place, one block per row: this rank's Vl logits -> scale * (softmax - onehot(target)) with
 * the forward's global max and sum; zero for the columns past the real vocabulary (n) */
__global__ void ce_tp_backward_kernel(floatX *logits, const int *targets, const float *ce_max,
                                      const float *ce_sum, float scale, int v0, int n, int Vl,
                                      int T, int t0, int S)
{
    size_t r = pass_row(blockIdx.x, T, t0, S);
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

/* The loss of each row into a->losses. tp 1: the fused kernel over the rows [t0, t1) of each
 * sequence. With tensor parallelism (gpt_pass.c's cross_entropy, the pass's rows) each
 * rank holds Vl of the vocabulary: the group sums every rank's row max and sum of exponentials
 * (each in its own slots of the exchange) and the target's logit (held by one rank), and each
 * row's global max and sum are kept for backward. */
int classifier_fwd(struct gpu_stage *s, struct gslot *a, int t0, int t1)
{
    PROF(&s->x, GPU_PART_CLASSIFIER);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int BT = s->B * s->T, S = t1 - t0;
    cudaStream_t st = s->x.stream;
    if (s->tp == 1) {
        unsigned rows = (unsigned)(s->B * S);
        float dscale = 1.0f / (float)BT; /* the micro-batch's mean, whichever slice */
        bool vec = s->Vl % XV == 0 && ((uintptr_t)a->logits & 15) == 0;
        /* bytes: the logits read and their gradient written over them, targets and losses */
        struct kernel_rec r = mem_rec(GPU_KERNEL_CLASSIFIER, (int)rows, s->Vl,
                                      2.0 * rows * s->Vl * sizeof(floatX) + 8.0 * rows);
        int timed = prof_kernel_start(s->x.prof, st, &r);
        const int nt = CLASSIFIER_THREADS;
        if (vec && s->Vl <= nt * XV * 8)
            classifier_rows_kernel<XV, 8><<<rows, nt, 0, st>>>(a->losses, a->logits, a->targets,
                                                                s->c.vocab, s->Vl, s->T, t0, S,
                                                                dscale);
        else if (vec && s->Vl <= nt * XV * 13) /* GPT-2's 50,304: 13 vectors a thread */
            classifier_rows_kernel<XV, 13><<<rows, nt, 0, st>>>(a->losses, a->logits, a->targets,
                                                                 s->c.vocab, s->Vl, s->T, t0, S,
                                                                 dscale);
        else if (vec)
            fused_classifier_kernel<XV><<<rows, 512, 0, st>>>(a->losses, a->logits, a->targets,
                                                              s->c.vocab, s->Vl, s->T, t0, S,
                                                              dscale);
        else
            fused_classifier_kernel<1><<<rows, 512, 0, st>>>(a->losses, a->logits, a->targets,
                                                             s->c.vocab, s->Vl, s->T, t0, S,
                                                             dscale);
        LAUNCHED(st);
        prof_kernel_end(s->x.prof, st, timed);
        a->dlogits = 1;
        return 0;
    }
    /* the pass's N rows (a slice: S of each sequence): [tp][N] max, [tp][N] sum, [N] target */
    int N = s->B * S;
    size_t nx = (size_t)N * (2 * (size_t)s->tp + 1);
    ENQ(cudaMemsetAsync(s->tp_dev, 0, nx * sizeof(float), st));
    ce_tp_local_kernel<<<(unsigned)N, 256, 0, st>>>(s->tp_dev, a->logits, a->targets,
                                                    s->tpr * s->Vl, vocab_held(s), s->Vl, s->tp,
                                                    s->tpr, N, s->T, t0, S);
    LAUNCHED(st);
    OK(tp_sum_dev(s, s->tp_dev, nx, "the loss's row maxima and sums"));
    ce_tp_global_kernel<<<blocks_for((size_t)N, 256), 256, 0, st>>>(
        a->losses, a->ce_max, a->ce_sum, s->tp_dev, s->tp, N, s->T, t0, S);
    LAUNCHED(st);
    a->dlogits = 0;
    return 0;
}

int classifier_bwd(struct gpu_stage *s, struct gslot *a, int t0, int t1, float loss_scale,
                   float *alpha)
{
    PROF(&s->x, GPU_PART_CLASSIFIER);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int BT = s->B * s->T;
    cudaStream_t st = s->x.stream;
    if (a->dlogits) { /* the forward left (softmax - onehot) / (B T): the products scale it */
        *alpha = loss_scale;
        return 0;
    }
    if (s->tp == 1)
        return stage_fail(s, "backward of the loss: its forward left no gradient");
    /* tensor parallelism: the forward's global max and sum over the whole vocabulary, the pass's
     * rows (the micro-batch's mean, whichever slice) */
    int S = t1 - t0;
    ce_tp_backward_kernel<<<(unsigned)(s->B * S), 256, 0, st>>>(
        a->logits, a->targets, a->ce_max, a->ce_sum, loss_scale / (float)BT, s->tpr * s->Vl,
        vocab_held(s), s->Vl, s->T, t0, S);
    LAUNCHED(st);
    *alpha = 1.0f;
    return 0;
}

int loss_reduce(struct gpu_stage *s, struct gslot *a, int t0, int t1, int add)
{
    PROF(&s->x, GPU_PART_CLASSIFIER);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    double inv = 1.0 / ((double)s->B * s->T);
    loss_reduce_kernel<<<1, 1024, 0, s->x.stream>>>(s->loss_dev, add, a->losses, s->B, s->T, t0,
                                                    t1 - t0, inv);
    LAUNCHED(s->x.stream);
    return 0;
}

} /* namespace GPU_NS */
