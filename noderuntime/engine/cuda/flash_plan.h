/* The tile arithmetic of flash attention (flash.cu), as pure functions, so that the CPU can check
 * it (tests/unit/test_cuda_flash.c runs the same tiled algorithm in C against a plain attention,
 * and counts that every visible query-key pair is visited once). Causal: query q sees key k when
 * k <= q. A pass covers the queries [q0, q1) of each sequence (a token slice's rectangle: the
 * keys [0, q1)). Plain C; __host__ __device__ under nvcc. */
#ifndef HOLMES_FLASH_PLAN_H
#define HOLMES_FLASH_PLAN_H

#include <stddef.h>

#ifdef __CUDACC__
#define FLASH_HD __host__ __device__ __forceinline__
#else
#define FLASH_HD static inline
#endif

#define FLASH_TILE 64 /* queries a block, keys a tile */

/* query tiles of [q0, q1), and the first query of tile i */
FLASH_HD int flash_query_tiles(int q0, int q1) { return (q1 - q0 + FLASH_TILE - 1) / FLASH_TILE; }
FLASH_HD int flash_query_tile(int q0, int q1, int i)
{
    (void)q1;
    return q0 + i * FLASH_TILE;
}
/* the keys a query tile starting at qt0 needs: [0, flash_key_end) */
FLASH_HD int flash_key_end(int qt0, int q1)
{
    return qt0 + FLASH_TILE < q1 ? qt0 + FLASH_TILE : q1;
}
/* key tiles of [0, q1) (the backward's dK, dV blocks) */
FLASH_HD int flash_key_tiles(int q1) { return (q1 + FLASH_TILE - 1) / FLASH_TILE; }
/* the first query that can see a key tile starting at kt0: its query tiles start there */
FLASH_HD int flash_first_query(int q0, int kt0) { return kt0 > q0 ? kt0 : q0; }
/* whether nq queries from qfirst can see any key from kfirst (else a warp skips the pair) */
FLASH_HD int flash_rows_see(int qfirst, int nq, int kfirst) { return qfirst + nq - 1 >= kfirst; }
/* query q of the pass [., q1) sees key k */
FLASH_HD int flash_visible(int q, int k, int q1) { return q < q1 && k <= q; }
/* whether the nq queries from qfirst against the nk keys from kfirst need the mask: a key after a
 * query, or a query at or past q1. When not, every pair is visible (the kernels,
 * flash_mma_kernels.cuh, skip the test) */
FLASH_HD int flash_needs_mask(int qfirst, int nq, int kfirst, int nk, int q1)
{
    return kfirst + nk - 1 > qfirst || qfirst + nq - 1 >= q1;
}
/* The kernels take (sequence, head) pairs on their grid's y, at most FLASH_MAX_BH (CUDA's
 * limit); a pass over more goes in launches of flash_launch_seqs(NH, max_bh) whole sequences
 * (at least 1: NH is at most 1,024) */
#define FLASH_MAX_BH 65535
FLASH_HD int flash_launch_seqs(int NH, int max_bh)
{
    int n = max_bh / NH;
    return n > 0 ? n : 1;
}
/* the row length of the backward's dS workspace for a pass of n queries: whole query tiles, so
 * that every tile's columns are inside the row (flash_mma_kernels.cuh, ds_ld) */
FLASH_HD int flash_ds_cols(int n) { return (n + FLASH_TILE - 1) / FLASH_TILE * FLASH_TILE; }
/* The backward's dS workspace in bytes (bf16) for B sequences of T and NH heads, or 0 when that
 * passes FLASH_DS_MAX_BYTES: long sequences keep flash attention's memory linear in T, their dQ
 * kernel recomputing S and dP instead (GPT-2 124M at B 16, T 1024 takes 403 MB; one head at
 * T 32,768 would take 2 GiB). The planner's memory model (cost_model.c) applies the same rule. */
#define FLASH_DS_MAX_BYTES ((size_t)1 << 30)
FLASH_HD size_t flash_ds_bytes(int B, int NH, int T)
{
    size_t b = (size_t)B * NH * T * flash_ds_cols(T) * 2;
    return b <= FLASH_DS_MAX_BYTES ? b : 0;
}

#endif
