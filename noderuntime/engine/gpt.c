/* GPT-2 forward and backward for one pipeline stage; see gpt.h for the layout. */
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gpt_impl.h"
#include "gpt_layers.h"

/* ---------------------------------------------------------------- small helpers */

int gpt_stage_fail(struct gpt_stage *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Adds a tensor of the whole shape rows x cols (vectors: cols 1), split across the tensor group
 * as `split` says; returns its offset in this rank's buffer. */
static size_t add_tensor(struct gpt_stage *s, const char *name, size_t rows, size_t cols, int decay,
                         enum gpt_split split)
{
    struct gpt_tensor *t = &s->tensors[s->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = s->nparams;
    t->rows = rows;
    t->cols = cols;
    t->split = s->tp > 1 ? split : GPT_REPLICATED;
    t->size = t->split == GPT_REPLICATED ? rows * cols
            : t->split == GPT_SPLIT_COLS ? rows * (cols / (size_t)s->tp)
                                         : rows / (size_t)s->tp * cols;
    t->decay = decay;
    t->full_offset = s->full_nparams;
    s->nparams += t->size;
    s->full_nparams += rows * cols;
    return t->offset;
}

static size_t add_layer_tensor(struct gpt_stage *s, int l, const char *what, size_t rows,
                               size_t cols, int decay, enum gpt_split split)
{
    char name[48];
    snprintf(name, sizeof name, "h%d.%s", l, what);
    return add_tensor(s, name, rows, cols, decay, split);
}

static void build_layout(struct gpt_stage *s)
{
    size_t C = (size_t)s->c.channels, Vp = (size_t)s->c.padded_vocab, maxT = (size_t)s->c.max_seq;
    s->nparams = 0;
    s->full_nparams = 0;
    s->ntensors = 0;
    if (s->first == 0) {
        s->wte_off = add_tensor(s, "wte", Vp, C, 1, GPT_SPLIT_ROWS);
        s->wpe_off = add_tensor(s, "wpe", maxT, C, 1, GPT_REPLICATED);
        s->head_off = s->wte_off;
    }
    for (int i = 0; i < s->nl; i++) {
        int l = s->first + i;
        struct layer_off *o = &s->lo[i];
        o->ln1w = add_layer_tensor(s, l, "ln_1.weight", C, 1, 0, GPT_REPLICATED);
        o->ln1b = add_layer_tensor(s, l, "ln_1.bias", C, 1, 0, GPT_REPLICATED);
        o->qkvw = add_layer_tensor(s, l, "attn.qkv.weight", 3 * C, C, 1, GPT_SPLIT_QKV);
        o->qkvb = add_layer_tensor(s, l, "attn.qkv.bias", 3 * C, 1, 0, GPT_SPLIT_QKV);
        o->attprojw = add_layer_tensor(s, l, "attn.proj.weight", C, C, 1, GPT_SPLIT_COLS);
        o->attprojb = add_layer_tensor(s, l, "attn.proj.bias", C, 1, 0, GPT_REPLICATED);
        o->ln2w = add_layer_tensor(s, l, "ln_2.weight", C, 1, 0, GPT_REPLICATED);
        o->ln2b = add_layer_tensor(s, l, "ln_2.bias", C, 1, 0, GPT_REPLICATED);
        o->fcw = add_layer_tensor(s, l, "mlp.fc.weight", 4 * C, C, 1, GPT_SPLIT_ROWS);
        o->fcb = add_layer_tensor(s, l, "mlp.fc.bias", 4 * C, 1, 0, GPT_SPLIT_ROWS);
        o->fcprojw = add_layer_tensor(s, l, "mlp.proj.weight", C, 4 * C, 1, GPT_SPLIT_COLS);
        o->fcprojb = add_layer_tensor(s, l, "mlp.proj.bias", C, 1, 0, GPT_REPLICATED);
    }
    if (s->last == s->c.layers) {
        s->lnfw_off = add_tensor(s, "ln_f.weight", C, 1, 0, GPT_REPLICATED);
        s->lnfb_off = add_tensor(s, "ln_f.bias", C, 1, 0, GPT_REPLICATED);
        if (s->first != 0)
            s->head_off = add_tensor(s, "wte", Vp, C, 1, GPT_SPLIT_ROWS);
    }
}

/* Copies tensor t's part of rank r between the whole layout (`full`) and r's (`local`). */
static void move_part(const struct gpt_stage *s, const struct gpt_tensor *t, int r, float *local,
                      float *full, int to_full)
{
    float *f = full + t->full_offset, *l = local + t->offset;
    size_t tp = (size_t)s->tp, rows = t->rows, cols = t->cols;
    size_t blocks = t->split == GPT_SPLIT_QKV ? 3 : 1;
    size_t runs = t->split == GPT_SPLIT_COLS ? rows : blocks;
    for (size_t k = 0; k < runs; k++) {
        size_t len, at;
        if (t->split == GPT_REPLICATED) {
            len = rows * cols;
            at = 0;
        } else if (t->split == GPT_SPLIT_COLS) {
            len = cols / tp;
            at = k * cols + (size_t)r * len;
        } else { /* rows, or each of the three q/k/v blocks by rows */
            size_t block = rows / blocks, part = block / tp;
            len = part * cols;
            at = (k * block + (size_t)r * part) * cols;
        }
        if (to_full)
            memcpy(f + at, l + k * len, len * sizeof(float));
        else
            memcpy(l + k * len, f + at, len * sizeof(float));
    }
}

size_t gpt_stage_full_params(const struct gpt_stage *s) { return s->full_nparams; }
int gpt_stage_tp(const struct gpt_stage *s) { return s->tp; }

void gpt_stage_from_full(const struct gpt_stage *s, const float *full, float *local)
{
    for (int i = 0; i < s->ntensors; i++)
        move_part(s, &s->tensors[i], s->tpr, local, (float *)(uintptr_t)full, 0);
}

void gpt_stage_to_full(const struct gpt_stage *s, int r, const float *local, float *full)
{
    for (int i = 0; i < s->ntensors; i++)
        move_part(s, &s->tensors[i], r, (float *)(uintptr_t)local, full, 1);
}

void gpt_stage_set_tp_sum(struct gpt_stage *s, int (*fn)(void *ctx, float *buf, size_t n), void *ctx)
{
    s->tp_sum = fn;
    s->tp_sum_ctx = ctx;
}

int gpt_tp_sum(struct gpt_stage *s, float *buf, size_t n)
{
    if (s->tp == 1)
        return 0;
    if (!s->tp_sum || s->tp_sum(s->tp_sum_ctx, buf, n) != 0)
        return gpt_stage_fail(s, "the tensor-parallel sum of %zu values failed%s", n,
                          s->tp_sum ? "" : " (no sum function set)");
    return 0;
}

float *gpt_falloc(size_t n)
{
    if (n == 0)
        n = 1;
    /* 64-byte alignment for the BLAS kernels and vector loops */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* ---------------------------------------------------------------- create / free */

int gpt_config_check(struct gpt_config *c, herr *e)
{
    if (c->layers <= 0)
        return herr_set(e, "model layers must be positive (got %d)", c->layers);
    if (c->channels <= 0)
        return herr_set(e, "model channels must be positive (got %d)", c->channels);
    if (c->heads <= 0)
        return herr_set(e, "model heads must be positive (got %d)", c->heads);
    if (c->channels % c->heads != 0)
        return herr_set(e, "model channels (%d) must be a multiple of heads (%d)", c->channels,
                        c->heads);
    if (c->vocab <= 0)
        return herr_set(e, "model vocab must be positive (got %d)", c->vocab);
    if (c->padded_vocab == 0)
        c->padded_vocab = (c->vocab + 127) / 128 * 128;
    if (c->padded_vocab < c->vocab)
        return herr_set(e, "model padded_vocab (%d) must be at least vocab (%d)", c->padded_vocab,
                        c->vocab);
    if (c->max_seq <= 0)
        return herr_set(e, "model max_seq must be positive (got %d)", c->max_seq);
    if ((double)c->padded_vocab * c->channels > 4e9 || (double)c->channels * c->channels * 4 > 4e9)
        return herr_set(e, "model is too large (channels %d, padded_vocab %d)", c->channels,
                        c->padded_vocab);
    return 0;
}

static int slot_alloc(struct gpt_stage *s, struct slot_acts *a)
{
    size_t B = (size_t)s->B, T = (size_t)s->T, C = (size_t)s->c.channels;
    size_t NH = (size_t)s->NHl, nl = (size_t)s->nl, BT = B * T, BTC = BT * C;
    size_t BTl = BT * (size_t)s->Cl, BTF = BT * (size_t)s->F; /* this rank's heads, MLP width */
    size_t BA = B * NH * T * T;
    size_t sets = s->forward_only ? 1 : nl; /* of everything but qkv */
    size_t n = BTC                                                 /* x0 */
               + nl * 3 * BTl                                      /* qkv */
               + sets * (BTC + 2 * BT + BA + BTl + BTC             /* ln1..res2 */
                         + BTC + 2 * BT + BTF + BTF + BTC);        /* ln2..res3 */
    a->sC = s->forward_only ? 0 : BTC;
    a->sT = s->forward_only ? 0 : BT;
    a->sl = s->forward_only ? 0 : BTl;
    a->sF = s->forward_only ? 0 : BTF;
    a->sA = s->forward_only ? 0 : BA;
    if (s->last == s->c.layers)
        n += BTC + 2 * BT + BT * (size_t)s->Vl + 2 * BT;
    a->mem = gpt_falloc(n);
    a->tokens = calloc(BT, sizeof(int));
    a->targets = calloc(BT, sizeof(int));
    if (!a->mem || !a->tokens || !a->targets)
        return -1;
    float *p = a->mem;
#define CARVE(field, count) do { a->field = p; p += (count); } while (0)
    CARVE(x0, BTC);
    CARVE(ln1, sets * BTC);
    CARVE(ln1_mean, sets * BT);
    CARVE(ln1_rstd, sets * BT);
    CARVE(qkv, nl * 3 * BTl);
    CARVE(att, sets * BA);
    CARVE(atty, sets * BTl);
    CARVE(res2, sets * BTC);
    CARVE(ln2, sets * BTC);
    CARVE(ln2_mean, sets * BT);
    CARVE(ln2_rstd, sets * BT);
    CARVE(fch, sets * BTF);
    CARVE(fch_gelu, sets * BTF);
    CARVE(res3, sets * BTC);
    if (s->last == s->c.layers) {
        CARVE(lnf, BTC);
        CARVE(lnf_mean, BT);
        CARVE(lnf_rstd, BT);
        CARVE(logits, BT * (size_t)s->Vl);
        CARVE(ce_max, BT);
        CARVE(ce_sum, BT);
    }
#undef CARVE
    return 0;
}

static int stage_create(struct gpt_stage **out, const struct gpt_config *cfg, int first,
                        int last, int B, int T, int slots, int tp, int tp_rank, int forward_only,
                        herr *e);

int gpt_stage_create(struct gpt_stage **out, const struct gpt_config *cfg, int first, int last,
                     int B, int T, int slots, herr *e)
{
    return stage_create(out, cfg, first, last, B, T, slots, 1, 0, 0, e);
}

int gpt_stage_create_tp(struct gpt_stage **out, const struct gpt_config *cfg, int first, int last,
                        int B, int T, int slots, int tp, int tp_rank, herr *e)
{
    return stage_create(out, cfg, first, last, B, T, slots, tp, tp_rank, 0, e);
}

int gpt_stage_create_forward_only(struct gpt_stage **out, const struct gpt_config *cfg, int first,
                                  int last, int B, int T, int slots, herr *e)
{
    return stage_create(out, cfg, first, last, B, T, slots, 1, 0, 1, e);
}

static int stage_create(struct gpt_stage **out, const struct gpt_config *cfg, int first,
                        int last, int B, int T, int slots, int tp, int tp_rank, int forward_only,
                        herr *e)
{
    *out = NULL;
    struct gpt_config c = *cfg;
    if (gpt_config_check(&c, e) < 0)
        return -1;
    if (first < 0 || last > c.layers || first >= last)
        return herr_set(e, "stage layer range [%d, %d) is not inside [0, %d) or is empty", first,
                        last, c.layers);
    if (B <= 0 || T <= 0 || T > c.max_seq)
        return herr_set(e, "micro-batch B=%d T=%d: both must be positive and T at most max_seq %d",
                        B, T, c.max_seq);
    if ((long long)B * T > 2147483647LL) /* the kernels count a micro-batch's rows in an int */
        return herr_set(e, "micro-batch B=%d T=%d: %lld rows, at most 2147483647", B, T,
                        (long long)B * T);
    if (slots <= 0 || slots > 1024)
        return herr_set(e, "activation slots must be in [1, 1024] (got %d)", slots);
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return herr_set(e, "tensor parallelism: rank %d of %d is not a rank of the group", tp_rank, tp);
    if (c.heads % tp != 0 || c.padded_vocab % tp != 0)
        return herr_set(e, "tensor parallelism %d must divide the model's heads (%d) and padded "
                        "vocabulary (%d)", tp, c.heads, c.padded_vocab);
    struct gpt_stage *s = calloc(1, sizeof *s);
    if (!s)
        return herr_set(e, "out of memory allocating the stage");
    s->c = c;
    s->first = first;
    s->last = last;
    s->nl = last - first;
    s->B = B;
    s->T = T;
    s->nslots = slots;
    s->tp = tp;
    s->tpr = tp_rank;
    s->forward_only = forward_only;
    s->Cl = c.channels / tp;
    s->NHl = c.heads / tp;
    s->F = 4 * c.channels / tp;
    s->Vl = c.padded_vocab / tp;
    s->lo = calloc((size_t)s->nl, sizeof *s->lo);
    s->tensors = calloc((size_t)s->nl * GPT_MAX_TENSORS_PER_LAYER + 5, sizeof *s->tensors);
    s->slots = calloc((size_t)slots, sizeof *s->slots);
    if (!s->lo || !s->tensors || !s->slots)
        goto oom;
    build_layout(s);
    s->params = gpt_falloc(s->nparams);
    if (!s->params)
        goto oom;
    size_t BT = (size_t)B * T, BTC = BT * c.channels;
    s->ce_buf = gpt_falloc(BT * (2 * (size_t)tp + 1));
    if (!s->ce_buf)
        goto oom;
    if (!forward_only) {
        s->grads = gpt_falloc(s->nparams);
        s->dres = gpt_falloc(BTC);
        s->dbuf = gpt_falloc(BTC);
        s->dqkv = gpt_falloc(3 * BT * s->Cl);
        s->dfch = gpt_falloc(BT * s->F);
        s->datt_row = gpt_falloc((size_t)B * s->NHl * GPT_ATT_ROWS * T);
        if (!s->grads || !s->dres || !s->dbuf || !s->dqkv || !s->dfch || !s->datt_row)
            goto oom;
    }
    if (tp > 1) {
        size_t biggest = 0;
        for (int i = 0; i < s->ntensors; i++)
            if (s->tensors[i].rows * s->tensors[i].cols > biggest)
                biggest = s->tensors[i].rows * s->tensors[i].cols;
        if (!(s->whole = gpt_falloc(biggest)))
            goto oom;
    }
    for (int i = 0; i < slots; i++)
        if (slot_alloc(s, &s->slots[i]) < 0)
            goto oom;
    /* One thread pool (OpenMP) drives everything; OpenBLAS runs inside it single-threaded. */
    openblas_set_num_threads(1);
    *out = s;
    return 0;
oom:
    gpt_stage_free(s);
    return herr_set(e, "out of memory allocating stage [%d, %d) (B=%d, T=%d, %d slots)", first,
                    last, B, T, slots);
}

void gpt_stage_free(struct gpt_stage *s)
{
    if (!s)
        return;
    if (s->slots)
        for (int i = 0; i < s->nslots; i++) {
            free(s->slots[i].mem);
            free(s->slots[i].dqkv_acc);
            free(s->slots[i].tokens);
            free(s->slots[i].targets);
        }
    free(s->slots);
    free(s->params);
    free(s->grads);
    free(s->tensors);
    free(s->lo);
    free(s->dres);
    free(s->dbuf);
    free(s->dqkv);
    free(s->dfch);
    free(s->datt_row);
    free(s->ce_buf);
    free(s->whole);
    free(s);
}

/* ---------------------------------------------------------------- accessors */

const struct gpt_config *gpt_stage_config(const struct gpt_stage *s) { return &s->c; }
void gpt_stage_range(const struct gpt_stage *s, int *first, int *last)
{
    *first = s->first;
    *last = s->last;
}
void gpt_stage_batch(const struct gpt_stage *s, int *B, int *T)
{
    *B = s->B;
    *T = s->T;
}
int gpt_stage_is_first(const struct gpt_stage *s) { return s->first == 0; }
int gpt_stage_is_last(const struct gpt_stage *s) { return s->last == s->c.layers; }
size_t gpt_stage_num_params(const struct gpt_stage *s) { return s->nparams; }
float *gpt_stage_params(struct gpt_stage *s) { return s->params; }
float *gpt_stage_grads(struct gpt_stage *s) { return s->grads; }
const char *gpt_stage_error(const struct gpt_stage *s) { return s->err; }

void gpt_stage_set_forward_hook(struct gpt_stage *s, int (*fn)(void *ctx, size_t lo, size_t hi),
                                void *ctx)
{
    s->param_hook = fn;
    s->param_hook_ctx = ctx;
}

int gpt_need_params(struct gpt_stage *s, size_t lo, size_t hi)
{
    if (s->param_hook && s->param_hook(s->param_hook_ctx, lo, hi) != 0)
        return gpt_stage_fail(s, "forward stopped: parameters [%zu, %zu) are not available", lo, hi);
    return 0;
}

void gpt_stage_set_backward_hook(struct gpt_stage *s, void (*fn)(void *ctx, int layer), void *ctx)
{
    s->layer_hook = fn;
    s->layer_hook_ctx = ctx;
}

int gpt_stage_tensors(const struct gpt_stage *s, const struct gpt_tensor **out)
{
    *out = s->tensors;
    return s->ntensors;
}

int gpt_stage_wte(const struct gpt_stage *s, size_t *offset, size_t *count)
{
    if (s->first != 0 && s->last != s->c.layers)
        return -1;
    *offset = s->head_off;
    *count = (size_t)s->Vl * s->c.channels;
    return 0;
}

void gpt_stage_zero_grads(struct gpt_stage *s)
{
    if (!s->grads) /* a forward-only stage */
        return;
    /* in 1 MiB pieces over the threads: for 124M parameters this is a 500 MB write */
    size_t n = s->nparams, piece = 1 << 18;
    long pieces = (long)((n + piece - 1) / piece);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < pieces; k++) {
        size_t lo = (size_t)k * piece, len = lo + piece < n ? piece : n - lo;
        memset(s->grads + lo, 0, len * sizeof(float));
    }
}

const float *gpt_stage_logits(const struct gpt_stage *s, int slot)
{
    if (s->last != s->c.layers || slot < 0 || slot >= s->nslots || s->slots[slot].fwd_upto <= 0)
        return NULL;
    return s->slots[slot].logits;
}

double gpt_stage_flops(const struct gpt_stage *s)
{
    double BT = (double)s->B * s->T, C = s->c.channels, T = s->T, Cl = s->Cl;
    double fwd = s->nl * (2.0 * BT * 12.0 * C * Cl           /* qkv, proj, fc, fc proj */
                          + 2.0 * 2.0 * s->B * (T * (T + 1) / 2) * Cl); /* scores, att @ v */
    if (s->last == s->c.layers)
        fwd += 2.0 * BT * C * s->Vl;
    return 3.0 * fwd;
}

/* ---------------------------------------------------------------- initialisation */

/* splitmix64's output k (from 0) from state st: the generator adds a constant to its state and
 * mixes, so any output is a function of (st, k) alone */
static uint64_t splitmix64_at(uint64_t st, uint64_t k)
{
    uint64_t z = st + (k + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* n normal values (Box-Muller on splitmix64's outputs 2j and 2j + 1 for the pair j) of standard
 * deviation std, from the seed and the tensor's name. Each pair depends on its index alone, so
 * the pairs are drawn in parallel and the values are the same bits whatever the thread count
 * (GPT-2 1.5B's 1.56 G values take 24 s on one core of a Zen 5). */
static void fill_normal(float *p, size_t n, float std, uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the name, mixed with the seed */
    for (const char *c = name; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    uint64_t st = seed ^ h;
    size_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) if (pairs >= 65536)
    for (size_t j = 0; j < pairs; j++) {
        double u1 = ((splitmix64_at(st, 2 * j) >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0, 1] */
        double u2 = (splitmix64_at(st, 2 * j + 1) >> 11) * (1.0 / 9007199254740992.0);
        double r = sqrt(-2.0 * log(u1));
        p[2 * j] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (2 * j + 1 < n)
            p[2 * j + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
    }
}

/* Initial values of one whole tensor (see gpt_stage_init_params). */
static void init_tensor(const struct gpt_stage *s, const struct gpt_tensor *t, float *p, size_t n,
                        uint64_t seed)
{
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->c.layers);
    const char *dot = strrchr(t->name, '.');
    if (strcmp(t->name, "wte") == 0) {
        size_t real = (size_t)s->c.vocab * s->c.channels;
        fill_normal(p, real, 0.02f, seed, t->name);
        memset(p + real, 0, (n - real) * sizeof(float));
    } else if (strcmp(t->name, "wpe") == 0) {
        fill_normal(p, n, 0.02f, seed, t->name);
    } else if (dot && strcmp(dot, ".bias") == 0) {
        memset(p, 0, n * sizeof(float));
    } else if (strstr(t->name, "ln_")) {
        for (size_t k = 0; k < n; k++)
            p[k] = 1.0f;
    } else if (strstr(t->name, ".proj.weight")) {
        fill_normal(p, n, proj_std, seed, t->name);
    } else {
        fill_normal(p, n, 0.02f, seed, t->name);
    }
}

void gpt_stage_init_params(struct gpt_stage *s, uint64_t seed)
{
    /* With tensor parallelism every rank draws each whole tensor and keeps its part, so the
     * model is the same whatever the group's size. */
    for (int i = 0; i < s->ntensors; i++) {
        const struct gpt_tensor *t = &s->tensors[i];
        if (s->tp == 1) {
            init_tensor(s, t, s->params + t->offset, t->size, seed);
            continue;
        }
        struct gpt_tensor at0 = *t; /* the tensor alone, at offset 0 of a whole buffer */
        at0.full_offset = 0;
        init_tensor(s, t, s->whole, t->rows * t->cols, seed);
        move_part(s, &at0, s->tpr, s->params, s->whole, 0);
    }
}

