/* GPT-2 stage on one GPU: cuBLASLt matrix products (bias / GELU epilogues), fused LayerNorm,
 * causal attention, fused softmax + cross-entropy, AdamW on fp32 master weights. See gpt_cuda.h.
 *
 * Row-major tensors [rows][cols] are column-major [cols x rows] to cuBLAS, so a row-major
 * out[N][OC] = inp[N][IC] @ w[OC][IC]^T is the column-major O(OC x N) = W'^T (OC x IC) * I' (IC x N).
 * Every reduction has a fixed order (no floating-point atomics), so two runs of the same
 * micro-batches give the same bits (exact resume from a checkpoint).
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_plan.h"
#include "gpt_cuda.h"
#include "token_groups.h"

#ifdef HOLMES_GPU_FP32
typedef float floatX;
#define CUDA_X CUDA_R_32F
#define PREC_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define CUDA_X CUDA_R_16BF
#define PREC_NAME "bf16"
#endif

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define LT_WORKSPACE (32u << 20)
#define SQ_BLOCKS 1024
#define COLSUM_ROWS 64

/* ---------------------------------------------------------------- errors */

static int fail_msg(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_msg(char *buf, size_t n, const char *fmt, ...)
{
    if (buf && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Each function that checks calls names its error buffer EB (size EN) first. */
#define CK(call) do { cudaError_t err_ = (call); if (err_ != cudaSuccess) \
        return fail_msg(EB, EN, "CUDA: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                        cudaGetErrorString(err_)); } while (0)
#define CKB(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) \
        return fail_msg(EB, EN, "cuBLAS: %s failed (%s:%d): %s", #call, __FILE__, __LINE__, \
                        cublasGetStatusString(st_)); } while (0)
#ifdef HOLMES_GPU_DEBUG
#define LAUNCHED(stream) do { CK(cudaGetLastError()); CK(cudaStreamSynchronize(stream)); } while (0)
#else
#define LAUNCHED(stream) CK(cudaGetLastError())
#endif
#define OK(x) do { if ((x) < 0) return -1; } while (0)

static unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* The kernels and the matrix products (one translation unit: see each file's comment). */
/* internal linkage: the fp32 and bf16 objects link into one binary (the CUDA holmes-node) */
namespace {
#include "gpt_cuda_kernels.cuh"
} /* namespace */
#include "gpt_cuda_matmul.cuh"

/* ---------------------------------------------------------------- the stage */

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
};

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
    struct layer_w *lw;
    float *params, *grads, *m, *v;     /* device fp32 */
    floatX *wX;                        /* device weights in the activation type (= params in fp32) */
    size_t *seg_end;
    int *seg_decay;
    struct gslot *slots;
    /* shared scratch */
    floatX *dres, *dbuf, *dfch, *dqkv, *q, *k, *vv, *y, *dq, *dk, *dv, *datt;
    floatX *fchg;                      /* GELU outputs of one layer when recomputing */
    float *partial;
    double *sq_partial;
    float *h_losses;                   /* host [BT] */
    int ncount;                        /* token values token_groups may see: V, or Vl + 1 (tp > 1) */
    int *h_csr;                        /* host: counts [ncount+1], utok [BT], ustart [BT+1], upos [BT],
                                          tokens [BT] (tp > 1: shifted to this rank's rows) */
    struct gpu_ctx x;
    char err[512];
};

const char *gpu_precision_name(void) { return PREC_NAME; }
size_t gpu_act_bytes(void) { return sizeof(floatX); }

static void *dalloc(size_t bytes, int *bad)
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

static void find_offsets(struct gpu_stage *s)
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

static void slot_free(struct gslot *a)
{
    void *ptrs[] = {a->tokens, a->targets, a->utok, a->ustart, a->upos, a->x0, a->ln1, a->qkv,
                    a->att, a->atty, a->res2, a->ln2, a->fch, a->fchg, a->res3, a->lnf,
                    a->logits, a->ln1m, a->ln1r, a->ln2m, a->ln2r, a->lnfm, a->lnfr, a->losses,
                    a->ce_max, a->ce_sum, a->dqkv_acc, a->dx0};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
}

static int slot_alloc(struct gpu_stage *s, struct gslot *a)
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
                    s->partial, s->sq_partial, s->x.ws, s->fchg, s->tp_dev};
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
    free(s->h_losses);
    free(s->h_csr);
    free(s);
}

