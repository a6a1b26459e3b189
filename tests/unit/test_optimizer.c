/* Learning-rate schedule, clipping helpers and AdamW range/decay handling (the numerics against
 * PyTorch are in test_gpt_reference.c). */
#include <stdlib.h>

#include "optimizer.h"
#include "test.h"

static void test_schedule(void)
{
    struct lr_schedule s = {.max_lr = 1e-3f, .warmup_steps = 10, .total_steps = 110,
                            .min_lr_ratio = 0.1f};
    herr e;
    CHECK_INT("lr.check_ok", lr_schedule_check(&s, &e), 0);
    CHECK_NEAR("lr.warmup_first", lr_at(&s, 0), 1e-4, 1e-6);
    CHECK_NEAR("lr.warmup_last", lr_at(&s, 9), 1e-3, 1e-6);
    CHECK_NEAR("lr.peak", lr_at(&s, 10), 1e-3, 1e-6);
    /* halfway through the cosine: (max + min) / 2 */
    CHECK_NEAR("lr.cosine_mid", lr_at(&s, 60), 0.55e-3, 1e-5);
    CHECK_NEAR("lr.end", lr_at(&s, 110), 1e-4, 1e-6);
    CHECK_NEAR("lr.after_end", lr_at(&s, 500), 1e-4, 1e-6);
    int mono = 1;
    for (long k = 11; k <= 110; k++)
        if (lr_at(&s, k) > lr_at(&s, k - 1) + 1e-12f)
            mono = 0;
    CHECK("lr.decreasing", mono);
    struct lr_schedule nw = {.max_lr = 2e-3f, .warmup_steps = 0, .total_steps = 5,
                             .min_lr_ratio = 0.0f};
    CHECK_NEAR("lr.no_warmup", lr_at(&nw, 0), 2e-3, 1e-6);
    /* linear: a straight line from the peak after the warm-up to the floor at the end */
    struct lr_schedule lin = s;
    lin.shape = LR_LINEAR;
    CHECK_NEAR("lr.linear_peak", lr_at(&lin, 10), 1e-3, 1e-6);
    CHECK_NEAR("lr.linear_quarter", lr_at(&lin, 35), 1e-3 - 0.25 * 0.9e-3, 1e-6);
    CHECK_NEAR("lr.linear_mid", lr_at(&lin, 60), 0.55e-3, 1e-6);
    CHECK_NEAR("lr.linear_end", lr_at(&lin, 110), 1e-4, 1e-6);
    /* warmup-stable-decay: the peak held until the last 20 steps, then a straight line down */
    struct lr_schedule wsd = s;
    wsd.shape = LR_WSD;
    wsd.decay_steps = 20;
    CHECK_INT("lr.wsd_check_ok", lr_schedule_check(&wsd, &e), 0);
    CHECK_NEAR("lr.wsd_warmup", lr_at(&wsd, 4), 0.5e-3, 1e-6);
    CHECK_NEAR("lr.wsd_stable", lr_at(&wsd, 50), 1e-3, 1e-6);
    CHECK_NEAR("lr.wsd_stable_last", lr_at(&wsd, 89), 1e-3, 1e-6);
    CHECK_NEAR("lr.wsd_decay_first", lr_at(&wsd, 90), 1e-3, 1e-6);
    CHECK_NEAR("lr.wsd_decay_mid", lr_at(&wsd, 100), 0.55e-3, 1e-6);
    CHECK_NEAR("lr.wsd_end", lr_at(&wsd, 110), 1e-4, 1e-6);
    struct lr_schedule wsd0 = wsd;
    wsd0.decay_steps = 0; /* no decay: the peak to the end */
    CHECK_NEAR("lr.wsd_no_decay", lr_at(&wsd0, 109), 1e-3, 1e-6);
    wsd0.decay_steps = 101; /* more than the 100 steps after the warm-up */
    CHECK("lr.wsd_decay_too_long", lr_schedule_check(&wsd0, &e) == -1 && strstr(e.msg, "decay steps"));
    struct lr_schedule bad = s;
    bad.min_lr_ratio = 1.5f;
    CHECK("lr.bad_ratio", lr_schedule_check(&bad, &e) == -1 && strstr(e.msg, "ratio"));
    bad = s;
    bad.max_lr = -1.0f;
    CHECK("lr.bad_lr", lr_schedule_check(&bad, &e) == -1 && strstr(e.msg, "learning rate"));
}

