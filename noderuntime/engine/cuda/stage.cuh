/* The stage's state (struct gpu_stage, its activation slots) and the host side of every layer
 * kind, one file each, as llm.c's llmc/ (forward beside backward in each file):
 *   matmul.cu      cuBLASLt products, the linear layers, column sums (bias gradients), GELU,
 *                  the attention's batched products, the GEMM ceiling
 *   attention.cu   causal self-attention (materialised scores: permute, softmax, products)
 *   layernorm.cu   LayerNorm
 *   classifier.cu  cross-entropy (with tensor parallelism's exchange)
 *   encoder.cu     the embeddings (wte, wpe) and the token groups of wte's backward
 *   adamw.cu       AdamW, the gradient norm and their tensor table
 *   gpt_cuda.cu    the stage: creation, memory, transfers, the tensor group's sum
 *   gpt_cuda_pass.cu  forward and backward of a micro-batch and of token slices
 *   device.cu      activation buffers, conversions, the device's name
 * Everything here is in GPU_NS (cuda_common.cuh). */
#pragma once

#include "cuda_common.cuh"

namespace GPU_NS {

struct layer_w { /* offsets (elements) into params / grads / the bf16 copy */
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

struct gslot {
    int forwarded, has_targets;
    int *tokens, *targets;             /* device [BT] */
    int *utok, *ustart, *upos;         /* device: positions grouped by token (wte backward) */
    int nuniq;
    floatX *x0, *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3, *lnf, *logits;
    float *ln1m, *ln1r, *ln2m, *ln2r, *lnfm, *lnfr, *losses;
    float *ce_max, *ce_sum;            /* [BT] tensor parallelism: each row's global softmax max, sum */
    /* token slices (TeraPipe): where the forward and the backward of this micro-batch stand */
    int fwd_upto;                      /* positions [0, fwd_upto) forwarded */
    int bwd_from;                      /* positions [bwd_from, T) through backward */
    float *dqkv_acc;                   /* [nl][BT * 3Cl] sliced backward: each block's q, k, v
                                          gradients gathered over the slices (first use) */
    floatX *dx0;                       /* [BTC] sliced backward, first stage: the embeddings'
                                          gradient, into wte and wpe at the last slice */
    int *h_pin;                        /* pinned host: tokens [BT], targets [BT], the token groups
                                          (encoder.cu): what goes up, asynchronously */
    cudaEvent_t up_ev;                 /* recorded after the last copy up from h_pin */
    int up_used;
};

/* Layer i's saved activations in slot a: [B][T] rows each, of the layer's widths (C, 3 Cl, Cl,
 * F: this rank's share with tensor parallelism); fchg is the shared scratch when GELU outputs are
 * recomputed. */
struct layer_acts {
    floatX *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r;
};

} /* namespace GPU_NS */

struct gpu_stage {
    struct gpt_config c;
    int first, last, nl, B, T, nslots, recompute;
    int tp, tpr;                       /* tensor-parallel group size and this rank (1, 0: none) */
    int Cl, NHl, F, Vl;                /* this rank's attention channels, heads, MLP width, vocab rows */
    int (*tp_sum)(void *ctx, float *buf, size_t n); /* gpu_stage_set_tp_sum */
    void *tp_ctx;
    float *tp_dev;                     /* device fp32 [tp_n]: partial results on their way to the sum */
    float *tp_host;                    /* pinned host [tp_n]: the sum's staging buffer */
    size_t tp_n;
    struct gpt_stage *host;            /* layout, initialisation, host staging */
    const struct gpt_tensor *tensors;
    int ntensors;
    size_t nparams;
    size_t wte_off, wpe_off, lnfw_off, lnfb_off, head_off;
    GPU_NS::layer_w *lw;
    float *params, *grads, *m, *v;     /* device fp32 */
    floatX *wX;                        /* device weights in the activation type (= params in fp32) */
    size_t *seg_end;
    int *seg_decay;
    GPU_NS::gslot *slots;
    /* shared scratch */
    floatX *dres, *dbuf, *dfch, *dqkv, *q, *k, *vv, *y, *dq, *dk, *dv, *datt;
    floatX *fchg;                      /* GELU outputs of one layer when recomputing */
    float *partial;
    double *sq_partial;
    float *h_losses;                   /* host [BT] */
    int ncount;                        /* token values token_groups may see: V, or Vl + 1 (tp > 1) */
    int *h_csr;                        /* host: counts [ncount+1], utok [BT], ustart [BT+1], upos [BT],
                                          tokens [BT] (tp > 1: shifted to this rank's rows) */
    /* the device-resident trainer's hooks (gpt_cuda.h) */
    int (*fwd_hook)(void *ctx, size_t lo, size_t hi);
    void *fwd_ctx;
    void (*bwd_hook)(void *ctx, int layer);
    void *bwd_ctx;
    int (*tp_sum_d)(void *ctx, float *buf, size_t n); /* gpu_stage_set_tp_sum_dev */
    void *tp_dctx;
    unsigned char *stale;              /* [nl + 2]: the bf16 copy of a unit (0: embeddings, 1 + i:
                                          block i, nl + 1: ln_f and head) is to be refreshed */
    double *loss_acc;                  /* device [1]: losses added by forwards without *loss */
    double *sq_parts;                  /* device: the norm's partial sums, [cap][SQ_BLOCKS] */
    int sq_cap;
    int no_moments;                    /* GPU_NO_MOMENTS: m, v not allocated */
    GPU_NS::gpu_ctx x;
    char err[512];
};

namespace GPU_NS {

/* ---------------------------------------------------------------- gpt_cuda.cu: the stage */

/* the message into s->err; returns -1 */
int stage_fail(struct gpu_stage *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* host <-> device copies on the stage's stream, synchronising it */
int h2d(struct gpu_stage *s, void *dst, const void *src, size_t bytes);
int d2h(struct gpu_stage *s, void *dst, const void *src, size_t bytes);
/* the bf16 weight copy of params[lo, hi) (nothing in fp32 mode) */
int refresh_wx(struct gpu_stage *s, size_t lo, size_t hi);
/* Sums the device fp32 buf[n] across the tensor group; `what` names the values for the error. */
int tp_sum_dev(struct gpu_stage *s, float *buf, size_t n, const char *what);
/* token ids (first stage) and targets (last stage, when given) inside the vocabulary */
int check_ids(struct gpu_stage *s, const int *tokens, const int *targets);
struct layer_acts layer_acts_of(const struct gpu_stage *s, const struct gslot *a, int i);
/* *p = bytes of device memory unless it is there already; -1 (stage error) when out of memory */
int lazy_alloc(struct gpu_stage *s, void **p, size_t bytes, const char *what);
/* Before the forward reads unit u's parameters (0: embeddings, 1 + i: block i, nl + 1: ln_f and
 * head): the forward hook, then the unit's bf16 copy refreshed if marked stale. */
int need_params(struct gpu_stage *s, int u);
/* Block i's gradients are queued: the backward hook (the trainer starts their reduce-scatter). */
void block_done(struct gpu_stage *s, int i);

/* ---------------------------------------------------------------- matmul.cu */

enum { EPI_NONE, EPI_BIAS, EPI_GELU_BIAS, EPI_DGELU };

/* Column-major D(m x n) = alpha * op(A) op(B) + beta * C (+ epilogue); see matmul.cu. */
int matmul(struct gpu_ctx *x, void *D, cudaDataType dtype, const void *A, int ta, const void *B,
           int tb, int m, int n, int k, int lda, int ldb, int ldd, float alpha, float beta,
           const void *C, int epi, const void *bias, void *aux, int ldaux);
/* Row-major out[N][OC] = inp[N][IC] @ w[OC][IC]^T (+ bias) (+ res); with gelu_out: out gets the
 * pre-activation and gelu_out = gelu(out). */
int linear_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, const floatX *w,
               const floatX *bias, const floatX *res, floatX *gelu_out, int N, int IC, int OC);
/* dinp[N][IC] = dout @ w (overwritten; times gelu'(dgelu_pre) when given; dinp NULL: not
 * computed); dw[OC][IC] += dout^T @ inp (fp32); dbias[OC] += column sums of dout */
int linear_bwd(struct gpu_ctx *x, float *partial, floatX *dinp, float *dw, float *dbias,
               const floatX *dout, const floatX *inp, const floatX *w, const floatX *dgelu_pre,
               int N, int IC, int OC);
/* tensor parallelism's partial products in fp32: out = inp @ w^T, dinp = dout @ w */
int linear_fwd_f32(struct gpu_ctx *x, float *out, const floatX *inp, const floatX *w, int N,
                   int IC, int OC);
int linear_dinp_f32(struct gpu_ctx *x, float *dinp, const floatX *w, const floatX *dout, int N,
                    int IC, int OC);
/* gw[c] += sum_r d[r][c] xhat[r][c] (when inp given), gb[c] += sum_r d[r][c], in fixed order */
int colsum(struct gpu_ctx *x, float *partial, float *gw, float *gb, const floatX *d,
           const floatX *inp, const float *mean, const float *rstd, int N, int C);
/* out[n] = gelu(inp[n]) */
int gelu_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, size_t n);
/* strided-batched products for attention (cuBLAS), arguments from a gemm_plan */
int bgemm(struct gpu_ctx *x, struct gemm_plan p, float alpha, const floatX *A, const floatX *B,
          floatX *D, int batch);

/* ---------------------------------------------------------------- attention.cu */

/* over this rank's NHl heads: qkv [B][T][3][NHl][hs] -> att (probabilities), atty [B][T][Cl] */
int attention_fwd(struct gpu_stage *s, floatX *atty, floatX *att, const floatX *qkv);
/* dy [B][T][Cl] (scratch: read as the output's gradient) -> dqkv [B][T][3 Cl] */
int attention_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *att,
                  const floatX *qkv);

