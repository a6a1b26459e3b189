/* The stage (llm.c's train_gpt2.cu, its GPT-2 part): creation and its device memory, the
 * accessors, and the helpers every layer file uses (errors, the activations of a layer).
 * Transfers, hooks and the loss are in gpt_cuda_host.cu, forward and backward in
 * gpt_cuda_pass.cu and gpt_cuda_slices.cu, the layers in their own files (stage.cuh lists them).
 * See gpt_cuda.h. */
#include "colsum_plan.h"
#include "flash_plan.h"
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

int env_int(const char *name, int lo, int hi, int *out, char *buf, size_t n)
{
    const char *e = getenv(name);
    if (!e)
        return 0;
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (end == e || *end != 0 || v < lo || v > hi)
        return fail_msg(buf, n, "%s '%.40s': must be a whole number from %d to %d", name, e, lo, hi);
    *out = (int)v;
    return 1;
}

int stage_fail(struct gpu_stage *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Layer i's saved activations in slot a (stage.cuh) */
struct layer_acts layer_acts_of(const struct gpu_stage *s, const struct gslot *a, int i)
{
    size_t BT = (size_t)s->B * s->T, BTC = BT * s->c.channels, BTl = BT * s->Cl, BTF = BT * s->F;
    size_t attn = (size_t)s->B * s->NHl * s->T * s->T, rows = (size_t)s->B * s->NHl * s->T;
    struct layer_acts A;
    A.ln1 = a->ln1 + i * BTC;
    A.qkv = a->qkv + i * 3 * BTl;
    A.att = s->flash ? NULL : a->att + i * attn;
    A.lse = s->flash ? a->lse + i * rows : NULL;
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

/* *p = bytes of device memory unless it is there already; -1 (stage error) when out of memory */
int lazy_alloc(struct gpu_stage *s, void **p, size_t bytes, const char *what)
{
    if (*p)
        return 0;
    void *q = NULL;
    cudaError_t e = cudaMalloc(&q, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed allocation's error is not sticky: clear it */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return stage_fail(s, "CUDA: allocating %s (%zu bytes) for stage layers [%d, %d): %s "
                          "(%zu bytes free)", what, bytes, s->first, s->last,
                          cudaGetErrorString(e), fr);
    }
    *p = q;
    return 0;
}

namespace {

/* ---------------------------------------------------------------- device memory */

/* The allocations of a stage, made (or, dry, only counted: gpu_stage_device_bytes) in one place
 * so that the count and the memory agree. */
struct alloc_ctx {
    int dry, bad;
    size_t bytes;
    struct gpu_stage *s; /* activations and scratch are listed in s->scratch (debug poison) */
};

/* bytes of device memory, zeroed; scratch: activations or scratch (gpu_stage_debug_poison) */
void *dalloc(struct alloc_ctx *ac, size_t bytes, int scratch = 1)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 16;
    ac->bytes += (bytes + 255) / 256 * 256; /* cudaMalloc's granularity, at least */
    if (ac->dry || ac->bad)
        return NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        ac->bad = 1;
        (void)cudaGetLastError(); /* a failed allocation's error is not sticky: clear it */
        return NULL;
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess)
        ac->bad = 1;
    struct gpu_stage *s = ac->s;
    if (scratch && s) {
        if (s->nscratch == s->capscratch) {
            int cap = s->capscratch ? 2 * s->capscratch : 64;
            void **np = (void **)realloc(s->scratch, (size_t)cap * sizeof *np);
            size_t *nb = (size_t *)realloc(s->scratch_bytes, (size_t)cap * sizeof *nb);
            if (np)
                s->scratch = np;
            if (nb)
                s->scratch_bytes = nb;
            if (!np || !nb) {
                ac->bad = 1;
                return p;
            }
            s->capscratch = cap;
        }
        s->scratch[s->nscratch] = p;
        s->scratch_bytes[s->nscratch++] = bytes;
    }
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

/* The forward hook's units (gpt_pass.c's ranges): the embeddings, each block, the final
 * LayerNorm and head. */
void find_units(struct gpu_stage *s)
{
    size_t C = (size_t)s->c.channels;
    int nu = s->nl + 2;
    for (int u = 0; u < nu; u++)
        s->unit_lo[u] = s->unit_hi[u] = 0;
    if (s->first == 0) {
        s->unit_lo[0] = s->wte_off;
        s->unit_hi[0] = s->wpe_off + (size_t)s->c.max_seq * C;
    }
    for (int i = 0; i < s->nl; i++) {
        s->unit_lo[1 + i] = s->lw[i].ln1w;
        s->unit_hi[1 + i] = s->lw[i].fcprojb + C;
    }
    if (s->last == s->c.layers) {
        s->unit_lo[nu - 1] = s->lnfw_off;
        s->unit_hi[nu - 1] = s->nparams;
    }
}

void slot_free(struct gslot *a)
{
    void *ptrs[] = {a->tokens, a->targets, a->utok, a->ustart, a->upos, a->x0, a->ln1, a->qkv,
                    a->att, a->atty, a->res2, a->ln2, a->fch, a->fchg, a->res3, a->lnf,
                    a->logits, a->ln1m, a->ln1r, a->ln2m, a->ln2r, a->lnfm, a->lnfr, a->losses,
                    a->lse, a->ce_max, a->ce_sum, a->dqkv_acc, a->dx0};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
    if (a->h_stage)
        cudaFreeHost(a->h_stage);
    if (a->up_done)
        cudaEventDestroy(a->up_done);
}

void slot_alloc(struct gpu_stage *s, struct gslot *a, struct alloc_ctx *ac)
{
    size_t B = (size_t)s->B, T = (size_t)s->T, C = (size_t)s->c.channels, NH = (size_t)s->NHl;
    size_t BT = B * T, BTC = BT * C, nl = (size_t)s->nl, X = sizeof(floatX);
    size_t BTl = BT * (size_t)s->Cl, BTF = BT * (size_t)s->F; /* this rank's heads, MLP width */
    int last = s->last == s->c.layers;
    a->tokens = (int *)dalloc(ac, BT * sizeof(int), 0);
    a->targets = (int *)dalloc(ac, BT * sizeof(int), 0);
    a->utok = (int *)dalloc(ac, BT * sizeof(int), 0);
    a->ustart = (int *)dalloc(ac, (BT + 1) * sizeof(int), 0);
    a->upos = (int *)dalloc(ac, BT * sizeof(int), 0);
    a->x0 = (floatX *)dalloc(ac, BTC * X);
    a->ln1 = (floatX *)dalloc(ac, nl * BTC * X);
    a->qkv = (floatX *)dalloc(ac, nl * 3 * BTl * X);
    if (s->flash)
        a->lse = (float *)dalloc(ac, nl * B * NH * T * sizeof(float));
    else
        a->att = (floatX *)dalloc(ac, nl * B * NH * T * T * X);
    a->atty = (floatX *)dalloc(ac, nl * BTl * X);
    a->res2 = (floatX *)dalloc(ac, nl * BTC * X);
    a->ln2 = (floatX *)dalloc(ac, nl * BTC * X);
    a->fch = (floatX *)dalloc(ac, nl * BTF * X);
    if (!s->recompute)
        a->fchg = (floatX *)dalloc(ac, nl * BTF * X);
    a->res3 = (floatX *)dalloc(ac, nl * BTC * X);
    a->ln1m = (float *)dalloc(ac, nl * BT * sizeof(float));
    a->ln1r = (float *)dalloc(ac, nl * BT * sizeof(float));
    a->ln2m = (float *)dalloc(ac, nl * BT * sizeof(float));
    a->ln2r = (float *)dalloc(ac, nl * BT * sizeof(float));
    if (last) {
        a->lnf = (floatX *)dalloc(ac, BTC * X);
        a->logits = (floatX *)dalloc(ac, BT * (size_t)s->Vl * X);
        a->lnfm = (float *)dalloc(ac, BT * sizeof(float));
        a->lnfr = (float *)dalloc(ac, BT * sizeof(float));
        a->losses = (float *)dalloc(ac, BT * sizeof(float));
        if (s->tp > 1) {
            a->ce_max = (float *)dalloc(ac, BT * sizeof(float));
            a->ce_sum = (float *)dalloc(ac, BT * sizeof(float));
        }
    }
}

/* The stage's device memory: parameters, gradients, moments, the tensor table, the shared
 * scratch and the activation slots (ac->dry: only counted). */
void alloc_device(struct gpu_stage *s, struct alloc_ctx *ac)
{
    const struct gpt_config c = s->c;
    int B = s->B, T = s->T;
    size_t BT = (size_t)B * T, BTC = BT * c.channels, X = sizeof(floatX);
    size_t n = s->nparams, nh = (size_t)s->NHl, maxcols = 4 * (size_t)c.channels;
    size_t BTl = BT * (size_t)s->Cl, BTF = BT * (size_t)s->F; /* this rank's heads, MLP width */
    s->x.ws = dalloc(ac, LT_WORKSPACE, 0);
    if (s->flags & GPU_OVERLAP_WEIGHT_GRADS)
        s->x.ws_side = dalloc(ac, LT_WORKSPACE, 0);
    s->params = (float *)dalloc(ac, n * sizeof(float), 0);
    s->grads = (float *)dalloc(ac, n * sizeof(float), 0);
    if (!(s->flags & GPU_NO_MOMENTS)) {
        s->m = (float *)dalloc(ac, n * sizeof(float), 0);
        s->v = (float *)dalloc(ac, n * sizeof(float), 0);
    }
#ifdef HOLMES_GPU_FP32
    s->wX = s->params;
#else
    s->wX = (floatX *)dalloc(ac, n * X, 0);
#endif
    s->seg_end = (size_t *)dalloc(ac, (size_t)s->ntensors * sizeof(size_t), 0);
    s->seg_decay = (int *)dalloc(ac, (size_t)s->ntensors * sizeof(int), 0);
    s->dres = (floatX *)dalloc(ac, BTC * X);
    s->dbuf = (floatX *)dalloc(ac, BTC * X);
    s->dfch = (floatX *)dalloc(ac, BTF * X);
    s->dqkv = (floatX *)dalloc(ac, 3 * BTl * X);
    if (s->flash) {
        s->dsum = (float *)dalloc(ac, (size_t)B * nh * T * sizeof(float));
        size_t ds = flash_ds_bytes(B, (int)nh, T);
        if (!(s->flags & GPU_FLASH_RECOMPUTE_DQ) && ds > 0)
            s->flash_ds = (floatX *)dalloc(ac, ds);
    } else {
        s->q = (floatX *)dalloc(ac, BTl * X);
        s->k = (floatX *)dalloc(ac, BTl * X);
        s->vv = (floatX *)dalloc(ac, BTl * X);
        s->y = (floatX *)dalloc(ac, BTl * X);
        s->dq = (floatX *)dalloc(ac, BTl * X);
        s->dk = (floatX *)dalloc(ac, BTl * X);
        s->dv = (floatX *)dalloc(ac, BTl * X);
        s->datt = (floatX *)dalloc(ac, (size_t)B * nh * T * T * X);
    }
    if (s->recompute)
        s->fchg = (floatX *)dalloc(ac, BTF * X);
    if (s->tp > 1) { /* the largest sum: an activation [BT][C], or the loss's exchange */
        size_t ce = BT * (2 * (size_t)s->tp + 1);
        s->tp_n = BTC > ce ? BTC : ce;
        s->tp_dev = (float *)dalloc(ac, s->tp_n * sizeof(float));
    }
    /* column sums: [the most chunks any pass's rows make (colsum_plan.h)][2][the widest row] */
    s->partial = (float *)dalloc(ac, (size_t)colsum_max_chunks((int)BT) * 2 * maxcols * sizeof(float));
    s->sq_cap = SQ_BLOCKS + 1; /* one range and the total */
    s->sq_partial = (double *)dalloc(ac, s->sq_cap * sizeof(double), 0);
    s->loss_dev = (double *)dalloc(ac, 2 * sizeof(double), 0);
    for (int i = 0; i < s->nslots; i++)
        slot_alloc(s, &s->slots[i], ac);
}

/* What is not device memory: the stream, handles, events, pinned staging. 0, or -1 (EB). */
int create_host_side(struct gpu_stage *s, char *EB, size_t EN)
{
    cudaError_t ce = cudaStreamCreateWithFlags(&s->x.stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess)
        return fail_msg(EB, EN, "CUDA: cannot create a stream (is there a GPU?): %s",
                        cudaGetErrorString(ce));
    cublasStatus_t st = cublasLtCreate(&s->x.lt);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasCreate(&s->x.blas);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasSetStream(s->x.blas, s->x.stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return fail_msg(EB, EN, "cuBLAS: cannot create a handle: %s", cublasGetStatusString(st));
    if (s->flags & GPU_OVERLAP_WEIGHT_GRADS) {
        CK(cudaStreamCreateWithFlags(&s->x.side, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&s->x.fork, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&s->x.join, cudaEventDisableTiming));
    }
    size_t BT = (size_t)s->B * s->T;
    for (int i = 0; i < s->nslots; i++) {
        struct gslot *a = &s->slots[i];
        CK(cudaEventCreateWithFlags(&a->up_done, cudaEventDisableTiming));
        CK(cudaMallocHost((void **)&a->h_stage, (5 * BT + 1) * sizeof(int)));
    }
    if (s->tp > 1)
        CK(cudaMallocHost((void **)&s->tp_host, s->tp_n * sizeof(float)));
    return 0;
}

/* The shape of a stage, on the host only (no CUDA): the host twin, sizes, the tensor table and
 * the units. 0, or -1 with e set. */
int stage_shape(struct gpu_stage *s, const struct gpt_config *cfg, int first, int last, int B,
                int T, int slots, int flags, int tp, int tp_rank, herr *e)
{
    struct gpt_config c = *cfg;
    if (gpt_config_check(&c, e) < 0)
        return -1;
    if (B <= 0 || T <= 0 || T > c.max_seq)
        return herr_set(e, "batch %d and sequence length %d must be positive, and T at most max_seq %d",
                        B, T, c.max_seq);
    if ((long long)B * T > 2147483647LL) /* the kernels count a micro-batch's rows in an int */
        return herr_set(e, "batch %d x sequence length %d = %lld rows, at most 2147483647", B, T,
                        (long long)B * T);
    if (slots <= 0 || slots > 1024)
        return herr_set(e, "activation slots must be in [1, 1024] (got %d)", slots);
    if (flags & ~GPU_FLAGS_ALL)
        return herr_set(e, "unknown GPU stage flags 0x%x", (unsigned)flags);
    /* the host twin (B = T = 1: no activations to speak of) gives the layout (this tensor rank's)
     * and checks the layer range and the tensor group */
    if (gpt_stage_create_tp(&s->host, &c, first, last, 1, 1, 1, tp, tp_rank, e) < 0)
        return -1;
    s->c = c;
    s->first = first;
    s->last = last;
    s->nl = last - first;
    s->B = B;
    s->T = T;
    s->nslots = slots;
    s->flags = flags;
    s->recompute = (flags & GPU_RECOMPUTE_GELU) != 0;
    s->tp = tp;
    s->tpr = tp_rank;
    s->Cl = c.channels / tp;
    s->NHl = c.heads / tp;
    s->F = 4 * c.channels / tp;
    s->Vl = c.padded_vocab / tp;
#ifdef HOLMES_GPU_FP32
    s->flash = 0;
#else
    s->flash = !(flags & GPU_MATERIALISED_ATTENTION) && flash_supported(s->Cl / s->NHl);
#endif
    s->ncount = tp > 1 && s->Vl + 1 > c.vocab ? s->Vl + 1 : c.vocab;
    s->nparams = gpt_stage_num_params(s->host);
    s->ntensors = gpt_stage_tensors(s->host, &s->tensors);
    size_t nl1 = (size_t)(s->nl > 0 ? s->nl : 1), BT = (size_t)B * T;
    s->lw = (layer_w *)calloc(nl1, sizeof *s->lw);
    s->slots = (gslot *)calloc((size_t)slots, sizeof *s->slots);
    s->unit_lo = (size_t *)calloc((size_t)s->nl + 2, sizeof(size_t));
    s->unit_hi = (size_t *)calloc((size_t)s->nl + 2, sizeof(size_t));
    s->wx_dirty = (unsigned char *)calloc((size_t)s->nl + 2, 1);
    s->h_counts = (int *)malloc(((size_t)s->ncount + 1 + BT) * sizeof(int));
    if (!s->lw || !s->slots || !s->unit_lo || !s->unit_hi || !s->wx_dirty || !s->h_counts)
        return herr_set(e, "out of memory allocating the GPU stage");
    find_offsets(s);
    find_units(s);
    return 0;
}

void stage_release(struct gpu_stage *s)
{
    gpt_stage_free(s->host);
    free(s->lw);
    free(s->slots);
    free(s->unit_lo);
    free(s->unit_hi);
    free(s->wx_dirty);
    free(s->h_counts);
    free(s->scratch);
    free(s->scratch_bytes);
    free(s);
}

} /* namespace */

} /* namespace GPU_NS */

