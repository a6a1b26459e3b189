/* GPT stage engine: layout, stage-split equivalence, finite-difference gradients, bad input. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpt.h"
#include "gpt_reference.h"
#include "test.h"

static const struct gpt_config tiny = {
    .layers = 2, .channels = 16, .heads = 2, .vocab = 61, .padded_vocab = 128, .max_seq = 16};
enum { B = 2, T = 8 };

static const struct gpt_tensor *find_tensor(struct gpt_stage *s, const char *name)
{
    const struct gpt_tensor *t;
    int n = gpt_stage_tensors(s, &t);
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

/* The whole tiny model as one stage; NULL with a FAIL line named `what`. */
static struct gpt_stage *whole_tiny(const char *what)
{
    herr e;
    struct gpt_stage *s;
    if (gpt_stage_create(&s, &tiny, 0, 2, B, T, 1, &e) < 0) {
        TEST_FAIL(what, "%s", e.msg);
        return NULL;
    }
    return s;
}

/* Two micro-batches (seeds seed and seed + 1) forward and backward through the whole model, each
 * at half the loss: their tokens, targets and losses. */
static void two_whole(struct gpt_stage *whole, int tok[2][B * T], int tgt[2][B * T], float lw[2],
                      unsigned seed)
{
    for (int m = 0; m < 2; m++) {
        ref_random_batch(tok[m], tgt[m], B * T, tiny.vocab, seed + (unsigned)m);
        gpt_stage_forward(whole, 0, tok[m], NULL, tgt[m], NULL, &lw[m]);
        gpt_stage_backward(whole, 0, NULL, NULL, 0.5f);
    }
}

static void test_layout(void)
{
    struct gpt_stage *s = whole_tiny("layout.create");
    if (!s)
        return;
    size_t C = 16, L = 2, Vp = 128, maxT = 16;
    size_t want = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
    CHECK_INT("layout.num_params", gpt_stage_num_params(s), want);
    const struct gpt_tensor *t;
    int n = gpt_stage_tensors(s, &t);
    CHECK_INT("layout.tensor_count", n, 2 + 12 * 2 + 2);
    size_t sum = 0;
    int contiguous = 1;
    for (int i = 0; i < n; i++) {
        if (t[i].offset != sum)
            contiguous = 0;
        sum += t[i].size;
    }
    CHECK("layout.contiguous", contiguous && sum == want);
    const struct gpt_tensor *q = find_tensor(s, "h1.attn.qkv.weight");
    CHECK("layout.qkv_named", q && q->size == 3 * C * C && q->decay == 1);
    const struct gpt_tensor *lb = find_tensor(s, "h0.ln_2.bias");
    CHECK("layout.ln_no_decay", lb && lb->decay == 0);
    size_t off, cnt;
    CHECK("layout.wte", gpt_stage_wte(s, &off, &cnt) == 0 && off == 0 && cnt == Vp * C);
    gpt_stage_free(s);

    /* a middle stage of a 3-layer model has no wte */
    struct gpt_config c3 = tiny;
    c3.layers = 3;
    herr e;
    CHECK("layout.middle_create", gpt_stage_create(&s, &c3, 1, 2, B, T, 1, &e) == 0);
    CHECK("layout.middle_no_wte", gpt_stage_wte(s, &off, &cnt) == -1);
    CHECK("layout.middle_params", gpt_stage_num_params(s) == 12 * C * C + 13 * C);
    gpt_stage_free(s);
}

