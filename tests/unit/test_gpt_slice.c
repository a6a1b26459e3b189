/* TeraPipe token slices in the CPU engine: a micro-batch forwarded and backwarded slice by slice
 * (uneven slices, several sequences, two micro-batches in flight, a two-stage split) equals the
 * unsliced pass: losses, activations passed on, every gradient; on the PyTorch reference model
 * (tests/reference/gpt_tiny.bin) the sliced loss and gradients equal PyTorch's. Order rules are
 * enforced. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_reference.h"
#include "test.h"

static const struct gpt_config cfg = {
    .layers = 3, .channels = 32, .heads = 4, .vocab = 61, .padded_vocab = 64, .max_seq = 64};
enum { B = 3, T = 64 };
static const int cuts[] = {0, 5, 22, 64}; /* slices of 5, 17 and 42 tokens */
enum { S = 3 };

/* [B][T][C] <-> the slice [t0, t1) of every sequence, [B][t1 - t0][C] */
static void take_slice(float *dst, const float *src, int t0, int t1, int C)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * (t1 - t0) * C, src + ((size_t)b * T + t0) * C,
               (size_t)(t1 - t0) * C * sizeof(float));
}
static void put_slice(float *dst, const float *src, int t0, int t1, int C)
{
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * T + t0) * C, src + (size_t)b * (t1 - t0) * C,
               (size_t)(t1 - t0) * C * sizeof(float));
}

/* One whole model: two micro-batches in flight (slots 0 and 1), sliced against unsliced. */
static void test_whole_model(void)
{
    struct gpt_stage *ref = NULL, *sl = NULL;
    herr e;
    int ok = gpt_stage_create(&ref, &cfg, 0, cfg.layers, B, T, 2, &e) == 0 &&
             gpt_stage_create(&sl, &cfg, 0, cfg.layers, B, T, 2, &e) == 0;
    CHECK("two whole-model stages", ok);
    if (!ok)
        return;
    gpt_stage_init_params(ref, 7);
    gpt_stage_init_params(sl, 7);
    int tok[2][B * T], tgt[2][B * T];
    ref_random_batch(tok[0], tgt[0], B * T, cfg.vocab, 11);
    ref_random_batch(tok[1], tgt[1], B * T, cfg.vocab, 12);
    float lref = 0, lsl = 0, l;
    for (int m = 0; m < 2; m++) {
        ok &= gpt_stage_forward(ref, m, tok[m], NULL, tgt[m], NULL, &l) == 0;
        lref += l;
    }
    for (int m = 0; m < 2; m++)
        ok &= gpt_stage_backward(ref, m, NULL, NULL, 0.5f) == 0;
    /* interleaved as a pipeline would: m0 s0, m0 s1, m1 s0, m0 s2, m1 s1, m1 s2; backwards in
     * reverse per micro-batch, interleaved too */
    static const int order[][2] = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {1, 2}};
    for (int u = 0; u < 6; u++) {
        int m = order[u][0], k = order[u][1];
        ok &= gpt_stage_forward_slice(sl, m, cuts[k], cuts[k + 1], tok[m], NULL, tgt[m], NULL,
                                      &l) == 0;
        lsl += l;
    }
    static const int border[][2] = {{0, 2}, {1, 2}, {0, 1}, {0, 0}, {1, 1}, {1, 0}};
    for (int u = 0; u < 6; u++) {
        int m = border[u][0], k = border[u][1];
        ok &= gpt_stage_backward_slice(sl, m, cuts[k], cuts[k + 1], NULL, NULL, 0.5f) == 0;
    }
    CHECK("sliced passes run", ok);
    if (!ok)
        printf("  %s\n", gpt_stage_error(sl));
    CHECK("loss: the slices' shares add up to the unsliced loss (1e-5)",
          fabsf(lsl - lref) <= 1e-5f * fabsf(lref));
    float d = rel_err(gpt_stage_grads(sl), gpt_stage_grads(ref), gpt_stage_num_params(ref));
    CHECK("every gradient equals the unsliced backward's (1e-5)", d <= 1e-5f);
    if (d > 1e-5f)
        printf("  max relative gradient difference %g\n", d);
    gpt_stage_free(ref);
    gpt_stage_free(sl);
}

