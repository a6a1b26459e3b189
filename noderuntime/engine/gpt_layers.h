/* The layers of the CPU engine, each forward beside its backward (after llm.c's train_gpt2.c):
 * matrix products (OpenBLAS, split across OpenMP threads), layernorm, GELU, causal attention.
 * gpt.c builds a pipeline stage from them. Shapes: B sequences of T tokens, C channels, NH heads;
 * every array row-major. Private to the engine. */
#ifndef HOLMES_GPT_LAYERS_H
#define HOLMES_GPT_LAYERS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

void gpt_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                               int N, int IC, int OC);
void gpt_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int IC, int OC);
void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C);
void gpt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C);
void gpt_gelu_forward(float *out, const float *inp, size_t n);
void gpt_gelu_backward(float *d, const float *inp, size_t n);
/* Causal attention of B sequences of T positions (qkv [B,T,3C] rows q, k, v; y [B,T,C]; att
 * [B,NH,T,T] the softmax rows kept for backward), for the queries at positions [t0, t1) only:
 * each attends to the keys and values at [0, t]. (0, T) is the whole; TeraPipe slices call it
 * slice by slice, in order, the earlier positions' k and v already in qkv. */
void gpt_attention_forward(float *y, float *att, const float *qkv, int B, int T, int C, int NH,
                           int t0, int t1);
/* Query rows per block of the attention's matrix products (gpt_layers.c) */
#define GPT_ATT_ROWS 32
/* Its backward for the queries at [t0, t1): dy [B][t1 - t0][C] (those positions only) adds into
 * dqkv [B,T,3C]: the queries' gradients at [t0, t1) and the keys' and values' at [0, t1), which
 * the earlier slices' backward (called later, slices in reverse) then uses. The caller zeroes
 * dqkv before the first call. scratch holds B*NH*GPT_ATT_ROWS*T floats. */
void gpt_attention_backward(float *dqkv, const float *dy, const float *att, const float *qkv,
                            float *scratch, int B, int T, int C, int NH, int t0, int t1);

#endif
