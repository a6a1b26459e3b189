/* Text from a trained model (sampler.h, tokenizer.h): one position at a time through the
 * stage's cached keys and values gives the logits a whole-sequence forward gives; greedy
 * sampling takes the whole-sequence argmax at every step; the draws follow the softmax of the
 * logits over the temperature, among the top k; the same seed gives the same tokens; the
 * tokenizer file reads back its pieces and refuses a broken one, naming it. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_testutil.h"
#include "gpt.h"
#include "sampler.h"
#include "tokenizer.h"

static const struct gpt_config MODEL = {.max_seq = 24, .vocab = 61, .padded_vocab = 64,
                                        .layers = 2, .heads = 2, .channels = 16};

static struct gpt_stage *model(int T)
{
    struct gpt_stage *s = NULL;
    herr e = {0};
    if (gpt_stage_create(&s, &MODEL, 0, MODEL.layers, 1, T, 1, &e) != 0) {
        printf("# %s\n", e.msg);
        return NULL;
    }
    gpt_stage_init_params(s, 7);
    /* larger than the init's weights, so the logits differ clearly between positions */
    float *p = gpt_stage_params(s);
    for (size_t i = 0; i < gpt_stage_num_params(s); i++)
        p[i] *= 8.0f;
    return s;
}

/* One position at a time (the prompt of 5 first) = the whole sequence's forward, row by row. */
static void test_incremental_logits(void)
{
    enum { T = 20 };
    struct gpt_stage *whole = model(T), *inc = model(T);
    if (!whole || !inc) {
        TEST_FAIL("incremental logits", "no model");
        return;
    }
    int tok[T];
    for (int t = 0; t < T; t++)
        tok[t] = (t * 17 + 3) % MODEL.vocab;
    int rc = gpt_stage_forward(whole, 0, tok, NULL, NULL, NULL, NULL);
    /* the incremental one learns each token only when its position is forwarded */
    int seen[T] = {0};
    memcpy(seen, tok, 5 * sizeof *seen);
    rc = rc || gpt_stage_forward_slice(inc, 0, 0, 5, seen, NULL, NULL, NULL, NULL);
    for (int t = 5; rc == 0 && t < T; t++) {
        seen[t] = tok[t];
        rc = gpt_stage_forward_slice(inc, 0, t, t + 1, seen, NULL, NULL, NULL, NULL);
    }
    /* the largest difference against the largest logit (fp32 sums in another order) */
    double most = 0, big = 0;
    const float *a = gpt_stage_logits(whole, 0), *b = gpt_stage_logits(inc, 0);
    for (int i = 0; rc == 0 && a && b && i < T * MODEL.padded_vocab; i++)
        if (i % MODEL.padded_vocab < MODEL.vocab) {
            double d = fabs((double)a[i] - b[i]);
            most = d > most ? d : most;
            big = fabs((double)a[i]) > big ? fabs((double)a[i]) : big;
        }
    CHECK_MSG("a position at a time (keys and values cached) = the whole sequence's logits",
              rc == 0 && a && b && big > 1 && most < 1e-5 * big,
              "rc %d, largest difference %g of logits up to %g", rc, most, big);
    gpt_stage_free(whole);
    gpt_stage_free(inc);
}

