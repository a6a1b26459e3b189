/* Pipeline-parallel schedules over micro-batches, generic over stage callbacks: GPipe (all
 * forwards, then all backwards) and 1F1B (non-interleaved: warm-up forwards, one forward / one
 * backward in the steady state, cool-down backwards; at most stages - stage micro-batches in
 * flight on a stage, more with a deeper warm-up: common/pipe_order.h, the order the planner
 * simulates, whose pipe_slots gives a stage's activation slots). Activations go forward to
 * stage+1 and activation gradients back to stage-1 over the links to the neighbours (pipe_link:
 * a communicator per direction, which may be one and the same).
 *
 * Buffers live in the engine's memory (devmem.h) and go over the links with comm_dev_isend /
 * comm_dev_recv: sends are asynchronous (a stage goes on computing while its activations leave;
 * each send buffer is reused only after its send is done), receives block until the bytes are
 * there (in the compute lane's order on a GPU).
 *
 * Tensor parallelism (Megatron-LM's scatter-gather): a stage's t tensor ranks hold the same
 * activation; each sends only its chunk (tcp_chunk of t) to the same tensor rank of the next
 * stage, and the receiving stage all-gathers the chunks over its tensor group. The same for the
 * gradients going back.
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
#include "pipe_order.h"

/* The schedule and the element type between stages come from names.h. What travels between
 * stages: the stages' activations as they are (DTYPE_FP32, or bf16 activations as bf16), or fp32
 * activations each rounded to bfloat16 (DTYPE_BF16: round to nearest even; half the bytes) and
 * widened again by the receiver. */

struct pipe_stage_ops {
    void *ctx;
    size_t act_count; /* floats in one activation (and its gradient) between stages */
    /* Forward token slice k of micro-batch mb in activation slot `slot` (k = 0 without slices).
     * in is NULL on the first stage, out is NULL on the last stage, which may return the
     * slice's share of the micro-batch loss in *loss (summed by pipe_run). in and out hold the
     * slice: act_count * (its tokens) / (all tokens) elements of act_bytes each, in the
     * configured memory. */
    int (*forward)(void *ctx, int mb, int slot, int k, const void *in, void *out, float *loss,
                   herr *e);
    /* Backward of slice k of micro-batch mb: dout is NULL on the last stage, din NULL on the
     * first. */
    int (*backward)(void *ctx, int mb, int slot, int k, const void *dout, void *din, herr *e);
};

/* The link to one neighbour stage: activations go forward on `fwd`, gradients back on `bwd`
 * (the same communicator, or one per direction, as NCCL links need); `peer` is the neighbour's
 * index in both. */
struct pipe_link {
    struct comm *fwd, *bwd;
    int peer;
};

struct pipe_config {
    int stage, stages, micro_batches;
    enum schedule schedule;
    struct pipe_link prev, next; /* to stage - 1, stage + 1 (comms NULL at the ends) */
    enum dtype wire;
    int slices;         /* token slices per micro-batch (0 or 1: none) */
    const int *bounds;  /* [slices + 1]: slice k is tokens [bounds[k], bounds[k + 1]) of
                           bounds[slices]; NULL without slices */
    struct devmem *mem; /* where the activation buffers live (NULL: host memory) */
    size_t act_bytes;   /* bytes of one activation element: 4 (fp32) or 2 (bf16) (0: 4) */
    struct comm *tp;    /* the stage's tensor group (scatter-gather), NULL without */
    int warmup_extra;   /* 1F1B: micro-batches of warm-up beyond the standard on every stage
                           but the last (pipe_order.h; the plan's warmup_extra) */
};

struct pipe_runner;
int pipe_runner_create(struct pipe_runner **out, const struct pipe_config *cfg,
                       const struct pipe_stage_ops *ops, herr *e);
void pipe_runner_free(struct pipe_runner *p);
/* One optimizer step's worth of micro-batches. On the last stage *loss_sum is the sum of the
 * micro-batch losses (0 elsewhere). */
int pipe_run(struct pipe_runner *p, float *loss_sum, herr *e);
/* Forwards only, of `micro_batches` micro-batches (their slices in order): an evaluation. Every
 * stage runs it at the same point between steps; *loss_sum as pipe_run's. */
int pipe_run_forward(struct pipe_runner *p, int micro_batches, float *loss_sum, herr *e);
/* The last pipe_run's seconds blocked receiving from the neighbour stages (waiting for their
 * work: the pipeline's fill, drain and imbalance, plus the awaited message's transfer, and the
 * tensor group's all-gather of it) and sending to them (queueing a send, and waiting for an
 * earlier one before its buffer is reused). */
void pipe_run_times(const struct pipe_runner *p, double *wait_s, double *send_s);

#endif