/* The stage's stream and its cuBLASLt and cuBLAS handles. 0, or -1 (message in EB). */
static int create_handles(struct gpu_stage *s, char *EB, size_t EN)
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
static int alloc_device(struct gpu_stage *s, char *EB, size_t EN)
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
    s->m = (float *)dalloc(n * sizeof(float), &bad);
    s->v = (float *)dalloc(n * sizeof(float), &bad);
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
        fail_msg(EB, EN, "out of GPU memory allocating stage [%d, %d) (B=%d, T=%d, %d slots, "
                 "%zu parameters; %.1f of %.1f GiB free)", first, last, B, T, slots, n,
                 fr / 1073741824.0, tot / 1073741824.0);
        return -1;
    }
    return 0;
}

/* The tensor table to the device: where each tensor ends and whether it decays (AdamW).
 * 0, or -1 (message in EB). */
static int upload_tensor_table(struct gpu_stage *s, char *EB, size_t EN)
{
    size_t *h_end = (size_t *)malloc((size_t)s->ntensors * sizeof(size_t));
    int *h_dec = (int *)malloc((size_t)s->ntensors * sizeof(int));
    if (!h_end || !h_dec) {
        free(h_end);
        free(h_dec);
        fail_msg(EB, EN, "out of memory allocating the GPU stage");
        return -1;
    }
    for (int i = 0; i < s->ntensors; i++) {
        h_end[i] = s->tensors[i].offset + s->tensors[i].size;
        h_dec[i] = s->tensors[i].decay;
    }
    cudaError_t c1 = cudaMemcpy(s->seg_end, h_end, (size_t)s->ntensors * sizeof(size_t), cudaMemcpyHostToDevice);
    cudaError_t c2 = cudaMemcpy(s->seg_decay, h_dec, (size_t)s->ntensors * sizeof(int), cudaMemcpyHostToDevice);
    free(h_end);
    free(h_dec);
    if (c1 != cudaSuccess || c2 != cudaSuccess) {
        fail_msg(EB, EN, "CUDA: copying the tensor table: %s",
                 cudaGetErrorString(c1 != cudaSuccess ? c1 : c2));
        return -1;
    }
    return 0;
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
    if (flags & ~GPU_RECOMPUTE_GELU)
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
    s->tp = tp;
    s->tpr = tp_rank;
    s->Cl = c.channels / tp;
    s->NHl = c.heads / tp;
    s->F = 4 * c.channels / tp;
    s->Vl = c.padded_vocab / tp;
    s->ncount = tp > 1 && s->Vl + 1 > c.vocab ? s->Vl + 1 : c.vocab;
    s->nparams = gpt_stage_num_params(s->host);
    s->ntensors = gpt_stage_tensors(s->host, &s->tensors);
    s->lw = (struct layer_w *)calloc((size_t)(s->nl > 0 ? s->nl : 1), sizeof *s->lw);
    s->slots = (struct gslot *)calloc((size_t)slots, sizeof *s->slots);
    size_t BT = (size_t)B * T;
    s->h_losses = (float *)malloc(BT * sizeof(float));
    s->h_csr = (int *)malloc(((size_t)s->ncount + 1 + 4 * BT + 1) * sizeof(int));
    if (!s->lw || !s->slots || !s->h_losses || !s->h_csr) {
        gpu_stage_free(s);
        return herr_set(e, "out of memory allocating the GPU stage");
    }
    find_offsets(s);
    s->x.eb = s->err;
    s->x.en = sizeof s->err;
    int rc = -1;
    if (create_handles(s, EB, EN) < 0 || alloc_device(s, EB, EN) < 0 ||
        upload_tensor_table(s, EB, EN) < 0)
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

static int refresh_wx(struct gpu_stage *s, size_t lo, size_t hi)
{
#ifdef HOLMES_GPU_FP32
    (void)s; (void)lo; (void)hi;
    return 0;
#else
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi <= lo)
        return 0;
    cast_kernel<<<blocks_for(hi - lo, 256), 256, 0, s->x.stream>>>(s->wX + lo, s->params + lo, hi - lo);
    LAUNCHED(s->x.stream);
    return 0;
#endif
}