static int argmax_row(const float *l, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* Greedy sampling = the argmax of a whole-sequence forward of what came before, every step. */
static void test_greedy(void)
{
    enum { NP = 3, N = 12 };
    struct gpt_stage *s = model(NP + N), *ref = model(NP + N);
    int prompt[NP] = {5, 9, 40}, out[NP + N], n = 0;
    herr e = {0};
    struct sampler_config c = {.tokens = N, .temperature = 0, .seed = 1, .stop_token = -1};
    int rc = !s || !ref || sampler_run(s, prompt, NP, &c, out, &n, &e);
    int same = rc == 0 && n == NP + N && !memcmp(out, prompt, sizeof prompt);
    for (int t = NP; same && t < NP + N; t++) {
        int seq[NP + N] = {0};
        memcpy(seq, out, (size_t)t * sizeof *seq);
        same = gpt_stage_forward(ref, 0, seq, NULL, NULL, NULL, NULL) == 0 &&
               argmax_row(gpt_stage_logits(ref, 0) + (size_t)(t - 1) * MODEL.padded_vocab,
                          MODEL.vocab) == out[t];
    }
    CHECK_MSG("greedy: every token the whole-sequence argmax", same, "rc %d (%s), %d tokens",
              rc, e.msg, n);
    /* the same seed draws the same tokens; another seed others; the stop token ends it */
    int a[NP + N], b[NP + N], d[NP + N], na = 0, nb = 0, nd = 0;
    struct sampler_config r = {.tokens = N, .temperature = 1.0f, .top_k = 0, .seed = 42,
                               .stop_token = -1};
    rc = sampler_run(s, prompt, NP, &r, a, &na, &e) || sampler_run(s, prompt, NP, &r, b, &nb, &e);
    r.seed = 43;
    rc = rc || sampler_run(s, prompt, NP, &r, d, &nd, &e);
    CHECK("the same seed, the same tokens; another seed, others",
          rc == 0 && na == nb && !memcmp(a, b, sizeof a) && memcmp(a, d, sizeof a) != 0);
    r.seed = 42;
    r.stop_token = a[NP + 4];
    int stop_at = NP + 4;
    for (int t = NP; t < NP + 4; t++)
        if (a[t] == r.stop_token && stop_at == NP + 4)
            stop_at = t;
    rc = sampler_run(s, prompt, NP, &r, b, &nb, &e);
    CHECK_MSG("the stop token ends the text, itself included", rc == 0 && nb == stop_at + 1,
              "rc %d, %d tokens, want %d", rc, nb, stop_at + 1);
    /* what cannot be sampled: said, naming the setting */
    r.tokens = N + 1;
    rc = sampler_run(s, prompt, NP, &r, b, &nb, &e);
    CHECK_MSG("more tokens than the stage's positions: refused", rc != 0 && strstr(e.msg, "positions"),
              "rc %d: %s", rc, e.msg);
    r.tokens = 2;
    rc = sampler_run(s, prompt, 0, &r, b, &nb, &e);
    CHECK_MSG("an empty prompt: refused", rc != 0 && strstr(e.msg, "prompt is empty"), "rc %d: %s",
              rc, e.msg);
    gpt_stage_free(s);
    gpt_stage_free(ref);
}

/* The draws follow softmax(logits / temperature) among the top k (40,000 draws of a fixed seed:
 * the same counts every run). */
static void test_pick(void)
{
    float l[4] = {0.0f, logf(3.0f), -1.0f, -2.0f};
    uint64_t rng = 9;
    CHECK_INT("temperature 0: the most likely", sampler_pick(l, 4, 0.0f, 0, 1.0f, &rng), 1);
    CHECK_INT("top-k 1: the most likely", sampler_pick(l, 4, 1.0f, 1, 1.0f, &rng), 1);
    int cnt[4] = {0};
    for (int i = 0; i < 40000; i++)
        cnt[sampler_pick(l, 4, 1.0f, 2, 1.0f, &rng)]++;
    /* top 2 of {1, 3, e^-1, e^-2}: 1/4 and 3/4 */
    CHECK_MSG("top-k 2: only the two most likely, as 1 : 3", cnt[2] == 0 && cnt[3] == 0 &&
              fabs(cnt[1] / 40000.0 - 0.75) < 0.01, "%d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < 40000; i++)
        cnt[sampler_pick(l, 4, 2.0f, 0, 0.0f, &rng)]++;
    /* temperature 2, all four: proportional to e^(l/2) = 1, sqrt 3, e^-0.5, e^-1 */
    double z = 1 + sqrt(3.0) + exp(-0.5) + exp(-1.0);
    int ok = 1;
    double want[4] = {1 / z, sqrt(3.0) / z, exp(-0.5) / z, exp(-1.0) / z};
    for (int i = 0; i < 4; i++)
        ok = ok && fabs(cnt[i] / 40000.0 - want[i]) < 0.01;
    CHECK_MSG("temperature 2: proportional to e^(logit / 2)", ok, "%d %d %d %d", cnt[0], cnt[1],
              cnt[2], cnt[3]);
    /* top-p over {1, 3, e^-1, e^-2} / z (0.221, 0.662, 0.081, 0.030): 0.6 keeps token 1 alone,
     * 0.7 tokens 1 and 0 (0.883), 0.9 three (0.964); with top-k 2, 0.9 keeps the two */
    static const struct {
        float p;
        int k, keep;
    } nuc[] = {{0.6f, 0, 1}, {0.7f, 0, 2}, {0.9f, 0, 3}, {0.9f, 2, 2}, {0.999f, 0, 4}};
    static const int order[4] = {1, 0, 2, 3};
    double w[4] = {1.0, 3.0, exp(-1.0), exp(-2.0)};
    for (size_t c = 0; c < sizeof nuc / sizeof nuc[0]; c++) {
        memset(cnt, 0, sizeof cnt);
        for (int i = 0; i < 40000; i++)
            cnt[sampler_pick(l, 4, 1.0f, nuc[c].k, nuc[c].p, &rng)]++;
        double kept = 0;
        for (int j = 0; j < nuc[c].keep; j++)
            kept += w[order[j]];
        ok = 1;
        for (int j = 0; j < 4; j++) {
            double want_j = j < nuc[c].keep ? w[order[j]] / kept : 0.0;
            double got = cnt[order[j]] / 40000.0;
            ok = ok && (want_j == 0.0 ? cnt[order[j]] == 0 : fabs(got - want_j) < 0.01);
        }
        char name[96];
        snprintf(name, sizeof name, "top-p %.3g (top-k %d): the %d most likely, renormalised",
                 (double)nuc[c].p, nuc[c].k, nuc[c].keep);
        CHECK_MSG(name, ok, "%d %d %d %d", cnt[0], cnt[1], cnt[2], cnt[3]);
    }
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void test_tokenizer(void)
{
    char dir[] = "/tmp/holmes-tokenizer-XXXXXX", path[256];
    if (!mkdtemp(dir)) {
        TEST_FAIL("tokenizer", "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    unsigned char buf[1024 + 64];
    uint32_t h[256] = {20240328u, 2, 3, 2};
    memcpy(buf, h, sizeof h);
    size_t n = sizeof h;
    const char *pieces[3] = {"a", " bc", "<|endoftext|>"};
    for (int i = 0; i < 3; i++) {
        buf[n++] = (unsigned char)strlen(pieces[i]);
        memcpy(buf + n, pieces[i], strlen(pieces[i]));
        n += strlen(pieces[i]);
    }
    herr e = {0};
    struct tokenizer *t = NULL;
    int rc = write_file(path, buf, n) || tokenizer_open(&t, path, &e);
    size_t len = 0;
    const char *p = rc ? NULL : tokenizer_piece(t, 1, &len);
    CHECK_MSG("tokenizer: pieces, vocabulary and end-of-text read back",
              rc == 0 && p && len == 3 && !memcmp(p, " bc", 3) && tokenizer_vocab(t) == 3 &&
                  tokenizer_eot(t) == 2 && !tokenizer_piece(t, 3, &len),
              "rc %d: %s", rc, e.msg);
    tokenizer_free(t);
    rc = write_file(path, buf, n - 4) || tokenizer_open(&t, path, &e);
    CHECK_MSG("tokenizer: a truncated file refused, naming it and the token",
              rc != 0 && strstr(e.msg, path) && strstr(e.msg, "token 2 of 3 is cut short"),
              "rc %d: %s", rc, e.msg);
    h[0] = 20240326u; /* llm.c's model file, not its tokenizer */
    memcpy(buf, h, sizeof h);
    rc = write_file(path, buf, n) || tokenizer_open(&t, path, &e);
    CHECK_MSG("tokenizer: another file's magic refused", rc != 0 && strstr(e.msg, "magic 20240326"),
              "rc %d: %s", rc, e.msg);
    test_remove_tree(dir);
}

int main(void)
{
    test_incremental_logits();
    test_greedy();
    test_pick();
    test_tokenizer();
    TEST_MAIN_END();
}
