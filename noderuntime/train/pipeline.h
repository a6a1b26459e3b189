/* Pipeline-parallel schedules over micro-batches, generic over stage callbacks: GPipe (all
 * forwards, then all backwards) and 1F1B (non-interleaved: warm-up forwards, one forward / one
 * backward in the steady state, cool-down backwards; at most stages - stage micro-batches in
 * flight on a stage). Activations go forward to stage+1 and activation gradients back to
 * stage-1 over the pipeline communicator (member index = stage). */
#ifndef HOLMES_PIPELINE_H
#define HOLMES_PIPELINE_H

#include <stddef.h>

#include "comm.h"
#include "error.h"
#include "names.h"

/* The schedule and the element type between stages come from names.h. What travels between
 * stages: the stages' floats as they are (DTYPE_FP32), or each rounded to bfloat16 (DTYPE_BF16:
 * round to nearest even; half the bytes) and widened again by the receiver. */

struct pipe_stage_ops {
    void *ctx;
    size_t act_count; /* floats in one activation (and its gradient) between stages */
    /* Forward micro-batch mb in activation slot `slot`. in is NULL on the first stage, out is
     * NULL on the last stage, which returns the micro-batch loss in *loss. */
    int (*forward)(void *ctx, int mb, int slot, const float *in, float *out, float *loss, herr *e);
    /* Backward of micro-batch mb: dout is NULL on the last stage, din NULL on the first. */
    int (*backward)(void *ctx, int mb, int slot, const float *dout, float *din, herr *e);
};

struct pipe_config {
    int stage, stages, micro_batches;
    enum schedule schedule;
    struct comm *comm; /* pipeline group; NULL when stages == 1 */
    enum dtype wire;
};

/* Activation slots a stage needs: micro_batches for GPipe, min(stages - stage, M) for 1F1B. */
int pipe_slots_needed(enum schedule s, int stage, int stages, int micro_batches);

struct pipe_runner;
int pipe_runner_create(struct pipe_runner **out, const struct pipe_config *cfg,
                       const struct pipe_stage_ops *ops, herr *e);
void pipe_runner_free(struct pipe_runner *p);
/* One optimizer step's worth of micro-batches. On the last stage *loss_sum is the sum of the
 * micro-batch losses (0 elsewhere). */
int pipe_run(struct pipe_runner *p, float *loss_sum, herr *e);

#endif
