/* A checkpoint set out as one model (model_export.h). */
#include "model_export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_layout.h"

/* ---------------------------------------------------------------- reading the set */

/* The step <dir>/latest-step names: 0 and *step, 1 when there is no such file. */

/* The shape of the set of `step`: the header of its first file (every file is checked against
 * it when read). */
static int set_shape(const char *dir, int64_t step, struct gpt_config *c, herr *e)
{
    struct ckpt_file *all;
    int n, first = -1;
    if (ckpt_list(dir, &all, &n, e) != 0)
        return -1;
    for (int i = 0; i < n && first < 0; i++)
        if (all[i].step == step && all[i].first == 0)
            first = i;
    if (first < 0) {
        free(all);
        return herr_config(e, "checkpoint directory %s: no checkpoint of step %" PRId64
                           " holds layer 0", dir, step);
    }
    char path[4096];
    struct ckpt_meta m;
    int rc = ckpt_path(dir, 0, all[first].last, step, path, sizeof path, e) ||
             ckpt_read_meta(path, &m, e);
    free(all);
    if (rc)
        return -1;
    /* The header's shape is the file's word (its CRC only says the bytes are as written): a
     * model, and one whose layout's sizes do not wrap, before anything is laid out by it. */
    struct gpt_config chk = m.c;
    herr inner;
    if (chk.padded_vocab <= 0 || gpt_config_check(&chk, &inner) != 0)
        return herr_config(e, "checkpoint %s: bad shape: %s", path,
                           chk.padded_vocab <= 0 ? "padded vocab is not positive" : inner.msg);
    if (ckpt_model_floats(&chk) > 1e13)
        return herr_config(e, "checkpoint %s: bad shape: %d layers of %d channels are more "
                           "parameters than a model holds", path, chk.layers, chk.channels);
    *c = m.c;
    return 0;
}

/* The set's files hold at least the model's n floats (each float is read from one of them):
 * a header whose shape claims more is refused before the model is allocated. */
static int set_holds(const char *dir, int64_t step, const struct gpt_config *c, size_t n, herr *e)
{
    struct ckpt_file *cover;
    int nc;
    if (ckpt_set_cover(dir, step, c->layers, &cover, &nc, e) != 0)
        return -1;
    uint64_t bytes = 0;
    int rc = 0;
    for (int i = 0; i < nc && rc == 0; i++) {
        char path[4096];
        struct stat st;
        rc = ckpt_path(dir, cover[i].first, cover[i].last, step, path, sizeof path, e);
        if (rc == 0 && stat(path, &st) != 0)
            rc = herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint %s: %s", path,
                               strerror(errno));
        if (rc == 0)
            bytes += (uint64_t)st.st_size;
    }
    free(cover);
    if (rc == 0 && bytes / sizeof(float) < n)
        rc = herr_config(e, "checkpoint directory %s: the files of step %lld hold %llu bytes, "
                         "fewer than the %zu floats of the model their header describes (%d "
                         "layers, %d channels, vocabulary %d, %d positions): a header is corrupt",
                         dir, (long long)step, (unsigned long long)bytes, n, c->layers,
                         c->channels, c->vocab, c->max_seq);
    return rc;
}

