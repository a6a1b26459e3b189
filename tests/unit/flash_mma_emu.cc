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
#include "kernel_emu.h"

#include "cuda/flash_plan.h"

namespace emu {

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
    if ((uintptr_t)p & 3)
        die("store_bf2: a 4-byte store to an address not 4-byte aligned");
    check_global(p, 4, true);
    p[0] = f2bf(x);
    p[1] = f2bf(y);
}
static void store_bf1(bf16 *p, float x)
{
    check_global(p, 2, true);
    p[0] = f2bf(x);
}
static void load8(float f[8], const bf16 *p, bool vec)
{
    if (vec && ((uintptr_t)p & 15))
        die("load8: a 16-byte load from an address not 16-byte aligned");
    check_global(p, 16, false);
    for (int j = 0; j < 8; j++)
        f[j] = bf2f(p[j]);
}
#define FM_SMEM(name) unsigned char *name = smem_base

/* the kernels read shared floats (lse, D rows) and global floats directly: those reads are
 * checked where they come from (rows_into's and the dQ kernel's lse/D reads stay inside the
 * registered buffers by construction of the test: every row's entry exists) */
#include "cuda/flash_mma_kernels.cuh"

/* cp.async's queues start empty with each block, and every copy must have been waited for */
static void cq_clear(int n)
{
    for (int i = 0; i < n; i++) {
        cq[i].list.clear();
        cq[i].ends.clear();
    }
}
static void cq_all_waited(int n)
{
    for (int i = 0; i < n; i++)
        if (!cq[i].list.empty())
            die("cp.async copies never waited for");
}
/* a launch of the flash kernels: NTHREADS a block */
static void launch(dim3e grid, size_t smem_bytes, const std::function<void()> &body)
{
    block_begin_hook = cq_clear;
    block_end_hook = cq_all_waited;
    launch(grid, dim3e{(unsigned)NTHREADS, 1, 1}, smem_bytes, body);
}

/* the same per row (a query's y or dq, a key's dk or dv): the worst row's largest difference over
 * its largest magnitude (floored at 1 % of the largest anywhere), so that one pair wrongly masked or
 * let through, small against the whole tensor, is large against its own row */
