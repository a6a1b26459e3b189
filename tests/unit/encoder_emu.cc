/* The token embedding's backward (noderuntime/engine/cuda/encoder_kernels.cuh) runs on the host,
 * without a GPU: the same source, compiled by g++ against kernel_emu.h (a block's threads as
 * coroutines, shared memory starting as garbage, 16-byte loads bounds- and alignment-checked,
 * every buffer ending at a guard page), in bf16 (and, built with EMU_FP32, in fp32), on the token
 * groups token_groups.c makes, as encoder.cu launches them (wte_backward_kernel over every group,
 * then wte_split_kernel when a token has more than WTE_SPLIT_ABOVE positions):
 *   - every touched row of dwte = what it held + its token's gradient rows, against a sum in
 *     double (errors over the sum of the terms' magnitudes), and bit for bit the documented order
 *     (a group of up to WTE_SPLIT_ABOVE positions in order; a larger one: warp w's positions
 *     w, w + 8, ... in order, then the 8 warp sums in order);
 *   - the rows of tokens absent from the micro-batch untouched;
 * on uniform tokens (groups of one to a few positions), on text-like ones (a token at 60 % of the
 * positions, another at 10 %), at a group of exactly WTE_SPLIT_ABOVE positions and one more, at
 * widths of one column tile and of several with a partial last (GPT-2 124M's 768, 1.5B's 1,600,
 * 2,056), and at an odd width (the scalar path); under both schedules. Built and run by
 * `make encoder-emu-check` (mk/cuda.mk; make test runs it in cuda_build.sh). */
#include <algorithm>

#include "kernel_emu.h"

#include "cuda/token_groups.c"