int model_export_read(const char *dir, int64_t step, struct gpt_config *c, float **params,
                      int64_t *used, herr *e)
{
    *params = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return herr_set_kind(e, herr_kind_of_errno(errno), "checkpoint directory %s: %s", dir,
                             strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return herr_config(e, "checkpoint directory %s: not a directory", dir);
    if (step < 0) {
        long long marked;
        int r = ckpt_read_latest_step(dir, &marked, e);
        if (r == 0)
            step = marked;
        if (r < 0)
            return -1;
        if (r > 0) { /* no marker (holmes-node train): the newest step that covers the model */
            int64_t *steps;
            int n;
            if (ckpt_set_steps(dir, &steps, &n, e) != 0)
                return -1;
            for (int i = n - 1; i >= 0 && step < 0; i--) {
                struct gpt_config sc;
                struct ckpt_file *cover;
                int nc;
                herr ignore;
                if (set_shape(dir, steps[i], &sc, &ignore) == 0 &&
                    ckpt_set_cover(dir, steps[i], sc.layers, &cover, &nc, &ignore) == 0) {
                    free(cover);
                    step = steps[i];
                }
            }
            free(steps);
            if (step < 0 && n == 0)
                return herr_config(e, "checkpoint directory %s: holds no checkpoint (no "
                                   "stage-*-step-*.ckpt file)", dir);
            if (step < 0)
                return herr_config(e, "checkpoint directory %s: no checkpoint set covers a "
                                   "whole model", dir);
        }
    }
    if (set_shape(dir, step, c, e) != 0)
        return -1;
    struct ckpt_tensor *t;
    int nt;
    size_t n;
    if (ckpt_stage_layout(c, 0, c->layers, &t, &nt, &n, e) != 0)
        return -1;
    free(t);
    if (set_holds(dir, step, c, n, e) != 0)
        return -1;
    float *p = malloc(n * sizeof *p);
    if (!p)
        return herr_set(e, "out of memory for the model (%zu floats)", n);
    if (ckpt_layout_read(dir, step, c, 0, c->layers, p, NULL, NULL, n, NULL, e) != 0) {
        free(p);
        return -1;
    }
    *params = p;
    *used = step;
    return 0;
}

/* ---------------------------------------------------------------- writing */

struct out {
    const char *path;
    char tmp[4200];
    FILE *f;
};

static int out_open(struct out *o, const char *path, herr *e)
{
    o->path = path;
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "cannot create %s: %s", o->tmp,
                             strerror(errno));
    return 0;
}

static int out_write(struct out *o, const void *p, size_t bytes)
{
    return fwrite(p, 1, bytes, o->f) == bytes ? 0 : -1;
}

/* Flushed, synced and renamed into place; on failure the temporary file goes. */
static int out_close(struct out *o, int failed, herr *e)
{
    int err = errno;
    if (!failed && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0))
        failed = 1, err = errno;
    if (fclose(o->f) != 0 && !failed)
        failed = 1, err = errno;
    if (!failed && rename(o->tmp, o->path) != 0)
        failed = 1, err = errno;
    if (failed) {
        unlink(o->tmp);
        return herr_set_kind(e, herr_kind_of_errno(err), "cannot write %s: %s", o->path,
                             strerror(err));
    }
    return 0;
}

