/* The matrix products of a profiled step, by shape (bench_gpu's "products by shape"): each timed
 * product is added to the entry of its shape (m, n, k, transposes, epilogue, output bytes), the
 * entries sorted by time. Pure C, so that the CPU checks the grouping (test_cuda_gemm_times). */
#ifndef HOLMES_GEMM_TIMES_H
#define HOLMES_GEMM_TIMES_H

#define GPU_PROF_GEMMS 48 /* distinct shapes kept; the products of others are counted as lost */

struct gpu_gemm_time {
    int m, n, k, ta, tb, epi, out_bytes; /* cuBLAS's column-major view; out_bytes 2 (bf16) or 4 */
    int count;
    double ms, flop;                      /* summed over count products; flop = 2 m n k each */
};

/* Adds one product of ms milliseconds to t[0..*n) (at most cap entries): 0, or -1 when its
 * shape is new and t is full. */
static inline int gemm_times_add(struct gpu_gemm_time *t, int *n, int cap, int m, int nn, int k,
                                 int ta, int tb, int epi, int out_bytes, double ms)
{
    int i = 0;
    while (i < *n && !(t[i].m == m && t[i].n == nn && t[i].k == k && t[i].ta == ta &&
                       t[i].tb == tb && t[i].epi == epi && t[i].out_bytes == out_bytes))
        i++;
    if (i == *n) {
        if (*n >= cap)
            return -1;
        struct gpu_gemm_time z = {m, nn, k, ta, tb, epi, out_bytes, 0, 0.0, 0.0};
        t[(*n)++] = z;
    }
    t[i].count++;
    t[i].ms += ms;
    t[i].flop += 2.0 * m * (double)nn * k;
    return 0;
}

/* t[0..n) by time, the longest first (stable) */
static inline void gemm_times_sort(struct gpu_gemm_time *t, int n)
{
    for (int i = 1; i < n; i++) {
        struct gpu_gemm_time x = t[i];
        int j = i;
        for (; j > 0 && t[j - 1].ms < x.ms; j--)
            t[j] = t[j - 1];
        t[j] = x;
    }
}

#endif
