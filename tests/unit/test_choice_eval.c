/* Multiple-choice evaluation (choice_eval.h). The two files in: llm.c's eval file as its
 * write_evalfile lays it out (every field read back; each rule broken refused, naming the
 * example), HellaSwag's JSON lines (bytes or GPT-2's BPE, the ending after a space; each rule
 * broken refused, naming the line). The scoring (through the CPU engine, in two token slices
 * a completion) against the stage's own cross-entropy: a completion's summed loss is the loss
 * of the context and the completion less that of the context alone (the model is causal), each
 * taken by gpt_stage_forward with targets on a stage of just that length; also with the context
 * shortened to fit the stage, and shortened to one token (one slice). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "choice_eval.h"
#include "engine.h"
#include "fs_testutil.h"
#include "gpt.h"
#include "test.h"
#include "tokenizer.h"
#include "vocab_testutil.h"

static char dir[256];

/* ------------------------------------------------------------ llm.c's file */

struct ex {
    int label, n, ctx_len, len[4];
    uint16_t tok[64];
};

/* The examples as write_evalfile writes them; `poke` (when >= 0) sets uint16 number poke of the
 * stream to `val`, and `cut` (>0) drops that many bytes from the end, `extra` adds some. */
static void write_llmc(const char *path, const struct ex *xs, int n, int header_n, int version,
                       long poke, uint16_t val, int cut, int extra)
{
    uint16_t s[1024];
    int at = 0;
    for (int i = 0; i < n; i++) {
        const struct ex *x = &xs[i];
        int start = at, k = 0;
        s[at++] = 65535;
        s[at++] = 0;
        s[at++] = (uint16_t)i;
        s[at++] = (uint16_t)x->label;
        s[at++] = (uint16_t)x->n;
        s[at++] = (uint16_t)x->ctx_len;
        for (int j = 0; j < x->ctx_len; j++)
            s[at++] = x->tok[k++];
        for (int c = 0; c < x->n; c++) {
            s[at++] = (uint16_t)x->len[c];
            for (int j = 0; j < x->len[c]; j++)
                s[at++] = x->tok[k++];
        }
        s[start + 1] = (uint16_t)(2 * (at - start));
    }
    if (poke >= 0)
        s[poke] = val;
    int32_t h[256] = {CHOICE_EVAL_MAGIC, version, header_n, 0};
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(h, sizeof h, 1, f);
    fwrite(s, 1, (size_t)(2 * at - cut), f); /* little-endian, as the file's */
    for (int i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

static const struct ex XS[3] = {
    {.label = 2, .n = 4, .ctx_len = 3, .len = {2, 1, 3, 1}, .tok = {5, 6, 7, 10, 11, 12, 13, 14, 15, 16}},
    {.label = 0, .n = 2, .ctx_len = 1, .len = {1, 2}, .tok = {40, 41, 42, 43}},
    {.label = 3, .n = 4, .ctx_len = 2, .len = {1, 1, 1, 4}, .tok = {1, 2, 3, 4, 5, 6, 7, 8, 9}},
};

/* Whether x holds exactly xs's example. */
static int same_example(const struct choice_example *x, const struct ex *w)
{
    if (x->label != w->label || x->n != w->n || x->ctx_len != w->ctx_len)
        return 0;
    int total = w->ctx_len;
    for (int c = 0; c < w->n; c++) {
        if (x->len[c] != w->len[c])
            return 0;
        total += w->len[c];
    }
    for (int j = 0; j < total; j++)
        if (x->tok[j] != w->tok[j])
            return 0;
    return 1;
}

/* Reads path; 0 or -1 with the message in msg. */
static int read_set(const char *path, struct bpe *b, size_t limit, struct choice_set *s, char *msg)
{
    herr e = {0};
    int rc = choice_set_read(s, path, b, limit, &e);
    memcpy(msg, rc ? e.msg : "", rc ? sizeof e.msg : 1);
    return rc;
}

static void test_llmc_file(void)
{
    char path[300], msg[sizeof(((herr *)0)->msg)];
    struct choice_set s;
    snprintf(path, sizeof path, "%s/eval.bin", dir);
    write_llmc(path, XS, 3, 3, 1, -1, 0, 0, 0);
    int rc = read_set(path, NULL, 0, &s, msg);
    CHECK_MSG("llm.c file: three examples read", rc == 0 && s.n == 3 && !s.jsonl, "%s", msg);
    int ok = rc == 0 && s.n == 3;
    for (int i = 0; ok && i < 3; i++)
        ok = same_example(&s.ex[i], &XS[i]) && s.ex[i].where == i;
    CHECK("llm.c file: labels, contexts, completions and their tokens as written", ok);
    CHECK_INT("llm.c file: the most completions", rc ? -1 : choice_set_max_completions(&s), 4);
    /* example 2: a context of 2 and a completion of 4: 5 positions */
    CHECK_INT("llm.c file: the most positions an example needs", rc ? -1 : choice_set_max_positions(&s), 5);
    choice_set_free(&s);
    rc = read_set(path, NULL, 2, &s, msg);
    CHECK_MSG("llm.c file: --examples 2 reads the first two", rc == 0 && s.n == 2 &&
              same_example(&s.ex[1], &XS[1]), "%s", msg);
    choice_set_free(&s);

    /* each rule broken; in the stream (uint16) example 0 is [0, 20), example 1 [20, 32) */
    static const struct {
        const char *what, *want;
        int header_n, version;
        long poke;
        uint16_t val;
        int cut, extra;
    } bad[] = {
        {"version 2", "version 2", 3, 2, -1, 0, 0, 0},
        {"no examples in the header", "says 0 examples", 0, 1, -1, 0, 0, 0},
        {"a missing delimiter", "example 1: starts with 7", 3, 1, 20, 7, 0, 0},
        {"a label past the completions", "example 1: label 2 is not one of its 2", 3, 1, 23, 2, 0, 0},
        {"one completion", "example 1: 1 completions", 3, 1, 24, 1, 0, 0},
        {"17 completions", "example 1: 17 completions", 3, 1, 24, 17, 0, 0},
        {"a wrong byte count", "example 0: says 30 bytes but holds 40", 3, 1, 1, 30, 0, 0},
        {"a context of no tokens", "example 1: the context has no tokens", 3, 1, 25, 0, 0, 0},
        {"a completion of no tokens", "example 1: a completion has no tokens", 3, 1, 29, 0, 0, 0},
        {"a file cut inside an example", "example 2: the file ends inside it", 3, 1, -1, 0, 6, 0},
        {"half a token", "not whole uint16 tokens", 3, 1, -1, 0, 1, 0},
        {"more examples said than held", "example 3: the file ends inside its header", 4, 1, -1, 0, 0, 0},
        {"bytes after the last example", "4 bytes after the 3 examples", 3, 1, -1, 0, 0, 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[160];
        write_llmc(path, XS, 3, bad[i].header_n, bad[i].version, bad[i].poke, bad[i].val,
                   bad[i].cut, bad[i].extra);
        rc = read_set(path, NULL, 0, &s, msg);
        snprintf(name, sizeof name, "llm.c file refused: %s", bad[i].what);
        CHECK_MSG(name, rc != 0 && strstr(msg, bad[i].want) && strstr(msg, path) && s.n == 0,
                  "%s", msg);
    }
    FILE *f = fopen(path, "wb");
    if (f) {
        int32_t m = CHOICE_EVAL_MAGIC;
        fwrite(&m, 4, 1, f);
        fclose(f);
    }
    rc = read_set(path, NULL, 0, &s, msg);
    CHECK_MSG("llm.c file refused: a header cut short", rc != 0 && strstr(msg, "header of 1024 bytes"),
              "%s", msg);
}

/* ------------------------------------------------------------ JSON lines */

/* Whether tok[0, n) are the BPE tokens of text. */
static int encodes_as(struct bpe *b, const char *text, const int *tok, int n)
{
    struct bpe_tokens k = {0};
    herr e = {0};
    int ok = bpe_encode(b, text, strlen(text), 0, &k, &e) == 0 && (int)k.n == n &&
             !memcmp(k.v, tok, (size_t)n * sizeof *tok);
    free(k.v);
    return ok;
}

static void test_jsonl(void)
{
    char path[300], msg[sizeof(((herr *)0)->msg)];
    struct choice_set s;
    snprintf(path, sizeof path, "%s/hs.jsonl", dir);
    test_write_file(path,
        "{\"ind\": 24, \"ctx\": \"ab\", \"endings\": [\"c\", \"de\", \"f\"], \"label\": 1}\n"
        "\n"
        "{\"ctx\": \"The man\", \"endings\": [\"is here.\", \"the end\"], \"label\": \"0\", \"split\": \"val\"}\r\n");
    int rc = read_set(path, NULL, 0, &s, msg);
    static const int want0[] = {'a', 'b', ' ', 'c', ' ', 'd', 'e', ' ', 'f'};
    CHECK_MSG("JSON lines, bytes: two examples, blank lines passed over, lines counted",
              rc == 0 && s.n == 2 && s.jsonl && s.ex[0].where == 1 && s.ex[1].where == 3, "%s", msg);
    CHECK("JSON lines, bytes: the context, then each ending after a space",
          rc == 0 && s.ex[0].n == 3 && s.ex[0].label == 1 && s.ex[0].ctx_len == 2 &&
          s.ex[0].len[0] == 2 && s.ex[0].len[1] == 3 && s.ex[0].len[2] == 2 &&
          !memcmp(s.ex[0].tok, want0, sizeof want0));
    CHECK("JSON lines: a label written as a string of digits",
          rc == 0 && s.ex[1].label == 0 && s.ex[1].n == 2 && s.ex[1].ctx_len == 7);
    choice_set_free(&s);

    static const char *const pieces[] = {"Th", "The", " m", " ma", " man", " i", " is", " h",
                                         " he", " her", " here", " t", " th", " the", " e", " en", " end"};
    struct tokenizer *t = test_vocab(dir, pieces, 17, -1);
    struct bpe *b = NULL;
    herr e = {0};
    if (!t || bpe_create(&b, t, &e) != 0) {
        TEST_FAIL("JSON lines, BPE: the encoder", "%s", e.msg);
        tokenizer_free(t);
        return;
    }
    rc = read_set(path, b, 0, &s, msg);
    const struct choice_example *x = rc == 0 && s.n == 2 ? &s.ex[1] : NULL;
    CHECK_MSG("JSON lines, BPE: the context and ' ' + each ending as bpe_encode gives them",
              x && encodes_as(b, "The man", x->tok, x->ctx_len) &&
              encodes_as(b, " is here.", x->tok + x->ctx_len, x->len[0]) &&
              encodes_as(b, " the end", x->tok + x->ctx_len + x->len[0], x->len[1]),
              "%s", msg);
    /* "The"," man" | " is"," here","." | " the"," end" */
    CHECK("JSON lines, BPE: merged tokens (2, 3 and 2)",
          x && x->ctx_len == 2 && x->len[0] == 3 && x->len[1] == 2 && x->tok[0] == 257);
    choice_set_free(&s);
    rc = read_set(path, b, 1, &s, msg);
    CHECK("JSON lines: --examples 1 reads the first", rc == 0 && s.n == 1);
    choice_set_free(&s);

    static const struct {
        const char *what, *line, *want;
    } bad[] = {
        {"not JSON", "{\"ctx\": ", "line 2: not JSON"},
        {"not an object", "[1, 2]", "line 2: not a JSON object"},
        {"no context", "{\"endings\": [\"a\", \"b\"], \"label\": 0}", "line 2: \"ctx\" must be a non-empty string"},
        {"an empty context", "{\"ctx\": \"\", \"endings\": [\"a\", \"b\"], \"label\": 0}", "\"ctx\" must be a non-empty"},
        {"one ending", "{\"ctx\": \"x\", \"endings\": [\"a\"], \"label\": 0}", "\"endings\" must be an array of 2 to 16"},
        {"an ending not a string", "{\"ctx\": \"x\", \"endings\": [\"a\", 3], \"label\": 0}", "\"endings\"[1] is not a string"},
        {"a label past the endings", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": 2}", "\"label\" 2 is not the index of one of its 2"},
        {"a fractional label", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": 0.5}", "\"label\" 0.5"},
        {"a label of letters", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": \"one\"}", "\"label\" must be the right ending's index"},
        {"no label", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"]}", "\"label\" must be"},
        {"an ending that is not UTF-8", "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\xff\"], \"label\": 0}", "\"endings\"[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512], name[160];
        snprintf(text, sizeof text, "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\"], \"label\": 0}\n%s\n",
                 bad[i].line);
        test_write_file(path, text);
        rc = read_set(path, b, 0, &s, msg);
        snprintf(name, sizeof name, "JSON lines refused: %s", bad[i].what);
        CHECK_MSG(name, rc != 0 && strstr(msg, bad[i].want) && strstr(msg, path) && s.n == 0,
                  "%s", msg);
    }
    test_write_file(path, "\n\n");
    rc = read_set(path, b, 0, &s, msg);
    CHECK_MSG("a file of no example refused", rc != 0 && strstr(msg, "no example"), "%s", msg);
    snprintf(path, sizeof path, "%s/absent.jsonl", dir);
    rc = read_set(path, b, 0, &s, msg);
    CHECK_MSG("a missing file refused, naming it", rc != 0 && strstr(msg, "absent.jsonl"), "%s", msg);
    bpe_free(b);
    tokenizer_free(t);
}

/* ------------------------------------------------------------ scoring */

enum { L = 2, C = 16, NH = 2, V = 61, VP = 128, MAXT = 12 };
static const struct gpt_config MODEL = {.layers = L, .channels = C, .heads = NH, .vocab = V,
                                        .padded_vocab = VP, .max_seq = MAXT};

/* A whole model of B sequences, T positions, params (or initialised, made less uniform). */
static struct gpt_stage *model(int B, int T, const float *params)
{
    struct gpt_stage *s = NULL;
    herr e = {0};
    if (gpt_stage_create(&s, &MODEL, 0, L, B, T, 1, &e) != 0) {
        printf("# %s\n", e.msg);
        return NULL;
    }
    float *p = gpt_stage_params(s);
    size_t n = gpt_stage_num_params(s);
    if (params) {
        memcpy(p, params, n * sizeof *p);
    } else {
        gpt_stage_init_params(s, 99);
        for (size_t i = 0; i < n; i++) /* logits that differ by more than init's 0.02 */
            p[i] *= 25.0f;
    }
    return s;
}

/* The engine's mean cross-entropy of seq[1, n] given seq[0, n - 1], times n - 1: the summed loss
 * of predicting every token after the first (0 for n = 1). */
static double engine_sum(const float *params, const int *seq, int n)
{
    if (n <= 1)
        return 0.0;
    struct gpt_stage *s = model(1, n - 1, params);
    float loss = NAN;
    if (s && gpt_stage_forward(s, 0, seq, NULL, seq + 1, NULL, &loss) != 0)
        printf("# %s\n", gpt_stage_error(s));
    gpt_stage_free(s);
    return (double)loss * (n - 1);
}

/* Completion i's summed loss after the context's tokens from `drop` on, by the engine. */
static double reference(const float *params, const struct choice_example *x, int i, int drop)
{
    int seq[64], n = 0, off = x->ctx_len;
    for (int j = drop; j < x->ctx_len; j++)
        seq[n++] = x->tok[j];
    int c = n;
    for (int k = 0; k < i; k++)
        off += x->len[k];
    for (int j = 0; j < x->len[i]; j++)
        seq[n++] = x->tok[off + j];
    return engine_sum(params, seq, n) - engine_sum(params, seq, c);
}

/* The CPU engine (engine.h) of the whole model, B sequences of T positions, with params. */
static struct engine *engine_of(int B, int T, const float *params)
{
    struct engine *en = NULL;
    herr e = {0};
    struct engine_spec es = {.kind = ENGINE_CPU, .precision = DTYPE_FP32, .model = MODEL,
                             .first = 0, .last = L, .B = B, .T = T, .slots = 1, .tp = 1};
    if (engine_create(&en, &es, &e) != 0) {
        printf("# %s\n", e.msg);
        return NULL;
    }
    struct gpt_stage *hs = engine_host(en);
    memcpy(gpt_stage_params(hs), params, gpt_stage_num_params(hs) * sizeof *params);
    if (engine_params_upload(en, &e) != 0) {
        printf("# %s\n", e.msg);
        engine_free(en);
        return NULL;
    }
    return en;
}

static void test_score(void)
{
    static int tok[] = {3, 17, 60, 2, 9, /* context */ 4, 4, 50, /* 1 */ 33, /* 2 */
                        7, 8, 9, 10, 11, 12, /* 3 */ 0, 59 /* 4 */};
    struct choice_example x = {.where = 1, .label = 2, .n = 4, .ctx_len = 5, .len = {3, 1, 6, 2},
                               .tok = tok};
    struct gpt_stage *s = model(1, MAXT, NULL);
    if (!s) {
        TEST_FAIL("scoring: a model", "not created");
        return;
    }
    size_t np = gpt_stage_num_params(s);
    float *params = malloc(np * sizeof *params);
    if (params)
        memcpy(params, gpt_stage_params(s), np * sizeof *params);
    gpt_stage_free(s);
    struct engine *en = params ? engine_of(1, MAXT, params) : NULL;
    if (!en) {
        TEST_FAIL("scoring: a model", "no engine");
        free(params);
        return;
    }
    double sum[CHOICE_MAX], mean[CHOICE_MAX], ref[4];
    int dropped = -1;
    herr e = {0};
    int rc = choice_score(en, &x, sum, mean, &dropped, &e);
    double worst = 0.0, spread = 0.0;
    for (int i = 0; i < 4; i++) {
        ref[i] = reference(params, &x, i, 0);
        if (rc == 0) {
            worst = fmax(worst, fabs(sum[i] - ref[i]) / fabs(ref[i]));
            spread = fmax(spread, fabs(mean[i] - mean[0]));
        }
    }
    CHECK_MSG("scoring: each completion's summed loss is the stage's (context + completion less "
              "context)", rc == 0 && worst < 1e-5 && dropped == 0, "rc %d (%s), rel err %.3g",
              rc, e.msg, worst);
    CHECK_MSG("scoring: the completions' mean losses differ (the model is not uniform)",
              spread > 0.1, "spread %.3g", spread);
    int ok = rc == 0;
    for (int i = 0; ok && i < 4; i++)
        ok = fabs(mean[i] - sum[i] / x.len[i]) <= 1e-12 * fabs(sum[i]);
    CHECK("scoring: mean = sum / the completion's tokens", ok);
    /* the same example again: the engine's state from the last one changes nothing */
    double again[CHOICE_MAX], again_mean[CHOICE_MAX];
    rc = choice_score(en, &x, again, again_mean, &dropped, &e);
    CHECK("scoring: the same example twice, the same losses", rc == 0 && !memcmp(again, sum, 4 * sizeof *sum));
    engine_free(en);

    /* a stage of 7 positions: the rows need 10, so the context's first 3 tokens go */
    en = engine_of(1, 7, params);
    rc = en ? choice_score(en, &x, sum, mean, &dropped, &e) : -1;
    worst = 0.0;
    for (int i = 0; rc == 0 && i < 4; i++) {
        double r = reference(params, &x, i, 3);
        worst = fmax(worst, fabs(sum[i] - r) / fabs(r));
    }
    CHECK_MSG("scoring: a context too long for the stage loses its first tokens, the rest scored "
              "alike", rc == 0 && dropped == 3 && worst < 1e-5, "rc %d (%s), dropped %d, rel err %.3g",
              rc, e.msg, dropped, worst);
    /* a completion of 7 leaves context room for 1 token at T 7 (5 + 7 - 1 - 7 = 4 dropped): its
     * slices are then one, from position 0; 8 does not fit */
    static int tok2[] = {3, 17, 60, 2, 9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2};
    struct choice_example y = {.where = 7, .label = 0, .n = 2, .ctx_len = 5, .len = {7, 1},
                               .tok = tok2};
    rc = en ? choice_score(en, &y, sum, mean, &dropped, &e) : -1;
    double r0 = reference(params, &y, 0, 4);
    CHECK_MSG("scoring: a completion of 7 fits in 7 positions after one context token",
              rc == 0 && dropped == 4 && fabs(sum[0] - r0) <= 1e-5 * fabs(r0),
              "rc %d (%s) dropped %d, %.9g against %.9g", rc, e.msg, dropped, sum[0], r0);
    y.len[0] = 8;
    y.len[1] = 2;
    rc = en ? choice_score(en, &y, sum, mean, &dropped, &e) : 0;
    CHECK_MSG("scoring: a completion of 8 does not, refused", rc != 0 &&
              strstr(e.msg, "completion of 8 tokens") && strstr(e.msg, "7 positions"), "%s", e.msg);
    tok2[6] = V;
    y.len[0] = 7;
    y.len[1] = 1;
    rc = en ? choice_score(en, &y, sum, mean, &dropped, &e) : 0;
    CHECK_MSG("scoring: a token outside the vocabulary refused", rc != 0 &&
              strstr(e.msg, "token 61 is outside the model's vocabulary of 61"), "%s", e.msg);
    tok2[6] = 2;
    engine_free(en);
    en = engine_of(2, MAXT, params);
    rc = en ? choice_score(en, &x, sum, mean, &dropped, &e) : 0;
    CHECK_MSG("scoring: an engine of two sequences refused", rc != 0 &&
              strstr(e.msg, "one stage of one sequence"), "%s", e.msg);
    engine_free(en);
    free(params);

    static const double v[] = {2.0, 1.0, 3.0, 1.0};
    CHECK("choice_pick: the least, the first among equals", choice_pick(v, 4) == 1 &&
          choice_pick(v, 1) == 0 && choice_pick(v + 2, 2) == 1);
}

int main(void)
{
    static void (*const tests[])(void) = {test_llmc_file, test_jsonl, test_score, NULL};
    test_in_tmpdir(dir, sizeof dir, "choice-eval", tests);
    TEST_MAIN_END();
}
