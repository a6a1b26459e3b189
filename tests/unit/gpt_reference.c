#include "gpt_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

static int read_exact(FILE *f, void *p, size_t n)
{
    return fread(p, 1, n, f) == n ? 0 : -1;
}

int load_ref(struct ref *r)
{
    FILE *f = fopen(REF_FILE, "rb");
    if (!f)
        return -1;
    int rc = -1;
    if (read_exact(f, r->hdr, sizeof r->hdr) || read_exact(f, r->hyper, sizeof r->hyper) ||
        r->hdr[0] != 0x46455248 || r->hdr[1] != 1)
        goto out;
    size_t BT = (size_t)r->hdr[8] * r->hdr[9], n = (size_t)r->hdr[11], V = (size_t)r->hdr[5];
    size_t steps = (size_t)r->hdr[10];
    r->tokens = malloc(BT * sizeof(int));
    r->targets = malloc(BT * sizeof(int));
    r->init = malloc(n * sizeof(float));
    r->logits = malloc(BT * V * sizeof(float));
    r->grads = malloc(n * sizeof(float));
    r->losses = malloc(steps * sizeof(float));
    r->final = malloc(n * sizeof(float));
    if (!r->tokens || !r->targets || !r->init || !r->logits || !r->grads || !r->losses ||
        !r->final)
        goto out;
    if (read_exact(f, r->tokens, BT * sizeof(int)) || read_exact(f, r->targets, BT * sizeof(int)) ||
        read_exact(f, r->init, n * sizeof(float)) ||
        read_exact(f, r->logits, BT * V * sizeof(float)) ||
        read_exact(f, r->grads, n * sizeof(float)) ||
        read_exact(f, r->losses, steps * sizeof(float)) ||
        read_exact(f, r->final, n * sizeof(float)))
        goto out;
    rc = 0;
out:
    fclose(f);
    if (rc != 0)
        free_ref(r);
    return rc;
}

void free_ref(struct ref *r)
{
    void *owned[] = {r->tokens, r->targets, r->init, r->logits, r->grads, r->losses, r->final};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
        free(owned[i]);
    memset(r, 0, sizeof *r);
}

void ref_random_batch(int *tok, int *tgt, int n, int vocab, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        tok[i] = (int)((seed >> 8) % (unsigned)vocab);
        seed = seed * 1103515245u + 12345u;
        tgt[i] = (int)((seed >> 8) % (unsigned)vocab);
    }
}

double rel_err(const float *got, const float *want, size_t n)
{
    double md = 0.0, mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > md || d != d)
            md = d != d ? INFINITY : d;
        if (fabs(want[i]) > mx)
            mx = fabs(want[i]);
    }
    return mx > 0.0 ? md / mx : md;
}

int ref_bad_tensors(const struct gpt_tensor *t, int nt, const float *got, const float *want,
                    int full, double tol)
{
    int bad = 0;
    for (int i = 0; i < nt; i++) {
        size_t off = full ? t[i].full_offset : t[i].offset;
        size_t n = full ? t[i].rows * t[i].cols : t[i].size;
        double err = rel_err(got + off, want + off, n);
        if (err > tol) {
            printf("  %s: relative error %.3g\n", t[i].name, err);
            bad++;
        }
    }
    return bad;
}

struct gpt_config ref_config(const struct ref *r)
{
    return (struct gpt_config){.layers = r->hdr[2], .channels = r->hdr[3], .heads = r->hdr[4],
                               .vocab = r->hdr[5], .padded_vocab = r->hdr[6], .max_seq = r->hdr[7]};
}
