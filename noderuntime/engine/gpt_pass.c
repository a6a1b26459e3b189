/* Forward and backward of one pipeline stage (gpt.h), for a whole micro-batch or for one token
 * slice of it (TeraPipe).
 *
 * A pass works on row blocks of the slot's [B][T] activations: the whole micro-batch is one
 * block of B*T rows (the matrix products see all of them at once); a slice [t0, t1) is one block
 * per sequence, positions t0..t1-1 of it. Every activation of a position stays in the slot at
 * its place, so a slice's attention reads the keys and values the earlier slices of the same
 * sequence left there, and a slice's backward (slices in reverse) adds the gradients of those
 * keys and values into a per-block accumulator that the earlier slices' backward then reads.
 * The blocks of one slice go through the layers together (layer by layer), so the forward and
 * backward hooks see each block of layers once. */
#include "gpt_impl.h"

#include <math.h>
#include <string.h>

#include "gpt_layers.h"

/* Positions [t0, t1) of sequences [b0, b0 + nb): rows r0 .. r0 + n of the slot's [B][T] arrays,
 * and k0 .. k0 + n of the pass's [B][t1 - t0] buffers (in_act, out_act, dout, din). */
struct rows {
    int b0, nb, t0, t1;
    size_t r0, n, k0;
};

static int whole(const struct gpt_stage *s, int t0, int t1) { return t0 == 0 && t1 == s->T; }
static int nblocks(const struct gpt_stage *s, int t0, int t1) { return whole(s, t0, t1) ? 1 : s->B; }

static struct rows block(const struct gpt_stage *s, int t0, int t1, int k)
{
    if (whole(s, t0, t1))
        return (struct rows){0, s->B, 0, s->T, 0, (size_t)s->B * s->T, 0};
    size_t t = (size_t)(t1 - t0);
    return (struct rows){k, 1, t0, t1, (size_t)k * s->T + (size_t)t0, t, (size_t)k * t};
}

/* ---------------------------------------------------------------- forward */

/* x0 = wte[token] + wpe[position]; with tensor parallelism each rank looks up the tokens of its
 * vocabulary rows (0 for the others) and the group sums them before wpe is added. */
static int embed_forward(struct gpt_stage *s, struct slot_acts *a, const struct rows *r)
{
    int C = s->c.channels, T = s->T, v0 = s->tpr * s->Vl, Vl = s->Vl;
    const float *wte = s->params + s->wte_off, *wpe = s->params + s->wpe_off;
    float *x0 = a->x0 + r->r0 * C;
    const int *tokens = a->tokens + r->r0;
#pragma omp parallel for
    for (size_t i = 0; i < r->n; i++) {
        int v = tokens[i] - v0;
        float *x = x0 + i * C;
        if (v >= 0 && v < Vl)
            memcpy(x, wte + (size_t)v * C, (size_t)C * sizeof(float));
        else
            memset(x, 0, (size_t)C * sizeof(float));
    }
    if (gpt_tp_sum(s, x0, r->n * C) != 0)
        return -1;
#pragma omp parallel for
    for (size_t i = 0; i < r->n; i++) {
        const float *pe = wpe + ((r->r0 + i) % T) * C;
        float *x = x0 + i * C;
        for (int k = 0; k < C; k++)
            x[k] += pe[k];
    }
    return 0;
}

/* out[n, C] = in[n, IC] @ w^T (+ bias), summed across the tensor group (a row-parallel layer:
 * each rank holds IC of the inputs), + res. */
static int row_parallel_forward(struct gpt_stage *s, float *out, const float *in, const float *w,
                                const float *bias, int IC, const float *res, size_t n)
{
    int C = s->c.channels;
    size_t nC = n * C;
    gpt_linear_forward(out, in, w, s->tp == 1 ? bias : NULL, (int)n, IC, C);
    if (gpt_tp_sum(s, out, nC) != 0)
        return -1;
    if (s->tp > 1) {
#pragma omp parallel for
        for (size_t r = 0; r < n; r++)
            for (int k = 0; k < C; k++)
                out[r * C + k] += bias[k];
    }
#pragma omp parallel for simd
    for (size_t k = 0; k < nC; k++)
        out[k] += res[k];
    return 0;
}

