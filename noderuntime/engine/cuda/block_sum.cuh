/* Block-wide sum in fp64 (blockDim.x at most 1024 and a power of two), a fixed tree: the same
 * bits every run. Thread 0 gets the result. Device code only, so that the host emulator of the
 * kernels that use it (tests/unit/adamw_emu.cc) runs this source too; include inside the
 * includer's namespace. */
#pragma once

__device__ inline double block_sum_fixed(double v)
{
    __shared__ double sh[1024];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}
