/* The stage (llm.c's train_gpt2.cu, its GPT-2 part): creation and its device memory, the
 * parameter, gradient and moment transfers, the tensor group's sum, and the helpers every layer
 * file uses (errors, copies, the activations of a layer). Forward and backward are in
 * gpt_cuda_pass.cu, the layers in their own files (stage.cuh lists them). See gpt_cuda.h. */
#include "stage.cuh"

namespace GPU_NS {

int fail_msg(char *buf, size_t n, const char *fmt, ...)
{
    if (buf && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int stage_fail(struct gpu_stage *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sums the device fp32 buf[n] across the tensor group (gpt_pass.c's gpt_tp_sum): down to the host
 * staging buffer, the group's sum (gpu_stage_set_tp_sum), back up, on the stream (which this
 * synchronises). `what` names the values for the error. */
int tp_sum_dev(struct gpu_stage *s, float *buf, size_t n, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (s->tp_sum_d) { /* on the device, in the stream's order (gpu_stage_set_tp_sum_dev) */
        if (s->tp_sum_d(s->tp_dctx, buf, n) != 0)
            return stage_fail(s, "tensor parallelism: the group's sum of %s (%zu values) failed",
                              what, n);
        return 0;
    }
    if (!s->tp_sum)
        return stage_fail(s, "tensor parallelism: no group sum set for %s (gpu_stage_set_tp_sum)",
                          what);
    if (n > s->tp_n)
        return stage_fail(s, "tensor parallelism: %zu values of %s exceed the staging buffer's %zu",
                          n, what, s->tp_n);
    CK(cudaMemcpyAsync(s->tp_host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, s->x.stream));
    CK(cudaStreamSynchronize(s->x.stream));
    if (s->tp_sum(s->tp_ctx, s->tp_host, n) != 0)
        return stage_fail(s, "tensor parallelism: the group's sum of %s (%zu values) failed", what, n);
    /* the next sum's download into tp_host is queued behind this upload on the same stream */
    CK(cudaMemcpyAsync(buf, s->tp_host, n * sizeof(float), cudaMemcpyHostToDevice, s->x.stream));
    return 0;
}

/* A micro-batch's token ids (first stage) and targets (last stage, when given) are in the
 * vocabulary. */
int check_ids(struct gpu_stage *s, const int *tokens, const int *targets)
{
    size_t BT = (size_t)s->B * s->T;
    int V = s->c.vocab;
    if (s->first == 0) {
        if (!tokens)
            return stage_fail(s, "the first stage needs tokens");
        for (size_t i = 0; i < BT; i++)
            if (tokens[i] < 0 || tokens[i] >= V)
                return stage_fail(s, "token %d at position %zu is outside the vocabulary [0, %d)",
                                  tokens[i], i, V);
    }
    if (s->last == s->c.layers && targets)
        for (size_t i = 0; i < BT; i++)
            if (targets[i] < 0 || targets[i] >= V)
                return stage_fail(s, "target %d at position %zu is outside the vocabulary [0, %d)",
                                  targets[i], i, V);
    return 0;
}

/* Layer i's saved activations in slot a (stage.cuh) */
struct layer_acts layer_acts_of(const struct gpu_stage *s, const struct gslot *a, int i)
{
    size_t BT = (size_t)s->B * s->T, BTC = BT * s->c.channels, BTl = BT * s->Cl, BTF = BT * s->F;
    size_t attn = (size_t)s->B * s->NHl * s->T * s->T;
    struct layer_acts A;
    A.ln1 = a->ln1 + i * BTC;
    A.qkv = a->qkv + i * 3 * BTl;
    A.att = a->att + i * attn;
    A.atty = a->atty + i * BTl;
    A.res2 = a->res2 + i * BTC;
    A.ln2 = a->ln2 + i * BTC;
    A.fch = a->fch + i * BTF;
    A.fchg = s->recompute ? s->fchg : a->fchg + i * BTF;
    A.res3 = a->res3 + i * BTC;
    A.ln1m = a->ln1m + i * BT;
    A.ln1r = a->ln1r + i * BT;
    A.ln2m = a->ln2m + i * BT;
    A.ln2r = a->ln2r + i * BT;
    return A;
}

int refresh_wx(struct gpu_stage *s, size_t lo, size_t hi)
{
#ifdef HOLMES_GPU_FP32
    (void)s; (void)lo; (void)hi;
    return 0;
#else
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi <= lo)
        return 0;
    return launch_cast(s->x.stream, s->wX + lo, s->params + lo, hi - lo, EB, EN);
#endif
}

int h2d(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->x.stream));
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
}
int d2h(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->x.stream));
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
}

