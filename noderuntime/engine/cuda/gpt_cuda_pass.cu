/* Forward and backward of a micro-batch (gpt_pass.c's twin): the whole micro-batch, tensor
 * parallelism's row- and column-parallel layers around the linear layers, and TeraPipe's token
 * slices. The layers themselves are in their own files (stage.cuh lists them). */
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

/* out[BT][C] = inp[BT][IC] @ w^T + bias + res. With tensor parallelism a row-parallel layer (each
 * rank holds IC of the inputs; gpt_pass.c's row_parallel_forward): the product without bias in
 * fp32, summed across the group, then the bias and the residual. */
int row_parallel_fwd(struct gpu_stage *s, floatX *out, const floatX *inp, size_t woff,
                     size_t boff, const floatX *res, int IC, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int N = s->B * s->T, C = s->c.channels;
    size_t n = (size_t)N * C;
    if (s->tp == 1)
        return linear_fwd(&s->x, out, inp, s->wX + woff, s->wX + boff, res, NULL, N, IC, C);
    OK(linear_fwd_f32(&s->x, s->tp_dev, inp, s->wX + woff, N, IC, C));
    OK(tp_sum_dev(s, s->tp_dev, n, what));
    row_parallel_finish_kernel<<<blocks_for(n, 256), 256, 0, s->x.stream>>>(
        out, s->tp_dev, s->params + boff, res, n, C);
    LAUNCHED(s->x.stream);
    return 0;
}

