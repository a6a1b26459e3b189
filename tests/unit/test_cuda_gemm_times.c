/* noderuntime/engine/cuda/gemm_times.h (bench_gpu's "products by shape"): products of one shape
 * land in one entry (count, time and FLOPs summed), any field of the shape tells two apart, a
 * new shape past the capacity is refused (counted as not timed by the caller), and the entries
 * sort by time, the longest first, ties in their first order. */
#include "test.h"

#include "cuda/gemm_times.h"

int main(void)
{
    struct gpu_gemm_time t[4];
    int n = 0, rc = 0;
    rc |= gemm_times_add(t, &n, 4, 768, 16384, 768, 1, 0, 1, 2, 0.10);
    rc |= gemm_times_add(t, &n, 4, 768, 16384, 768, 1, 0, 1, 2, 0.12);
    rc |= gemm_times_add(t, &n, 4, 768, 16384, 768, 1, 0, 0, 2, 0.30); /* another epilogue */
    rc |= gemm_times_add(t, &n, 4, 768, 16384, 768, 0, 1, 1, 2, 0.05); /* other transposes */
    rc |= gemm_times_add(t, &n, 4, 768, 768, 16384, 0, 1, 0, 4, 0.30); /* fp32 out: a 4th */
    int full = gemm_times_add(t, &n, 4, 50304, 16384, 768, 1, 0, 0, 2, 1.0);
    if (rc == 0 && n == 4 && full == -1 && t[0].count == 2 && t[0].ms > 0.2199 && t[0].ms < 0.2201 &&
        t[0].flop == 2 * 2.0 * 768 * 16384 * 768 && t[1].count == 1 && t[3].out_bytes == 4)
        TEST_PASS("gemm_times.grouped_by_shape");
    else
        TEST_FAIL("gemm_times.grouped_by_shape", "rc %d, n %d, full %d, count %d, ms %g", rc, n,
                  full, t[0].count, t[0].ms);
    gemm_times_sort(t, n);
    /* 0.30 (epilogue 0, bf16), 0.30 (fp32: after it, as added), 0.22, 0.05 */
    if (t[0].ms == 0.30 && t[0].out_bytes == 2 && t[1].ms == 0.30 && t[1].out_bytes == 4 &&
        t[2].count == 2 && t[3].ms == 0.05)
        TEST_PASS("gemm_times.sorted_longest_first_stable");
    else
        TEST_FAIL("gemm_times.sorted_longest_first_stable", "%g %g %g %g", t[0].ms, t[1].ms,
                  t[2].ms, t[3].ms);
    TEST_MAIN_END();
}