static int h2d(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->x.stream));
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
}
static int d2h(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->x.stream));
    CK(cudaStreamSynchronize(s->x.stream));
    return 0;
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
    OK(h2d(s, s->m, m, s->nparams * sizeof(float)));
    return h2d(s, s->v, v, s->nparams * sizeof(float));
}
int gpu_stage_get_moments(struct gpu_stage *s, float *m, float *v)
{
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

/* ---------------------------------------------------------------- forward */

/* positions of the micro-batch grouped by token (token_groups.h), uploaded. With tensor
 * parallelism only the tokens of this rank's wte rows [v0, v0 + Vl), as rows of its wte (token -
 * v0): every other token goes into one group past them (Vl), the last one, which is dropped. */
static int upload_token_groups(struct gpu_stage *s, struct gslot *a, const int *tokens)
{
    size_t BT = (size_t)s->B * s->T;
    int *cnt = s->h_csr, *utok = cnt + s->ncount + 1, *ustart = utok + BT, *upos = ustart + BT + 1;
    int nu;
    if (s->tp == 1) {
        nu = token_groups(tokens, BT, s->c.vocab, cnt, utok, ustart, upos);
    } else {
        int *mine = upos + BT, v0 = s->tpr * s->Vl;
        for (size_t i = 0; i < BT; i++) {
            int v = tokens[i] - v0;
            mine[i] = v >= 0 && v < s->Vl ? v : s->Vl;
        }
        nu = token_groups(mine, BT, s->Vl + 1, cnt, utok, ustart, upos);
        if (nu > 0 && utok[nu - 1] == s->Vl)
            nu--;
    }
    a->nuniq = nu;
    OK(h2d(s, a->utok, utok, (size_t)nu * sizeof(int)));
    OK(h2d(s, a->ustart, ustart, ((size_t)nu + 1) * sizeof(int)));
    return h2d(s, a->upos, upos, BT * sizeof(int));
}

static int stage_fail(struct gpu_stage *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int stage_fail(struct gpu_stage *s, const char *fmt, ...)
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
static int tp_sum_dev(struct gpu_stage *s, float *buf, size_t n, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
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
static int check_ids(struct gpu_stage *s, const int *tokens, const int *targets)
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

/* Layer i's saved activations in slot a: [B][T] rows each, of the layer's widths (C, 3 Cl, Cl,
 * F: this rank's share with tensor parallelism); fchg is the shared scratch when GELU outputs are
 * recomputed. */
struct layer_acts {
    floatX *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r;
};
static struct layer_acts layer_acts_of(const struct gpu_stage *s, const struct gslot *a, int i)
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

/* Real vocabulary columns among this rank's Vl logits: global index tpr * Vl + v < V. */
static int vocab_held(const struct gpu_stage *s)
{
    int n = s->c.vocab - s->tpr * s->Vl;
    return n < 0 ? 0 : n < s->Vl ? n : s->Vl;
}

static int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd,
                         const floatX *inp, size_t woff, size_t boff, int N)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    layernorm_forward_kernel<<<blocks_for((size_t)N * 32, 256), 256, 0, s->x.stream>>>(
        out, mean, rstd, inp, s->params + woff, s->params + boff, N, s->c.channels);
    LAUNCHED(s->x.stream);
    return 0;
}

static int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff,
                         const floatX *dout, const floatX *inp, const float *mean,
                         const float *rstd, int N)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels;
    layernorm_backward_kernel<<<blocks_for((size_t)N * 32, 256), 256, 0, s->x.stream>>>(
        dinp, dout, inp, s->params + woff, mean, rstd, N, C);
    LAUNCHED(s->x.stream);
    return colsum(&s->x, s->partial, s->grads + woff, s->grads + boff, dout, inp, mean, rstd, N, C);
}

