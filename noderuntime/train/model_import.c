#include "model_import.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bf16.h"
#include "checkpoint.h"
#include "model_export.h"

#define ST_HEADER_MAX (100u << 20) /* safetensors' own limit on the JSON header */

enum dtype { F32, F16, BF16 };

/* One tensor of the file. */
struct st_tensor {
    char holmes[48];      /* the Holmes tensor it is ("h3.attn.qkv.weight") */
    const char *name;     /* as the file names it */
    enum dtype dt;
    int ndim;
    uint64_t shape[2];
    uint64_t begin, end;  /* bytes, after the header */
    int transpose;
};

struct st_file {
    const char *path;
    int fd;
    uint64_t data_at, data_len;
    cJSON *header;
    struct st_tensor *t;
    int n;
    int layers, heads; /* heads: 0 when the file does not say */
};

static void st_close(struct st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    cJSON_Delete(f->header);
    free(f->t);
}

/* The Holmes name of a transformers GPT-2 tensor name (without "transformer."); "" for one
 * passed over (the tied head, the causal masks); -1 for one GPT-2 does not have. */
static int holmes_name(const char *n, char *out, size_t cap, int *transpose, int *layer)
{
    *transpose = 0;
    *layer = -1;
    static const char *const same[4][2] = {{"wte.weight", "wte"}, {"wpe.weight", "wpe"},
                                           {"ln_f.weight", "ln_f.weight"}, {"ln_f.bias", "ln_f.bias"}};
    for (int i = 0; i < 4; i++)
        if (!strcmp(n, same[i][0])) {
            snprintf(out, cap, "%s", same[i][1]);
            return 0;
        }
    out[0] = 0;
    if (!strcmp(n, "lm_head.weight"))
        return 0;
    int l, used = 0;
    if (sscanf(n, "h.%d.%n", &l, &used) != 1 || used == 0 || l < 0 || l > 1 << 20)
        return -1;
    const char *rest = n + used;
    if (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias"))
        return 0;
    for (int i = 0; i < 12; i++)
        if (!strcmp(rest, MODEL_HF_LAYER[i].hf)) {
            snprintf(out, cap, "h%d.%s", l, MODEL_HF_LAYER[i].holmes);
            *transpose = MODEL_HF_LAYER[i].transpose;
            *layer = l;
            return 0;
        }
    return -1;
}

static size_t dtype_bytes(enum dtype d) { return d == F32 ? 4 : 2; }

/* One header entry into t (0), passed over (1), or refused (-1 with e). */
static int parse_entry(struct st_file *f, const cJSON *o, struct st_tensor *t, herr *e)
{
    const char *name = o->string, *n = name;
    if (!strncmp(n, "transformer.", 12))
        n += 12;
    int layer;
    if (holmes_name(n, t->holmes, sizeof t->holmes, &t->transpose, &layer) != 0)
        return herr_config(e, "safetensors %s: tensor \"%s\" is not one of GPT-2's (wte, wpe, "
                           "h.<layer>.<ln_1|attn.c_attn|attn.c_proj|ln_2|mlp.c_fc|mlp.c_proj>."
                           "<weight|bias>, ln_f): not a GPT-2 model", f->path, name);
    if (!t->holmes[0])
        return 1;
    t->name = name;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return herr_config(e, "safetensors %s: tensor %s: needs dtype, shape and data_offsets "
                           "[begin, end]", f->path, name);
    if (!strcmp(dt->valuestring, "F32"))
        t->dt = F32;
    else if (!strcmp(dt->valuestring, "F16"))
        t->dt = F16;
    else if (!strcmp(dt->valuestring, "BF16"))
        t->dt = BF16;
    else
        return herr_config(e, "safetensors %s: tensor %s: dtype %s (F32, F16 and BF16 are read)",
                           f->path, name, dt->valuestring);
    t->ndim = cJSON_GetArraySize(shape);
    if (t->ndim < 1 || t->ndim > 2)
        return herr_config(e, "safetensors %s: tensor %s: %d dimensions (GPT-2's have 1 or 2)",
                           f->path, name, t->ndim);
    uint64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 1e9)
            return herr_config(e, "safetensors %s: tensor %s: shape[%d] is not a size of 1 to "
                               "10^9", f->path, name, i);
        t->shape[i] = (uint64_t)d->valuedouble;
        count *= t->shape[i];
    }
    const cJSON *b = cJSON_GetArrayItem(off, 0), *x = cJSON_GetArrayItem(off, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(x) || b->valuedouble < 0 ||
        x->valuedouble < b->valuedouble || x->valuedouble > (double)f->data_len)
        return herr_config(e, "safetensors %s: tensor %s: data_offsets outside the file's %" PRIu64
                           " bytes of data", f->path, name, f->data_len);
    t->begin = (uint64_t)b->valuedouble;
    t->end = (uint64_t)x->valuedouble;
    if (t->end - t->begin != count * dtype_bytes(t->dt))
        return herr_config(e, "safetensors %s: tensor %s: %" PRIu64 " bytes for %" PRIu64
                           " values of %s", f->path, name, t->end - t->begin, count,
                           dt->valuestring);
    if (layer + 1 > f->layers)
        f->layers = layer + 1;
    return 0;
}

