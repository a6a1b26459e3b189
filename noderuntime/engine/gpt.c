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
#include "gpt_layers.h"

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
};

struct gpt_stage {
    struct gpt_config c;
    int first, last, nl, B, T, nslots;
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
    /* backward scratch, shared by all slots */
    float *dres, *dbuf, *dqkv, *dfch, *datt_row;
    char err[256];
};

/* ---------------------------------------------------------------- small helpers */

static int stage_fail(struct gpt_stage *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int stage_fail(struct gpt_stage *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t add_tensor(struct gpt_stage *s, const char *name, size_t size, int decay)
{
    struct gpt_tensor *t = &s->tensors[s->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = s->nparams;
    t->size = size;
    t->decay = decay;
    s->nparams += size;
    return t->offset;
}

static size_t add_layer_tensor(struct gpt_stage *s, int l, const char *what, size_t size, int decay)
{
    char name[48];
    snprintf(name, sizeof name, "h%d.%s", l, what);
    return add_tensor(s, name, size, decay);
}

static void build_layout(struct gpt_stage *s)
{
    size_t C = (size_t)s->c.channels, Vp = (size_t)s->c.padded_vocab, maxT = (size_t)s->c.max_seq;
    s->nparams = 0;
    s->ntensors = 0;
    if (s->first == 0) {
        s->wte_off = add_tensor(s, "wte", Vp * C, 1);
        s->wpe_off = add_tensor(s, "wpe", maxT * C, 1);
        s->head_off = s->wte_off;
    }
    for (int i = 0; i < s->nl; i++) {
        int l = s->first + i;
        struct layer_off *o = &s->lo[i];
        o->ln1w = add_layer_tensor(s, l, "ln_1.weight", C, 0);
        o->ln1b = add_layer_tensor(s, l, "ln_1.bias", C, 0);
        o->qkvw = add_layer_tensor(s, l, "attn.qkv.weight", 3 * C * C, 1);
        o->qkvb = add_layer_tensor(s, l, "attn.qkv.bias", 3 * C, 0);
        o->attprojw = add_layer_tensor(s, l, "attn.proj.weight", C * C, 1);
        o->attprojb = add_layer_tensor(s, l, "attn.proj.bias", C, 0);
        o->ln2w = add_layer_tensor(s, l, "ln_2.weight", C, 0);
        o->ln2b = add_layer_tensor(s, l, "ln_2.bias", C, 0);
        o->fcw = add_layer_tensor(s, l, "mlp.fc.weight", 4 * C * C, 1);
        o->fcb = add_layer_tensor(s, l, "mlp.fc.bias", 4 * C, 0);
        o->fcprojw = add_layer_tensor(s, l, "mlp.proj.weight", 4 * C * C, 1);
        o->fcprojb = add_layer_tensor(s, l, "mlp.proj.bias", C, 0);
    }
    if (s->last == s->c.layers) {
        s->lnfw_off = add_tensor(s, "ln_f.weight", C, 0);
        s->lnfb_off = add_tensor(s, "ln_f.bias", C, 0);
        if (s->first != 0)
            s->head_off = add_tensor(s, "wte", Vp * C, 1);
    }
}

static float *falloc(size_t n)
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
    size_t NH = (size_t)s->c.heads, nl = (size_t)s->nl, BT = B * T, BTC = BT * C;
    size_t n = BTC                                                 /* x0 */
               + nl * (BTC + 2 * BT + 3 * BTC + B * NH * T * T + BTC + BTC /* ln1..res2 */
                       + BTC + 2 * BT + 4 * BTC + 4 * BTC + BTC);         /* ln2..res3 */
    if (s->last == s->c.layers)
        n += BTC + 2 * BT + BT * (size_t)s->c.padded_vocab;
    a->mem = falloc(n);
    a->tokens = calloc(BT, sizeof(int));
    a->targets = calloc(BT, sizeof(int));
    if (!a->mem || !a->tokens || !a->targets)
        return -1;
    float *p = a->mem;
#define CARVE(field, count) do { a->field = p; p += (count); } while (0)
    CARVE(x0, BTC);
    CARVE(ln1, nl * BTC);
    CARVE(ln1_mean, nl * BT);
    CARVE(ln1_rstd, nl * BT);
    CARVE(qkv, nl * 3 * BTC);
    CARVE(att, nl * B * NH * T * T);
    CARVE(atty, nl * BTC);
    CARVE(res2, nl * BTC);
    CARVE(ln2, nl * BTC);
    CARVE(ln2_mean, nl * BT);
    CARVE(ln2_rstd, nl * BT);
    CARVE(fch, nl * 4 * BTC);
    CARVE(fch_gelu, nl * 4 * BTC);
    CARVE(res3, nl * BTC);
    if (s->last == s->c.layers) {
        CARVE(lnf, BTC);
        CARVE(lnf_mean, BT);
        CARVE(lnf_rstd, BT);
        CARVE(logits, BT * (size_t)s->c.padded_vocab);
    }
#undef CARVE
    return 0;
}

int gpt_stage_create(struct gpt_stage **out, const struct gpt_config *cfg, int first, int last,
                     int B, int T, int slots, herr *e)
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
    if (slots <= 0 || slots > 1024)
        return herr_set(e, "activation slots must be in [1, 1024] (got %d)", slots);
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
    s->lo = calloc((size_t)s->nl, sizeof *s->lo);
    s->tensors = calloc((size_t)s->nl * GPT_MAX_TENSORS_PER_LAYER + 5, sizeof *s->tensors);
    s->slots = calloc((size_t)slots, sizeof *s->slots);
    if (!s->lo || !s->tensors || !s->slots)
        goto oom;
    build_layout(s);
    s->params = falloc(s->nparams);
    s->grads = falloc(s->nparams);
    if (!s->params || !s->grads)
        goto oom;
    size_t BTC = (size_t)B * T * c.channels;
    s->dres = falloc(BTC);
    s->dbuf = falloc(BTC);
    s->dqkv = falloc(3 * BTC);
    s->dfch = falloc(4 * BTC);
    s->datt_row = falloc((size_t)B * c.heads * T);
    if (!s->dres || !s->dbuf || !s->dqkv || !s->dfch || !s->datt_row)
        goto oom;
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
    free(s);
}

/* ---------------------------------------------------------------- accessors */

const struct gpt_config *gpt_stage_config(const struct gpt_stage *s) { return &s->c; }
void gpt_stage_range(const struct gpt_stage *s, int *first, int *last)
{
    *first = s->first;
    *last = s->last;
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

/* The forward hook for parameters [lo, hi): -1 (with the stage's error set) when it refuses. */
static int need_params(struct gpt_stage *s, size_t lo, size_t hi)
{
    if (s->param_hook && s->param_hook(s->param_hook_ctx, lo, hi) != 0)
        return stage_fail(s, "forward stopped: parameters [%zu, %zu) are not available", lo, hi);
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
    *count = (size_t)s->c.padded_vocab * s->c.channels;
    return 0;
}

void gpt_stage_zero_grads(struct gpt_stage *s)
{
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
    if (s->last != s->c.layers || slot < 0 || slot >= s->nslots || !s->slots[slot].forwarded)
        return NULL;
    return s->slots[slot].logits;
}

double gpt_stage_flops(const struct gpt_stage *s)
{
    double BT = (double)s->B * s->T, C = s->c.channels, T = s->T;
    double fwd = s->nl * (2.0 * BT * 12.0 * C * C            /* qkv, proj, fc, fc proj */
                          + 2.0 * 2.0 * s->B * (T * (T + 1) / 2) * C); /* scores, att @ v */
    if (s->last == s->c.layers)
        fwd += 2.0 * BT * C * s->c.padded_vocab;
    return 3.0 * fwd;
}

/* ---------------------------------------------------------------- initialisation */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void fill_normal(float *p, size_t n, float std, uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the name, mixed with the seed */
    for (const char *c = name; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    uint64_t st = seed ^ h;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((splitmix64(&st) >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0, 1] */
        double u2 = (splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
        double r = sqrt(-2.0 * log(u1));
        p[i] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            p[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
    }
}

void gpt_stage_init_params(struct gpt_stage *s, uint64_t seed)
{
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->c.layers);
    size_t C = (size_t)s->c.channels;
    for (int i = 0; i < s->ntensors; i++) {
        const struct gpt_tensor *t = &s->tensors[i];
        float *p = s->params + t->offset;
        const char *dot = strrchr(t->name, '.');
        if (strcmp(t->name, "wte") == 0) {
            size_t real = (size_t)s->c.vocab * C;
            fill_normal(p, real, 0.02f, seed, t->name);
            memset(p + real, 0, (t->size - real) * sizeof(float));
        } else if (strcmp(t->name, "wpe") == 0) {
            fill_normal(p, t->size, 0.02f, seed, t->name);
        } else if (dot && strcmp(dot, ".bias") == 0) {
            memset(p, 0, t->size * sizeof(float));
        } else if (strstr(t->name, "ln_")) {
            for (size_t k = 0; k < t->size; k++)
                p[k] = 1.0f;
        } else if (strstr(t->name, ".proj.weight")) {
            fill_normal(p, t->size, proj_std, seed, t->name);
        } else {
            fill_normal(p, t->size, 0.02f, seed, t->name);
        }
    }
}

/* ---------------------------------------------------------------- forward */

int gpt_stage_forward(struct gpt_stage *s, int slot, const int *tokens, const float *in_act,
                      const int *targets, float *out_act, float *loss)
{
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct slot_acts *a = &s->slots[slot];
    int B = s->B, T = s->T, C = s->c.channels, NH = s->c.heads, V = s->c.vocab;
    int Vp = s->c.padded_vocab;
    size_t BT = (size_t)B * T, BTC = BT * C;
    int is_last = s->last == s->c.layers;
    a->forwarded = 0;
    if (s->first == 0) {
        if (!tokens)
            return stage_fail(s, "the first stage needs tokens");
        for (size_t i = 0; i < BT; i++)
            if (tokens[i] < 0 || tokens[i] >= V)
                return stage_fail(s, "token %d at position %zu is outside the vocabulary [0, %d)", tokens[i], i, V);
        memcpy(a->tokens, tokens, BT * sizeof(int));
        if (need_params(s, s->wte_off, s->wpe_off + (size_t)s->c.max_seq * C) != 0)
            return -1;
        const float *wte = s->params + s->wte_off, *wpe = s->params + s->wpe_off;
#pragma omp parallel for
        for (size_t i = 0; i < BT; i++) {
            const float *te = wte + (size_t)tokens[i] * C, *pe = wpe + (i % T) * C;
            float *x = a->x0 + i * C;
            for (int k = 0; k < C; k++)
                x[k] = te[k] + pe[k];
        }
    } else {
        if (!in_act)
            return stage_fail(s, "a stage after the first needs in_act");
        memcpy(a->x0, in_act, BTC * sizeof(float));
    }
    if (is_last && targets) {
        for (size_t i = 0; i < BT; i++)
            if (targets[i] < 0 || targets[i] >= V)
                return stage_fail(s, "target %d at position %zu is outside the vocabulary [0, %d)",
                                  targets[i], i, V);
        memcpy(a->targets, targets, BT * sizeof(int));
    }
    if (!is_last && !out_act)
        return stage_fail(s, "a stage before the last needs out_act");

    const float *P = s->params;
    const float *x = a->x0;
    for (int i = 0; i < s->nl; i++) {
        const struct layer_off *o = &s->lo[i];
        float *ln1 = a->ln1 + i * BTC, *ln1m = a->ln1_mean + i * BT, *ln1r = a->ln1_rstd + i * BT;
        float *qkv = a->qkv + i * 3 * BTC, *att = a->att + (size_t)i * B * NH * T * T;
        float *atty = a->atty + i * BTC, *res2 = a->res2 + i * BTC, *ln2 = a->ln2 + i * BTC;
        float *ln2m = a->ln2_mean + i * BT, *ln2r = a->ln2_rstd + i * BT;
        float *fch = a->fch + i * 4 * BTC, *fchg = a->fch_gelu + i * 4 * BTC;
        float *res3 = a->res3 + i * BTC;
        if (need_params(s, o->ln1w, o->fcprojb + C) != 0)
            return -1;
        gpt_layernorm_forward(ln1, ln1m, ln1r, x, P + o->ln1w, P + o->ln1b, (int)BT, C);
        gpt_linear_forward(qkv, ln1, P + o->qkvw, P + o->qkvb, (int)BT, C, 3 * C);
        gpt_attention_forward(atty, att, qkv, B, T, C, NH);
        gpt_linear_forward(res2, atty, P + o->attprojw, P + o->attprojb, (int)BT, C, C);
#pragma omp parallel for simd
        for (size_t k = 0; k < BTC; k++)
            res2[k] += x[k];
        gpt_layernorm_forward(ln2, ln2m, ln2r, res2, P + o->ln2w, P + o->ln2b, (int)BT, C);
        gpt_linear_forward(fch, ln2, P + o->fcw, P + o->fcb, (int)BT, C, 4 * C);
        gpt_gelu_forward(fchg, fch, 4 * BTC);
        gpt_linear_forward(res3, fchg, P + o->fcprojw, P + o->fcprojb, (int)BT, 4 * C, C);
#pragma omp parallel for simd
        for (size_t k = 0; k < BTC; k++)
            res3[k] += res2[k];
        x = res3;
    }
    if (!is_last) {
        memcpy(out_act, x, BTC * sizeof(float));
        a->forwarded = 1;
        a->has_targets = 0;
        return 0;
    }
    if (need_params(s, s->lnfw_off, s->nparams) != 0)
        return -1;
    gpt_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, P + s->lnfw_off, P + s->lnfb_off,
                      (int)BT, C);
    gpt_linear_forward(a->logits, a->lnf, P + s->head_off, NULL, (int)BT, C, Vp);
    a->forwarded = 1;
    a->has_targets = targets != NULL;
    if (targets) {
        double total = 0.0;
#pragma omp parallel for reduction(+ : total)
        for (size_t r = 0; r < BT; r++) {
            const float *lg = a->logits + r * Vp;
            float mx = row_max(lg, V);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int v = 0; v < V; v++)
                sum += exp_neg(lg[v] - mx);
            total += (double)logf(sum) + mx - lg[targets[r]];
        }
        if (loss)
            *loss = (float)(total / (double)BT);
    }
    return 0;
}

/* ---------------------------------------------------------------- backward */

int gpt_stage_backward(struct gpt_stage *s, int slot, const float *dout, float *din,
                       float loss_scale)
{
    if (slot < 0 || slot >= s->nslots)
        return stage_fail(s, "activation slot %d is out of range [0, %d)", slot, s->nslots);
    struct slot_acts *a = &s->slots[slot];
    if (!a->forwarded)
        return stage_fail(s, "backward of slot %d, which holds no forward pass", slot);
    int B = s->B, T = s->T, C = s->c.channels, NH = s->c.heads, V = s->c.vocab;
    int Vp = s->c.padded_vocab;
    size_t BT = (size_t)B * T, BTC = BT * C;
    int is_last = s->last == s->c.layers;
    if (is_last && !a->has_targets)
        return stage_fail(s, "backward of slot %d, whose forward had no targets", slot);
    if (!is_last && !dout)
        return stage_fail(s, "a stage before the last needs dout");
    if (s->first != 0 && !din)
        return stage_fail(s, "a stage after the first needs din");
    a->forwarded = 0;

    const float *P = s->params;
    float *G = s->grads;
    float *dres = s->dres;
    const float *x_out = s->nl > 0 ? a->res3 + (size_t)(s->nl - 1) * BTC : a->x0;
    if (is_last) {
        /* dlogits = (softmax - onehot) * scale / BT, in place over the logits */
        float sc = loss_scale / (float)BT;
#pragma omp parallel for
        for (size_t r = 0; r < BT; r++) {
            float *lg = a->logits + r * Vp;
            float mx = row_max(lg, V);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int v = 0; v < V; v++) {
                float e = exp_neg(lg[v] - mx);
                lg[v] = e;
                sum += e;
            }
            float inv = sc / sum;
#pragma omp simd
            for (int v = 0; v < V; v++)
                lg[v] *= inv;
            lg[a->targets[r]] -= sc;
            for (int v = V; v < Vp; v++)
                lg[v] = 0.0f;
        }
        gpt_linear_backward(s->dbuf, G + s->head_off, NULL, a->logits, a->lnf, P + s->head_off,
                        (int)BT, C, Vp);
        memset(dres, 0, BTC * sizeof(float));
        gpt_layernorm_backward(dres, G + s->lnfw_off, G + s->lnfb_off, s->dbuf, x_out,
                           P + s->lnfw_off, a->lnf_mean, a->lnf_rstd, (int)BT, C);
    } else {
        memcpy(dres, dout, BTC * sizeof(float));
    }
    for (int i = s->nl - 1; i >= 0; i--) {
        const struct layer_off *o = &s->lo[i];
        const float *x = i == 0 ? a->x0 : a->res3 + (size_t)(i - 1) * BTC;
        float *ln1 = a->ln1 + i * BTC, *ln1m = a->ln1_mean + i * BT, *ln1r = a->ln1_rstd + i * BT;
        float *qkv = a->qkv + i * 3 * BTC, *att = a->att + (size_t)i * B * NH * T * T;
        float *atty = a->atty + i * BTC, *res2 = a->res2 + i * BTC, *ln2 = a->ln2 + i * BTC;
        float *ln2m = a->ln2_mean + i * BT, *ln2r = a->ln2_rstd + i * BT;
        float *fch = a->fch + i * 4 * BTC, *fchg = a->fch_gelu + i * 4 * BTC;
        /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))) */
        gpt_linear_backward(s->dfch, G + o->fcprojw, G + o->fcprojb, dres, fchg, P + o->fcprojw,
                        (int)BT, 4 * C, C);
        gpt_gelu_backward(s->dfch, fch, 4 * BTC);
        gpt_linear_backward(s->dbuf, G + o->fcw, G + o->fcb, s->dfch, ln2, P + o->fcw, (int)BT, C,
                        4 * C);
        gpt_layernorm_backward(dres, G + o->ln2w, G + o->ln2b, s->dbuf, res2, P + o->ln2w, ln2m, ln2r,
                           (int)BT, C);
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        gpt_linear_backward(s->dbuf, G + o->attprojw, G + o->attprojb, dres, atty, P + o->attprojw,
                        (int)BT, C, C);
        gpt_attention_backward(s->dqkv, s->dbuf, att, qkv, s->datt_row, B, T, C, NH);
        gpt_linear_backward(s->dbuf, G + o->qkvw, G + o->qkvb, s->dqkv, ln1, P + o->qkvw, (int)BT, C,
                        3 * C);
        gpt_layernorm_backward(dres, G + o->ln1w, G + o->ln1b, s->dbuf, x, P + o->ln1w, ln1m, ln1r,
                           (int)BT, C);
        if (s->layer_hook)
            s->layer_hook(s->layer_hook_ctx, s->first + i);
    }
    if (s->first == 0) {
        float *dwte = G + s->wte_off, *dwpe = G + s->wpe_off;
        /* serial over positions keeps repeated tokens race-free; vectorised over channels */
        for (size_t r = 0; r < BT; r++) {
            float *dt = dwte + (size_t)a->tokens[r] * C, *dp = dwpe + (r % T) * C;
            const float *d = dres + r * C;
#pragma omp simd
            for (int k = 0; k < C; k++) {
                dt[k] += d[k];
                dp[k] += d[k];
            }
        }
    } else {
        memcpy(din, dres, BTC * sizeof(float));
    }
    return 0;
}
