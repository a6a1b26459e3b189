#include "trainer_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "optimizer.h"

const struct gpt_config TRAINER_TEST_MODEL = {4, 32, 4, 64, 128, 16};

static uint32_t hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* Window w of the synthetic corpus: token t of the sequence. */
static int corpus(uint64_t w, int t)
{
    uint32_t h = hash(w * 131 + (uint64_t)t);
    return (int)((w + (uint64_t)t * 3 + (h % 4 == 0 ? h : 0)) % (uint64_t)TRAINER_TEST_MODEL.vocab);
}

int trainer_test_batch(void *ctx, uint64_t k, int r, int replicas, int *tok, int *tgt, herr *e)
{
    (void)ctx, (void)e;
    enum { B = TRAINER_TEST_B, T = TRAINER_TEST_T };
    for (int b = 0; b < B; b++) {
        uint64_t w = (k * (uint64_t)replicas + (uint64_t)r) * B + (uint64_t)b;
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = corpus(w, t);
            tgt[b * T + t] = corpus(w, t + 1);
        }
    }
    return 0;
}

void trainer_test_config(struct trainer_config *c, int M, long steps, long lr_steps,
                         unsigned long long seed)
{
    trainer_config_defaults(c);
    c->model = TRAINER_TEST_MODEL;
    c->B = TRAINER_TEST_B;
    c->T = TRAINER_TEST_T;
    c->micro_batches = M;
    c->steps = steps;
    c->lr = (struct lr_schedule){.max_lr = 1e-3f, .warmup_steps = 3, .total_steps = lr_steps,
                                 .min_lr_ratio = 0.1f};
    c->grad_clip = 1.0f;
    c->seed = seed;
    c->bucket_floats = 3000;
}

int trainer_test_reference(int MG, long steps, unsigned long long seed, int bf16, uint32_t skips,
                           float *losses, struct gpt_stage **out, herr *e)
{
    enum { B = TRAINER_TEST_B, T = TRAINER_TEST_T };
    const struct gpt_config *model = &TRAINER_TEST_MODEL;
    struct trainer_config c;
    trainer_test_config(&c, MG, steps, steps, seed);
    struct gpt_stage *s;
    if (gpt_stage_create(&s, model, 0, model->layers, B, T, 1, e) != 0)
        return -1;
    gpt_stage_init_params(s, c.seed);
    size_t n = gpt_stage_num_params(s);
    float *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v), *master = malloc(n * sizeof *master);
    int *tok = malloc(B * T * sizeof *tok), *tgt = malloc(B * T * sizeof *tgt);
    if (!m || !v || !master || !tok || !tgt)
        return herr_set(e, "oom");
    float *p = gpt_stage_params(s);
    memcpy(master, p, n * sizeof *master);
    const struct gpt_tensor *tens;
    int nt = gpt_stage_tensors(s, &tens);
    for (long step = 0; step < steps; step++) {
        for (size_t i = 0; bf16 && i < n; i++)
            p[i] = bf16_round(master[i]);
        gpt_stage_zero_grads(s);
        float sum = 0;
        for (int mb = 0; mb < MG; mb++) {
            float loss;
            trainer_test_batch(NULL, (uint64_t)(step * MG + mb), 0, 1, tok, tgt, e);
            if (gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss) != 0 ||
                gpt_stage_backward(s, 0, NULL, NULL, 1.0f / MG) != 0)
                return herr_set(e, "%s", gpt_stage_error(s));
            sum += loss;
        }
        losses[step] = sum / MG;
        if (step < 32 && (skips >> step & 1u))
            continue;
        double sq = grad_sq_norm(gpt_stage_grads(s), 0, n);
        adamw_update(&c.adamw, tens, nt, bf16 ? master : p, gpt_stage_grads(s), m, v, 0, n,
                     lr_at(&c.lr, step), step + 1, grad_clip_scale(sq, c.grad_clip));
    }
    if (bf16)
        memcpy(p, master, n * sizeof *p);
    free(master);
    free(m);
    free(v);
    free(tok);
    free(tgt);
    *out = s;
    return 0;
}

int trainer_test_table(struct plan_doc *rt, int P, int D, const struct tcp_endpoint *eps, herr *e)
{
    char doc[8192];
    int n = snprintf(doc, sizeof doc, "{\"parallelism\": {\"pipeline\": %d, \"data\": %d}, "
                     "\"timeout_seconds\": 20, \"workers\": [", P, D);
    for (int r = 0; r < P * D; r++)
        n += snprintf(doc + n, sizeof doc - (size_t)n, "%s{\"host\": \"%s\", \"port\": %d}",
                      r ? ", " : "", eps[r].host, eps[r].port);
    snprintf(doc + n, sizeof doc - (size_t)n, "]}");
    cJSON *j = cJSON_Parse(doc);
    if (!j)
        return herr_set(e, "bad test table");
    int rc = plan_doc_from_json(j, "test table", rt, e);
    cJSON_Delete(j);
    return rc;
}


int trainer_test_rank_setup(int MG, long steps, unsigned long long seed, int bf16, uint32_t skips,
                            int P, int D, const struct tcp_endpoint *eps, float *ref_losses,
                            struct gpt_stage **ref, struct plan_doc *rt)
{
    herr e = {0};
    if (trainer_test_reference(MG, steps, seed, bf16, skips, ref_losses, ref, &e) != 0) {
        fprintf(stderr, "reference: %s\n", e.msg);
        return -1;
    }
    if (trainer_test_table(rt, P, D, eps, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        gpt_stage_free(*ref);
        *ref = NULL;
        return -1;
    }
    return 0;
}
