/* Forward and backward of a whole micro-batch (gpt_pass.c's twin) and tensor parallelism's row-
 * and column-parallel layers around the linear layers; the entry points of every pass (token
 * slices: gpt_cuda_slices.cu). The layers themselves are in their own files (stage.cuh lists
 * them). Nothing here synchronises the stream (gpt_cuda.h). */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* Tensor parallelism, a row-parallel layer after the group's sum of its products (fp32):
 * out[N][C] = sum + bias (fp32 master) + res, in that order (gpt_pass.c's row_parallel_forward) */
__global__ void row_parallel_finish_kernel(floatX *out, const float *sum, const float *bias,
                                           const floatX *res, size_t n, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        put(out + i, (sum[i] + bias[i % C]) + tof(res[i]));
}

int whole_range(const struct gpu_stage *s, int t0, int t1) { return t0 == 0 && t1 == s->T; }

} /* namespace */

/* out[N][C] = inp[N][IC] @ w^T + bias + res (N rows: the micro-batch's, or a slice's block).
 * With tensor parallelism a row-parallel layer (each rank holds IC of the inputs; gpt_pass.c's
 * row_parallel_forward): the product without bias in fp32, summed across the group, then the
 * bias and the residual. */
int row_parallel_fwd(struct gpu_stage *s, floatX *out, const floatX *inp, size_t woff,
                     size_t boff, const floatX *res, int IC, int N, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels;
    size_t n = (size_t)N * C;
    if (s->tp == 1)
        return linear_fwd(&s->x, out, inp, s->wX + woff, s->wX + boff, res, NULL, N, IC, C);
    OK(linear_fwd_f32(&s->x, s->tp_dev, inp, s->wX + woff, N, IC, C));
    OK(tp_sum_dev(s, s->tp_dev, n, what));
    PROF(&s->x, GPU_PART_MATMUL);
    row_parallel_finish_kernel<<<blocks_for(n, 256), 256, 0, s->x.stream>>>(
        out, s->tp_dev, s->params + boff, res, n, C);
    LAUNCHED(s->x.stream);
    return 0;
}

/* A column-parallel layer's backward (linear_bwd, no GELU). With tensor parallelism each rank
 * holds OC of the outputs, so its input gradient dinp[BT][IC] is partial (gpt_pass.c's
 * column_parallel_dinput): the product in fp32, summed across the group, then cast to the
 * activation type. */
int column_parallel_bwd(struct gpu_stage *s, floatX *dinp, float *dw, float *dbias,
                        const floatX *dout, const floatX *inp, const floatX *w, int IC, int OC,
                        int N, float alpha, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    size_t n = (size_t)N * IC;
    if (s->tp == 1)
        return linear_bwd(&s->x, s->partial, dinp, dw, dbias, dout, inp, w, NULL, N, IC, OC, alpha);
    OK(linear_bwd(&s->x, s->partial, NULL, dw, dbias, dout, inp, w, NULL, N, IC, OC, alpha));
    OK(linear_dinp_f32(&s->x, s->tp_dev, w, dout, N, IC, OC, alpha));
    OK(tp_sum_dev(s, s->tp_dev, n, what));
    PROF(&s->x, GPU_PART_MATMUL);
    return launch_cast(s->x.stream, dinp, s->tp_dev, n, EB, EN);
}

/* A micro-batch's token ids (first stage) and targets (last stage, when given) are in the
 * vocabulary; the activations a stage between others needs are given. */
int forward_checks(struct gpu_stage *s, const int *tokens, const int *targets, const void *in_act,
                   const void *out_act)
{
    size_t BT = (size_t)s->B * s->T;
    int V = s->c.vocab, is_last = s->last == s->c.layers;
    if (s->first == 0) {
        if (!tokens)
            return stage_fail(s, "the first stage needs tokens");
        for (size_t i = 0; i < BT; i++)
            if (tokens[i] < 0 || tokens[i] >= V)
                return stage_fail(s, "token %d at position %zu is outside the vocabulary [0, %d)",
                                  tokens[i], i, V);
    }
    if (is_last && targets)
        for (size_t i = 0; i < BT; i++)
            if (targets[i] < 0 || targets[i] >= V)
                return stage_fail(s, "target %d at position %zu is outside the vocabulary [0, %d)",
                                  targets[i], i, V);
    if (s->first != 0 && !in_act)
        return stage_fail(s, "a stage after the first needs in_act");
    if (!is_last && !out_act)
        return stage_fail(s, "a stage before the last needs out_act");
    return 0;
}

