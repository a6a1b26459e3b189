/* A checkpoint set (any plan: ckpt_layout.h) out as one model, for the tools that train and
 * serve GPT-2 elsewhere:
 *   llm.c:        the GPT-2 checkpoint llm.c writes and `initFrom` imports (magic 20240326,
 *                 version 3: a header of 256 int32, then fp32 parameters with the padded
 *                 vocabulary, each tensor kind for every layer back to back);
 *   safetensors:  Hugging Face's format with GPT-2's tensor names (transformers' GPT2Model:
 *                 wte.weight [V, C], wpe.weight, h.<l>.ln_1.weight, h.<l>.attn.c_attn.weight
 *                 [C, 3C], ..., ln_f.bias), its Conv1D weights stored [in, out] (Holmes's
 *                 matrices are [out, in]: transposed), wte without the padded rows; F32.
 * The values are copied, so an import of the llm.c file gives back the parameters bit for bit. */
#ifndef HOLMES_MODEL_EXPORT_H
#define HOLMES_MODEL_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gpt.h"

/* GPT-2's per-layer tensors as transformers names them (h.<l>.NAME), Holmes's name for each
 * (h<l>.NAME), and whether it is a Conv1D weight (stored [in, out], Holmes's [out, in]): the
 * safetensors export writes them, model_import.h reads them back. */
struct model_hf_name {
    const char *hf, *holmes;
    int transpose;
};
extern const struct model_hf_name MODEL_HF_LAYER[12];

/* The whole model's parameters (the layout of one stage [0, L)) from the set of `step` in dir;
 * step < 0: the step <dir>/latest-step names, else the newest step whose files cover every
 * layer. *params malloc'ed; *c the set's shape; *used the step read. */
int model_export_read(const char *dir, int64_t step, struct gpt_config *c, float **params,
                      int64_t *used, herr *e);

/* Writes the whole model's parameters (as model_export_read gives them) to path, atomically
 * (a temporary file renamed into place). */
int model_export_llmc(const char *path, const struct gpt_config *c, const float *params, herr *e);
int model_export_safetensors(const char *path, const struct gpt_config *c, const float *params,
                             herr *e);
/* transformers' config.json of the model (GPT2LMHeadModel: n_layer, n_head, n_embd, n_positions,
 * vocab_size; gelu_new and LayerNorm's 1e-5 as Holmes computes; no dropout, as Holmes trains),
 * which with the safetensors file as model.safetensors makes a directory from_pretrained loads. */
int model_export_hf_config(const char *path, const struct gpt_config *c, herr *e);

#endif
