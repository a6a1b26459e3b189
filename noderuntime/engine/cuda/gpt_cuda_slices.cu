/* TeraPipe's token slices (gpt_pass.c's). A slice [t0, t1) works on one block of
 * S = t1 - t0 rows per sequence b: rows b T + t0 .. b T + t1 of the slot's [B][T] activations,
 * and b S .. (b + 1) S of the pass's [B][S] buffers (in_act, out_act, dout, din, and the scratch
 * dres, dbuf, dfch). The per-row layers (LayerNorm, the linear layers, GELU) run block by block,
 * b ascending (so every parameter gradient adds the blocks in gpt_pass.c's order); the loss runs
 * over the slice's rows in one launch. With tensor parallelism each block's row-parallel
 * projections and column-parallel input gradients are summed across the group (the same helpers
 * as the whole micro-batch's, over the block's S rows), and the loss's exchange covers the slice's
 * rows (classifier.cu); the embeddings are the whole micro-batch's, as with tensor 1.
 *
 * Attention, flash (flash.cu): the slice's rectangle, its queries [t0, t1) against the keys
 * [0, t1), which this and the earlier slices left in the slot; backward writes the queries'
 * gradients and adds the keys' and values' gradients of rows [0, t1) into the slot's fp32
 * dqkv_acc (the later slices went first), writing the sums where the qkv layer's backward of the
 * slice's rows reads them, complete: no earlier slice's query reaches a key at or after t0.
 *
 * Attention, materialised (attention.cu, fp32 and GPU_MATERIALISED_ATTENTION) runs over the
 * whole [B][T]:
 *   forward: the rows [t1, T) of q, k, v are zeroed first; being causal, the rows before t1 read
 *     only the keys and values before t1, which this and the earlier slices left in the slot, so
 *     the slice's rows come out right, the rows before t0 as they were (the same inputs), and the
 *     rows from t1 on (finite, from zeros) are written again by the later slices, the last of
 *     which (t1 = T) leaves the whole att and atty of the micro-batch;
 *   backward: the gradient of the attention's output is zero outside the slice's rows, so the
 *     product gives the slice's queries' gradients and its contributions to the keys' and values'
 *     gradients of rows [0, t1) (zero elsewhere), which add into dqkv_acc likewise.
 * The first stage embeds the whole micro-batch at its first slice (the token ids are all there
 * then) and collects the embeddings' gradient in the slot's dx0, which goes into wte and wpe at the
 * last slice of the backward (t0 = 0) through the whole micro-batch's kernels. */
#include "stage.cuh"

namespace GPU_NS {

namespace {

/* the sliced backward's key and value gradients: acc += d (fp32), then d = acc (the sum so far,
 * in the activation type) */
__global__ void accumulate_kernel(float *acc, floatX *d, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = acc[i] + tof(d[i]);
        acc[i] = v;
        put(d + i, v);
    }
}

} /* namespace */