/* A two-stage split, sliced: the activations passed on, the gradients passed back and every
 * gradient of both stages equal the unsliced ones. */
static void test_two_stages(void)
{
    struct gpt_stage *r0 = NULL, *r1 = NULL, *s0 = NULL, *s1 = NULL;
    herr e;
    int C = cfg.channels, ok = gpt_stage_create(&r0, &cfg, 0, 1, B, T, 1, &e) == 0 &&
                               gpt_stage_create(&r1, &cfg, 1, 3, B, T, 1, &e) == 0 &&
                               gpt_stage_create(&s0, &cfg, 0, 1, B, T, 1, &e) == 0 &&
                               gpt_stage_create(&s1, &cfg, 1, 3, B, T, 1, &e) == 0;
    CHECK("four stages", ok);
    if (!ok)
        return;
    gpt_stage_init_params(r0, 3);
    gpt_stage_init_params(r1, 3);
    gpt_stage_init_params(s0, 3);
    gpt_stage_init_params(s1, 3);
    size_t BTC = (size_t)B * T * C;
    float *act = calloc(BTC, 4), *dact = calloc(BTC, 4), *sact = calloc(BTC, 4),
          *sdact = calloc(BTC, 4), *buf = calloc(BTC, 4), *dbuf = calloc(BTC, 4);
    int tok[B * T], tgt[B * T];
    ref_random_batch(tok, tgt, B * T, cfg.vocab, 5);
    float lref = 0, lsl = 0, l;
    ok = gpt_stage_forward(r0, 0, tok, NULL, NULL, act, NULL) == 0 &&
         gpt_stage_forward(r1, 0, NULL, act, tgt, NULL, &lref) == 0 &&
         gpt_stage_backward(r1, 0, NULL, dact, 1.0f) == 0 &&
         gpt_stage_backward(r0, 0, dact, NULL, 1.0f) == 0;
    for (int k = 0; ok && k < S; k++) {
        int t0 = cuts[k], t1 = cuts[k + 1];
        ok = gpt_stage_forward_slice(s0, 0, t0, t1, tok, NULL, NULL, buf, NULL) == 0 &&
             gpt_stage_forward_slice(s1, 0, t0, t1, NULL, buf, tgt, NULL, &l) == 0;
        put_slice(sact, buf, t0, t1, C);
        lsl += l;
    }
    for (int k = S - 1; ok && k >= 0; k--) {
        int t0 = cuts[k], t1 = cuts[k + 1];
        ok = gpt_stage_backward_slice(s1, 0, t0, t1, NULL, dbuf, 1.0f) == 0;
        put_slice(sdact, dbuf, t0, t1, C);
        take_slice(buf, sdact, t0, t1, C);
        ok = ok && gpt_stage_backward_slice(s0, 0, t0, t1, buf, NULL, 1.0f) == 0;
    }
    CHECK("two stages, sliced, run", ok);
    CHECK("activations passed on equal the unsliced ones (1e-5)", rel_err(sact, act, BTC) <= 1e-5f);
    CHECK("gradients passed back equal the unsliced ones (1e-5)", rel_err(sdact, dact, BTC) <= 1e-5f);
    CHECK("loss equal (1e-5)", fabsf(lsl - lref) <= 1e-5f * fabsf(lref));
    float d0 = rel_err(gpt_stage_grads(s0), gpt_stage_grads(r0), gpt_stage_num_params(r0));
    float d1 = rel_err(gpt_stage_grads(s1), gpt_stage_grads(r1), gpt_stage_num_params(r1));
    CHECK("first stage's gradients (embeddings, block 0) equal (1e-5)", d0 <= 1e-5f);
    CHECK("last stage's gradients (blocks 1-2, head) equal (1e-5)", d1 <= 1e-5f);
    if (d0 > 1e-5f || d1 > 1e-5f)
        printf("  max relative gradient differences %g %g\n", d0, d1);

    /* order rules */
    ok = gpt_stage_forward_slice(s0, 0, 0, 5, tok, NULL, NULL, buf, NULL) == 0;
    CHECK("a slice out of order is refused, naming the rule",
          ok && gpt_stage_forward_slice(s0, 0, 22, 64, tok, NULL, NULL, buf, NULL) != 0 &&
              strstr(gpt_stage_error(s0), "slices go in order"));
    CHECK("backward before the micro-batch's forward is complete is refused",
          gpt_stage_backward_slice(s0, 0, 0, 5, buf, NULL, 1.0f) != 0);
    CHECK("an empty slice is refused", gpt_stage_forward_slice(s0, 0, 5, 5, tok, NULL, NULL, buf, NULL) != 0 &&
                                           strstr(gpt_stage_error(s0), "is empty"));
    ok = gpt_stage_forward_slice(s0, 0, 5, 64, tok, NULL, NULL, buf, NULL) == 0;
    CHECK("backward not starting at the last slice is refused",
          ok && gpt_stage_backward_slice(s0, 0, 0, 5, buf, NULL, 1.0f) != 0 &&
              strstr(gpt_stage_error(s0), "slices go in reverse"));
    free(act);
    free(dact);
    free(sact);
    free(sdact);
    free(buf);
    free(dbuf);
    gpt_stage_free(r0);
    gpt_stage_free(r1);
    gpt_stage_free(s0);
    gpt_stage_free(s1);
}

