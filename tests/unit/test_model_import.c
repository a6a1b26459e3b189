/* A GPT-2 model file in (model_import.h): llm.c's file exported as safetensors by `holmes-node
 * export` comes back bit for bit, whole and as a stage of two layers, its heads from n_head; a
 * file laid out as transformers writes GPT2LMHeadModel ("transformer." names, BF16 matrices and
 * F16 vectors, the tied head and the causal masks, no heads said, tensors in any order) loads
 * with every Conv1D weight transposed and every value exact; files that are not GPT-2 models,
 * miss a tensor, have one of the wrong shape, dtype or byte range, or a header past the file,
 * are refused naming the file, the tensor and the rule. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "fs_testutil.h"
#include "gpt.h"
#include "model_export.h"
#include "model_import.h"
#include "test.h"

static char dir[64];
enum { L = 3, C = 16, NH = 2, V = 61, VP = 128, MAXT = 12 };
static const struct gpt_config MODEL = {.layers = L, .channels = C, .heads = NH, .vocab = V,
                                        .padded_vocab = VP, .max_seq = MAXT};

static struct gpt_stage *stage(int first, int last)
{
    struct gpt_stage *s = NULL;
    herr e = {0};
    if (gpt_stage_create(&s, &MODEL, first, last, 1, 4, 1, &e) != 0)
        printf("# %s\n", e.msg);
    return s;
}

/* The stage's tensor of that name, or NULL. */
static const struct gpt_tensor *tensor(struct gpt_stage *s, const char *name)
{
    const struct gpt_tensor *t;
    int n = gpt_stage_tensors(s, &t);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

/* Holmes's value of tensor `name` at [r][c]: exact in BF16 and F16 (k / 64, |k| < 256). */
static float value(const char *name, size_t r, size_t c)
{
    unsigned h = 0;
    for (const char *p = name; *p; p++)
        h = h * 31 + (unsigned char)*p;
    int k = (int)((h + r * 7 + c * 13) % 255) - 127;
    return (float)k / 64.0f;
}

/* ------------------------------------------------ holmes-node export's safetensors, back */

static void test_round_trip(void)
{
    char llmc[128], st[128];
    snprintf(llmc, sizeof llmc, "%s/model.bin", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    struct gpt_stage *a = stage(0, L), *b = stage(0, L), *part = stage(1, 3);
    herr e = {0};
    if (!a || !b || !part) {
        TEST_FAIL("import: round trip", "no stage");
        return;
    }
    gpt_stage_init_params(a, 5);
    /* the padded rows of wte are zero in what is exported, as in llm.c's files */
    const struct gpt_tensor *wte = tensor(a, "wte");
    memset(gpt_stage_params(a) + wte->offset + (size_t)V * C, 0, (size_t)(VP - V) * C * sizeof(float));
    gpt_stage_init_params(b, 9); /* different values, overwritten by the import */
    struct gpt_config got = {0};
    int rc = model_export_safetensors(st, &MODEL, gpt_stage_params(a), &e) ||
             model_import_config(st, &got, &e);
    CHECK_MSG("import: the exported safetensors file's shape, its heads from n_head",
              rc == 0 && got.layers == L && got.channels == C && got.heads == NH &&
                  got.vocab == V && got.max_seq == MAXT && got.padded_vocab == VP,
              "rc %d (%s): %d layers, %d channels, %d heads, vocab %d, %d positions", rc, e.msg,
              got.layers, got.channels, got.heads, got.vocab, got.max_seq);
    rc = rc || model_import_stage(st, b, &e);
    size_t n = gpt_stage_num_params(a);
    CHECK_MSG("import: holmes-node export's safetensors loads back bit for bit",
              rc == 0 && !memcmp(gpt_stage_params(a), gpt_stage_params(b), n * sizeof(float)),
              "rc %d: %s", rc, e.msg);
    rc = model_import_stage(st, part, &e);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(part, &t), same = rc == 0;
    for (int i = 0; same && i < nt; i++) {
        const struct gpt_tensor *x = tensor(a, t[i].name);
        same = x && !memcmp(gpt_stage_params(part) + t[i].offset, gpt_stage_params(a) + x->offset,
                            t[i].size * sizeof(float));
    }
    CHECK_MSG("import: a stage of layers [1, 3) takes its layers, the final LayerNorm and the "
              "tied head (wte)", same && nt == 2 * 12 + 3, "rc %d (%s), %d tensors", rc, e.msg, nt);
    /* the same path through llm.c's format: the model as llm.c writes it, imported the same */
    rc = model_export_llmc(llmc, &MODEL, gpt_stage_params(a), &e) || model_import_stage(llmc, b, &e);
    CHECK_MSG("import: llm.c's file goes through the same entry point",
              rc == 0 && !memcmp(gpt_stage_params(a), gpt_stage_params(b), n * sizeof(float)),
              "rc %d: %s", rc, e.msg);
    gpt_stage_free(a);
    gpt_stage_free(b);
    gpt_stage_free(part);
}

/* ------------------------------------------------ a file as transformers writes it */

struct entry {
    char name[80];
    const char *dtype;  /* F32, F16, BF16, or anything to be refused */
    int ndim;
    size_t shape[4];
    const char *holmes; /* the values: value(holmes, ...) in Holmes's [out][in]; NULL: zeros */
    int transpose;      /* stored [in][out] */
};

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16); /* the values are exact in bf16 */
}