static const struct ckpt_tensor *tensor(const struct ckpt_tensor *t, int nt, const char *name)
{
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

/* llm.c's parameter groups in file order; per-layer groups hold every layer back to back */
static const struct { const char *suffix; int per_layer; } llmc_groups[16] = {
    {"wte", 0}, {"wpe", 0}, {"ln_1.weight", 1}, {"ln_1.bias", 1}, {"attn.qkv.weight", 1},
    {"attn.qkv.bias", 1}, {"attn.proj.weight", 1}, {"attn.proj.bias", 1}, {"ln_2.weight", 1},
    {"ln_2.bias", 1}, {"mlp.fc.weight", 1}, {"mlp.fc.bias", 1}, {"mlp.proj.weight", 1},
    {"mlp.proj.bias", 1}, {"ln_f.weight", 0}, {"ln_f.bias", 0}};

int model_export_llmc(const char *path, const struct gpt_config *c, const float *params, herr *e)
{
    struct ckpt_tensor *t;
    int nt;
    size_t n;
    if (ckpt_stage_layout(c, 0, c->layers, &t, &nt, &n, e) != 0)
        return -1;
    struct out o;
    if (out_open(&o, path, e) != 0) {
        free(t);
        return -1;
    }
    int32_t h[256] = {LLMC_MAGIC, 3, c->max_seq, c->vocab, c->layers, c->heads, c->channels,
                      c->padded_vocab};
    int bad = out_write(&o, h, sizeof h);
    for (int g = 0; g < 16 && !bad; g++)
        for (int l = 0; l < (llmc_groups[g].per_layer ? c->layers : 1) && !bad; l++) {
            char name[64];
            if (llmc_groups[g].per_layer)
                snprintf(name, sizeof name, "h%d.%s", l, llmc_groups[g].suffix);
            else
                snprintf(name, sizeof name, "%s", llmc_groups[g].suffix);
            const struct ckpt_tensor *x = tensor(t, nt, name);
            bad = !x || out_write(&o, params + x->offset, x->size * sizeof *params);
        }
    free(t);
    return out_close(&o, bad, e);
}

const struct model_hf_name MODEL_HF_LAYER[12] = {
    {"ln_1.weight", "ln_1.weight", 0}, {"ln_1.bias", "ln_1.bias", 0},
    {"attn.c_attn.weight", "attn.qkv.weight", 1}, {"attn.c_attn.bias", "attn.qkv.bias", 0},
    {"attn.c_proj.weight", "attn.proj.weight", 1}, {"attn.c_proj.bias", "attn.proj.bias", 0},
    {"ln_2.weight", "ln_2.weight", 0}, {"ln_2.bias", "ln_2.bias", 0},
    {"mlp.c_fc.weight", "mlp.fc.weight", 1}, {"mlp.c_fc.bias", "mlp.fc.bias", 0},
    {"mlp.c_proj.weight", "mlp.proj.weight", 1}, {"mlp.c_proj.bias", "mlp.proj.bias", 0}};

struct st_entry {
    char name[64];
    const struct ckpt_tensor *src;
    int transpose;
    size_t rows;   /* rows of the source kept (wte: the real vocabulary) */
};

/* The safetensors entries in file order. *out malloc'ed. */
static int st_entries(const struct gpt_config *c, const struct ckpt_tensor *t, int nt,
                      struct st_entry **out, int *n, herr *e)
{
    struct st_entry *v = calloc((size_t)c->layers * 12 + 4, sizeof *v);
    if (!v)
        return herr_set(e, "out of memory");
    int k = 0;
    v[k++] = (struct st_entry){"wte.weight", tensor(t, nt, "wte"), 0, (size_t)c->vocab};
    v[k++] = (struct st_entry){"wpe.weight", tensor(t, nt, "wpe"), 0, (size_t)c->max_seq};
    for (int l = 0; l < c->layers; l++)
        for (int i = 0; i < 12; i++) {
            char src[64];
            snprintf(src, sizeof src, "h%d.%s", l, MODEL_HF_LAYER[i].holmes);
            struct st_entry *x = &v[k++];
            snprintf(x->name, sizeof x->name, "h.%d.%s", l, MODEL_HF_LAYER[i].hf);
            x->src = tensor(t, nt, src);
            x->transpose = MODEL_HF_LAYER[i].transpose;
            x->rows = x->src ? x->src->rows : 0;
        }
    v[k++] = (struct st_entry){"ln_f.weight", tensor(t, nt, "ln_f.weight"), 0, (size_t)c->channels};
    v[k++] = (struct st_entry){"ln_f.bias", tensor(t, nt, "ln_f.bias"), 0, (size_t)c->channels};
    for (int i = 0; i < k; i++)
        if (!v[i].src) {
            herr_set(e, "safetensors export: no tensor for %s", v[i].name);
            free(v);
            return -1;
        }
    *out = v;
    *n = k;
    return 0;
}

/* The JSON header: every tensor's dtype, shape and byte range, padded with spaces to 8 bytes. */
static char *st_header(const struct gpt_config *c, const struct st_entry *v, int n, size_t *len)
{
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    char heads[16]; /* the one shape safetensors cannot tell (model_import.h reads it back) */
    snprintf(heads, sizeof heads, "%d", c->heads);
    cJSON_AddStringToObject(meta, "n_head", heads);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const struct ckpt_tensor *s = v[i].src;
        cJSON *o = cJSON_AddObjectToObject(h, v[i].name);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        size_t bytes = v[i].rows * s->cols * sizeof(float);
        cJSON_AddStringToObject(o, "dtype", "F32");
        if (s->cols == 1) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)v[i].rows));
        } else {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)(v[i].transpose ? s->cols : v[i].rows)));
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)(v[i].transpose ? v[i].rows : s->cols)));
        }
        cJSON *off = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + bytes)));
        at += bytes;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!text)
        return NULL;
    size_t l = strlen(text), padded = (l + 7) / 8 * 8;
    char *p = realloc(text, padded + 1);
    if (!p) {
        free(text);
        return NULL;
    }
    memset(p + l, ' ', padded - l);
    p[padded] = '\0';
    *len = padded;
    return p;
}