/* over this rank's NHl heads (qkv [B][T][3][NHl][hs], atty [B][T][Cl]) */
static int attention_fwd(struct gpu_stage *s, floatX *atty, floatX *att, const floatX *qkv)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->Cl, NH = s->NHl, hs = C / NH;
    size_t BTC = (size_t)B * T * C;
    int rows = B * NH * T;
    permute_kernel<<<blocks_for(BTC, 256), 256, 0, s->x.stream>>>(s->q, s->k, s->vv, qkv, B, T, NH, hs);
    LAUNCHED(s->x.stream);
    /* att = scale q k^T */
    OK(bgemm(&s->x, plan_att_xxT(T, hs), 1.0f / sqrtf((float)hs), s->k, s->q, att, B * NH));
    softmax_forward_kernel<<<blocks_for((size_t)rows * 32, 256), 256, 0, s->x.stream>>>(att, rows, T);
    LAUNCHED(s->x.stream);
    /* y = att v */
    OK(bgemm(&s->x, plan_att_px(T, hs), 1.0f, s->vv, att, s->y, B * NH));
    unpermute_kernel<<<blocks_for(BTC, 256), 256, 0, s->x.stream>>>(atty, s->y, B, T, NH, hs, 0);
    LAUNCHED(s->x.stream);
    return 0;
}

/* x0 = wte[token] + wpe[position]. With tensor parallelism (gpt_pass.c's embed_forward) each rank
 * looks up the tokens of its vocabulary rows (0 for the others), the group sums them (fp32), and
 * wpe is added after the sum. */
static int embed_fwd(struct gpu_stage *s, struct gslot *a)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int T = s->T, C = s->c.channels, BT = s->B * s->T;
    size_t BTC = (size_t)BT * C;
    cudaStream_t st = s->x.stream;
    if (s->tp == 1) {
        encoder_forward_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(
            a->x0, a->tokens, s->wX + s->wte_off, s->wX + s->wpe_off, BT, T, C);
        LAUNCHED(st);
        return 0;
    }
    encoder_tp_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(s->tp_dev, a->tokens, s->wX + s->wte_off,
                                                           s->tpr * s->Vl, s->Vl, BT, C);
    LAUNCHED(st);
    OK(tp_sum_dev(s, s->tp_dev, BTC, "the token embeddings"));
    encoder_tp_finish_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(a->x0, s->tp_dev,
                                                                  s->wX + s->wpe_off, BT, T, C);
    LAUNCHED(st);
    return 0;
}

/* out[BT][C] = inp[BT][IC] @ w^T + bias + res. With tensor parallelism a row-parallel layer (each
 * rank holds IC of the inputs; gpt_pass.c's row_parallel_forward): the product without bias in
 * fp32, summed across the group, then the bias and the residual. */
static int row_parallel_fwd(struct gpu_stage *s, floatX *out, const floatX *inp, size_t woff,
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

/* The loss of each row into a->losses. With tensor parallelism (gpt_pass.c's cross_entropy) each
 * rank holds Vl of the vocabulary: the group sums every rank's row max and sum of exponentials
 * (each in its own slots of the exchange) and the target's logit (held by one rank), and each
 * row's global max and sum are kept for backward. */
static int cross_entropy_fwd(struct gpu_stage *s, struct gslot *a)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int BT = s->B * s->T;
    cudaStream_t st = s->x.stream;
    if (s->tp == 1) {
        ce_forward_kernel<<<(unsigned)BT, 256, 0, st>>>(a->losses, a->logits, a->targets,
                                                        s->c.vocab, s->c.padded_vocab);
        LAUNCHED(st);
        return 0;
    }
    size_t nx = (size_t)BT * (2 * (size_t)s->tp + 1); /* [tp][BT] max, [tp][BT] sum, [BT] target */
    CK(cudaMemsetAsync(s->tp_dev, 0, nx * sizeof(float), st));
    ce_tp_local_kernel<<<(unsigned)BT, 256, 0, st>>>(s->tp_dev, a->logits, a->targets,
                                                     s->tpr * s->Vl, vocab_held(s), s->Vl, s->tp,
                                                     s->tpr, BT);
    LAUNCHED(st);
    OK(tp_sum_dev(s, s->tp_dev, nx, "the loss's row maxima and sums"));
    ce_tp_global_kernel<<<blocks_for((size_t)BT, 256), 256, 0, st>>>(a->losses, a->ce_max,
                                                                    a->ce_sum, s->tp_dev, s->tp, BT);
    LAUNCHED(st);
    return 0;
}

