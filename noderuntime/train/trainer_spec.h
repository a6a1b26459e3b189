/* The trainer's configuration from a resolved TrainingJob spec: the one translation every entry
 * point takes. The coordinator's workers get the spec in their assignment; `holmes-node worker`
 * in rank-table mode and `holmes-node train` fill one from a manifest (--job) and their flags
 * (cmd/cmd_spec.h). So the defaults are the spec's, and a field added to the spec reaches every
 * path from here. */
#ifndef HOLMES_TRAINER_SPEC_H
#define HOLMES_TRAINER_SPEC_H

#include "data_blend.h"
#include "engine.h"
#include "error.h"
#include "trainer.h"
#include "trainingjob.h"

/* Model, batch, schedule, wires, optimizer, learning rate, clip, seed, initFrom, checkpoints and
 * the engine (trainer_spec_engine) of `sp` into c (trainer_config_defaults first; the caller
 * adds the run's own: device, listener, token slices). -1 naming the spec field otherwise. */
int trainer_config_from_spec(const struct tj_spec *sp, struct trainer_config *c, herr *e);
/* The engine a rank of this spec trains with: CUDA for real GPUs (gpusPerWorker >= 1 without
 * emulation.gpus), the CPU engine otherwise (CPU workers and emulated GPUs), in the spec's
 * precision. */
void trainer_spec_engine(const struct tj_spec *sp, enum engine_kind *kind, enum dtype *precision);

/* The spec's data, opened for data-parallel replica `replica` of `replicas`: training.data (its
 * path, or its sources as a blend), and training.eval's held-out data when the spec has it: its
 * own files (eval.path), or training.data's last windows (eval.holdout: training then reads the
 * others; of each source, for a blend). */
struct trainer_spec_data {
    struct dataloader *train, *eval;
    struct data_blend *blend;      /* training.data.sources (train is NULL then) */
    struct data_blend *eval_blend; /* eval.holdout of a blend: each source's held-out part */
};
/* Opens them for c's batch and vocabulary (global epochs with spec.elastic: the same sample
 * after a re-plan) and fills td; each file's kind must be its field's `format`. -1 naming the
 * field (spec.training.data, spec.training.eval, spec.training.eval.holdout), nothing left
 * open. */
int trainer_spec_data_open(const struct tj_spec *sp, const struct trainer_config *c, int replica,
                           int replicas, struct trainer_spec_data *d, struct trainer_data *td,
                           herr *e);
void trainer_spec_data_close(struct trainer_spec_data *d);
/* Whether every token of the training data was checked when it was opened (dataloader.h). */
int trainer_spec_data_scanned(const struct trainer_spec_data *d);
/* The training data's files and tokens (every source's). */
int trainer_spec_data_files(const struct trainer_spec_data *d);
uint64_t trainer_spec_data_tokens(const struct trainer_spec_data *d);

#endif
