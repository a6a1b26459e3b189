/* The timed kernels of a profiled step, by kind and shape (bench_gpu's "products by shape",
 * "attention kernels" and "memory-bound kernels"): each timed launch is added to the entry of its kind and shape, the
 * entries sorted by time. Pure C, so that the CPU checks the grouping (test_cuda_kernel_times). */
#ifndef HOLMES_KERNEL_TIMES_H
#define HOLMES_KERNEL_TIMES_H

#define GPU_PROF_KERNELS 64 /* distinct entries kept; launches of others are counted as lost */

/* what was timed: a matrix product (m, n, k: cuBLAS's column-major view; ta, tb, epilogue,
 * output bytes), one of flash attention's kernels (m: sequences x heads, n: the pass's queries,
 * k: the head size), or a memory-bound kernel (m rows of n columns: LayerNorm's, the column sums
 * of the bias gradients and their finish, the classifier's), timed with the bytes it must move */
enum gpu_kernel_kind {
    GPU_KERNEL_PRODUCT, GPU_KERNEL_FLASH_FWD, GPU_KERNEL_FLASH_DSUM, GPU_KERNEL_FLASH_DKDV,
    GPU_KERNEL_FLASH_DQ, GPU_KERNEL_FLASH_DQ_DS, GPU_KERNEL_LN_FWD, GPU_KERNEL_LN_BWD, GPU_KERNEL_COLSUM,
    GPU_KERNEL_COLSUM_FINISH, GPU_KERNEL_CLASSIFIER, GPU_KERNEL_KINDS
};

static inline const char *gpu_kernel_kind_name(int kind)
{
    static const char *const names[GPU_KERNEL_KINDS] = {
        "product", "flash forward", "flash D", "flash dK dV", "flash dQ", "flash dQ (dS)", "layernorm fwd",
        "layernorm bwd", "column sums", "sums' finish", "classifier"};
    return kind >= 0 && kind < GPU_KERNEL_KINDS ? names[kind] : "?";
}

/* the table a kind is printed in: 0 products, 1 attention, 2 memory-bound */
static inline int gpu_kernel_group(int kind)
{
    return kind == GPU_KERNEL_PRODUCT ? 0 : kind <= GPU_KERNEL_FLASH_DQ_DS ? 1 : 2;
}

struct gpu_kernel_time {
    int kind, m, n, k, ta, tb, epi, out_bytes;
    int count;
    double ms, flop, bytes; /* summed over count launches */
};

/* Adds one launch of ms milliseconds, flop FLOPs and bytes of memory traffic to t[0..*n) (at
 * most cap entries): 0, or -1 when its kind and shape are new and t is full. */
static inline int kernel_times_add(struct gpu_kernel_time *t, int *n, int cap,
                                   const struct gpu_kernel_time *one, double ms, double flop,
                                   double bytes)
{
    int i = 0;
    while (i < *n && !(t[i].kind == one->kind && t[i].m == one->m && t[i].n == one->n &&
                       t[i].k == one->k && t[i].ta == one->ta && t[i].tb == one->tb &&
                       t[i].epi == one->epi && t[i].out_bytes == one->out_bytes))
        i++;
    if (i == *n) {
        if (*n >= cap)
            return -1;
        t[i] = *one;
        t[i].count = 0;
        t[i].ms = t[i].flop = t[i].bytes = 0.0;
        (*n)++;
    }
    t[i].count++;
    t[i].ms += ms;
    t[i].flop += flop;
    t[i].bytes += bytes;
    return 0;
}

/* a product's FLOPs: 2 m n k */
static inline double product_flop(int m, int n, int k) { return 2.0 * m * (double)n * k; }

/* flash attention's FLOPs over the visible query-key pairs of queries [q0, q1) (key <= query)
 * of bh sequences x heads, head size hs, counted as the products each kernel computes: forward
 * Q K^T and P V (4 hs a pair), dK dV recomputing S then dV, dP and dK (8), dQ recomputing S then
 * dP and dQ (6), or from the stored dS (2); D = rowsum(dY Y) 2 hs a query */
static inline double flash_flop(int kind, int bh, int q0, int q1, int hs)
{
    double pairs = ((double)q1 * (q1 + 1) - (double)q0 * (q0 + 1)) / 2.0;
    double per = kind == GPU_KERNEL_FLASH_FWD ? 4.0 : kind == GPU_KERNEL_FLASH_DKDV ? 8.0 :
                 kind == GPU_KERNEL_FLASH_DQ ? 6.0 : kind == GPU_KERNEL_FLASH_DQ_DS ? 2.0 : 0.0;
    if (kind == GPU_KERNEL_FLASH_DSUM)
        return 2.0 * hs * (double)bh * (q1 - q0);
    return per * hs * (double)bh * pairs;
}

/* t[0..n) by time, the longest first (stable) */
static inline void kernel_times_sort(struct gpu_kernel_time *t, int n)
{
    for (int i = 1; i < n; i++) {
        struct gpu_kernel_time x = t[i];
        int j = i;
        for (; j > 0 && t[j - 1].ms < x.ms; j--)
            t[j] = t[j - 1];
        t[j] = x;
    }
}

#endif
