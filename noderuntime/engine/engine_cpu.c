/* The CPU engine behind the engine seam (engine.h): the host stage is the engine, its memory the
 * host's (or, for tests, the emulated device's: host memory the communicators stage). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"

/* Profiling on the host's clock: the work is done when a call returns. */
struct cpu_prof {
    int on, depth, part;
    double t0, since;          /* begin; the outermost part's start */
    double ms[ENGINE_PARTS];
};

struct cpu_engine {
    double loss_sum; /* the last stage's losses since engine_loss_take */
    struct cpu_prof prof;
};

static void cpu_profile_enter(struct engine *en, enum engine_part part)
{
    struct cpu_prof *p = &((struct cpu_engine *)en->impl)->prof;
    if (!p->on || p->depth++ > 0)
        return;
    p->part = part;
    p->since = clock_mono_s();
}

static void cpu_profile_leave(struct engine *en)
{
    struct cpu_prof *p = &((struct cpu_engine *)en->impl)->prof;
    if (!p->on || p->depth == 0 || --p->depth > 0)
        return;
    p->ms[p->part] += (clock_mono_s() - p->since) * 1e3;
}

static int cpu_profile_begin(struct engine *en, herr *e)
{
    (void)e;
    struct cpu_prof *p = &((struct cpu_engine *)en->impl)->prof;
    memset(p, 0, sizeof *p);
    p->on = 1;
    p->t0 = clock_mono_s();
    return 0;
}

static int cpu_profile_end(struct engine *en, struct engine_profile *out, herr *e)
{
    struct cpu_prof *p = &((struct cpu_engine *)en->impl)->prof;
    if (!p->on)
        return herr_set(e, "engine profile: ended without a begin");
    p->on = 0;
    out->total_ms = (clock_mono_s() - p->t0) * 1e3;
    memcpy(out->ms, p->ms, sizeof out->ms);
    return 0;
}

static int cpu_create(struct engine *en, const struct engine_spec *s, herr *e)
{
    if (s->forward_only && s->tp != 1)
        return herr_set(e, "a forward-only CPU engine has no tensor parallelism");
    if (s->forward_only ? gpt_stage_create_forward_only(&en->host, &s->model, s->first, s->last,
                                                        s->B, s->T, s->slots, e)
                        : gpt_stage_create_tp(&en->host, &s->model, s->first, s->last, s->B,
                                              s->T, s->slots, s->tp, s->tp_rank, e))
        return -1;
    en->impl = calloc(1, sizeof(struct cpu_engine));
    if (!en->impl) {
        gpt_stage_free(en->host);
        en->host = NULL;
        return herr_set(e, "out of memory for the CPU engine");
    }
    en->mem = s->emulate_device ? devmem_emulated() : devmem_host();
    en->params = gpt_stage_params(en->host);
    en->grads = gpt_stage_grads(en->host);
    en->act_dtype = DTYPE_FP32;
    return 0;
}

static void cpu_destroy(struct engine *en)
{
    gpt_stage_free(en->host);
    free(en->impl);
}

static int cpu_init_params(struct engine *en, uint64_t seed, herr *e)
{
    (void)e;
    gpt_stage_init_params(en->host, seed);
    return 0;
}

static int cpu_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                       const void *in_act, const int *targets, void *out_act)
{
    float loss = 0;
    cpu_profile_enter(en, ENGINE_PART_COMPUTE);
    int rc = gpt_stage_forward_slice(en->host, slot, t0, t1, tokens, in_act, targets, out_act,
                                     &loss);
    cpu_profile_leave(en);
    if (rc != 0)
        return -1;
    if (targets)
        ((struct cpu_engine *)en->impl)->loss_sum += loss;
    return 0;
}

static int cpu_backward(struct engine *en, int slot, int t0, int t1, const void *dout, void *din,
                        float loss_scale)
{
    cpu_profile_enter(en, ENGINE_PART_COMPUTE);
    int rc = gpt_stage_backward_slice(en->host, slot, t0, t1, dout, din, loss_scale);
    cpu_profile_leave(en);
    return rc;
}

static int cpu_zero_grads(struct engine *en, herr *e)
{
    (void)e;
    cpu_profile_enter(en, ENGINE_PART_ZEROING);
    gpt_stage_zero_grads(en->host);
    cpu_profile_leave(en);
    return 0;
}

static int cpu_loss_take(struct engine *en, float *sum, herr *e)
{
    (void)e;
    struct cpu_engine *c = en->impl;
    *sum = (float)c->loss_sum;
    c->loss_sum = 0;
    return 0;
}

static int cpu_sq_norm(struct engine *en, const float *base, const size_t *lo, const size_t *hi,
                       int n, double *out, herr *e)
{
    (void)e;
    cpu_profile_enter(en, ENGINE_PART_NORM);
    double s = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = lo[i]; j < hi[i]; j++)
            s += (double)base[j] * base[j];
    *out = s;
    cpu_profile_leave(en);
    return 0;
}

static int cpu_adamw(struct engine *en, const struct adamw_config *o, const struct adamw_span *sp,
                     int n, float lr, long step, float grad_scale, herr *e)
{
    (void)e;
    const struct gpt_tensor *tens;
    int nt = gpt_stage_tensors(en->host, &tens);
    cpu_profile_enter(en, ENGINE_PART_ADAMW);
    for (int i = 0; i < n; i++)
        if (sp[i].hi > sp[i].lo)
            adamw_update_at(o, tens, nt, sp[i].p, sp[i].g, sp[i].m, sp[i].v, sp[i].lo, sp[i].hi,
                            lr, step, grad_scale);
    cpu_profile_leave(en);
    return 0;
}

/* forward reads the parameters themselves */
static void cpu_params_changed(struct engine *en, size_t lo, size_t hi) { (void)en, (void)lo, (void)hi; }

/* the host stage's buffers are the engine's */
static int cpu_params_move(struct engine *en, herr *e)
{
    (void)en, (void)e;
    return 0;
}

/* the stage calls the hooks itself */
static void cpu_hooks_changed(struct engine *en)
{
    gpt_stage_set_forward_hook(en->host, en->fwd_hook, en->fwd_ctx);
    gpt_stage_set_backward_hook(en->host, en->bwd_hook, en->bwd_ctx);
    gpt_stage_set_tp_sum(en->host, en->tp_sum, en->tp_ctx);
}

static const char *cpu_error(const struct engine *en) { return gpt_stage_error(en->host); }

const struct engine_ops engine_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .init_params = cpu_init_params,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .zero_grads = cpu_zero_grads,
    .loss_take = cpu_loss_take,
    .sq_norm = cpu_sq_norm,
    .adamw = cpu_adamw,
    .params_changed = cpu_params_changed,
    .params_upload = cpu_params_move,
    .params_download = cpu_params_move,
    .hooks_changed = cpu_hooks_changed,
    .profile_begin = cpu_profile_begin,
    .profile_end = cpu_profile_end,
    .profile_enter = cpu_profile_enter,
    .profile_leave = cpu_profile_leave,
    .error = cpu_error,
};