/* The whole micro-batch (the slice (0, T)). */
int forward_whole(struct gpu_stage *s, struct gslot *a, const int *tokens, const void *in_act,
                  const int *targets, void *out_act, float *loss)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->c.channels, Cl = s->Cl, F = s->F;
    size_t BT = (size_t)B * T, BTC = BT * C;
    int is_last = s->last == s->c.layers;
    cudaStream_t st = s->x.stream;
    a->forwarded = 0;
    a->dlogits = 0;
    OK(forward_checks(s, tokens, targets, in_act, out_act));
    OK(stage_upload_ids(s, a, tokens, targets));
    if (s->first == 0) {
        OK(need_unit(s, 0));
        OK(embed_fwd(s, a));
    } else {
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(a->x0, in_act, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
        OK(need_unit(s, 1 + i));
        /* tensor parallelism: qkv and fc column-parallel (this rank's 3 Cl and F outputs), the
         * two projections row-parallel (summed across the group) */
        OK(layernorm_fwd(s, A.ln1, A.ln1m, A.ln1r, x, o->ln1w, o->ln1b, (int)BT));
        OK(linear_fwd(&s->x, A.qkv, A.ln1, W + o->qkvw, W + o->qkvb, NULL, NULL, (int)BT, C,
                      3 * Cl));
        if (s->flash)
            OK(flash_fwd(s, A.atty, A.lse, A.qkv, 0, T));
        else
            OK(attention_fwd(s, A.atty, A.att, A.qkv));
        OK(row_parallel_fwd(s, A.res2, A.atty, o->attprojw, o->attprojb, x, Cl, (int)BT,
                            "the attention projection's output"));
        OK(layernorm_fwd(s, A.ln2, A.ln2m, A.ln2r, A.res2, o->ln2w, o->ln2b, (int)BT));
        OK(linear_fwd(&s->x, A.fch, A.ln2, W + o->fcw, W + o->fcb, NULL, A.fchg, (int)BT, C, F));
        OK(row_parallel_fwd(s, A.res3, A.fchg, o->fcprojw, o->fcprojb, A.res2, F, (int)BT,
                            "the MLP projection's output"));
        x = A.res3;
    }
    if (!is_last) { /* out_act: complete when the stream gets there (gpu_stage_event_record) */
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(out_act, x, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
        a->forwarded = 1;
        a->has_targets = 0;
        return 0;
    }
    OK(need_unit(s, s->nl + 1));
    OK(layernorm_fwd(s, a->lnf, a->lnfm, a->lnfr, x, s->lnfw_off, s->lnfb_off, (int)BT));
    OK(linear_fwd(&s->x, a->logits, a->lnf, W + s->head_off, NULL, NULL, NULL, (int)BT, C, s->Vl));
    a->forwarded = 1;
    a->has_targets = targets != NULL;
    if (targets) {
        OK(classifier_fwd(s, a, 0, T));
        OK(loss_collect(s, a, 0, T, loss));
    }
    return 0;
}

/* The whole micro-batch (the slice (0, T)). */
int backward_whole(struct gpu_stage *s, struct gslot *a, const void *dout, void *din,
                   float loss_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->c.channels;
    int Cl = s->Cl, F = s->F;
    size_t BT = (size_t)B * T, BTC = BT * C, BTF = BT * F;
    int is_last = s->last == s->c.layers;
    cudaStream_t st = s->x.stream;
    if (is_last && !a->has_targets)
        return stage_fail(s, "backward of slot %d, whose forward had no targets",
                          (int)(a - s->slots));
    if (!is_last && !dout)
        return stage_fail(s, "a stage before the last needs dout");
    if (s->first != 0 && !din)
        return stage_fail(s, "a stage after the first needs din");
    a->forwarded = 0;
    /* after gpu_stage_zero_grads this backward writes every gradient instead of adding */
    s->x.accum = !s->grads_fresh;
    s->grads_fresh = 0;

    const floatX *W = s->wX;
    float *G = s->grads;
    floatX *dres = s->dres;
    const floatX *x_out = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0;
    if (is_last) {
        float alpha = 1.0f;
        OK(classifier_bwd(s, a, 0, T, loss_scale, &alpha));
        /* the head is column-parallel over the vocabulary */
        OK(column_parallel_bwd(s, s->dbuf, G + s->head_off, NULL, a->logits, a->lnf,
                               W + s->head_off, C, s->Vl, (int)BT, alpha,
                               "the head's input gradient"));
        {
            PROF(&s->x, GPU_PART_OTHER);
            ENQ(cudaMemsetAsync(dres, 0, BTC * sizeof(floatX), st));
        }
        OK(layernorm_bwd(s, dres, s->lnfw_off, s->lnfb_off, s->dbuf, x_out, a->lnfm, a->lnfr, (int)BT));
    } else {
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(dres, dout, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }
    for (int i = s->nl - 1; i >= 0; i--) {
        const struct layer_w *o = &s->lw[i];
        const floatX *x = i == 0 ? a->x0 : a->res3 + (size_t)(i - 1) * BTC;
        struct layer_acts A = layer_acts_of(s, a, i);
        if (s->recompute)
            OK(gelu_fwd(&s->x, A.fchg, A.fch, BTF));
        /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))); with tensor parallelism the
         * projection's input gradient is this rank's F columns (no sum) and its bias gradient
         * the same on every rank; fc's input gradient is summed across the group */
        OK(linear_bwd(&s->x, s->partial, s->dfch, G + o->fcprojw, G + o->fcprojb, dres, A.fchg,
                      W + o->fcprojw, A.fch, (int)BT, F, C, 1.0f));
        OK(column_parallel_bwd(s, s->dbuf, G + o->fcw, G + o->fcb, s->dfch, A.ln2, W + o->fcw, C, F,
                               (int)BT, 1.0f, "the MLP's input gradient"));
        OK(layernorm_bwd(s, dres, o->ln2w, o->ln2b, s->dbuf, A.res2, A.ln2m, A.ln2r, (int)BT));
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))), likewise */
        OK(linear_bwd(&s->x, s->partial, s->dbuf, G + o->attprojw, G + o->attprojb, dres, A.atty,
                      W + o->attprojw, NULL, (int)BT, Cl, C, 1.0f));
        if (s->flash)
            OK(flash_bwd(s, s->dqkv, s->dbuf, A.atty, A.lse, A.qkv, 0, T, NULL));
        else
            OK(attention_bwd(s, s->dqkv, s->dbuf, A.att, A.qkv));
        OK(column_parallel_bwd(s, s->dbuf, G + o->qkvw, G + o->qkvb, s->dqkv, A.ln1, W + o->qkvw, C,
                               3 * Cl, (int)BT, 1.0f, "the attention's input gradient"));
        OK(layernorm_bwd(s, dres, o->ln1w, o->ln1b, s->dbuf, x, A.ln1m, A.ln1r, (int)BT));
        block_done(s, i);
    }
    if (s->first == 0) {
        OK(embed_bwd(s, a, dres));
    } else { /* din: complete when the stream gets there (gpu_stage_event_record) */
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(din, dres, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }
    s->x.accum = 1;
    s->x.warm = 1; /* every product of a whole pass has its algorithm (GPU_OVERLAP_WEIGHT_GRADS) */
    return 0;
}

} /* namespace GPU_NS */