/* The whole micro-batch (the slice (0, T)). */
int forward_whole(struct gpu_stage *s, int slot, const int *tokens, const void *in_act,
                  const int *targets, void *out_act, float *loss)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct gslot *a = &s->slots[slot];
    int B = s->B, T = s->T, C = s->c.channels, Cl = s->Cl, F = s->F;
    size_t BT = (size_t)B * T, BTC = BT * C;
    int is_last = s->last == s->c.layers;
    cudaStream_t st = s->x.stream;
    a->forwarded = 0;
    OK(check_ids(s, tokens, targets));
    if (s->first != 0 && !in_act)
        return stage_fail(s, "a stage after the first needs in_act");
    if (!is_last && !out_act)
        return stage_fail(s, "a stage before the last needs out_act");
    OK(upload_ids(s, a, tokens, is_last ? targets : NULL));
    if (s->first == 0) {
        OK(need_params(s, 0));
        OK(embed_fwd(s, a));
    } else {
        CK(cudaMemcpyAsync(a->x0, in_act, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
        OK(need_params(s, 1 + i));
        /* tensor parallelism: qkv and fc column-parallel (this rank's 3 Cl and F outputs), the
         * two projections row-parallel (summed across the group) */
        OK(layernorm_fwd(s, A.ln1, A.ln1m, A.ln1r, x, o->ln1w, o->ln1b, (int)BT));
        OK(linear_fwd(&s->x, A.qkv, A.ln1, W + o->qkvw, W + o->qkvb, NULL, NULL, (int)BT, C,
                      3 * Cl));
        OK(attention_fwd(s, A.atty, A.att, A.qkv));
        OK(row_parallel_fwd(s, A.res2, A.atty, o->attprojw, o->attprojb, x, Cl,
                            "the attention projection's output"));
        OK(layernorm_fwd(s, A.ln2, A.ln2m, A.ln2r, A.res2, o->ln2w, o->ln2b, (int)BT));
        OK(linear_fwd(&s->x, A.fch, A.ln2, W + o->fcw, W + o->fcb, NULL, A.fchg, (int)BT, C, F));
        OK(row_parallel_fwd(s, A.res3, A.fchg, o->fcprojw, o->fcprojb, A.res2, F,
                            "the MLP projection's output"));
        x = A.res3;
    }
    if (!is_last) { /* complete for another stream once it waits for an event recorded now */
        CK(cudaMemcpyAsync(out_act, x, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
        a->forwarded = 1;
        a->has_targets = 0;
        return 0;
    }
    OK(need_params(s, s->nl + 1));
    OK(layernorm_fwd(s, a->lnf, a->lnfm, a->lnfr, x, s->lnfw_off, s->lnfb_off, (int)BT));
    OK(linear_fwd(&s->x, a->logits, a->lnf, W + s->head_off, NULL, NULL, NULL, (int)BT, C, s->Vl));
    a->forwarded = 1;
    a->has_targets = targets != NULL;
    if (targets) {
        OK(cross_entropy_fwd(s, a));
        if (loss) {
            OK(d2h(s, s->h_losses, a->losses, BT * sizeof(float)));
            double total = 0.0;
            for (size_t r = 0; r < BT; r++)
                total += s->h_losses[r];
            *loss = (float)(total / (double)BT);
        } else { /* on the device, read once per step (gpu_stage_loss_take) */
            OK(loss_add(s, a, 0, T));
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- backward */

/* A column-parallel layer's backward (linear_bwd, no GELU). With tensor parallelism each rank
 * holds OC of the outputs, so its input gradient dinp[BT][IC] is partial (gpt_pass.c's
 * column_parallel_dinput): the product in fp32, summed across the group, then cast to the
 * activation type. */
int column_parallel_bwd(struct gpu_stage *s, floatX *dinp, float *dw, float *dbias,
                        const floatX *dout, const floatX *inp, const floatX *w, int IC,
                        int OC, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int N = s->B * s->T;
    size_t n = (size_t)N * IC;
    if (s->tp == 1)
        return linear_bwd(&s->x, s->partial, dinp, dw, dbias, dout, inp, w, NULL, N, IC, OC);
    OK(linear_bwd(&s->x, s->partial, NULL, dw, dbias, dout, inp, w, NULL, N, IC, OC));
    OK(linear_dinp_f32(&s->x, s->tp_dev, w, dout, N, IC, OC));
    OK(tp_sum_dev(s, s->tp_dev, n, what));
    return launch_cast(s->x.stream, dinp, s->tp_dev, n, EB, EN);
}

/* The whole micro-batch (the slice (0, T)). */
int backward_whole(struct gpu_stage *s, int slot, const void *dout, void *din,
                   float loss_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct gslot *a = &s->slots[slot];
    if (!a->forwarded)
        return stage_fail(s, "backward of slot %d, which holds no forward pass", slot);
    int B = s->B, T = s->T, C = s->c.channels;
    int Cl = s->Cl, F = s->F;
    size_t BT = (size_t)B * T, BTC = BT * C, BTF = BT * F;
    int is_last = s->last == s->c.layers;
    cudaStream_t st = s->x.stream;
    if (is_last && !a->has_targets)
        return stage_fail(s, "backward of slot %d, whose forward had no targets", slot);
    if (!is_last && !dout)
        return stage_fail(s, "a stage before the last needs dout");
    if (s->first != 0 && !din)
        return stage_fail(s, "a stage after the first needs din");
    a->forwarded = 0;

    const floatX *W = s->wX;
    float *G = s->grads;
    floatX *dres = s->dres;
    const floatX *x_out = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0;
    if (is_last) {
        OK(cross_entropy_bwd(s, a, loss_scale / (float)BT));
        /* the head is column-parallel over the vocabulary */
        OK(column_parallel_bwd(s, s->dbuf, G + s->head_off, NULL, a->logits, a->lnf,
                               W + s->head_off, C, s->Vl, "the head's input gradient"));
        CK(cudaMemsetAsync(dres, 0, BTC * sizeof(floatX), st));
        OK(layernorm_bwd(s, dres, s->lnfw_off, s->lnfb_off, s->dbuf, x_out, a->lnfm, a->lnfr, (int)BT));
    } else {
        CK(cudaMemcpyAsync(dres, dout, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
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
                      W + o->fcprojw, A.fch, (int)BT, F, C));
        OK(column_parallel_bwd(s, s->dbuf, G + o->fcw, G + o->fcb, s->dfch, A.ln2, W + o->fcw, C, F,
                               "the MLP's input gradient"));
        OK(layernorm_bwd(s, dres, o->ln2w, o->ln2b, s->dbuf, A.res2, A.ln2m, A.ln2r, (int)BT));
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))), likewise */
        OK(linear_bwd(&s->x, s->partial, s->dbuf, G + o->attprojw, G + o->attprojb, dres, A.atty,
                      W + o->attprojw, NULL, (int)BT, Cl, C));
        OK(attention_bwd(s, s->dqkv, s->dbuf, A.att, A.qkv));
        OK(column_parallel_bwd(s, s->dbuf, G + o->qkvw, G + o->qkvb, s->dqkv, A.ln1, W + o->qkvw, C,
                               3 * Cl, "the attention's input gradient"));
        OK(layernorm_bwd(s, dres, o->ln1w, o->ln1b, s->dbuf, x, A.ln1m, A.ln1r, (int)BT));
        block_done(s, i); /* its gradients are queued: the trainer may reduce them */
    }
    if (s->first == 0) {
        OK(embed_bwd(s, a, dres));
    } else { /* complete for another stream once it waits for an event recorded now */
        CK(cudaMemcpyAsync(din, dres, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }
    return 0;
}

/* ---------------------------------------------------------------- token slices (TeraPipe) */

/* gpt_pass.c's token slices (tensor 1). A slice [t0, t1) works on one block of S = t1 - t0 rows per
 * sequence b: rows b T + t0 .. b T + t1 of the slot's [B][T] activations, and b S .. (b + 1) S of
 * the pass's [B][S] buffers (in_act, out_act, dout, din, and the scratch dres, dbuf, dfch). The
 * per-row layers (LayerNorm, the linear layers, GELU, the loss) run block by block, b ascending
 * (so every parameter gradient adds the blocks in gpt_pass.c's order). Attention runs over the
 * whole [B][T] (attention_fwd / attention_bwd as they are):
 *   forward: the rows [t1, T) of q, k, v are zeroed first; being causal, the rows before t1 read
 *     only the keys and values before t1, which this and the earlier slices left in the slot, so
 *     the slice's rows come out right, the rows before t0 as they were (the same inputs), and the
 *     rows from t1 on (finite, from zeros) are written again by the later slices, the last of
 *     which (t1 = T) leaves the whole att and atty of the micro-batch;
 *   backward: the gradient of the attention's output is zero outside the slice's rows, so the
 *     product gives the slice's queries' gradients and its contributions to the keys' and values'
 *     gradients of rows [0, t1) (zero elsewhere), which add into the slot's fp32 dqkv_acc
 *     (gpt_pass.c's); the qkv layer's backward of the slice's rows then reads them complete, the
 *     later slices having gone first.
 * The first stage embeds the whole micro-batch at its first slice (the token ids are all there
 * then) and collects the embeddings' gradient in the slot's dx0, which goes into wte and wpe at the
 * last slice of the backward (t0 = 0) through the whole micro-batch's kernels. */

int whole_range(const struct gpu_stage *s, int t0, int t1) { return t0 == 0 && t1 == s->T; }

int forward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const int *tokens,
                  const void *in_act, const int *targets, void *out_act, float *loss)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, S = t1 - t0, C = s->c.channels, Vl = s->Vl;
    int Cl = s->Cl, F = s->F, is_last = s->last == s->c.layers;
    size_t BT = (size_t)B * T, X = sizeof(floatX);
    cudaStream_t st = s->x.stream;
    if (t0 == 0) {
        a->forwarded = 0;
        a->has_targets = 0;
        OK(check_ids(s, tokens, targets));
    }
    if (s->first != 0 && !in_act)
        return stage_fail(s, "a stage after the first needs in_act");
    if (!is_last && !out_act)
        return stage_fail(s, "a stage before the last needs out_act");
    if (t0 == 0) {
        OK(upload_ids(s, a, tokens, is_last ? targets : NULL));
        if (s->first == 0) {
            OK(need_params(s, 0));
            OK(embed_fwd(s, a)); /* every position: the same values whichever slice made them */
        }
        a->has_targets = is_last && targets;
    } else if (s->first == 0) {
        OK(need_params(s, 0));
    }
    if (s->first != 0) /* [B][S][C] -> rows [t0, t1) of each sequence */
        CK(cudaMemcpy2DAsync(a->x0 + (size_t)t0 * C, (size_t)T * C * X, in_act, (size_t)S * C * X,
                             (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
        OK(need_params(s, 1 + i));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(layernorm_fwd(s, A.ln1 + R * C, A.ln1m + R, A.ln1r + R, x + R * C, o->ln1w,
                             o->ln1b, S));
            OK(linear_fwd(&s->x, A.qkv + R * 3 * Cl, A.ln1 + R * C, W + o->qkvw, W + o->qkvb, NULL,
                          NULL, S, C, 3 * Cl));
        }
        if (t1 < T) /* the positions no slice has reached yet (an earlier micro-batch's) */
            CK(cudaMemset2DAsync(A.qkv + (size_t)t1 * 3 * Cl, (size_t)T * 3 * Cl * X, 0,
                                 (size_t)(T - t1) * 3 * Cl * X, (size_t)B, st));
        OK(attention_fwd(s, A.atty, A.att, A.qkv));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(linear_fwd(&s->x, A.res2 + R * C, A.atty + R * Cl, W + o->attprojw, W + o->attprojb,
                          x + R * C, NULL, S, Cl, C));
            OK(layernorm_fwd(s, A.ln2 + R * C, A.ln2m + R, A.ln2r + R, A.res2 + R * C, o->ln2w,
                             o->ln2b, S));
            OK(linear_fwd(&s->x, A.fch + R * F, A.ln2 + R * C, W + o->fcw, W + o->fcb, NULL,
                          A.fchg + R * F, S, C, F));
            OK(linear_fwd(&s->x, A.res3 + R * C, A.fchg + R * F, W + o->fcprojw, W + o->fcprojb,
                          A.res2 + R * C, NULL, S, F, C));
        }
        x = A.res3;
    }
    if (!is_last) { /* complete for another stream once it waits for an event recorded now */
        CK(cudaMemcpy2DAsync(out_act, (size_t)S * C * X, x + (size_t)t0 * C, (size_t)T * C * X,
                             (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));
    } else {
        OK(need_params(s, s->nl + 1));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(layernorm_fwd(s, a->lnf + R * C, a->lnfm + R, a->lnfr + R, x + R * C, s->lnfw_off,
                             s->lnfb_off, S));
            OK(linear_fwd(&s->x, a->logits + R * Vl, a->lnf + R * C, W + s->head_off, NULL, NULL,
                          NULL, S, C, Vl));
            if (a->has_targets)
                OK(cross_entropy_rows_fwd(s, a->losses + R, a->logits + R * Vl, a->targets + R, S));
        }
        if (a->has_targets && loss) { /* the slice's share of the micro-batch's mean */
            OK(d2h(s, s->h_losses, a->losses, BT * sizeof(float)));
            double total = 0.0;
            for (int b = 0; b < B; b++)
                for (int t = t0; t < t1; t++)
                    total += s->h_losses[(size_t)b * T + t];
            *loss = (float)(total / (double)BT);
        } else if (a->has_targets) {
            OK(loss_add(s, a, t0, t1));
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
        if (nacc > 0)
            CK(cudaMemsetAsync(a->dqkv_acc, 0, nacc * sizeof(float), st));
    }

    const floatX *W = s->wX;
    float *G = s->grads;
    floatX *dres = s->dres; /* [B][S][C] */
    const floatX *x_out = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0;
    if (is_last) {
        CK(cudaMemsetAsync(dres, 0, (size_t)B * SC * X, st));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            /* the micro-batch's mean: every slice's rows divide by all B*T */
            OK(cross_entropy_rows_bwd(s, a->logits + R * Vl, a->targets + R,
                                      loss_scale / (float)BT, S));
            OK(linear_bwd(&s->x, s->partial, s->dbuf + b * SC, G + s->head_off, NULL,
                          a->logits + R * Vl, a->lnf + R * C, W + s->head_off, NULL, S, C, Vl));
            OK(layernorm_bwd(s, dres + b * SC, s->lnfw_off, s->lnfb_off, s->dbuf + b * SC,
                             x_out + R * C, a->lnfm + R, a->lnfr + R, S));
        }
    } else {
        CK(cudaMemcpyAsync(dres, dout, (size_t)B * SC * X, cudaMemcpyDeviceToDevice, st));
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
                          A.fchg + R * F, W + o->fcprojw, A.fch + R * F, S, F, C));
            OK(linear_bwd(&s->x, s->partial, s->dbuf + b * SC, G + o->fcw, G + o->fcb,
                          s->dfch + b * SF, A.ln2 + R * C, W + o->fcw, NULL, S, C, F));
            OK(layernorm_bwd(s, dr, o->ln2w, o->ln2b, s->dbuf + b * SC, A.res2 + R * C, A.ln2m + R,
                             A.ln2r + R, S));
        }
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))); the output's gradient dy in dbuf as
         * [B][T][Cl], zero outside the slice's rows */
        CK(cudaMemsetAsync(s->dbuf, 0, BTl * X, st));
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(linear_bwd(&s->x, s->partial, s->dbuf + R * Cl, G + o->attprojw, G + o->attprojb,
                          dres + b * SC, A.atty + R * Cl, W + o->attprojw, NULL, S, Cl, C));
        }
        OK(attention_bwd(s, s->dqkv, s->dbuf, A.att, A.qkv));
        accumulate_kernel<<<blocks_for(3 * BTl, 256), 256, 0, st>>>(acc, s->dqkv, 3 * BTl);
        LAUNCHED(st);
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(linear_bwd(&s->x, s->partial, s->dbuf + b * SC, G + o->qkvw, G + o->qkvb,
                          s->dqkv + R * 3 * Cl, A.ln1 + R * C, W + o->qkvw, NULL, S, C, 3 * Cl));
            OK(layernorm_bwd(s, dres + b * SC, o->ln1w, o->ln1b, s->dbuf + b * SC, x + R * C,
                             A.ln1m + R, A.ln1r + R, S));
        }
        if (t0 == 0) /* the micro-batch's last slice: the block's gradients are final */
            block_done(s, i);
    }
    if (s->first == 0) {
        CK(cudaMemcpy2DAsync(a->dx0 + (size_t)t0 * C, (size_t)T * C * X, dres, SC * X, SC * X,
                             (size_t)B, cudaMemcpyDeviceToDevice, st));
        if (t0 == 0) /* every position's gradient is in: the whole micro-batch's kernels */
            OK(embed_bwd(s, a, a->dx0));
    } else { /* complete for another stream once it waits for an event recorded now */
        CK(cudaMemcpyAsync(din, dres, (size_t)B * SC * X, cudaMemcpyDeviceToDevice, st));
    }
    a->bwd_from = t0;
    a->forwarded = t0 != 0;
    return 0;
}

} /* namespace */

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
        OK(forward_whole(s, slot, tokens, in_act, targets, out_act, loss));
        a->fwd_upto = s->T;
        a->bwd_from = s->T;
        return 0;
    }
    if (s->tp > 1)
        return stage_fail(s, "token slices with tensor parallelism are not supported");
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
        OK(backward_whole(s, slot, dout, din, loss_scale));
        a->bwd_from = 0;
        return 0;
    }
    if (s->tp > 1)
        return stage_fail(s, "token slices with tensor parallelism are not supported");
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

