/* Positions of a micro-batch grouped by token, for the GPU engine's deterministic embedding
 * backward (one block per distinct token sums its positions in order: no atomics). */
#ifndef HOLMES_TOKEN_GROUPS_H
#define HOLMES_TOKEN_GROUPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tokens[n], each in [0, V). counts is scratch of V + 1 ints. Fills utok[u] (distinct tokens,
 * ascending), ustart[u..u+1] (the range of group u in upos, ustart has n + 1 entries at most) and
 * upos[n] (positions, ascending inside a group). Returns the number of groups. */
int token_groups(const int *tokens, size_t n, int V, int *counts, int *utok, int *ustart,
                 int *upos);

#ifdef __cplusplus
}
#endif

#endif