/* The reference model and batch in slices of 3, 1 and 4 of its 8 tokens, against PyTorch. */
static void test_reference(void)
{
    struct ref r = {0};
    if (load_ref(&r) < 0) {
        TEST_FAIL("reference: load", "cannot read %s (run from the repository root)", REF_FILE);
        free_ref(&r);
        return;
    }
    struct gpt_config c = ref_config(&r);
    int b = r.hdr[8], t = r.hdr[9];
    static const int rc[] = {0, 3, 4, 8};
    struct gpt_stage *st = NULL;
    herr e;
    int ok = t == 8 && gpt_stage_create(&st, &c, 0, c.layers, b, t, 1, &e) == 0;
    CHECK("reference: a whole-model stage of 8 tokens", ok);
    float loss = 0, l;
    if (ok) {
        memcpy(gpt_stage_params(st), r.init, (size_t)r.hdr[11] * sizeof(float));
        for (int k = 0; ok && k < 3; k++) {
            ok = gpt_stage_forward_slice(st, 0, rc[k], rc[k + 1], r.tokens, NULL, r.targets, NULL,
                                         &l) == 0;
            loss += l;
        }
        for (int k = 2; ok && k >= 0; k--)
            ok = gpt_stage_backward_slice(st, 0, rc[k], rc[k + 1], NULL, NULL, 1.0f) == 0;
        CHECK("reference: sliced passes run", ok);
        CHECK_NEAR("reference: sliced loss = PyTorch's", loss, r.losses[0], 1e-5);
        const struct gpt_tensor *tt;
        int nt = gpt_stage_tensors(st, &tt);
        int bad = ref_bad_tensors(tt, nt, gpt_stage_grads(st), r.grads, 0, 1e-4);
        CHECK("reference: sliced gradients = PyTorch's (1e-4, every tensor)", ok && bad == 0 && nt > 10);
    }
    gpt_stage_free(st);
    free_ref(&r);
}

/* A forward-only stage (gpt_stage_create_forward_only: no gradients, the blocks sharing one set
 * of activations but q, k, v) computes what the training stage computes, bit for bit: the
 * whole micro-batch's loss and logits, and slice by slice (two micro-batches interleaved, one
 * slice given new tokens as a sampler gives them), its logits; a stage after the first passes
 * on the same activations. Backward is refused. */
