/* make bench-gpu: one whole-model stage on one GPU, per step M micro-batches of forward +
 * backward (gradient accumulation), global-norm clipping and AdamW; median ms/step, tokens/s,
 * model TFLOP/s and MFU against a peak; then one more step timed by part with CUDA events
 * (gpu_stage_profile_*): attention, matrix products, LayerNorm, classifier, embeddings,
 * optimizer, other, and idle (the step's GPU time no part covers: launch gaps, host work), with
 * the kernel launches (and other enqueued work) and host synchronisations of a step.
 * Usage: bench_gpu L C NH V B T steps [peak_tflops (default 989: H100 SXM bf16 dense) [flags]]
 *                  [--micro-batches M[,M2...]]   (several M: one run each, on the same stage)
 *        (flags: gpu_stage_create's, 1 = GPU_RECOMPUTE_GELU, 4 = GPU_MATERIALISED_ATTENTION,
 *         8 = GPU_FLASH_RECOMPUTE_DQ, 16 = GPU_OVERLAP_WEIGHT_GRADS; or-ed)
 *        bench_gpu --gemm N iters    (the GEMM ceiling: an NxNxN product, same path and type)
 *        HOLMES_BENCH_TOKENS=zipf: the tokens as text's are distributed (bench_tokens), not uniform
 * The "holmes ... L.. C.. NH.. V.. B.. T.. M.. on ..." lines are what make bench-gpu's summary
 * (tests/bench/gpu_summary.py) reads. */
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

/* n tokens and n targets in [0, V), drawn in turn from one generator: uniform (as before the
 * option), or (zipf) token k with probability proportional to 1 / (k + 1), as the words of text
 * are (GPT-2's vocabulary: the commonest token at 9 % of the positions, where uniform tokens have
 * one to three positions each), which the embedding gradient's split kernel is for. The same
 * tokens every run. 0, or -1 out of memory. */
static int bench_tokens(int *tok, int *tgt, size_t n, int V, int zipf)
{
    unsigned r = 1;
    double *cdf = zipf ? malloc((size_t)V * sizeof(double)) : NULL;
    if (zipf && !cdf)
        return -1;
    for (int k = 0; zipf && k < V; k++)
        cdf[k] = (k ? cdf[k - 1] : 0.0) + 1.0 / (k + 1);
    for (size_t i = 0; i < 2 * n; i++) {
        int *out = i % 2 ? &tgt[i / 2] : &tok[i / 2];
        r = r * 1103515245u + 12345u;
        if (!zipf) {
            *out = (int)((r >> 8) % (unsigned)V);
            continue;
        }
        double u = (double)(r >> 8) / 16777216.0 * cdf[V - 1];
        int lo = 0, hi = V - 1; /* the first k with cdf[k] > u */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        *out = lo;
    }
    free(cdf);
    return 0;
}

/* zero_grads, M x (forward, backward), loss, norm, clip, AdamW; 0 or -1 */
static int step(struct gpu_stage *s, const int *tok, const int *tgt, size_t BT, int M, long t,
                float *loss)
{
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.1f};
    size_t n = gpu_stage_num_params(s);
    double sq;
    float sum = 0.0f;
    if (gpu_stage_zero_grads(s) < 0)
        return -1;
    for (int k = 0; k < M; k++)
        if (gpu_stage_forward(s, 0, tok + (size_t)k * BT, NULL, tgt + (size_t)k * BT, NULL, NULL) < 0 ||
            gpu_stage_backward(s, 0, NULL, NULL, 1.0f / (float)M) < 0)
            return -1;
    if (gpu_stage_loss_take(s, &sum) < 0 || gpu_stage_grad_sq_norm(s, 0, n, &sq) < 0 ||
        gpu_stage_adamw(s, &o, 0, n, 1e-4f, t, grad_clip_scale(sq, 1.0f)) < 0 ||
        gpu_stage_sync(s) < 0)
        return -1;
    *loss = sum / (float)M;
    return 0;
}

/* The timed kernels of the profiled step of one group (kernel_times.h's gpu_kernel_group: 0 the
 * products, 1 flash attention's kernels, 2 the memory-bound ones) by shape, the longest first:
 * where the "matmul", "attention", "layernorm" and "classifier" parts' time goes, and each one's
 * rate (TFLOP/s; GB/s of the bytes a memory-bound kernel must move, against the card's
 * bandwidth). */
