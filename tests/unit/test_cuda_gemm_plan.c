/* The GPU engine's cuBLAS arguments (noderuntime/engine/cuda/gemm_plan.h), checked on the CPU: each plan
 * goes through a column-major GEMM with cuBLAS's semantics and must give the row-major product
 * it is documented to compute, on random data, with batches and non-square shapes. */
#include <stdint.h>
#include <stdlib.h>

#include "cuda/gemm_plan.h"
#include "test.h"

static uint64_t st = 12345;
static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((st >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
}

/* cuBLAS: D(m x n) = op(A) op(B), column-major, element (r, c) of X at X[c*ld + r] */
static void ref_gemm(const struct gemm_plan *p, int batch, const float *A, const float *B, float *D)
{
    for (int b = 0; b < batch; b++) {
        const float *a = A + b * p->sa, *bb = B + b * p->sb;
        float *d = D + b * p->sd;
        for (int i = 0; i < p->m; i++)
            for (int j = 0; j < p->n; j++) {
                double acc = 0.0;
                for (int q = 0; q < p->k; q++) {
                    double av = p->ta ? a[(size_t)i * p->lda + q] : a[(size_t)q * p->lda + i];
                    double bv = p->tb ? bb[(size_t)q * p->ldb + j] : bb[(size_t)j * p->ldb + q];
                    acc += av * bv;
                }
                d[(size_t)j * p->ldd + i] = (float)acc;
            }
    }
}

static double maxdiff(const float *x, const float *y, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i] - y[i]) > m ? fabs(x[i] - y[i]) : m;
    return m;
}

#define CHECK_SAME(name, got, want, n) do { double d_ = maxdiff(got, want, n); \
        if (d_ < 1e-5) TEST_PASS(name); else TEST_FAIL(name, "max difference %g", d_); } while (0)

static void linear(int N, int IC, int OC)
{
    float *inp = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC);
    float *dout = malloc(sizeof(float) * N * OC), *got = malloc(sizeof(float) * N * IC * OC);
    float *want = malloc(sizeof(float) * N * IC * OC);
    if (!inp || !w || !dout || !got || !want) {
        TEST_FAIL("plan.linear", "out of memory");
        return;
    }
    fill(inp, (size_t)N * IC);
    fill(w, (size_t)OC * IC);
    fill(dout, (size_t)N * OC);
    struct gemm_plan p = plan_linear_fwd(N, IC, OC);
    ref_gemm(&p, 1, w, inp, got);
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) {
            double a = 0;
            for (int i = 0; i < IC; i++) a += inp[r * IC + i] * w[o * IC + i];
            want[r * OC + o] = (float)a;
        }
    CHECK_SAME("plan.linear_fwd out = inp w^T", got, want, (size_t)N * OC);
    p = plan_linear_dinp(N, IC, OC);
    ref_gemm(&p, 1, w, dout, got);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < IC; i++) {
            double a = 0;
            for (int o = 0; o < OC; o++) a += dout[r * OC + o] * w[o * IC + i];
            want[r * IC + i] = (float)a;
        }
    CHECK_SAME("plan.linear_dinp dinp = dout w", got, want, (size_t)N * IC);
    p = plan_linear_dw(N, IC, OC);
    ref_gemm(&p, 1, inp, dout, got);
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) {
            double a = 0;
            for (int r = 0; r < N; r++) a += dout[r * OC + o] * inp[r * IC + i];
            want[o * IC + i] = (float)a;
        }
    CHECK_SAME("plan.linear_dw dw = dout^T inp", got, want, (size_t)OC * IC);
    free(inp); free(w); free(dout); free(got); free(want);
}

static void attention(int batch, int T, int hs)
{
    size_t nx = (size_t)batch * T * hs, np = (size_t)batch * T * T;
    float *x1 = malloc(nx * sizeof(float)), *x2 = malloc(nx * sizeof(float));
    float *pp = malloc(np * sizeof(float)), *got = malloc(np * sizeof(float));
    float *want = malloc(np * sizeof(float));
    if (!x1 || !x2 || !pp || !got || !want) {
        TEST_FAIL("plan.attention", "out of memory");
        return;
    }
    fill(x1, nx);
    fill(x2, nx);
    fill(pp, np);
    struct gemm_plan p = plan_att_xxT(T, hs);
    ref_gemm(&p, batch, x2, x1, got);
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < T; t++)
            for (int t2 = 0; t2 < T; t2++) {
                double a = 0;
                for (int d = 0; d < hs; d++)
                    a += x1[((size_t)b * T + t) * hs + d] * x2[((size_t)b * T + t2) * hs + d];
                want[((size_t)b * T + t) * T + t2] = (float)a;
            }
    CHECK_SAME("plan.att_xxT scores = q k^T", got, want, np);
    p = plan_att_px(T, hs);
    ref_gemm(&p, batch, x2, pp, got);
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hs; d++) {
                double a = 0;
                for (int t2 = 0; t2 < T; t2++)
                    a += pp[((size_t)b * T + t) * T + t2] * x2[((size_t)b * T + t2) * hs + d];
                want[((size_t)b * T + t) * hs + d] = (float)a;
            }
    CHECK_SAME("plan.att_px y = att v", got, want, nx);
    p = plan_att_pTx(T, hs);
    ref_gemm(&p, batch, x1, pp, got);
    for (int b = 0; b < batch; b++)
        for (int t2 = 0; t2 < T; t2++)
            for (int d = 0; d < hs; d++) {
                double a = 0;
                for (int t = 0; t < T; t++)
                    a += pp[((size_t)b * T + t) * T + t2] * x1[((size_t)b * T + t) * hs + d];
                want[((size_t)b * T + t2) * hs + d] = (float)a;
            }
    CHECK_SAME("plan.att_pTx dv = att^T dy", got, want, nx);
    free(x1); free(x2); free(pp); free(got); free(want);
}

int main(void)
{
    linear(7, 5, 11);
    linear(12, 16, 48);
    attention(3, 9, 4);
    attention(2, 16, 8);
    TEST_MAIN_END();
}