namespace emu {

#include "emu_floatx.h"
#define WTE_BWD_SMEM(name, VEC) float *name = (float *)smem_base

#include "cuda/encoder_kernels.cuh"

/* what a row must hold, in the documented order, in float (bit for bit) */
static float order_sum(const floatX *dres, const int *upos, int j0, int j1, int C, int c, float start)
{
    if (j1 - j0 <= WTE_SPLIT_ABOVE) {
        float acc = 0.0f;
        for (int j = j0; j < j1; j++)
            acc += xf(dres[(size_t)upos[j] * C + c]);
        return start + acc;
    }
    float s = 0.0f;
    for (int w = 0; w < WTE_BWD_WARPS; w++) {
        float acc = 0.0f;
        for (int j = j0 + w; j < j1; j += WTE_BWD_WARPS)
            acc += xf(dres[(size_t)upos[j] * C + c]);
        s += acc;
    }
    return start + s;
}

enum dist { UNIFORM, TEXT, EXACT, EXACT_PLUS1 };
static const char *const dist_name[] = {"uniform", "text", "exact", "exact_plus1"};

static void wte_case(int N, int C, int V, dist d)
{
    char tag[128], name[192];
    snprintf(tag, sizeof tag, "encoder_emu%s.%s.N%d.C%d%s", PREC, dist_name[d], N, C,
             eager ? ".eager" : "");
    regions.clear();
    std::vector<int> tok(N), counts(V + 1), utok(N), ustart(N + 1), upos(N);
    for (int i = 0; i < N; i++) {
        float r = 0.5f * (frand() + 1.0f); /* [0, 1) */
        int t = (int)((0.5f * (frand() + 1.0f)) * V) % V;
        if (d == TEXT)
            t = r < 0.6f ? 3 : r < 0.7f ? V - 1 : t;
        tok[i] = t;
    }
    if (d == EXACT || d == EXACT_PLUS1) { /* token 3 at exactly WTE_SPLIT_ABOVE (+1) positions */
        for (int i = 0; i < N; i++)
            if (tok[i] == 3)
                tok[i] = 4;
        int want = WTE_SPLIT_ABOVE + (d == EXACT_PLUS1);
        for (int k = 0; k < want; k++)
            tok[(size_t)k * N / want] = 3;
    }
    int nu = token_groups(tok.data(), (size_t)N, V, counts.data(), utok.data(), ustart.data(),
                          upos.data());
    int maxpos = 0;
    for (int u = 0; u < nu; u++)
        maxpos = std::max(maxpos, ustart[u + 1] - ustart[u]);
    /* the device's copies */
    int *dutok = buf<int>(nu, false), *dustart = buf<int>(nu + 1, false), *dupos = buf<int>(N, false);
    memcpy(dutok, utok.data(), nu * sizeof(int));
    memcpy(dustart, ustart.data(), (nu + 1) * sizeof(int));
    memcpy(dupos, upos.data(), N * sizeof(int));
    floatX *dres = buf<floatX>((size_t)N * C, false);
    float *dwte = buf<float>((size_t)V * C, true);
    std::vector<float> before((size_t)V * C);
    for (size_t i = 0; i < (size_t)N * C; i++)
        dres[i] = mkx(frand());
    for (size_t i = 0; i < (size_t)V * C; i++)
        dwte[i] = before[i] = frand();
    bool vec = C % VECX == 0;
    launch(dim3e{(unsigned)nu, 1, 1}, dim3e{WTE_BWD_THREADS, 1, 1}, 0,
           [&] { wte_backward_kernel(dwte, dres, dutok, dustart, dupos, C); });
    if (maxpos > WTE_SPLIT_ABOVE)
        launch(dim3e{(unsigned)nu, 1, 1}, dim3e{WTE_BWD_THREADS, 1, 1},
               WTE_BWD_SMEM_FLOATS(VECX) * sizeof(float), [&] {
                   if (vec)
                       wte_split_kernel<VECX>(dwte, dres, dutok, dustart, dupos, C);
                   else
                       wte_split_kernel<1>(dwte, dres, dutok, dustart, dupos, C);
               });
    bool split_expected = d == TEXT || d == EXACT_PLUS1, split_seen = maxpos > WTE_SPLIT_ABOVE;
    snprintf(name, sizeof name, "%s.split_path_%s", tag, split_expected ? "taken" : "not_taken");
    check(name, split_seen == split_expected, "largest group %.0f positions (split above %.0f)",
          maxpos, WTE_SPLIT_ABOVE);
    maxdiff e;
    int order_bad = 0, untouched_bad = 0;
    std::vector<char> seen(V, 0);
    for (int u = 0; u < nu; u++) {
        int t = utok[u];
        seen[t] = 1;
        for (int c = 0; c < C; c++) {
            double s = before[(size_t)t * C + c], m = fabs(s);
            for (int j = ustart[u]; j < ustart[u + 1]; j++) {
                double v = xf(dres[(size_t)upos[j] * C + c]);
                s += v;
                m += fabs(v);
            }
            float got = dwte[(size_t)t * C + c];
            e.add(got, s, m);
            float want = order_sum(dres, upos.data(), ustart[u], ustart[u + 1], C, c,
                                   before[(size_t)t * C + c]);
            order_bad += memcmp(&got, &want, sizeof got) != 0;
        }
    }
    for (int t = 0; t < V; t++)
        if (!seen[t])
            untouched_bad += memcmp(dwte + (size_t)t * C, &before[(size_t)t * C], C * sizeof(float)) != 0;
    snprintf(name, sizeof name, "%s.rows_added", tag);
    check(name, e.rel() <= 1e-5, "relative difference %.3g > %.3g", e.rel(), 1e-5);
    snprintf(name, sizeof name, "%s.in_the_documented_order", tag);
    check(name, order_bad == 0, "%.0f elements differ from the documented order's bits", order_bad);
    snprintf(name, sizeof name, "%s.absent_tokens_untouched", tag);
    check(name, untouched_bad == 0, "%.0f rows changed", untouched_bad);
}

} /* namespace emu */

int main()
{
    using namespace emu;
    emu_prog = "encoder_emu" PREC;
    wte_case(1024, 768, 500, UNIFORM);
    wte_case(1024, 768, 500, TEXT);    /* GPT-2 124M's width: one column tile (bf16) */
    wte_case(512, 1600, 300, TEXT);    /* 1.5B's: two tiles, the last partial */
    wte_case(300, 2056, 50, TEXT);     /* three tiles (bf16), the last of 8 columns */
    wte_case(400, 100, 64, TEXT);      /* not a multiple of the vectors: the scalar path */
    wte_case(256, 96, 40, EXACT);      /* WTE_SPLIT_ABOVE positions: the serial path */
    wte_case(256, 96, 40, EXACT_PLUS1); /* one more: split */
    eager = true;
    wte_case(1024, 768, 500, TEXT);
    wte_case(512, 1600, 300, TEXT); /* tiles in turn: the barrier before a tile's sums are rewritten */
    wte_case(400, 100, 64, TEXT);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
