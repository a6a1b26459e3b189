#include "data_blend.h"

#include <math.h>
#include <stdlib.h>

struct data_blend {
    int n;
    struct dataloader **src;
    int *share;        /* [n]: micro-batches of each source in a cycle */
    unsigned char *of; /* [DATA_BLEND_CYCLE]: the source of each place in the cycle */
    int *at;           /* [DATA_BLEND_CYCLE]: its micro-batch among that source's in the cycle */
};

void data_blend_free(struct data_blend *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n; i++)
        dataloader_free(b->src[i]);
    free(b->src);
    free(b->share);
    free(b->of);
    free(b->at);
    free(b);
}

/* Each source's count in a cycle: the largest-remainder rounding of its share, every one at
 * least 1 (taken from the largest counts). */
static void shares(const double *w, int n, int *share)
{
    double sum = 0, rem[256];
    for (int i = 0; i < n; i++)
        sum += w[i];
    int given = 0;
    for (int i = 0; i < n; i++) {
        double exact = w[i] / sum * DATA_BLEND_CYCLE;
        share[i] = (int)floor(exact);
        rem[i] = exact - share[i];
        given += share[i];
    }
    while (given < DATA_BLEND_CYCLE) { /* the largest remainders, the first on ties */
        int best = 0;
        for (int i = 1; i < n; i++)
            if (rem[i] > rem[best])
                best = i;
        share[best]++;
        rem[best] = -1;
        given++;
    }
    for (int i = 0; i < n; i++)
        while (share[i] < 1) {
            int big = 0;
            for (int k = 1; k < n; k++)
                if (share[k] > share[big])
                    big = k;
            share[big]--;
            share[i]++;
        }
}

int data_blend_open(struct data_blend **out, struct dataloader **src, const double *weights, int n,
                    herr *e)
{
    *out = NULL;
    struct data_blend *b = calloc(1, sizeof *b);
    if (!b || n < 1 || n > 255) {
        for (int i = 0; i < n; i++)
            dataloader_free(src[i]);
        free(b);
        return !b ? herr_set(e, "out of memory for a blend of %d sources", n)
                  : herr_config(e, "a blend of %d sources (1 to 255)", n);
    }
    b->n = n;
    b->src = calloc((size_t)n, sizeof *b->src);
    b->share = calloc((size_t)n, sizeof *b->share);
    b->of = malloc(DATA_BLEND_CYCLE);
    b->at = malloc(DATA_BLEND_CYCLE * sizeof *b->at);
    if (!b->src || !b->share || !b->of || !b->at) {
        for (int i = 0; i < n; i++)
            dataloader_free(src[i]);
        data_blend_free(b);
        return herr_set(e, "out of memory for a blend of %d sources", n);
    }
    for (int i = 0; i < n; i++)
        b->src[i] = src[i];
    for (int i = 0; i < n; i++)
        if (!(weights[i] > 0) || !isfinite(weights[i])) {
            data_blend_free(b);
            return herr_config(e, "source %d: weight %g (must be above 0)", i, weights[i]);
        }
    shares(weights, n, b->share);
    /* smooth weighted round-robin: each place goes to the source furthest behind its share */
    long cur[256] = {0};
    int taken[256] = {0};
    for (int p = 0; p < DATA_BLEND_CYCLE; p++) {
        int best = 0;
        for (int i = 0; i < n; i++) {
            cur[i] += b->share[i];
            if (cur[i] > cur[best])
                best = i;
        }
        cur[best] -= DATA_BLEND_CYCLE;
        b->of[p] = (unsigned char)best;
        b->at[p] = taken[best]++;
    }
    *out = b;
    return 0;
}

void data_blend_locate(const struct data_blend *b, uint64_t g, int *source, uint64_t *j)
{
    uint64_t cycle = g / DATA_BLEND_CYCLE;
    int p = (int)(g % DATA_BLEND_CYCLE);
    *source = b->of[p];
    *j = cycle * (uint64_t)b->share[*source] + (uint64_t)b->at[p];
}

int data_blend_share(const struct data_blend *b, int i) { return b->share[i]; }
int data_blend_sources(const struct data_blend *b) { return b->n; }
struct dataloader *data_blend_source(const struct data_blend *b, int i) { return b->src[i]; }

int data_blend_batch_at(void *ctx, uint64_t k, int replica, int replicas, int *inputs,
                        int *targets, herr *e)
{
    struct data_blend *b = ctx;
    int s;
    uint64_t j;
    data_blend_locate(b, k * (uint64_t)replicas + (uint64_t)replica, &s, &j);
    if (dataloader_batch_at(b->src[s], j, 0, 1, inputs, targets, e) != 0)
        return herr_wrap(e, "spec.training.data.sources[%d]", s);
    return 0;
}
