/* The CPU engine's layers; see gpt_layers.h. */
#include "gpt_layers.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gpt.h"

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
void gpt_linear_forward(float *out, const float *inp, const float *w, const float *bias,
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
void gpt_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
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

void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
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
void gpt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
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

/* tanh(u) = sign(u) * (1 - e) / (1 + e), e = exp(-2|u|) */
static inline float tanh_fast(float u)
{
    float a = fabsf(u);
    float e = exp_neg(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return u < 0.0f ? -t : t;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void gpt_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float t = tanh_fast(GELU_K * (x + 0.044715f * x * x * x));
        out[i] = 0.5f * x * (1.0f + t);
    }
}

/* d *= gelu'(inp), in place */
void gpt_gelu_backward(float *d, const float *inp, size_t n)
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

/* Attention works on blocks of GPT_ATT_ROWS query rows: each block's scores against the keys up
 * to its last row are one matrix product (OpenBLAS, single-threaded inside the heads' OpenMP
 * loop), as are its products with v (and in backward with k, q and the output gradient). A
 * block computes at most GPT_ATT_ROWS - 1 masked scores per row more than the causal triangle. */
static void sgemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *Bm, int ldb, float beta, float *Cm, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
}

/* Row t of the scores (keys [0, t] valid) becomes its softmax; the rest of the row, to T, 0. */
static void softmax_causal_row(float *row, int t, int T)
{
    float mx = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++)
        mx = row[t2] > mx ? row[t2] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) {
        float e = exp_neg(row[t2] - mx);
        row[t2] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int t2 = 0; t2 <= t; t2++)
        row[t2] *= inv;
    memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
}

/* qkv [B,T,3C] -> y [B,T,C]; att [B,NH,T,T] keeps the softmax rows (zero above the diagonal) */
void gpt_attention_forward(float *y, float *att, const float *qkv, int B, int T, int C, int NH,
                           int t0, int t1)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            float *A = att + ((size_t)b * NH + h) * T * T;
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
            float *yb = y + (size_t)b * T * C + h * hs;
            for (int r0 = t0; r0 < t1; r0 += GPT_ATT_ROWS) {
                int r1 = r0 + GPT_ATT_ROWS < t1 ? r0 + GPT_ATT_ROWS : t1, n = r1 - r0;
                float *S = A + (size_t)r0 * T; /* rows [r0, r1), keys [0, r1) */
                sgemm_rm(0, 1, n, r1, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, S, T);
                for (int i = 0; i < n; i++)
                    softmax_causal_row(S + (size_t)i * T, r0 + i, T);
                sgemm_rm(0, 0, n, hs, r1, 1.0f, S, T, v, C3, 0.0f, yb + (size_t)r0 * C, C);
            }
        }
}

void gpt_attention_backward(float *dqkv, const float *dy, const float *att, const float *qkv,
                            float *scratch, int B, int T, int C, int NH, int t0, int t1)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t rows = (size_t)(t1 - t0);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *A = att + ((size_t)b * NH + h) * T * T;
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
            float *dS = scratch + ((size_t)b * NH + h) * GPT_ATT_ROWS * T; /* [n][r1] */
            for (int r0 = t0; r0 < t1; r0 += GPT_ATT_ROWS) {
                int r1 = r0 + GPT_ATT_ROWS < t1 ? r0 + GPT_ATT_ROWS : t1, n = r1 - r0;
                const float *P = A + (size_t)r0 * T;
                const float *g = dy + ((size_t)b * rows + (size_t)(r0 - t0)) * C + h * hs;
                /* through y = att @ v: d(att) = g v^T, dv += att^T g */
                sgemm_rm(0, 1, n, r1, hs, 1.0f, g, C, v, C3, 0.0f, dS, r1);
                sgemm_rm(1, 0, r1, hs, n, 1.0f, P, T, g, C, 1.0f, dv, C3);
                /* through the softmax, into the scaled scores' gradient (0 above the diagonal) */
                for (int i = 0; i < n; i++) {
                    const float *pr = P + (size_t)i * T;
                    float *dr = dS + (size_t)i * r1, dot = 0.0f;
                    int t = r0 + i;
                    for (int t2 = 0; t2 <= t; t2++)
                        dot += pr[t2] * dr[t2];
#pragma omp simd
                    for (int t2 = 0; t2 <= t; t2++)
                        dr[t2] = pr[t2] * (dr[t2] - dot) * scale;
                    for (int t2 = t + 1; t2 < r1; t2++)
                        dr[t2] = 0.0f;
                }
                /* scores = q k^T: dq += dS k, dk += dS^T q */
                sgemm_rm(0, 0, n, hs, r1, 1.0f, dS, r1, k, C3, 1.0f, dq + (size_t)r0 * C3, C3);
                sgemm_rm(1, 0, r1, hs, n, 1.0f, dS, r1, q + (size_t)r0 * C3, C3, 1.0f, dk, C3);
            }
        }
}
