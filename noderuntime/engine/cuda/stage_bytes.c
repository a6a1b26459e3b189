/* stage_bytes: the device memory a CUDA engine stage allocates (gpu_stage_device_bytes: the count
 * its creation makes before it allocates), as holmes-node's worker creates it (no whole-stage
 * moments: the trainer keeps its shard's). Needs no GPU. The planner's memory model
 * (operator/planner/cost_model.c, cost_stage_memory_parts) is held against it by
 * tests/integration/cuda_build.sh.
 * Usage: stage_bytes L C NH V T B FIRST LAST SLOTS TP */
#include <stdio.h>
#include <stdlib.h>

#include "gpt_cuda.h"

static int arg(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    int v[10];
    static const char *names[10] = {"L", "C", "NH", "V", "T", "B", "FIRST", "LAST", "SLOTS", "TP"};
    if (argc != 11) {
        fprintf(stderr, "usage: stage_bytes L C NH V T B FIRST LAST SLOTS TP\n");
        return 2;
    }
    for (int i = 0; i < 10; i++)
        if (arg(argv[i + 1], 0, 1 << 24, &v[i]) != 0) {
            fprintf(stderr, "stage_bytes: %s \"%s\" must be an integer in [0, 16777216]\n", names[i],
                    argv[i + 1]);
            return 2;
        }
    struct gpt_config c = {.layers = v[0], .channels = v[1], .heads = v[2], .vocab = v[3],
                           .max_seq = v[4]};
    size_t b = gpu_stage_device_bytes(&c, v[6], v[7], v[5], v[4], v[8], GPU_NO_MOMENTS, v[9]);
    if (b == 0) {
        fprintf(stderr, "stage_bytes: the shape is refused (gpt_config_check, the layer range or "
                        "the tensor group)\n");
        return 1;
    }
    printf("%zu\n", b);
    return 0;
}