using namespace GPU_NS;

int gpu_stage_forward_slice(struct gpu_stage *s, int slot, int t0, int t1, const int *tokens,
                            const void *in_act, const int *targets, void *out_act, float *loss)
{
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    if (t0 < 0 || t1 > s->T || t0 >= t1)
        return stage_fail(s, "token slice [%d, %d) is not inside [0, %d) or is empty", t0, t1,
                          s->T);
    struct gslot *a = &s->slots[slot];
    if (t0 > 0 && a->fwd_upto != t0)
        return stage_fail(s, "forward of tokens [%d, %d) of slot %d, whose forward stands at %d: "
                          "slices go in order", t0, t1, slot, a->fwd_upto);
    if (whole_range(s, t0, t1)) {
        a->fwd_upto = 0;
        OK(forward_whole(s, a, tokens, in_act, targets, out_act, loss));
        a->fwd_upto = s->T;
        a->bwd_from = s->T;
        return 0;
    }
    if (t0 == 0)
        a->fwd_upto = 0;
    return forward_slice(s, a, t0, t1, tokens, in_act, targets, out_act, loss);
}

int gpu_stage_backward_slice(struct gpu_stage *s, int slot, int t0, int t1, const void *dout,
                             void *din, float loss_scale)
{
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct gslot *a = &s->slots[slot];
    if (!a->forwarded)
        return stage_fail(s, "backward of slot %d, which holds no forward pass", slot);
    if (t0 < 0 || t0 >= t1 || t1 != a->bwd_from)
        return stage_fail(s, "backward of tokens [%d, %d) of slot %d, whose backward stands at "
                          "%d: slices go in reverse", t0, t1, slot, a->bwd_from);
    if (whole_range(s, t0, t1)) {
        OK(backward_whole(s, a, dout, din, loss_scale));
        a->bwd_from = 0;
        return 0;
    }
    return backward_slice(s, a, t0, t1, dout, din, loss_scale);
}

int gpu_stage_forward(struct gpu_stage *s, int slot, const int *tokens, const void *in_act,
                      const int *targets, void *out_act, float *loss)
{
    return gpu_stage_forward_slice(s, slot, 0, s->T, tokens, in_act, targets, out_act, loss);
}

int gpu_stage_backward(struct gpu_stage *s, int slot, const void *dout, void *din, float loss_scale)
{
    return gpu_stage_backward_slice(s, slot, 0, s->T, dout, din, loss_scale);
}