int model_export_safetensors(const char *path, const struct gpt_config *c, const float *params,
                             herr *e)
{
    struct ckpt_tensor *t;
    struct st_entry *v = NULL;
    int nt, nv = 0;
    size_t n, hlen = 0;
    if (ckpt_stage_layout(c, 0, c->layers, &t, &nt, &n, e) != 0)
        return -1;
    float *tr = malloc((size_t)4 * (size_t)c->channels * (size_t)c->channels * sizeof *tr);
    if (!tr) {
        free(t);
        return herr_set(e, "out of memory");
    }
    if (st_entries(c, t, nt, &v, &nv, e) != 0) {
        free(tr);
        free(t);
        return -1;
    }
    char *header = st_header(c, v, nv, &hlen);
    if (!header) {
        free(tr);
        free(v);
        free(t);
        return herr_set(e, "out of memory");
    }
    struct out o;
    int bad = out_open(&o, path, e);
    if (bad) {
        free(header);
        free(tr);
        free(v);
        free(t);
        return -1;
    }
    uint64_t len = hlen; /* little-endian u64: the header's length */
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len >> (8 * i));
    bad = out_write(&o, le, 8) || out_write(&o, header, hlen);
    for (int i = 0; i < nv && !bad; i++) {
        const struct ckpt_tensor *s = v[i].src;
        const float *src = params + s->offset;
        if (!v[i].transpose) {
            bad = out_write(&o, src, v[i].rows * s->cols * sizeof *src);
            continue;
        }
        for (size_t r = 0; r < s->rows; r++) /* [out][in] -> [in][out] */
            for (size_t k = 0; k < s->cols; k++)
                tr[k * s->rows + r] = src[r * s->cols + k];
        bad = out_write(&o, tr, s->rows * s->cols * sizeof *tr);
    }
    free(header);
    free(tr);
    free(v);
    free(t);
    return out_close(&o, bad, e);
}

int model_export_hf_config(const char *path, const struct gpt_config *c, herr *e)
{
    cJSON *j = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq);
    cJSON_AddNumberToObject(j, "n_embd", c->channels);
    cJSON_AddNumberToObject(j, "n_layer", c->layers);
    cJSON_AddNumberToObject(j, "n_head", c->heads);
    cJSON_AddNullToObject(j, "n_inner"); /* 4 x n_embd */
    cJSON_AddStringToObject(j, "activation_function", "gelu_new"); /* the tanh form */
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    if (c->vocab == 50257) { /* GPT-2's end-of-text */
        cJSON_AddNumberToObject(j, "bos_token_id", 50256);
        cJSON_AddNumberToObject(j, "eos_token_id", 50256);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return herr_set(e, "out of memory");
    struct out o;
    if (out_open(&o, path, e) != 0) {
        free(text);
        return -1;
    }
    int bad = out_write(&o, text, strlen(text)) || out_write(&o, "\n", 1);
    free(text);
    return out_close(&o, bad, e);
}