/* The whole micro-batch (the slice (0, T)). */
static int forward_whole(struct gpu_stage *s, int slot, const int *tokens, const void *in_act,
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
    if (s->first == 0) {
        OK(h2d(s, a->tokens, tokens, BT * sizeof(int)));
        OK(upload_token_groups(s, a, tokens));
        OK(embed_fwd(s, a));
    } else {
        CK(cudaMemcpyAsync(a->x0, in_act, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
    }
    if (is_last && targets)
        OK(h2d(s, a->targets, targets, BT * sizeof(int)));

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
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
    if (!is_last) {
        CK(cudaMemcpyAsync(out_act, x, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st)); /* out_act is complete for any stream (NCCL's, a peer's) */
        a->forwarded = 1;
        a->has_targets = 0;
        return 0;
    }
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
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- backward */

static int attention_bwd(struct gpu_stage *s, floatX *dqkv, const floatX *dy, const floatX *att,
                         const floatX *qkv)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, C = s->Cl, NH = s->NHl, hs = C / NH;
    size_t BTC = (size_t)B * T * C;
    int rows = B * NH * T, batch = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    cudaStream_t st = s->x.stream;
    permute_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(s->q, s->k, s->vv, qkv, B, T, NH, hs);
    LAUNCHED(st);
    unpermute_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>((floatX *)dy, s->y, B, T, NH, hs, 1);
    LAUNCHED(st);
    /* datt = dy v^T; dv = att^T dy */
    OK(bgemm(&s->x, plan_att_xxT(T, hs), 1.0f, s->vv, s->y, s->datt, batch));
    OK(bgemm(&s->x, plan_att_pTx(T, hs), 1.0f, s->y, att, s->dv, batch));
    softmax_backward_kernel<<<blocks_for((size_t)rows * 32, 256), 256, 0, st>>>(s->datt, att, rows, T);
    LAUNCHED(st);
    /* dq = scale dpre k; dk = scale dpre^T q */
    OK(bgemm(&s->x, plan_att_px(T, hs), scale, s->k, s->datt, s->dq, batch));
    OK(bgemm(&s->x, plan_att_pTx(T, hs), scale, s->q, s->datt, s->dk, batch));
    permute_backward_kernel<<<blocks_for(BTC, 256), 256, 0, st>>>(dqkv, s->dq, s->dk, s->dv, B, T, NH, hs);
    LAUNCHED(st);
    return 0;
}

/* A column-parallel layer's backward (linear_bwd, no GELU). With tensor parallelism each rank
 * holds OC of the outputs, so its input gradient dinp[BT][IC] is partial (gpt_pass.c's
 * column_parallel_dinput): the product in fp32, summed across the group, then cast to the
 * activation type. */
static int column_parallel_bwd(struct gpu_stage *s, floatX *dinp, float *dw, float *dbias,
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
    cast_kernel<<<blocks_for(n, 256), 256, 0, s->x.stream>>>(dinp, s->tp_dev, n);
    LAUNCHED(s->x.stream);
    return 0;
}

/* The whole micro-batch (the slice (0, T)). */
static int backward_whole(struct gpu_stage *s, int slot, const void *dout, void *din,
                          float loss_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct gslot *a = &s->slots[slot];
    if (!a->forwarded)
        return stage_fail(s, "backward of slot %d, which holds no forward pass", slot);
    int B = s->B, T = s->T, C = s->c.channels, V = s->c.vocab, Vp = s->c.padded_vocab;
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
        if (s->tp == 1)
            ce_backward_kernel<<<(unsigned)BT, 256, 0, st>>>(a->logits, a->targets,
                                                             loss_scale / (float)BT, V, Vp);
        else /* the forward's global max and sum over the whole vocabulary */
            ce_tp_backward_kernel<<<(unsigned)BT, 256, 0, st>>>(
                a->logits, a->targets, a->ce_max, a->ce_sum, loss_scale / (float)BT,
                s->tpr * s->Vl, vocab_held(s), s->Vl);
        LAUNCHED(st);
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
        if (s->recompute) {
            gelu_forward_kernel<<<blocks_for(BTF, 256), 256, 0, st>>>(A.fchg, A.fch, BTF);
            LAUNCHED(st);
        }
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
    }
    if (s->first == 0) {
        /* wte: the groups of upload_token_groups (with tensor parallelism only this rank's
         * rows); wpe, like the residual, the same on every rank */
        if (a->nuniq > 0) {
            wte_backward_kernel<<<(unsigned)a->nuniq, 256, 0, st>>>(G + s->wte_off, dres, a->utok,
                                                                    a->ustart, a->upos, C);
            LAUNCHED(st);
        }
        wpe_backward_kernel<<<blocks_for((size_t)T * C, 256), 256, 0, st>>>(G + s->wpe_off, dres, B, T, C);
        LAUNCHED(st);
    } else {
        CK(cudaMemcpyAsync(din, dres, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st)); /* din is complete for any stream */
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

static int whole_range(const struct gpu_stage *s, int t0, int t1) { return t0 == 0 && t1 == s->T; }

/* *p = bytes of device memory unless it is there already; -1 (stage error) when out of memory */
static int lazy_alloc(struct gpu_stage *s, void **p, size_t bytes, const char *what)
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

static int forward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const int *tokens,
                         const void *in_act, const int *targets, void *out_act, float *loss)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, S = t1 - t0, C = s->c.channels, V = s->c.vocab, Vl = s->Vl;
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
        if (s->first == 0) {
            OK(h2d(s, a->tokens, tokens, BT * sizeof(int)));
            OK(upload_token_groups(s, a, tokens));
            OK(embed_fwd(s, a)); /* every position: the same values whichever slice made them */
        }
        if (is_last && targets)
            OK(h2d(s, a->targets, targets, BT * sizeof(int)));
        a->has_targets = is_last && targets;
    }
    if (s->first != 0) /* [B][S][C] -> rows [t0, t1) of each sequence */
        CK(cudaMemcpy2DAsync(a->x0 + (size_t)t0 * C, (size_t)T * C * X, in_act, (size_t)S * C * X,
                             (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));

    const floatX *W = s->wX;
    const floatX *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_w *o = &s->lw[i];
        struct layer_acts A = layer_acts_of(s, a, i);
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
    if (!is_last) {
        CK(cudaMemcpy2DAsync(out_act, (size_t)S * C * X, x + (size_t)t0 * C, (size_t)T * C * X,
                             (size_t)S * C * X, (size_t)B, cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st)); /* out_act is complete for any stream */
    } else {
        for (int b = 0; b < B; b++) {
            size_t R = (size_t)b * T + (size_t)t0;
            OK(layernorm_fwd(s, a->lnf + R * C, a->lnfm + R, a->lnfr + R, x + R * C, s->lnfw_off,
                             s->lnfb_off, S));
            OK(linear_fwd(&s->x, a->logits + R * Vl, a->lnf + R * C, W + s->head_off, NULL, NULL,
                          NULL, S, C, Vl));
            if (a->has_targets) {
                ce_forward_kernel<<<(unsigned)S, 256, 0, st>>>(a->losses + R, a->logits + R * Vl,
                                                               a->targets + R, V, Vl);
                LAUNCHED(st);
            }
        }
        if (a->has_targets && loss) { /* the slice's share of the micro-batch's mean */
            OK(d2h(s, s->h_losses, a->losses, BT * sizeof(float)));
            double total = 0.0;
            for (int b = 0; b < B; b++)
                for (int t = t0; t < t1; t++)
                    total += s->h_losses[(size_t)b * T + t];
            *loss = (float)(total / (double)BT);
        }
    }
    a->fwd_upto = t1;
    a->bwd_from = T;
    a->forwarded = t1 == T;
    return 0;
}

static int backward_slice(struct gpu_stage *s, struct gslot *a, int t0, int t1, const void *dout,
                          void *din, float loss_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int B = s->B, T = s->T, S = t1 - t0, C = s->c.channels, V = s->c.vocab, Vl = s->Vl;
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
            ce_backward_kernel<<<(unsigned)S, 256, 0, st>>>(a->logits + R * Vl, a->targets + R,
                                                            loss_scale / (float)BT, V, Vl);
            LAUNCHED(st);
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
            if (s->recompute) {
                gelu_forward_kernel<<<blocks_for(SF, 256), 256, 0, st>>>(A.fchg + R * F,
                                                                         A.fch + R * F, SF);
                LAUNCHED(st);
            }
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
    }
    if (s->first == 0) {
        CK(cudaMemcpy2DAsync(a->dx0 + (size_t)t0 * C, (size_t)T * C * X, dres, SC * X, SC * X,
                             (size_t)B, cudaMemcpyDeviceToDevice, st));
        if (t0 == 0) { /* every position's gradient is in: the whole micro-batch's kernels */
            if (a->nuniq > 0) {
                wte_backward_kernel<<<(unsigned)a->nuniq, 256, 0, st>>>(G + s->wte_off, a->dx0,
                                                                        a->utok, a->ustart,
                                                                        a->upos, C);
                LAUNCHED(st);
            }
            wpe_backward_kernel<<<blocks_for((size_t)T * C, 256), 256, 0, st>>>(G + s->wpe_off,
                                                                               a->dx0, B, T, C);
            LAUNCHED(st);
        }
    } else {
        CK(cudaMemcpyAsync(din, dres, (size_t)B * SC * X, cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st)); /* din is complete for any stream */
    }
    a->bwd_from = t0;
    a->forwarded = t0 != 0;
    return 0;
}

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

