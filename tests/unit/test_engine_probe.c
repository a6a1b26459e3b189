/* engine_gpu_tflops in a binary without the CUDA engine (the CPU holmes-node, and this test):
 * it refuses at once, naming why, and reports no rate, so that a GPU worker of the CPU-only
 * binary is planned at the coordinator's assumed rate (the CUDA build's child process is
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
    TEST_MAIN_END();
}
