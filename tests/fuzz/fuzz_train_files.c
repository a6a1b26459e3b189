/* libFuzzer target: the files a worker reads from disk - its checkpoints (the resume path, which
 * reads any plan's stage files: ckpt_layout_read; `holmes-operator export`'s
 * model_export_read), an llm.c GPT-2 checkpoint (spec.training.initFrom) and the training data
 * (llm.c token shards and text). A disk, a copy or a user can hand over any bytes; each must be
 * refused naming the file and the rule, never crash or read outside the file. The first byte
 * picks the kind, the second carries flags, the rest is the file:
 *   0: checkpoint files of the tiny model below, step 1. Flag 1: the header's CRC made right,
 *      2: the payload's CRC made right (so the fuzzer gets past the CRCs to the fields), 4: two
 *      files (stage [0, 1) and [1, 2); bytes 2-3 the first's length), else one ([0, 2)). Read as
 *      a resume reads them (every stage of the model), and as export reads them; what is read
 *      must be the file's floats.
 *   1: an llm.c checkpoint: llmc_read_config, and for a small shape the import into a stage of
 *      its own shape (whole, and its second half); the embedding read must be the file's.
 *   2: a data file (flag 1: a token shard, data.bin, else text, data.txt; bytes 2-5: B, T, data
 *      ranks, vocabulary): dataloader_open, then micro-batches at several positions; every
 *      token below the vocabulary, and each target the next input.
 *   3: checkpoint file names (one a line, empty files): the listing, steps and the set's cover.
 *   4: llm.c's GPT-2 tokenizer file (holmes-node sample --tokenizer): tokenizer_open; the
 *      pieces read must lay out the file again (each a length and its bytes after the header),
 *      the end-of-text token inside the vocabulary. Input beginning with "{" is transformers'
 *      vocab.json: every token has bytes.
 *   5: text for GPT-2's BPE encoder (holmes-node tokenize, bpe.h) over a small fixed vocabulary:
 *      text that is UTF-8 (by an independent check here) must encode, into tokens of the
 *      vocabulary but not end-of-text whose pieces lay out the text again, and the same tokens
 *      when cut where bpe_safe_cut says; text that is not must be refused naming the first bad
 *      byte.
 *   6: a safetensors file (initFrom, sample --init-from: model_import.h): its shape read, and a
 *      model of a small shape imported whole and as its second half; a refusal names the file.
 *   7: a multiple-choice file (holmes-node eval --choices: choice_eval.h), llm.c's eval file or
 *      HellaSwag's JSON lines (flag 1: encoded with the BPE vocabulary of kind 5, else bytes):
 *      every example read must keep the rules (2 to 16 completions, a label among them, a
 *      context and completions of one token or more), and each is scored on a model of 288
 *      tokens (at most 8
 *      positions: long contexts lose their first tokens): finite, non-negative losses, or a
 *      refusal naming the example.
 * Seeds: tests/fuzz/seeds/train_files (fuzz_seeds.c: files ckpt_write and model_export_llmc
 * wrote). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "bpe.h"
#include "choice_eval.h"
#include "ckpt_layout.h"
#include "dataloader.h"
#include "engine.h"
#include "fuzz_check.h"
#include "fuzz_files.h"
#include "model_export.h"
#include "model_import.h"
#include "tokenizer.h"

/* The tiny model the checkpoint seeds hold (fuzz_seeds.c writes them with the same). */
static const struct gpt_config TINY = {.layers = 2, .channels = 8, .heads = 2, .vocab = 16,
                                       .padded_vocab = 16, .max_seq = 8};
/* the checkpoint directory, as a job names it (relative, so that messages read as a user's) */
#define CKPT_DIR "checkpoints"
#define LLMC_MAX_FLOATS (1u << 18) /* an llm.c model above this is only checked, not imported */

