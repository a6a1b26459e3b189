/* make bench-cpu: ms per training step (forward + backward + AdamW) of one whole-model stage,
 * tokens/s, GFLOP/s and peak RSS. Usage: bench_gpt L C NH V B T steps */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "gpt.h"
#include "optimizer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The matrix-product ceiling on this machine: C[1024,1024] = A @ B^T, OpenBLAS single-threaded
 * per OpenMP thread, columns split between the threads (as the engine runs them); best of 5. */
static double sgemm_ceiling(void)
{
    enum { D = 1024 };
    float *a = calloc((size_t)D * D, sizeof(float)), *b = calloc((size_t)D * D, sizeof(float));
    float *c = calloc((size_t)D * D, sizeof(float));
    double best = 1e30;
    for (int r = 0; r < 5 && a && b && c; r++) {
        double t0 = now();
#pragma omp parallel
        {
            int id = omp_get_thread_num(), nt = omp_get_num_threads();
            int lo = D * id / nt, hi = D * (id + 1) / nt;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, D, hi - lo, D, 1.0f, a, D,
                        b + (size_t)lo * D, D, 0.0f, c + lo, D);
        }
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * D * D * D / best / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s L C NH V B T steps\n", argv[0]);
        return 2;
    }
    struct gpt_config c = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 1024};
    int B = atoi(argv[5]), T = atoi(argv[6]), steps = atoi(argv[7]);
    herr e;
    struct gpt_stage *s;
    if (steps < 1 || gpt_stage_create(&s, &c, 0, c.layers, B, T, 1, &e) < 0) {
        fprintf(stderr, "bench_gpt: %s\n", steps < 1 ? "steps must be >= 1" : e.msg);
        return 1;
    }
    gpt_stage_init_params(s, 1);
    size_t n = gpt_stage_num_params(s);
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    int *tok = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
    double *ms = malloc((size_t)steps * sizeof(double));
    if (!m || !v || !tok || !tgt || !ms) {
        fprintf(stderr, "bench_gpt: out of memory\n");
        return 1;
    }
    unsigned r = 1;
    for (int i = 0; i < B * T; i++) {
        r = r * 1103515245u + 12345u;
        tok[i] = (int)((r >> 8) % (unsigned)c.vocab);
        r = r * 1103515245u + 12345u;
        tgt[i] = (int)((r >> 8) % (unsigned)c.vocab);
    }
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(s, &t);
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    float loss = 0.0f;
    for (int k = 0; k <= steps; k++) { /* step 0 warms up and is not counted */
        double t0 = now();
        gpt_stage_zero_grads(s);
        if (gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss) < 0 ||
            gpt_stage_backward(s, 0, NULL, NULL, 1.0f) < 0) {
            fprintf(stderr, "bench_gpt: %s\n", gpt_stage_error(s));
            return 1;
        }
        adamw_update(&o, t, nt, gpt_stage_params(s), gpt_stage_grads(s), m, v, 0, n, 1e-4f, k + 1,
                     1.0f);
        if (k > 0)
            ms[k - 1] = (now() - t0) * 1e3;
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    double med = ms[steps / 2];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("L%d C%d NH%d V%d B%d T%d threads %d: params %.1fM, median %.1f ms/step "
           "(min %.1f, max %.1f, %d steps), %.0f tokens/s, %.1f GFLOP/s, peak RSS %.0f MiB, "
           "loss %.4f\n",
           c.layers, c.channels, c.heads, c.vocab, B, T, omp_get_max_threads(), n / 1e6, med,
           ms[0], ms[steps - 1], steps, B * T / (med / 1e3),
           gpt_stage_flops(s) / (med / 1e3) / 1e9, ru.ru_maxrss / 1024.0, loss);
    double ceiling = sgemm_ceiling(), achieved = gpt_stage_flops(s) / (med / 1e3) / 1e9;
    printf("  sgemm ceiling (1024^3, same threading): %.1f GFLOP/s; the step reaches %.0f%% of it\n",
           ceiling, 100.0 * achieved / ceiling);
    gpt_stage_free(s);
    free(m);
    free(v);
    free(tok);
    free(tgt);
    free(ms);
    return 0;
}