/* Unit u's parameter range: 0 the embeddings (first stage), 1 + i block i, nl + 1 the final
 * LayerNorm and the head (last stage); an empty range for a unit the stage does not hold. */
static void unit_range(const struct gpu_stage *s, int u, size_t *lo, size_t *hi)
{
    size_t C = (size_t)s->c.channels;
    *lo = *hi = 0;
    if (u == 0 && s->first == 0) {
        *lo = s->wte_off;
        *hi = s->wpe_off + (size_t)s->c.max_seq * C;
    } else if (u >= 1 && u <= s->nl) {
        *lo = s->lw[u - 1].ln1w;
        *hi = s->lw[u - 1].fcprojb + C;
    } else if (u == s->nl + 1 && s->last == s->c.layers) {
        *lo = s->lnfw_off;
        *hi = s->nparams;
    }
}

int need_params(struct gpu_stage *s, int u)
{
    size_t lo, hi;
    unit_range(s, u, &lo, &hi);
    if (hi <= lo)
        return 0;
    if (s->fwd_hook && s->fwd_hook(s->fwd_ctx, lo, hi) != 0)
        return stage_fail(s, "forward stopped: parameters [%zu, %zu) are not available", lo, hi);
    if (s->stale[u]) {
        OK(refresh_wx(s, lo, hi));
        s->stale[u] = 0;
    }
    return 0;
}

void block_done(struct gpu_stage *s, int i)
{
    if (s->bwd_hook)
        s->bwd_hook(s->bwd_ctx, s->first + i);
}

/* *p = bytes of device memory unless it is there already; -1 (stage error) when out of memory */
int lazy_alloc(struct gpu_stage *s, void **p, size_t bytes, const char *what)
{
    if (*p)
        return 0;
    void *q = NULL;
    cudaError_t e = cudaMalloc(&q, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed allocation's error is not sticky: clear it */
        return stage_fail(s, "CUDA: allocating %s (%zu bytes) for the sliced backward: %s", what,
                          bytes, cudaGetErrorString(e));
    }
    *p = q;
    return 0;
}

namespace {

void *dalloc(size_t bytes, int *bad)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 16;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        *bad = 1;
        (void)cudaGetLastError(); /* clear the sticky-free error state of a failed allocation */
        return NULL;
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess)
        *bad = 1;
    return p;
}

