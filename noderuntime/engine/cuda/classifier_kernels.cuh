/* The classifier's fused cross-entropy kernels (classifier.cu launches them), written against a
 * few primitives that the includer defines, so that the same source compiles for the GPU and for
 * the host emulator that checks it without one (tests/unit/classifier_emu.cc):
 *   floatX                       the logits' type; tof(x) as float, put(p, f) stores f
 *   pack16<T>, load16(p), store16(p, v)   16 bytes of T (.v[]), the unit of the vector accesses
 *   warp_sum(v), warp_max(v)     over the warp, every lane gets it
 *   block_sync()                 __syncthreads
 *   CLASSIFIER_SMEM(name)        float name[32], shared (a block reduction's warp results)
 * and threadIdx, blockIdx, blockDim, __global__, __device__, __forceinline__, __launch_bounds__,
 * expf, logf.
 * Include inside the includer's namespace. */
#pragma once

/* v over the block (blockDim.x a multiple of 32, at most 1024): the sum, or the max when is_max;
 * every thread gets it. sh: the block's shared float[32]; the first barrier keeps an earlier
 * reduction's readers of sh ahead of this one's writers. */
__device__ __forceinline__ float classifier_block_reduce(float v, float *sh, bool is_max)
{
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    block_sync();
    if (lane == 0)
        sh[w] = v;
    block_sync();
    v = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(v) : warp_sum(v);
}

/* Row j of blockIdx.x = rows [t0, t0 + S) of each sequence of T: the logits row b T + t0 + j % S
 * (b = j / S). One block per row, its Vp logits (Vp <= blockDim.x * VEC * IT, 16-byte aligned
 * rows) read once into registers, IT vectors of VEC a thread (vector i of thread x: the logits
 * from (i blockDim.x + x) VEC): the row's max, then its sum of exponentials, then in place
 * logits[r] = dscale (softmax - onehot(target)), zero in the padded columns [V, Vp), and
 * losses[r] = logsumexp - logits[r][target]. Each row is read from memory once and written once
 * (a second read of a 100 KB row, as GPT-2's, came from DRAM: the rows a GPU holds at once are
 * about its L2). */
constexpr int CLASSIFIER_THREADS = 512; /* a block: at most 128 registers a thread */
template <int VEC, int IT>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
classifier_rows_kernel(float *losses, floatX *logits, const int *targets, int V,
                                       int Vp, int T, int t0, int S, float dscale)
{
    CLASSIFIER_SMEM(sh);
    size_t r = (size_t)(blockIdx.x / S) * T + t0 + blockIdx.x % S;
    floatX *lg = logits + r * Vp;
    int tg = targets[r];
    float xt = tof(lg[tg]); /* before any thread writes the row (the reductions' barriers) */
    pack16<floatX> x[IT];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        int v = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
        if (v < Vp) {
            x[i] = load16(lg + v);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                if (v + j < V)
                    m = fmaxf(m, tof(x[i].v[j]));
        }
    }
    float mx = classifier_block_reduce(m, sh, true);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        int v = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
        if (v < Vp)
#pragma unroll
            for (int j = 0; j < VEC; j++)
                if (v + j < V)
                    sum += expf(tof(x[i].v[j]) - mx);
    }
    sum = classifier_block_reduce(sum, sh, false);
    if (threadIdx.x == 0)
        losses[r] = logf(sum) + mx - xt;
    float inv = dscale / sum;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        int v = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
        if (v < Vp) {
            pack16<floatX> p;
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                float g = v + j < V ? expf(tof(x[i].v[j]) - mx) * inv : 0.0f;
                put(&p.v[j], v + j == tg ? g - dscale : g);
            }
            store16(lg + v, p);
        }
    }
}
