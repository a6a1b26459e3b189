/* The classifier's fused cross-entropy kernel (noderuntime/engine/cuda/classifier_kernels.cuh) run
 * on the host, without a GPU: the same source, compiled by g++ against kernel_emu.h (a block's 512
 * threads as coroutines, warp shuffles exchanged lane by lane, the block reductions' shared memory
 * starting as garbage, 16-byte accesses bounds- and alignment-checked, every buffer ending at a
 * guard page), in bf16, against a reference in double on the same logits:
 *   - each row's loss, logsumexp minus the target's logit (to 1e-5 of its size);
 *   - the gradient left in place of the logits, (softmax - onehot) / (B T), within one bf16
 *     rounding of the row's largest term; zero in the padded columns;
 *   - the rows outside the pass (a token slice [t0, t0 + S) of each sequence) untouched;
 * at GPT-2's vocabulary (50,257 padded to 50,304: 13 vectors a thread, the last vector of a row
 * part real and part padding), at one that fills 8 vectors a thread exactly, and at a small one
 * where most threads hold nothing; under both schedules. Built and run by
 * `make classifier-emu-check` (mk/cuda.mk; make test runs it in cuda_build.sh). */
#include "kernel_emu.h"

namespace emu {

typedef bf16 floatX;
static inline float tof(bf16 x) { return bf2f(x); }
static inline void put(floatX *p, float x)
{
    if (!on_stack(p)) /* a pack16 being filled is the thread's own */
        check_global(p, sizeof *p, true);
    *p = f2bf(x);
}
#define CLASSIFIER_SMEM(name) float *name = (float *)smem_base

#include "cuda/classifier_kernels.cuh"


/* B sequences of T rows of Vp logits (V real), the pass over rows [t0, t0 + S) of each */
template <int IT> static void run_case(int B, int T, int t0, int S, int V, int Vp)
{
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "classifier_emu.IT%d.V%d.Vp%d.B%d.T%d.[%d,%d)%s", IT, V, Vp, B, T,
             t0, t0 + S, eager ? ".eager" : "");
    size_t rows = (size_t)B * T, n = rows * Vp;
    regions.clear();
    floatX *lg = buf<floatX>(n, true);
    float *losses = buf<float>(rows, true);
    int *targets = buf<int>(rows, false);
    std::vector<floatX> lg0(n);
    for (size_t i = 0; i < n; i++) /* spread enough that the softmax is far from uniform */
        lg[i] = lg0[i] = f2bf(i % Vp < (size_t)V ? 4.0f * frand() : 0.0f);
    for (size_t r = 0; r < rows; r++) {
        targets[r] = (int)((r * 7919u + 13u) % (unsigned)V);
        losses[r] = NAN;
    }
    targets[0] = V - 1; /* a target in the last, part-padded vector */
    float dscale = 1.0f / (float)rows;
    launch(dim3e{(unsigned)(B * S), 1, 1}, dim3e{(unsigned)CLASSIFIER_THREADS, 1, 1}, 32 * sizeof(float),
           [&] { classifier_rows_kernel<8, IT>(losses, lg, targets, V, Vp, T, t0, S, dscale); });

    maxdiff eloss, egrad;
    int pad_bad = 0, untouched_bad = 0;
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % T);
        const floatX *x = lg0.data() + r * Vp, *g = lg + r * Vp;
        if (t < t0 || t >= t0 + S) {
            untouched_bad += memcmp(x, g, (size_t)Vp * sizeof(floatX)) != 0 || !std::isnan(losses[r]);
            continue;
        }
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++)
            mx = fmax(mx, (double)tof(x[v]));
        for (int v = 0; v < V; v++)
            sum += exp((double)tof(x[v]) - mx);
        double loss = log(sum) + mx - tof(x[targets[r]]);
        eloss.add(losses[r], loss, fabs(loss) + 1.0);
        double big = 0.0;
        for (int v = 0; v < V; v++)
            big = fmax(big, fabs(exp((double)tof(x[v]) - mx) / sum - (v == targets[r])) * dscale);
        for (int v = 0; v < Vp; v++) {
            if (v >= V) {
                pad_bad += tof(g[v]) != 0.0f;
                continue;
            }
            double want = (exp((double)tof(x[v]) - mx) / sum - (v == targets[r])) * dscale;
            egrad.add(tof(g[v]), want, big);
        }
    }
    snprintf(name, sizeof name, "%s.loss", tag);
    check(name, eloss.rel() <= 1e-5, "relative difference %.3g > %.3g", eloss.rel(), 1e-5);
    snprintf(name, sizeof name, "%s.gradient", tag);
    check(name, egrad.rel() <= 4e-3, "relative difference %.3g > %.3g", egrad.rel(), 4e-3);
    snprintf(name, sizeof name, "%s.padding_zero", tag);
    check(name, pad_bad == 0, "%.0f padded columns not zero", pad_bad);
    snprintf(name, sizeof name, "%s.other_rows_untouched", tag);
    check(name, untouched_bad == 0, "%.0f rows outside the pass written", untouched_bad);
}

} /* namespace emu */

int main()
{
    using namespace emu;
    emu_prog = "classifier_emu";
    run_case<13>(1, 3, 0, 3, 50257, 50304); /* GPT-2: 13 vectors a thread, the last part padding */
    run_case<8>(2, 3, 1, 2, 32768, 32768);  /* 8 vectors a thread exactly; a slice of each sequence */
    run_case<8>(1, 2, 0, 2, 1000, 1024);    /* most threads hold nothing */
    eager = true;
    run_case<13>(1, 2, 0, 2, 50257, 50304);
    run_case<8>(2, 3, 1, 2, 1000, 1024);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