void find_offsets(struct gpu_stage *s)
{
    for (int i = 0; i < s->ntensors; i++) {
        const struct gpt_tensor *t = &s->tensors[i];
        int l;
        char what[48];
        if (strcmp(t->name, "wte") == 0) {
            if (t->offset == 0 && s->first == 0)
                s->wte_off = t->offset;
            s->head_off = t->offset; /* the last wte in the table is the head's */
        } else if (strcmp(t->name, "wpe") == 0) {
            s->wpe_off = t->offset;
        } else if (strcmp(t->name, "ln_f.weight") == 0) {
            s->lnfw_off = t->offset;
        } else if (strcmp(t->name, "ln_f.bias") == 0) {
            s->lnfb_off = t->offset;
        } else if (sscanf(t->name, "h%d.%47s", &l, what) == 2 && l >= s->first && l < s->last) {
            struct layer_w *o = &s->lw[l - s->first];
            size_t off = t->offset;
            if (!strcmp(what, "ln_1.weight")) o->ln1w = off;
            else if (!strcmp(what, "ln_1.bias")) o->ln1b = off;
            else if (!strcmp(what, "attn.qkv.weight")) o->qkvw = off;
            else if (!strcmp(what, "attn.qkv.bias")) o->qkvb = off;
            else if (!strcmp(what, "attn.proj.weight")) o->attprojw = off;
            else if (!strcmp(what, "attn.proj.bias")) o->attprojb = off;
            else if (!strcmp(what, "ln_2.weight")) o->ln2w = off;
            else if (!strcmp(what, "ln_2.bias")) o->ln2b = off;
            else if (!strcmp(what, "mlp.fc.weight")) o->fcw = off;
            else if (!strcmp(what, "mlp.fc.bias")) o->fcb = off;
            else if (!strcmp(what, "mlp.proj.weight")) o->fcprojw = off;
            else if (!strcmp(what, "mlp.proj.bias")) o->fcprojb = off;
        }
    }
}

void slot_free(struct gslot *a)
{
    void *ptrs[] = {a->tokens, a->targets, a->utok, a->ustart, a->upos, a->x0, a->ln1, a->qkv,
                    a->att, a->atty, a->res2, a->ln2, a->fch, a->fchg, a->res3, a->lnf,
                    a->logits, a->ln1m, a->ln1r, a->ln2m, a->ln2r, a->lnfm, a->lnfr, a->losses,
                    a->ce_max, a->ce_sum, a->dqkv_acc, a->dx0};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
    if (a->h_pin)
        cudaFreeHost(a->h_pin);
    if (a->up_ev)
        cudaEventDestroy(a->up_ev);
}