/* [0,1) + [1,2) gives the loss and gradients of [0,2), with two micro-batches in flight. */
static void test_stage_split(void)
{
    herr e;
    struct gpt_stage *whole, *s0, *s1;
    if (gpt_stage_create(&whole, &tiny, 0, 2, B, T, 1, &e) < 0 ||
        gpt_stage_create(&s0, &tiny, 0, 1, B, T, 2, &e) < 0 ||
        gpt_stage_create(&s1, &tiny, 1, 2, B, T, 2, &e) < 0) {
        TEST_FAIL("split.create", "%s", e.msg);
        return;
    }
    gpt_stage_init_params(whole, 42);
    gpt_stage_init_params(s0, 42);
    gpt_stage_init_params(s1, 42);
    /* the same tensor has the same initial values whatever the split */
    const struct gpt_tensor *tw = find_tensor(whole, "h1.mlp.fc.weight");
    const struct gpt_tensor *t1 = find_tensor(s1, "h1.mlp.fc.weight");
    CHECK("split.init_same", tw && t1 &&
          memcmp(gpt_stage_params(whole) + tw->offset, gpt_stage_params(s1) + t1->offset,
                 tw->size * sizeof(float)) == 0);
    size_t o0, c0, o1, c1;
    gpt_stage_wte(s0, &o0, &c0);
    gpt_stage_wte(s1, &o1, &c1);
    CHECK("split.wte_copies_equal", c0 == c1 && memcmp(gpt_stage_params(s0) + o0,
                                                       gpt_stage_params(s1) + o1,
                                                       c0 * sizeof(float)) == 0);

    int tok[2][B * T], tgt[2][B * T];
    float lw[2], ls[2];
    two_whole(whole, tok, tgt, lw, 1);
    float act[2][B * T * 16], grad[B * T * 16];
    int rc = 0;
    for (int m = 0; m < 2; m++) /* both forwards first, as a pipeline would */
        rc |= gpt_stage_forward(s0, m, tok[m], NULL, NULL, act[m], NULL);
    for (int m = 0; m < 2; m++) {
        rc |= gpt_stage_forward(s1, m, NULL, act[m], tgt[m], NULL, &ls[m]);
        rc |= gpt_stage_backward(s1, m, NULL, grad, 0.5f);
        rc |= gpt_stage_backward(s0, m, grad, NULL, 0.5f);
    }
    CHECK_INT("split.calls_ok", rc, 0);
    CHECK_NEAR("split.loss0", ls[0], lw[0], 1e-6);
    CHECK_NEAR("split.loss1", ls[1], lw[1], 1e-6);
    /* every tensor of both stages against the whole model; wte = sum of both copies */
    float worst = 0.0f;
    const char *worst_name = "";
    struct gpt_stage *parts[2] = {s0, s1};
    for (int p = 0; p < 2; p++) {
        const struct gpt_tensor *t;
        int n = gpt_stage_tensors(parts[p], &t);
        for (int i = 0; i < n; i++) {
            const struct gpt_tensor *w = find_tensor(whole, t[i].name);
            if (!w || w->size != t[i].size) {
                worst = 1e9f;
                worst_name = t[i].name;
                continue;
            }
            if (strcmp(t[i].name, "wte") == 0)
                continue;
            float d = rel_err(gpt_stage_grads(parts[p]) + t[i].offset,
                                   gpt_stage_grads(whole) + w->offset, w->size);
            if (d > worst) {
                worst = d;
                worst_name = t[i].name;
            }
        }
    }
    if (worst <= 1e-5f)
        TEST_PASS("split.grads");
    else
        TEST_FAIL("split.grads", "%s differs by %g", worst_name, worst);
    float *sum = malloc(c0 * sizeof(float));
    for (size_t i = 0; i < c0; i++)
        sum[i] = gpt_stage_grads(s0)[o0 + i] + gpt_stage_grads(s1)[o1 + i];
    size_t ow, cw;
    gpt_stage_wte(whole, &ow, &cw);
    CHECK("split.wte_grad_sum", rel_err(sum, gpt_stage_grads(whole) + ow, cw) <= 1e-5f);
    free(sum);
    gpt_stage_free(whole);
    gpt_stage_free(s0);
    gpt_stage_free(s1);
}

/* Three stages [0,1) [1,3) [3,4) of a 4-layer model, micro-batches in 1F1B order with the
 * backward passes out of order: the middle stage passes activations and gradients both ways. */
