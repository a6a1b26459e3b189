/* How the column sums (the bias gradients, LayerNorm's weight and bias gradients) split their
 * rows, as pure functions so that the CPU can check them (tests/unit/test_cuda_colsum.c) and the
 * host emulator can run the kernels that use them (tests/unit/colsum_emu.cc).
 *
 * N rows go in chunks of colsum_rows(N) consecutive rows, one block each: the block writes its
 * chunk's column sums to partial[chunk], and the finish adds the chunks in a fixed order (no
 * atomics: the same bits every run). A chunk has at most COLSUM_MAX_ROWS rows, and there are at
 * least COLSUM_MIN_CHUNKS chunks while chunks of COLSUM_MIN_ROWS rows allow it: with 64-row
 * chunks only, GPT-2 1.5B at B 4 (4,096 rows) gave 64 blocks to a GPU of 132 SMs. The number of
 * chunks never exceeds colsum_max_chunks(N_max) for any N <= N_max: the partial buffer's size;
 * nor COLSUM_MAX_CHUNKS.
 * Plain C; __host__ __device__ under nvcc. */
#ifndef HOLMES_COLSUM_PLAN_H
#define HOLMES_COLSUM_PLAN_H

#ifdef __CUDACC__
#define COLSUM_HD __host__ __device__ __forceinline__
#else
#define COLSUM_HD static inline
#endif

#define COLSUM_MAX_ROWS 64
#define COLSUM_MIN_ROWS 8
#define COLSUM_MIN_CHUNKS 256
/* the most chunks: the column sums' blocks take the chunks on their grid's y (CUDA's limit); past
 * 64 x 65,535 rows a chunk holds more than COLSUM_MAX_ROWS */
#define COLSUM_MAX_CHUNKS 65535
/* the finish: a block adds COLSUM_FINISH_COLS columns, COLSUM_FINISH_GROUPS threads a column,
 * thread g of a column adding the chunks g, g + GROUPS, ... in order, then thread 0 the groups'
 * sums in order */
#define COLSUM_FINISH_COLS 32
#define COLSUM_FINISH_GROUPS 8

COLSUM_HD int colsum_ceil_div(int a, int b) { return (int)(((long long)a + b - 1) / b); }

/* the chunks aimed at: COLSUM_MIN_CHUNKS, or more when the rows would exceed COLSUM_MAX_ROWS a
 * chunk, or fewer when they would fall under COLSUM_MIN_ROWS */
COLSUM_HD int colsum_target(int n)
{
    int t = colsum_ceil_div(n, COLSUM_MAX_ROWS), few = colsum_ceil_div(n, COLSUM_MIN_ROWS);
    if (t < COLSUM_MIN_CHUNKS)
        t = COLSUM_MIN_CHUNKS < few ? COLSUM_MIN_CHUNKS : few;
    return t < COLSUM_MAX_CHUNKS ? t : COLSUM_MAX_CHUNKS;
}
/* rows a chunk (the last may have fewer); n > 0 */
COLSUM_HD int colsum_rows(int n)
{
    return n > 0 ? colsum_ceil_div(n, colsum_target(n)) : 1;
}
/* chunks of n rows; chunk k is rows [k rows, min(n, (k + 1) rows)) */
COLSUM_HD int colsum_chunks(int n)
{
    return n > 0 ? colsum_ceil_div(n, colsum_rows(n)) : 0;
}
/* the most chunks any n <= n_max makes: colsum_chunks(n) <= colsum_target(n), which grows with n */
COLSUM_HD int colsum_max_chunks(int n_max)
{
    return n_max > 0 ? colsum_target(n_max) : 0;
}

#endif