/* into the private directory (fuzz_files.h), its files and checkpoints/'s removed */
static void fresh_workdir(void)
{
    fuzz_enter_workdir("train");
    fuzz_empty_dir(".", 0);
    fuzz_empty_dir(CKPT_DIR, 0);
    if (mkdir(CKPT_DIR, 0755) != 0 && errno != EEXIST)
        abort();
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* a copy of a checkpoint file with the CRCs the flags ask made right */
static uint8_t *repaired(const uint8_t *data, size_t size, int flags)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b)
        abort();
    memcpy(b, data, size);
    if (size >= 256 && (flags & 2))
        put32(b + 108, (uint32_t)crc32(crc32(0, Z_NULL, 0), b + 256, (uInt)(size - 256)));
    if (size >= 256 && (flags & 1))
        put32(b + 252, (uint32_t)crc32(crc32(0, Z_NULL, 0), b, 252));
    return b;
}

/* Every stage of TINY read from the step-1 set as a resume reads it. A file holding exactly the
 * stage, read whole, gives its payload. */
static void read_as_resume(const uint8_t *whole, size_t whole_size)
{
    herr e = {0};
    int64_t *steps = NULL;
    int ns = 0;
    if (ckpt_set_steps(CKPT_DIR, &steps, &ns, &e) != 0)
        fuzz_check_rejection("ckpt_set_steps", &e);
    free(steps);
    struct ckpt_file *cover = NULL;
    int nc = 0;
    if (ckpt_set_cover(CKPT_DIR, 1, TINY.layers, &cover, &nc, &e) != 0)
        fuzz_check_rejection("ckpt_set_cover", &e);
    free(cover);
    static const int stages[3][2] = {{0, 2}, {0, 1}, {1, 2}};
    for (int s = 0; s < 3; s++) {
        struct ckpt_tensor *t = NULL;
        int nt = 0;
        size_t n = 0;
        struct gpt_config c = TINY;
        if (ckpt_stage_layout(&c, stages[s][0], stages[s][1], &t, &nt, &n, &e) != 0)
            abort();
        free(t);
        float *p = malloc(n * sizeof *p), *m = malloc(n * sizeof *m), *v = malloc(n * sizeof *v);
        if (!p || !m || !v)
            abort();
        struct ckpt_meta meta;
        if (ckpt_layout_read(CKPT_DIR, 1, &c, stages[s][0], stages[s][1], p, m, v, n, &meta,
                             &e) != 0) {
            fuzz_check_rejection("ckpt_layout_read", &e);
        } else if (s == 0 && whole) {
            if (whole_size < 256 + n * sizeof *p || memcmp(p, whole + 256, n * sizeof *p) != 0) {
                fprintf(stderr, "a resume read other parameters than the file holds\n");
                abort();
            }
        }
        free(p);
        free(m);
        free(v);
    }
    struct gpt_config c;
    float *params = NULL;
    int64_t used = 0;
    if (model_export_read(CKPT_DIR, -1, &c, &params, &used, &e) != 0)
        fuzz_check_rejection("model_export_read", &e);
    free(params);
}

static void fuzz_checkpoint(int flags, const uint8_t *data, size_t size)
{
    if (flags & 4) {
        if (size < 2)
            return;
        size_t first = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 1);
        uint8_t *a = repaired(data + 2, first, flags), *b = repaired(data + 2 + first,
                                                                     size - 2 - first, flags);
        int rc = fuzz_write_file(CKPT_DIR "/stage-0-1-step-000000001.ckpt", a, first) |
                 fuzz_write_file(CKPT_DIR "/stage-1-2-step-000000001.ckpt", b, size - 2 - first);
        free(a);
        free(b);
        if (rc != 0)
            abort();
        read_as_resume(NULL, 0);
        return;
    }
    const char *name = CKPT_DIR "/stage-0-2-step-000000001.ckpt";
    uint8_t *f = repaired(data, size, flags);
    if (fuzz_write_file(name, f, size) != 0)
        abort();
    herr e = {0};
    struct ckpt_meta meta;
    if (ckpt_read_meta(name, &meta, &e) != 0)
        fuzz_check_rejection("ckpt_read_meta", &e);
    else if (ckpt_check_shape(name, &meta, &TINY, 0, TINY.layers, &e) != 0)
        fuzz_check_rejection("ckpt_check_shape", &e);
    read_as_resume(f, size);
    free(f);
}

