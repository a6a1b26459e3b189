/* Text from a trained model: the CPU engine's whole model (one stage of every layer, one
 * sequence) continues a prompt one token at a time. The prompt goes through in one forward;
 * each new token is then a forward of its one position (gpt_stage_forward_slice), whose
 * attention reads the keys and values the earlier positions left in the stage, so a token costs
 * one position's work, not the whole sequence's. A token is drawn from the softmax of the last
 * position's logits divided by the temperature, among the top_k most likely (0: all) and of
 * those the fewest most likely whose probabilities add up to top_p (nucleus sampling), with a
 * generator seeded by `seed` (the same seed, the same text); temperature 0 takes the most likely. */
#ifndef HOLMES_SAMPLER_H
#define HOLMES_SAMPLER_H

#include <stdint.h>

#include "error.h"
#include "gpt.h"

struct sampler_config {
    int tokens;        /* to generate after the prompt */
    float temperature; /* >= 0; 0: greedy */
    int top_k;         /* 0: every token */
    float top_p;       /* [0, 1]; 0 and 1: every token top_k leaves */
    uint64_t seed;
    int stop_token;    /* generation ends after it (-1: none) */
    /* each generated token as it is chosen (may be NULL) */
    void (*emit)(void *ctx, int token);
    void *ctx;
};

/* s: a whole model (layers [0, L)) of B 1 whose T holds the prompt and the tokens to generate.
 * out[np + tokens] gets the prompt and what follows; *n the count written (less when the stop
 * token came). Errors name the setting (an empty prompt, too long a sequence for the stage). */
int sampler_run(struct gpt_stage *s, const int *prompt, int np, const struct sampler_config *c,
                int *out, int *n, herr *e);

/* The token drawn from logits[V] (temperature, top_k, top_p as above; top_p outside (0, 1):
 * every token top_k leaves); *rng advances. */
int sampler_pick(const float *logits, int V, float temperature, int top_k, float top_p,
                 uint64_t *rng);

#endif
