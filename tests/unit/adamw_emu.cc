/* The optimizer's kernels (noderuntime/engine/cuda/adamw_kernels.cuh) run on the host, without a
 * GPU: the same source, and the same host code that cuts spans into launches
 * (adamw_next_launch, sq_next_launch), compiled by g++ against kernel_emu.h (a block's threads
 * as coroutines, shared memory per block, 16-byte accesses checked for alignment and bounds,
 * every buffer ending at a guard page, writes into inputs refused). Checked:
 *   - AdamW over spans, bit for bit against adamw_math.h's formula applied element by element on
 *     the host (the same function, the same compiler): the whole stage as one span (its bf16 copy
 *     written), a replica's ZeRO shards of many buckets (more spans than a launch takes: several
 *     launches; a span with a buffer not 16-byte aligned takes the scalar path, the others of
 *     its launch 16-byte accesses), shards on fp32 masters (the bf16 copy left alone), empty
 *     spans among them, a long scalar span; tensors of 1 to a few thousand
 *     elements so that a block's elements cross tensors of both decays; every element outside
 *     the spans untouched;
 *   - the sums of squares of ranges: each range's partial sums and their total, bit for bit
 *     against the order the kernels' comments give (thread t of a range's block i adds elements
 *     i * 256 + t, stepping by the range's blocks x 256; block_sum.cuh's tree; the total over
 *     1,024 threads), and within 1e-12 of the sum in long double; empty ranges, ranges shorter
 *     than a block, ranges at the block clamp, more ranges than a launch takes.
 * SQ_BLOCKS is 8 here (1,024 on the GPU) so that the clamp is reached at 32 Ki elements.
 * Built and run by `make adamw-emu-check` (mk/cuda.mk; make test runs it in cuda_build.sh). */
#include "kernel_emu.h"

#include "cuda/adamw_math.h"
#include "optimizer.h"