/* The model of shape c imported from file `name` by `load` (what: its name in rejections)
 * whole and as its second half; after an import that succeeded, check (NULL: none) sees it. */
static void import_halves(const char *name, const struct gpt_config *c,
                          int (*load)(const char *, struct gpt_stage *, herr *), const char *what,
                          void (*check)(struct gpt_stage *s, int first))
{
    herr e = {0};
    for (int half = 0; half < 2; half++) {
        int first = half ? c->layers / 2 : 0;
        if (half && first == 0)
            break;
        struct gpt_stage *s = NULL;
        if (gpt_stage_create(&s, c, first, c->layers, 1, 1, 1, &e) != 0) {
            fuzz_check_rejection("gpt_stage_create", &e);
            return;
        }
        if (load(name, s, &e) != 0)
            fuzz_check_rejection(what, &e);
        else if (check)
            check(s, first);
        gpt_stage_free(s);
    }
}

static const uint8_t *llmc_data; /* the file fuzz_llmc imports */

/* wte is a whole stage's first tensor and the llm.c file's first group */
static void llmc_check_wte(struct gpt_stage *s, int first)
{
    const struct gpt_config *c = gpt_stage_config(s);
    size_t n = (size_t)c->padded_vocab * (size_t)c->channels * sizeof(float);
    if (first == 0 && memcmp(gpt_stage_params(s), llmc_data + 1024, n) != 0) {
        fprintf(stderr, "the llm.c import read another embedding than the file's\n");
        abort();
    }
}

static void fuzz_llmc(const uint8_t *data, size_t size)
{
    const char *name = "gpt2.bin";
    if (fuzz_write_file(name, data, size) != 0)
        abort();
    herr e = {0};
    struct gpt_config c;
    if (llmc_read_config(name, &c, &e) != 0) {
        fuzz_check_rejection("llmc_read_config", &e);
        return;
    }
    /* the file is the whole model (llmc_read_config checked its size): small ones imported */
    if (size - 1024 > (size_t)LLMC_MAX_FLOATS * 4)
        return;
    llmc_data = data;
    import_halves(name, &c, llmc_load_stage, "llmc_load_stage", llmc_check_wte);
}

static void fuzz_data(int flags, const uint8_t *data, size_t size)
{
    if (size < 4)
        return;
    static const int vocabs[4] = {16, 256, 50257, 65536};
    struct dataloader_config c = {
        .pattern = (flags & 1) ? "data.bin" : "data.txt", .B = 1 + data[0] % 4,
        .T = 1 + data[1] % 64, .world = 1 + data[2] % 4, .seed = data[3],
        .vocab = vocabs[(data[3] >> 4) % 4], .global_epochs = (flags >> 1) & 1};
    c.rank = (data[2] >> 4) % c.world;
    if (fuzz_write_file(c.pattern, data + 4, size - 4) != 0)
        abort();
    struct dataloader *d = NULL;
    herr e = {0};
    if (dataloader_open(&d, &c, &e) != 0) {
        fuzz_check_rejection("dataloader_open", &e);
        return;
    }
    size_t bt = (size_t)c.B * (size_t)c.T;
    int *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    if (!in || !tg)
        abort();
    /* positions come from checkpoints (any 64-bit value a header holds), the first one read
     * as a resume reads it, before any other */
    uint64_t at[5] = {UINT64_MAX, 0, 1, dataloader_windows(d), UINT64_MAX / 8};
    for (int k = 0; k < 5; k++) {
        if (dataloader_batch_at(d, at[k], 0, 1, in, tg, &e) != 0)
            abort();
        for (size_t i = 0; i < bt; i++) {
            if (in[i] < 0 || in[i] >= c.vocab || tg[i] < 0 || tg[i] >= c.vocab ||
                (i % (size_t)c.T + 1 < (size_t)c.T && tg[i] != in[i + 1])) {
                fprintf(stderr, "micro-batch %llu: position %zu reads %d -> %d\n",
                        (unsigned long long)at[k], i, in[i], tg[i]);
                abort();
            }
        }
    }
    free(in);
    free(tg);
    dataloader_free(d);
}