int slot_alloc(struct gpu_stage *s, struct gslot *a)
{
    size_t B = (size_t)s->B, T = (size_t)s->T, C = (size_t)s->c.channels, NH = (size_t)s->NHl;
    size_t BT = B * T, BTC = BT * C, nl = (size_t)s->nl, X = sizeof(floatX);
    size_t BTl = BT * (size_t)s->Cl, BTF = BT * (size_t)s->F; /* this rank's heads, MLP width */
    int bad = 0, last = s->last == s->c.layers;
    a->tokens = (int *)dalloc(BT * sizeof(int), &bad);
    a->targets = (int *)dalloc(BT * sizeof(int), &bad);
    a->utok = (int *)dalloc(BT * sizeof(int), &bad);
    a->ustart = (int *)dalloc((BT + 1) * sizeof(int), &bad);
    a->upos = (int *)dalloc(BT * sizeof(int), &bad);
    /* tokens, targets and the token groups (encoder.cu), pinned: they go up asynchronously */
    if (cudaMallocHost((void **)&a->h_pin, (2 * BT + (size_t)s->ncount + 1 + 4 * BT + 1) *
                                               sizeof(int)) != cudaSuccess ||
        cudaEventCreateWithFlags(&a->up_ev, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        bad = 1;
    }
    a->x0 = (floatX *)dalloc(BTC * X, &bad);
    a->ln1 = (floatX *)dalloc(nl * BTC * X, &bad);
    a->qkv = (floatX *)dalloc(nl * 3 * BTl * X, &bad);
    a->att = (floatX *)dalloc(nl * B * NH * T * T * X, &bad);
    a->atty = (floatX *)dalloc(nl * BTl * X, &bad);
    a->res2 = (floatX *)dalloc(nl * BTC * X, &bad);
    a->ln2 = (floatX *)dalloc(nl * BTC * X, &bad);
    a->fch = (floatX *)dalloc(nl * BTF * X, &bad);
    if (!s->recompute)
        a->fchg = (floatX *)dalloc(nl * BTF * X, &bad);
    a->res3 = (floatX *)dalloc(nl * BTC * X, &bad);
    a->ln1m = (float *)dalloc(nl * BT * sizeof(float), &bad);
    a->ln1r = (float *)dalloc(nl * BT * sizeof(float), &bad);
    a->ln2m = (float *)dalloc(nl * BT * sizeof(float), &bad);
    a->ln2r = (float *)dalloc(nl * BT * sizeof(float), &bad);
    if (last) {
        a->lnf = (floatX *)dalloc(BTC * X, &bad);
        a->logits = (floatX *)dalloc(BT * (size_t)s->Vl * X, &bad);
        a->lnfm = (float *)dalloc(BT * sizeof(float), &bad);
        a->lnfr = (float *)dalloc(BT * sizeof(float), &bad);
        a->losses = (float *)dalloc(BT * sizeof(float), &bad);
        if (s->tp > 1) {
            a->ce_max = (float *)dalloc(BT * sizeof(float), &bad);
            a->ce_sum = (float *)dalloc(BT * sizeof(float), &bad);
        }
    }
    return bad ? -1 : 0;
}

/* The stage's stream and its cuBLASLt and cuBLAS handles. 0, or -1 (message in EB). */
int create_handles(struct gpu_stage *s, char *EB, size_t EN)
{
    cudaError_t ce = cudaStreamCreateWithFlags(&s->x.stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        fail_msg(EB, EN, "CUDA: cannot create a stream (is there a GPU?): %s", cudaGetErrorString(ce));
        return -1;
    }
    cublasStatus_t st = cublasLtCreate(&s->x.lt);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasCreate(&s->x.blas);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetStream(s->x.blas, s->x.stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fail_msg(EB, EN, "cuBLAS: cannot create a handle: %s", cublasGetStatusString(st));
        return -1;
    }
    return 0;
}

/* The stage's device memory: parameters, gradients, moments, the tensor table, the shared
 * scratch and the activation slots. 0, or -1 (message in EB, with the memory left). */
int alloc_device(struct gpu_stage *s, char *EB, size_t EN)
{
    const struct gpt_config c = s->c;
    int B = s->B, T = s->T, slots = s->nslots, first = s->first, last = s->last;
    size_t BT = (size_t)B * T, BTC = BT * c.channels, X = sizeof(floatX);
    int bad = 0;
    size_t n = s->nparams, nh = (size_t)s->NHl, maxcols = 4 * (size_t)c.channels;
    size_t BTl = BT * (size_t)s->Cl, BTF = BT * (size_t)s->F; /* this rank's heads, MLP width */
    s->x.ws = dalloc(LT_WORKSPACE, &bad);
    s->params = (float *)dalloc(n * sizeof(float), &bad);
    s->grads = (float *)dalloc(n * sizeof(float), &bad);
    if (!s->no_moments) {
        s->m = (float *)dalloc(n * sizeof(float), &bad);
        s->v = (float *)dalloc(n * sizeof(float), &bad);
    }
    s->loss_acc = (double *)dalloc(sizeof(double), &bad);
#ifdef HOLMES_GPU_FP32
    s->wX = s->params;
#else
    s->wX = (floatX *)dalloc(n * X, &bad);
#endif
    s->seg_end = (size_t *)dalloc((size_t)s->ntensors * sizeof(size_t), &bad);
    s->seg_decay = (int *)dalloc((size_t)s->ntensors * sizeof(int), &bad);
    s->dres = (floatX *)dalloc(BTC * X, &bad);
    s->dbuf = (floatX *)dalloc(BTC * X, &bad);
    s->dfch = (floatX *)dalloc(BTF * X, &bad);
    s->dqkv = (floatX *)dalloc(3 * BTl * X, &bad);
    s->q = (floatX *)dalloc(BTl * X, &bad);
    s->k = (floatX *)dalloc(BTl * X, &bad);
    s->vv = (floatX *)dalloc(BTl * X, &bad);
    s->y = (floatX *)dalloc(BTl * X, &bad);
    s->dq = (floatX *)dalloc(BTl * X, &bad);
    s->dk = (floatX *)dalloc(BTl * X, &bad);
    s->dv = (floatX *)dalloc(BTl * X, &bad);
    s->datt = (floatX *)dalloc((size_t)B * nh * T * T * X, &bad);
    if (s->recompute)
        s->fchg = (floatX *)dalloc(BTF * X, &bad);
    if (s->tp > 1) { /* the largest sum: an activation [BT][C], or the loss's exchange */
        size_t ce = BT * (2 * (size_t)s->tp + 1);
        s->tp_n = BTC > ce ? BTC : ce;
        s->tp_dev = (float *)dalloc(s->tp_n * sizeof(float), &bad);
        if (cudaMallocHost((void **)&s->tp_host, s->tp_n * sizeof(float)) != cudaSuccess) {
            s->tp_host = NULL;
            (void)cudaGetLastError();
            bad = 1;
        }
    }
    s->partial = (float *)dalloc(((BT + COLSUM_ROWS - 1) / COLSUM_ROWS) * 2 * maxcols * sizeof(float), &bad);
    s->sq_partial = (double *)dalloc(SQ_BLOCKS * sizeof(double), &bad);
    for (int i = 0; i < slots && !bad; i++)
        if (slot_alloc(s, &s->slots[i]) < 0)
            bad = 1;
    if (bad) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        /* what the stage asks for: parameters, gradients, moments, the weight copy, and a
         * slot's activations (the largest parts; scratch and workspace aside) */
        size_t per_slot = BT * (size_t)s->nl * (6 * (size_t)c.channels + 3 * (size_t)s->Cl +
                                                 2 * (size_t)s->F) * X +
                          (size_t)s->nl * B * nh * T * T * X;
        size_t asked = n * (2 + (s->no_moments ? 0 : 2)) * sizeof(float) + n * X * (X != 4) +
                       (size_t)slots * per_slot;
        fail_msg(EB, EN, "out of GPU memory: stage of layers [%d, %d) (B=%d, T=%d, %d slots, %zu "
                 "parameters) asks about %.2f GiB; %.2f of %.2f GiB free", first, last, B, T,
                 slots, n, asked / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0);
        return -1;
    }
    return 0;
}

} /* namespace */

} /* namespace GPU_NS */

