/* LayerNorm's kernels and the column sums (noderuntime/engine/cuda/layernorm_kernels.cuh) run on
 * the host, without a GPU: the same source, compiled by g++ against kernel_emu.h (a block's
 * threads as coroutines, warp shuffles exchanged lane by lane, shared memory starting as garbage,
 * 16-byte accesses bounds- and alignment-checked, every buffer ending at a guard page), in bf16
 * (and, built with EMU_FP32, in fp32: the checking build's), against a reference in double on the
 * same inputs:
 *   - the forward's output, mean and 1/std;
 *   - the backward's input gradient (added to what the buffer held) and, through the partial sums
 *     and the finish, the weight's and bias's gradients, written and accumulated;
 *   - the bias gradients' column sums (colsum_partial_kernel, then the finish);
 * at GPT-2 1.5B's LayerNorm shape at B 4 (4,096 rows of 1,600: 256 chunks of 16 rows), at rows
 * that leave a short last chunk, at widths that take the 16-byte path with idle lanes and at odd
 * widths that take the scalar path; under both schedules. The finish's result is also held bit
 * for bit to the order colsum_plan.h describes (groups g, g + 8, ... then the groups in order),
 * the order that makes a run repeat. Built and run by `make layernorm-emu-check` (mk/cuda.mk;
 * make test runs it in cuda_build.sh). */
#include "kernel_emu.h"

#include "cuda/colsum_plan.h"

