/* llm.c token shards, written: a stream of tokens cut into files of DATALOADER_SHARD_MAGIC's
 * format (dataloader.h: a header of 256 int32, magic 20240520, version 1, the token count, then
 * that many uint16 tokens), named as llm.c's fineweb.py names them: PREFIX_val_000000.bin holds
 * the first val_tokens tokens (none without them), then PREFIX_train_NNNNNN.bin of shard_tokens
 * each, numbered on, the last one shorter. A document may go on from one shard into the next.
 *
 * Nothing is left half-written: each shard is written as NAME.tmp and flushed to disk, and only
 * once the whole set is (shard_writer_finish) do the shards take their names. Shards already
 * there under the prefix are refused (naming one), unless `replace`: then, when the new set is
 * whole and before it takes its names, every PREFIX_val_*.bin and PREFIX_train_*.bin is removed,
 * so that none of an older, longer run is left to be read with the new ones, and a run that
 * fails (bad input, a full disk) leaves the old set as it was. */
#ifndef HOLMES_SHARD_WRITER_H
#define HOLMES_SHARD_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct shard_writer_config {
    const char *prefix;    /* "DIR/name": DIR must exist */
    uint64_t shard_tokens; /* > 0 */
    uint64_t val_tokens;   /* the first tokens, into a val shard (0: none) */
    int replace;           /* remove the prefix's shards first instead of refusing */
};

struct shard_writer;

int shard_writer_open(struct shard_writer **out, const struct shard_writer_config *c, herr *e);
/* Tokens in [0, 65536): uint16, as llm.c's shards hold them. */
int shard_writer_put(struct shard_writer *w, const int *toks, size_t n, herr *e);
/* The tokens put so far. */
uint64_t shard_writer_tokens(const struct shard_writer *w);
/* The last shard written; replacing, the old set removed; every shard renamed into place; the
 * counts of shards and tokens. Then free. */
int shard_writer_finish(struct shard_writer *w, int *shards, uint64_t *tokens, herr *e);
/* Without a finish that succeeded, removes every shard this writer wrote (a set cut short is
 * not left to be trained on: the NAME.tmp files, and any a failed finish had renamed). */
void shard_writer_free(struct shard_writer *w);

#endif