static void test_three_stages(void)
{
    struct gpt_config c4 = tiny;
    c4.layers = 4;
    herr e;
    struct gpt_stage *whole, *st[3];
    int bounds[4] = {0, 1, 3, 4};
    if (gpt_stage_create(&whole, &c4, 0, 4, B, T, 1, &e) < 0) {
        TEST_FAIL("three.create", "%s", e.msg);
        return;
    }
    gpt_stage_init_params(whole, 11);
    for (int i = 0; i < 3; i++) {
        if (gpt_stage_create(&st[i], &c4, bounds[i], bounds[i + 1], B, T, 2, &e) < 0) {
            TEST_FAIL("three.create", "%s", e.msg);
            return;
        }
        gpt_stage_init_params(st[i], 11);
    }
    int tok[2][B * T], tgt[2][B * T];
    float lw[2], ls[2];
    two_whole(whole, tok, tgt, lw, 21);
    static float a01[2][B * T * 16], a12[2][B * T * 16], g21[B * T * 16], g10[B * T * 16];
    int rc = 0;
    for (int m = 0; m < 2; m++) {
        rc |= gpt_stage_forward(st[0], m, tok[m], NULL, NULL, a01[m], NULL);
        rc |= gpt_stage_forward(st[1], m, NULL, a01[m], NULL, a12[m], NULL);
    }
    for (int m = 1; m >= 0; m--) { /* micro-batch 1 first */
        rc |= gpt_stage_forward(st[2], m, NULL, a12[m], tgt[m], NULL, &ls[m]);
        rc |= gpt_stage_backward(st[2], m, NULL, g21, 0.5f);
        rc |= gpt_stage_backward(st[1], m, g21, g10, 0.5f);
        rc |= gpt_stage_backward(st[0], m, g10, NULL, 0.5f);
    }
    CHECK_INT("three.calls_ok", rc, 0);
    CHECK_NEAR("three.loss0", ls[0], lw[0], 1e-6);
    CHECK_NEAR("three.loss1", ls[1], lw[1], 1e-6);
    float worst = 0.0f;
    for (int i = 0; i < 3; i++) {
        const struct gpt_tensor *t;
        int n = gpt_stage_tensors(st[i], &t);
        for (int k = 0; k < n; k++) {
            const struct gpt_tensor *w = find_tensor(whole, t[k].name);
            if (strcmp(t[k].name, "wte") == 0 || !w)
                continue;
            float d = rel_err(gpt_stage_grads(st[i]) + t[k].offset,
                                   gpt_stage_grads(whole) + w->offset, w->size);
            if (d > worst)
                worst = d;
        }
    }
    CHECK("three.grads", worst <= 1e-5f);
    gpt_stage_free(whole);
    for (int i = 0; i < 3; i++)
        gpt_stage_free(st[i]);
}

/* Central differences in double-checked fp32: a coarse check independent of the reference. */
static void test_finite_difference(void)
{
    struct gpt_stage *s = whole_tiny("fd.create");
    if (!s)
        return;
    gpt_stage_init_params(s, 7);
    /* larger weights than GPT-2 init so every path carries signal */
    float *p = gpt_stage_params(s);
    for (size_t i = 0; i < gpt_stage_num_params(s); i++)
        p[i] *= 5.0f;
    int tok[B * T], tgt[B * T];
    ref_random_batch(tok, tgt, B * T, tiny.vocab, 3);
    float loss;
    gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss);
    gpt_stage_backward(s, 0, NULL, NULL, 1.0f);
    const struct gpt_tensor *t;
    int n = gpt_stage_tensors(s, &t);
    int bad = 0, checked = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            size_t idx = t[i].offset + (size_t)(k * 7919) % (t[i].size / (strcmp(t[i].name, "wte") ? 1 : 2));
            float g = gpt_stage_grads(s)[idx];
            float old = p[idx], h = 1e-2f, lp, lm;
            p[idx] = old + h;
            gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &lp);
            p[idx] = old - h;
            gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &lm);
            p[idx] = old;
            float fd = (lp - lm) / (2 * h);
            checked++;
            if (fabsf(fd - g) > 2e-3f + 0.03f * fabsf(g)) {
                bad++;
                printf("  fd mismatch %s[%zu]: analytic %g numeric %g\n", t[i].name,
                       idx - t[i].offset, g, fd);
            }
        }
    }
    CHECK("fd.gradients", bad == 0 && checked == 3 * n);
    gpt_stage_free(s);
}