int forward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const int *tokens,
                  const void *in_act, const int *targets, void *out_act, float *loss)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, S = t1 - t0, C = s->c.channels, Vl = s->Vl;
    int Cl = s->Cl, F = s->F, is_last = s->last == s->c.layers;
    size_t X = sizeof(floatX);
    cudaStream_t st = s->x.stream;
    if (t0 == 0) {
        a->forwarded = 0;
        a->has_targets = 0;
        a->dlogits = 0;
        OK(forward_checks(s, tokens, targets, in_act, out_act));
        OK(stage_upload_ids(s, a, tokens, targets));
    } else if ((s->first != 0 && !in_act) || (!is_last && !out_act)) {
        return forward_checks(s, NULL, NULL, in_act, out_act);
    }
    if (s->first == 0) {
        OK(need_unit(s, 0));
        if (t0 == 0)
            OK(embed_fwd(s, a)); /* every position: the same values whichever slice made them */
    }
    if (t0 == 0)
        a->has_targets = is_last && targets;
    if (s->first != 0) { /* [B][S][C] -> rows [t0, t1) of each sequence */
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpy2DAsync(a->x0 + (size_t)t0 * C, (size_t)T * C * X, in_act, (size_t)S * C * X,
                              (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));
    }

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
        OK(need_unit(s, 1 + i));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(layernorm_fwd(s, A.ln1 + R * C, A.ln1m + R, A.ln1r + R, x + R * C, o->ln1w,
                             o->ln1b, S));
            OK(linear_fwd(&s->x, A.qkv + R * 3 * Cl, A.ln1 + R * C, W + o->qkvw, W + o->qkvb, NULL,
                          NULL, S, C, 3 * Cl));
        }
        if (s->flash) {
            OK(flash_fwd(s, A.atty, A.lse, A.qkv, t0, t1));
        } else {
            if (t1 < T) { /* the positions no slice has reached yet (an earlier micro-batch's) */
                PROF(&s->x, GPU_PART_ATTENTION);
                ENQ(cudaMemset2DAsync(A.qkv + (size_t)t1 * 3 * Cl, (size_t)T * 3 * Cl * X, 0,
                                      (size_t)(T - t1) * 3 * Cl * X, (size_t)B, st));
            }
            OK(attention_fwd(s, A.atty, A.att, A.qkv));
        }
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(row_parallel_fwd(s, A.res2 + R * C, A.atty + R * Cl, o->attprojw, o->attprojb,
                                x + R * C, Cl, S, "the attention projection's output"));
            OK(layernorm_fwd(s, A.ln2 + R * C, A.ln2m + R, A.ln2r + R, A.res2 + R * C, o->ln2w,
                             o->ln2b, S));
            OK(linear_fwd(&s->x, A.fch + R * F, A.ln2 + R * C, W + o->fcw, W + o->fcb, NULL,
                          A.fchg + R * F, S, C, F));
            OK(row_parallel_fwd(s, A.res3 + R * C, A.fchg + R * F, o->fcprojw, o->fcprojb,
                                A.res2 + R * C, F, S, "the MLP projection's output"));
        }
        x = A.res3;
    }
    if (!is_last) {
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpy2DAsync(out_act, (size_t)S * C * X, x + (size_t)t0 * C, (size_t)T * C * X,
                              (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));
    } else {
        OK(need_unit(s, s->nl + 1));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(layernorm_fwd(s, a->lnf + R * C, a->lnfm + R, a->lnfr + R, x + R * C, s->lnfw_off,
                             s->lnfb_off, S));
            OK(linear_fwd(&s->x, a->logits + R * Vl, a->lnf + R * C, W + s->head_off, NULL, NULL,
                          NULL, S, C, Vl));
        }
        if (a->has_targets) { /* the slice's share of the micro-batch's mean */
            OK(classifier_fwd(s, a, t0, t1));
            OK(loss_collect(s, a, t0, t1, loss));
        }
    }
    a->fwd_upto = t1;
    a->bwd_from = T;
    a->forwarded = t1 == T;
    return 0;
}