/* ---------------------------------------------------------------- optimizer */

int gpu_stage_grad_sq_norm(struct gpu_stage *s, size_t lo, size_t hi, double *out)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    double h[SQ_BLOCKS];
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "gradient range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    sq_partial_kernel<<<SQ_BLOCKS, 256, 0, s->x.stream>>>(s->sq_partial, s->grads, lo, hi);
    LAUNCHED(s->x.stream);
    OK(d2h(s, h, s->sq_partial, sizeof h));
    double sum = 0.0;
    for (int i = 0; i < SQ_BLOCKS; i++)
        sum += h[i];
    *out = sum;
    return 0;
}

int gpu_stage_adamw(struct gpu_stage *s, const struct adamw_config *o, size_t lo, size_t hi,
                    float lr, long step, float grad_scale)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi > s->nparams || lo > hi)
        return stage_fail(s, "parameter range [%zu, %zu) is outside [0, %zu)", lo, hi, s->nparams);
    if (step < 1)
        return stage_fail(s, "AdamW step counts from 1 (got %ld)", step);
    if (hi == lo)
        return 0;
    float bc1 = 1.0f - powf(o->beta1, (float)step);
    float bc2 = 1.0f - powf(o->beta2, (float)step);
#ifdef HOLMES_GPU_FP32
    floatX *px = NULL;
#else
    floatX *px = s->wX;
#endif
    adamw_kernel<<<blocks_for(hi - lo, 256), 256, 0, s->x.stream>>>(
        s->params, s->grads, s->m, s->v, px, s->seg_end, s->seg_decay, s->ntensors, lo, hi, lr,
        o->beta1, o->beta2, o->eps, o->weight_decay, bc1, bc2, grad_scale);
    LAUNCHED(s->x.stream);
    return 0;
}

/* Activation buffers, the GEMM benchmark, the device name. */
#include "gpt_cuda_device.cuh"