static void test_bad_input(void)
{
    herr e;
    struct gpt_stage *s;
    struct gpt_config c = tiny;
    c.channels = 15;
    CHECK("bad.heads_divide", gpt_stage_create(&s, &c, 0, 2, B, T, 1, &e) == -1 &&
          strstr(e.msg, "multiple of heads"));
    CHECK("bad.range", gpt_stage_create(&s, &tiny, 1, 3, B, T, 1, &e) == -1 &&
          strstr(e.msg, "layer range"));
    CHECK("bad.T", gpt_stage_create(&s, &tiny, 0, 2, B, 17, 1, &e) == -1 &&
          strstr(e.msg, "max_seq"));
    c = tiny;
    c.max_seq = 65536; /* 65,536 x 65,536 rows: more than an int counts, refused before allocating */
    CHECK("bad.rows", gpt_stage_create(&s, &c, 0, 2, 65536, 65536, 1, &e) == -1 &&
          strstr(e.msg, "4294967296 rows"));
    c = tiny;
    c.padded_vocab = 0;
    CHECK("bad.pad_auto", gpt_config_check(&c, &e) == 0 && c.padded_vocab == 128);
    if (gpt_stage_create(&s, &tiny, 0, 2, B, T, 1, &e) < 0) {
        TEST_FAIL("bad.create", "%s", e.msg);
        return;
    }
    int tok[B * T], tgt[B * T];
    ref_random_batch(tok, tgt, B * T, tiny.vocab, 5);
    tok[3] = 61;
    float loss;
    CHECK("bad.token", gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss) == -1 &&
          strstr(gpt_stage_error(s), "token 61"));
    CHECK("bad.backward_without_forward", gpt_stage_backward(s, 0, NULL, NULL, 1.0f) == -1 &&
          strstr(gpt_stage_error(s), "no forward"));
    CHECK("bad.slot", gpt_stage_forward(s, 1, tok, NULL, tgt, NULL, &loss) == -1);
    gpt_stage_free(s);
}

/* The start-up compute probe: a positive rate (its value is the machine's, not asserted), and
 * bad arguments refused by name. */
static void test_gemm_probe(void)
{
    herr e = {0};
    double t = gpt_gemm_probe_tflops(64, 2, &e);
    CHECK("probe.positive_rate", t > 0 && t < 1e6);
    CHECK("probe.bad_dim", gpt_gemm_probe_tflops(4, 2, &e) < 0 && strstr(e.msg, "dim 4"));
    CHECK("probe.bad_budget", gpt_gemm_probe_tflops(64, 0, &e) < 0 && strstr(e.msg, "budget 0"));
}

/* The initial parameters: the same bits whatever the thread count (wte of 131,072 values is
 * drawn in parallel), and the values of the generator's definition, splitmix64's outputs in
 * sequence (two a pair) through Box-Muller, recomputed here one after another. */
static void test_init(void)
{
    struct gpt_config c = {.layers = 1, .channels = 128, .heads = 2, .vocab = 1024,
                           .padded_vocab = 1024, .max_seq = 8};
    herr e;
    struct gpt_stage *a = NULL, *b = NULL;
    if (gpt_stage_create(&a, &c, 0, 1, 1, 8, 1, &e) < 0 || gpt_stage_create(&b, &c, 0, 1, 1, 8, 1, &e) < 0) {
        TEST_FAIL("init.create", "%s", e.msg);
        gpt_stage_free(a);
        return;
    }
    int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    gpt_stage_init_params(a, 77);
    omp_set_num_threads(4);
    gpt_stage_init_params(b, 77);
    omp_set_num_threads(keep);
    size_t n = gpt_stage_num_params(a);
    CHECK("init.same_bits_any_thread_count",
          memcmp(gpt_stage_params(a), gpt_stage_params(b), n * sizeof(float)) == 0);
    /* wte by the definition: FNV-1a of "wte" mixed with the seed, splitmix64 in sequence */
    const struct gpt_tensor *t = find_tensor(a, "wte");
    uint64_t h = 1469598103934665603ULL, st;
    for (const char *ch = "wte"; *ch; ch++)
        h = (h ^ (uint8_t)*ch) * 1099511628211ULL;
    st = 77 ^ h;
    int bad = 0;
    const float *p = gpt_stage_params(a) + (t ? t->offset : 0);
    for (size_t i = 0; t && i < (size_t)c.vocab * c.channels; i += 2) {
        uint64_t z[2];
        for (int k = 0; k < 2; k++) {
            uint64_t x = (st += 0x9e3779b97f4a7c15ULL);
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
            z[k] = x ^ (x >> 31);
        }
        double u1 = ((z[0] >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        double u2 = (z[1] >> 11) * (1.0 / 9007199254740992.0);
        double r = sqrt(-2.0 * log(u1));
        bad += p[i] != (float)(0.02f * r * cos(2.0 * M_PI * u2)) ||
               p[i + 1] != (float)(0.02f * r * sin(2.0 * M_PI * u2));
    }
    CHECK("init.the_generator_in_sequence", t != NULL && bad == 0);
    gpt_stage_free(a);
    gpt_stage_free(b);
}

int main(void)
{
    test_init();
    test_gemm_probe();
    test_layout();
    test_stage_split();
    test_three_stages();
    test_finite_difference();
    test_bad_input();
    TEST_MAIN_END();
}