static uint16_t to_f16(float f) /* normal values of at most 10 mantissa bits: exact */
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffff) == 0)
        return (uint16_t)(b >> 16);
    uint32_t sign = b >> 31, exp = (b >> 23) & 0xff, man = b & 0x7fffff;
    return (uint16_t)(sign << 15 | (exp - 112) << 10 | man >> 13);
}

/* Writes the entries (data in their order), header_extra bytes claimed beyond the header. */
static int write_st(const char *path, const struct entry *v, int n, const char *n_head,
                    uint64_t header_extra, size_t cut_data)
{
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    if (n_head)
        cJSON_AddStringToObject(meta, "n_head", n_head);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(h, v[i].name), *sh = cJSON_AddArrayToObject(o, "shape");
        cJSON_AddStringToObject(o, "dtype", v[i].dtype);
        size_t count = 1, eb = !strcmp(v[i].dtype, "F32") || !strcmp(v[i].dtype, "I32") ? 4
                              : !strcmp(v[i].dtype, "I64") ? 8 : 2;
        for (int d = 0; d < v[i].ndim; d++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)v[i].shape[d]));
            count *= v[i].shape[d];
        }
        cJSON *off = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + count * eb)));
        at += count * eb;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    FILE *f = fopen(path, "wb");
    if (!f || !text)
        return -1;
    uint64_t len = strlen(text) + header_extra;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(text, 1, strlen(text), f);
    free(text);
    size_t written = 0;
    for (int i = 0; i < n; i++) {
        size_t rows = v[i].ndim == 1 ? 1 : v[i].shape[0], cols = v[i].shape[v[i].ndim - 1];
        for (int d = 1; v[i].ndim > 2 && d < v[i].ndim - 1; d++)
            rows *= v[i].shape[d];
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                /* stored [r][c]; Holmes's element is [c][r] for a Conv1D weight */
                /* a vector is Holmes's [n][1]: element k is value(name, k, 0) */
                float x = !v[i].holmes ? 0.0f : v[i].transpose ? value(v[i].holmes, c, r)
                          : v[i].ndim == 1 ? value(v[i].holmes, c, 0) : value(v[i].holmes, r, c);
                unsigned char b[8] = {0};
                size_t eb = 2;
                if (!strcmp(v[i].dtype, "F32")) {
                    memcpy(b, &x, 4);
                    eb = 4;
                } else if (!strcmp(v[i].dtype, "I64")) {
                    eb = 8;
                } else {
                    uint16_t u = !strcmp(v[i].dtype, "F16") ? to_f16(x) : to_bf16(x);
                    memcpy(b, &u, 2);
                }
                if (written + eb <= at - cut_data)
                    fwrite(b, 1, eb, f);
                written += eb;
            }
    }
    return fclose(f);
}

