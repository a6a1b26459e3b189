/* Tensor parallelism in the CPU engine (gpt_stage_create_tp): tp ranks, each a thread with its own
 * stage, summing through a shared buffer, give the loss, the activations passed on and every
 * gradient of the same stage without tensor parallelism (1e-5), for tp 2 and 4, on the whole
 * model, a first stage and a last stage. The vocabulary (60, padded to 128) leaves tp 4's last two
 * ranks only padding rows. Parameters round-trip through the whole layout. The same with every
 * rank running the micro-batch in token slices (TeraPipe: 3, 2 and 3 of the 8 tokens, forwards in
 * order and backwards in reverse) against the one unsliced stage. And tp 2 against the PyTorch
 * reference (tests/reference/gpt_tiny.bin): the loss to 1e-5, every gradient to 1e-4. */
#include "test.h"

#include <pthread.h>
#include <stdlib.h>

#include "gpt.h"
#include "gpt_reference.h"
#include "tp_group.h"

#define L 2
#define B 2
#define T 8


struct rank {
    struct tp_group *g;
    struct gpt_stage *s;
    const int *tokens, *targets;
    const float *in, *dout;
    float *out, *din, loss;
    int rc;
    int sliced, C; /* sliced: the micro-batch in the token slices CUTS (TeraPipe) */
};

/* the token slices of a sliced rank: [0, 3), [3, 5), [5, 8) */
#define NSLICES 3
static const int CUTS[NSLICES + 1] = {0, 3, 5, T};

/* The group's sum (tp_group.h). */
static int group_sum(void *ctx, float *buf, size_t n)
{
    return tp_group_sum(((struct rank *)ctx)->g, buf, n);
}

/* rows [t0, t1) of each of the B sequences of whole [B][T][C] to or from a slice's [B][S][C] */
static void slice_copy(float *slice, float *whole, int t0, int t1, int C, int to_slice)
{
    int S = t1 - t0;
    for (int b = 0; b < B; b++) {
        float *w = whole + ((size_t)b * T + t0) * C, *s = slice + (size_t)b * S * C;
        if (to_slice)
            memcpy(s, w, (size_t)S * C * sizeof(float));
        else
            memcpy(w, s, (size_t)S * C * sizeof(float));
    }
}

/* the micro-batch in slices: forwards in order (the loss their sum), backwards in reverse */
static int run_sliced(struct rank *r)
{
    size_t most = (size_t)B * T * r->C;
    float *in = calloc(most, sizeof(float)), *out = calloc(most, sizeof(float));
    int rc = !in || !out;
    r->loss = 0.0f;
    for (int k = 0; !rc && k < NSLICES; k++) {
        int t0 = CUTS[k], t1 = CUTS[k + 1];
        float l = 0.0f;
        if (r->in)
            slice_copy(in, (float *)r->in, t0, t1, r->C, 1);
        rc = gpt_stage_forward_slice(r->s, 0, t0, t1, r->tokens, r->in ? in : NULL, r->targets,
                                     r->out ? out : NULL, &l) != 0;
        if (r->out)
            slice_copy(out, r->out, t0, t1, r->C, 0);
        r->loss += l;
    }
    for (int k = NSLICES - 1; !rc && k >= 0; k--) {
        int t0 = CUTS[k], t1 = CUTS[k + 1];
        if (r->dout)
            slice_copy(in, (float *)r->dout, t0, t1, r->C, 1);
        rc = gpt_stage_backward_slice(r->s, 0, t0, t1, r->dout ? in : NULL, r->din ? out : NULL,
                                      1.0f) != 0;
        if (r->din)
            slice_copy(out, r->din, t0, t1, r->C, 0);
    }
    free(in);
    free(out);
    return rc;
}

static void *run_rank(void *arg)
{
    struct rank *r = arg;
    if (r->sliced)
        r->rc = run_sliced(r);
    else
        r->rc = gpt_stage_forward(r->s, 0, r->tokens, r->in, r->targets, r->out, &r->loss) ||
                gpt_stage_backward(r->s, 0, r->dout, r->din, 1.0f);
    return NULL;
}