static void test_clip(void)
{
    float g[4] = {3.0f, 4.0f, 0.0f, 12.0f};
    CHECK_NEAR("clip.sq_range", grad_sq_norm(g, 0, 2), 25.0, 1e-12);
    /* the global norm is the sum over ranges */
    double sq = grad_sq_norm(g, 0, 2) + grad_sq_norm(g, 2, 4);
    CHECK_NEAR("clip.sq_total", sq, 169.0, 1e-12);
    float sc = grad_clip_scale(sq, 1.0f);
    CHECK_NEAR("clip.scale", sc, 1.0 / 13.0, 1e-5);
    CHECK_NEAR("clip.inside", grad_clip_scale(sq, 20.0f), 1.0, 0);
    CHECK_NEAR("clip.disabled", grad_clip_scale(sq, 0.0f), 1.0, 0);
    grad_scale(g, 0, 4, sc);
    CHECK_NEAR("clip.scaled_norm", sqrt(grad_sq_norm(g, 0, 4)), 1.0, 1e-5);
}

/* Decay follows the tensor table; a range update equals the same slice of a full update. */
static void test_adamw(void)
{
    struct gpt_tensor t[2] = {{.name = "w", .offset = 0, .size = 6, .decay = 1},
                              {.name = "b", .offset = 6, .size = 4, .decay = 0}};
    struct adamw_config o = {0.9f, 0.95f, 1e-8f, 0.5f};
    float p1[10], p2[10], g[10], m1[10] = {0}, v1[10] = {0}, m2[10] = {0}, v2[10] = {0};
    for (int i = 0; i < 10; i++) {
        p1[i] = p2[i] = 1.0f + 0.1f * i;
        g[i] = 0.0f;
    }
    /* zero gradient: only decay moves the parameters */
    adamw_update(&o, t, 2, p1, g, m1, v1, 0, 10, 0.1f, 1, 1.0f);
    CHECK_NEAR("adamw.decay_matrix", p1[0], 1.0 * (1 - 0.1 * 0.5), 1e-6);
    CHECK_NEAR("adamw.no_decay_bias", p1[7], 1.7, 1e-7);
    for (int i = 0; i < 10; i++) {
        p1[i] = p2[i];
        g[i] = (float)(i - 4) * 0.3f;
    }
    memset(m1, 0, sizeof m1);
    memset(v1, 0, sizeof v1);
    for (long step = 1; step <= 3; step++) {
        adamw_update(&o, t, 2, p1, g, m1, v1, 0, 10, 0.01f, step, 0.5f);
        adamw_update(&o, t, 2, p2, g, m2, v2, 0, 4, 0.01f, step, 0.5f);
        adamw_update(&o, t, 2, p2, g, m2 + 4, v2 + 4, 4, 10, 0.01f, step, 0.5f);
    }
    CHECK("adamw.ranges_equal_full", memcmp(p1, p2, sizeof p1) == 0);
    /* first step of Adam moves by about lr * sign(g) (plus decay) */
    float q[1] = {1.0f}, gg[1] = {2.0f}, mm[1] = {0}, vv[1] = {0};
    struct gpt_tensor one = {.name = "b", .offset = 0, .size = 1, .decay = 0};
    adamw_update(&o, &one, 1, q, gg, mm, vv, 0, 1, 0.01f, 1, 1.0f);
    CHECK_NEAR("adamw.first_step", q[0], 0.99, 1e-6);
}

/* The start-up memory probe (what a CPU worker tells the planner its optimizer moves): a rate
 * a memory system can have (its value is the machine's, not asserted), bad arguments refused
 * by name. */
static void test_probe(void)
{
    herr e = {0};
    double g = optimizer_probe_gbps((size_t)1 << 18, 2, &e);
    CHECK("probe: a memory bandwidth between 0.1 GB/s and 100 TB/s", g > 0.1 && g < 1e5);
    if (!(g > 0))
        printf("  %s\n", e.msg);
    CHECK("probe: too few parameters refused",
          optimizer_probe_gbps(1000, 2, &e) < 0 && strstr(e.msg, "1000 parameters must be in"));
    CHECK("probe: no steps refused",
          optimizer_probe_gbps((size_t)1 << 18, 0, &e) < 0 && strstr(e.msg, "0 steps"));
}

int main(void)
{
    test_schedule();
    test_clip();
    test_adamw();
    test_probe();
    TEST_MAIN_END();
}
