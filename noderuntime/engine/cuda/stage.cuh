/* The stage's state (struct gpu_stage, its activation slots) and the host side of every layer
 * kind, one file each, as llm.c's llmc/ (forward beside backward in each file):
 *   matmul.cu      the linear layers, GELU, the attention's batched products, the GEMM
 *                  ceiling
 *   matmul_lt.cu   cuBLASLt's products: descriptors cached per shape and epilogue, the
 *                  algorithm timed once per process
 *   attention.cu   causal self-attention with the scores materialised (fp32; bf16 on request)
 *   flash.cu       flash attention (bf16: mma.sync fragments in registers, cp.async double
 *                  buffering), forward and backward; its kernels in flash_mma_kernels.cuh
 *                  (the shared helpers), flash_fwd_kernels.cuh and flash_bwd_kernels.cuh
 *   layernorm.cu   LayerNorm (its backward makes its own weight and bias gradients) and the
 *                  column sums (bias gradients), their kernels in layernorm_kernels.cuh
 *   classifier.cu  cross-entropy, fused with its gradient (and tensor parallelism's exchange)
 *   encoder.cu     the embeddings (wte, wpe) and the token groups of wte's backward
 *   adamw.cu       AdamW, the gradient norms and their tensor table
 *   gpt_cuda.cu    the stage: creation, device memory, accessors
 *   gpt_cuda_host.cu  what crosses to the host: transfers, token staging, the loss, events,
 *                  hooks, the tensor group's sum, profiling
 *   gpt_cuda_pass.cu  forward and backward of a micro-batch (and tensor parallelism's layers)
 *   gpt_cuda_slices.cu  TeraPipe's token slices
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
    int dlogits;                       /* the forward left the loss's gradient (/ B*T) in logits */
    int *tokens, *targets;             /* device [BT] */
    int *utok, *ustart, *upos;         /* device: positions grouped by token (wte backward) */
    int nuniq, maxpos;                 /* the groups, and the most positions one has */
    int *h_stage;                      /* pinned host: tokens [BT], targets [BT], utok [BT],
                                          ustart [BT+1], upos [BT], going up to the device */
    cudaEvent_t up_done;               /* the last copy out of h_stage is done */
    floatX *x0, *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3, *lnf, *logits;
    float *ln1m, *ln1r, *ln2m, *ln2r, *lnfm, *lnfr, *losses;
    float *lse;                        /* [nl][B][NHl][T] flash attention: each row's log-sum-exp */
    float *ce_max, *ce_sum;            /* [BT] tensor parallelism: each row's global softmax max, sum */
    /* token slices (TeraPipe): where the forward and the backward of this micro-batch stand */
    int fwd_upto;                      /* positions [0, fwd_upto) forwarded */
    int bwd_from;                      /* positions [bwd_from, T) through backward */
    float *dqkv_acc;                   /* [nl][BT * 3Cl] sliced backward: each block's q, k, v
                                          gradients gathered over the slices (first use) */
    floatX *dx0;                       /* [BTC] sliced backward, first stage: the embeddings'
                                          gradient, into wte and wpe at the last slice */
};

/* Layer i's saved activations in slot a: [B][T] rows each, of the layer's widths (C, 3 Cl, Cl,
 * F: this rank's share with tensor parallelism); fchg is the shared scratch when GELU outputs are
 * recomputed; att the probabilities [B][NHl][T][T] of the materialised attention, lse the
 * [B][NHl][T] log-sum-exps of flash attention. */
struct layer_acts {
    floatX *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r;
    float *lse;                        /* flash attention (att NULL), else NULL */
};

} /* namespace GPU_NS */

