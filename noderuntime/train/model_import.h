/* A GPT-2 model file in, for `initFrom` and `holmes-node sample --init-from`, whichever of the
 * two formats it is (told apart by its first bytes, not its name):
 *   llm.c:        the GPT-2 checkpoint llm.c writes (magic 20240326, version 3; checkpoint.h's
 *                 llmc_read_config and llmc_load_stage);
 *   safetensors:  Hugging Face's format (an 8-byte little-endian header length, a JSON header
 *                 of each tensor's dtype, shape and byte range, the bytes), with GPT-2's names as
 *                 transformers writes them (GPT2Model: wte.weight, h.<l>.attn.c_attn.weight...,
 *                 or GPT2LMHeadModel's with the "transformer." prefix) or as `holmes-node export`
 *                 writes them. Conv1D weights are stored [in, out] and transposed into Holmes's
 *                 [out, in]; F32, F16 and BF16 are read (into fp32); the vocabulary's padded rows
 *                 are zero. lm_head.weight (GPT-2's head is the embedding, tied) and the causal
 *                 masks older files keep (h.<l>.attn.bias, attn.masked_bias) are passed over;
 *                 any other tensor means the file is not a GPT-2 model and is refused, naming it.
 * A directory is a Hugging Face model directory: its model.safetensors is read. A safetensors
 * file does not say the number of heads: `holmes-node export` writes it in the header's
 * __metadata__ ("n_head"); else transformers' config.json beside the file says it (n_head; its
 * n_layer, n_embd, n_positions and vocab_size must be the tensors'); without either the heads
 * are channels / 64 (GPT-2's head size, in every GPT-2 size) for the shape read, and a stage
 * loads whatever heads it has. */
#ifndef HOLMES_MODEL_IMPORT_H
#define HOLMES_MODEL_IMPORT_H

#include "error.h"
#include "gpt.h"

/* The model's shape (the padded vocabulary the engine's, the vocabulary rounded up to 128, for
 * safetensors). Errors name the file and the rule broken. */
int model_import_config(const char *path, struct gpt_config *c, herr *e);
/* The same, but c->heads 0 where the file does not say them (safetensors without n_head in its
 * metadata or a config.json beside it): no guess. */
int model_import_config_said(const char *path, struct gpt_config *c, herr *e);

/* Stage s's parameters from the file: its layers, and the embeddings and final LayerNorm
 * where the stage holds them. The file's layers, channels, vocabulary and positions must be
 * the stage's model's (and its heads, where the file says them). */
int model_import_stage(const char *path, struct gpt_stage *s, herr *e);

/* The model a command loads (sample, eval): a checkpoint set (dir, step as model_export_read: -1
 * the latest) or a GPT-2 file (file, as above), one of them. model_source_open reads its shape
 * (and a set's parameters); model_source_load fills a whole-model stage of that shape (layers
 * [0, L), no tensor parallelism); model_source_close frees what open read. */
struct model_source {
    struct gpt_config config;
    int64_t step;     /* the set's step read; -1 for a file */
    const char *file; /* the file, or NULL */
    float *params;    /* a set's parameters (the layout of one stage [0, L)); NULL for a file */
};
int model_source_open(struct model_source *m, const char *dir, int64_t step, const char *file,
                      herr *e);
int model_source_load(const struct model_source *m, struct gpt_stage *s, herr *e);
void model_source_close(struct model_source *m);

#endif
