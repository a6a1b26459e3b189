/* holmes-node engines: the training engines this binary has, one per line (cpu; cuda-fp32 and
 * cuda-bf16 in the CUDA build), so a launcher can tell before it starts GPU ranks; with --probe,
 * each with the compute rate and the memory bandwidth a worker reports to the planner (measured
 * or read as the worker does). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "gpt.h"
#include "optimizer.h"

/* The rate a worker would report for engine i: the CPU engine's fp32 product (200 ms, its best
 * window), the CUDA bf16 engine's product on GPU 0 (in a child process). */
static void print_rate(int i)
{
    herr e = {0};
    if (i == 0) {
        double t = gpt_gemm_probe_tflops(256, 200, &e);
        if (t > 0)
            printf(" %.4g TFLOPS (measured: fp32 matrix product)", t);
        else
            printf(" (no rate: %s)", e.msg);
        double g = optimizer_probe_gbps(OPTIMIZER_PROBE_PARAMS, OPTIMIZER_PROBE_STEPS, &e);
        if (g > 0)
            printf(", %.4g GB/s memory (measured: the optimizer's norm and AdamW)", g);
        else
            printf(", (no memory bandwidth: %s)", e.msg);
    } else if (i == 2) {
        struct engine_gpu_rates r;
        if (engine_gpu_probe(1, 60.0, &r, &e) == 0) {
            printf(" %.4g TFLOPS (measured: bf16 matrix product on GPU 0)", r.tflops);
            if (r.gbps > 0)
                printf(", %.4g GB/s memory (measured: the optimizer's norm and AdamW)", r.gbps);
            else
                printf(", (no optimizer rate: %s)", r.gbps_why);
        } else {
            printf(" (no rate: %s)", e.msg);
        }
        double g = 0;
        if (engine_gpu_memory_gbps(1, &g, &e) == 0)
            printf(", %.4g GB/s peak memory (of GPU 0)", g);
        else
            printf(", (no memory bandwidth: %s)", e.msg);
    }
}

int cmd_engines(int argc, char **argv)
{
    int probe = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: holmes-node engines [--probe]\n"
                   "Prints the training engines this binary has, one per line: cpu (fp32), and in a\n"
                   "CUDA build (make cuda) cuda-fp32 and cuda-bf16.\n"
                   "  --probe   also measure the compute rate and the memory bandwidth a worker\n"
                   "            reports to the planner: the CPU engine's fp32 matrix product and\n"
                   "            its optimizer's norm and AdamW; the CUDA engine's bf16 product on\n"
                   "            GPU 0 (a child process; about a second) and GPU 0's peak memory\n"
                   "            bandwidth\n");
            return 0;
        }
        if (!strcmp(argv[i], "--probe")) {
            probe = 1;
            continue;
        }
        fprintf(stderr, "holmes-node engines: unexpected argument %s (see --help)\n", argv[i]);
        return 2;
    }
    static const struct {
        enum engine_kind kind;
        enum dtype precision;
        const char *name;
    } all[] = {{ENGINE_CPU, DTYPE_FP32, "cpu"},
               {ENGINE_CUDA, DTYPE_FP32, "cuda-fp32"},
               {ENGINE_CUDA, DTYPE_BF16, "cuda-bf16"}};
    for (int i = 0; i < (int)(sizeof all / sizeof all[0]); i++) {
        char why[256];
        if (!engine_available(all[i].kind, all[i].precision, why, sizeof why))
            continue;
        printf("%s", all[i].name);
        if (probe)
            print_rate(i);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
