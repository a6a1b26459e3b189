/* GPT-2 on the CPU, one pipeline stage at a time (fp32, OpenBLAS for matrix products, OpenMP for
 * the rest).
 *
 * A stage holds the transformer blocks [first, last) of an L-layer model, plus the token and position
 * embeddings (wte, wpe) when first == 0, and the final LayerNorm, the LM head tied to wte, and the
 * cross-entropy loss when last == L (a last stage that is not also first keeps its own copy of wte;
 * the two copies' gradients are summed across the pipeline, see gpt_stage_wte()).
 *
 * Parameters live in one contiguous fp32 buffer; gradients in a second one with the same layout.
 * The layout (which is also the checkpoint layout, docs/engine.md) is, in order:
 *   first stage:  wte [Vp*C], wpe [maxT*C]
 *   each layer l: h<l>.ln_1.weight [C], h<l>.ln_1.bias [C],
 *                 h<l>.attn.qkv.weight [3C*C], h<l>.attn.qkv.bias [3C],
 *                 h<l>.attn.proj.weight [C*C], h<l>.attn.proj.bias [C],
 *                 h<l>.ln_2.weight [C], h<l>.ln_2.bias [C],
 *                 h<l>.mlp.fc.weight [4C*C], h<l>.mlp.fc.bias [4C],
 *                 h<l>.mlp.proj.weight [C*4C], h<l>.mlp.proj.bias [C]
 *   last stage:   ln_f.weight [C], ln_f.bias [C], then wte [Vp*C] unless the stage is also first.
 * Matrices are stored [out][in] row-major (PyTorch nn.Linear's layout); qkv rows are q, then k,
 * then v. Rows V..Vp-1 of wte are padding: initialised to zero, never used by the loss.
 *
 * Refinements of the agreed API (docs/engine.md): struct gpt_tensor is defined here;
 * gpt_stage_forward/backward return -1 for a bad slot, a missing buffer, or a token outside
 * [0, V) (gpt_stage_error() then says which); gpt_stage_logits() exposes the last stage's logits.
 */
#ifndef HOLMES_GPT_H
#define HOLMES_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct gpt_config {
    int layers;       /* L */
    int channels;     /* C, a multiple of heads */
    int heads;        /* NH */
    int vocab;        /* V: real vocabulary size */
    int padded_vocab; /* Vp >= V (a multiple of 128 is fastest); 0 in gpt_config_check = pad */
    int max_seq;      /* maximum context (rows of wpe) */
};

/* How a tensor is split across a tensor-parallel group (gpt_stage_create_tp). */
enum gpt_split {
    GPT_REPLICATED = 0, /* every rank holds all of it (LayerNorms, wpe, row-parallel biases) */
    GPT_SPLIT_ROWS,     /* rank t holds rows [t*R/tp, (t+1)*R/tp): MLP fc, wte (vocabulary) */
    GPT_SPLIT_QKV,      /* the q, k and v blocks each split by rows: rank t holds its heads */
    GPT_SPLIT_COLS,     /* rank t holds columns [t*K/tp, (t+1)*K/tp): the two projections */
};

struct gpt_tensor {
    char name[48];  /* "wte", "h3.attn.qkv.weight", "ln_f.bias", ... */
    size_t offset;  /* in floats, into params / grads */
    size_t size;    /* floats (this rank's part) */
    int decay;      /* 1 for matrices (weight decay applies), 0 for biases and LayerNorm */
    enum gpt_split split;
    size_t rows, cols;   /* the whole tensor's shape ([out][in]; vectors: rows 1) */
    size_t full_offset;  /* its offset in the stage's whole (tensor 1) layout */
};

struct gpt_stage;

/* Checks a shape (positive sizes, C % NH == 0, Vp >= V); fills padded_vocab with V rounded up to
 * a multiple of 128 when it is 0. Errors name the field. */
int gpt_config_check(struct gpt_config *c, herr *e);

/* A stage for layers [first, last) running micro-batches of B sequences of T tokens (T <= max_seq);
 * slots = activation sets kept for micro-batches in flight (1F1B). Parameters are zero until
 * gpt_stage_init_params() or a load; gradients start at zero. */