/* Block i of the stage over the rows r (its parameters already gathered). */
static int block_forward(struct gpt_stage *s, struct slot_acts *a, int i, const struct rows *r)
{
    int B = s->B, T = s->T, C = s->c.channels, Cl = s->Cl, NHl = s->NHl, F = s->F;
    size_t BT = (size_t)B * T, BTl = BT * Cl, R = r->r0, n = r->n;
    const struct layer_off *o = &s->lo[i];
    const float *P = s->params;
    /* a forward-only stage's blocks share one set (strides 0): res3 is then the block's input
     * x too, written after the last read of x (the residual into res2) */
    const float *x = (i == 0 ? a->x0 : a->res3 + (size_t)(i - 1) * a->sC) + R * C;
    float *ln1 = a->ln1 + i * a->sC + R * C, *ln1m = a->ln1_mean + i * a->sT + R;
    float *ln1r = a->ln1_rstd + i * a->sT + R;
    float *qkv_l = a->qkv + i * 3 * BTl, *att_l = a->att + (size_t)i * a->sA;
    float *atty_l = a->atty + i * a->sl;
    float *res2 = a->res2 + i * a->sC + R * C, *ln2 = a->ln2 + i * a->sC + R * C;
    float *ln2m = a->ln2_mean + i * a->sT + R, *ln2r = a->ln2_rstd + i * a->sT + R;
    float *fch = a->fch + i * a->sF + R * F, *fchg = a->fch_gelu + i * a->sF + R * F;
    float *res3 = a->res3 + i * a->sC + R * C;
    size_t seq = (size_t)r->b0 * T; /* the first sequence's first row */
    gpt_layernorm_forward(ln1, ln1m, ln1r, x, P + o->ln1w, P + o->ln1b, (int)n, C);
    gpt_linear_forward(qkv_l + R * 3 * Cl, ln1, P + o->qkvw, P + o->qkvb, (int)n, C, 3 * Cl);
    gpt_attention_forward(atty_l + seq * Cl, att_l + (size_t)r->b0 * NHl * T * T,
                          qkv_l + seq * 3 * Cl, r->nb, T, Cl, NHl, r->t0, r->t1);
    if (row_parallel_forward(s, res2, atty_l + R * Cl, P + o->attprojw, P + o->attprojb, Cl, x,
                             n) != 0)
        return -1;
    gpt_layernorm_forward(ln2, ln2m, ln2r, res2, P + o->ln2w, P + o->ln2b, (int)n, C);
    gpt_linear_forward(fch, ln2, P + o->fcw, P + o->fcb, (int)n, C, F);
    gpt_gelu_forward(fchg, fch, n * F);
    return row_parallel_forward(s, res3, fchg, P + o->fcprojw, P + o->fcprojb, F, res2, n);
}

/* The sum over rows r of the cross-entropy of the logits (into *total). With tensor parallelism
 * each rank holds Vl of the vocabulary: the group sums every rank's row max and sum of
 * exponentials (each rank writing its own slot of ce_buf) and the target's logit (held by one
 * rank), and each row's global max and sum are kept for backward. */
static int cross_entropy(struct gpt_stage *s, struct slot_acts *a, const struct rows *rw,
                         double *total)
{
    size_t N = rw->n, R = rw->r0;
    int Vl = s->Vl, v0 = s->tpr * Vl, tp = s->tp;
    int n = s->c.vocab - v0 < Vl ? s->c.vocab - v0 : Vl; /* real vocabulary rows held */
    if (n < 0)
        n = 0;
    float *buf = s->ce_buf; /* [tp][N] max, [tp][N] sum, [N] target logit */
    memset(buf, 0, N * (2 * (size_t)tp + 1) * sizeof(float));
#pragma omp parallel for
    for (size_t r = 0; r < N; r++) {
        const float *lg = a->logits + (R + r) * Vl;
        float mx = n > 0 ? row_max(lg, n) : -1e30f;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < n; v++)
            sum += exp_neg(lg[v] - mx);
        buf[(size_t)s->tpr * N + r] = mx;
        buf[((size_t)tp + s->tpr) * N + r] = sum;
        int t = a->targets[R + r] - v0;
        buf[2 * (size_t)tp * N + r] = t >= 0 && t < n ? lg[t] : 0.0f;
    }
    if (gpt_tp_sum(s, buf, N * (2 * (size_t)tp + 1)) != 0)
        return -1;
    double sum_loss = 0.0;