static float max_abs(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Largest difference relative to the reference's largest magnitude. */
static double rel_diff(const float *a, const float *ref, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fabs((double)a[i] - ref[i]) > d ? fabs((double)a[i] - ref[i]) : d;
    float m = max_abs(ref, n);
    return d / (m > 0 ? m : 1);
}

/* tp ranks (sliced: each running the micro-batch in token slices) against one whole stage */
static void check_case(int tp, int first, int last, int sliced)
{
    char name[128];
#define CASE_NAME(what)                                                                            \
    snprintf(name, sizeof name, "tp %d%s, layers [%d, %d): " what, tp, sliced ? " sliced" : "",   \
             first, last)
    struct gpt_config c = {.layers = L, .channels = 32, .heads = 4, .vocab = 60, .max_seq = T};
    herr e = {0};
    struct gpt_stage *ref = NULL;
    if (gpt_stage_create(&ref, &c, first, last, B, T, 1, &e) != 0) {
        TEST_FAIL("reference stage", "%s", e.msg);
        return;
    }
    gpt_stage_init_params(ref, 7);
    size_t BTC = (size_t)B * T * c.channels;
    int tokens[B * T], targets[B * T];
    float *in = calloc(BTC, sizeof(float)), *dout = calloc(BTC, sizeof(float));
    float *out_ref = calloc(BTC, sizeof(float)), *din_ref = calloc(BTC, sizeof(float));
    unsigned seed = 3;
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int)(rand_r(&seed) % 60);
        targets[i] = (int)(rand_r(&seed) % 60);
    }
    for (size_t i = 0; i < BTC; i++) {
        in[i] = (float)(rand_r(&seed) % 2001 - 1000) * 1e-3f;
        dout[i] = (float)(rand_r(&seed) % 2001 - 1000) * 1e-5f;
    }
    int is_first = first == 0, is_last = last == L;
    struct rank rr = {.s = ref, .tokens = tokens, .targets = is_last ? targets : NULL,
                      .in = is_first ? NULL : in, .dout = is_last ? NULL : dout,
                      .out = is_last ? NULL : out_ref, .din = is_first ? NULL : din_ref};
    run_rank(&rr);
    CASE_NAME("reference runs");
    CHECK(name, rr.rc == 0);

    struct tp_group g;
    if (tp_group_init(&g, tp, BTC * 16) != 0) {
        TEST_FAIL("tp group", "out of memory");
        return;
    }
    struct rank rk[4];
    pthread_t th[4];
    int ok = 1;
    size_t full = gpt_stage_num_params(ref);
    float *grads = calloc(full, sizeof(float)), *params = calloc(full, sizeof(float));
    for (int t = 0; t < tp; t++) {
        rk[t] = (struct rank){.g = &g, .tokens = tokens, .targets = is_last ? targets : NULL,
                              .in = is_first ? NULL : in, .dout = is_last ? NULL : dout,
                              .out = is_last ? NULL : calloc(BTC, sizeof(float)),
                              .din = is_first ? NULL : calloc(BTC, sizeof(float)),
                              .sliced = sliced, .C = c.channels};
        if (gpt_stage_create_tp(&rk[t].s, &c, first, last, B, T, 1, tp, t, &e) != 0) {
            TEST_FAIL("tensor-parallel stage", "%s", e.msg);
            ok = 0;
            break;
        }
        gpt_stage_set_tp_sum(rk[t].s, group_sum, &rk[t]);
        gpt_stage_init_params(rk[t].s, 7);
    }
    for (int t = 0; ok && t < tp; t++)
        pthread_create(&th[t], NULL, run_rank, &rk[t]);
    for (int t = 0; ok && t < tp; t++)
        pthread_join(th[t], NULL);
    if (ok) {
        int runs = 1;
        double dl = 0, da = 0;
        for (int t = 0; t < tp; t++) {
            runs = runs && rk[t].rc == 0;
            gpt_stage_to_full(rk[t].s, t, gpt_stage_grads(rk[t].s), grads);
            gpt_stage_to_full(rk[t].s, t, gpt_stage_params(rk[t].s), params);
            if (is_last)
                dl = fmax(dl, fabs(rk[t].loss - rr.loss) / rr.loss);
            if (!is_last)
                da = fmax(da, rel_diff(rk[t].out, out_ref, BTC));
            if (!is_first)
                da = fmax(da, rel_diff(rk[t].din, din_ref, BTC));
        }
        CASE_NAME("every rank runs");
        CHECK(name, runs);
        CASE_NAME("the whole layout's size");
        CHECK_INT(name, gpt_stage_full_params(rk[0].s), full);
        CASE_NAME("initial parameters equal");
        CHECK(name, memcmp(params, gpt_stage_params(ref), full * sizeof(float)) == 0);
        CASE_NAME("loss and activations (1e-5)");
        CHECK(name, dl <= 1e-5 && da <= 1e-5);
        if (!(dl <= 1e-5 && da <= 1e-5))
            printf("  loss %.3g activations %.3g\n", dl, da);
        /* every tensor's gradient, against the reference's */
        const struct gpt_tensor *tt;
        int nt = gpt_stage_tensors(ref, &tt), bad = -1;
        double worst = 0;
        for (int i = 0; i < nt; i++) {
            double d = rel_diff(grads + tt[i].offset, gpt_stage_grads(ref) + tt[i].offset, tt[i].size);
            if (d > worst)
                worst = d;
            if (d > 1e-5 && bad < 0)
                bad = i;
        }
        CASE_NAME("every gradient (1e-5)");
        CHECK(name, bad < 0 && max_abs(grads, full) > 0);
        if (bad >= 0)
            printf("  %s differs by %.3g\n", tt[bad].name, worst);
    }
    for (int t = 0; t < tp; t++) {
        gpt_stage_free(rk[t].s);
        free(rk[t].out);
        free(rk[t].din);
    }
    tp_group_destroy(&g);
    free(grads);
    free(params);
    free(in);
    free(dout);
    free(out_ref);
    free(din_ref);
    gpt_stage_free(ref);
}