struct rowdiff {
    std::vector<double> d, m;
    double cd = 0, cm = 0;
    void add(double got, double want, double mag)
    {
        cd = fmax(cd, absdiff(got, want));
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

static bool scalar_d; /* the D kernel's 2-byte loads (as for rows not 16-byte aligned) */

/* one pass [q0, q1) of B sequences of T, NH heads of HS; with_acc: the sliced backward's fp32
 * accumulator for dK, dV (starting from random values, as after a later slice); stored: dQ from
 * the dS the dK/dV kernel stores (the workspace starting as NaNs, so that a pair read but never
 * written, or read unmasked, shows), else the kernel that recomputes it */
template <int HS> static void run_case(int B, int NH, int T, int q0, int q1, bool with_acc,
                                       bool rising = false, bool stored = true)
{
    char name[160], tag[112];
    snprintf(tag, sizeof tag, "flash_mma_emu.hs%d.B%d.NH%d.T%d.[%d,%d)%s%s%s%s", HS, B, NH, T, q0,
             q1, with_acc ? ".acc" : "", rising ? ".rising" : "", eager ? ".eager" : "",
             stored ? "" : ".recompute_dq");
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
               {dqkv.data(), S3 * 2, true}, {lse.data(), SR * 4, true}, {D.data(), SR * 4, true}};
    if (with_acc)
        regions.push_back({acc.data(), S3 * 4, true});
    /* exactly the pass's workspace: a row or column past it is out of bounds */
    std::vector<bf16> ws(stored ? (size_t)B * NH * q1 * ds_ld(q0, q1) : 0, nanb);
    if (stored)
        regions.push_back({ws.data(), ws.size() * 2, true});
    float scale = 1.0f / sqrtf((float)HS), sl2 = 1.4426950408889634f * scale;

    launch(dim3e{(unsigned)fwd_blocks<HS>(q0, q1), (unsigned)(B * NH), 1}, fwd_smem<HS>(), [&] {
        mma_fwd_kernel<HS>(atty.data(), lse.data(), qkv.data(), T, NH, q0, q1, sl2);
    });
    /* D = rowsum(dy * y) from the forward's own output: the kernel (in blocks of 64 threads, so
     * that rows spread over several blocks and lanes past the last row exist), against the same
     * sum on the host in double */
    {
        size_t lanes = (size_t)B * NH * (q1 - q0) * (HS / 8);
        bool vec = (((uintptr_t)dy.data() | (uintptr_t)atty.data()) & 15) == 0 && !scalar_d;
        for (auto &x : D)
            x = NAN;
        launch(dim3e{(unsigned)((lanes + 63) / 64), 1, 1}, dim3e{64, 1, 1}, 0, [&] {
            mma_dsum_kernel<HS>(D.data(), dy.data(), atty.data(), B, T, NH, q0, q1, vec);
        });
        double worst = 0.0;
        int wrong_rows = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    float got = D[((size_t)b * NH + h) * T + t];
                    if (t < q0 || t >= q1) {
                        wrong_rows += !std::isnan(got); /* rows outside the pass: not written */
                        continue;
                    }
                    double want = 0.0, mag = 0.0;
                    for (int d = 0; d < HS; d++) {
                        double x = (double)bf2f(dy[((size_t)b * T + t) * C + h * HS + d]) *
                                   bf2f(atty[((size_t)b * T + t) * C + h * HS + d]);
                        want += x;
                        mag += fabs(x);
                    }
                    worst = fmax(worst, absdiff(got, want) / (mag + 1e-30));
                    wrong_rows += std::isnan(got);
                }
        snprintf(name, sizeof name, "%s.D%s", tag, vec ? "" : ".scalar");
        check(name, worst <= 1e-5 && wrong_rows == 0,
              "relative difference %.3g (bound 1e-5), %d rows unwritten or written outside", worst,
              wrong_rows);
    }
    launch(dim3e{(unsigned)flash_key_tiles(q1), (unsigned)(B * NH), 1}, dkdv_smem<HS>(), [&] {
        mma_dkdv_kernel<HS>(dqkv.data(), with_acc ? acc.data() : NULL, stored ? ws.data() : NULL,
                            dy.data(), lse.data(), D.data(), qkv.data(), T, NH, q0, q1, sl2, scale);
    });
    if (stored)
        launch(dim3e{(unsigned)flash_query_tiles(q0, q1), (unsigned)(B * NH), 1}, dq_ds_smem<HS>(),
               [&] {
                   mma_dq_ds_kernel<HS>(dqkv.data(), ws.data(), qkv.data(), T, NH, q0, q1, scale);
               });
    else
        launch(dim3e{(unsigned)flash_query_tiles(q0, q1), (unsigned)(B * NH), 1}, dq_smem<HS>(),
               [&] {
                   mma_dq_kernel<HS>(dqkv.data(), dy.data(), lse.data(), D.data(), qkv.data(), T,
                                     NH, q0, q1, sl2, scale);
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
    emu_prog = "flash_mma_emu";
    run_case<16>(1, 2, 80, 0, 80, false);
    run_case<64>(1, 2, 200, 0, 200, false);   /* whole unmasked tiles, and a partial last one */
    run_case<64>(1, 1, 200, 46, 190, true);   /* a slice: q0 not on a tile, keys [0, q1) */
    run_case<32>(2, 1, 70, 14, 70, true);
    /* q0 = 1 (mod 16): a strip's last query is a key tile's first key, the one pair it sees there */
    run_case<64>(1, 1, 160, 33, 160, false);
    run_case<128>(1, 1, 130, 0, 130, false);
    run_case<64>(1, 1, 200, 0, 200, false, true);
    run_case<64>(1, 1, 200, 46, 190, true, true);
    /* q0 odd: the dK/dV kernel's tiles from a key tile start off the workspace's 4-byte pairs */
    run_case<64>(1, 1, 200, 33, 171, true, true);
    /* the recomputing dQ kernel (GPU_FLASH_RECOMPUTE_DQ) */
    run_case<64>(1, 2, 200, 0, 200, false, false, false);
    run_case<64>(1, 1, 200, 46, 190, true, true, false);
    run_case<32>(2, 1, 70, 14, 70, true, false, false);
    eager = true; /* the other schedule, on the cases with several tiles to walk */
    scalar_d = true; /* and the D kernel's other loads */
    run_case<64>(1, 2, 200, 0, 200, false);
    run_case<64>(1, 1, 200, 46, 190, true);
    run_case<64>(1, 1, 200, 46, 190, true, false, false);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
