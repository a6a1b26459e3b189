/* The CPU engine's causal attention (gpt_layers.c: blocks of GPT_ATT_ROWS query rows, each a few
 * matrix products) against a plain attention computed in double: the output, the kept softmax
 * rows (zero above the diagonal), and the gradients of q, k and v; over several blocks with a
 * partial last one, whole and in uneven TeraPipe slices (forward in order, backward in reverse),
 * on scratch and outputs that start as garbage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_layers.h"
#include "test.h"

enum { B = 2, T = 2 * GPT_ATT_ROWS + 37, NH = 3, HS = 8, C = NH * HS, C3 = 3 * C };

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* The plain attention: y [B,T,C], p [B,NH,T,T], and from dy the gradient dqkv [B,T,3C]. */
static void reference(const float *qkv, const float *dy, double *y, double *p, double *dqkv)
{
    double scale = 1.0 / sqrt((double)HS);
    memset(dqkv, 0, sizeof(double) * B * T * C3);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * HS, *k = q + C, *v = q + 2 * C;
            double *P = p + ((size_t)b * NH + h) * T * T;
            double *dq = dqkv + (size_t)b * T * C3 + h * HS, *dk = dq + C, *dv = dq + 2 * C;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double d = 0;
                    for (int i = 0; i < HS && j <= t; i++)
                        d += (double)q[t * C3 + i] * k[j * C3 + i];
                    P[t * T + j] = j <= t ? d * scale : 0;
                    if (j <= t && P[t * T + j] > mx)
                        mx = P[t * T + j];
                }
                for (int j = 0; j <= t; j++)
                    sum += P[t * T + j] = exp(P[t * T + j] - mx);
                for (int j = 0; j <= t; j++)
                    P[t * T + j] /= sum;
                for (int i = 0; i < HS; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++)
                        a += P[t * T + j] * v[j * C3 + i];
                    y[((size_t)b * T + t) * C + h * HS + i] = a;
                }
                const float *g = dy + ((size_t)b * T + t) * C + h * HS;
                double dp[T], dot = 0;
                for (int j = 0; j <= t; j++) {
                    dp[j] = 0;
                    for (int i = 0; i < HS; i++) {
                        dp[j] += (double)g[i] * v[j * C3 + i];
                        dv[j * C3 + i] += P[t * T + j] * g[i];
                    }
                    dot += P[t * T + j] * dp[j];
                }
                for (int j = 0; j <= t; j++) {
                    double ds = P[t * T + j] * (dp[j] - dot) * scale;
                    for (int i = 0; i < HS; i++) {
                        dq[t * C3 + i] += ds * k[j * C3 + i];
                        dk[j * C3 + i] += ds * q[t * C3 + i];
                    }
                }
            }
        }
}

/* largest |a - b| over max(|b|, floor) */
static double worst(const float *a, const double *b, size_t n, double floor_)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(b[i]), floor_);
        if (!(d <= w))
            w = d;
    }
    return w;
}

/* The attention over slices cuts[0..ns] (cuts[0] = 0, cuts[ns] = T) against the reference. */
static void check(const char *name, const int *cuts, int ns, const float *qkv, const float *dy,
                  const double *ry, const double *rp, const double *rd)
{
    float *y = malloc(sizeof(float) * B * T * C), *att = malloc(sizeof(float) * B * NH * T * T);
    float *dqkv = calloc((size_t)B * T * C3, sizeof(float));
    float *scratch = malloc(sizeof(float) * B * NH * GPT_ATT_ROWS * T);
    float *dys = malloc(sizeof(float) * B * T * C);
    if (!y || !att || !dqkv || !scratch || !dys) {
        CHECK("allocation", 0);
        goto out;
    }
    for (size_t i = 0; i < (size_t)B * NH * T * T; i++)
        att[i] = NAN; /* garbage: every row must be written, zeros above the diagonal too */
    for (size_t i = 0; i < (size_t)B * T * C; i++)
        y[i] = NAN;
    for (size_t i = 0; i < (size_t)B * NH * GPT_ATT_ROWS * T; i++)
        scratch[i] = NAN;
    for (int s = 0; s < ns; s++)
        gpt_attention_forward(y, att, qkv, B, T, C, NH, cuts[s], cuts[s + 1]);
    for (int s = ns - 1; s >= 0; s--) {
        int t0 = cuts[s], t1 = cuts[s + 1];
        for (int b = 0; b < B; b++) /* dy of the slice's positions only: [B][t1 - t0][C] */
            memcpy(dys + (size_t)b * (t1 - t0) * C, dy + ((size_t)b * T + t0) * C,
                   sizeof(float) * (t1 - t0) * C);
        gpt_attention_backward(dqkv, dys, att, qkv, scratch, B, T, C, NH, t0, t1);
    }
    char label[160];
    /* y_t sums up to T terms p * v (|v| <= 2, the p summing to 1): in fp32 that is good to about
     * T * 2^-24 * 2 = 1.2e-5 absolute, however small y_t is after cancelling; so y is held to
     * 1e-5 of max(|y|, 1), the softmax rows (in [0, 1]) and the gradients to their own size. */
    double wy = worst(y, ry, (size_t)B * T * C, 1.0), wp = worst(att, rp, (size_t)B * NH * T * T, 1e-3);
    double wd = worst(dqkv, rd, (size_t)B * T * C3, 1e-2);
    snprintf(label, sizeof label, "%s: output = the plain attention's (%.1e <= 1e-5)", name, wy);
    CHECK(label, wy <= 1e-5);
    snprintf(label, sizeof label, "%s: softmax rows kept, zero above the diagonal (%.1e <= 1e-5)",
             name, wp);
    CHECK(label, wp <= 1e-5);
    snprintf(label, sizeof label, "%s: dq, dk, dv = the plain attention's (%.1e <= 1e-4)", name, wd);
    CHECK(label, wd <= 1e-4);
out:
    free(y);
    free(att);
    free(dqkv);
    free(scratch);
    free(dys);
}

int main(void)
{
    float *qkv = malloc(sizeof(float) * B * T * C3), *dy = malloc(sizeof(float) * B * T * C);
    double *ry = malloc(sizeof(double) * B * T * C), *rp = malloc(sizeof(double) * B * NH * T * T);
    double *rd = malloc(sizeof(double) * B * T * C3);
    if (!qkv || !dy || !ry || !rp || !rd) {
        CHECK("allocation", 0);
        TEST_MAIN_END();
    }
    unsigned seed = 7;
    for (size_t i = 0; i < (size_t)B * T * C3; i++)
        qkv[i] = 2.0f * frand(&seed);
    for (size_t i = 0; i < (size_t)B * T * C; i++)
        dy[i] = frand(&seed);
    reference(qkv, dy, ry, rp, rd);
    static const int whole[] = {0, T};
    check("whole", whole, 1, qkv, dy, ry, rp, rd);
    /* uneven, across block boundaries: 5, 30, 44 and 22 tokens */
    static const int sliced[] = {0, 5, 35, 79, T};
    check("4 uneven slices", sliced, 4, qkv, dy, ry, rp, rd);
    static const int ones[] = {0, 1, 2, 3, T};
    check("slices of one token, then the rest", ones, 4, qkv, dy, ry, rp, rd);
    free(qkv);
    free(dy);
    free(ry);
    free(rp);
    free(rd);
    TEST_MAIN_END();
}
