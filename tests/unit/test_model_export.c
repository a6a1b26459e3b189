/* A checkpoint set out as one model (model_export.h): an llm.c file imported into a pipeline of
 * three stages and checkpointed exports as the same bytes (import, export, import: bit for bit);
 * the safetensors file holds GPT-2's names and shapes, its Conv1D weights transposed, wte
 * without the padded rows, every value the checkpoint's; a set missing a layer is refused. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "ckpt_layout.h"
#include "model_export.h"
#include "fs_testutil.h"
#include "test.h"

static char dir[64];
enum { L = 4, C = 16, NH = 2, V = 61, VP = 128, MAXT = 16 };

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* llm.c's file: header, then each group for every layer; values distinct per (group, index),
 * the padded vocabulary rows included. */
static void write_llmc(const char *path)
{
    size_t sizes[16] = {VP * C, MAXT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                        L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    int32_t h[256] = {LLMC_MAGIC, 3, MAXT, V, L, NH, C, VP};
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    for (int g = 0; g < 16; g++)
        for (size_t i = 0; i < sizes[g]; i++) {
            float x = (float)g + (float)i * 1e-4f + 1e-7f * (float)(i % 7);
            fwrite(&x, 4, 1, f);
        }
    fclose(f);
}

/* Imports path into stages [b[s], b[s+1]) and checkpoints them at `step` (with moments). */
static int import_as_set(const char *path, const int *b, int ns, int64_t step, herr *e)
{
    struct gpt_config c;
    if (llmc_read_config(path, &c, e) != 0)
        return -1;
    for (int s = 0; s < ns; s++) {
        struct gpt_stage *st;
        if (gpt_stage_create(&st, &c, b[s], b[s + 1], 1, 4, 1, e) != 0)
            return -1;
        int rc = llmc_load_stage(path, st, e);
        size_t n = gpt_stage_num_params(st);
        float *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
        for (size_t i = 0; i < n; i++)
            m[i] = 0.5f, v[i] = 0.25f;
        struct ckpt_meta meta = {.c = c, .first = b[s], .last = b[s + 1], .step = step,
                                 .nparams = n, .has_moments = 1};
        if (rc == 0)
            rc = ckpt_write(dir, &meta, gpt_stage_params(st), m, v, 3, NULL, 0, e);
        free(m);
        free(v);
        gpt_stage_free(st);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* The value of element [r][k] of Holmes tensor `name` in the whole model's params. */
static float holmes_at(const float *p, const char *name, size_t r, size_t k)
{
    struct gpt_config c = {L, C, NH, V, VP, MAXT};
    struct ckpt_tensor *t;
    int nt;
    size_t n;
    herr e;
    float x = -1e30f;
    if (ckpt_stage_layout(&c, 0, L, &t, &nt, &n, &e) != 0)
        return x;
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            x = p[t[i].offset + r * t[i].cols + k];
    free(t);
    return x;
}

static void test_llmc_round_trip(const char *orig, float **params)
{
    herr e = {0};
    const int split[] = {0, 1, 3, 4};
    CHECK("import.into_three_stages", import_as_set(orig, split, 3, 5, &e) == 0);
    struct gpt_config c;
    int64_t used = -1;
    CHECK("read.newest_covering_set", model_export_read(dir, -1, &c, params, &used, &e) == 0 &&
          used == 5 && c.layers == L && c.padded_vocab == VP && c.max_seq == MAXT);
    if (!*params)
        return;
    char out[128];
    snprintf(out, sizeof out, "%s/out.bin", dir);
    CHECK("llmc.written", model_export_llmc(out, &c, *params, &e) == 0);
    size_t na, nb;
    unsigned char *a = slurp(orig, &na), *b = slurp(out, &nb);
    CHECK("llmc.same_bytes_as_imported", a && b && na == nb && !memcmp(a, b, na));
    free(a);
    free(b);
    /* import the export again: bit for bit the checkpoint's parameters */
    struct gpt_stage *s;
    if (gpt_stage_create(&s, &c, 0, L, 1, 4, 1, &e) == 0) {
        CHECK("llmc.reimported_bit_for_bit", llmc_load_stage(out, s, &e) == 0 &&
              !memcmp(gpt_stage_params(s), *params, gpt_stage_num_params(s) * sizeof(float)));
        gpt_stage_free(s);
    }
    char tmp[200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    CHECK("llmc.written_atomically_no_temp_left", access(out, F_OK) == 0 && access(tmp, F_OK) != 0);
}

static void test_safetensors(const float *p)
{
    herr e = {0};
    struct gpt_config c = {L, C, NH, V, VP, MAXT};
    char out[128];
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    CHECK("st.written", model_export_safetensors(out, &c, p, &e) == 0);
    size_t n;
    unsigned char *b = slurp(out, &n);
    if (!b || n < 8) {
        TEST_FAIL("st.read", "cannot read %s", out);
        free(b);
        return;
    }
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)b[i] << (8 * i);
    CHECK("st.header_aligned", hl % 8 == 0 && 8 + hl <= n);
    char *text = strndup((const char *)b + 8, (size_t)hl);
    cJSON *h = cJSON_Parse(text);
    free(text);
    CHECK("st.header_json", h != NULL);
    if (!h) {
        free(b);
        return;
    }
    const unsigned char *data = b + 8 + hl;
    CHECK_INT("st.tensors", cJSON_GetArraySize(h), 1 + 2 + 12 * L + 2);
    size_t end = 0;
    int ok = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        if (!strcmp(it->string, "__metadata__"))
            continue;
        const cJSON *off = cJSON_GetObjectItem(it, "data_offsets");
        size_t lo = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        ok &= lo == end && !strcmp(cJSON_GetObjectItem(it, "dtype")->valuestring, "F32");
        end = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    }
    CHECK("st.contiguous_f32", ok && 8 + hl + end == n);
    /* values: a transposed Conv1D weight, a bias, the unpadded embedding */
    struct { const char *hf, *holmes; int rows, cols, transposed; } want[] = {
        {"h.1.attn.c_attn.weight", "h1.attn.qkv.weight", C, 3 * C, 1},
        {"h.3.mlp.c_proj.weight", "h3.mlp.proj.weight", 4 * C, C, 1},
        {"h.2.mlp.c_fc.bias", "h2.mlp.fc.bias", 4 * C, 0, 0},
        {"wte.weight", "wte", V, C, 0},
        {"ln_f.bias", "ln_f.bias", C, 0, 0}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const cJSON *t = cJSON_GetObjectItem(h, want[k].hf);
        const cJSON *shape = cJSON_GetObjectItem(t, "shape");
        int shape_ok = t && cJSON_GetArraySize(shape) == (want[k].cols ? 2 : 1) &&
                       cJSON_GetArrayItem(shape, 0)->valueint == want[k].rows &&
                       (!want[k].cols || cJSON_GetArrayItem(shape, 1)->valueint == want[k].cols);
        int vals = shape_ok;
        if (shape_ok) {
            const float *x = (const float *)(const void *)(data + (size_t)cJSON_GetArrayItem(
                cJSON_GetObjectItem(t, "data_offsets"), 0)->valuedouble);
            int cols = want[k].cols ? want[k].cols : 1;
            for (int r = 0; r < want[k].rows && vals; r++)
                for (int q = 0; q < cols && vals; q++) {
                    float w = want[k].transposed ? holmes_at(p, want[k].holmes, (size_t)q, (size_t)r)
                              : want[k].cols ? holmes_at(p, want[k].holmes, (size_t)r, (size_t)q)
                                             : holmes_at(p, want[k].holmes, 0, (size_t)r);
                    float g;
                    memcpy(&g, x + (size_t)r * (size_t)cols + (size_t)q, sizeof g);
                    vals = memcmp(&g, &w, sizeof g) == 0;
                }
        }
        char name[96];
        snprintf(name, sizeof name, "st.%s", want[k].hf);
        CHECK(name, vals);
    }
    cJSON_Delete(h);
    free(b);
}

static void test_refused(void)
{
    herr e = {0};
    struct gpt_config c;
    float *p = NULL;
    int64_t used;
    char empty[128];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    mkdir(empty, 0755);
    CHECK("refused.no_set", model_export_read(empty, -1, &c, &p, &used, &e) != 0 &&
          strstr(e.msg, "holds no checkpoint"));
    /* files of one step that do not make a model: another message than an empty directory's */
    char stray[4096];
    snprintf(stray, sizeof stray, "%s/stage-1-3-step-000000009.ckpt", empty);
    FILE *sf = fopen(stray, "w");
    if (sf)
        fclose(sf);
    CHECK("refused.no_whole_set", model_export_read(empty, -1, &c, &p, &used, &e) != 0 &&
          strstr(e.msg, "no checkpoint set covers a whole model"));
    unlink(stray);
    char path[4096];
    ckpt_path(dir, 1, 3, 5, path, sizeof path, &e);
    unlink(path);
    CHECK("refused.missing_layer_named", model_export_read(dir, 5, &c, &p, &used, &e) != 0 &&
          strstr(e.msg, "none starts at layer 1"));
    free(p);
    p = NULL;
    /* a header (its CRC right) whose shape is no model: refused naming the file, before the
     * shape lays anything out (fuzz_train_files) */
    char zero[128];
    snprintf(zero, sizeof zero, "%s/zero", dir);
    mkdir(zero, 0755);
    float four[4] = {1, 2, 3, 4};
    struct ckpt_meta m = {.c = {0, C, NH, V, VP, MAXT}, .first = 0, .last = 1, .step = 7,
                          .nparams = 4};
    CHECK("refused.bad_shape", ckpt_write(zero, &m, four, NULL, NULL, 1, NULL, 0, &e) == 0 &&
          model_export_read(zero, 7, &c, &p, &used, &e) != 0 &&
          strstr(e.msg, "stage-0-1-step-000000007.ckpt: bad shape: model layers must be positive"));
    free(p);
}

/* The llm.c file written, read back and out as safetensors; what is refused. */
static void run_all(void)
{
    char orig[128];
    snprintf(orig, sizeof orig, "%s/orig.bin", dir);
    write_llmc(orig);
    float *params = NULL;
    test_llmc_round_trip(orig, &params);
    if (params)
        test_safetensors(params);
    free(params);
    test_refused();
}

int main(void)
{
    if (test_in_tmpdir(dir, sizeof dir, "export", (void (*const[])(void)){run_all, NULL}))
        return 1;
    TEST_MAIN_END();
}