namespace emu {

typedef bf16 floatX;
static inline void put(bf16 *p, float x)
{
    check_global(p, sizeof *p, true);
    *p = f2bf(x);
}
struct f4 {
    float x, y, z, w;
};
static inline f4 load4(const float *p)
{
    if ((uintptr_t)p % 16)
        die("a misaligned 16-byte load");
    check_global(p, 16, false);
    f4 r;
    memcpy(&r, p, 16);
    return r;
}
static inline void store4(float *p, f4 v)
{
    if ((uintptr_t)p % 16)
        die("a misaligned 16-byte store");
    check_global(p, 16, true);
    memcpy(p, &v, 16);
}
#define __syncthreads() block_sync()
#define __shared__ static
#define SQ_BLOCKS 8

#include "cuda/block_sum.cuh"
#include "cuda/adamw_kernels.cuh"

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---------------------------------------------------------------- AdamW */

struct stage {
    size_t N;
    std::vector<size_t> ends; /* the tensor table */
    std::vector<int> decay;
    size_t *seg_end;
    int *seg_decay;
    float *params, *grads;
    bf16 *wX;
};

/* N parameters in tensors of 1 to ~3,000 elements, decaying or not at random */
static stage make_stage(size_t N)
{
    stage s;
    s.N = N;
    for (size_t at = 0; at < N;) {
        size_t r = (size_t)((frand() + 1.0f) * 1500.0f), len = r % 7 == 0 ? 1 + r % 3 : 1 + r;
        at = at + len < N ? at + len : N;
        s.ends.push_back(at);
        s.decay.push_back(frand() > 0.0f);
    }
    s.seg_end = buf<size_t>(s.ends.size(), false);
    s.seg_decay = buf<int>(s.decay.size(), false);
    memcpy(s.seg_end, s.ends.data(), s.ends.size() * sizeof(size_t));
    memcpy(s.seg_decay, s.decay.data(), s.decay.size() * sizeof(int));
    s.params = buf<float>(N, true);
    s.grads = buf<float>(N, false);
    s.wX = buf<bf16>(N, true);
    for (size_t i = 0; i < N; i++) {
        s.params[i] = frand();
        s.grads[i] = 0.1f * frand();
        s.wX[i] = bf16{0x7fc1}; /* a NaN that no rounding gives: an element written shows */
    }
    return s;
}
static int decay_at(const stage &s, size_t i)
{
    size_t t = 0;
    while (s.ends[t] <= i)
        t++;
    return s.decay[t];
}

/* The spans through the launches adamw.cu makes (own parameters' bf16 copy at wX), against the
 * formula element by element on copies; `name` says what the spans are; want_scalar: the spans
 * that must take the scalar path (a buffer of theirs not 16-byte aligned). */
static void adamw_case(const char *name, stage &s, std::vector<adamw_span> sp, int want_scalar)
{
    char tag[96];
    snprintf(tag, sizeof tag, "adamw_emu.%s%s", name, eager ? ".eager" : "");
    std::vector<float> p0(s.params, s.params + s.N);
    std::vector<bf16> x0(s.wX, s.wX + s.N);
    struct want {
        std::vector<float> p, m, v;
    };
    std::vector<want> w(sp.size());
    struct adamw_coef k = adamw_coef_make(1e-3f, 0.9f, 0.95f, 1e-8f, 3);
    const float wd = 0.1f, gs = 0.7f;
    for (size_t j = 0; j < sp.size(); j++) {
        size_t n = sp[j].hi - sp[j].lo;
        w[j].p.assign(sp[j].p, sp[j].p + n);
        w[j].m.assign(sp[j].m, sp[j].m + n);
        w[j].v.assign(sp[j].v, sp[j].v + n);
        for (size_t i = 0; i < n; i++)
            adamw_elem(&k, &w[j].p[i], &w[j].m[i], &w[j].v[i], sp[j].g[i], gs,
                       decay_at(s, sp[j].lo + i) ? wd : 0.0f);
    }
    /* the launches, as adamw_spans makes them */
    int launches = 0, scalar = 0, nonempty = 0;
    struct adamw_launch L;
    unsigned blocks;
    for (const adamw_span &a : sp)
        nonempty += a.hi > a.lo;
    for (int i = 0; (blocks = adamw_next_launch(&L, sp.data(), (int)sp.size(), &i, s.params,
                                                s.wX)) > 0;) {
        launches++;
        for (int j = 0; j < L.n; j++)
            scalar += L.sp[j].vec == 1;
        int nseg = (int)s.ends.size();
        launch(dim3e{blocks, 1, 1}, dim3e{ADAMW_THREADS, 1, 1}, 0,
               [&] { adamw_kernel(L, s.seg_end, s.seg_decay, nseg, k, wd, gs); });
    }
    /* every span's p, m and v bit for bit; the bf16 copy where p is the stage's own */
    size_t bad = 0, badx = 0;
    std::vector<char> own(s.N, 0);
    for (size_t j = 0; j < sp.size(); j++) {
        size_t n = sp[j].hi - sp[j].lo;
        bool mine = sp[j].p == s.params + sp[j].lo;
        for (size_t i = 0; i < n; i++) {
            bad += !same_bits(sp[j].p[i], w[j].p[i]) || !same_bits(sp[j].m[i], w[j].m[i]) ||
                   !same_bits(sp[j].v[i], w[j].v[i]);
            if (mine) {
                own[sp[j].lo + i] = 1;
                badx += s.wX[sp[j].lo + i].u != f2bf(w[j].p[i]).u;
            }
        }
    }
    /* what no span of the stage's own covers: untouched */
    size_t stray = 0;
    for (size_t i = 0; i < s.N; i++)
        stray += !own[i] && (!same_bits(s.params[i], p0[i]) || s.wX[i].u != x0[i].u);
    char nm[256];
    snprintf(nm, sizeof nm, "%s: p, m and v as the formula gives, bit for bit", tag);
    check(nm, bad == 0, "%.0f of the spans' elements differ", (double)bad);
    snprintf(nm, sizeof nm, "%s: the stage's own spans' bf16 copy written, nothing else touched", tag);
    check(nm, badx == 0 && stray == 0, "%.0f copies wrong, %.0f elements outside touched",
          (double)badx, (double)stray);
    snprintf(nm, sizeof nm, "%s: %d spans in %d launches of at most %d, %d of the spans scalar",
             tag, nonempty, launches, ADAMW_LAUNCH_SPANS, want_scalar);
    check(nm, launches == (nonempty + ADAMW_LAUNCH_SPANS - 1) / ADAMW_LAUNCH_SPANS &&
                  scalar == want_scalar,
          "%.0f launches (%.0f scalar)", launches, scalar);
}

/* m and v of n elements, random */
static void moments(size_t n, float **m, float **v)
{
    *m = buf<float>(n, true);
    *v = buf<float>(n, true);
    for (size_t i = 0; i < n; i++) {
        (*m)[i] = 0.01f * frand();
        (*v)[i] = 1e-4f * (frand() + 1.0f);
    }
}

/* replica r of D's shards of buckets of `bucket` parameters (zero.h's cut: the bucket's r-th of D
 * equal parts, the last one longer), in backward order as the trainer walks them; moments laid
 * out shard after shard; p the parameters, or fp32 masters laid out as the moments */
static std::vector<adamw_span> shards(stage &s, size_t bucket, int D, int r, bool masters,
                                      bool empties)
{
    std::vector<adamw_span> sp;
    size_t total = 0;
    std::vector<size_t> lo, hi;
    for (size_t b = 0; b < s.N; b += bucket) {
        size_t len = b + bucket < s.N ? bucket : s.N - b, part = len / (size_t)D;
        size_t l = b + part * (size_t)r, h = r == D - 1 ? b + len : l + part;
        lo.push_back(l);
        hi.push_back(h);
        total += h - l;
    }
    float *m, *v, *ms = masters ? buf<float>(total, true) : NULL;
    moments(total, &m, &v);
    size_t off = 0;
    for (size_t j = lo.size(); j-- > 0;) {
        float *p = masters ? ms + off : s.params + lo[j];
        if (masters)
            for (size_t i = 0; i < hi[j] - lo[j]; i++)
                p[i] = s.params[lo[j] + i];
        sp.push_back(adamw_span{lo[j], hi[j], p, s.grads + lo[j], m + off, v + off});
        if (empties && j % 5 == 0)
            sp.push_back(adamw_span{lo[j], lo[j], p, s.grads + lo[j], m + off, v + off});
        off += hi[j] - lo[j];
    }
    return sp;
}

static void adamw_cases()
{
    regions.clear();
    stage s = make_stage(60013);
    float *m, *v;
    moments(s.N, &m, &v);
    adamw_case("whole_stage", s, {adamw_span{0, s.N, s.params, s.grads, m, v}}, 0);
    /* 2 replicas, rank 1, buckets of 320: 188 shards of 160 but the last bucket's (173
     * parameters, walked first): a shard at 59,926 of 87, so every moment after it is misaligned
     * too: every span scalar. The same on 61,440 parameters (192 whole buckets): none. */
    adamw_case("zero_D2_r1_b320", s, shards(s, 320, 2, 1, false, false), 188);
    stage a = make_stage(61440);
    adamw_case("zero_D2_r1_b320_whole", a, shards(a, 320, 2, 1, false, false), 0);
    /* buckets of 300: every shard starts at 150 + 300 b, not 16-byte aligned */
    adamw_case("zero_D2_r1_b300", s, shards(s, 300, 2, 1, false, true), 201);
    /* 4 replicas, rank 3 (the longer last part), on fp32 masters: the bf16 copy untouched;
     * shards at 768 + 1,024 b but the last bucket's (at 59,857, of 156): only its span scalar,
     * the other 47 of its launch take 16-byte accesses */
    adamw_case("zero_D4_r3_masters", s, shards(s, 1024, 4, 3, true, true), 1);
    /* one span of 3 elements at 17 (scalar), a span ending 3 past a block's vectors, and 9,000
     * elements at 2,001 (scalar: 9 blocks of 1,024, where 16-byte accesses would take 3) */
    adamw_case("odd_spans", s,
               {adamw_span{17, 20, s.params + 17, s.grads + 17, m + 17, v + 17},
                adamw_span{40, 40 + 4 * ADAMW_THREADS + 3, s.params + 40, s.grads + 40, m + 40,
                           v + 40},
                adamw_span{2001, 11001, s.params + 2001, s.grads + 2001, m + 2001, v + 2001}},
               2);
}

/* ---------------------------------------------------------------- the sums of squares */

/* block_sum.cuh's tree over n (a power of two) values */
static double tree(std::vector<double> sh)
{
    for (size_t w = sh.size() / 2; w > 0; w >>= 1)
        for (size_t t = 0; t < w; t++)
            sh[t] += sh[t + w];
    return sh[0];
}

static void sq_case(const char *name, const std::vector<size_t> &lens)
{
    char tag[96], nm[256];
    snprintf(tag, sizeof tag, "adamw_emu.sq.%s%s", name, eager ? ".eager" : "");
    regions.clear();
    size_t N = 0;
    for (size_t l : lens)
        N += l + 3; /* gaps between the ranges */
    float *x = buf<float>(N, false);
    for (size_t i = 0; i < N; i++)
        x[i] = frand();
    std::vector<size_t> lo, hi;
    size_t at = 0;
    for (size_t l : lens) {
        lo.push_back(at + 3);
        hi.push_back(at + 3 + l);
        at += l + 3;
    }
    size_t need = 1;
    for (size_t j = 0; j < lens.size(); j++)
        need += sq_blocks(lens[j]);
    double *partial = buf<double>(need, true);
    for (size_t i = 0; i < need; i++)
        partial[i] = NAN;
    size_t done = 0;
    int launches = 0, n = (int)lens.size();
    struct sq_launch L;
    unsigned blocks;
    for (int r = 0; (blocks = sq_next_launch(&L, x, lo.data(), hi.data(), n, &r)) > 0;
         done += blocks, launches++) {
        double *part = partial + done;
        launch(dim3e{blocks, 1, 1}, dim3e{SQ_THREADS, 1, 1}, 0, [&] { sq_partial_kernel(part, L); });
    }
    double *total = partial + done;
    launch(dim3e{1, 1, 1}, dim3e{1024, 1, 1}, 0, [&] { sq_final_kernel(total, partial, done); });

    /* the documented order */
    std::vector<double> want;
    long double exact = 0;
    int nonempty = 0;
    for (size_t j = 0; j < lens.size(); j++) {
        unsigned nb = sq_blocks(lens[j]);
        nonempty += nb > 0;
        for (unsigned i = 0; i < nb; i++) {
            std::vector<double> ts(SQ_THREADS, 0.0);
            for (int t = 0; t < SQ_THREADS; t++)
                for (size_t e = (size_t)i * SQ_THREADS + t; e < lens[j]; e += (size_t)nb * SQ_THREADS)
                    ts[t] += (double)x[lo[j] + e] * x[lo[j] + e];
            want.push_back(tree(ts));
        }
        for (size_t e = lo[j]; e < hi[j]; e++)
            exact += (long double)x[e] * x[e];
    }
    std::vector<double> fin(1024, 0.0);
    for (size_t t = 0; t < 1024; t++)
        for (size_t i = t; i < want.size(); i += 1024)
            fin[t] += want[i];
    double tot = want.empty() ? 0.0 : tree(fin);
    size_t bad = want.size() != done;
    for (size_t i = 0; !bad && i < done; i++)
        bad += memcmp(&partial[i], &want[i], sizeof(double)) != 0;
    snprintf(nm, sizeof nm, "%s: %zu partial sums in the documented order, bit for bit", tag, done);
    check(nm, bad == 0, "%.0f differ (want %.0f partials)", (double)bad, (double)want.size());
    double rel = exact > 0 ? fabs((double)(*total - exact)) / (double)exact : fabs(*total);
    snprintf(nm, sizeof nm, "%s: the total as ordered, within 1e-12 of the exact sum", tag);
    check(nm, memcmp(total, &tot, sizeof tot) == 0 && rel <= 1e-12, "relative error %.3g (%g)",
          rel, *total - tot);
    snprintf(nm, sizeof nm, "%s: %d ranges in %d launches of at most %d", tag, nonempty, launches,
             SQ_LAUNCH_RANGES);
    check(nm, launches == (nonempty + SQ_LAUNCH_RANGES - 1) / SQ_LAUNCH_RANGES, "%.0f launches",
          launches);
}

static void sq_cases()
{
    sq_case("one_range", {50000});  /* clamped: SQ_BLOCKS blocks striding */
    sq_case("small", {0, 1, 5, 255, 256, 257, 4095, 4096, 4097, 0});
    std::vector<size_t> many;
    for (int i = 0; i < 300; i++) /* ZeRO shards: 3 launches */
        many.push_back(i % 37 == 0 ? 0 : 150 + (size_t)(i % 11) * 97);
    sq_case("shards", many);
}

} /* namespace emu */

int main()
{
    using namespace emu;
    emu_prog = "adamw_emu";
    adamw_cases();
    sq_cases();
    eager = true;
    adamw_cases();
    sq_case("small", {0, 1, 5, 255, 256, 257, 4095, 4096, 4097, 0});
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
