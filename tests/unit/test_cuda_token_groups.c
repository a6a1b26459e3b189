/* noderuntime/engine/cuda/token_groups.c (host side of the GPU engine's deterministic embedding
 * backward): every position lands in its token's group exactly once, groups and positions are
 * ascending, and summing by group gives the embedding gradient of the direct loop. */
#include <stdlib.h>

#include "test.h"

#include "../../noderuntime/engine/cuda/token_groups.c"

static void check(const char *name, const int *tok, size_t n, int V)
{
    int *cnt = malloc(((size_t)V + 1) * sizeof(int)), *utok = malloc(n * sizeof(int));
    int *ustart = malloc((n + 1) * sizeof(int)), *upos = malloc(n * sizeof(int));
    int *seen = calloc(n, sizeof(int));
    double *direct = calloc((size_t)V, sizeof(double)), *grouped = calloc((size_t)V, sizeof(double));
    if (!cnt || !utok || !ustart || !upos || !seen || !direct || !grouped) {
        TEST_FAIL(name, "out of memory");
        return;
    }
    int nu = token_groups(tok, n, V, cnt, utok, ustart, upos);
    int ok = nu >= 1 && ustart[0] == 0 && (size_t)ustart[nu] == n;
    for (int u = 0; ok && u < nu; u++) {
        ok &= u == 0 || utok[u] > utok[u - 1];
        ok &= ustart[u + 1] > ustart[u];
        for (int j = ustart[u]; ok && j < ustart[u + 1]; j++) {
            ok &= upos[j] >= 0 && (size_t)upos[j] < n && tok[upos[j]] == utok[u];
            ok &= j == ustart[u] || upos[j] > upos[j - 1];
            if (ok) {
                seen[upos[j]]++;
                grouped[utok[u]] += (double)upos[j] * 0.5 + 1.0; /* a stand-in gradient row */
            }
        }
    }
    for (size_t i = 0; ok && i < n; i++) {
        ok &= seen[i] == 1;
        direct[tok[i]] += (double)i * 0.5 + 1.0;
    }
    for (int v = 0; ok && v < V; v++)
        ok &= direct[v] == grouped[v];
    if (ok)
        TEST_PASS(name);
    else
        TEST_FAIL(name, "groups do not partition the positions by token (%d groups)", nu);
    free(cnt); free(utok); free(ustart); free(upos); free(seen); free(direct); free(grouped);
}

int main(void)
{
    int tok[1000];
    unsigned r = 3;
    for (int i = 0; i < 1000; i++) {
        r = r * 1103515245u + 12345u;
        tok[i] = (int)((r >> 8) % 50u);
    }
    check("token_groups.random", tok, 1000, 50);
    check("token_groups.random_large_vocab", tok, 1000, 50257);
    for (int i = 0; i < 64; i++)
        tok[i] = 7;
    check("token_groups.one_token", tok, 64, 8);
    tok[0] = 0;
    check("token_groups.single_position", tok, 1, 1);
    for (int i = 0; i < 256; i++)
        tok[i] = 255 - i;
    check("token_groups.descending_all_distinct", tok, 256, 256);
    TEST_MAIN_END();
}
