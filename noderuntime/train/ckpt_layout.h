/* Checkpoint sets across plans: a job re-planned onto other pipeline stage boundaries, another
 * data-parallel degree or another tensor degree resumes from the checkpoints its old plan wrote.
 *
 * A set is the stage files of one step (checkpoint.h: stage-<first>-<last>-step-<step>.ckpt,
 * each the whole stage, AdamW moments included) that tile layers [0, L) one after another. Any
 * stage [first, last) of any plan reads its tensors from that set by name: its layers from the
 * files that hold them (several when the boundaries moved), wte and wpe from the file of layer 0,
 * ln_f and the head's copy of wte from the file of the last layer. Each file read is verified
 * whole (its payload CRC), and only the tensors asked for are kept: a rank never holds more than
 * its own stage. The values are copied, never recomputed: parameters and moments under the new
 * layout are bit for bit those the old plan wrote. ZeRO-1 shards and tensor-parallel parts are
 * cut from the whole stage by the trainer, as for a checkpoint of its own plan.
 *
 * The same reader exports a set as one model (model_export.h). docs/engine.md describes it. */
#ifndef HOLMES_CKPT_LAYOUT_H
#define HOLMES_CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "gpt.h"

/* A tensor of a stage's whole (tensor 1) layout: the order gpt.h and docs/engine.md give. */
struct ckpt_tensor {
    char name[48];
    size_t offset, size;   /* floats */
    size_t rows, cols;     /* [out][in]; vectors: rows n, cols 1 */
};

/* The whole layout of stage [first, last) of model c, computed from the shape alone (no stage
 * is built): *t malloc'ed, *total the stage's floats. c->padded_vocab must be set. */
int ckpt_stage_layout(const struct gpt_config *c, int first, int last, struct ckpt_tensor **t,
                      int *nt, size_t *total, herr *e);

/* The steps in dir that have a stage file of any plan, ascending, each once (*steps malloc'ed,
 * NULL when none; a missing dir has none). */
int ckpt_set_steps(const char *dir, int64_t **steps, int *n, herr *e);

/* The files of `step` that tile layers [0, layers) one after another, in layer order (*cover
 * malloc'ed). -1 naming the first layer no file of that step starts at. */
int ckpt_set_cover(const char *dir, int64_t step, int layers, struct ckpt_file **cover, int *n,
                   herr *e);

/* Stage [first, last) of model c from the set of `step` in dir, whatever plan wrote it, in the
 * stage's whole layout: params[n] and, when both are non-NULL, the AdamW moments m[n], v[n]
 * (zeroed when the set has none). n must be the stage's whole parameter count. *meta (may be
 * NULL) gets the header of the file of the stage's first tensor, with first and last set to the
 * stage asked for. Errors name the file and what differs (shape, step, CRC, a missing layer). */
int ckpt_layout_read(const char *dir, int64_t step, const struct gpt_config *c, int first,
                     int last, float *params, float *m, float *v, size_t n,
                     struct ckpt_meta *meta, herr *e);

#endif
