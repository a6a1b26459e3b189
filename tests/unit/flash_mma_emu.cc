/* Flash attention's mma.sync kernels (noderuntime/engine/cuda/flash_mma_kernels.cuh) run on the
 * host, without a GPU: the same source, compiled by g++ against an emulation of the primitives it
 * names. A block's 128 threads are coroutines (barrier = __syncthreads); a warp-wide operation
 * (ldmatrix, mma.sync, shfl) has every lane post its operands, waits for the warp, then computes
 * this lane's result from all of them exactly as the PTX ISA lays the fragments out; cp.async
 * copies land either at the cp.async.wait that covers them (a read before the wait sees stale
 * shared memory) or, with warps run one at a time as far as each can go, when issued (a refill
 * while another warp still reads shows); shared memory starts as garbage, and every shared,
 * global read and global write is bounds-checked. The results are compared with a plain causal attention in double precision
 * on the same bf16 inputs: the forward's output and log-sum-exp, the backward's dQ, dK and dV;
 * whole sequences and token slices (queries [q0, q1), keys [0, q1), dK and dV added into the fp32
 * accumulator), head sizes 16, 32, 64 and 128, lengths that are and are not multiples of the tiles.
 * Rows a pass must not write are checked untouched.
 * Built and run by `make flash-emu-check` (mk/cuda.mk; make test runs it in cuda_build.sh). */
#include <math.h>
#include <ucontext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "cuda/flash_plan.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)

