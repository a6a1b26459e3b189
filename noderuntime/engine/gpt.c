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

/* ---------------------------------------------------------------- matrix products */

/* chunks per thread for the matrix products (HOLMES_GEMM_CHUNKS, default 4) */
static int gemm_chunks_per_thread(void)
{
    static int cached;
    if (!cached) {
        const char *v = getenv("HOLMES_GEMM_CHUNKS");
        int n = v ? atoi(v) : 0;
        cached = n >= 1 && n <= 64 ? n : 4;
    }
    return cached;
}

/* Row-major C[M,N] = alpha*op(A)[M,K]*op(B)[K,N] + beta*C, with OpenBLAS kept single-threaded
 * and the larger output dimension split across the OpenMP threads: one thread pool for the whole
 * engine, no hand-over between OpenBLAS's threads and OpenMP's. */
static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, float beta, float *Cm, int ldc)
{
    enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    int nt = omp_get_max_threads();
    double work = (double)M * N * K;
    if (nt <= 1 || work < 4e6 || omp_in_parallel()) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, ldc);
        return;
    }
    int split_n = N >= M;
    int total = split_n ? N : M;
    /* Chunks of whole 16-wide blocks, a few per thread, handed out dynamically: a thread that
     * loses its core to another process holds up only its current chunk, not half the product. */
    int blocks = (total + 15) / 16;
    int chunks = nt * gemm_chunks_per_thread();
    if (chunks > blocks / 4)
        chunks = blocks / 4 > nt ? blocks / 4 : nt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int ch = 0; ch < chunks; ch++) {
        int b0 = (int)((long)blocks * ch / chunks), b1 = (int)((long)blocks * (ch + 1) / chunks);
        int lo = b0 * 16, hi = b1 * 16 < total ? b1 * 16 : total;
        if (hi <= lo)
            continue;
        if (split_n) {
            const float *Bp = transB ? B + (size_t)lo * ldb : B + lo;
            cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda, Bp, ldb, beta,
                        Cm + lo, ldc);
        } else {
            const float *Ap = transA ? A + lo : A + (size_t)lo * lda;
            cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, 1.0f, Ap, lda, B, ldb, beta,
                        Cm + (size_t)lo * ldc, ldc);
        }
    }
}

double gpt_gemm_probe_tflops(int dim, int budget_ms, herr *e)
{
    if (dim < 16 || dim > 4096 || budget_ms < 1 || budget_ms > 10000) {
        herr_set(e, "gemm probe: dim %d must be in [16, 4096] and budget %d ms in [1, 10000]",
                 dim, budget_ms);
        return -1;
    }
    size_t n = (size_t)dim * dim;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        herr_set(e, "gemm probe: out of memory for %d x %d matrices", dim, dim);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)((i * 7 + 3) % 17) / 17.0f - 0.5f;
        b[i] = (float)((i * 5 + 1) % 13) / 13.0f - 0.5f;
    }
    openblas_set_num_threads(1); /* as gpt_stage_create leaves it */
    gemm(0, 1, dim, dim, dim, a, dim, b, dim, 0.0f, c, dim); /* warm-up: pages, thread pool */
    /* The best window of >= 5 ms: what the cores give when they are ours. Other processes
     * starting at the same time (every worker of a job probes at once) take whole windows,
     * not a share of every one. */
    double t0 = clock_mono_s(), t = t0, until = t0 + budget_ms / 1000.0, best = 0;
    double win_t0 = t0, win_s = budget_ms / 1000.0 < 0.02 ? budget_ms / 4000.0 : 0.005;
    long reps = 0, win_reps = 0;
    while (reps < 2 || t < until) {
        gemm(0, 1, dim, dim, dim, a, dim, b, dim, 0.0f, c, dim);
        reps++;
        win_reps++;
        t = clock_mono_s();
        if (t - win_t0 >= win_s) {
            double rate = (double)win_reps / (t - win_t0);
            if (rate > best)
                best = rate;
            win_t0 = t;
            win_reps = 0;
        }
    }
    free(a);
    free(b);
    free(c);
    if (best <= 0) {
        double secs = t - t0 > 1e-9 ? t - t0 : 1e-9;
        best = (double)reps / secs;
    }
    return 2.0 * dim * (double)dim * dim * best / 1e12;
}