/* The header read and every tensor's entry checked against the file. */
static int st_open(struct st_file *f, const char *path, herr *e)
{
    *f = (struct st_file){.path = path, .fd = open(path, O_RDONLY | O_CLOEXEC)};
    if (f->fd < 0)
        return herr_config(e, "safetensors %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    unsigned char le[8];
    if (fstat(f->fd, &st) != 0 || ckpt_read_all(f->fd, le, 8, 0) != 0)
        return herr_config(e, "safetensors %s: shorter than its 8-byte header length", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | le[i];
    if (hlen < 2 || hlen > ST_HEADER_MAX || hlen > (uint64_t)st.st_size - 8)
        return herr_config(e, "safetensors %s: a header of %" PRIu64 " bytes in a file of %lld "
                           "(at most %u, and within the file)", path, hlen,
                           (long long)st.st_size, ST_HEADER_MAX);
    char *text = malloc(hlen);
    if (!text)
        return herr_set(e, "safetensors %s: out of memory for its header", path);
    int rc = ckpt_read_all(f->fd, text, hlen, 8);
    f->header = rc == 0 ? cJSON_ParseWithLength(text, hlen) : NULL;
    free(text);
    if (!cJSON_IsObject(f->header))
        return herr_config(e, "safetensors %s: the header is not a JSON object", path);
    f->data_at = 8 + hlen;
    f->data_len = (uint64_t)st.st_size - f->data_at;
    int n = cJSON_GetArraySize(f->header);
    if (!(f->t = calloc((size_t)n + 1, sizeof *f->t)))
        return herr_set(e, "safetensors %s: out of memory", path);
    const cJSON *o;
    cJSON_ArrayForEach(o, f->header) {
        if (!strcmp(o->string, "__metadata__")) {
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "n_head");
            if (cJSON_IsString(h) && (f->heads = atoi(h->valuestring)) < 1)
                return herr_config(e, "safetensors %s: __metadata__.n_head \"%s\" is not a "
                                   "number of heads", path, h->valuestring);
            continue;
        }
        int r = parse_entry(f, o, &f->t[f->n], e);
        if (r < 0)
            return -1;
        if (r == 0) {
            for (int i = 0; i < f->n; i++)
                if (!strcmp(f->t[i].holmes, f->t[f->n].holmes))
                    return herr_config(e, "safetensors %s: tensors %s and %s are both %s", path,
                                       f->t[i].name, f->t[f->n].name, f->t[i].holmes);
            f->n++;
        }
    }
    return 0;
}

static const struct st_tensor *find(const struct st_file *f, const char *holmes)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].holmes, holmes))
            return &f->t[i];
    return NULL;
}

/* The shape from wte [V, C] and wpe [T, C], the layers counted; heads the file's (0: unsaid). */
static int st_shape(const struct st_file *f, struct gpt_config *c, herr *e)
{
    const struct st_tensor *wte = find(f, "wte"), *wpe = find(f, "wpe");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return herr_config(e, "safetensors %s: %s", f->path, !wte || !wpe
                           ? "no wte.weight or wpe.weight: not a GPT-2 model"
                           : "wte.weight and wpe.weight must be matrices");
    if (f->layers < 1)
        return herr_config(e, "safetensors %s: no layer (h.0.*)", f->path);
    *c = (struct gpt_config){.layers = f->layers, .channels = (int)wte->shape[1],
                             .heads = f->heads, .vocab = (int)wte->shape[0], .padded_vocab = 0,
                             .max_seq = (int)wpe->shape[0]};
    return 0;
}

/* The heads from transformers' config.json beside the file, where the header does not say
 * them; the config's other sizes must be the tensors'. 0 also when there is no config.json. */