namespace emu {

struct dim3e {
    unsigned x, y, z;
};
static dim3e gridDim, blockIdx;

/* A block's threads are coroutines (ucontext) on this one host thread, switched only at a barrier
 * or a warp-wide operation: cheap, and the order of everything between two switches is one
 * thread's program order, as on the GPU between two synchronisations. */
static const int MAXT = 128;
struct emu_thread {
    ucontext_t ctx;
    dim3e idx;
    bool done;
};
static emu_thread th[MAXT];
static int emu_cur, nth;
static ucontext_t sched_ctx;
static unsigned long progress; /* barrier arrivals and thread ends: a round without any is a deadlock */
/* Two schedules, the two ends of what the hardware may do:
 *   lazy (round robin: every thread advances to its next barrier or warp-wide operation in turn;
 *     a cp.async lands at its wait): a read of a tile before its wait sees garbage;
 *   eager (a warp at a time: each runs as far as it can before the next starts; a cp.async lands
 *     when issued): a refill of a buffer that another warp still reads overwrites it first. */
static bool eager;
#define threadIdx (th[emu_cur].idx)
#define lane_id (emu_cur % 32)
#define warp_id (emu_cur / 32)
static void yield_to_scheduler() { swapcontext(&th[emu_cur].ctx, &sched_ctx); }

struct cobarrier {
    int n, count;
    unsigned gen;
};
static void bar_wait(cobarrier &b)
{
    unsigned g = b.gen;
    progress++;
    if (++b.count == b.n) {
        b.count = 0;
        b.gen++;
        return;
    }
    while (b.gen == g)
        yield_to_scheduler();
}

struct bf16 {
    uint16_t u;
};
static float bf2f(bf16 h)
{
    uint32_t x = (uint32_t)h.u << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static bf16 f2bf(float f) /* round to nearest even, as __float2bfloat16_rn */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return bf16{0x7fc0};
    return bf16{(uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

static void die(const char *what)
{
    printf("FAIL flash_mma_emu: %s\n", what);
    fflush(stdout);
    abort();
}

/* memory the kernels may touch: shared (this block's), and the global buffers registered */
static unsigned char *smem_base;
static size_t smem_size;
struct region {
    const void *lo;
    size_t bytes;
    bool writable;
};
static std::vector<region> regions;
static void check_global(const void *p, size_t n, bool write)
{
    for (const region &r : regions)
        if ((const char *)p >= (const char *)r.lo && (const char *)p + n <= (const char *)r.lo + r.bytes) {
            if (write && !r.writable)
                die("a write into an input buffer");
            return;
        }
    die(write ? "a global write out of bounds" : "a global read out of bounds");
}
static void check_shared(const void *p, size_t n, size_t align)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < smem_base || c + n > smem_base + smem_size)
        die("a shared-memory access out of the block's dynamic shared memory");
    if ((size_t)(c - smem_base) % align)
        die("a misaligned shared-memory access (ldmatrix rows and cp.async need 16 bytes)");
}

static cobarrier block_bar;
struct warp_x {
    uint32_t ops[32][6];
    const void *addr[32];
    float f[32];
    cobarrier bar;
};
static warp_x warps[4];
static void wsync() { bar_wait(warps[warp_id].bar); }
static void block_sync() { bar_wait(block_bar); }

static float shfl_xor(float v, int m)
{
    warp_x &W = warps[warp_id];
    W.f[lane_id] = v;
    wsync();
    float r = W.f[lane_id ^ m];
    wsync();
    return r;
}

/* ldmatrix .x4: matrix i's rows at the addresses of lanes 8i..8i+7; lane l gets (row l/4,
 * columns 2(l%4), +1) of each, or with trans (rows 2(l%4), +1 of column l/4) */
static void ldsm(uint32_t r[4], const bf16 *p, bool trans)
{
    warp_x &W = warps[warp_id];
    check_shared(p, 16, 16);
    W.addr[lane_id] = p;
    wsync();
    int g = lane_id / 4, t = lane_id % 4;
    for (int i = 0; i < 4; i++) {
        const bf16 *lo, *hi;
        if (!trans) {
            lo = (const bf16 *)W.addr[8 * i + g] + 2 * t;
            hi = lo + 1;
        } else {
            lo = (const bf16 *)W.addr[8 * i + 2 * t] + g;
            hi = (const bf16 *)W.addr[8 * i + 2 * t + 1] + g;
        }
        r[i] = (uint32_t)lo->u | (uint32_t)hi->u << 16;
    }
    wsync();
}
static void ldsm4(uint32_t r[4], const bf16 *p) { ldsm(r, p, false); }
static void ldsm4t(uint32_t r[4], const bf16 *p) { ldsm(r, p, true); }

static float lo_of(uint32_t r) { return bf2f(bf16{(uint16_t)(r & 0xffffu)}); }
static float hi_of(uint32_t r) { return bf2f(bf16{(uint16_t)(r >> 16)}); }

/* mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32: A 16x16 from a0 (g, 2t..), a1 (g+8, 2t..),
 * a2 (g, 2t+8..), a3 (g+8, 2t+8..); B 16x8 from b0 (k 2t.., n g), b1 (k 2t+8.., n g); this
 * lane's C: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) */
static void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    warp_x &W = warps[warp_id];
    for (int i = 0; i < 4; i++)
        W.ops[lane_id][i] = a[i];
    W.ops[lane_id][4] = b0;
    W.ops[lane_id][5] = b1;
    wsync();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        int g = L / 4, t = L % 4;
        const uint32_t *o = W.ops[L];
        int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
        for (int i = 0; i < 4; i++) {
            A[ar[i]][ac[i]] = lo_of(o[i]);
            A[ar[i]][ac[i] + 1] = hi_of(o[i]);
        }
        B[2 * t][g] = lo_of(o[4]);
        B[2 * t + 1][g] = hi_of(o[4]);
        B[2 * t + 8][g] = lo_of(o[5]);
        B[2 * t + 9][g] = hi_of(o[5]);
    }
    int g = lane_id / 4, t = lane_id % 4;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++)
            s += A[row][k] * B[k][col];
        c[e] += s;
    }
    wsync();
}

/* cp.async: queued per thread, done at the cp.async.wait_group that covers its group */
struct copy {
    void *dst;
    const void *src;
    bool ok;
};
struct copy_q {
    std::vector<copy> list;
    std::vector<size_t> ends;
};
static copy_q cq[MAXT];
#define queued (cq[emu_cur].list)
#define group_end (cq[emu_cur].ends)
static void cp_async16(void *dst, const void *src, bool ok)
{
    check_shared(dst, 16, 16);
    if (ok)
        check_global(src, 16, false);
    if (eager) { /* the copy lands at once: a refill while another warp still reads shows */
        if (ok)
            memcpy(dst, src, 16);
        else
            memset(dst, 0, 16);
        return;
    }
    queued.push_back(copy{dst, src, ok});
}
static void cp_async_commit()
{
    if (!eager)
        group_end.push_back(queued.size());
}
template <int N> static void cp_async_wait()
{
    if (group_end.size() <= (size_t)N)
        return;
    size_t upto = group_end[group_end.size() - 1 - N];
    for (size_t i = 0; i < upto; i++) {
        if (queued[i].ok)
            memcpy(queued[i].dst, queued[i].src, 16);
        else
            memset(queued[i].dst, 0, 16);
    }
    queued.erase(queued.begin(), queued.begin() + (long)upto);
    std::vector<size_t> rest;
    for (size_t i = group_end.size() - N; i < group_end.size(); i++)
        rest.push_back(group_end[i] - upto);
    group_end = rest;
}

