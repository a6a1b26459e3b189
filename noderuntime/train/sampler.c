#include "sampler.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: a 64-bit generator whose whole state is one word (the seed). */
static uint64_t next_u64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const float *g_logits; /* qsort's comparison reads it (sampler_pick is not reentrant) */

/* Most likely first; equal logits by token, so the order never depends on qsort. */
static int by_logit(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_logits[i] != g_logits[j])
        return g_logits[i] > g_logits[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int argmax(const float *l, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

int sampler_pick(const float *logits, int V, float temperature, int top_k, float top_p,
                 uint64_t *rng)
{
    if (!(temperature > 0.0f) || top_k == 1)
        return argmax(logits, V);
    int k = top_k > 0 && top_k < V ? top_k : V, nucleus = top_p > 0.0f && top_p < 1.0f;
    int *idx = malloc((size_t)V * sizeof *idx);
    if (!idx) /* no room to rank them: the most likely */
        return argmax(logits, V);
    for (int i = 0; i < V; i++)
        idx[i] = i;
    if (k < V || nucleus) {
        g_logits = logits;
        qsort(idx, (size_t)V, sizeof *idx, by_logit);
    }
    float top = logits[argmax(logits, V)];
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += exp(((double)logits[idx[i]] - top) / temperature);
    if (nucleus) { /* the fewest most likely whose share of the k reaches top_p */
        double part = 0;
        int n = 0;
        while (n < k && part < top_p * sum)
            part += exp(((double)logits[idx[n++]] - top) / temperature);
        k = n > 0 ? n : 1;
        sum = part > 0 ? part : sum;
    }
    double u = (double)(next_u64(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    int pick = idx[k - 1];
    for (int i = 0; i < k; i++) {
        u -= exp(((double)logits[idx[i]] - top) / temperature);
        if (u < 0) {
            pick = idx[i];
            break;
        }
    }
    free(idx);
    return pick;
}

int sampler_run(struct gpt_stage *s, const int *prompt, int np, const struct sampler_config *c,
                int *out, int *n, herr *e)
{
    const struct gpt_config *m = gpt_stage_config(s);
    int first, last, B, T;
    gpt_stage_range(s, &first, &last);
    gpt_stage_batch(s, &B, &T);
    *n = 0;
    if (first != 0 || last != m->layers || B != 1 || gpt_stage_tp(s) != 1)
        return herr_set(e, "sampling needs the whole model as one stage of one sequence");
    if (np < 1)
        return herr_config(e, "the prompt is empty: it needs at least one token");
    if (c->tokens < 0 || np + c->tokens > T)
        return herr_config(e, "a prompt of %d tokens and %d more exceed the %d positions of the "
                           "model", np, c->tokens, T);
    if (c->temperature < 0.0f || !isfinite(c->temperature) || c->top_k < 0)
        return herr_config(e, "temperature %g and top-k %d: both must be at least 0",
                           (double)c->temperature, c->top_k);
    if (!(c->top_p >= 0.0f && c->top_p <= 1.0f))
        return herr_config(e, "top-p %g must be in [0, 1] (0 and 1: every token)",
                           (double)c->top_p);
    int *tok = calloc((size_t)T, sizeof *tok);
    if (!tok)
        return herr_set(e, "out of memory for %d positions", T);
    for (int i = 0; i < np; i++)
        tok[i] = out[i] = prompt[i];
    *n = np;
    uint64_t rng = c->seed;
    int Vp = m->padded_vocab, rc = 0;
    for (int t = np, from = 0; t < np + c->tokens; t++) {
        /* the positions not yet forwarded: the whole prompt, then the token chosen last */
        if (gpt_stage_forward_slice(s, 0, from, t, tok, NULL, NULL, NULL, NULL) != 0) {
            rc = herr_set(e, "forward of positions [%d, %d): %s", from, t, gpt_stage_error(s));
            break;
        }
        const float *logits = gpt_stage_logits(s, 0) + (size_t)(t - 1) * Vp;
        for (int v = 0; v < m->vocab; v++)
            if (!isfinite(logits[v])) {
                rc = herr_config(e, "the model's logits at position %d are not finite (token %d: "
                                 "%g)", t - 1, v, (double)logits[v]);
                break;
            }
        if (rc)
            break;
        int next = sampler_pick(logits, m->vocab, c->temperature, c->top_k, c->top_p, &rng);
        tok[t] = out[t] = next;
        *n = t + 1;
        from = t;
        if (c->emit)
            c->emit(c->ctx, next);
        if (next == c->stop_token)
            break;
    }
    free(tok);
    return rc;
}
