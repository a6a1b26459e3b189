/* noderuntime/engine/cuda/kernel_times.h (bench_gpu's "products by shape", "attention kernels"
 * and "memory-bound kernels"): launches of one kind and shape land in one entry (count, time and FLOPs summed), any
 * field tells two apart, a new entry past the capacity is refused (counted as not timed by the
 * caller), the entries sort by time, the longest first, ties in their first order; and the
 * FLOPs counted for a product and for flash attention's kernels (visible pairs only). */
#include <string.h>

#include "test.h"

#include "cuda/kernel_times.h"

static struct gpu_kernel_time prod(int m, int n, int k, int ta, int tb, int epi, int ob)
{
    struct gpu_kernel_time t = {GPU_KERNEL_PRODUCT, m, n, k, ta, tb, epi, ob, 0, 0.0, 0.0, 0.0};
    return t;
}

int main(void)
{
    struct gpu_kernel_time t[4], a = prod(768, 16384, 768, 1, 0, 1, 2);
    struct gpu_kernel_time fl = {GPU_KERNEL_FLASH_FWD, 768, 16384, 768, 1, 0, 1, 2, 0, 0.0, 0.0, 0.0};
    int n = 0, rc = 0;
    double f = product_flop(768, 16384, 768);
    rc |= kernel_times_add(t, &n, 4, &a, 0.10, f, 0.0);
    rc |= kernel_times_add(t, &n, 4, &a, 0.12, f, 0.0);
    struct gpu_kernel_time b = prod(768, 16384, 768, 1, 0, 0, 2); /* another epilogue */
    rc |= kernel_times_add(t, &n, 4, &b, 0.30, f, 0.0);
    rc |= kernel_times_add(t, &n, 4, &fl, 0.05, 1.0, 0.0); /* another kind, the same numbers */
    struct gpu_kernel_time c = prod(768, 768, 16384, 0, 1, 0, 4), e5 = prod(768, 768, 16384, 0, 1, 0, 2);
    rc |= kernel_times_add(t, &n, 4, &c, 0.30, f, 0.0); /* fp32 out: the 4th */
    int full = kernel_times_add(t, &n, 4, &e5, 0.30, f, 0.0); /* bf16 out: a 5th, no room */
    if (rc == 0 && n == 4 && full == -1 && t[0].count == 2 && t[0].ms > 0.2199 && t[0].ms < 0.2201 &&
        t[0].flop == 2 * 2.0 * 768 * 16384 * 768 && t[1].count == 1 && t[2].kind == GPU_KERNEL_FLASH_FWD &&
        t[3].out_bytes == 4)
        TEST_PASS("kernel_times.grouped_by_kind_and_shape");
    else
        TEST_FAIL("kernel_times.grouped_by_kind_and_shape", "rc %d, n %d, full %d, count %d, ms %g",
                  rc, n, full, t[0].count, t[0].ms);
    struct gpu_kernel_time d = prod(1, 1, 1, 0, 0, 0, 2);
    n = 3; /* drop the 4th: room for one more */
    rc = kernel_times_add(t, &n, 4, &d, 0.30, 2.0, 0.0);
    kernel_times_sort(t, n);
    /* 0.30 (epilogue 0), 0.30 (the 1x1x1, after it as added), 0.22, 0.05 */
    if (rc == 0 && t[0].ms == 0.30 && t[0].m == 768 && t[1].ms == 0.30 && t[1].m == 1 &&
        t[2].count == 2 && t[3].ms == 0.05)
        TEST_PASS("kernel_times.sorted_longest_first_stable");
    else
        TEST_FAIL("kernel_times.sorted_longest_first_stable", "%g %g %g %g", t[0].ms, t[1].ms,
                  t[2].ms, t[3].ms);
    /* flash: T = 4, the whole sequence: 10 visible pairs; a slice [2, 4): 3 + 4 = 7 pairs */
    if (flash_flop(GPU_KERNEL_FLASH_FWD, 3, 0, 4, 64) == 4.0 * 64 * 3 * 10 &&
        flash_flop(GPU_KERNEL_FLASH_DKDV, 1, 2, 4, 16) == 8.0 * 16 * 7 &&
        flash_flop(GPU_KERNEL_FLASH_DQ, 1, 0, 1, 16) == 6.0 * 16 &&
        flash_flop(GPU_KERNEL_FLASH_DSUM, 2, 2, 4, 8) == 2.0 * 8 * 2 * 2)
        TEST_PASS("kernel_times.flash_flops_of_visible_pairs");
    else
        TEST_FAIL("kernel_times.flash_flops_of_visible_pairs", "forward %g",
                  flash_flop(GPU_KERNEL_FLASH_FWD, 3, 0, 4, 64));
    /* the memory-bound kinds: their own table, bytes summed over launches (GB/s = bytes / ms) */
    struct gpu_kernel_time ln = {GPU_KERNEL_LN_BWD, 16384, 768, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0};
    struct gpu_kernel_time m[2];
    int nm = 0;
    rc = kernel_times_add(m, &nm, 2, &ln, 0.03, 0.0, 1e8);
    rc |= kernel_times_add(m, &nm, 2, &ln, 0.05, 0.0, 1e8);
    if (rc == 0 && nm == 1 && m[0].count == 2 && m[0].bytes == 2e8 && m[0].flop == 0.0 &&
        gpu_kernel_group(GPU_KERNEL_PRODUCT) == 0 && gpu_kernel_group(GPU_KERNEL_FLASH_FWD) == 1 &&
        gpu_kernel_group(GPU_KERNEL_FLASH_DQ) == 1 && gpu_kernel_group(GPU_KERNEL_LN_FWD) == 2 &&
        gpu_kernel_group(GPU_KERNEL_CLASSIFIER) == 2 &&
        strcmp(gpu_kernel_kind_name(GPU_KERNEL_CLASSIFIER), "classifier") == 0 &&
        strcmp(gpu_kernel_kind_name(GPU_KERNEL_KINDS), "?") == 0)
        TEST_PASS("kernel_times.memory_bound_kinds");
    else
        TEST_FAIL("kernel_times.memory_bound_kinds", "rc %d, n %d, count %d, bytes %g", rc, nm,
                  m[0].count, m[0].bytes);
    TEST_MAIN_END();
}
