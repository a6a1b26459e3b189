/* The GPT stage and AdamW against PyTorch (float64): tests/reference/gpt_tiny.bin, written by
 * tests/reference/make_gpt_reference.py. Relative error of a tensor = max |got - want| / max |want|
 * over the tensor; the loss must match to 1e-5, everything else to 1e-4. */
#include <stdint.h>
#include <stdlib.h>

#include "gpt.h"
#include "gpt_reference.h"
#include "optimizer.h"
#include "test.h"

/* one CHECK per tensor */
static void check_tensors(struct gpt_stage *s, const char *what, const float *got,
                          const float *want, double tol, int skip_key_bias)
{
    const struct gpt_tensor *t;
    int n = gpt_stage_tensors(s, &t);
    for (int i = 0; i < n; i++) {
        char name[96];
        snprintf(name, sizeof name, "ref.%s.%s", what, t[i].name);
        double err = rel_err(got + t[i].offset, want + t[i].offset, t[i].size);
        size_t len = strlen(t[i].name), C = t[i].size / 3;
        if (skip_key_bias && len > 13 && strcmp(t[i].name + len - 13, "attn.qkv.bias") == 0) {
            /* The key bias adds the same q.b_k to every score of a row, which the softmax
             * cancels: its gradient is exactly zero, so in both engines it is round-off noise,
             * which Adam scales up to +-lr. Compare the query and value biases only. */
            double eq = rel_err(got + t[i].offset, want + t[i].offset, C);
            double ev = rel_err(got + t[i].offset + 2 * C, want + t[i].offset + 2 * C, C);
            err = eq > ev ? eq : ev;
        }
        if (err <= tol)
            TEST_PASS(name);
        else
            TEST_FAIL(name, "relative error %.3g > %.3g", err, tol);
    }
}

int main(void)
{
    struct ref r = {0};
    if (load_ref(&r) < 0) {
        TEST_FAIL("ref.load", "cannot read %s (run from the repository root)", REF_FILE);
        free_ref(&r);
        TEST_MAIN_END();
    }
    struct gpt_config c = ref_config(&r);
    int B = r.hdr[8], T = r.hdr[9], steps = r.hdr[10];
    herr e;
    struct gpt_stage *s;
    if (gpt_stage_create(&s, &c, 0, c.layers, B, T, 1, &e) < 0) {
        TEST_FAIL("ref.create", "%s", e.msg);
        free_ref(&r);
        TEST_MAIN_END();
    }
    size_t n = gpt_stage_num_params(s);
    CHECK_INT("ref.num_params", n, r.hdr[11]);
    if (n != (size_t)r.hdr[11]) {
        gpt_stage_free(s);
        free_ref(&r);
        TEST_MAIN_END();
    }
    float *p = gpt_stage_params(s);
    memcpy(p, r.init, n * sizeof(float));
    float loss = 0.0f;
    CHECK_INT("ref.forward", gpt_stage_forward(s, 0, r.tokens, NULL, r.targets, NULL, &loss), 0);
    CHECK_NEAR("ref.loss", loss, r.losses[0], 1e-5);
    /* logits: the stage keeps Vp columns per row, the reference V */
    const float *lg = gpt_stage_logits(s, 0);
    size_t BT = (size_t)B * T, V = (size_t)c.vocab;
    float *lv = malloc(BT * V * sizeof(float));
    for (size_t i = 0; i < BT && lg; i++)
        memcpy(lv + i * V, lg + i * (size_t)c.padded_vocab, V * sizeof(float));
    double lerr = lg ? rel_err(lv, r.logits, BT * V) : INFINITY;
    if (lerr <= 1e-4)
        TEST_PASS("ref.logits");
    else
        TEST_FAIL("ref.logits", "relative error %.3g", lerr);
    free(lv);
    gpt_stage_zero_grads(s);
    CHECK_INT("ref.backward", gpt_stage_backward(s, 0, NULL, NULL, 1.0f), 0);
    check_tensors(s, "grad", gpt_stage_grads(s), r.grads, 1e-4, 0);
    /* the key-bias gradient is zero in exact arithmetic (see check_tensors) */
    const struct gpt_tensor *tt;
    int ntt = gpt_stage_tensors(s, &tt);
    double kmax = 0.0, gmax = 0.0;
    for (int i = 0; i < ntt; i++)
        if (strstr(tt[i].name, "attn.qkv.bias"))
            for (size_t k = 0; k < tt[i].size; k++) {
                double g = fabs(gpt_stage_grads(s)[tt[i].offset + k]);
                if (k >= tt[i].size / 3 && k < 2 * tt[i].size / 3) {
                    if (g > kmax)
                        kmax = g;
                } else if (g > gmax) {
                    gmax = g;
                }
            }
    CHECK("ref.key_bias_grad_zero", kmax <= 1e-5 * gmax && gmax > 0.0);

    /* AdamW steps from the same start, decay on matrices only */
    memcpy(p, r.init, n * sizeof(float));
    struct adamw_config o = {r.hyper[1], r.hyper[2], r.hyper[3], r.hyper[4]};
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(s, &t);
    for (int k = 0; k < steps && m && v; k++) {
        gpt_stage_zero_grads(s);
        gpt_stage_forward(s, 0, r.tokens, NULL, r.targets, NULL, &loss);
        gpt_stage_backward(s, 0, NULL, NULL, 1.0f);
        char name[32];
        snprintf(name, sizeof name, "ref.step%d.loss", k);
        CHECK_NEAR(name, loss, r.losses[k], 1e-5);
        /* in two ranges split mid-tensor, as ZeRO-1 shards would */
        size_t mid = n / 2 + 3;
        adamw_update(&o, t, nt, p, gpt_stage_grads(s), m, v, 0, mid, r.hyper[0], k + 1, 1.0f);
        adamw_update(&o, t, nt, p, gpt_stage_grads(s), m + mid, v + mid, mid, n, r.hyper[0],
                     k + 1, 1.0f);
    }
    check_tensors(s, "adamw", p, r.final, 1e-4, 1);
    free(m);
    free(v);
    gpt_stage_free(s);
    free_ref(&r);
    TEST_MAIN_END();
}