/* out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias */
static void linear_forward(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC)
{
    if (bias) {
#pragma omp parallel for
        for (int r = 0; r < N; r++)
            memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float));
    }
    gemm(0, 1, N, OC, IC, inp, IC, w, IC, bias ? 1.0f : 0.0f, out, OC);
}

/* dinp[N,IC] = dout @ w (overwritten); dw[OC,IC] += dout^T @ inp; dbias[OC] += column sums */
static void linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC)
{
    gemm(0, 0, N, IC, OC, dout, OC, w, IC, 0.0f, dinp, IC);
    gemm(1, 0, OC, IC, N, dout, OC, inp, IC, 1.0f, dw, IC);
    if (dbias) {
#pragma omp parallel for
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int r = 0; r < N; r++) {
                const float *d = dout + (size_t)r * OC;
#pragma omp simd
                for (int o = o0; o < o1; o++)
                    dbias[o] += d[o];
            }
        }
    }
}

/* ---------------------------------------------------------------- element-wise layers */

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C)
{
#pragma omp parallel for
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float m = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int i = 0; i < C; i++)
            m += x[i];
        m /= (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int i = 0; i < C; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= (float)C;
        float rs = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)r * C;
#pragma omp simd
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - m) * rs * w[i] + b[i];
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* dinp += d(layernorm)/dinp; dw, db += parameter gradients */
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C)
{
#pragma omp parallel for
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        float m = mean[r], rs = rstd[r];
        float dmean = 0.0f, dnm = 0.0f;
#pragma omp simd reduction(+ : dmean, dnm)
        for (int i = 0; i < C; i++) {
            float dn = w[i] * d[i];
            dmean += dn;
            dnm += dn * (x[i] - m) * rs;
        }
        dmean /= (float)C;
        dnm /= (float)C;
        float *dx = dinp + (size_t)r * C;
#pragma omp simd
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * rs;
            dx[i] += (w[i] * d[i] - dmean - norm * dnm) * rs;
        }
    }
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int r = 0; r < N; r++) {
            const float *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
            float m = mean[r], rs = rstd[r];
#pragma omp simd
            for (int i = c0; i < c1; i++) {
                dw[i] += d[i] * (x[i] - m) * rs;
                db[i] += d[i];
            }
        }
    }
}

/* exp(x) for x <= 0 from a polynomial on [-ln2/2, ln2/2] and an exponent shift; relative error
 * ~1e-7, and it vectorises (the libm call does not without -ffast-math). */
static inline float exp_neg(float x)
{
    x = x < -87.0f ? -87.0f : x;
    /* round to nearest by adding and subtracting 1.5 * 2^23 (floorf is a libm call before
     * SSE4.1, which would stop the loops from vectorising) */
    float k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666667f
              + r * (0.0083333333f + r * 0.0013888889f)))));
    /* scale by 2^k in the exponent bits; memcpy (not a union) keeps it in registers, and the
     * unsigned add wraps instead of shifting a negative number */
    uint32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += (uint32_t)(int32_t)k << 23;
    memcpy(&p, &bits, sizeof p);
    return p;
}

/* max of x[0..n), in 8 independent lanes so that both gcc and clang vectorise it */
static inline float row_max(const float *x, int n)
{
    float m[8];
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    int v = 0;
    for (; v + 8 <= n; v += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[v + j] > m[j] ? x[v + j] : m[j];
    for (; v < n; v++)
        m[0] = x[v] > m[0] ? x[v] : m[0];
    float r = m[0];
    for (int j = 1; j < 8; j++)
        r = m[j] > r ? m[j] : r;
    return r;
}

/* tanh(u) = sign(u) * (1 - e) / (1 + e), e = exp(-2|u|) */
static inline float tanh_fast(float u)
{
    float a = fabsf(u);
    float e = exp_neg(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return u < 0.0f ? -t : t;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static void gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float t = tanh_fast(GELU_K * (x + 0.044715f * x * x * x));
        out[i] = 0.5f * x * (1.0f + t);
    }
}

/* d *= gelu'(inp), in place */
static void gelu_backward(float *d, const float *inp, size_t n)
{
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float t = tanh_fast(u);
        float sech2 = 1.0f - t * t;
        float g = 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] *= g;
    }
}

/* ---------------------------------------------------------------- attention */

