/* The optimizer's kernels (adamw.cu launches them): AdamW over spans of the stage's parameters and
 * the sums of squares of ranges, each call one launch for up to ADAMW_LAUNCH_SPANS spans or
 * SQ_LAUNCH_RANGES ranges (the spans travel as the kernel's parameter: no table to upload, no
 * host wait), so that a ZeRO shard cut into a bucket's piece per bucket (about 1,500 at GPT-2
 * 1.5B) costs a few dozen launches, not one or two per bucket. Written against a few primitives
 * the includer defines, so that the same source runs on the host emulator that checks it without
 * a GPU (tests/unit/adamw_emu.cc):
 *   floatX, put(p, f)              the bf16 copy's type, a store of f into it
 *   struct adamw_span              optimizer.h's (the host's spans), memset
 *   f4, load4(p), store4(p, v)     4 floats (.x .y .z .w), 16-byte aligned
 *   block_sum_fixed(v)             block_sum.cuh
 *   __syncthreads(), __shared__, threadIdx, blockIdx, blockDim, __global__, __device__,
 *   __forceinline__
 * and adamw_math.h's formula. Include inside the includer's namespace. */
#pragma once

#define ADAMW_THREADS 256
#define ADAMW_ELEMS 4          /* elements a thread, ADAMW_THREADS apart */
#define ADAMW_LAUNCH_SPANS 48  /* spans a launch: 48 x 64 bytes of kernel parameter (of 4 KiB) */
#define SQ_THREADS 256
#define SQ_MIN_PER_BLOCK 4096  /* a range's blocks: one per 4,096 elements, 1 to SQ_BLOCKS */
#define SQ_LAUNCH_RANGES 128   /* ranges a launch: 128 x 24 bytes of kernel parameter */

/* AdamW on parameters [lo, hi) of the stage: p, g, m, v (and pX, the bf16 copy, when not NULL)
 * point at parameter lo's element; blocks [first, first + its blocks) of the launch take it, vec
 * elements a thread at a time (4: p, g, m and v all 16-byte aligned, 16-byte accesses; else 1) */
struct adamw_dspan {
    float *p;
    const float *g;
    float *m, *v;
    floatX *pX;
    size_t lo, hi;
    unsigned first;
    int vec;
};
struct adamw_launch {
    struct adamw_dspan sp[ADAMW_LAUNCH_SPANS];
    int n;
};

/* the blocks AdamW gives n elements (VEC consecutive elements a thread, ADAMW_ELEMS times) */
static inline unsigned adamw_blocks(size_t n, int vec)
{
    size_t per = (size_t)ADAMW_THREADS * ADAMW_ELEMS * (size_t)vec;
    return (unsigned)((n + per - 1) / per);
}

/* the sums of squares of x[0, n) in `blocks` partial sums (range r of a launch: blocks
 * [first, first + blocks), partials at the launch's base + first) */
struct sq_drange {
    const float *x;
    size_t n;
    unsigned first, blocks;
};
struct sq_launch {
    struct sq_drange r[SQ_LAUNCH_RANGES];
    int n;
};

/* the partial sums a range of n elements gets: one per SQ_MIN_PER_BLOCK elements, at least 1, at
 * most SQ_BLOCKS (a range of 4 Mi elements or more: SQ_BLOCKS, as one range always had) */
static inline unsigned sq_blocks(size_t n)
{
    if (n == 0)
        return 0;
    size_t b = (n + SQ_MIN_PER_BLOCK - 1) / SQ_MIN_PER_BLOCK;
    return (unsigned)(b < SQ_BLOCKS ? b : SQ_BLOCKS);
}

/* The next launch's spans: sp[*i ..] (empty ones skipped) into L, up to ADAMW_LAUNCH_SPANS, *i
 * moved past them; a span on the stage's own parameters (p == params + lo) writes their bf16
 * copy wX + lo too (wX NULL: no copy); each span's vector width 4 where its four buffers are
 * 16-byte aligned, else 1. Returns the launch's blocks (0: no span left). */
static inline unsigned adamw_next_launch(struct adamw_launch *L, const struct adamw_span *sp,
                                         int n, int *i, const float *params, floatX *wX)
{
    memset(L, 0, sizeof *L);
    unsigned blocks = 0;
    for (; *i < n && L->n < ADAMW_LAUNCH_SPANS; ++*i) {
        const struct adamw_span *a = &sp[*i];
        if (a->hi == a->lo)
            continue;
        floatX *pX = wX && a->p == params + a->lo ? wX + a->lo : NULL;
        uintptr_t al = (uintptr_t)a->p | (uintptr_t)a->g | (uintptr_t)a->m | (uintptr_t)a->v;
        int vec = al % 16 == 0 ? 4 : 1;
        L->sp[L->n++] = adamw_dspan{a->p, a->g, a->m, a->v, pX, a->lo, a->hi, blocks, vec};
        blocks += adamw_blocks(a->hi - a->lo, vec);
    }
    return blocks;
}

/* The next launch's ranges: [lo[r], hi[r]) of base from r = *r on (empty ones skipped) into L, up
 * to SQ_LAUNCH_RANGES, *r moved past them. Returns the launch's blocks (its partial sums; 0: no
 * range left). */