/* tp 2 on the reference model, parameters and batch: loss and gradients against PyTorch's. */
static void check_reference(void)
{
    struct ref r = {0};
    int loaded = load_ref(&r) == 0;
    CHECK("reference: " REF_FILE " read (from the repository root)", loaded);
    if (!loaded)
        return;
    struct gpt_config c = ref_config(&r);
    int b = r.hdr[8], t = r.hdr[9], tp = 2;
    struct tp_group g;
    int ok = tp_group_init(&g, tp, (size_t)b * t * (c.channels + 8)) == 0;
    struct rank rk[2] = {{0}};
    pthread_t th[2];
    herr e = {0};
    for (int k = 0; k < tp; k++) {
        rk[k] = (struct rank){.g = &g, .tokens = r.tokens, .targets = r.targets};
        ok = ok && gpt_stage_create_tp(&rk[k].s, &c, 0, c.layers, b, t, 1, tp, k, &e) == 0;
        if (!ok)
            break;
        gpt_stage_set_tp_sum(rk[k].s, group_sum, &rk[k]);
        gpt_stage_from_full(rk[k].s, r.init, gpt_stage_params(rk[k].s));
    }
    CHECK("reference: tp 2 stages of the reference model", ok);
    size_t n = (size_t)r.hdr[11];
    float *grads = calloc(n, sizeof(float));
    if (ok && grads) {
        for (int k = 0; k < tp; k++)
            pthread_create(&th[k], NULL, run_rank, &rk[k]);
        for (int k = 0; k < tp; k++)
            pthread_join(th[k], NULL);
        CHECK("reference: both ranks run", rk[0].rc == 0 && rk[1].rc == 0);
        CHECK_NEAR("reference: tp 2 loss = PyTorch's", rk[0].loss, r.losses[0], 1e-5);
        for (int k = 0; k < tp; k++)
            gpt_stage_to_full(rk[k].s, k, gpt_stage_grads(rk[k].s), grads);
        const struct gpt_tensor *tt;
        int nt = gpt_stage_tensors(rk[0].s, &tt);
        int bad = ref_bad_tensors(tt, nt, grads, r.grads, 1, 1e-4);
        CHECK("reference: tp 2 gradients = PyTorch's (1e-4, every tensor)", bad == 0 && nt > 10);
    }
    for (int k = 0; k < tp; k++)
        if (rk[k].s)
            gpt_stage_free(rk[k].s);
    tp_group_destroy(&g);
    free(grads);
    free_ref(&r);
}

int main(void)
{
    check_reference();
    for (int tp = 2; tp <= 4; tp *= 2)
        for (int sliced = 0; sliced <= 1; sliced++) {
            check_case(tp, 0, L, sliced);
            check_case(tp, 0, 1, sliced);
            check_case(tp, 1, L, sliced);
        }
    struct gpt_config c = {.layers = L, .channels = 32, .heads = 4, .vocab = 60, .max_seq = T};
    struct gpt_stage *s = NULL;
    herr e = {0};
    CHECK("tp 3 (does not divide 4 heads) refused",
          gpt_stage_create_tp(&s, &c, 0, L, B, T, 1, 3, 0, &e) != 0 && strstr(e.msg, "divide"));
    CHECK("rank outside the group refused",
          gpt_stage_create_tp(&s, &c, 0, L, B, T, 1, 2, 2, &e) != 0 && strstr(e.msg, "rank 2 of 2"));
    /* a group without a sum function: the forward says so instead of computing a part */
    if (gpt_stage_create_tp(&s, &c, 0, L, B, T, 1, 2, 0, &e) == 0) {
        int tok[B * T] = {0};
        float loss;
        CHECK("no sum function: forward refused",
              gpt_stage_forward(s, 0, tok, NULL, tok, NULL, &loss) != 0 &&
                  strstr(gpt_stage_error(s), "no sum function"));
        gpt_stage_free(s);
    }
    TEST_MAIN_END();
}
