/* engine_gpu_probe's child process once OpenMP has run in the parent (as `holmes-node engines
 * --probe` runs the CPU engine's probes before the GPU's): libgomp's threads do not cross the
 * fork, and a parallel region in the child waited for them for ever, so the probe gave no answer
 * within its timeout. The child now runs its regions on its one thread. The probes here stand in
 * for the CUDA engine's (this binary defines engine_cuda_bf16_ops, which the CUDA holmes-node
 * takes from engine_cuda.c); each runs an OpenMP region, as the optimizer probe's host side may.
 * Also: the optimizer part failing alone leaves the compute rate and says why. */
#include <omp.h>
#include <string.h>

#include "test.h"

#include "clock.h"
#include "engine.h"

static int gbps_fails; /* set before a probe: its child inherits it */

static double parallel_sum(void)
{
    double s = 0;
#pragma omp parallel for reduction(+ : s)
    for (int i = 0; i < 1000000; i++)
        s += (double)i;
    return s;
}

static int fake_tflops(int n, double *tflops, herr *e)
{
    (void)n;
    (void)e;
    *tflops = parallel_sum() > 0 ? 123.0 : 0.0;
    return 0;
}

static int fake_gbps(int n, double *gbps, herr *e)
{
    (void)n;
    *gbps = 0;
    if (gbps_fails)
        return herr_set(e, "optimizer probe: out of device memory (test)");
    *gbps = parallel_sum() > 0 ? 456.0 : 0.0;
    return 0;
}

const struct engine_ops engine_cuda_bf16_ops = {
    .name = "cuda-bf16 (a stand-in)",
    .probe_tflops = fake_tflops,
    .probe_optimizer_gbps = fake_gbps,
};

int main(void)
{
    omp_set_num_threads(4);
    double s = parallel_sum(); /* the parent's OpenMP threads exist from here on */
    struct engine_gpu_rates r;
    herr e = {0};
    double t0 = clock_mono_s();
    int rc = engine_gpu_probe(1, 10.0, &r, &e);
    double dt = clock_mono_s() - t0;
    if (s > 0 && rc == 0 && r.tflops == 123.0 && r.gbps == 456.0 && r.gbps_why[0] == 0)
        TEST_PASS("engine_probe_child.openmp_after_fork");
    else
        TEST_FAIL("engine_probe_child.openmp_after_fork", "rc %d after %.1f s, %g TFLOPS, %g GB/s, '%s'",
                  rc, dt, r.tflops, r.gbps, e.msg);
    gbps_fails = 1;
    herr e2 = {0};
    rc = engine_gpu_probe(1, 10.0, &r, &e2);
    if (rc == 0 && r.tflops == 123.0 && r.gbps == 0 && strstr(r.gbps_why, "out of device memory"))
        TEST_PASS("engine_probe_child.optimizer_part_fails_alone");
    else
        TEST_FAIL("engine_probe_child.optimizer_part_fails_alone", "rc %d, %g TFLOPS, %g GB/s, '%s'",
                  rc, r.tflops, r.gbps, r.gbps_why);
    TEST_MAIN_END();
}