int backward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const void *dout,
                   void *din, float loss_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, S = t1 - t0, C = s->c.channels, Vl = s->Vl;
    int Cl = s->Cl, F = s->F, is_last = s->last == s->c.layers;
    size_t BT = (size_t)B * T, BTC = BT * C, BTl = BT * Cl, X = sizeof(floatX);
    size_t SC = (size_t)S * C, SF = (size_t)S * F, nacc = (size_t)s->nl * 3 * BTl;
    cudaStream_t st = s->x.stream;
    if (is_last && !a->has_targets)
        return stage_fail(s, "backward of the slot, whose forward had no targets");
    if (!is_last && !dout)
        return stage_fail(s, "a stage before the last needs dout");
    if (s->first != 0 && !din)
        return stage_fail(s, "a stage after the first needs din");
    if (t1 == T) { /* a sliced micro-batch's first backward */
        OK(lazy_alloc(s, (void **)&a->dqkv_acc, nacc * sizeof(float), "the q, k, v gradients"));
        if (s->first == 0)
            OK(lazy_alloc(s, (void **)&a->dx0, BTC * X, "the embeddings' gradient"));
        PROF(&s->x, GPU_PART_OTHER);
        if (nacc > 0)
            ENQ(cudaMemsetAsync(a->dqkv_acc, 0, nacc * sizeof(float), st));
        /* the slices add block by block: a pending clear (gpu_stage_zero_grads) is done first */
        OK(grads_materialise(s));
    }
    s->x.accum = 1;

    const floatX *W = s->wX;
    float *G = s->grads;
    floatX *dres = s->dres; /* [B][S][C] */
    const floatX *x_out = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0;
    if (is_last) {
        float alpha = 1.0f;
        {
            PROF(&s->x, GPU_PART_OTHER);
            ENQ(cudaMemsetAsync(dres, 0, (size_t)B * SC * X, st));
        }
        /* the micro-batch's mean: every slice's rows divide by all B*T */
        OK(classifier_bwd(s, a, t0, t1, loss_scale, &alpha));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(column_parallel_bwd(s, s->dbuf + b * SC, G + s->head_off, NULL, a->logits + R * Vl,
                                   a->lnf + R * C, W + s->head_off, C, Vl, S, alpha,
                                   "the head's input gradient"));
            OK(layernorm_bwd(s, dres + b * SC, s->lnfw_off, s->lnfb_off, s->dbuf + b * SC,
                             x_out + R * C, a->lnfm + R, a->lnfr + R, S));
        }
    } else {
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(dres, dout, (size_t)B * SC * X, cudaMemcpyDeviceToDevice, st));
    }
    for (int i = s->nl - 1; i >= 0; i--) {
        const struct layer_w *o = &s->lw[i];
        const floatX *x = i == 0 ? a->x0 : a->res3 + (size_t)(i - 1) * BTC;
        struct layer_acts A = layer_acts_of(s, a, i);
        float *acc = a->dqkv_acc + (size_t)i * 3 * BTl;
        /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))) */
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            floatX *dr = dres + b * SC;
            if (s->recompute)
                OK(gelu_fwd(&s->x, A.fchg + R * F, A.fch + R * F, SF));
            OK(linear_bwd(&s->x, s->partial, s->dfch + b * SF, G + o->fcprojw, G + o->fcprojb, dr,
                          A.fchg + R * F, W + o->fcprojw, A.fch + R * F, S, F, C, 1.0f));
            OK(column_parallel_bwd(s, s->dbuf + b * SC, G + o->fcw, G + o->fcb, s->dfch + b * SF,
                                   A.ln2 + R * C, W + o->fcw, C, F, S, 1.0f,
                                   "the MLP's input gradient"));
            OK(layernorm_bwd(s, dr, o->ln2w, o->ln2b, s->dbuf + b * SC, A.res2 + R * C, A.ln2m + R,
                             A.ln2r + R, S));
        }
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))); the output's gradient dy in dbuf as
         * [B][T][Cl], the slice's rows (the materialised attention: zero outside them) */
        if (!s->flash) {
            PROF(&s->x, GPU_PART_ATTENTION);
            ENQ(cudaMemsetAsync(s->dbuf, 0, BTl * X, st));
        }
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(linear_bwd(&s->x, s->partial, s->dbuf + R * Cl, G + o->attprojw, G + o->attprojb,
                          dres + b * SC, A.atty + R * Cl, W + o->attprojw, NULL, S, Cl, C, 1.0f));
        }
        if (s->flash) {
            OK(flash_bwd(s, s->dqkv, s->dbuf, A.atty, A.lse, A.qkv, t0, t1, acc));
        } else {
            OK(attention_bwd(s, s->dqkv, s->dbuf, A.att, A.qkv));
            PROF(&s->x, GPU_PART_ATTENTION);
            accumulate_kernel<<<blocks_for(3 * BTl, 256), 256, 0, st>>>(acc, s->dqkv, 3 * BTl);
            LAUNCHED(st);
        }
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(column_parallel_bwd(s, s->dbuf + b * SC, G + o->qkvw, G + o->qkvb,
                                   s->dqkv + R * 3 * Cl, A.ln1 + R * C, W + o->qkvw, C, 3 * Cl, S,
                                   1.0f, "the attention's input gradient"));
            OK(layernorm_bwd(s, dres + b * SC, o->ln1w, o->ln1b, s->dbuf + b * SC, x + R * C,
                             A.ln1m + R, A.ln1r + R, S));
        }
        /* a block's gradients are final once the micro-batch's first tokens are through */
        if (t0 == 0)
            block_done(s, i);
    }
    if (s->first == 0) {
        {
            PROF(&s->x, GPU_PART_EMBEDDING);
            ENQ(cudaMemcpy2DAsync(a->dx0 + (size_t)t0 * C, (size_t)T * C * X, dres, SC * X, SC * X,
                                  (size_t)B, cudaMemcpyDeviceToDevice, st));
        }
        if (t0 == 0) /* every position's gradient is in: the whole micro-batch's kernels */
            OK(embed_bwd(s, a, a->dx0));
    } else {
        PROF(&s->x, GPU_PART_OTHER);
        ENQ(cudaMemcpyAsync(din, dres, (size_t)B * SC * X, cudaMemcpyDeviceToDevice, st));
    }
    a->bwd_from = t0;
    a->forwarded = t0 != 0;
    return 0;
}

} /* namespace GPU_NS */