static const struct {
    const char *hf, *holmes;
    int transpose, rows, cols; /* Holmes's shape in units of C (vectors: rows 0) */
} HF[12] = {{"ln_1.weight", "ln_1.weight", 0, 0, 1}, {"ln_1.bias", "ln_1.bias", 0, 0, 1},
            {"attn.c_attn.weight", "attn.qkv.weight", 1, 3, 1}, {"attn.c_attn.bias", "attn.qkv.bias", 0, 0, 3},
            {"attn.c_proj.weight", "attn.proj.weight", 1, 1, 1}, {"attn.c_proj.bias", "attn.proj.bias", 0, 0, 1},
            {"ln_2.weight", "ln_2.weight", 0, 0, 1}, {"ln_2.bias", "ln_2.bias", 0, 0, 1},
            {"mlp.c_fc.weight", "mlp.fc.weight", 1, 4, 1}, {"mlp.c_fc.bias", "mlp.fc.bias", 0, 0, 4},
            {"mlp.c_proj.weight", "mlp.proj.weight", 1, 1, 4}, {"mlp.c_proj.bias", "mlp.proj.bias", 0, 0, 1}};

static char holmes_names[L * 12 + 4][48];

/* GPT2LMHeadModel's tensors, last layer first, BF16 matrices and F16 vectors. */
static int hf_entries(struct entry *v)
{
    int n = 0;
    for (int l = L - 1; l >= 0; l--)
        for (int i = 11; i >= 0; i--) {
            struct entry *x = &v[n];
            char *hn = holmes_names[n];
            snprintf(hn, 48, "h%d.%s", l, HF[i].holmes);
            if (HF[i].rows == 0) {
                *x = (struct entry){.dtype = "F16", .ndim = 1, .shape = {(size_t)HF[i].cols * C},
                                    .holmes = hn};
            } else { /* Holmes [rows C][cols C]; stored [in][out] */
                size_t out = (size_t)HF[i].rows * C, in = (size_t)HF[i].cols * C;
                *x = (struct entry){.dtype = "BF16", .ndim = 2, .shape = {in, out}, .holmes = hn,
                                    .transpose = 1};
            }
            snprintf(x->name, sizeof x->name, "transformer.h.%d.%s", l, HF[i].hf);
            n++;
        }
    v[n++] = (struct entry){"transformer.ln_f.bias", "F32", 1, {C}, "ln_f.bias", 0};
    v[n++] = (struct entry){"transformer.wpe.weight", "BF16", 2, {MAXT, C}, "wpe", 0};
    v[n++] = (struct entry){"transformer.wte.weight", "BF16", 2, {V, C}, "wte", 0};
    v[n++] = (struct entry){"transformer.ln_f.weight", "F16", 1, {C}, "ln_f.weight", 0};
    v[n++] = (struct entry){"lm_head.weight", "BF16", 2, {V, C}, "wte", 0};
    v[n++] = (struct entry){"transformer.h.0.attn.bias", "F32", 4, {1, 1, MAXT, MAXT}, NULL, 0};
    return n;
}

static void test_transformers_layout(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/hf.safetensors", dir);
    struct entry v[L * 12 + 8];
    int n = hf_entries(v);
    struct gpt_stage *s = stage(0, L);
    herr e = {0};
    struct gpt_config got = {0};
    int rc = write_st(path, v, n, NULL, 0, 0);
    int crc = model_import_config(path, &got, &e);
    CHECK_MSG("import: a file that does not say its heads, of 16 channels (not 64 a head): its "
              "shape refused, asking for the heads",
              rc == 0 && crc != 0 && strstr(e.msg, "n_head") && strstr(e.msg, "--heads"),
              "rc %d: %s", crc, e.msg);
    rc = rc || !s || model_import_stage(path, s, &e);
    int exact = rc == 0, checked = 0;
    const struct gpt_tensor *t;
    int nt = s ? gpt_stage_tensors(s, &t) : 0;
    for (int i = 0; exact && i < nt; i++) {
        const float *p = gpt_stage_params(s) + t[i].offset;
        size_t rows = t[i].rows, cols = t[i].cols;
        for (size_t r = 0; exact && r < rows; r++)
            for (size_t c = 0; exact && c < cols; c++, checked++) {
                int padded = !strcmp(t[i].name, "wte") && r >= V;
                float want = padded ? 0.0f : value(t[i].name, r, c);
                exact = p[r * cols + c] == want;
                if (!exact)
                    printf("# %s[%zu][%zu] = %g, want %g\n", t[i].name, r, c, p[r * cols + c], want);
            }
    }
    CHECK_MSG("import: transformers' layout (\"transformer.\", BF16 and F16, Conv1D [in, out], the "
              "tied head and masks passed over, any order): every value exact, padded rows zero",
              exact && checked == (int)gpt_stage_num_params(s), "rc %d (%s), %d of %zu checked",
              rc, e.msg, checked, s ? gpt_stage_num_params(s) : 0);
    /* heads said: the shape is read */
    rc = write_st(path, v, n, "2", 0, 0) || model_import_config(path, &got, &e);
    CHECK_MSG("import: n_head said: the shape of 3 layers, vocab 61, 12 positions, 2 heads",
              rc == 0 && got.layers == L && got.heads == 2 && got.vocab == V && got.max_seq == MAXT,
              "rc %d: %s", rc, e.msg);
    gpt_stage_free(s);
}