static void test_forward_only(void)
{
    struct gpt_stage *ref = NULL, *fo = NULL;
    herr e;
    int ok = gpt_stage_create(&ref, &cfg, 0, cfg.layers, B, T, 2, &e) == 0 &&
             gpt_stage_create_forward_only(&fo, &cfg, 0, cfg.layers, B, T, 2, &e) == 0;
    CHECK("forward-only: a whole-model stage beside a training one", ok);
    if (!ok)
        return;
    gpt_stage_init_params(ref, 5);
    memcpy(gpt_stage_params(fo), gpt_stage_params(ref), gpt_stage_num_params(ref) * sizeof(float));
    CHECK("forward-only: no gradients", gpt_stage_grads(fo) == NULL && gpt_stage_grads(ref) != NULL);
    int tok[2][B * T], tgt[2][B * T];
    ref_random_batch(tok[0], tgt[0], B * T, cfg.vocab, 21);
    ref_random_batch(tok[1], tgt[1], B * T, cfg.vocab, 22);
    size_t nlog = (size_t)B * T * cfg.padded_vocab;
    float lr, lf;
    ok = gpt_stage_forward(ref, 0, tok[0], NULL, tgt[0], NULL, &lr) == 0 &&
         gpt_stage_forward(fo, 0, tok[0], NULL, tgt[0], NULL, &lf) == 0;
    CHECK_MSG("forward-only: the whole micro-batch's loss and logits, bit for bit",
              ok && lr == lf && !memcmp(gpt_stage_logits(ref, 0), gpt_stage_logits(fo, 0),
                                        nlog * sizeof(float)), "ok %d, %.9g %.9g", ok, lr, lf);
    /* slices of both micro-batches interleaved; micro-batch 1's second slice given new tokens */
    static const int order[][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}};
    ok = 1;
    for (int u = 0; u < 6 && ok; u++) {
        int m = order[u][0], k = order[u][1];
        if (m == 1 && k == 1)
            for (int b = 0; b < B; b++)
                tok[1][b * T + cuts[1]] = (tok[1][b * T + cuts[1]] + 7) % cfg.vocab;
        ok = gpt_stage_forward_slice(ref, m, cuts[k], cuts[k + 1], tok[m], NULL, tgt[m], NULL,
                                     &lr) == 0 &&
             gpt_stage_forward_slice(fo, m, cuts[k], cuts[k + 1], tok[m], NULL, tgt[m], NULL,
                                     &lf) == 0 && lr == lf;
    }
    CHECK_MSG("forward-only: slices of two micro-batches interleaved, each slice's loss the same",
              ok, "%s", gpt_stage_error(fo));
    CHECK("forward-only: their logits, bit for bit",
          ok && !memcmp(gpt_stage_logits(ref, 0), gpt_stage_logits(fo, 0), nlog * sizeof(float)) &&
          !memcmp(gpt_stage_logits(ref, 1), gpt_stage_logits(fo, 1), nlog * sizeof(float)));
    CHECK_MSG("forward-only: backward refused",
              gpt_stage_backward(fo, 0, NULL, NULL, 1.0f) != 0 &&
              strstr(gpt_stage_error(fo), "forward-only"), "%s", gpt_stage_error(fo));
    gpt_stage_zero_grads(fo); /* nothing to clear: must not crash */
    gpt_stage_free(ref);
    gpt_stage_free(fo);

    /* a first stage of 2 layers: the activations it passes on */
    ok = gpt_stage_create(&ref, &cfg, 0, 2, B, T, 1, &e) == 0 &&
         gpt_stage_create_forward_only(&fo, &cfg, 0, 2, B, T, 1, &e) == 0;
    float *oa = malloc((size_t)B * T * cfg.channels * sizeof(float));
    float *ob = malloc((size_t)B * T * cfg.channels * sizeof(float));
    if (ok && oa && ob) {
        gpt_stage_init_params(ref, 5);
        gpt_stage_init_params(fo, 5);
        ok = gpt_stage_forward(ref, 0, tok[0], NULL, NULL, oa, NULL) == 0 &&
             gpt_stage_forward(fo, 0, tok[0], NULL, NULL, ob, NULL) == 0;
    }
    CHECK("forward-only: a first stage passes on the same activations, bit for bit",
          ok && oa && ob && !memcmp(oa, ob, (size_t)B * T * cfg.channels * sizeof(float)));
    free(oa);
    free(ob);
    gpt_stage_free(ref);
    gpt_stage_free(fo);
}

int main(void)
{
    test_reference();
    test_whole_model();
    test_two_stages();
    test_forward_only();
    TEST_MAIN_END();
}