static void fuzz_names(const uint8_t *data, size_t size)
{
    char name[256 + sizeof CKPT_DIR];
    size_t len = sizeof CKPT_DIR; /* "checkpoints/" then the name */
    memcpy(name, CKPT_DIR "/", len);
    int files = 0;
    for (size_t i = 0; i <= size && files < 16; i++) {
        if (i == size || data[i] == '\n') {
            name[len] = '\0';
            const char *base = name + sizeof CKPT_DIR;
            if (*base && strcmp(base, ".") && strcmp(base, "..") &&
                fuzz_write_file(name, NULL, 0) == 0)
                files++;
            len = sizeof CKPT_DIR;
        } else if (len + 1 < sizeof name) {
            name[len++] = data[i] == '/' || data[i] == 0 ? '_' : (char)data[i];
        }
    }
    herr e = {0};
    struct ckpt_file *list = NULL;
    int n = 0;
    if (ckpt_list(CKPT_DIR, &list, &n, &e) != 0)
        fuzz_check_rejection("ckpt_list", &e);
    for (int i = 1; i < n; i++)
        if (list[i].step < list[i - 1].step)
            abort(); /* sorted by step */
    free(list);
    int64_t *steps = NULL;
    if (ckpt_steps(CKPT_DIR, 0, TINY.layers, &steps, &n, &e) != 0)
        fuzz_check_rejection("ckpt_steps", &e);
    for (int i = 1; i < n; i++)
        if (steps[i] <= steps[i - 1])
            abort(); /* ascending, each once */
    free(steps);
    char path[512];
    if (ckpt_latest(CKPT_DIR, 0, TINY.layers, path, sizeof path, &e) < 0)
        fuzz_check_rejection("ckpt_latest", &e);
    read_as_resume(NULL, 0);
}

static void fuzz_tokenizer(const uint8_t *data, size_t size)
{
    const char *name = "gpt2_tokenizer.bin";
    if (fuzz_write_file(name, data, size) != 0)
        abort();
    herr e = {0};
    struct tokenizer *t = NULL;
    if (tokenizer_open(&t, name, &e) != 0) {
        fuzz_check_rejection("tokenizer_open", &e);
        return;
    }
    size_t lead = 0, at = 1024, len;
    while (lead < size && (data[lead] == ' ' || data[lead] == '\t' || data[lead] == '\r' ||
                           data[lead] == '\n'))
        lead++;
    int json = lead < size && data[lead] == '{'; /* transformers' vocab.json: pieces of any order */
    for (int i = 0; json && i < tokenizer_vocab(t); i++)
        if (!tokenizer_piece(t, i, &len) || len < 1) {
            fprintf(stderr, "vocab.json: token %d of %d has no bytes\n", i, tokenizer_vocab(t));
            abort();
        }
    for (int i = 0; !json && i < tokenizer_vocab(t); i++) {
        const char *p = tokenizer_piece(t, i, &len);
        if (!p || len < 1 || len > 255 || at + 1 + len > size || data[at] != len ||
            memcmp(data + at + 1, p, len) != 0) {
            fprintf(stderr, "token %d of %d is not the file's piece\n", i, tokenizer_vocab(t));
            abort();
        }
        at += 1 + len;
    }
    if (tokenizer_piece(t, tokenizer_vocab(t), &len) || tokenizer_piece(t, -1, &len) ||
        tokenizer_eot(t) >= tokenizer_vocab(t) || tokenizer_eot(t) < -1) {
        fprintf(stderr, "a token outside the vocabulary, or the end-of-text token, is wrong\n");
        abort();
    }
    tokenizer_free(t);
}

