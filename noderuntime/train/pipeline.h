/* Pipeline-parallel schedules over micro-batches, generic over stage callbacks: GPipe (all
 * forwards, then all backwards) and 1F1B (non-interleaved: warm-up forwards, one forward / one
 * backward in the steady state, cool-down backwards; at most stages - stage micro-batches in
 * flight on a stage). Activations go forward to stage+1 and activation gradients back to
 * stage-1 over the pipeline communicator (member index = stage).
 *
 * TeraPipe: with token slices the unit that flows is a slice of a micro-batch. Forwards take the
 * units micro-batch by micro-batch, slices in order; backwards micro-batch by micro-batch,
 * slices in reverse (a slice's keys and values feed the later slices of its sequence). 1F1B
 * warms up with slices - 1 more units, so that a micro-batch's last slice is forwarded before
 * its backward starts. */
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
    /* Forward token slice k of micro-batch mb in activation slot `slot` (k = 0 without slices).
     * in is NULL on the first stage, out is NULL on the last stage, which returns the slice's
     * share of the micro-batch loss in *loss. in and out hold the slice: act_count * (its
     * tokens) / (all tokens) floats. */
    int (*forward)(void *ctx, int mb, int slot, int k, const float *in, float *out, float *loss,
                   herr *e);
    /* Backward of slice k of micro-batch mb: dout is NULL on the last stage, din NULL on the
     * first. */
    int (*backward)(void *ctx, int mb, int slot, int k, const float *dout, float *din, herr *e);
};

struct pipe_config {
    int stage, stages, micro_batches;
    enum schedule schedule;
    struct comm *comm; /* pipeline group; NULL when stages == 1 */
    enum dtype wire;
    int slices;         /* token slices per micro-batch (0 or 1: none) */
    const int *bounds;  /* [slices + 1]: slice k is tokens [bounds[k], bounds[k + 1]) of
                           bounds[slices]; NULL without slices */
};

/* Activation slots (micro-batches in flight) a stage needs: micro_batches for GPipe;
 * min(stages - stage, M) for 1F1B, and with S > 1 token slices min(ceil((stages - stage - 1 +
 * 2S - 1) / S), M). */
int pipe_slots_needed(enum schedule s, int stage, int stages, int micro_batches, int slices);

struct pipe_runner;
int pipe_runner_create(struct pipe_runner **out, const struct pipe_config *cfg,
                       const struct pipe_stage_ops *ops, herr *e);
void pipe_runner_free(struct pipe_runner *p);
/* One optimizer step's worth of micro-batches. On the last stage *loss_sum is the sum of the
 * micro-batch losses (0 elsewhere). */
int pipe_run(struct pipe_runner *p, float *loss_sum, herr *e);
/* The last pipe_run's seconds blocked receiving from the neighbour stages (waiting for their
 * work: the pipeline's fill, drain and imbalance, plus the awaited message's transfer) and
 * sending to them. */
void pipe_run_times(const struct pipe_runner *p, double *wait_s, double *send_s);

#endif