static float fast_exp2(float x) { return exp2f(x); }
static uint32_t pack2(float lo, float hi) { return (uint32_t)f2bf(lo).u | (uint32_t)f2bf(hi).u << 16; }
static void store_bf2(bf16 *p, float x, float y)
{
    check_global(p, 4, true);
    p[0] = f2bf(x);
    p[1] = f2bf(y);
}
#define FM_SMEM(name) unsigned char *name = smem_base

/* the kernels read shared floats (lse, D rows) and global floats directly: those reads are
 * checked where they come from (rows_into's and the dQ kernel's lse/D reads stay inside the
 * registered buffers by construction of the test: every row's entry exists) */
#include "cuda/flash_mma_kernels.cuh"

/* one launch: the grid's blocks one after another, each as 128 coroutines */
static const std::function<void()> *body_fn;
static void thread_main()
{
    (*body_fn)();
    th[emu_cur].done = true;
    progress++;
}
/* thread i's context on its stack (apart: getcontext returns twice, nothing of the caller's may
 * live across it) */
__attribute__((noinline)) static void new_context(int i, char *stack, size_t bytes)
{
    if (getcontext(&th[i].ctx) != 0)
        die("getcontext");
    th[i].ctx.uc_stack.ss_sp = stack;
    th[i].ctx.uc_stack.ss_size = bytes;
    th[i].ctx.uc_link = &sched_ctx;
    makecontext(&th[i].ctx, thread_main, 0);
}

static void launch(dim3e grid, size_t smem_bytes, const std::function<void()> &body)
{
    static std::vector<char> stacks((size_t)MAXT * 256 * 1024);
    gridDim = grid;
    std::vector<unsigned char> sm(smem_bytes);
    smem_base = sm.data();
    smem_size = smem_bytes;
    body_fn = &body;
    nth = NTHREADS;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            memset(sm.data(), 0xa5, smem_bytes); /* garbage: a read before its copy shows */
            blockIdx = dim3e{bx, by, 0};
            block_bar = cobarrier{NTHREADS, 0, 0};
            for (int w = 0; w < NWARP; w++)
                warps[w].bar = cobarrier{32, 0, 0};
            for (int i = 0; i < nth; i++) {
                th[i].idx = dim3e{(unsigned)i, 0, 0};
                th[i].done = false;
                cq[i].list.clear();
                cq[i].ends.clear();
                new_context(i, stacks.data() + (size_t)i * 256 * 1024, 256 * 1024);
            }
            for (int left = nth; left > 0;) {
                unsigned long before = progress;
                left = 0;
                for (int w = 0; w < nth / 32; w++) /* eager: warp w until it stalls */
                    for (unsigned long wp = progress + 1; wp != progress;) {
                        wp = progress;
                        for (emu_cur = 32 * w; emu_cur < 32 * w + 32; emu_cur++)
                            if (!th[emu_cur].done)
                                swapcontext(&sched_ctx, &th[emu_cur].ctx);
                        if (!eager)
                            break; /* lazy: one turn each */
                    }
                for (int i = 0; i < nth; i++)
                    left += !th[i].done;
                if (left > 0 && progress == before)
                    die("deadlock: a barrier or warp-wide operation not reached by every thread");
            }
            for (int i = 0; i < nth; i++)
                if (!cq[i].list.empty())
                    die("cp.async copies never waited for");
        }
}

/* ---------------------------------------------------------------- the checks */

static int passes, failures;
static uint64_t rng = 7;
static float frand()
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
static void check(const char *name, bool ok, const char *fmt = "", double a = 0, double b = 0)
{
    if (ok) {
        printf("PASS %s\n", name);
        passes++;
    } else {
        printf("FAIL %s: ", name);
        printf(fmt, a, b);
        printf("\n");
        failures++;
    }
}

/* worst |got - want| over the largest magnitude: a value's magnitude is the sum of the absolute
 * values of the terms it sums (the scale its rounding errors have, however much the terms cancel) */
struct maxdiff {
    double d = 0, m = 0;
    void add(double got, double want, double mag)
    {
        d = fmax(d, fabs(got - want));
        m = fmax(m, mag);
    }
    double rel() const { return m > 0 ? d / m : d; }
};