/* The offset of the first byte that does not begin a well-formed UTF-8 character (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or n when the text is UTF-8. */
static size_t utf8_bad_at(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (len == 0 || i + len > n)
            return i;
        uint8_t lo = 0x80, hi = 0xbf; /* the second byte's range */
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
        else if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
        if (len > 1 && (s[i + 1] < lo || s[i + 1] > hi))
            return i;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return i;
        i += len;
    }
    return n;
}

/* A byte-level vocabulary: the 256 bytes, some merges (some reachable only whole), end-of-text. */
static struct tokenizer *fuzz_vocab(void)
{
    static const char *const merges[] = {" t", "th", "he", " the", "in", "ing", "  ", "    ",
                                         "\n\n", "\xc3\xa9", "ab", "bc", "abc", "xyz", "'s", "12",
                                         " 1", "\xe6\x97\xa5", "!!", "<|", "|>"};
    uint8_t buf[1024 + 256 * 2 + 128];
    uint32_t h[256] = {20240328u, 2, 256 + 21 + 1, 256 + 21};
    memcpy(buf, h, sizeof h);
    size_t n = sizeof h;
    for (int b = 0; b < 256; b++) {
        buf[n++] = 1;
        buf[n++] = (uint8_t)b;
    }
    for (int i = 0; i <= 21; i++) {
        const char *p = i < 21 ? merges[i] : "<|endoftext|>";
        buf[n++] = (uint8_t)strlen(p);
        memcpy(buf + n, p, strlen(p));
        n += strlen(p);
    }
    struct tokenizer *t = NULL;
    herr e = {0};
    if (fuzz_write_file("vocab.bin", buf, n) != 0 || tokenizer_open(&t, "vocab.bin", &e) != 0)
        abort();
    return t;
}

static void fuzz_bpe(const uint8_t *data, size_t size)
{
    struct tokenizer *t = fuzz_vocab();
    struct bpe *b = NULL;
    herr e = {0};
    if (bpe_create(&b, t, &e) != 0)
        abort();
    const char *text = (const char *)data;
    struct bpe_tokens whole = {0}, parts = {0};
    size_t bad = utf8_bad_at(data, size);
    int rc = bpe_encode(b, text, size, 0, &whole, &e);
    if (rc != 0) {
        char want[64];
        snprintf(want, sizeof want, "not UTF-8 at byte %zu:", bad);
        herr_wrap(&e, "text.txt");
        if (bad == size || !strstr(e.msg, want)) {
            fprintf(stderr, "refused (%s), the first bad byte at %zu of %zu\n", e.msg, bad, size);
            abort();
        }
        fuzz_check_rejection("bpe_encode", &e);
    } else {
        if (bad != size) {
            fprintf(stderr, "encoded, but byte %zu of %zu is not UTF-8\n", bad, size);
            abort();
        }
        size_t at = 0, len;
        for (size_t i = 0; i < whole.n; i++) {
            const char *p = tokenizer_piece(t, whole.v[i], &len);
            if (!p || whole.v[i] == tokenizer_eot(t) || at + len > size ||
                memcmp(text + at, p, len) != 0) {
                fprintf(stderr, "token %zu (%d) is not the text's bytes at %zu\n", i, whole.v[i], at);
                abort();
            }
            at += len;
        }
        if (at != size) {
            fprintf(stderr, "the tokens cover %zu of the text's %zu bytes\n", at, size);
            abort();
        }
        for (size_t off = 0; off < size;) {
            size_t cut = bpe_safe_cut(text + off, size - off), take = cut ? cut : size - off;
            if (bpe_encode(b, text + off, take, off, &parts, &e) != 0)
                abort();
            off += take;
        }
        if (parts.n != whole.n ||
            (whole.n && memcmp(parts.v, whole.v, whole.n * sizeof *whole.v) != 0)) {
            fprintf(stderr, "cut where bpe_safe_cut says: %zu tokens, whole: %zu\n", parts.n,
                    whole.n);
            abort();
        }
    }
    free(whole.v);
    free(parts.v);
    bpe_free(b);
    tokenizer_free(t);
}

