/* What the trainer tests train: a tiny GPT on a synthetic corpus (a learnable pattern plus
 * noise), micro-batches laid out as the dataloader lays them out. */
#ifndef HOLMES_TRAINER_TESTUTIL_H
#define HOLMES_TRAINER_TESTUTIL_H

#include <stdint.h>

#include "comm_tcp.h"
#include "error.h"
#include "gpt.h"
#include "plan_doc.h"
#include "trainer.h"

extern const struct gpt_config TRAINER_TEST_MODEL;
enum { TRAINER_TEST_B = 2, TRAINER_TEST_T = 8 }; /* sequences of a micro-batch, their tokens */

/* Micro-batch k of replica r of `replicas`: windows (k * replicas + r) * B + b of the corpus
 * (a struct trainer_data's batch; ctx unused). */
int trainer_test_batch(void *ctx, uint64_t k, int r, int replicas, int *tok, int *tgt, herr *e);
/* The tests' configuration: M micro-batches, steps, a warm-up of 3 and a cosine decay to 0.1 over
 * lr_steps, clipping at 1, the seed, buckets of 3000 floats (boundaries inside tensors). */
void trainer_test_config(struct trainer_config *c, int M, long steps, long lr_steps,
                         unsigned long long seed);
/* The single-process engine on the same data: one stage, the global batch as MG micro-batches,
 * `steps` steps of trainer_test_config's optimizer (learning rate over those steps): each step's
 * loss into losses, the trained stage into *out. bf16: it computes with the parameters rounded
 * to bfloat16 and updates fp32 masters, which end up in the stage's parameters. Step s (1-based)
 * with bit s - 1 of skips set makes no update (a skipped step: the trainer's
 * max_nonfinite; the learning rate and AdamW's step count go on). 0, or -1. */
int trainer_test_reference(int MG, long steps, unsigned long long seed, int bf16, uint32_t skips,
                           float *losses, struct gpt_stage **out, herr *e);
/* The rank table of pipeline P x data D on the endpoints eps (20 s timeouts). 0, or -1. */
int trainer_test_table(struct plan_doc *rt, int P, int D, const struct tcp_endpoint *eps, herr *e);
/* A rank's start in the distributed tests: the reference (trainer_test_reference) and the rank
 * table of pipeline P x data D on eps. 0, or -1 with the error on standard error. */
int trainer_test_rank_setup(int MG, long steps, unsigned long long seed, int bf16, uint32_t skips,
                            int P, int D, const struct tcp_endpoint *eps, float *ref_losses,
                            struct gpt_stage **ref, struct plan_doc *rt);

#endif
