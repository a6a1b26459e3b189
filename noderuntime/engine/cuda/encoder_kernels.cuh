/* The token embedding's backward (encoder.cu launches it), written against a few primitives the
 * includer defines, so that the same source compiles for the GPU and for the host emulator that
 * checks it without one (tests/unit/encoder_emu.cc):
 *   floatX                       the activations' type; tof(x) as float
 *   pack16<T>, load16(p)         16 bytes of T (.v[]), the unit of the vector loads
 *   block_sync()                 __syncthreads
 *   WTE_BWD_SMEM(name, VEC)      float name[WTE_BWD_SMEM_FLOATS(VEC)], shared
 * and threadIdx, blockIdx, blockDim, __global__, __device__, __forceinline__, __launch_bounds__.
 * Include inside the includer's namespace. */
#pragma once

/* a block's threads, and its warps */
#define WTE_BWD_THREADS 256
#define WTE_BWD_WARPS (WTE_BWD_THREADS / 32)
/* a token with more positions than this in the micro-batch has them split among its block's warps */
#define WTE_SPLIT_ABOVE 32
/* vectors of VEC columns a lane sums at a time: a column tile of 32 VEC WTE_NV columns */
#define WTE_NV 4
#define WTE_TILE(VEC) (32 * (VEC) * WTE_NV)
#define WTE_BWD_SMEM_FLOATS(VEC) (WTE_BWD_WARPS * WTE_TILE(VEC))

/* VEC elements from p as floats (16-byte loads when VEC > 1) */
template <int VEC> __device__ __forceinline__ void wte_load(float *out, const floatX *p)
{
    if (VEC > 1) {
        pack16<floatX> q = load16(p);
        for (int k = 0; k < VEC; k++)
            out[k] = tof(q.v[k]);
    } else {
        out[0] = tof(p[0]);
    }
}

/* dwte rows: block u takes distinct token utok[u], whose positions are upos[ustart[u]] ..
 * upos[ustart[u + 1] - 1] (ascending), and adds their gradient rows dres[position] to its row of
 * dwte, in a fixed order (no atomics: the same bits every run), when it has at most
 * WTE_SPLIT_ABOVE positions (nearly every token of a micro-batch): thread t takes the columns
 * t, t + 256, ... and sums the positions in order. Tokens with more are wte_split_kernel's. */
__global__ void __launch_bounds__(WTE_BWD_THREADS)
wte_backward_kernel(float *dwte, const floatX *dres, const int *utok, const int *ustart,
                    const int *upos, int C)
{
    int u = blockIdx.x, j0 = ustart[u], j1 = ustart[u + 1];
    if (j1 - j0 > WTE_SPLIT_ABOVE)
        return;
    float *row = dwte + (size_t)utok[u] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = j0; j < j1; j++)
            acc += tof(dres[(size_t)upos[j] * C + c]);
        row[c] += acc;
    }
}

/* The tokens with more than WTE_SPLIT_ABOVE positions (a frequent token of text, which would make
 * one long serial block; launched only when there is one, on the same grid, the other blocks
 * returning at once): warp w sums the positions w, w + 8, w + 16, ... in order, lane l the
 * VEC-column vectors l, l + 32, ... of a column tile of WTE_TILE(VEC) columns; then, through
 * shared memory, each column's 8 warp sums are added in warp order, and the total to dwte's row.
 * VEC > 1 needs C a multiple of VEC and dres 16-byte aligned. */
template <int VEC>
__global__ void __launch_bounds__(WTE_BWD_THREADS)
wte_split_kernel(float *dwte, const floatX *dres, const int *utok, const int *ustart,
                 const int *upos, int C)
{
    WTE_BWD_SMEM(sh, VEC);
    int u = blockIdx.x, j0 = ustart[u], j1 = ustart[u + 1];
    if (j1 - j0 <= WTE_SPLIT_ABOVE) /* the same branch for every thread of the block */
        return;
    float *row = dwte + (size_t)utok[u] * C;
    const int TILE = WTE_TILE(VEC);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int c0 = 0; c0 < C; c0 += TILE) {
        float acc[WTE_NV][VEC];
        for (int i = 0; i < WTE_NV; i++)
            for (int k = 0; k < VEC; k++)
                acc[i][k] = 0.0f;
#pragma unroll 2
        for (int j = j0 + w; j < j1; j += WTE_BWD_WARPS) {
            const floatX *src = dres + (size_t)upos[j] * C;
#pragma unroll
            for (int i = 0; i < WTE_NV; i++) {
                int c = c0 + (lane + 32 * i) * VEC;
                if (c < C) {
                    float v[VEC];
                    wte_load<VEC>(v, src + c);
                    for (int k = 0; k < VEC; k++)
                        acc[i][k] += v[k];
                }
            }
        }
        block_sync(); /* the previous tile's sums have been read */
        for (int i = 0; i < WTE_NV; i++)
            for (int k = 0; k < VEC; k++)
                sh[w * TILE + (lane + 32 * i) * VEC + k] = acc[i][k];
        block_sync();
        for (int t = threadIdx.x; t < TILE && c0 + t < C; t += blockDim.x) {
            float s = 0.0f;
            for (int k = 0; k < WTE_BWD_WARPS; k++)
                s += sh[k * TILE + t];
            row[c0 + t] += s;
        }
    }
}