/* the same per row (a query's y or dq, a key's dk or dv): the worst row's largest difference over
 * its largest magnitude (floored at 1 % of the largest anywhere), so that one pair wrongly masked or
 * let through, small against the whole tensor, is large against its own row */
struct rowdiff {
    std::vector<double> d, m;
    double cd = 0, cm = 0;
    void add(double got, double want, double mag)
    {
        cd = fmax(cd, fabs(got - want));
        cm = fmax(cm, mag);
    }
    void end_row()
    {
        d.push_back(cd);
        m.push_back(cm);
        cd = cm = 0;
    }
    double worst() const
    {
        double gm = 0, w = 0;
        for (double x : m)
            gm = fmax(gm, x);
        for (size_t i = 0; i < d.size(); i++)
            w = fmax(w, d[i] / fmax(m[i], 0.01 * gm + 1e-30));
        return w;
    }
};

/* one pass [q0, q1) of B sequences of T, NH heads of HS; with_acc: the sliced backward's fp32
 * accumulator for dK, dV (starting from random values, as after a later slice) */
template <int HS> static void run_case(int B, int NH, int T, int q0, int q1, bool with_acc,
                                       bool rising = false)
{
    char name[160], tag[96];
    snprintf(tag, sizeof tag, "flash_mma_emu.hs%d.B%d.NH%d.T%d.[%d,%d)%s%s%s", HS, B, NH, T, q0,
             q1, with_acc ? ".acc" : "", rising ? ".rising" : "", eager ? ".eager" : "");
    int C = NH * HS;
    size_t S3 = (size_t)B * T * 3 * C, SC = (size_t)B * T * C, SR = (size_t)B * NH * T;
    std::vector<bf16> qkv(S3), atty(SC), dy(SC), dqkv(S3);
    std::vector<float> lse(SR), D(SR), acc(with_acc ? S3 : 0), acc0;
    for (auto &x : qkv)
        x = f2bf(2.0f * frand());
    /* rising: every query's score grows by 1 with the key's position (q = e0, k_t = t sqrt(HS)
     * e0, exact in bf16), so a key after the query, let through by a wrong mask, outweighs every
     * visible one: a single such pair shows at once */
    if (rising)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++)
                    for (int d = 0; d < HS; d++) {
                        size_t o = (((size_t)b * T + t) * 3) * C + h * HS + d;
                        qkv[o] = f2bf(d == 0 ? 1.0f : 0.0f);
                        qkv[o + C] = f2bf(d == 0 ? (float)t * sqrtf((float)HS) : 0.0f);
                    }
    for (size_t i = 0; i < SC; i++) {
        int t = (int)(i / C % T);
        dy[i] = f2bf(t >= q0 && t < q1 ? frand() : 0.0f);
    }
    const bf16 nanb = bf16{0x7fc1};
    for (auto &x : atty)
        x = nanb;
    for (auto &x : dqkv)
        x = nanb;
    for (auto &x : acc) /* small beside a slice's own part, so the per-row check still sees it */
        x = 0.01f * frand();
    acc0 = acc;
    regions = {{qkv.data(), S3 * 2, false}, {dy.data(), SC * 2, false}, {atty.data(), SC * 2, true},
               {dqkv.data(), S3 * 2, true}, {lse.data(), SR * 4, true}, {D.data(), SR * 4, false}};
    if (with_acc)
        regions.push_back({acc.data(), S3 * 4, true});
    float scale = 1.0f / sqrtf((float)HS), sl2 = 1.4426950408889634f * scale;

    launch(dim3e{(unsigned)flash_query_tiles(q0, q1), (unsigned)(B * NH), 1}, fwd_smem<HS>(), [&] {
        mma_fwd_kernel<HS>(atty.data(), lse.data(), qkv.data(), T, NH, q0, q1, sl2);
    });
    /* D = rowsum(dy * y) from the kernel's own output, as flash.cu's dsum kernel */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = q0; t < q1; t++) {
                float s = 0.0f;
                for (int d = 0; d < HS; d++)
                    s += bf2f(dy[((size_t)b * T + t) * C + h * HS + d]) *
                         bf2f(atty[((size_t)b * T + t) * C + h * HS + d]);
                D[((size_t)b * NH + h) * T + t] = s;
            }
    launch(dim3e{(unsigned)flash_key_tiles(q1), (unsigned)(B * NH), 1}, dkdv_smem<HS>(), [&] {
        mma_dkdv_kernel<HS>(dqkv.data(), with_acc ? acc.data() : NULL, dy.data(), lse.data(),
                            D.data(), qkv.data(), T, NH, q0, q1, sl2, scale);
    });
    launch(dim3e{(unsigned)flash_query_tiles(q0, q1), (unsigned)(B * NH), 1}, dq_smem<HS>(), [&] {
        mma_dq_kernel<HS>(dqkv.data(), dy.data(), lse.data(), D.data(), qkv.data(), T, NH, q0, q1,
                          sl2, scale);
    });

    /* the reference, in double, on the same bf16 inputs */
    maxdiff ey, el, edq, edk, edv;
    rowdiff ry, rdq, rdk, rdv;
    int untouched_bad = 0, written_bad = 0;
    auto Q = [&](int b, int t, int h, int d) { return (double)bf2f(qkv[(((size_t)b * T + t) * 3) * C + h * HS + d]); };
    auto K = [&](int b, int t, int h, int d) { return (double)bf2f(qkv[(((size_t)b * T + t) * 3 + 1) * C + h * HS + d]); };
    auto V = [&](int b, int t, int h, int d) { return (double)bf2f(qkv[(((size_t)b * T + t) * 3 + 2) * C + h * HS + d]); };
    auto DY = [&](int b, int t, int h, int d) { return (double)bf2f(dy[((size_t)b * T + t) * C + h * HS + d]); };
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<double> P((size_t)T * T, 0.0), y((size_t)T * HS, 0.0);
            std::vector<double> gk((size_t)T * HS, 0.0), gv((size_t)T * HS, 0.0);
            std::vector<double> mk((size_t)T * HS, 0.0), mv((size_t)T * HS, 0.0);
            for (int q = q0; q < q1; q++) {
                double mx = -INFINITY, sum = 0.0;
                std::vector<double> s(q + 1);
                for (int k = 0; k <= q; k++) {
                    double dot = 0;
                    for (int d = 0; d < HS; d++)
                        dot += Q(b, q, h, d) * K(b, k, h, d);
                    s[k] = dot * scale;
                    mx = fmax(mx, s[k]);
                }
                for (int k = 0; k <= q; k++)
                    sum += exp(s[k] - mx);
                el.add(lse[((size_t)b * NH + h) * T + q], (mx + log(sum)) / log(2.0), 0.0);
                for (int k = 0; k <= q; k++)
                    P[(size_t)q * T + k] = exp(s[k] - mx) / sum;
                for (int d = 0; d < HS; d++) {
                    double o = 0, mo = 0;
                    for (int k = 0; k <= q; k++) {
                        o += P[(size_t)q * T + k] * V(b, k, h, d);
                        mo += fabs(P[(size_t)q * T + k] * V(b, k, h, d));
                    }
                    y[(size_t)q * HS + d] = o;
                    ey.add(bf2f(atty[((size_t)b * T + q) * C + h * HS + d]), o, mo);
                    ry.add(bf2f(atty[((size_t)b * T + q) * C + h * HS + d]), o, mo);
                }
                ry.end_row();
                /* backward of this row */
                double Dq = 0;
                for (int d = 0; d < HS; d++)
                    Dq += DY(b, q, h, d) * y[(size_t)q * HS + d];
                std::vector<double> gq(HS, 0.0), mq(HS, 0.0);
                for (int k = 0; k <= q; k++) {
                    double p = P[(size_t)q * T + k], dp = 0;
                    for (int d = 0; d < HS; d++)
                        dp += DY(b, q, h, d) * V(b, k, h, d);
                    double ds = p * (dp - Dq);
                    for (int d = 0; d < HS; d++) {
                        gv[(size_t)k * HS + d] += p * DY(b, q, h, d);
                        gk[(size_t)k * HS + d] += ds * scale * Q(b, q, h, d);
                        gq[d] += ds * scale * K(b, k, h, d);
                        mv[(size_t)k * HS + d] += fabs(p * DY(b, q, h, d));
                        mk[(size_t)k * HS + d] += fabs(ds * scale * Q(b, q, h, d));
                        mq[d] += fabs(ds * scale * K(b, k, h, d));
                    }
                }
                for (int d = 0; d < HS; d++) {
                    edq.add(bf2f(dqkv[(((size_t)b * T + q) * 3) * C + h * HS + d]), gq[d], mq[d]);
                    rdq.add(bf2f(dqkv[(((size_t)b * T + q) * 3) * C + h * HS + d]), gq[d], mq[d]);
                }
                rdq.end_row();
            }
            for (int t = 0; t < T; t++) {
                for (int d = 0; d < HS; d++) {
                    size_t ok_ = (((size_t)b * T + t) * 3 + 1) * C + h * HS + d, ov = ok_ + C;
                    size_t oq = ok_ - C, oy = ((size_t)b * T + t) * C + h * HS + d;
                    bool kv_rows = t < q1, q_rows = t >= q0 && t < q1;
                    if (kv_rows) {
                        double wk = gk[(size_t)t * HS + d] + (with_acc ? acc0[ok_] : 0.0);
                        double wv = gv[(size_t)t * HS + d] + (with_acc ? acc0[ov] : 0.0);
                        double mk_ = mk[(size_t)t * HS + d] + (with_acc ? fabs(acc0[ok_]) : 0.0);
                        double mv_ = mv[(size_t)t * HS + d] + (with_acc ? fabs(acc0[ov]) : 0.0);
                        edk.add(bf2f(dqkv[ok_]), wk, mk_);
                        edv.add(bf2f(dqkv[ov]), wv, mv_);
                        rdk.add(bf2f(dqkv[ok_]), wk, mk_);
                        rdv.add(bf2f(dqkv[ov]), wv, mv_);
                        if (with_acc && (fabs(acc[ok_] - wk) > 2e-2 * (1 + fabs(wk)) ||
                                         fabs(acc[ov] - wv) > 2e-2 * (1 + fabs(wv))))
                            written_bad++;
                    } else {
                        untouched_bad += dqkv[ok_].u != nanb.u || dqkv[ov].u != nanb.u;
                        if (with_acc)
                            untouched_bad += acc[ok_] != acc0[ok_] || acc[ov] != acc0[ov];
                    }
                    if (!q_rows)
                        untouched_bad += dqkv[oq].u != nanb.u || atty[oy].u != nanb.u;
                }
                if (t < q1) {
                    rdk.end_row();
                    rdv.end_row();
                }
            }
        }
    /* bf16 outputs (2^-8 relative) and P, dS rounded to bf16 before their products */
    struct {
        const char *what;
        const maxdiff *m;
        double tol;
    } outs[] = {{"y", &ey, 1.5e-2}, {"dq", &edq, 2.5e-2}, {"dk", &edk, 2.5e-2}, {"dv", &edv, 2.5e-2}};
    for (auto &o : outs) {
        snprintf(name, sizeof name, "%s.%s", tag, o.what);
        check(name, o.m->rel() <= o.tol, "relative difference %.3g > %.3g", o.m->rel(), o.tol);
    }
    struct {
        const char *what;
        const rowdiff *r;
    } rows[] = {{"y", &ry}, {"dq", &rdq}, {"dk", &rdk}, {"dv", &rdv}};
    for (auto &r : rows) {
        snprintf(name, sizeof name, "%s.%s.each_row", tag, r.what);
        check(name, r.r->worst() <= 6e-2, "worst row's relative difference %.3g > %.3g",
              r.r->worst(), 6e-2);
    }
    snprintf(name, sizeof name, "%s.lse", tag);
    check(name, el.d <= 1e-3, "largest difference %.3g > %.3g (log2 units)", el.d, 1e-3);
    snprintf(name, sizeof name, "%s.other_rows_untouched", tag);
    check(name, untouched_bad == 0, "%.0f values written outside the pass's rows", untouched_bad);
    if (with_acc) {
        snprintf(name, sizeof name, "%s.accumulator_holds_the_sum", tag);
        check(name, written_bad == 0, "%.0f accumulator values differ from what was written",
              written_bad);
    }
}

} /* namespace emu */

int main()
{
    using namespace emu;
    run_case<16>(1, 2, 80, 0, 80, false);
    run_case<64>(1, 2, 200, 0, 200, false);   /* whole unmasked tiles, and a partial last one */
    run_case<64>(1, 1, 200, 46, 190, true);   /* a slice: q0 not on a tile, keys [0, q1) */
    run_case<32>(2, 1, 70, 14, 70, true);
    run_case<128>(1, 1, 130, 0, 130, false);
    run_case<64>(1, 1, 200, 0, 200, false, true);
    run_case<64>(1, 1, 200, 46, 190, true, true);
    eager = true; /* the other schedule, on the cases with several tiles to walk */
    run_case<64>(1, 2, 200, 0, 200, false);
    run_case<64>(1, 1, 200, 46, 190, true);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