#pragma omp parallel for reduction(+ : sum_loss)
    for (size_t r = 0; r < N; r++) {
        float mx = buf[r];
        for (int k = 1; k < tp; k++)
            mx = buf[(size_t)k * N + r] > mx ? buf[(size_t)k * N + r] : mx;
        float sum = tp == 1 ? buf[N + r] : 0.0f;
        for (int k = 0; tp > 1 && k < tp; k++)
            sum += buf[((size_t)tp + k) * N + r] * expf(buf[(size_t)k * N + r] - mx);
        a->ce_max[R + r] = mx;
        a->ce_sum[R + r] = sum;
        sum_loss += (double)logf(sum) + mx - buf[2 * (size_t)tp * N + r];
    }
    *total += sum_loss;
    return 0;
}

/* The final LayerNorm, the head and (with targets) the loss over rows r. */
static int head_forward(struct gpt_stage *s, struct slot_acts *a, const struct rows *r,
                        double *total)
{
    int C = s->c.channels;
    size_t R = r->r0;
    const float *P = s->params;
    const float *x = (s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * a->sC : a->x0) + R * C;
    gpt_layernorm_forward(a->lnf + R * C, a->lnf_mean + R, a->lnf_rstd + R, x, P + s->lnfw_off,
                          P + s->lnfb_off, (int)r->n, C);
    gpt_linear_forward(a->logits + R * s->Vl, a->lnf + R * C, P + s->head_off, NULL, (int)r->n, C,
                       s->Vl);
    return a->has_targets ? cross_entropy(s, a, r, total) : 0;
}

/* A pass's checks and its bookkeeping of where the micro-batch stands; the tokens and targets
 * of the micro-batch are taken at its first slice. */
static int forward_begin(struct gpt_stage *s, int slot, int t0, int t1, const int *tokens,
                         const float *in_act, const int *targets, const float *out_act)
{
    if (slot < 0 || slot >= s->nslots)
        return gpt_stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    if (t0 < 0 || t1 > s->T || t0 >= t1)
        return gpt_stage_fail(s, "token slice [%d, %d) is not inside [0, %d) or is empty", t0, t1,
                              s->T);
    struct slot_acts *a = &s->slots[slot];
    if (t0 > 0 && a->fwd_upto != t0)
        return gpt_stage_fail(s, "forward of tokens [%d, %d) of slot %d, whose forward stands at "
                              "%d: slices go in order", t0, t1, slot, a->fwd_upto);
    size_t BT = (size_t)s->B * s->T;
    int V = s->c.vocab, is_last = s->last == s->c.layers;
    if (t0 == 0) {
        a->forwarded = 0;
        a->fwd_upto = 0;
        if (s->first == 0) {
            if (!tokens)
                return gpt_stage_fail(s, "the first stage needs tokens");
            for (size_t i = 0; i < BT; i++)
                if (tokens[i] < 0 || tokens[i] >= V)
                    return gpt_stage_fail(s, "token %d at position %zu is outside the vocabulary "
                                          "[0, %d)", tokens[i], i, V);
            memcpy(a->tokens, tokens, BT * sizeof(int));
        }
        a->has_targets = is_last && targets;
        if (a->has_targets) {
            for (size_t i = 0; i < BT; i++)
                if (targets[i] < 0 || targets[i] >= V)
                    return gpt_stage_fail(s, "target %d at position %zu is outside the vocabulary "
                                          "[0, %d)", targets[i], i, V);
            memcpy(a->targets, targets, BT * sizeof(int));
        }
    } else if (s->first == 0 && tokens) { /* a later slice's positions as given now (a
                                           * sampler chooses each token after the one before) */
        for (int b = 0; b < s->B; b++)
            for (int t = t0; t < t1; t++) {
                int tok = tokens[(size_t)b * s->T + t];
                if (tok < 0 || tok >= V)
                    return gpt_stage_fail(s, "token %d at position %zu is outside the vocabulary "
                                          "[0, %d)", tok, (size_t)b * s->T + t, V);
                a->tokens[(size_t)b * s->T + t] = tok;
            }
    }
    if (s->first != 0 && !in_act)
        return gpt_stage_fail(s, "a stage after the first needs in_act");
    if (!is_last && !out_act)
        return gpt_stage_fail(s, "a stage before the last needs out_act");
    return 0;
}