/* A Hugging Face model directory: model.safetensors (no heads said) and config.json. */
static void test_hf_directory(void)
{
    char hf[128], path[160], cfg[160];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(path, sizeof path, "%s/model.safetensors", hf);
    snprintf(cfg, sizeof cfg, "%s/config.json", hf);
    struct entry v[L * 12 + 8];
    int n = hf_entries(v);
    struct gpt_config got = {0};
    herr e = {0};
    int rc = mkdir(hf, 0755) || write_st(path, v, n, NULL, 0, 0) ||
             test_write_file(cfg, "{\"model_type\": \"gpt2\", \"n_head\": 2, \"n_layer\": 3, "
                                  "\"n_embd\": 16, \"n_positions\": 12, \"vocab_size\": 61}") ||
             model_import_config(hf, &got, &e);
    CHECK_MSG("import: a model directory: model.safetensors read, its heads from config.json",
              rc == 0 && got.layers == L && got.heads == 2 && got.channels == C && got.vocab == V,
              "rc %d: %s", rc, e.msg);
    struct gpt_stage *s = stage(0, L);
    rc = !s || model_import_stage(hf, s, &e);
    CHECK_MSG("import: a stage loads from the directory", rc == 0 &&
              gpt_stage_params(s)[tensor(s, "ln_f.bias")->offset + 3] == value("ln_f.bias", 3, 0),
              "rc %d: %s", rc, e.msg);
    test_write_file(cfg, "{\"model_type\": \"gpt2\", \"n_head\": 2, \"n_layer\": 5}");
    rc = model_import_stage(hf, s, &e);
    CHECK_MSG("import: a config.json whose n_layer is not the tensors' refused, naming both",
              rc != 0 && strstr(e.msg, "config.json: n_layer is 5 but") &&
                  strstr(e.msg, "model.safetensors holds 3"), "rc %d: %s", rc, e.msg);
    test_write_file(cfg, "{\"model_type\": \"llama\", \"n_head\": 2}");
    rc = model_import_config(path, &got, &e);
    CHECK_MSG("import: a config.json of another model type refused",
              rc != 0 && strstr(e.msg, "model_type is not \"gpt2\""), "rc %d: %s", rc, e.msg);
    /* holmes-node export --hf-dir's config.json says what the model is */
    rc = model_export_hf_config(cfg, &MODEL, &e);
    FILE *f = fopen(cfg, "rb");
    char buf[4096] = "";
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "architectures"), 0);
    CHECK_MSG("export: config.json of GPT2LMHeadModel with the model's sizes, gelu_new, 1e-5",
              rc == 0 && arch && !strcmp(arch->valuestring, "GPT2LMHeadModel") &&
                  cJSON_GetObjectItem(j, "n_layer")->valueint == L &&
                  cJSON_GetObjectItem(j, "n_head")->valueint == NH &&
                  cJSON_GetObjectItem(j, "n_embd")->valueint == C &&
                  cJSON_GetObjectItem(j, "n_positions")->valueint == MAXT &&
                  cJSON_GetObjectItem(j, "vocab_size")->valueint == V &&
                  !strcmp(cJSON_GetObjectItem(j, "activation_function")->valuestring, "gelu_new") &&
                  cJSON_GetObjectItem(j, "layer_norm_epsilon")->valuedouble == 1e-5,
              "rc %d (%s): %s", rc, e.msg, buf);
    cJSON_Delete(j);
    rc = model_import_config(hf, &got, &e);
    CHECK_MSG("import: the exported config.json read back (heads 2)", rc == 0 && got.heads == NH,
              "rc %d: %s", rc, e.msg);
    gpt_stage_free(s);
}

