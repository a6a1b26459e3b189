/* The CPU engine behind the engine seam (engine.h): the host stage is the engine. */
#include "engine.h"

static int cpu_create(struct engine *en, const struct engine_spec *s, herr *e)
{
    return gpt_stage_create_tp(&en->host, &s->model, s->first, s->last, s->B, s->T, s->slots,
                               s->tp, s->tp_rank, e);
}

static void cpu_destroy(struct engine *en) { gpt_stage_free(en->host); }

static int cpu_init_params(struct engine *en, uint64_t seed, herr *e)
{
    (void)e;
    gpt_stage_init_params(en->host, seed);
    return 0;
}

static int cpu_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                       const float *in_act, const int *targets, float *out_act, float *loss)
{
    return gpt_stage_forward_slice(en->host, slot, t0, t1, tokens, in_act, targets, out_act, loss);
}

static int cpu_backward(struct engine *en, int slot, int t0, int t1, const float *dout,
                        float *din, float loss_scale)
{
    return gpt_stage_backward_slice(en->host, slot, t0, t1, dout, din, loss_scale);
}

static int cpu_zero_grads(struct engine *en, herr *e)
{
    (void)e;
    gpt_stage_zero_grads(en->host);
    return 0;
}

/* backward accumulates into the host buffer itself */
static int cpu_grads_fetch(struct engine *en, herr *e)
{
    (void)en;
    (void)e;
    return 0;
}

/* forward reads the host buffer itself */
static void cpu_params_changed(struct engine *en) { (void)en; }

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
    .grads_fetch = cpu_grads_fetch,
    .params_changed = cpu_params_changed,
    .hooks_changed = cpu_hooks_changed,
    .error = cpu_error,
};