using namespace GPU_NS;

void gpu_stage_free(struct gpu_stage *s)
{
    if (!s)
        return;
    if (s->slots)
        for (int i = 0; i < s->nslots; i++)
            slot_free(&s->slots[i]);
    free(s->slots);
    void *ptrs[] = {s->params, s->grads, s->m, s->v, s->seg_end, s->seg_decay, s->dres, s->dbuf,
                    s->dfch, s->dqkv, s->q, s->k, s->vv, s->y, s->dq, s->dk, s->dv, s->datt,
                    s->partial, s->sq_partial, s->x.ws, s->fchg, s->tp_dev, s->loss_acc,
                    s->sq_parts};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
    if (s->tp_host)
        cudaFreeHost(s->tp_host);
#ifndef HOLMES_GPU_FP32
    if (s->wX)
        cudaFree(s->wX);
#endif
    if (s->x.lt)
        cublasLtDestroy(s->x.lt);
    if (s->x.blas)
        cublasDestroy(s->x.blas);
    if (s->x.stream)
        cudaStreamDestroy(s->x.stream);
    gpt_stage_free(s->host);
    free(s->lw);
    free(s->stale);
    free(s->h_losses);
    free(s->h_csr);
    free(s);
}

int gpu_stage_create(struct gpu_stage **out, const struct gpt_config *cfg, int first, int last,
                     int B, int T, int slots, int flags, herr *e)
{
    return gpu_stage_create_tp(out, cfg, first, last, B, T, slots, flags, 1, 0, e);
}

