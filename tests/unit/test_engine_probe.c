/* engine_gpu_probe in a binary without the CUDA engine (the CPU holmes-node, and this test): it
 * refuses at once, naming why, and reports no rate, so that a GPU worker of the CPU-only binary is
 * planned at the coordinator's assumed rates (the CUDA build's child process is checked by
 * cuda_build.sh without a GPU and by worker_gpu.sh with one). */
#include <string.h>

#include "test.h"

#include "engine.h"

int main(void)
{
    struct engine_gpu_rates r;
    memset(&r, 0x5a, sizeof r); /* whatever the caller's struct held */
    herr e = {0};
    int rc = engine_gpu_probe(1, 5.0, &r, &e);
    if (rc == -1 && r.tflops == 0 && r.gbps == 0 && r.gbps_why[0] == 0 &&
        strstr(e.msg, "built without the CUDA engine"))
        TEST_PASS("engine_probe.no_cuda_engine_refused");
    else
        TEST_FAIL("engine_probe.no_cuda_engine_refused", "rc %d, %g TFLOPS, %g GB/s, '%s'", rc,
                  r.tflops, r.gbps, e.msg);
    TEST_MAIN_END();
}
