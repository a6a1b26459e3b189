/* make bench-gpu: one whole-model stage on one GPU, forward + backward + global-norm clipping +
 * AdamW per step; median ms/step, tokens/s, model TFLOP/s and MFU against a peak.
 * Usage: bench_gpu L C NH V B T steps [peak_tflops (default 989: H100 SXM bf16 dense) [flags]]
 *        (flags: gpu_stage_create's, 1 = GPU_RECOMPUTE_GELU)
 *        bench_gpu --gemm N iters    (the GEMM ceiling: an NxNxN product, same path and type) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gpt_cuda.h"
#include "optimizer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    herr e;
    char dev[256];
    if (gpu_device_name(dev, sizeof dev, &e) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", e.msg);
        return 1;
    }
    if (argc == 4 && !strcmp(argv[1], "--gemm")) {
        double tf;
        int n = atoi(argv[2]);
        if (gpu_gemm_tflops(n, atoi(argv[3]), &tf, &e) < 0) {
            fprintf(stderr, "bench_gpu: %s\n", e.msg);
            return 1;
        }
        printf("gemm %s %dx%dx%d on %s: %.0f TFLOP/s (median)\n", gpu_precision_name(), n, n, n,
               dev, tf);
        return 0;
    }
    if (argc < 8 || argc > 10) {
        fprintf(stderr, "usage: %s L C NH V B T steps [peak_tflops [flags]] | --gemm N iters\n",
                argv[0]);
        return 2;
    }
    struct gpt_config c = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 1024};
    int B = atoi(argv[5]), T = atoi(argv[6]), steps = atoi(argv[7]);
    double peak = argc >= 9 ? atof(argv[8]) : 989.0;
    int flags = argc == 10 ? atoi(argv[9]) : 0;
    struct gpu_stage *s;
    if (steps < 1 || gpu_stage_create(&s, &c, 0, c.layers, B, T, 1, flags, &e) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", steps < 1 ? "steps must be >= 1" : e.msg);
        return 1;
    }
    size_t n = gpu_stage_num_params(s), BT = (size_t)B * T;
    int *tok = malloc(BT * sizeof(int)), *tgt = malloc(BT * sizeof(int));
    double *ms = malloc((size_t)steps * sizeof(double));
    if (!tok || !tgt || !ms || gpu_stage_init_params(s, 1) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", !tok || !tgt || !ms ? "out of memory" : gpu_stage_error(s));
        return 1;
    }
    unsigned r = 1;
    for (size_t i = 0; i < BT; i++) {
        r = r * 1103515245u + 12345u;
        tok[i] = (int)((r >> 8) % (unsigned)c.vocab);
        r = r * 1103515245u + 12345u;
        tgt[i] = (int)((r >> 8) % (unsigned)c.vocab);
    }
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    float loss = 0.0f;
    for (int k = -2; k < steps; k++) { /* two warm-up steps, not counted */
        double t0 = clock_mono_s(), sq;
        if (gpu_stage_zero_grads(s) < 0 || gpu_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss) < 0 ||
            gpu_stage_backward(s, 0, NULL, NULL, 1.0f) < 0 ||
            gpu_stage_grad_sq_norm(s, 0, n, &sq) < 0 ||
            gpu_stage_adamw(s, &o, 0, n, 1e-4f, k + 3, grad_clip_scale(sq, 1.0f)) < 0 ||
            gpu_stage_sync(s) < 0) {
            fprintf(stderr, "bench_gpu: %s\n", gpu_stage_error(s));
            return 1;
        }
        if (k >= 0)
            ms[k] = (clock_mono_s() - t0) * 1e3;
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    double med = ms[steps / 2], tflops = gpu_stage_flops(s) / (med / 1e3) / 1e12;
    printf("holmes %s%s L%d C%d NH%d V%d B%d T%d on %s: params %.1fM, median %.1f ms/step "
           "(min %.1f, max %.1f, %d steps), %.0f tokens/s, %.0f TFLOP/s, MFU %.1f%% of %.0f, "
           "loss %.4f\n",
           gpu_precision_name(), flags & GPU_RECOMPUTE_GELU ? " recompute-gelu" : "", c.layers, c.channels, c.heads, c.vocab, B, T, dev, n / 1e6, med,
           ms[0], ms[steps - 1], steps, BT / (med / 1e3), tflops, 100.0 * tflops / peak, peak, loss);
    gpu_stage_free(s);
    free(tok);
    free(tgt);
    free(ms);
    return 0;
}
