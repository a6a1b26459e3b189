/* A blend of data sets (spec.training.data.sources): each takes its weight's share of the
 * micro-batches. The shares are laid out over a cycle of DATA_BLEND_CYCLE global micro-batches
 * (each source's count the largest-remainder rounding of its share, at least 1), interleaved
 * evenly (smooth weighted round-robin), so that any stretch of a step's micro-batches holds the
 * sources near their shares and a cycle holds them exactly. Global micro-batch g (k * replicas +
 * r: micro-batch k of replica r) is then source s's micro-batch j, found in constant time (the
 * cycle's pattern), and read from that source's own loader at j: each source goes through its
 * own shuffled epochs (global epochs, its seed mixed with its index), whatever the data degree,
 * and a resumed or re-planned run reads the same micro-batch for the same g. */
#ifndef HOLMES_DATA_BLEND_H
#define HOLMES_DATA_BLEND_H

#include <stdint.h>

#include "dataloader.h"
#include "error.h"

#define DATA_BLEND_CYCLE 10000

struct data_blend;

/* Takes the n loaders (opened with rank 0 of world 1 and global epochs: micro-batch j of a
 * loader is its windows [j*B, (j+1)*B) of its order); they are freed with the blend, also when
 * this fails. weights[i] > 0. */
int data_blend_open(struct data_blend **out, struct dataloader **src, const double *weights, int n,
                    herr *e);
void data_blend_free(struct data_blend *b);
/* The source and its micro-batch of global micro-batch g. */
void data_blend_locate(const struct data_blend *b, uint64_t g, int *source, uint64_t *j);
/* Micro-batches of source i in one cycle. */
int data_blend_share(const struct data_blend *b, int i);
int data_blend_sources(const struct data_blend *b);
struct dataloader *data_blend_source(const struct data_blend *b, int i);
/* trainer_data's batch callback: micro-batch k of replica r of replicas (ctx: the blend). */
int data_blend_batch_at(void *ctx, uint64_t k, int replica, int replicas, int *inputs,
                        int *targets, herr *e);

#endif