int gpu_stage_create_tp(struct gpu_stage **out, const struct gpt_config *cfg, int first, int last,
                        int B, int T, int slots, int flags, int tp, int tp_rank, herr *e)
{
    char *EB = e ? e->msg : NULL;
    size_t EN = e ? sizeof e->msg : 0;
    struct gpt_config c = *cfg;
    if (gpt_config_check(&c, e) < 0)
        return -1;
    if (B <= 0 || T <= 0 || T > c.max_seq)
        return herr_set(e, "batch %d and sequence length %d must be positive, and T at most max_seq %d",
                        B, T, c.max_seq);
    if (slots <= 0 || slots > 1024)
        return herr_set(e, "activation slots must be in [1, 1024] (got %d)", slots);
    if (flags & ~(GPU_RECOMPUTE_GELU | GPU_NO_MOMENTS))
        return herr_set(e, "unknown GPU stage flags 0x%x", (unsigned)flags);
    struct gpu_stage *s = (struct gpu_stage *)calloc(1, sizeof *s);
    if (!s)
        return herr_set(e, "out of memory allocating the GPU stage");
    /* the host twin (B = T = 1: no activations to speak of) gives the layout (this tensor rank's)
     * and checks the layer range and the tensor group */
    if (gpt_stage_create_tp(&s->host, &c, first, last, 1, 1, 1, tp, tp_rank, e) < 0) {
        free(s);
        return -1;
    }
    s->c = c;
    s->first = first;
    s->last = last;
    s->nl = last - first;
    s->B = B;
    s->T = T;
    s->nslots = slots;
    s->recompute = (flags & GPU_RECOMPUTE_GELU) != 0;
    s->no_moments = (flags & GPU_NO_MOMENTS) != 0;
    s->tp = tp;
    s->tpr = tp_rank;
    s->Cl = c.channels / tp;
    s->NHl = c.heads / tp;
    s->F = 4 * c.channels / tp;
    s->Vl = c.padded_vocab / tp;
    s->ncount = tp > 1 && s->Vl + 1 > c.vocab ? s->Vl + 1 : c.vocab;
    s->nparams = gpt_stage_num_params(s->host);
    s->ntensors = gpt_stage_tensors(s->host, &s->tensors);
    s->lw = (layer_w *)calloc((size_t)(s->nl > 0 ? s->nl : 1), sizeof *s->lw);
    s->slots = (gslot *)calloc((size_t)slots, sizeof *s->slots);
    size_t BT = (size_t)B * T;
    s->h_losses = (float *)malloc(BT * sizeof(float));
    s->h_csr = (int *)malloc(((size_t)s->ncount + 1 + 4 * BT + 1) * sizeof(int));
    s->stale = (unsigned char *)calloc((size_t)s->nl + 2, 1);
    if (!s->lw || !s->slots || !s->h_losses || !s->h_csr || !s->stale) {
        gpu_stage_free(s);
        return herr_set(e, "out of memory allocating the GPU stage");
    }
    find_offsets(s);
    s->x.eb = s->err;
    s->x.en = sizeof s->err;
    int rc = -1;
    if (create_handles(s, EB, EN) < 0 || alloc_device(s, EB, EN) < 0 ||
        adamw_table_upload(s, EB, EN) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    gpu_stage_free(s);
    return rc;
}

/* ---------------------------------------------------------------- accessors, transfers */

void gpu_stage_set_tp_sum(struct gpu_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                          void *ctx)
{
    s->tp_sum = fn;
    s->tp_ctx = ctx;
}

const struct gpt_config *gpu_stage_config(const struct gpu_stage *s) { return &s->c; }
size_t gpu_stage_num_params(const struct gpu_stage *s) { return s->nparams; }
int gpu_stage_tensors(const struct gpu_stage *s, const struct gpt_tensor **out)
{
    *out = s->tensors;
    return s->ntensors;
}
int gpu_stage_wte(const struct gpu_stage *s, size_t *offset, size_t *count)
{
    return gpt_stage_wte(s->host, offset, count);
}
void *gpu_stage_stream(struct gpu_stage *s) { return (void *)s->x.stream; }
const char *gpu_stage_error(const struct gpu_stage *s) { return s->err; }
float *gpu_stage_params_dev(struct gpu_stage *s) { return s->params; }
float *gpu_stage_grads_dev(struct gpu_stage *s) { return s->grads; }

int gpu_stage_sync(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
}

double gpu_stage_flops(const struct gpu_stage *s)
{
    double BT = (double)s->B * s->T, C = s->c.channels, T = s->T, Cl = s->Cl;
    double fwd = s->nl * (2.0 * BT * 12.0 * C * Cl + 2.0 * 2.0 * s->B * (T * (T + 1) / 2) * Cl);
    if (s->last == s->c.layers)
        fwd += 2.0 * BT * C * s->Vl;
    return 3.0 * fwd;
}

int gpu_stage_init_params(struct gpu_stage *s, uint64_t seed)
{
    gpt_stage_init_params(s->host, seed);
    return gpu_stage_set_params(s, gpt_stage_params(s->host));
}
int gpu_stage_set_params(struct gpu_stage *s, const float *host)
{
    OK(h2d(s, s->params, host, s->nparams * sizeof(float)));
    OK(refresh_wx(s, 0, s->nparams));
    memset(s->stale, 0, (size_t)s->nl + 2);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
}
int gpu_stage_get_params(struct gpu_stage *s, float *host)
{
    return d2h(s, host, s->params, s->nparams * sizeof(float));
}
int gpu_stage_get_grads(struct gpu_stage *s, float *host)
{
    return d2h(s, host, s->grads, s->nparams * sizeof(float));
}
int gpu_stage_set_grads(struct gpu_stage *s, const float *host)
{
    return h2d(s, s->grads, host, s->nparams * sizeof(float));
}
int gpu_stage_set_moments(struct gpu_stage *s, const float *m, const float *v)
{
    if (s->no_moments)
        return stage_fail(s, "this stage keeps no AdamW moments (GPU_NO_MOMENTS)");
    OK(h2d(s, s->m, m, s->nparams * sizeof(float)));
    return h2d(s, s->v, v, s->nparams * sizeof(float));
}
int gpu_stage_get_moments(struct gpu_stage *s, float *m, float *v)
{
    if (s->no_moments)
        return stage_fail(s, "this stage keeps no AdamW moments (GPU_NO_MOMENTS)");
    OK(d2h(s, m, s->m, s->nparams * sizeof(float)));
    return d2h(s, v, s->v, s->nparams * sizeof(float));
}
int gpu_stage_zero_grads(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaMemsetAsync(s->grads, 0, s->nparams * sizeof(float), s->x.stream));
    return 0;
}