static int st_hf_config(struct st_file *f, const struct gpt_config *c, herr *e)
{
    if (f->heads)
        return 0;
    char path[PATH_MAX];
    const char *slash = strrchr(f->path, '/');
    int n = slash ? snprintf(path, sizeof path, "%.*s/config.json", (int)(slash - f->path), f->path)
                  : snprintf(path, sizeof path, "config.json");
    FILE *in = n < (int)sizeof path ? fopen(path, "rb") : NULL;
    if (!in)
        return 0;
    char buf[65536];
    size_t len = fread(buf, 1, sizeof buf, in);
    int full = feof(in) && !ferror(in);
    fclose(in);
    cJSON *j = full ? cJSON_ParseWithLength(buf, len) : NULL;
    const cJSON *nh = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    int rc = 0;
    if (!cJSON_IsObject(j))
        rc = herr_config(e, "%s (beside %s): not a JSON object of at most 64 KiB", path, f->path);
    else if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "gpt2") != 0))
        rc = herr_config(e, "%s: model_type is not \"gpt2\"", path);
    else if (!cJSON_IsNumber(nh) || nh->valuedouble < 1 || nh->valuedouble > 1024)
        rc = herr_config(e, "%s: n_head must be a number of heads (1 to 1024)", path);
    static const char *const keys[4] = {"n_layer", "n_embd", "n_positions", "vocab_size"};
    int have[4] = {c->layers, c->channels, c->max_seq, c->vocab};
    for (int i = 0; rc == 0 && i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble != have[i]))
            rc = herr_config(e, "%s: %s is %g but %s holds %d", path, keys[i],
                             cJSON_IsNumber(v) ? v->valuedouble : -1.0, f->path, have[i]);
    }
    if (rc == 0)
        f->heads = (int)nh->valuedouble;
    cJSON_Delete(j);
    return rc;
}

/* The whole shape: heads unsaid are GPT-2's 64 channels a head (guess: 1), or left 0 (guess:
 * 0, for a caller that has them from elsewhere). */
static int st_config(struct st_file *f, struct gpt_config *c, int guess, herr *e)
{
    if (st_shape(f, c, e) != 0 || st_hf_config(f, c, e) != 0)
        return -1;
    c->heads = f->heads;
    if (!guess && !c->heads)
        return 0;
    if (!c->heads && c->channels % 64 == 0)
        c->heads = c->channels / 64;
    if (!c->heads)
        return herr_config(e, "safetensors %s: the file does not say its heads (__metadata__."
                           "n_head) and its %d channels are not GPT-2's 64 a head: give the "
                           "shape (spec.model, --heads)", f->path, c->channels);
    herr inner = {0};
    if (gpt_config_check(c, &inner) != 0)
        return herr_config(e, "safetensors %s: bad shape: %s", f->path, inner.msg);
    return 0;
}