struct gpu_stage {
    struct gpt_config c;
    int first, last, nl, B, T, nslots, recompute, flags;
    int flash;                         /* 1: flash attention (flash.cu); 0: the materialised one */
    int flash_max_bh;                  /* (sequence, head) pairs a flash launch takes: FLASH_MAX_BH,
                                          or HOLMES_GPU_FLASH_MAX_BH (tests) */
    int ln_bwd_max_it;                 /* vectors a LayerNorm backward lane holds at most
                                          (layernorm_prepare) */
    int tp, tpr;                       /* tensor-parallel group size and this rank (1, 0: none) */
    int Cl, NHl, F, Vl;                /* this rank's attention channels, heads, MLP width, vocab rows */
    int (*tp_sum)(void *ctx, float *buf, size_t n); /* gpu_stage_set_tp_sum */
    void *tp_ctx;
    int (*tp_sum_devfn)(void *ctx, float *dev_buf, size_t n); /* gpu_stage_set_tp_sum_dev */
    void *tp_dev_ctx;
    float *tp_dev;                     /* device fp32 [tp_n]: partial results on their way to the sum */
    float *tp_host;                    /* pinned host [tp_n]: the sum's staging buffer */
    size_t tp_n;
    int (*fwd_hook)(void *ctx, size_t lo, size_t hi); /* gpu_stage_set_forward_hook */
    void *fwd_ctx;
    void (*bwd_hook)(void *ctx, int layer); /* gpu_stage_set_backward_hook */
    void *bwd_ctx;
    struct gpt_stage *host;            /* layout, initialisation, host staging */
    const struct gpt_tensor *tensors;
    int ntensors;
    size_t nparams;
    size_t wte_off, wpe_off, lnfw_off, lnfb_off, head_off;
    GPU_NS::layer_w *lw;
    /* the parameter ranges the forward hook announces: unit 0 the embeddings, 1 + i block i,
     * nl + 1 the final LayerNorm and head (empty where the stage holds none); wx_dirty: the bf16
     * copy of the unit is stale (gpu_stage_params_changed) */
    size_t *unit_lo, *unit_hi;
    unsigned char *wx_dirty;
    float *params, *grads, *m, *v;     /* device fp32 (m, v NULL with GPU_NO_MOMENTS) */
    int grads_fresh;                   /* gradients to be written (not added) by the next backward */
    floatX *wX;                        /* device weights in the activation type (= params in fp32) */
    size_t *seg_end;
    int *seg_decay;
    GPU_NS::gslot *slots;
    /* shared scratch */
    floatX *dres, *dbuf, *dfch, *dqkv, *q, *k, *vv, *y, *dq, *dk, *dv, *datt;
    floatX *fchg;                      /* GELU outputs of one layer when recomputing */
    float *dsum;                       /* [B][NHl][T] flash backward: rowsum(dy * y) */
    floatX *flash_ds;                  /* [B][NHl][T][T rounded up to 64] flash backward's dS for
                                          the dQ kernel (flash.cu); NULL: GPU_FLASH_RECOMPUTE_DQ,
                                          or past FLASH_DS_MAX_BYTES (flash_plan.h) */
    float *partial;
    double *sq_partial;                /* [sq_cap] */
    size_t sq_cap;
    double *loss_dev;                  /* [2]: the accumulator (gpu_stage_loss_take), the last */
    int ncount;                        /* token values token_groups may see: V, or Vl + 1 (tp > 1) */
    int *h_counts;                     /* host [ncount + 1]: token_groups' counts; tp > 1 also
                                          [BT] the tokens shifted to this rank's rows */
    void **scratch;                    /* activations and scratch: gpu_stage_debug_poison */
    size_t *scratch_bytes;
    int nscratch, capscratch;
    GPU_NS::gpu_prof prof;
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
/* host tokens / targets [BT] and the token groups into the slot's pinned staging and up to the
 * device, asynchronously (gpt_cuda_host.cu) */
int stage_upload_ids(struct gpu_stage *s, struct gslot *a, const int *tokens, const int *targets);
/* the forward hook for unit u, then the bf16 copy of the unit when it is stale */
int need_unit(struct gpu_stage *s, int u);
/* the backward hook for the stage's block i */
void block_done(struct gpu_stage *s, int i);
/* gradients about to be read (or added to): the pending clear of gpu_stage_zero_grads, enqueued */
int grads_materialise(struct gpu_stage *s);
/* the loss of rows [t0, t1) of each sequence (a->losses) / (B T): added to the accumulator, or
 * (loss given) read back, synchronising */
int loss_collect(struct gpu_stage *s, struct gslot *a, int t0, int t1, float *loss);
struct layer_acts layer_acts_of(const struct gpu_stage *s, const struct gslot *a, int i);
/* *p = bytes of device memory unless it is there already; -1 (stage error) when out of memory */
int lazy_alloc(struct gpu_stage *s, void **p, size_t bytes, const char *what);

/* ---------------------------------------------------------------- matmul.cu, matmul_lt.cu */

enum { EPI_NONE, EPI_BIAS, EPI_GELU_BIAS, EPI_DGELU };

/* Column-major D(m x n) = alpha * op(A) op(B) + beta * C (+ epilogue); see matmul.cu. */
int matmul(struct gpu_ctx *x, void *D, cudaDataType dtype, const void *A, int ta, const void *B,
           int tb, int m, int n, int k, int lda, int ldb, int ldd, float alpha, float beta,
           const void *C, int epi, const void *bias, void *aux, int ldaux);
/* Row-major out[N][OC] = inp[N][IC] @ w[OC][IC]^T (+ bias) (+ res); with gelu_out: out gets the
 * pre-activation and gelu_out = gelu(out). */
int linear_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, const floatX *w,
               const floatX *bias, const floatX *res, floatX *gelu_out, int N, int IC, int OC);
