/* engine_gpu_tflops and engine_gpu_probe in a binary without the CUDA engine (the CPU
 * holmes-node, and this test): they refuse at once, naming why, and report no rate, so that a GPU
 * worker of the CPU-only binary is planned at the coordinator's assumed rates (the CUDA build's child process is
 * checked by cuda_build.sh without a GPU and by worker_gpu.sh with one). */
#include <string.h>

#include "test.h"

#include "engine.h"

int main(void)
{
    herr e = {0};
    double t = -1;
    int rc = engine_gpu_tflops(1, 5.0, &t, &e);
    if (rc == -1 && t == 0 && strstr(e.msg, "built without the CUDA engine"))
        TEST_PASS("engine_probe.no_cuda_engine_refused");
    else
        TEST_FAIL("engine_probe.no_cuda_engine_refused", "rc %d, rate %g, '%s'", rc, t, e.msg);
    struct engine_gpu_rates r;
    memset(&r, 0x5a, sizeof r); /* whatever the caller's struct held */
    herr e2 = {0};
    rc = engine_gpu_probe(1, 5.0, &r, &e2);
    if (rc == -1 && r.tflops == 0 && r.gbps == 0 && r.gbps_why[0] == 0 &&
        strstr(e2.msg, "built without the CUDA engine"))
        TEST_PASS("engine_probe.rates_none_without_cuda");
    else
        TEST_FAIL("engine_probe.rates_none_without_cuda", "rc %d, %g TFLOPS, %g GB/s, '%s'", rc,
                  r.tflops, r.gbps, e2.msg);
    TEST_MAIN_END();
}