/* A 16-bit float's value. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0 && man == 0) {
        bits = sign;
    } else if (exp == 0) { /* subnormal: normalise */
        int shift = 0;
        while (!(man & 0x400)) {
            man <<= 1;
            shift++;
        }
        bits = sign | (uint32_t)(113 - shift) << 23 | (man & 0x3ff) << 13;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Tensor t of the file into dst ([rows][cols] of Holmes's layout), converted and transposed. */
static int st_read(const struct st_file *f, const struct st_tensor *t, float *dst, size_t rows,
                   size_t cols, herr *e)
{
    size_t n = rows * cols, eb = dtype_bytes(t->dt);
    unsigned char *raw = malloc(n * eb);
    float *tmp = t->transpose ? malloc(n * sizeof *tmp) : NULL;
    if (!raw || (t->transpose && !tmp)) {
        free(raw);
        free(tmp);
        return herr_set(e, "safetensors %s: out of memory for %s", f->path, t->name);
    }
    int rc = ckpt_read_all(f->fd, raw, n * eb, (off_t)(f->data_at + t->begin));
    if (rc != 0) {
        free(raw);
        free(tmp);
        return herr_config(e, "safetensors %s: cannot read %s: %s", f->path, t->name,
                           rc < 0 ? strerror(errno) : "the file is shorter than its header says");
    }
    float *out = t->transpose ? tmp : dst;
    for (size_t i = 0; i < n; i++) {
        if (t->dt == F32) {
            memcpy(&out[i], raw + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            if (t->dt == F16) {
                out[i] = half_to_float(h);
            } else {
                out[i] = bf16_to_float(h);
            }
        }
    }
    if (t->transpose) /* stored [in = cols][out = rows] */
        for (size_t c = 0; c < cols; c++)
            for (size_t r = 0; r < rows; r++)
                dst[r * cols + c] = tmp[c * rows + r];
    free(raw);
    free(tmp);
    return 0;
}

/* A directory is a Hugging Face model's: its model.safetensors. */
static const char *resolve(const char *path, char *buf, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return path;
    if (snprintf(buf, cap, "%s/model.safetensors", path) >= (int)cap)
        return path;
    return buf;
}

static int is_safetensors(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char b[9];
    int yes = fd >= 0 && ckpt_read_all(fd, b, 9, 0) == 0 && b[8] == '{' && b[6] == 0 && b[7] == 0;
    if (fd >= 0)
        close(fd);
    return yes;
}

/* A directory given: its model.safetensors must be there (else the llm.c reader would say it
 * could not open an "llm.c checkpoint" the user never named). */
static int dir_without_model(const char *given, const char *path, herr *e)
{
    if (path == given || access(path, R_OK) == 0)
        return 0;
    return herr_set_kind(e, herr_kind_of_errno(errno), "model directory %s: no readable "
                         "model.safetensors in it (%s; a Hugging Face model directory holds "
                         "model.safetensors and config.json)", given, strerror(errno));
}

static int config_of(const char *given, struct gpt_config *c, int guess, herr *e)
{
    char buf[PATH_MAX];
    const char *path = resolve(given, buf, sizeof buf);
    if (dir_without_model(given, path, e) != 0)
        return -1;
    if (!is_safetensors(path))
        return llmc_read_config(path, c, e);
    struct st_file f;
    int rc = st_open(&f, path, e) || st_config(&f, c, guess, e);
    st_close(&f);
    return rc ? -1 : 0;
}

int model_import_config(const char *given, struct gpt_config *c, herr *e)
{
    return config_of(given, c, 1, e);
}

int model_import_config_said(const char *given, struct gpt_config *c, herr *e)
{
    return config_of(given, c, 0, e);
}

int model_import_stage(const char *given, struct gpt_stage *s, herr *e)
{
    char buf[PATH_MAX];
    const char *path = resolve(given, buf, sizeof buf);
    if (dir_without_model(given, path, e) != 0)
        return -1;
    if (!is_safetensors(path))
        return llmc_load_stage(path, s, e);
    struct st_file f;
    struct gpt_config fc = {0};
    const struct gpt_config *c = gpt_stage_config(s);
    int rc = st_open(&f, path, e) || st_shape(&f, &fc, e) || st_hf_config(&f, &fc, e);
    const char *names[5] = {"layers", "channels", "vocab", "positions", "heads"};
    int got[5] = {fc.layers, fc.channels, fc.vocab, fc.max_seq, f.heads};
    int want[5] = {c->layers, c->channels, c->vocab, c->max_seq, c->heads};
    for (int i = 0; rc == 0 && i < 5; i++)
        if (got[i] != want[i] && (i < 4 || f.heads))
            rc = herr_config(e, "safetensors %s: %s is %d but the model has %d", path, names[i],
                             got[i], want[i]);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(s, &t);
    float *p = gpt_stage_params(s);
    for (int i = 0; rc == 0 && i < nt; i++) {
        const struct st_tensor *x = find(&f, t[i].name);
        int is_wte = !strcmp(t[i].name, "wte");
        size_t rows = is_wte ? (size_t)c->vocab : t[i].rows, cols = t[i].cols;
        /* the file's shape: [rows, cols], Conv1D weights [cols, rows], vectors (Holmes's
         * [rows][1]) [rows] */
        uint64_t r0 = x && x->transpose ? cols : rows, c0 = x && x->transpose ? rows : cols;
        if (!x)
            rc = herr_config(e, "safetensors %s: no tensor for %s (h.<layer>.* and the "
                             "embeddings of GPT-2)", path, t[i].name);
        else if (cols == 1 ? x->ndim != 1 || x->shape[0] != rows
                           : x->ndim != 2 || x->shape[0] != r0 || x->shape[1] != c0) {
            char have[48], need[48];
            if (x->ndim == 1)
                snprintf(have, sizeof have, "[%" PRIu64 "]", x->shape[0]);
            else
                snprintf(have, sizeof have, "[%" PRIu64 ", %" PRIu64 "]", x->shape[0], x->shape[1]);
            if (cols == 1)
                snprintf(need, sizeof need, "[%zu]", rows);
            else
                snprintf(need, sizeof need, "[%" PRIu64 ", %" PRIu64 "]", r0, c0);
            rc = herr_config(e, "safetensors %s: %s is %s but the model's %s wants %s", path,
                             x->name, have, t[i].name, need);
        }
        else if (st_read(&f, x, p + t[i].offset, rows, cols, e) != 0)
            rc = -1;
        else if (is_wte) /* the padded rows: zero, as llm.c's files hold them */
            memset(p + t[i].offset + rows * cols, 0, (t[i].rows - rows) * cols * sizeof *p);
    }
    st_close(&f);
    return rc ? -1 : 0;
}

int model_source_open(struct model_source *m, const char *dir, int64_t step, const char *file,
                      herr *e)
{
    *m = (struct model_source){.step = -1, .file = dir ? NULL : file};
    int rc = dir ? model_export_read(dir, step, &m->config, &m->params, &m->step, e)
                 : model_import_config(file, &m->config, e);
    if (rc != 0)
        model_source_close(m);
    return rc;
}

int model_source_load(const struct model_source *m, struct gpt_stage *s, herr *e)
{
    if (m->file)
        return model_import_stage(m->file, s, e);
    memcpy(gpt_stage_params(s), m->params, gpt_stage_num_params(s) * sizeof *m->params);
    return 0;
}

void model_source_close(struct model_source *m)
{
    free(m->params);
    *m = (struct model_source){.step = -1};
}
