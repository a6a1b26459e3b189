/* Counting sort of positions by token; see token_groups.h. */
#include "token_groups.h"

#include <string.h>

int token_groups(const int *tokens, size_t n, int V, int *counts, int *utok, int *ustart,
                 int *upos)
{
    memset(counts, 0, ((size_t)V + 1) * sizeof(int));
    for (size_t i = 0; i < n; i++)
        counts[tokens[i] + 1]++;
    int nu = 0;
    ustart[0] = 0;
    for (int t = 0; t < V; t++)
        if (counts[t + 1]) {
            utok[nu] = t;
            ustart[nu + 1] = ustart[nu] + counts[t + 1];
            nu++;
        }
    for (int t = 0; t < V; t++) /* counts[t] becomes the first slot of token t's group */
        counts[t + 1] += counts[t];
    for (size_t i = 0; i < n; i++)
        upos[counts[tokens[i]]++] = (int)i;
    return nu;
}
