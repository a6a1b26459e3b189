/* stage_bytes: the device memory a CUDA engine stage allocates (gpu_stage_device_bytes: the count
 * its creation makes before it allocates), as holmes-node's worker creates it (no whole-stage
 * moments: the trainer keeps its shard's). Needs no GPU. The planner's memory model
 * (operator/planner/cost_model.c, cost_stage_memory_parts) is held against it by
 * tests/integration/cuda_build.sh.
 * Usage: stage_bytes L C NH V T B FIRST LAST SLOTS TP
 *        stage_bytes -    (lines of those ten numbers on standard input, a count or "refused"
 *                          printed for each: one process for many stages, since loading
 *                          cuBLAS's libraries takes about 0.6 s of CPU a process) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cuda.h"

static const char *const names[10] = {"L", "C", "NH", "V", "T", "B", "FIRST", "LAST", "SLOTS", "TP"};

static int arg(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* the ten numbers of words[0..9] into v; 0, or -1 with the message in err */
static int parse(char **words, int v[10], char *err, size_t n)
{
    for (int i = 0; i < 10; i++)
        if (arg(words[i], 0, 1 << 24, &v[i]) != 0) {
            snprintf(err, n, "%s \"%s\" must be an integer in [0, 16777216]", names[i], words[i]);
            return -1;
        }
    return 0;
}

/* the stage's device bytes, 0 when the shape is refused */
static size_t bytes_of(const int v[10])
{
    struct gpt_config c = {.layers = v[0], .channels = v[1], .heads = v[2], .vocab = v[3],
                           .max_seq = v[4]};
    return gpu_stage_device_bytes(&c, v[6], v[7], v[5], v[4], v[8], GPU_NO_MOMENTS, v[9]);
}

/* stage_bytes -: a line of output for each line of input; 0, or 2 at a malformed line */
static int from_stdin(void)
{
    char line[512], err[160];
    for (int no = 1; fgets(line, sizeof line, stdin); no++) {
        char *words[11], *save = NULL;
        int n = 0, v[10];
        for (char *w = strtok_r(line, " \t\n", &save); w && n < 11; w = strtok_r(NULL, " \t\n", &save))
            words[n++] = w;
        if (n != 10) {
            fprintf(stderr, "stage_bytes: line %d: want 10 numbers (L C NH V T B FIRST LAST SLOTS TP), "
                            "got %d\n", no, n);
            return 2;
        }
        if (parse(words, v, err, sizeof err) != 0) {
            fprintf(stderr, "stage_bytes: line %d: %s\n", no, err);
            return 2;
        }
        size_t b = bytes_of(v);
        if (b)
            printf("%zu\n", b);
        else
            printf("refused\n");
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int v[10];
    char err[160];
    if (argc == 2 && strcmp(argv[1], "-") == 0)
        return from_stdin();
    if (argc != 11) {
        fprintf(stderr, "usage: stage_bytes L C NH V T B FIRST LAST SLOTS TP | stage_bytes -\n");
        return 2;
    }
    if (parse(argv + 1, v, err, sizeof err) != 0) {
        fprintf(stderr, "stage_bytes: %s\n", err);
        return 2;
    }
    size_t b = bytes_of(v);
    if (b == 0) {
        fprintf(stderr, "stage_bytes: the shape is refused (gpt_config_check, the layer range or "
                        "the tensor group)\n");
        return 1;
    }
    printf("%zu\n", b);
    return 0;
}