/* qkv [B,T,3C] -> y [B,T,C]; att [B,NH,T,T] keeps the softmax rows (zero above the diagonal) */
static void attention_forward(float *y, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *A = att + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *row = A + (size_t)t * T;
                float mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float d = 0.0f;
#pragma omp simd reduction(+ : d)
                    for (int i = 0; i < hs; i++)
                        d += q[i] * k[i];
                    d *= scale;
                    row[t2] = d;
                    if (d > mx)
                        mx = d;
                }
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = exp_neg(row[t2] - mx);
                    row[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++)
                    row[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++)
                    row[t2] = 0.0f;
                float *yo = y + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++)
                    yo[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float a = row[t2];
#pragma omp simd
                    for (int i = 0; i < hs; i++)
                        yo[i] += a * v[i];
                }
            }
        }
}

/* dqkv (overwritten) from dy [B,T,C]; scratch holds B*NH*T floats */
static void attention_backward(float *dqkv, const float *dy, const float *att, const float *qkv,
                               float *scratch, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = 3 * (size_t)C;
    memset(dqkv, 0, (size_t)B * T * C3 * sizeof(float));
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *A = att + ((size_t)b * NH + h) * T * T;
            float *datt = scratch + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float *row = A + (size_t)t * T;
                const float *g = dy + ((size_t)b * T + t) * C + h * hs;
                /* through y = att @ v */
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float d = 0.0f, a = row[t2];
#pragma omp simd reduction(+ : d)
                    for (int i = 0; i < hs; i++) {
                        d += g[i] * v[i];
                        dv[i] += a * g[i];
                    }
                    datt[t2] = d;
                }
                /* through the softmax */
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++)
                    dot += row[t2] * datt[t2];
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    float dp = row[t2] * (datt[t2] - dot) * scale;
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
#pragma omp simd
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dp * k[i];
                        dk[i] += dp * q[i];
                    }
                }
            }
        }
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
        layernorm_forward(ln1, ln1m, ln1r, x, P + o->ln1w, P + o->ln1b, (int)BT, C);
        linear_forward(qkv, ln1, P + o->qkvw, P + o->qkvb, (int)BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        linear_forward(res2, atty, P + o->attprojw, P + o->attprojb, (int)BT, C, C);
#pragma omp parallel for simd
        for (size_t k = 0; k < BTC; k++)
            res2[k] += x[k];
        layernorm_forward(ln2, ln2m, ln2r, res2, P + o->ln2w, P + o->ln2b, (int)BT, C);
        linear_forward(fch, ln2, P + o->fcw, P + o->fcb, (int)BT, C, 4 * C);
        gelu_forward(fchg, fch, 4 * BTC);
        linear_forward(res3, fchg, P + o->fcprojw, P + o->fcprojb, (int)BT, 4 * C, C);
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
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, P + s->lnfw_off, P + s->lnfb_off,
                      (int)BT, C);
    linear_forward(a->logits, a->lnf, P + s->head_off, NULL, (int)BT, C, Vp);
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
        linear_backward(s->dbuf, G + s->head_off, NULL, a->logits, a->lnf, P + s->head_off,
                        (int)BT, C, Vp);
        memset(dres, 0, BTC * sizeof(float));
        layernorm_backward(dres, G + s->lnfw_off, G + s->lnfb_off, s->dbuf, x_out,
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
        linear_backward(s->dfch, G + o->fcprojw, G + o->fcprojb, dres, fchg, P + o->fcprojw,
                        (int)BT, 4 * C, C);
        gelu_backward(s->dfch, fch, 4 * BTC);
        linear_backward(s->dbuf, G + o->fcw, G + o->fcb, s->dfch, ln2, P + o->fcw, (int)BT, C,
                        4 * C);
        layernorm_backward(dres, G + o->ln2w, G + o->ln2b, s->dbuf, res2, P + o->ln2w, ln2m, ln2r,
                           (int)BT, C);
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        linear_backward(s->dbuf, G + o->attprojw, G + o->attprojb, dres, atty, P + o->attprojw,
                        (int)BT, C, C);
        attention_backward(s->dqkv, s->dbuf, att, qkv, s->datt_row, B, T, C, NH);
        linear_backward(s->dbuf, G + o->qkvw, G + o->qkvb, s->dqkv, ln1, P + o->qkvw, (int)BT, C,
                        3 * C);
        layernorm_backward(dres, G + o->ln1w, G + o->ln1b, s->dbuf, x, P + o->ln1w, ln1m, ln1r,
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
