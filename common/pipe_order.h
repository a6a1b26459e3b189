/* The order of a stage's forwards and backwards under the pipeline schedules, one rule for the
 * runtime (noderuntime/train/pipeline.c runs it) and the planner (operator/planner/cost_model.c
 * simulates it and sizes the activation memory by it).
 *
 * A step runs U = micro_batches x S units (S TeraPipe token slices per micro-batch, 1 without).
 * GPipe: every forward, then every backward. 1F1B: `pipe_warm_units` forwards, then one forward
 * and one backward in turn, then the remaining backwards. The standard warm-up is
 * P - s - 1 + S - 1 units (the fewest that keep stage s busy); `extra` more micro-batches on
 * every stage but the last (plan.warmup_extra) let the early stages run ahead, so that the later
 * stages finish their backwards sooner and their data-parallel reduce-scatter overlaps the early
 * stages' remaining backwards: more activations held, the same work and the same results (the
 * backwards, and so the gradient sums, keep their order). */
#ifndef HOLMES_PIPE_ORDER_H
#define HOLMES_PIPE_ORDER_H

#include "names.h"

/* Largest warmup_extra a plan or a rank table may ask for. */
#define PIPE_WARMUP_EXTRA_MAX 65536

/* 1F1B's warm-up forwards (units) on stage `stage` of `stages`, at most `units`. */
long pipe_warm_units(int stage, int stages, int slices, long units, int extra);

/* Activation slots (micro-batches in flight) a stage needs: micro_batches for GPipe; for 1F1B
 * ceil((warm + 2S - 1) / S) (a micro-batch's slot is free once its last slice's backward is
 * done), at most micro_batches. */
int pipe_slots(enum schedule s, int stage, int stages, int micro_batches, int slices, int extra);

/* The k-th op (0-based) of stage s over U units: returns 0 for a forward, 1 for a backward, and
 * the unit in *unit (micro-batch x S + slice). Forwards take the units in order; backwards
 * micro-batch by micro-batch, slices in reverse. */
int pipe_op_at(enum schedule s, int stage, int stages, long k, long U, int slices, int extra,
               long *unit);

#endif