static void fuzz_safetensors(const uint8_t *data, size_t size)
{
    const char *name = "model.safetensors";
    if (fuzz_write_file(name, data, size) != 0)
        abort();
    herr e = {0};
    struct gpt_config c;
    if (model_import_config(name, &c, &e) != 0) {
        fuzz_check_rejection("model_import_config", &e);
        return;
    }
    if (ckpt_model_floats(&c) > LLMC_MAX_FLOATS)
        return; /* the shape said by a small file: imported only when small */
    import_halves(name, &c, model_import_stage, "model_import_stage", NULL);
}

/* kind 7's model: room for the bytes and kind 5's vocabulary (278 tokens) */
static const struct gpt_config CHOICE_MODEL = {.layers = 1, .channels = 8, .heads = 2,
                                               .vocab = 288, .padded_vocab = 288, .max_seq = 8};

static void fuzz_choices(int flags, const uint8_t *data, size_t size)
{
    const char *name = "choices.jsonl";
    if (fuzz_write_file(name, data, size) != 0)
        abort();
    struct tokenizer *t = flags & 1 ? fuzz_vocab() : NULL;
    struct bpe *b = NULL;
    herr e = {0};
    if (t && bpe_create(&b, t, &e) != 0)
        abort();
    struct choice_set set;
    if (choice_set_read(&set, name, b, 64, &e) != 0) {
        fuzz_check_rejection("choice_set_read", &e);
    } else {
        const struct gpt_config *m = &CHOICE_MODEL;
        int T = choice_set_max_positions(&set);
        struct engine_spec es = {.kind = ENGINE_CPU, .precision = DTYPE_FP32, .model = *m,
                                 .first = 0, .last = m->layers, .B = 1,
                                 .T = T < m->max_seq ? T : m->max_seq, .slots = 1, .tp = 1};
        struct engine *en = NULL;
        if (engine_create(&en, &es, &e) != 0 || engine_init_params(en, 1, &e) != 0)
            abort();
        for (size_t i = 0; i < set.n; i++) {
            const struct choice_example *x = &set.ex[i];
            double sum[CHOICE_MAX], mean[CHOICE_MAX];
            int dropped;
            if (x->n < 2 || x->n > CHOICE_MAX || x->label < 0 || x->label >= x->n ||
                x->ctx_len < 1) {
                fprintf(stderr, "example %zu read breaking the rules\n", i);
                abort();
            }
            for (int c = 0; c < x->n; c++)
                if (x->len[c] < 1) {
                    fprintf(stderr, "example %zu: completion %d of no tokens\n", i, c);
                    abort();
                }
            if (choice_score(en, x, sum, mean, &dropped, &e) != 0) {
                herr_wrap(&e, "%s, example %ld", name, x->where);
                fuzz_check_rejection("choice_score", &e);
                continue;
            }
            for (int c = 0; c < x->n; c++)
                if (!(sum[c] >= 0.0) || !(mean[c] >= 0.0) || dropped < 0) {
                    fprintf(stderr, "example %zu: completion %d scored %g\n", i, c, sum[c]);
                    abort();
                }
        }
        engine_free(en);
        choice_set_free(&set);
    }
    bpe_free(b);
    tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    fresh_workdir();
    int kind = data[0] % 8, flags = data[1];
    data += 2;
    size -= 2;
    switch (kind) {
    case 0: fuzz_checkpoint(flags, data, size); break;
    case 1: fuzz_llmc(data, size); break;
    case 2: fuzz_data(flags, data, size); break;
    case 3: fuzz_names(data, size); break;
    case 4: fuzz_tokenizer(data, size); break;
    case 5: fuzz_bpe(data, size); break;
    case 6: fuzz_safetensors(data, size); break;
    default: fuzz_choices(flags, data, size); break;
    }
    fuzz_leave_workdir();
    return 0;
}
