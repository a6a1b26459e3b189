/* The cuBLAS arguments of every matrix product of the GPU engine, as pure functions, so that the
 * CPU can check them (tests/unit/test_cuda_gemm_plan.c runs them through a column-major reference
 * GEMM with cuBLAS's semantics and compares with the row-major math of gpt.c).
 *
 * cuBLAS is column-major: a row-major X[r][c] with row length ld is the column-major X' (c x r).
 * A plan computes the column-major D(m x n) = op(A) op(B), op = transpose when ta / tb; strides
 * (sa, sb, sd) step through a batch. Which tensor is A and which is B is part of each plan. */
#ifndef HOLMES_GEMM_PLAN_H
#define HOLMES_GEMM_PLAN_H

struct gemm_plan {
    int ta, tb, m, n, k, lda, ldb, ldd;
    long long sa, sb, sd;
};

static inline struct gemm_plan gemm_plan_make(int ta, int tb, int m, int n, int k, int lda, int ldb,
                                              int ldd, long long sa, long long sb, long long sd)
{
    struct gemm_plan p = {ta, tb, m, n, k, lda, ldb, ldd, sa, sb, sd};
    return p;
}

/* Linear layers, row-major inp[N][IC], w[OC][IC], out[N][OC]. */
/* out = inp @ w^T:          A = w, B = inp, D = out */
static inline struct gemm_plan plan_linear_fwd(int N, int IC, int OC)
{
    return gemm_plan_make(1, 0, OC, N, IC, IC, IC, OC, 0, 0, 0);
}
/* dinp[N][IC] = dout @ w:   A = w, B = dout, D = dinp */
static inline struct gemm_plan plan_linear_dinp(int N, int IC, int OC)
{
    return gemm_plan_make(0, 0, IC, N, OC, IC, OC, IC, 0, 0, 0);
}
/* dw[OC][IC] = dout^T @ inp: A = inp, B = dout, D = dw */
static inline struct gemm_plan plan_linear_dw(int N, int IC, int OC)
{
    return gemm_plan_make(0, 1, IC, OC, N, IC, OC, IC, 0, 0, 0);
}

/* Attention, per (batch, head): row-major x[T][hs] (q, k, v, y and their gradients) and p[T][T]
 * (scores, probabilities and their gradients), batches of T*hs and T*T elements. */
/* p[t][t2] = sum_d x1[t][d] x2[t2][d]:  A = x2, B = x1, D = p
 * (scores: x1 = q, x2 = k; datt: x1 = dy, x2 = v) */
static inline struct gemm_plan plan_att_xxT(int T, int hs)
{
    return gemm_plan_make(1, 0, T, T, hs, hs, hs, T, (long long)T * hs, (long long)T * hs,
                          (long long)T * T);
}
/* x[t][d] = sum_t2 p[t][t2] x2[t2][d]:   A = x2, B = p, D = x
 * (y = att v; dq = dpre k) */
static inline struct gemm_plan plan_att_px(int T, int hs)
{
    return gemm_plan_make(0, 0, hs, T, T, hs, T, hs, (long long)T * hs, (long long)T * T,
                          (long long)T * hs);
}
/* x[t2][d] = sum_t p[t][t2] x1[t][d]:    A = x1, B = p, D = x
 * (dv = att^T dy; dk = dpre^T q) */
static inline struct gemm_plan plan_att_pTx(int T, int hs)
{
    return gemm_plan_make(0, 1, hs, T, T, hs, T, hs, (long long)T * hs, (long long)T * T,
                          (long long)T * hs);
}

#endif