/* dinp[N][IC] = alpha dout @ w (overwritten; times gelu'(dgelu_pre) when given; dinp NULL: not
 * computed); dw[OC][IC] (+)= alpha dout^T @ inp (fp32); dbias[OC] (+)= column sums of dout;
 * (+)= : added when x->accum, written otherwise */
int linear_bwd(struct gpu_ctx *x, float *partial, floatX *dinp, float *dw, float *dbias,
               const floatX *dout, const floatX *inp, const floatX *w, const floatX *dgelu_pre,
               int N, int IC, int OC, float alpha);
/* tensor parallelism's partial products in fp32: out = inp @ w^T, dinp = alpha dout @ w */
int linear_fwd_f32(struct gpu_ctx *x, float *out, const floatX *inp, const floatX *w, int N,
                   int IC, int OC);
int linear_dinp_f32(struct gpu_ctx *x, float *dinp, const floatX *w, const floatX *dout, int N,
                    int IC, int OC, float alpha);
/* out[n] = gelu(inp[n]) */
int gelu_fwd(struct gpu_ctx *x, floatX *out, const floatX *inp, size_t n);
/* strided-batched products for attention (cuBLAS), arguments from a gemm_plan */
int bgemm(struct gpu_ctx *x, struct gemm_plan p, float alpha, const floatX *A, const floatX *B,
          floatX *D, int batch);

/* ---------------------------------------------------------------- attention.cu, flash.cu */

/* The materialised attention, over this rank's NHl heads: qkv [B][T][3][NHl][hs] -> att
 * (probabilities [B][NHl][T][T]), atty [B][T][Cl]; backward: dy [B][T][Cl] (scratch: read as the
 * output's gradient) -> dqkv [B][T][3 Cl]. */
int attention_fwd(struct gpu_stage *s, floatX *atty, floatX *att, const floatX *qkv);
int attention_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *att,
                  const floatX *qkv);
/* Whether flash attention runs this head size (flash.cu); its kernels' shared memory set up on
 * the current device (once a stage) */
int flash_supported(int hs);
int flash_prepare(struct gpu_stage *s);
/* Flash attention over the queries [q0, q1) of every sequence, the keys [0, q1) (causal): q, k, v
 * read where the qkv product left them ([B][T][3][NHl][hs]), atty rows [q0, q1) written and the
 * rows' log-sum-exp into lse [B][NHl][T]. */
int flash_fwd(struct gpu_stage *s, floatX *atty, float *lse, const floatX *qkv, int q0, int q1);
/* Its backward for the output gradient dy [B][T][Cl] of the queries [q0, q1) (y, lse: the
 * forward's): dqkv's q rows [q0, q1) written; its k and v rows [0, q1) written, or, with kv_acc
 * (fp32 [B][T][3 Cl], the sliced backward's accumulator), added into kv_acc and the sum written.
 * Deterministic: every element is written by one thread, in a fixed order. */
int flash_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *y,
              const float *lse, const floatX *qkv, int q0, int q1, float *kv_acc);
/* Calls f(head_size<HS>{}) with the stage's head size as a compile-time constant (flash
 * attention's kernels are templates on it): 16, 32, 64 or 128, else the stage's error. */
template <int HS> struct head_size {
    static constexpr int value = HS;
};
template <class F> int by_head_size(struct gpu_stage *s, F f)
{
    switch (s->Cl / s->NHl) {
    case 16: return f(head_size<16>{});
    case 32: return f(head_size<32>{});
    case 64: return f(head_size<64>{});
    case 128: return f(head_size<128>{});
    }
    return stage_fail(s, "flash attention: head size %d is not supported", s->Cl / s->NHl);
}