using namespace GPU_NS;

/* n events (the null ones never created) and their array */
static void events_free(cudaEvent_t *ev, int n)
{
    for (int i = 0; ev && i < n; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    free(ev);
}

void gpu_stage_free(struct gpu_stage *s)
{
    if (!s)
        return;
    if (s->slots)
        for (int i = 0; i < s->nslots; i++)
            slot_free(&s->slots[i]);
    void *ptrs[] = {s->params, s->grads, s->m, s->v, s->seg_end, s->seg_decay, s->dres, s->dbuf,
                    s->dfch, s->dqkv, s->q, s->k, s->vv, s->y, s->dq, s->dk, s->dv, s->datt,
                    s->dsum, s->flash_ds, s->partial, s->sq_partial, s->loss_dev, s->x.ws,
                    s->x.ws_side, s->fchg,
                    s->tp_dev};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
    if (s->tp_host)
        cudaFreeHost(s->tp_host);
#ifndef HOLMES_GPU_FP32
    if (s->wX)
        cudaFree(s->wX);
#endif
    events_free(s->prof.ev, 2 * s->prof.cap);
    free(s->prof.part);
    events_free(s->prof.gev, 2 * s->prof.gcap);
    free(s->prof.grec);
    if (s->prof.t0)
        cudaEventDestroy(s->prof.t0);
    if (s->prof.t1)
        cudaEventDestroy(s->prof.t1);
    gpu_ctx_release(&s->x);
    if (s->x.lt)
        cublasLtDestroy(s->x.lt);
    if (s->x.blas)
        cublasDestroy(s->x.blas);
    if (s->x.stream)
        cudaStreamDestroy(s->x.stream);
    if (s->x.side)
        cudaStreamDestroy(s->x.side);
    if (s->x.fork)
        cudaEventDestroy(s->x.fork);
    if (s->x.join)
        cudaEventDestroy(s->x.join);
    stage_release(s);
}

size_t gpu_stage_device_bytes(const struct gpt_config *c, int first, int last, int B, int T,
                              int slots, int flags, int tp)
{
    struct gpu_stage *s = (struct gpu_stage *)calloc(1, sizeof *s);
    if (!s)
        return 0;
    struct alloc_ctx ac = {1, 0, 0, NULL};
    if (stage_shape(s, c, first, last, B, T, slots, flags, tp, 0, NULL) == 0)
        alloc_device(s, &ac);
    stage_release(s);
    return ac.bytes;
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
    struct gpu_stage *s = (struct gpu_stage *)calloc(1, sizeof *s);
    if (!s)
        return herr_set(e, "out of memory allocating the GPU stage");
    if (stage_shape(s, cfg, first, last, B, T, slots, flags, tp, tp_rank, e) < 0) {
        stage_release(s);
        return -1;
    }
    struct alloc_ctx plan = {1, 0, 0, NULL}, ac = {0, 0, 0, s};
    size_t fr = 0, tot = 0;
    alloc_device(s, &plan); /* only counted: all of it fits, or nothing is allocated */
    cudaError_t ce = cudaMemGetInfo(&fr, &tot);
    if (ce == cudaSuccess && plan.bytes > fr) {
        fail_msg(EB, EN, "out of GPU memory for the stage of layers [%d, %d) (B=%d, T=%d, %d "
                 "slots, %zu parameters): it needs %zu bytes (%.2f GiB), %zu bytes (%.2f GiB) of "
                 "%.1f GiB are free", first, last, B, T, slots, s->nparams, plan.bytes,
                 plan.bytes / 1073741824.0, fr, fr / 1073741824.0, tot / 1073741824.0);
        gpu_stage_free(s);
        return -1;
    }
    (void)cudaGetLastError(); /* no GPU: create_host_side says so */
    if (create_host_side(s, EB, EN) < 0) {
        gpu_stage_free(s);
        return -1;
    }
    alloc_device(s, &ac);
    if (ac.bad) {
        cudaMemGetInfo(&fr, &tot);
        fail_msg(EB, EN, "out of GPU memory allocating the stage of layers [%d, %d) (B=%d, T=%d, "
                 "%d slots, %zu parameters): it needs %zu bytes (%.2f GiB), %zu bytes (%.2f GiB) "
                 "of %.1f GiB are free", first, last, B, T, slots, s->nparams, plan.bytes,
                 plan.bytes / 1073741824.0, fr, fr / 1073741824.0, tot / 1073741824.0);
        gpu_stage_free(s);
        return -1;
    }
    s->x.eb = s->err;
    s->x.en = sizeof s->err;
    s->x.prof = &s->prof;
    s->x.accum = 1;
    if (adamw_table_upload(s, EB, EN) < 0) {
        gpu_stage_free(s);
        return -1;
    }
    if (layernorm_prepare(s) < 0 || (s->flash && flash_prepare(s) < 0)) {
        herr_set(e, "%s", s->err);
        gpu_stage_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* ---------------------------------------------------------------- accessors */

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
int gpu_stage_debug_poison(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    for (int i = 0; i < s->nscratch; i++)
        ENQ(cudaMemsetAsync(s->scratch[i], 0xff, s->scratch_bytes[i], s->x.stream));
    return gpu_stage_sync(s);
}

const char *gpu_stage_attention_kind(const struct gpu_stage *s)
{
    return s->flash ? "flash" : "materialised";
}

double gpu_stage_flops(const struct gpu_stage *s)
{
    double BT = (double)s->B * s->T, C = s->c.channels, T = s->T, Cl = s->Cl;
    double fwd = s->nl * (2.0 * BT * 12.0 * C * Cl + 2.0 * 2.0 * s->B * (T * (T + 1) / 2) * Cl);
    if (s->last == s->c.layers)
        fwd += 2.0 * BT * C * s->Vl;
    return 3.0 * fwd;
}