/* ---------------------------------------------------------------- the device-resident trainer */

void gpu_stage_set_forward_hook(struct gpu_stage *s, int (*fn)(void *ctx, size_t lo, size_t hi),
                                void *ctx)
{
    s->fwd_hook = fn;
    s->fwd_ctx = ctx;
}

void gpu_stage_set_backward_hook(struct gpu_stage *s, void (*fn)(void *ctx, int layer), void *ctx)
{
    s->bwd_hook = fn;
    s->bwd_ctx = ctx;
}

void gpu_stage_set_tp_sum_dev(struct gpu_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                              void *ctx)
{
    s->tp_sum_d = fn;
    s->tp_dctx = ctx;
}

void gpu_stage_params_changed(struct gpu_stage *s, size_t lo, size_t hi)
{
    for (int u = 0; u <= s->nl + 1; u++) {
        size_t a, b;
        unit_range(s, u, &a, &b);
        if (a < b && lo < b && hi > a)
            s->stale[u] = 1;
    }
}

int gpu_stage_loss_take(struct gpu_stage *s, float *sum)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    double h = 0.0;
    OK(d2h(s, &h, s->loss_acc, sizeof h));
    CK(cudaMemsetAsync(s->loss_acc, 0, sizeof(double), s->x.stream));
    *sum = (float)h;
    return 0;
}
