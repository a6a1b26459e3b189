/* The CPU stage's private parts, shared by gpt.c (layout, creation, initialisation) and
 * gpt_pass.c (forward and backward, whole micro-batches and token slices). */
#ifndef HOLMES_GPT_IMPL_H
#define HOLMES_GPT_IMPL_H

#include <stddef.h>

#include "gpt.h"

#define GPT_MAX_TENSORS_PER_LAYER 12

struct layer_off { /* offsets of one block's tensors in params/grads */
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

struct slot_acts { /* one micro-batch's saved activations */
    int forwarded, has_targets;
    int *tokens, *targets;          /* [BT] */
    float *mem;                     /* the block everything below points into */
    float *x0;                      /* [BTC] stage input (embeddings or in_act) */
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3; /* per layer, nl blocks each */
    float *lnf, *lnf_mean, *lnf_rstd, *logits;
    float *ce_max, *ce_sum;         /* [BT] tensor parallel: each row's global softmax max, sum */
    /* token slices (TeraPipe): where the forward and the backward of this micro-batch stand */
    int fwd_upto;                   /* positions [0, fwd_upto) forwarded */
    int bwd_from;                   /* positions [bwd_from, T) through backward */
    float *dqkv_acc;                /* [nl][BT * 3Cl] sliced backward: each block's q, k, v
                                       gradients, gathered over the slices (allocated on first use) */
    /* the distance between one block's activations and the next's, per kind: [BTC] (ln1, res2,
     * ln2, res3), [BT] (the LayerNorms' statistics), [BT * Cl] (atty), [BT * F] (fch, fch_gelu),
     * [B * NHl * T * T] (att); 0 in a forward-only stage, whose blocks share one set (qkv is
     * always kept per block: a later slice's attention reads it) */
    size_t sC, sT, sl, sF, sA;
};

struct gpt_stage {
    struct gpt_config c;
    int first, last, nl, B, T, nslots;
    int tp, tpr;                    /* tensor-parallel group size and this rank (1, 0: none) */
    int Cl, NHl, F, Vl;             /* this rank's attention channels, heads, MLP width, vocab rows */
    int (*tp_sum)(void *ctx, float *buf, size_t n); /* gpt_stage_set_tp_sum */
    void *tp_sum_ctx;
    float *ce_buf;                  /* [BT * (2 tp + 1)] the loss's exchange */
    float *whole;                   /* tp > 1: one whole tensor (the largest), for initialisation */
    size_t full_nparams;            /* the tensor 1 layout's count */
    void (*layer_hook)(void *ctx, int layer); /* gpt_stage_set_backward_hook */
    void *layer_hook_ctx;
    int (*param_hook)(void *ctx, size_t lo, size_t hi); /* gpt_stage_set_forward_hook */
    void *param_hook_ctx;
    size_t nparams;
    float *params, *grads;
    struct gpt_tensor *tensors;
    int ntensors;
    size_t wte_off, wpe_off, lnfw_off, lnfb_off, head_off; /* head_off: the wte used by the head */
    struct layer_off *lo;           /* [nl] */
    struct slot_acts *slots;
    /* backward scratch, shared by all slots (NULL in a forward-only stage, as grads) */
    float *dres, *dbuf, *dqkv, *dfch, *datt_row;
    int forward_only;               /* gpt_stage_create_forward_only */
    char err[256];
};

/* Records the reason for gpt_stage_error and returns -1. */
int gpt_stage_fail(struct gpt_stage *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The forward hook for parameters [lo, hi): -1 (with the stage's error set) when it refuses. */
int gpt_need_params(struct gpt_stage *s, size_t lo, size_t hi);
/* Sums buf[n] across the tensor group (nothing without one): -1 with the stage's error set. */
int gpt_tp_sum(struct gpt_stage *s, float *buf, size_t n);
/* n floats, zeroed and 64-byte aligned (NULL when out of memory). */
float *gpt_falloc(size_t n);

#endif
