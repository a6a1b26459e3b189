/* Training data: llm.c token shards or plain text with a byte-level tokenizer.
 *
 * The pattern is a file name or a glob (sorted). Files ending in ".bin" are llm.c shards: a header
 * of 256 int32 (magic 20240520, version 1, token count) then that many uint16 tokens; every other
 * file is UTF-8 text whose bytes are the tokens (vocabulary 256). All files of one pattern must be
 * of the same kind. Every token is checked against the model's vocabulary when it is read for a
 * micro-batch, and, when the files hold at most scan_max_bytes of tokens (1 GiB by default), all
 * of them when they are opened, so that a bad file fails a job at its start (a larger data set
 * is not read whole by every rank at every start). Files are read (pread), not mapped: a file
 * truncated or rewritten while a worker trains on it gives an error naming it, not a SIGBUS or a
 * token outside the vocabulary. Each file's descriptor stays open until dataloader_free.
 *
 * Samples are windows of T+1 tokens starting at multiples of T inside one file (inputs are the
 * first T, targets the last T). Each epoch visits every window once in an order shuffled from
 * (seed, epoch); micro-batch k of data-parallel rank r takes windows [(k*world + r)*B, +B) of that
 * order, so ranks never share a window, and the leftover windows of an epoch are skipped (with
 * global_epochs the epoch is counted in global micro-batches k*world + r instead). The
 * position (micro-batches taken) goes into checkpoints; seeking to it replays exactly.
 *
 * A held-out split (holdout > 0): the last windows in file order (the files sorted, each from
 * its start), holdout of them (rounded, at least one), are kept apart; the loader reads either
 * the others (held_out 0: training) or only those (held_out 1: evaluation), as if they were all
 * its files held. The two parts share no target token (a training window's last target is the held-out
 * part's first input).
 */
#ifndef HOLMES_DATALOADER_H
#define HOLMES_DATALOADER_H

#include <stdint.h>

#include "error.h"

#define DATALOADER_SHARD_MAGIC 20240520
#define DATALOADER_TEXT_VOCAB 256
#define DATALOADER_SCAN_MAX_BYTES (1ull << 30)

struct dataloader;

struct dataloader_config {
    const char *pattern; /* file or glob */
    int B, T;
    int rank, world;     /* data-parallel rank in [0, world) */
    uint64_t seed;
    int vocab;           /* the model's vocabulary: every token must be below it */
    /* Epochs counted in global micro-batches (g = k*world + rank: epoch g / (windows / B)),
     * not per rank: step s then takes the same windows whatever the data degree, across epoch
     * boundaries too (spec.elastic: a job re-planned onto another data degree continues at
     * the same sample). 0: each rank's epoch is windows / (B*world) of its micro-batches. */
    int global_epochs;
    /* The most bytes of tokens checked whole at open (0: DATALOADER_SCAN_MAX_BYTES). */
    uint64_t scan_max_bytes;
    /* The share of the windows held out, in [0, 1) (0: none), and which part is read. */
    double holdout;
    int held_out;
};

int dataloader_open(struct dataloader **out, const struct dataloader_config *c, herr *e);
void dataloader_free(struct dataloader *d);
/* The next micro-batch: inputs[B*T], targets[B*T]. -1 (and the position unmoved) if a file
 * has shrunk or changed since it was opened. */
int dataloader_next(struct dataloader *d, int *inputs, int *targets, herr *e);
/* Micro-batches taken so far (the checkpointed position), and a jump to one. */
uint64_t dataloader_position(const struct dataloader *d);
void dataloader_seek(struct dataloader *d, uint64_t position);
/* Micro-batch k (seek + next), in the shape of trainer_data's batch callback (ctx is the
 * struct dataloader; replica and replicas are unused: the loader is already this replica's). */
int dataloader_batch_at(void *ctx, uint64_t k, int replica, int replicas, int *inputs, int *targets,
                        herr *e);
/* Windows per epoch (all ranks; the part read, under a held-out split), tokens in all files,
 * files, and whether they are text. */
uint64_t dataloader_windows(const struct dataloader *d);
uint64_t dataloader_tokens(const struct dataloader *d);
int dataloader_files(const struct dataloader *d);
int dataloader_is_text(const struct dataloader *d);
/* Whether every token was checked when the files were opened (see above). */
int dataloader_scanned(const struct dataloader *d);

#endif