int gpt_stage_forward_slice(struct gpt_stage *s, int slot, int t0, int t1, const int *tokens,
                            const float *in_act, const int *targets, float *out_act, float *loss)
{
    if (forward_begin(s, slot, t0, t1, tokens, in_act, targets, out_act) != 0)
        return -1;
    struct slot_acts *a = &s->slots[slot];
    int C = s->c.channels, nb = nblocks(s, t0, t1);
    if (s->first == 0 &&
        gpt_need_params(s, s->wte_off, s->wpe_off + (size_t)s->c.max_seq * C) != 0)
        return -1;
    for (int k = 0; k < nb; k++) {
        struct rows r = block(s, t0, t1, k);
        if (s->first != 0)
            memcpy(a->x0 + r.r0 * C, in_act + r.k0 * C, r.n * C * sizeof(float));
        else if (embed_forward(s, a, &r) != 0)
            return -1;
    }
    for (int i = 0; i < s->nl; i++) {
        const struct layer_off *o = &s->lo[i];
        if (gpt_need_params(s, o->ln1w, o->fcprojb + C) != 0)
            return -1;
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            if (block_forward(s, a, i, &r) != 0)
                return -1;
        }
    }
    if (s->last != s->c.layers) {
        const float *x = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * a->sC : a->x0;
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            memcpy(out_act + r.k0 * C, x + r.r0 * C, r.n * C * sizeof(float));
        }
    } else {
        if (gpt_need_params(s, s->lnfw_off, s->nparams) != 0)
            return -1;
        double total = 0.0;
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            if (head_forward(s, a, &r, &total) != 0)
                return -1;
        }
        if (loss && a->has_targets)
            *loss = (float)(total / ((double)s->B * s->T));
    }
    a->fwd_upto = t1;
    a->bwd_from = s->T;
    a->forwarded = t1 == s->T;
    return 0;
}

int gpt_stage_forward(struct gpt_stage *s, int slot, const int *tokens, const float *in_act,
                      const int *targets, float *out_act, float *loss)
{
    return gpt_stage_forward_slice(s, slot, 0, s->T, tokens, in_act, targets, out_act, loss);
}

/* ---------------------------------------------------------------- backward */

/* dlogits = (softmax - onehot) * sc over rows r, in place over the logits (this rank's
 * vocabulary rows; with tensor parallelism the softmax's max and sum are the forward's, over all
 * rows). */
static void dlogits(struct gpt_stage *s, struct slot_acts *a, const struct rows *rw, float sc)
{
    int Vl = s->Vl, v0 = s->tpr * Vl, V = s->c.vocab;
    int n = V - v0 < Vl ? V - v0 : Vl;
    if (n < 0)
        n = 0;
#pragma omp parallel for
    for (size_t i = 0; i < rw->n; i++) {
        size_t r = rw->r0 + i;
        float *lg = a->logits + r * Vl;
        float mx = s->tp == 1 ? row_max(lg, n) : a->ce_max[r];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < n; v++) {
            float e = exp_neg(lg[v] - mx);
            lg[v] = e;
            sum += e;
        }
        float inv = sc / (s->tp == 1 ? sum : a->ce_sum[r]);
#pragma omp simd
        for (int v = 0; v < n; v++)
            lg[v] *= inv;
        int t = a->targets[r] - v0;
        if (t >= 0 && t < n)
            lg[t] -= sc;
        for (int v = n; v < Vl; v++)
            lg[v] = 0.0f;
    }
}

/* The backward of a column-parallel layer's input: din[n, C] (partial on each rank) summed
 * across the tensor group. */
static int column_parallel_dinput(struct gpt_stage *s, float *din, size_t n)
{
    return gpt_tp_sum(s, din, n * s->c.channels);
}

/* The head's backward over rows r: dres (rows of the pass's buffer) from the loss. */
static int head_backward(struct gpt_stage *s, struct slot_acts *a, const struct rows *r,
                         float *dres, float loss_scale)
{
    int C = s->c.channels;
    size_t BTC = (size_t)s->B * s->T * C, R = r->r0;
    const float *P = s->params;
    float *G = s->grads;
    const float *x_out = (s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0) + R * C;
    /* the micro-batch's mean: every slice's rows divide by all B*T */
    dlogits(s, a, r, loss_scale / (float)((size_t)s->B * s->T));
    gpt_linear_backward(s->dbuf, G + s->head_off, NULL, a->logits + R * s->Vl, a->lnf + R * C,
                        P + s->head_off, (int)r->n, C, s->Vl);
    if (column_parallel_dinput(s, s->dbuf, r->n) != 0)
        return -1;
    memset(dres, 0, r->n * C * sizeof(float));
    gpt_layernorm_backward(dres, G + s->lnfw_off, G + s->lnfb_off, s->dbuf, x_out, P + s->lnfw_off,
                           a->lnf_mean + R, a->lnf_rstd + R, (int)r->n, C);
    return 0;
}