static inline unsigned sq_next_launch(struct sq_launch *L, const float *base, const size_t *lo,
                                      const size_t *hi, int n, int *r)
{
    memset(L, 0, sizeof *L);
    unsigned blocks = 0;
    for (; *r < n && L->n < SQ_LAUNCH_RANGES; ++*r) {
        unsigned b = sq_blocks(hi[*r] - lo[*r]);
        if (!b)
            continue;
        L->r[L->n++] = sq_drange{base + lo[*r], hi[*r] - lo[*r], blocks, b};
        blocks += b;
    }
    return blocks;
}

/* the span (range) of block b: the last whose first block is at most b */
template <typename S> __device__ __forceinline__ int span_of(const S *sp, int n, unsigned b)
{
    int a = 0, z = n - 1;
    while (a < z) {
        int mid = (a + z + 1) / 2;
        if (sp[mid].first <= b)
            a = mid;
        else
            z = mid - 1;
    }
    return a;
}

/* A block's share of span S (its elements from base on): a thread takes VEC consecutive
 * elements (VEC 4: 16-byte loads and stores), ADAMW_ELEMS times, ADAMW_THREADS * VEC apart,
 * stepping on through the tensor table from seg (the tensor of the block's first element). */
template <int VEC>
__device__ __forceinline__ void adamw_block(const struct adamw_dspan &S, size_t base, int seg,
                                            const size_t *seg_end, const int *seg_decay, int nseg,
                                            const struct adamw_coef &k, float wd, float gs)
{
    size_t lo = S.lo, hi = S.hi;
    float *p = S.p, *m = S.m, *v = S.v;
    const float *g = S.g;
    floatX *pX = S.pX;
    for (int e = 0; e < ADAMW_ELEMS; e++) {
        size_t i0 = base + ((size_t)e * ADAMW_THREADS + threadIdx.x) * VEC;
        if (i0 >= hi)
            return;
        size_t j0 = i0 - lo;
        if (VEC == 4 && i0 + 3 < hi) {
            f4 pp = load4(p + j0), gg = load4(g + j0), mm = load4(m + j0), vv = load4(v + j0);
            float *pa = &pp.x, *ga = &gg.x, *ma = &mm.x, *va = &vv.x;
            for (int q = 0; q < 4; q++) {
                while (seg < nseg - 1 && i0 + q >= seg_end[seg])
                    seg++;
                adamw_elem(&k, &pa[q], &ma[q], &va[q], ga[q], gs, seg_decay[seg] ? wd : 0.0f);
                if (pX)
                    put(pX + j0 + q, pa[q]);
            }
            store4(p + j0, pp);
            store4(m + j0, mm);
            store4(v + j0, vv);
            continue;
        }
        for (int q = 0; q < VEC && i0 + q < hi; q++) { /* VEC 1, or the span's last elements */
            size_t j = j0 + q;
            while (seg < nseg - 1 && i0 + q >= seg_end[seg])
                seg++;
            float pj = p[j], mj = m[j], vj = v[j];
            adamw_elem(&k, &pj, &mj, &vj, g[j], gs, seg_decay[seg] ? wd : 0.0f);
            p[j] = pj;
            m[j] = mj;
            v[j] = vj;
            if (pX)
                put(pX + j, pj);
        }
    }
}

/* Each block finds its span, then the tensor of its first element once (seg_end: ascending
 * ends; seg_decay: weight decay or not; one thread's binary search); then its share of the span
 * with the span's vector width (the same for the whole block: no divergence). */
__global__ void adamw_kernel(const struct adamw_launch L, const size_t *seg_end,
                             const int *seg_decay, int nseg, struct adamw_coef k, float wd,
                             float gs)
{
    __shared__ int seg0;
    const struct adamw_dspan &S = L.sp[span_of(L.sp, L.n, blockIdx.x)];
    size_t base = S.lo + (size_t)(blockIdx.x - S.first) * ADAMW_THREADS * ADAMW_ELEMS * S.vec;
    if (threadIdx.x == 0) { /* the tensor of the block's first element */
        int a = 0, b = nseg - 1;
        while (a < b) {
            int mid = (a + b) / 2;
            if (seg_end[mid] > base)
                b = mid;
            else
                a = mid + 1;
        }
        seg0 = a;
    }
    __syncthreads();
    if (S.vec == 4)
        adamw_block<4>(S, base, seg0, seg_end, seg_decay, nseg, k, wd, gs);
    else
        adamw_block<1>(S, base, seg0, seg_end, seg_decay, nseg, k, wd, gs);
}

/* partial[first + i] (i < the range's blocks) = the squares of the range's elements i * SQ_THREADS
 * + t, stepping by blocks * SQ_THREADS, summed in fp64 in a fixed tree */
__global__ void sq_partial_kernel(double *partial, const struct sq_launch L)
{
    const struct sq_drange &R = L.r[span_of(L.r, L.n, blockIdx.x)];
    unsigned i = blockIdx.x - R.first;
    double s = 0.0;
    for (size_t j = (size_t)i * SQ_THREADS + threadIdx.x; j < R.n; j += (size_t)R.blocks * SQ_THREADS)
        s += (double)R.x[j] * R.x[j];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* out[0] = the sum of partial[0, n) in a fixed order (one block) */
__global__ void sq_final_kernel(double *out, const double *partial, size_t n)
{
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += partial[i];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0)
        out[0] = s;
}