/* One file with entry i changed by `change`, imported into the whole model: the error. */
static const char *refused(struct entry *v, int n, const char *n_head, uint64_t extra, size_t cut)
{
    static herr e;
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    memset(&e, 0, sizeof e);
    struct gpt_stage *s = stage(0, L);
    int rc = write_st(path, v, n, n_head, extra, cut);
    if (rc == 0 && s)
        rc = model_import_stage(path, s, &e);
    gpt_stage_free(s);
    return rc != 0 ? e.msg : "(loaded)";
}

static void test_refusals(void)
{
    struct entry v[L * 12 + 8];
    int n = hf_entries(v);
    const char *m;
    struct entry keep = v[0];

    /* a directory without model.safetensors: said so (until 2026-11-29 "llm.c checkpoint
     * DIR/model.safetensors: cannot open") */
    char empty[128];
    snprintf(empty, sizeof empty, "%s/no-model", dir);
    mkdir(empty, 0755);
    struct gpt_config ec;
    herr ee = {0};
    CHECK_MSG("import: a directory without model.safetensors, named as a model directory",
              model_import_config(empty, &ec, &ee) != 0 &&
                  strstr(ee.msg, "model directory ") && strstr(ee.msg, "no readable model.safetensors"),
              "%s", ee.msg);
    rmdir(empty);

    snprintf(v[0].name, sizeof v[0].name, "model.layers.0.self_attn.q_proj.weight");
    m = refused(v, n, NULL, 0, 0);
    CHECK_MSG("import: a tensor GPT-2 does not have: not a GPT-2 model, naming it",
              strstr(m, "\"model.layers.0.self_attn.q_proj.weight\" is not one of GPT-2's") &&
                  strstr(m, "not a GPT-2 model"), "%s", m);
    v[0] = keep;

    m = refused(v + 1, n - 1, NULL, 0, 0); /* v[0] is h2.mlp.proj.bias */
    CHECK_MSG("import: a missing tensor named", strstr(m, "no tensor for h2.mlp.proj.bias"), "%s", m);

    int qkv = 12 - 1 - 2; /* h2's attn.c_attn.weight */
    v[qkv].shape[0] = 3 * C;
    v[qkv].shape[1] = C;
    m = refused(v, n, NULL, 0, 0);
    CHECK_MSG("import: a Conv1D weight not stored [in, out]: its shape and the wanted one named",
              strstr(m, "transformer.h.2.attn.c_attn.weight is [48, 16] but the model's "
                        "h2.attn.qkv.weight wants [16, 48]"), "%s", m);
    v[qkv].shape[0] = C;
    v[qkv].shape[1] = 3 * C;

    v[qkv].dtype = "I64";
    m = refused(v, n, NULL, 0, 0);
    CHECK_MSG("import: an integer dtype refused, naming tensor and dtype",
              strstr(m, "transformer.h.2.attn.c_attn.weight: dtype I64"), "%s", m);
    v[qkv].dtype = "BF16";

    /* the data's last bytes: the mask's (576) and the tied head's (1,952), passed over, then 10
     * of ln_f.weight's */
    m = refused(v, n, NULL, 0, 576 + 1952 + 10);
    CHECK_MSG("import: a file cut short: the last tensor's data_offsets outside its data",
              strstr(m, "data_offsets outside"), "%s", m);
    m = refused(v, n, NULL, 1u << 30, 0);
    CHECK_MSG("import: a header length past the file refused", strstr(m, "a header of"), "%s", m);
    m = refused(v, n, "4", 0, 0);
    CHECK_MSG("import: n_head 4 where the model has 2 heads: named",
              strstr(m, "heads is 4 but the model has 2"), "%s", m);
    m = refused(v + 12, n - 12, NULL, 0, 0); /* without layer 2 */
    CHECK_MSG("import: 2 layers where the model has 3: named", strstr(m, "layers is 2 but the model has 3"),
              "%s", m);
}

int main(void)
{
    static void (*const tests[])(void) = {test_round_trip, test_transformers_layout,
                                          test_hf_directory, test_refusals, NULL};
    test_in_tmpdir(dir, sizeof dir, "model-import", tests);
    TEST_MAIN_END();
}