int gpt_stage_create(struct gpt_stage **out, const struct gpt_config *c, int first, int last,
                     int B, int T, int slots, herr *e);
/* The same stage as rank tp_rank of a tensor-parallel group of tp (Megatron-LM): each rank holds
 * heads/tp heads of the attention (q, k, v column-parallel, the output projection row-parallel),
 * 4C/tp of the MLP (fc column-parallel, its projection row-parallel) and padded_vocab/tp rows of
 * the tied embedding (vocabulary-parallel embedding and cross-entropy); LayerNorms, wpe and the
 * row-parallel biases are replicated (their gradients come out equal on every rank). Forward and
 * backward then sum partial results across the group through the function given with
 * gpt_stage_set_tp_sum: 2 per block each way, plus the embedding, the head and the loss. Needs
 * heads and padded_vocab divisible by tp. tp 1 is gpt_stage_create. */
int gpt_stage_create_tp(struct gpt_stage **out, const struct gpt_config *c, int first, int last,
                        int B, int T, int slots, int tp, int tp_rank, herr *e);
/* The group's sum: buf[n] becomes the element-wise sum of every rank's buf (all ranks call it in
 * the same order). Non-zero stops the forward or backward with an error. */
void gpt_stage_set_tp_sum(struct gpt_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                          void *ctx);
/* Between this rank's parameters and the whole stage's (the tensor 1 layout, which checkpoints
 * use): the count of the whole; this rank's part of a whole buffer; tensor rank r's part (in r's
 * layout, which is this rank's) put in its place in a whole buffer. */
size_t gpt_stage_full_params(const struct gpt_stage *s);
void gpt_stage_from_full(const struct gpt_stage *s, const float *full, float *local);
void gpt_stage_to_full(const struct gpt_stage *s, int r, const float *local, float *full);
int gpt_stage_tp(const struct gpt_stage *s); /* the group's size (1: no tensor parallelism) */
void gpt_stage_free(struct gpt_stage *s);

const struct gpt_config *gpt_stage_config(const struct gpt_stage *s);
void gpt_stage_range(const struct gpt_stage *s, int *first, int *last);
void gpt_stage_batch(const struct gpt_stage *s, int *B, int *T); /* its micro-batch's shape */
int gpt_stage_is_first(const struct gpt_stage *s);
int gpt_stage_is_last(const struct gpt_stage *s);

/* A stage that only runs forwards (evaluation, sampling): no gradients and no backward
 * buffers, and of the activations only each block's q, k and v are kept per block (what a later
 * token slice's attention reads); the blocks share the rest, each writing its output over its
 * input. The same numbers as gpt_stage_create's stage; gpt_stage_grads gives NULL, and backward
 * and gpt_stage_zero_grads refuse or do nothing. No tensor parallelism. */
int gpt_stage_create_forward_only(struct gpt_stage **out, const struct gpt_config *cfg, int first,
                                  int last, int B, int T, int slots, herr *e);

size_t gpt_stage_num_params(const struct gpt_stage *s);
float *gpt_stage_params(struct gpt_stage *s);  /* one contiguous fp32 buffer */
float *gpt_stage_grads(struct gpt_stage *s);   /* same layout, accumulated by backward */
/* The tensor table (the layout above); returns the count and points *out at the table. */
int gpt_stage_tensors(const struct gpt_stage *s, const struct gpt_tensor **out);
/* The tied embedding inside params/grads: returns 0 and its offset and count on a stage that holds
 * wte (first or last), -1 otherwise. */
int gpt_stage_wte(const struct gpt_stage *s, size_t *offset, size_t *count);

/* GPT-2 initialisation: matrices N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weights 1. Each tensor draws from its own stream seeded by (seed, name), so a
 * layer gets the same values whatever the stage split, and both copies of wte are equal. */
void gpt_stage_init_params(struct gpt_stage *s, uint64_t seed);

