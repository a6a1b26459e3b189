/* Per-stage training checkpoints, and import of llm.c GPT-2 weights.
 *
 * One file per pipeline stage: <dir>/stage-<first>-<last>-step-<step>.ckpt (step zero-padded to
 * 9 digits so names sort by step). Layout, little-endian (docs/engine.md):
 *   header, 256 bytes:
 *     char[8] magic "HOLMESCK"; u32 version (1); u32 header bytes (256);
 *     i32 layers, channels, heads, vocab, padded_vocab, max_seq, first, last;
 *     i64 step; u64 data position; u64 rng[4]; u64 parameter count n; u32 has_moments;
 *     u32 CRC32 (zlib) of the payload; zero padding; u32 CRC32 of the header's first 252 bytes.
 *   payload: f32 params[n], then (has_moments) f32 AdamW m[n], f32 AdamW v[n].
 * Writes go to a temporary file in the same directory, are fsync'ed, renamed into place and the
 * directory fsync'ed; only then are older checkpoints of the same stage beyond the newest `keep`
 * removed, so a failed write never destroys the previous checkpoint. Files of the same layers
 * written under other stage boundaries (a re-planned job, ckpt_layout.h) go too: those of a step
 * this stage wrote again, and, once it has `keep` checkpoints, those older than all of them.
 */
#ifndef HOLMES_CHECKPOINT_H
#define HOLMES_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt_latest.h"
#include "error.h"
#include "gpt.h"

#define CKPT_VERSION 1
#define LLMC_MAGIC 20240326

struct ckpt_meta {
    struct gpt_config c;
    int first, last;        /* the stage's layer range */
    int64_t step;           /* optimizer steps done */
    uint64_t data_pos;      /* dataloader_position() */
    uint64_t rng[4];        /* opaque RNG state of the trainer */
    uint64_t nparams;
    int has_moments;
};

/* Writes one stage's checkpoint (m and v may both be NULL: parameters only); keep >= 1 newest
 * checkpoints of this stage survive. On success fills path (may be NULL) with the file name. */
/* mkdir -p: the checkpoint directory and its parents (0, or -1 naming the one that failed). */
int ckpt_make_dir(const char *path, herr *e);
int ckpt_write(const char *dir, const struct ckpt_meta *meta, const float *params,
               const float *m, const float *v, int keep, char *path, size_t path_len, herr *e);
/* Removes all but the `keep` newest checkpoints of stage [first, last) in dir, and the files of
 * other stage boundaries over the same layers that these supersede (see above; best effort). */
void ckpt_prune(const char *dir, int first, int last, int keep);
/* Reads and checks a checkpoint's header (magic, version, header CRC) into *meta. */
int ckpt_read_meta(const char *path, struct ckpt_meta *meta, herr *e);
/* Checks that a checkpoint's shape and layer range are the job's; the error names the file and
 * the first field that differs. */
int ckpt_check_shape(const char *path, const struct ckpt_meta *got, const struct gpt_config *want,
                     int first, int last, herr *e);
/* Reads the whole checkpoint, verifies the payload CRC, and fills params (and m, v when the
 * file has them and they are non-NULL; otherwise m, v are zeroed) of n floats; n must match. */
int ckpt_read(const char *path, struct ckpt_meta *meta, float *params, float *m, float *v,
              size_t n, herr *e);
/* The newest checkpoint of stage [first, last) in dir: 0 and its path, 1 when there is none,
 * -1 on error. */
int ckpt_latest(const char *dir, int first, int last, char *path, size_t path_len, herr *e);

/* ckpt_read_latest_step: ckpt_latest.h (common/, `holmes-operator local` reads it too). */

/* The steps of stage [first, last)'s checkpoints in dir, ascending (*steps malloc'ed, NULL
 * when none; a missing dir has none). */
int ckpt_steps(const char *dir, int first, int last, int64_t **steps, int *n, herr *e);
/* The path of stage [first, last)'s checkpoint at `step` in dir. */
int ckpt_path(const char *dir, int first, int last, int64_t step, char *path, size_t cap, herr *e);

/* One stage checkpoint file: stage-<first>-<last>-step-<step>.ckpt. */
struct ckpt_file {
    int first, last;
    int64_t step;
};
/* Every stage checkpoint in dir, whatever stage boundaries wrote it, sorted by step (*files
 * malloc'ed, NULL when none; a missing dir has none). */
int ckpt_list(const char *dir, struct ckpt_file **files, int *n, herr *e);

/* Floats [src, src + n) of a file's stage layout, to [dst, dst + n) of the caller's buffers. */
struct ckpt_range {
    uint64_t src;
    size_t dst, n;
};
/* Reads and verifies a whole checkpoint (header, size, payload CRC: the payload streamed, never
 * held whole) and copies the ranges of its parameters into params, and of its AdamW moments into
 * m and v when both are non-NULL (zeroed when the file has none). *meta gets its header. */
int ckpt_read_ranges(const char *path, struct ckpt_meta *meta, const struct ckpt_range *r, int nr,
                     float *params, float *m, float *v, herr *e);

/* The floats of the whole model of shape c (embeddings with the padded vocabulary, positions,
 * every layer, ln_f: llm.c's file order), counted in double so that a shape read from a file
 * cannot wrap the count; its callers bound it before sizing anything by it. */
double ckpt_model_floats(const struct gpt_config *c);

/* Reads the shape of an llm.c GPT-2 checkpoint (magic 20240326, version 3, fp32). */
/* n bytes of fd at offset `at` (pread, resumed after EINTR and short reads): 0, 1 on end of file
 * before n bytes, -1 on error (errno). */
int ckpt_read_all(int fd, void *p, size_t n, off_t at);

int llmc_read_config(const char *path, struct gpt_config *c, herr *e);
/* Loads an llm.c GPT-2 checkpoint's weights into a stage (its tensors for the stage's layers,
 * embeddings, final LayerNorm and head); the shapes must match. */
int llmc_load_stage(const char *path, struct gpt_stage *s, herr *e);

#endif