static void print_kernels(const struct gpu_profile *p, int group)
{
    static const char *epi_name[] = {"none", "bias", "gelu+bias", "dgelu"};
    double all = 0.0, flop = 0.0, rest = 0.0;
    int count = 0, shown = 0, more = 0;
    for (int i = 0; i < p->nkernels; i++)
        if (gpu_kernel_group(p->kernels[i].kind) == group) {
            all += p->kernels[i].ms;
            flop += p->kernels[i].flop;
            count += p->kernels[i].count;
        }
    if (!count)
        return;
    if (group == 0) {
        printf("  products by shape (each timed alone; cuBLAS's column-major m x n x k): %d, "
               "%.2f ms, %.0f TFLOP/s%s\n", count, all, all > 0 ? flop / (all * 1e-3) / 1e12 : 0.0,
               p->kernels_lost ? " (some launches not timed)" : "");
        printf("    %6s %6s %6s %-3s %-9s %-4s %5s %8s %8s\n", "m", "n", "k", "op", "epilogue",
               "out", "count", "ms", "TFLOP/s");
    } else if (group == 1) {
        printf("  attention kernels (each timed alone; FLOPs of the visible pairs): %d, %.2f ms\n",
               count, all);
        printf("    %-13s %6s %6s %4s %5s %8s %8s\n", "kernel", "seq*hd", "rows", "hs", "count",
               "ms", "TFLOP/s");
    } else {
        printf("  memory-bound kernels (each timed alone; GB/s of the bytes each must move): %d, "
               "%.2f ms\n", count, all);
        printf("    %-14s %7s %6s %5s %8s %8s\n", "kernel", "rows", "cols", "count", "ms", "GB/s");
    }
    for (int i = 0; i < p->nkernels; i++) {
        const struct gpu_kernel_time *g = &p->kernels[i];
        if (gpu_kernel_group(g->kind) != group)
            continue;
        if (shown == 12) {
            rest += g->ms;
            more++;
            continue;
        }
        shown++;
        double tf = g->ms > 0 ? g->flop / (g->ms * 1e-3) / 1e12 : 0.0;
        if (group == 0)
            printf("    %6d %6d %6d %c%c  %-9s %-4s %5d %8.2f %8.0f\n", g->m, g->n, g->k,
                   g->ta ? 'T' : 'N', g->tb ? 'T' : 'N',
                   g->epi >= 0 && g->epi < 4 ? epi_name[g->epi] : "?",
                   g->out_bytes == 4 ? "fp32" : "bf16", g->count, g->ms, tf);
        else if (group == 1)
            printf("    %-13s %6d %6d %4d %5d %8.2f %8.0f\n", gpu_kernel_kind_name(g->kind), g->m,
                   g->n, g->k, g->count, g->ms, tf);
        else
            printf("    %-14s %7d %6d %5d %8.2f %8.0f\n", gpu_kernel_kind_name(g->kind), g->m, g->n,
                   g->count, g->ms, g->ms > 0 ? g->bytes / (g->ms * 1e-3) / 1e9 : 0.0);
    }
    if (more)
        printf("    %d more: %.2f ms\n", more, rest);
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
        printf("gemm %s %dx%dx%d on %s: %.0f TFLOP/s (median of the fastest algorithm)\n",
               gpu_precision_name(), n, n, n, dev, tf);
        return 0;
    }
    int Ms[4] = {1}, nM = 1, npos = 0;
    const char *pos[9];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--micro-batches") && i + 1 < argc) {
            char *q = argv[++i];
            for (nM = 0; nM < 4 && *q; nM++) {
                Ms[nM] = (int)strtol(q, &q, 10);
                if (*q == ',')
                    q++;
                else if (*q)
                    Ms[nM] = 0;
            }
        } else if (npos < 9) {
            pos[npos++] = argv[i];
        } else {
            npos = 10;
        }
    }
    int Mmax = 0, badM = nM == 0;
    for (int k = 0; k < nM; k++) {
        badM |= Ms[k] < 1;
        Mmax = Ms[k] > Mmax ? Ms[k] : Mmax;
    }
    if (npos < 7 || npos > 9 || badM) {
        fprintf(stderr, "usage: %s L C NH V B T steps [peak_tflops [flags]] [--micro-batches "
                "M[,M...]] | --gemm N iters\n", argv[0]);
        return 2;
    }
    const char *dist = getenv("HOLMES_BENCH_TOKENS");
    int zipf = dist && strcmp(dist, "zipf") == 0;
    if (dist && !zipf && strcmp(dist, "uniform") != 0) {
        fprintf(stderr, "bench_gpu: HOLMES_BENCH_TOKENS '%s': must be uniform or zipf\n", dist);
        return 2;
    }
    struct gpt_config c = {atoi(pos[0]), atoi(pos[1]), atoi(pos[2]), atoi(pos[3]), 0, 1024};
    int B = atoi(pos[4]), T = atoi(pos[5]), steps = atoi(pos[6]);
    double peak = npos >= 8 ? atof(pos[7]) : 989.0;
    int flags = npos == 9 ? atoi(pos[8]) : 0;
    if (T > c.max_seq)
        c.max_seq = T;
    struct gpu_stage *s;
    if (steps < 1 || gpu_stage_create(&s, &c, 0, c.layers, B, T, 1, flags, &e) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", steps < 1 ? "steps must be >= 1" : e.msg);
        return 1;
    }
    size_t n = gpu_stage_num_params(s), BT = (size_t)B * T;
    int *tok = malloc((size_t)Mmax * BT * sizeof(int)), *tgt = malloc((size_t)Mmax * BT * sizeof(int));
    double *ms = malloc((size_t)steps * sizeof(double));
    if (!tok || !tgt || !ms || gpu_stage_init_params(s, 1) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", !tok || !tgt || !ms ? "out of memory" : gpu_stage_error(s));
        return 1;
    }
    if (bench_tokens(tok, tgt, (size_t)Mmax * BT, c.vocab, zipf) < 0) {
        fprintf(stderr, "bench_gpu: out of memory\n");
        return 1;
    }
    long t = 1;
    for (int mi = 0; mi < nM; mi++) {
        int M = Ms[mi];
        float loss = 0.0f;
        for (int k = -2; k < steps; k++, t++) { /* two warm-up steps (GEMM tuning), not counted */
            double t0 = clock_mono_s();
            if (step(s, tok, tgt, BT, M, t, &loss) < 0) {
                fprintf(stderr, "bench_gpu: %s\n", gpu_stage_error(s));
                return 1;
            }
            if (k >= 0)
                ms[k] = (clock_mono_s() - t0) * 1e3;
        }
        qsort(ms, (size_t)steps, sizeof(double), cmp_double);
        double med = ms[steps / 2], flops = gpu_stage_flops(s) * M;
        double tflops = flops / (med / 1e3) / 1e12, tps = (double)M * BT / (med / 1e3);
        printf("holmes %s%s%s L%d C%d NH%d V%d B%d T%d M%d on %s: params %.1fM, %s"
               "attention %s, median %.1f ms/step (min %.1f, max %.1f, %d steps), %.0f tokens/s, "
               "%.0f TFLOP/s, MFU %.1f%% of %.0f, loss %.4f\n",
               gpu_precision_name(), flags & GPU_RECOMPUTE_GELU ? " recompute-gelu" : "",
               flags & GPU_FLASH_RECOMPUTE_DQ   ? " recompute-dq"
               : flags & GPU_OVERLAP_WEIGHT_GRADS ? " overlap-dw"
                                                  : "",
               c.layers, c.channels, c.heads, c.vocab, B, T, M, dev, n / 1e6,
               zipf ? "tokens zipf, " : "", gpu_stage_attention_kind(s), med, ms[0], ms[steps - 1], steps, tps, tflops,
               100.0 * tflops / peak, peak, loss);

        /* one more step, by part */
        struct gpu_profile p;
        double w0 = clock_mono_s();
        if (gpu_stage_profile_begin(s) < 0 || step(s, tok, tgt, BT, M, t++, &loss) < 0 ||
            gpu_stage_profile_end(s, &p) < 0) {
            fprintf(stderr, "bench_gpu: %s\n", gpu_stage_error(s));
            return 1;
        }
        double wall = (clock_mono_s() - w0) * 1e3, parts = 0.0;
        printf("  one step by part (CUDA events, which add a little): %.2f ms on the GPU, "
               "%.2f ms wall\n", p.total_ms, wall);
        for (int i = 0; i < GPU_PARTS; i++) {
            parts += p.ms[i];
            printf("    %-11s %8.2f ms %5.1f%%\n", gpu_part_name(i), p.ms[i],
                   p.total_ms > 0 ? 100.0 * p.ms[i] / p.total_ms : 0.0);
        }
        double idle = p.total_ms - parts;
        printf("    %-11s %8.2f ms %5.1f%%  (GPU time no part covers: launch gaps, host work)\n",
               "idle", idle, p.total_ms > 0 ? 100.0 * idle / p.total_ms : 0.0);
        printf("  per step: %llu kernel launches and other enqueued work, %llu host "
               "synchronisations%s\n", p.launches, p.syncs,
               p.events_lost ? " (some parts not timed: event pool)" : "");
        for (int group = 0; group < 3; group++)
            print_kernels(&p, group);
        fflush(stdout);
    }
    gpu_stage_free(s);
    free(tok);
    free(tgt);
    free(ms);
    return 0;
}