/* Forward one micro-batch into activation set `slot`. First stage: tokens[B*T] (in_act unused);
 * other stages: in_act[B*T*C]. Last stage: targets[B*T] and *loss = mean cross-entropy over B*T
 * (targets may be NULL for logits only; out_act unused); other stages write out_act[B*T*C]. */
int gpt_stage_forward(struct gpt_stage *s, int slot, const int *tokens, const float *in_act,
                      const int *targets, float *out_act, float *loss);
/* Backward of the micro-batch in `slot` (which must have been forwarded, with targets on the last
 * stage). Last stage: gradient of loss_scale * loss (dout unused); others: dout[B*T*C]. Non-first
 * stages write din[B*T*C]. Parameter gradients accumulate into grads. */
int gpt_stage_backward(struct gpt_stage *s, int slot, const float *dout, float *din,
                       float loss_scale);
/* TeraPipe: the same forward and backward one token slice at a time. A micro-batch's slices
 * [t0, t1) tile [0, T): forwards in order (t0 = 0 starts the micro-batch; tokens and targets are
 * its whole [B*T] arrays, read then; a later slice given tokens reads its own positions again,
 * so a sampler can choose them one at a time), backwards in reverse (t1 = T first), all in `slot`. in_act,
 * out_act, dout and din hold the slice's positions of every sequence: [B][t1 - t0][C]. Last
 * stage: *loss is the slice's share of the micro-batch's mean loss (its positions' sum over
 * B*T), so the slices' losses add up to gpt_stage_forward's; backward scales the same way.
 * Attention over a slice reads the keys and values its earlier slices left in the slot, and the
 * backward hook runs at the last slice (t0 = 0). gpt_stage_forward/backward are the slice
 * (0, T). With tensor parallelism each sequence's rows are a block of their own: every sum of the
 * group runs once a block (test_gpt_tp's sliced cases). */
int gpt_stage_forward_slice(struct gpt_stage *s, int slot, int t0, int t1, const int *tokens,
                            const float *in_act, const int *targets, float *out_act, float *loss);
int gpt_stage_backward_slice(struct gpt_stage *s, int slot, int t0, int t1, const float *dout,
                             float *din, float loss_scale);
void gpt_stage_zero_grads(struct gpt_stage *s);
/* Called by gpt_stage_backward right after the gradients of each transformer block (global layer
 * index) are accumulated, last block first, so a distributed optimizer can start reducing them
 * while the rest of backward runs (the comm module's ZeRO-1). NULL removes it. */
void gpt_stage_set_backward_hook(struct gpt_stage *s, void (*fn)(void *ctx, int layer), void *ctx);
/* Called by gpt_stage_forward before it first reads the parameters [lo, hi) (offsets in the
 * flat buffer: the embeddings, each block, the final LayerNorm and head), so that a distributed
 * optimizer can gather them while the earlier ones compute. A non-zero return stops the forward
 * with an error. NULL removes it. */
void gpt_stage_set_forward_hook(struct gpt_stage *s, int (*fn)(void *ctx, size_t lo, size_t hi),
                                void *ctx);
/* Last stage: the logits [B*T*Vp] of the last forward in `slot` (before backward, which reuses the
 * buffer; in slices, the rows of the positions forwarded so far); NULL elsewhere. */
const float *gpt_stage_logits(const struct gpt_stage *s, int slot);
/* Why the last forward/backward returned -1. */
const char *gpt_stage_error(const struct gpt_stage *s);
/* Floating-point operations of one forward+backward of one micro-batch on this stage (for GFLOP/s). */
double gpt_stage_flops(const struct gpt_stage *s);

/* The engine's effective fp32 matrix-product rate in TFLOPS: times square dim x dim products
 * through the same gemm the engine uses (OpenMP threads as the engine will run them, OpenBLAS
 * single-threaded inside) for about budget_ms after one warm-up, and returns the rate of the
 * best 5 ms window (flops / seconds): processes probing at the same time on shared cores
 * take whole windows from each other rather than slowing every one.
 * Returns a value > 0, or -1 with `e` set (bad arguments, out of memory). */
double gpt_gemm_probe_tflops(int dim, int budget_ms, herr *e);

#endif