/* Block i's backward over rows r: dres (the rows' residual gradient) goes from its output to its
 * input. dqkv_l: the block's [BT * 3Cl] gradient of q, k and v (zeroed by the caller before the
 * first slice of the micro-batch). */
static int block_backward(struct gpt_stage *s, struct slot_acts *a, int i, const struct rows *r,
                          float *dres, float *dqkv_l)
{
    int B = s->B, T = s->T, C = s->c.channels, Cl = s->Cl, NHl = s->NHl, F = s->F;
    size_t BT = (size_t)B * T, BTC = BT * C, BTl = BT * Cl, BTF = BT * F, R = r->r0, n = r->n;
    const struct layer_off *o = &s->lo[i];
    const float *P = s->params;
    float *G = s->grads;
    const float *x = (i == 0 ? a->x0 : a->res3 + (size_t)(i - 1) * BTC) + R * C;
    float *ln1 = a->ln1 + i * BTC + R * C, *ln1m = a->ln1_mean + i * BT + R;
    float *ln1r = a->ln1_rstd + i * BT + R;
    float *qkv_l = a->qkv + i * 3 * BTl, *att_l = a->att + (size_t)i * B * NHl * T * T;
    float *atty = a->atty + i * BTl + R * Cl, *res2 = a->res2 + i * BTC + R * C;
    float *ln2 = a->ln2 + i * BTC + R * C;
    float *ln2m = a->ln2_mean + i * BT + R, *ln2r = a->ln2_rstd + i * BT + R;
    float *fch = a->fch + i * BTF + R * F, *fchg = a->fch_gelu + i * BTF + R * F;
    size_t seq = (size_t)r->b0 * T;
    /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))); the projection's bias gradient is the same
     * on every rank of a tensor group (replicated). */
    gpt_linear_backward(s->dfch, G + o->fcprojw, G + o->fcprojb, dres, fchg, P + o->fcprojw,
                        (int)n, F, C);
    gpt_gelu_backward(s->dfch, fch, n * F);
    gpt_linear_backward(s->dbuf, G + o->fcw, G + o->fcb, s->dfch, ln2, P + o->fcw, (int)n, C, F);
    if (column_parallel_dinput(s, s->dbuf, n) != 0)
        return -1;
    gpt_layernorm_backward(dres, G + o->ln2w, G + o->ln2b, s->dbuf, res2, P + o->ln2w, ln2m, ln2r,
                           (int)n, C);
    /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
    gpt_linear_backward(s->dbuf, G + o->attprojw, G + o->attprojb, dres, atty, P + o->attprojw,
                        (int)n, Cl, C);
    gpt_attention_backward(dqkv_l + seq * 3 * Cl, s->dbuf, att_l + (size_t)r->b0 * NHl * T * T,
                           qkv_l + seq * 3 * Cl, s->datt_row, r->nb, T, Cl, NHl, r->t0, r->t1);
    gpt_linear_backward(s->dbuf, G + o->qkvw, G + o->qkvb, dqkv_l + R * 3 * Cl, ln1, P + o->qkvw,
                        (int)n, C, 3 * Cl);
    if (column_parallel_dinput(s, s->dbuf, n) != 0)
        return -1;
    gpt_layernorm_backward(dres, G + o->ln1w, G + o->ln1b, s->dbuf, x, P + o->ln1w, ln1m, ln1r,
                           (int)n, C);
    return 0;
}

/* The embeddings' gradients from dres over rows r (serial over positions keeps repeated tokens
 * race-free; vectorised over channels). */