/* ---------------------------------------------------------------- layernorm.cu */

int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd, const floatX *inp,
                  size_t woff, size_t boff, int N);
/* dinp += d(layernorm)/dinp; the weight and bias gradients (at woff, boff) += theirs */
int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff, const floatX *dout,
                  const floatX *inp, const float *mean, const float *rstd, int N);

/* ---------------------------------------------------------------- classifier.cu */

/* the loss of each row of the micro-batch into a->losses (tensor parallelism: the exchange) */
int cross_entropy_fwd(struct gpu_stage *s, struct gslot *a);
/* the logits -> scale * (softmax - onehot) in place, the whole micro-batch */
int cross_entropy_bwd(struct gpu_stage *s, struct gslot *a, float scale);
/* rows [0, n) of logits [n][Vp] (tp 1): losses, and in place the gradient */
int cross_entropy_rows_fwd(struct gpu_stage *s, float *losses, const floatX *logits,
                           const int *targets, int n);
int cross_entropy_rows_bwd(struct gpu_stage *s, floatX *logits, const int *targets, float scale,
                           int n);
/* s->loss_acc += the losses of rows [t0, t1) of every sequence / (B T), in a fixed order */
int loss_add(struct gpu_stage *s, struct gslot *a, int t0, int t1);

/* ---------------------------------------------------------------- encoder.cu */

/* The micro-batch's tokens (first stage: and their groups for wte's backward) and targets (last
 * stage, when given) up to the slot, asynchronously from its pinned buffer (reused once its last
 * copies are done). */
int upload_ids(struct gpu_stage *s, struct gslot *a, const int *tokens, const int *targets);
/* a->x0 = wte[token] + wpe[position] (tensor parallelism: the group's sum of the lookups) */
int embed_fwd(struct gpu_stage *s, struct gslot *a);
/* wte and wpe gradients += those of the embeddings' output gradient dx [B][T][C] */
int embed_bwd(struct gpu_stage *s, struct gslot *a, const floatX *dx);

/* ---------------------------------------------------------------- adamw.cu */

/* the tensor table (where each tensor ends, whether it decays) to the device; 0 or -1 (EB) */
int adamw_table_upload(struct gpu_stage *s, char *EB, size_t EN);

} /* namespace GPU_NS */
