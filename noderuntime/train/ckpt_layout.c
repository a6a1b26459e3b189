/* Checkpoint sets across plans (ckpt_layout.h). */
#include "ckpt_layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- layout */

struct layout_builder {
    struct ckpt_tensor *t;
    int n;
    size_t total;
};

static void add(struct layout_builder *b, const char *name, int layer, size_t rows, size_t cols)
{
    struct ckpt_tensor *t = &b->t[b->n++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "h%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = b->total;
    t->rows = rows;
    t->cols = cols;
    t->size = rows * cols;
    b->total += t->size;
}

int ckpt_stage_layout(const struct gpt_config *c, int first, int last, struct ckpt_tensor **out,
                      int *nt, size_t *total, herr *e)
{
    *out = NULL;
    if (first < 0 || last > c->layers || first >= last || c->padded_vocab < c->vocab)
        return herr_config(e, "stage [%d, %d) of a %d-layer model (padded vocab %d): not a stage",
                           first, last, c->layers, c->padded_vocab);
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab, maxT = (size_t)c->max_seq;
    struct layout_builder b = {calloc((size_t)(last - first) * 12 + 5, sizeof *b.t), 0, 0};
    if (!b.t)
        return herr_set(e, "out of memory for a stage layout");
    if (first == 0) {
        add(&b, "wte", -1, Vp, C);
        add(&b, "wpe", -1, maxT, C);
    }
    for (int l = first; l < last; l++) {
        add(&b, "ln_1.weight", l, C, 1);
        add(&b, "ln_1.bias", l, C, 1);
        add(&b, "attn.qkv.weight", l, 3 * C, C);
        add(&b, "attn.qkv.bias", l, 3 * C, 1);
        add(&b, "attn.proj.weight", l, C, C);
        add(&b, "attn.proj.bias", l, C, 1);
        add(&b, "ln_2.weight", l, C, 1);
        add(&b, "ln_2.bias", l, C, 1);
        add(&b, "mlp.fc.weight", l, 4 * C, C);
        add(&b, "mlp.fc.bias", l, 4 * C, 1);
        add(&b, "mlp.proj.weight", l, C, 4 * C);
        add(&b, "mlp.proj.bias", l, C, 1);
    }
    if (last == c->layers) {
        add(&b, "ln_f.weight", -1, C, 1);
        add(&b, "ln_f.bias", -1, C, 1);
        if (first != 0)
            add(&b, "wte", -1, Vp, C);
    }
    *out = b.t;
    *nt = b.n;
    *total = b.total;
    return 0;
}

/* ---------------------------------------------------------------- sets */

int ckpt_set_steps(const char *dir, int64_t **steps, int *n, herr *e)
{
    struct ckpt_file *f;
    int nf;
    *steps = NULL;
    *n = 0;
    if (ckpt_list(dir, &f, &nf, e) != 0)
        return -1;
    if (nf > 0 && !(*steps = malloc((size_t)nf * sizeof **steps))) {
        free(f);
        return herr_set(e, "checkpoint directory %s: out of memory", dir);
    }
    for (int i = 0; i < nf; i++) /* sorted by step: each step once */
        if (*n == 0 || (*steps)[*n - 1] != f[i].step)
            (*steps)[(*n)++] = f[i].step;
    free(f);
    return 0;
}

/* Depth-first: a chain of files[] from layer `at` to `layers`, into chain[depth..]. */
static int chain_from(const struct ckpt_file *f, int nf, int at, int layers, struct ckpt_file *chain,
                      int depth, int *len)
{
    if (at == layers) {
        *len = depth;
        return 1;
    }
    for (int i = 0; i < nf; i++) {
        if (f[i].first != at || f[i].last > layers)
            continue;
        chain[depth] = f[i];
        if (chain_from(f, nf, f[i].last, layers, chain, depth + 1, len))
            return 1;
    }
    return 0;
}

int ckpt_set_cover(const char *dir, int64_t step, int layers, struct ckpt_file **cover, int *n,
                   herr *e)
{
    struct ckpt_file *all;
    int na;
    *cover = NULL;
    *n = 0;
    if (ckpt_list(dir, &all, &na, e) != 0)
        return -1;
    int k = 0; /* this step's files, moved to the front */
    for (int i = 0; i < na; i++)
        if (all[i].step == step)
            all[k++] = all[i];
    struct ckpt_file *chain = calloc((size_t)(k > 0 ? k : 1), sizeof *chain);
    if (!chain) {
        free(all);
        return herr_set(e, "checkpoint directory %s: out of memory", dir);
    }
    int len = 0;
    if (!chain_from(all, k, 0, layers, chain, 0, &len)) {
        /* the first layer the files of this step do not reach, from layer 0 */
        int reach = 0, grew = 1;
        while (grew) {
            grew = 0;
            for (int i = 0; i < k; i++)
                if (all[i].first == reach && all[i].last <= layers) {
                    reach = all[i].last;
                    grew = 1;
                }
        }
        /* a model of another depth, as the files' header says, or a file missing */
        char path[4096];
        struct ckpt_meta meta;
        herr ignore;
        int other = k > 0 &&
                    ckpt_path(dir, all[0].first, all[0].last, step, path, sizeof path, &ignore) == 0 &&
                    ckpt_read_meta(path, &meta, &ignore) == 0 && meta.c.layers != layers;
        free(all);
        free(chain);
        if (k == 0)
            return herr_config(e, "checkpoint directory %s: no stage file of step %" PRId64, dir,
                               step);
        if (other)
            return herr_config(e, "checkpoint directory %s: the set of step %" PRId64 " is a model "
                               "of %d layers (its files' header), not %d", dir, step,
                               meta.c.layers, layers);
        return herr_config(e, "checkpoint directory %s: the stage files of step %" PRId64 " do not "
                           "cover the %d layers (none starts at layer %d)", dir, step, layers,
                           reach);
    }
    free(all);
    *cover = chain;
    *n = len;
    return 0;
}

/* ---------------------------------------------------------------- reading a stage */

/* The file of the cover that holds tensor `name` of the new stage (head: the last stage's copy
 * of wte rather than the first stage's embedding). */
static int source_of(const struct ckpt_file *cover, int n, const char *name, int head)
{
    int layer = -1, used = 0;
    if (sscanf(name, "h%d.%n", &layer, &used) == 1 && used > 0) {
        for (int i = 0; i < n; i++)
            if (cover[i].first <= layer && layer < cover[i].last)
                return i;
        return -1;
    }
    if (!strcmp(name, "wpe") || (!strcmp(name, "wte") && !head))
        return 0;
    return n - 1; /* ln_f.*, and the head's wte */
}

static int find_tensor(const struct ckpt_tensor *t, int nt, const char *name)
{
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            return i;
    return -1;
}

/* Reads the ranges of cover file f into the buffers, checking its shape and step first. */
static int read_source(const char *dir, const struct ckpt_file *f, int64_t step,
                       const struct gpt_config *c, const struct ckpt_range *r, int nr, float *params,
                       float *m, float *v, struct ckpt_meta *meta, herr *e)
{
    char path[4096];
    struct ckpt_meta got;
    if (ckpt_path(dir, f->first, f->last, step, path, sizeof path, e) != 0 ||
        ckpt_read_meta(path, &got, e) != 0 ||
        ckpt_check_shape(path, &got, c, f->first, f->last, e) != 0)
        return -1;
    if (got.step != step)
        return herr_config(e, "checkpoint %s: its header says step %" PRId64, path, got.step);
    if (ckpt_read_ranges(path, &got, r, nr, params, m, v, e) != 0)
        return -1;
    if (meta)
        *meta = got;
    return 0;
}

int ckpt_layout_read(const char *dir, int64_t step, const struct gpt_config *c, int first,
                     int last, float *params, float *m, float *v, size_t n,
                     struct ckpt_meta *meta, herr *e)
{
    struct ckpt_tensor *want = NULL, *src = NULL;
    struct ckpt_file *cover = NULL;
    struct ckpt_range *r = NULL;
    int nwant, ncover, rc = -1;
    size_t total;
    if (ckpt_stage_layout(c, first, last, &want, &nwant, &total, e) != 0)
        return -1;
    if (total != n) {
        herr_set(e, "stage [%d, %d) has %zu parameters, not %zu", first, last, total, n);
        goto out;
    }
    if (ckpt_set_cover(dir, step, c->layers, &cover, &ncover, e) != 0)
        goto out;
    if (!(r = calloc((size_t)nwant, sizeof *r))) {
        herr_set(e, "out of memory");
        goto out;
    }
    int *from = calloc((size_t)nwant, sizeof *from);
    if (!from) {
        herr_set(e, "out of memory");
        goto out;
    }
    for (int i = 0; i < nwant; i++) {
        /* the head's wte is the one after ln_f (a last stage that is not the first) */
        int head = !strcmp(want[i].name, "wte") && i > 0;
        from[i] = source_of(cover, ncover, want[i].name, head);
    }
    int meta_done = 0;
    size_t copied = 0;
    for (int f = 0; f < ncover; f++) {
        int nr = 0, ns;
        size_t stotal;
        free(src);
        src = NULL;
        for (int i = 0; i < nwant; i++)
            if (from[i] == f)
                nr++;
        if (nr == 0)
            continue;
        if (ckpt_stage_layout(c, cover[f].first, cover[f].last, &src, &ns, &stotal, e) != 0) {
            free(from);
            goto out;
        }
        nr = 0;
        for (int i = 0; i < nwant; i++) {
            if (from[i] != f)
                continue;
            /* the head's wte: the last file's own copy, or its one wte when it is also first */
            int s = find_tensor(src, ns, want[i].name);
            if (s < 0) {
                herr_config(e, "checkpoint of stage [%d, %d) step %" PRId64 ": no tensor %s",
                            cover[f].first, cover[f].last, step, want[i].name);
                free(from);
                goto out;
            }
            r[nr++] = (struct ckpt_range){src[s].offset, want[i].offset, want[i].size};
            copied += want[i].size;
        }
        struct ckpt_meta got;
        if (read_source(dir, &cover[f], step, c, r, nr, params, m, v, &got, e) != 0) {
            free(from);
            goto out;
        }
        if (meta && !meta_done) {
            *meta = got;
            meta->first = first;
            meta->last = last;
            meta->nparams = n;
            meta_done = 1;
        }
    }
    free(from);
    if (copied != n) {
        herr_set(e, "stage [%d, %d): %zu of its %zu parameters found in the set of step %" PRId64,
                 first, last, copied, n, step);
        goto out;
    }
    rc = 0;
out:
    free(want);
    free(src);
    free(cover);
    free(r);
    return rc;
}