static void embed_backward(struct gpt_stage *s, struct slot_acts *a, const struct rows *r,
                           const float *dres)
{
    int C = s->c.channels, T = s->T, v0 = s->tpr * s->Vl;
    float *dwte = s->grads + s->wte_off, *dwpe = s->grads + s->wpe_off;
    for (size_t i = 0; i < r->n; i++) {
        size_t row = r->r0 + i;
        int v = a->tokens[row] - v0;
        float *dp = dwpe + (row % T) * C;
        const float *d = dres + i * C;
        if (v >= 0 && v < s->Vl) {
            float *dt = dwte + (size_t)v * C;
#pragma omp simd
            for (int k = 0; k < C; k++)
                dt[k] += d[k];
        }
#pragma omp simd
        for (int k = 0; k < C; k++)
            dp[k] += d[k];
    }
}

static int backward_begin(struct gpt_stage *s, int slot, int t0, int t1, const float *dout,
                          const float *din)
{
    if (slot < 0 || slot >= s->nslots)
        return gpt_stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct slot_acts *a = &s->slots[slot];
    if (!a->forwarded)
        return gpt_stage_fail(s, "backward of slot %d, which holds no forward pass", slot);
    if (t0 < 0 || t0 >= t1 || t1 != a->bwd_from)
        return gpt_stage_fail(s, "backward of tokens [%d, %d) of slot %d, whose backward stands at "
                              "%d: slices go in reverse", t0, t1, slot, a->bwd_from);
    int is_last = s->last == s->c.layers;
    if (is_last && !a->has_targets)
        return gpt_stage_fail(s, "backward of slot %d, whose forward had no targets", slot);
    if (!is_last && !dout)
        return gpt_stage_fail(s, "a stage before the last needs dout");
    if (s->first != 0 && !din)
        return gpt_stage_fail(s, "a stage after the first needs din");
    if (!whole(s, t0, t1) && t1 == s->T) { /* a sliced micro-batch's first backward */
        size_t n = (size_t)s->nl * s->B * s->T * 3 * s->Cl;
        if (!a->dqkv_acc && !(a->dqkv_acc = gpt_falloc(n)))
            return gpt_stage_fail(s, "out of memory for the sliced backward (%zu floats)", n);
        memset(a->dqkv_acc, 0, (n ? n : 1) * sizeof(float));
    }
    return 0;
}

int gpt_stage_backward_slice(struct gpt_stage *s, int slot, int t0, int t1, const float *dout,
                             float *din, float loss_scale)
{
    if (s->forward_only)
        return gpt_stage_fail(s, "a forward-only stage has no backward");
    if (backward_begin(s, slot, t0, t1, dout, din) != 0)
        return -1;
    struct slot_acts *a = &s->slots[slot];
    int C = s->c.channels, nb = nblocks(s, t0, t1), sliced = !whole(s, t0, t1);
    size_t rows = (size_t)s->B * (size_t)(t1 - t0), BTl3 = (size_t)s->B * s->T * 3 * s->Cl;
    float *dres = s->dres; /* [B][t1 - t0][C] */
    if (s->last == s->c.layers) {
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            if (head_backward(s, a, &r, dres + r.k0 * C, loss_scale) != 0)
                return -1;
        }
    } else {
        memcpy(dres, dout, rows * C * sizeof(float));
    }
    for (int i = s->nl - 1; i >= 0; i--) {
        float *dqkv_l = sliced ? a->dqkv_acc + (size_t)i * BTl3 : s->dqkv;
        if (!sliced)
            memset(s->dqkv, 0, BTl3 * sizeof(float));
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            if (block_backward(s, a, i, &r, dres + r.k0 * C, dqkv_l) != 0)
                return -1;
        }
        /* a block's gradients are final once the micro-batch's first tokens are through */
        if (s->layer_hook && t0 == 0)
            s->layer_hook(s->layer_hook_ctx, s->first + i);
    }
    if (s->first == 0) {
        for (int k = 0; k < nb; k++) {
            struct rows r = block(s, t0, t1, k);
            embed_backward(s, a, &r, dres + r.k0 * C);
        }
    } else {
        memcpy(din, dres, rows * C * sizeof(float));
    }
    a->bwd_from = t0;
    a->forwarded = t0 != 0;
    if (t0 == 0) /* the logits' buffer now holds their gradient */
        a->fwd_upto = 0;
    return 0;
}

int gpt_stage_backward(struct gpt_stage *s, int slot, const float *dout, float *din,
                       float loss_scale)
{
    return gpt_stage_backward_slice(s, slot, 0, s->T, dout, din, loss_scale);
}
