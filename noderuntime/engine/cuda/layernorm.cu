/* LayerNorm (llm.c's layernorm.cuh), forward beside backward: one warp per row, statistics in
 * fp32, weights from the fp32 master copy, 16-byte loads and stores when the rows allow, a row
 * read from memory once and held in registers between the passes (forward: up to 8 vectors a lane,
 * 2,048 columns in bf16; backward, two rows: up to 4, 1,024, or what HOLMES_GPU_LN_BWD_MAX_IT
 * says: layernorm_prepare). The
 * backward makes its own weight and bias gradients: each block of colsum_rows(N) rows writes the
 * input's gradient row by row, then its columns' partial sums (re-reading rows the block has just
 * read, from the cache), and the finish adds the blocks' sums in a fixed order (no atomics: the
 * same bits every run). The column sums of the bias gradients (linear_bwd) split their rows the
 * same way. The kernels are layernorm_kernels.cuh's (also run on the host by
 * tests/unit/layernorm_emu.cc); the row split is colsum_plan.h's. */
#include "colsum_plan.h"
#include "stage.cuh"

namespace GPU_NS {

namespace {

#define COLSUM_FINISH_SMEM(name) __shared__ float name[2 * COLSUM_FINISH_GROUPS * COLSUM_FINISH_COLS]
#define LN_BWD_SMEM(name) __shared__ float name[LN_BWD_SMEM_FLOATS(XV)]

#include "layernorm_kernels.cuh"

int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} /* namespace */

int layernorm_prepare(struct gpu_stage *s)
{
    /* the vectors a lane of the backward holds: LN_BWD_DEFAULT_IT, or 0, 1, 2, 4 or 8 (an A/B
     * of the held rows' registers against re-reading them, for the GPU) */
    int it = LN_BWD_DEFAULT_IT;
    if (env_int("HOLMES_GPU_LN_BWD_MAX_IT", 0, LN_BWD_MAX_IT, &it, s->err, sizeof s->err) < 0)
        return -1;
    if (it & (it - 1))
        return stage_fail(s, "HOLMES_GPU_LN_BWD_MAX_IT '%d': must be 0, 1, 2, 4 or 8", it);
    s->ln_bwd_max_it = it;
    return 0;
}

int layernorm_fwd(struct gpu_stage *s, floatX *out, float *mean, float *rstd, const floatX *inp,
                  size_t woff, size_t boff, int N)
{
    PROF(&s->x, GPU_PART_LAYERNORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels;
    unsigned grid = blocks_for((size_t)N * 32, 256);
    /* bytes: the rows read and written, their statistics, the weights */
    struct kernel_rec r = mem_rec(GPU_KERNEL_LN_FWD, N, C,
                                  2.0 * N * C * sizeof(floatX) + 8.0 * N + 8.0 * C);
    int timed = prof_kernel_start(s->x.prof, s->x.stream, &r);
    const float *w = s->params + woff, *b = s->params + boff;
    bool wvec = aligned16(w) && aligned16(b);
    if (C % XV == 0 && aligned16(out) && aligned16(inp))
        by_row_its<LN_FWD_MAX_IT>(ln_row_its(C, XV, LN_FWD_MAX_IT), [&](auto it) {
            layernorm_forward_kernel<XV, decltype(it)::value><<<grid, 256, 0, s->x.stream>>>(
                out, mean, rstd, inp, w, b, N, C, wvec);
        });
    else
        layernorm_forward_kernel<1, 0><<<grid, 256, 0, s->x.stream>>>(out, mean, rstd, inp, w, b,
                                                                       N, C, false);
    LAUNCHED(s->x.stream);
    prof_kernel_end(s->x.prof, s->x.stream, timed);
    return 0;
}

int layernorm_bwd(struct gpu_stage *s, floatX *dinp, size_t woff, size_t boff, const floatX *dout,
                  const floatX *inp, const float *mean, const float *rstd, int N)
{
    PROF(&s->x, GPU_PART_LAYERNORM);
    char *EB = s->err;
    size_t EN = sizeof s->err;
    int C = s->c.channels, rows = colsum_rows(N), chunks = colsum_chunks(N);
    /* bytes: the input and its gradient read, the input's gradient read and written, the
     * statistics and the weight, the partial sums written */
    struct kernel_rec r = mem_rec(GPU_KERNEL_LN_BWD, N, C,
                                  4.0 * N * C * sizeof(floatX) + 8.0 * N + 4.0 * C +
                                      8.0 * chunks * C);
    int timed = prof_kernel_start(s->x.prof, s->x.stream, &r);
    const float *w = s->params + woff;
    if (C % XV == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp))
        by_row_its<LN_BWD_MAX_IT>(ln_row_its(C, XV, s->ln_bwd_max_it), [&](auto it) {
            layernorm_backward_kernel<XV, decltype(it)::value>
                <<<(unsigned)chunks, LN_BWD_THREADS, 0, s->x.stream>>>(
                    dinp, s->partial, dout, inp, w, mean, rstd, N, C, rows, aligned16(w));
        });
    else
        layernorm_backward_kernel<1, 0><<<(unsigned)chunks, LN_BWD_THREADS, 0, s->x.stream>>>(
            dinp, s->partial, dout, inp, w, mean, rstd, N, C, rows, false);
    LAUNCHED(s->x.stream);
    prof_kernel_end(s->x.prof, s->x.stream, timed);
    return colsum_finish(&s->x, s->grads + woff, s->grads + boff, s->partial, chunks, C);
}

int colsum_finish(struct gpu_ctx *x, float *gw, float *gb, const float *partial, int chunks, int C)
{
    char *EB = x->eb;
    size_t EN = x->en;
    dim3 block(COLSUM_FINISH_COLS, COLSUM_FINISH_GROUPS);
    /* bytes: the partial sums of each output read, the outputs written (and read, added to) */
    int outs = (gw != NULL) + (gb != NULL);
    struct kernel_rec r = mem_rec(GPU_KERNEL_COLSUM_FINISH, chunks, C,
                                  4.0 * outs * C * (chunks + 1 + (x->accum != 0)));
    int timed = prof_kernel_start(x->prof, x->stream, &r);
    colsum_finish_kernel<<<blocks_for((size_t)C, COLSUM_FINISH_COLS), block, 0, x->stream>>>(
        gw, gb, partial, chunks, C, x->accum);
    LAUNCHED(x->stream);
    prof_kernel_end(x->prof, x->stream, timed);
    return 0;
}

int colsum(struct gpu_ctx *x, float *partial, float *gb, const floatX *d, int N, int C)
{
    char *EB = x->eb;
    size_t EN = x->en;
    int rows = colsum_rows(N), chunks = colsum_chunks(N);
    /* bytes: the gradient read, the partial sums written */
    struct kernel_rec r = mem_rec(GPU_KERNEL_COLSUM, N, C, (double)N * C * sizeof(floatX) +
                                                               4.0 * chunks * C);
    int timed = prof_kernel_start(x->prof, x->stream, &r);
    if (C % XV == 0 && aligned16(d)) {
        dim3 grid(blocks_for((size_t)(C / XV), 128), (unsigned)chunks);
        colsum_partial_kernel<XV><<<grid, 128, 0, x->stream>>>(partial, d, N, C, rows);
    } else {
        dim3 grid(blocks_for((size_t)C, 128), (unsigned)chunks);
        colsum_partial_kernel<1><<<grid, 128, 0, x->stream>>>(partial, d, N, C, rows);
    }
    LAUNCHED(x->stream);
    prof_kernel_end(x->prof, x->stream, timed);
    return colsum_finish(x, NULL, gb, partial, chunks, C);
}

} /* namespace GPU_NS */