/* ---------------------------------------------------------------- layernorm.cu */

/* reads HOLMES_GPU_LN_BWD_MAX_IT (s->ln_bwd_max_it); -1 with s->err naming it when it is bad */
int layernorm_prepare(struct gpu_stage *s);
int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd, const floatX *inp,
                  size_t woff, size_t boff, int N);
/* dinp += d(layernorm)/dinp; the weight and bias gradients (at woff, boff) (+)= theirs, in the
 * same kernel (per-block partial sums, then their sum in a fixed order) */
int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff, const floatX *dout,
                  const floatX *inp, const float *mean, const float *rstd, int N);
/* gb[c] (+)= sum_r d[r][c] over N rows, in a fixed order (partial: the chunks' sums; the rows
 * split as colsum_plan.h says) */
int colsum(struct gpu_ctx *x, float *partial, float *gb, const floatX *d, int N, int C);
/* the chunks' partial sums [chunks][2][C] -> gw (+)= row 0's, gb (+)= row 1's (either NULL) */
int colsum_finish(struct gpu_ctx *x, float *gw, float *gb, const float *partial, int chunks, int C);

/* ---------------------------------------------------------------- classifier.cu */

/* The loss of the rows [t0, t1) of each sequence into a->losses. tp 1: one pass that also leaves
 * the loss's gradient (softmax - onehot) / (B T) in the logits (a->dlogits); tensor parallelism:
 * the exchange (the whole micro-batch). */
int classifier_fwd(struct gpu_stage *s, struct gslot *a, int t0, int t1);
/* The logits' gradient of loss_scale * loss for rows [t0, t1): *alpha is the factor the head's
 * products still apply (loss_scale after the fused forward, 1 after tensor parallelism's kernel) */
int classifier_bwd(struct gpu_stage *s, struct gslot *a, int t0, int t1, float loss_scale,
                   float *alpha);
/* s->loss_dev[1] = the sum of a->losses over rows [t0, t1) of each sequence / (B T) (fp64, a
 * fixed order); s->loss_dev[0] += that when add */
int loss_reduce(struct gpu_stage *s, struct gslot *a, int t0, int t1, int add);

/* ---------------------------------------------------------------- encoder.cu */

/* a->x0 = wte[token] + wpe[position] (tensor parallelism: the group's sum of the lookups) */
int embed_fwd(struct gpu_stage *s, struct gslot *a);
/* wte and wpe gradients (+)= those of the embeddings' output gradient dx [B][T][C] */
int embed_bwd(struct gpu_stage *s, struct gslot *a, const floatX *dx);

/* ---------------------------------------------------------------- adamw.cu */

/* the tensor table (where each tensor ends, whether it decays) to the device; 0 or -1 (EB) */
int adamw_table_upload(struct gpu_stage *s, char *EB, size_t EN);

/* ---------------------------------------------------------------- gpt_cuda_pass.cu, _slices.cu */

int forward_whole(struct gpu_stage *s, struct gslot *a, const int *tokens, const void *in_act,
                  const int *targets, void *out_act, float *loss);
int backward_whole(struct gpu_stage *s, struct gslot *a, const void *dout, void *din,
                   float loss_scale);
int forward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const int *tokens,
                  const void *in_act, const int *targets, void *out_act, float *loss);
int backward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const void *dout,
                   void *din, float loss_scale);
/* Tensor parallelism's layers around a linear layer, over N rows (the micro-batch's B T, or one
 * sequence's S rows of a token slice): a row-parallel layer's forward, out = inp @ w^T + bias +
 * res (the products summed across the group in fp32), and a column-parallel layer's backward
 * (the input gradient summed across the group); with tp 1 the plain linear layer's. */
int row_parallel_fwd(struct gpu_stage *s, floatX *out, const floatX *inp, size_t woff,
                     size_t boff, const floatX *res, int IC, int N, const char *what);
int column_parallel_bwd(struct gpu_stage *s, floatX *dinp, float *dw, float *dbias,
                        const floatX *dout, const floatX *inp, const floatX *w, int IC, int OC,
                        int N, float alpha, const char *what);
/* the pass's checks before any work: tokens and targets in range, in_act and out_act given */
int forward_checks(struct gpu_stage *s, const int *tokens, const int *targets, const void *in_act,
                   const void *out_act);

} /* namespace GPU_NS */