namespace emu {

/* the activations' type: bf16, or fp32 (the checking build's) with EMU_FP32 */
#include "emu_floatx.h"
/* the outputs' tolerance: fp32 results, or one bf16 rounding (2^-9 of the value) on fp32
 * arithmetic */
static const double OUT_TOL = sizeof(floatX) == 4 ? 1e-5 : 4e-3;
static inline void put(floatX *p, float x)
{
    if (!on_stack(p)) /* a pack16 being filled is the thread's own */
        check_global(p, sizeof *p, true);
    *p = mkx(x);
}
static inline int min(int a, int b) { return a < b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define COLSUM_FINISH_SMEM(name) float *name = (float *)smem_base
#define LN_BWD_SMEM(name) float *name = (float *)smem_base
static const int XV = VECX; /* the vectors' width, as the GPU build's */

#include "cuda/layernorm_kernels.cuh"

/* what the outputs start as: a NaN, so that an element left unwritten shows */
static floatX poison()
{
    floatX x;
    memset(&x, 0xff, sizeof x);
    return x;
}
static const size_t FINISH_SMEM = 2 * COLSUM_FINISH_GROUPS * COLSUM_FINISH_COLS * sizeof(float);

/* the finish: the partial sums' rows `which` (0 or 1) of every chunk, for out (NULL: skipped) */
static void run_finish(float *gw, float *gb, const float *partial, int chunks, int C, int accum)
{
    launch(dim3e{(unsigned)colsum_ceil_div(C, COLSUM_FINISH_COLS), 1, 1},
           dim3e{COLSUM_FINISH_COLS, COLSUM_FINISH_GROUPS, 1}, FINISH_SMEM,
           [&] { colsum_finish_kernel(gw, gb, partial, chunks, C, accum); });
}
/* column c's sum in colsum_plan.h's order, in float: what the finish must give bit for bit */
static float finish_order(const float *partial, int which, int chunks, int C, int c, float start)
{
    float g[COLSUM_FINISH_GROUPS], s = 0.0f;
    for (int j = 0; j < COLSUM_FINISH_GROUPS; j++) {
        g[j] = 0.0f;
        for (int k = j; k < chunks; k += COLSUM_FINISH_GROUPS)
            g[j] += partial[((size_t)k * 2 + which) * C + c];
    }
    for (int j = 0; j < COLSUM_FINISH_GROUPS; j++)
        s += g[j];
    return start + s;
}

/* wshift: the weights and biases one float past a 16-byte boundary (their scalar loads) */
/* bwd_it: the backward's most vectors a lane holds (layernorm_prepare's: LN_BWD_DEFAULT_IT, or
 * what HOLMES_GPU_LN_BWD_MAX_IT says) */
static void ln_case(int N, int C, bool wshift = false, int bwd_it = LN_BWD_DEFAULT_IT)
{
    char tag[112], name[176], its[16] = "";
    if (bwd_it != LN_BWD_DEFAULT_IT)
        snprintf(its, sizeof its, ".bwd_it%d", bwd_it);
    snprintf(tag, sizeof tag, "layernorm_emu%s.N%d.C%d%s%s%s", PREC, N, C, wshift ? ".wshift" : "",
             its, eager ? ".eager" : "");
    size_t NC = (size_t)N * C;
    int rows = colsum_rows(N), chunks = colsum_chunks(N), vec = C % VECX == 0 ? VECX : 1;
    regions.clear();
    floatX *inp = buf<floatX>(NC, false), *out = buf<floatX>(NC, true), *dout = buf<floatX>(NC, false);
    floatX *dinp = buf<floatX>(NC, true);
    float *w = buf<float>(C + 1, false) + wshift, *b = buf<float>(C + 1, false) + wshift;
    float *mean = buf<float>(N, true);
    float *rstd = buf<float>(N, true), *partial = buf<float>((size_t)chunks * 2 * C, true);
    float *gw = buf<float>(C, true), *gb = buf<float>(C, true);
    std::vector<floatX> dinp0(NC);
    std::vector<float> gw0(C), gb0(C);
    for (size_t i = 0; i < NC; i++) {
        inp[i] = mkx(1.5f * frand() + 0.3f);
        dout[i] = mkx(frand());
        out[i] = poison();
        dinp[i] = dinp0[i] = mkx(0.5f * frand());
    }
    for (int c = 0; c < C; c++) {
        w[c] = 1.0f + 0.5f * frand();
        b[c] = 0.2f * frand();
        gw[c] = gw0[c] = frand();
        gb[c] = gb0[c] = frand();
    }
    for (int r = 0; r < N; r++)
        mean[r] = rstd[r] = NAN;
    for (size_t i = 0; i < (size_t)chunks * 2 * C; i++)
        partial[i] = NAN;

    unsigned grid = (unsigned)colsum_ceil_div(N * 32, 256);
    bool wvec = ((uintptr_t)w % 16 == 0) && ((uintptr_t)b % 16 == 0);
    int fits = ln_row_its(C, VECX, LN_FWD_MAX_IT), bits = ln_row_its(C, VECX, bwd_it);
    launch(dim3e{grid, 1, 1}, dim3e{256, 1, 1}, 0, [&] {
        if (vec == VECX)
            by_row_its<LN_FWD_MAX_IT>(fits, [&](auto it) {
                layernorm_forward_kernel<VECX, decltype(it)::value>(out, mean, rstd, inp, w, b, N,
                                                                    C, wvec);
            });
        else
            layernorm_forward_kernel<1, 0>(out, mean, rstd, inp, w, b, N, C, false);
    });
    launch(dim3e{(unsigned)chunks, 1, 1}, dim3e{LN_BWD_THREADS, 1, 1},
           LN_BWD_SMEM_FLOATS(VECX) * sizeof(float), [&] {
               if (vec == VECX)
                   by_row_its<LN_BWD_MAX_IT>(bits, [&](auto it) {
                       layernorm_backward_kernel<VECX, decltype(it)::value>(
                           dinp, partial, dout, inp, w, mean, rstd, N, C, rows, (uintptr_t)w % 16 == 0);
                   });
               else
                   layernorm_backward_kernel<1, 0>(dinp, partial, dout, inp, w, mean, rstd, N, C,
                                                   rows, false);
           });
    std::vector<float> order_w(C), order_b(C);
    for (int c = 0; c < C; c++) {
        order_w[c] = finish_order(partial, 0, chunks, C, c, gw0[c]);
        order_b[c] = finish_order(partial, 1, chunks, C, c, gb0[c]);
    }
    run_finish(gw, gb, partial, chunks, C, 1);

    maxdiff eo, em, er, edx, egw, egb;
    std::vector<double> rw(C, 0.0), rb(C, 0.0), mw(C, 0.0), mb(C, 0.0);
    for (int r = 0; r < N; r++) {
        const floatX *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += xf(x[c]);
        m /= C;
        for (int c = 0; c < C; c++)
            v += (xf(x[c]) - m) * (xf(x[c]) - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        em.add(mean[r], m, fabs(m) + 1.0);
        er.add(rstd[r], rs, rs);
        double dmean = 0, dnm = 0;
        for (int c = 0; c < C; c++) {
            double xh = (xf(x[c]) - m) * rs, y = xh * w[c] + b[c];
            eo.add(xf(out[(size_t)r * C + c]), y, fabs(xh * w[c]) + fabs(b[c]));
            double dn = w[c] * xf(d[c]);
            dmean += dn;
            dnm += dn * xh;
            rw[c] += xf(d[c]) * xh;
            mw[c] += fabs(xf(d[c]) * xh);
            rb[c] += xf(d[c]);
            mb[c] += fabs(xf(d[c]));
        }
        dmean /= C;
        dnm /= C;
        for (int c = 0; c < C; c++) {
            double xh = (xf(x[c]) - m) * rs, dn = w[c] * xf(d[c]);
            double g0 = xf(dinp0[(size_t)r * C + c]);
            double want = g0 + (dn - dmean - xh * dnm) * rs;
            double mag = fabs(g0) + (fabs(dn) + fabs(dmean) + fabs(xh * dnm)) * rs;
            edx.add(xf(dinp[(size_t)r * C + c]), want, mag);
        }
    }
    int order_bad = 0;
    for (int c = 0; c < C; c++) {
        egw.add(gw[c], gw0[c] + rw[c], fabs(gw0[c]) + mw[c]);
        egb.add(gb[c], gb0[c] + rb[c], fabs(gb0[c]) + mb[c]);
        order_bad += memcmp(&gw[c], &order_w[c], 4) != 0 || memcmp(&gb[c], &order_b[c], 4) != 0;
    }
    /* the outputs: OUT_TOL; fp32 sums of up to a few thousand terms: far under 1e-5 of their
     * magnitude */
    struct {
        const char *what;
        const maxdiff *m;
        double tol;
    } outs[] = {{"forward.out", &eo, OUT_TOL}, {"forward.mean", &em, 1e-5}, {"forward.rstd", &er, 1e-5},
                {"backward.dinp_added", &edx, OUT_TOL}, {"backward.dweight_accumulated", &egw, 1e-5},
                {"backward.dbias_accumulated", &egb, 1e-5}};
    for (auto &o : outs) {
        snprintf(name, sizeof name, "%s.%s", tag, o.what);
        check(name, o.m->rel() <= o.tol, "relative difference %.3g > %.3g", o.m->rel(), o.tol);
    }
    snprintf(name, sizeof name, "%s.finish_in_the_fixed_order", tag);
    check(name, order_bad == 0, "%.0f of %.0f columns differ from the documented order's bits",
          order_bad, C);

    /* written, not accumulated: the first micro-batch's */
    run_finish(gw, gb, partial, chunks, C, 0);
    maxdiff ewr;
    for (int c = 0; c < C; c++) {
        ewr.add(gw[c], rw[c], mw[c]);
        ewr.add(gb[c], rb[c], mb[c]);
    }
    snprintf(name, sizeof name, "%s.backward.weight_and_bias_written", tag);
    check(name, ewr.rel() <= 1e-5, "relative difference %.3g > %.3g", ewr.rel(), 1e-5);
}

/* a bias's gradient: column sums of d[N][C], accumulated onto gb */
static void colsum_case(int N, int C)
{
    char name[160];
    snprintf(name, sizeof name, "layernorm_emu%s.colsum.N%d.C%d%s", PREC, N, C, eager ? ".eager" : "");
    size_t NC = (size_t)N * C;
    int rows = colsum_rows(N), chunks = colsum_chunks(N), vec = C % VECX == 0 ? VECX : 1;
    regions.clear();
    floatX *d = buf<floatX>(NC, false);
    float *partial = buf<float>((size_t)chunks * 2 * C, true), *gb = buf<float>(C, true);
    std::vector<float> gb0(C);
    for (size_t i = 0; i < NC; i++)
        d[i] = mkx(frand());
    for (size_t i = 0; i < (size_t)chunks * 2 * C; i++)
        partial[i] = NAN; /* row 0 of each pair stays so: the finish must not read it for gb */
    for (int c = 0; c < C; c++)
        gb[c] = gb0[c] = frand();
    int per = C / vec;
    launch(dim3e{(unsigned)colsum_ceil_div(per, 128), (unsigned)chunks, 1}, dim3e{128, 1, 1}, 0, [&] {
        if (vec == VECX)
            colsum_partial_kernel<VECX>(partial, d, N, C, rows);
        else
            colsum_partial_kernel<1>(partial, d, N, C, rows);
    });
    run_finish(NULL, gb, partial, chunks, C, 1);
    maxdiff e;
    for (int c = 0; c < C; c++) {
        double s = gb0[c], m = fabs(gb0[c]);
        for (int r = 0; r < N; r++) {
            s += xf(d[(size_t)r * C + c]);
            m += fabs(xf(d[(size_t)r * C + c]));
        }
        e.add(gb[c], s, m);
    }
    check(name, e.rel() <= 1e-5, "relative difference %.3g > %.3g", e.rel(), 1e-5);
}

} /* namespace emu */

int main()
{
    using namespace emu;
    emu_prog = "layernorm_emu" PREC;
    ln_case(4096, 1600); /* GPT-2 1.5B, B 4: 256 chunks of 16 rows, 7 vectors a lane, the last partial */
    ln_case(300, 96);    /* 38 chunks of 8 rows, the last of 4 */
    ln_case(2000, 72);   /* 9 (bf16) or 18 (fp32) vectors a row: lanes idle */
    ln_case(131, 101);   /* the scalar path */
    ln_case(1024, 768);  /* GPT-2 124M: 4 vectors a lane held (3 used), the column sums in 2 row groups */
    ln_case(64, 2048);   /* bf16: forward 8 vectors a lane held, backward re-reads (past 4) */
    ln_case(40, 4096);   /* past 8 vectors a lane: each pass reads the row again */
    ln_case(300, 96, true); /* the weights not 16-byte aligned: their scalar loads */
    /* HOLMES_GPU_LN_BWD_MAX_IT: the backward holding 8 vectors a lane (bf16: 1.5B's 1,600 columns,
     * 7 used; 2,048, all 8), and re-reading every row (0) */
    ln_case(4096, 1600, false, 8);
    ln_case(64, 2048, false, 8);
    ln_case(1024, 768, false, 0);
    colsum_case(4096, 6400); /* the MLP's bias at 1.5B */
    colsum_case(1000, 24);
    colsum_case(77, 30);
    eager = true;
    ln_case(300, 96);
    ln_case(131, 101);
    colsum_case(1000, 24);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
