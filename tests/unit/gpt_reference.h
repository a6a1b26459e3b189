/* tests/reference/gpt_tiny.bin (tests/reference/make_gpt_reference.py: PyTorch, float64): a tiny
 * GPT's shape, initial parameters, one batch, its logits and gradients, and the losses and final
 * parameters of a few AdamW steps. Shared by the engine's reference tests. */
#ifndef HOLMES_TEST_GPT_REFERENCE_H
#define HOLMES_TEST_GPT_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

#define REF_FILE "tests/reference/gpt_tiny.bin"

/* hdr: magic, version, layers, channels, heads, vocab, padded_vocab, max_seq, B, T, steps,
 * parameter count; hyper: lr, beta1, beta2, eps, weight decay. */
struct ref {
    int32_t hdr[16];
    float hyper[8];
    int *tokens, *targets;
    float *init, *logits, *grads, *losses, *final;
};

/* 0, or -1 when the file cannot be read (run from the repository root; nothing is kept). */
int load_ref(struct ref *r);
void free_ref(struct ref *r);
/* max |got - want| / max |want| over n values (INFINITY for a NaN). */
double rel_err(const float *got, const float *want, size_t n);
/* n random tokens and targets below vocab (a linear congruential sequence from seed). */
void ref_random_batch(int *tok, int *tgt, int n, int vocab, unsigned seed);
/* The reference model's shape, from its header. */
struct gpt_config ref_config(const struct ref *r);

/* How many of the nt tensors' gradients in `got` (laid out as the table says: at each
 * tensor's full_offset when `full`, else its offset) differ from the reference's by more than
 * tol (rel_err over the whole tensor); each one printed. */
int ref_bad_tensors(const struct gpt_tensor *t, int nt, const float *got, const float *want,
                    int full, double tol);

#endif
